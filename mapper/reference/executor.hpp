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

// Host memory execute() will take at its peak, in bytes (a double: no overflow), from the value
// shapes alone: the graph inputs as given, the live intermediates node by node (freed at their last
// use, as execute() does) and the fp64 working copies of the accumulating kernels (MatMul, Gemm,
// Conv, ConvTranspose sum in fp64). Constants already in the graph are not counted.
double peak_bytes(const graph::Graph& g);

}  // namespace tessera::reference
