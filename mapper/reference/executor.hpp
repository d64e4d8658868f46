#pragma once
// The reference executor: interprets a prepared graph node by node on the CPU.
#include <functional>
#include <map>
#include <string>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"

namespace tessera::reference {

// `inputs` must give every graph input with its declared shape (dtype is cast when it differs
// between float types). Returns the graph outputs by name. `on_node(done, total)` reports progress.
std::map<std::string, Tensor> execute(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                                      const std::function<void(size_t, size_t)>& on_node = {});

}  // namespace tessera::reference
