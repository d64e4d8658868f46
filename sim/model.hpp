#pragma once
// From a scenario to a prepared graph and its input tensors.
#include <map>
#include <string>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"
#include "sim/scenario.hpp"

namespace tessera::sim {

// Loads /model (ONNX file or inline graph) and runs the graph passes. Throws InputError when the
// scenario has no model.
graph::Graph load_model(const Scenario& s);

// Builds every graph input from /inputs (.npy files or seeded random values). Unknown names, missing
// inputs and shape mismatches are reported together, with JSON pointers.
std::map<std::string, Tensor> load_inputs(const Scenario& s, const graph::Graph& g);

// Checks that /expect/outputs names graph outputs.
void check_expect_names(const Scenario& s, const graph::Graph& g);

}  // namespace tessera::sim
