#pragma once
// Pieces of the NeuronCore engine (run_neuroncore.cpp) shared with training on the NeuronCore
// (train_neuroncore.cpp).
#include <nlohmann/json.hpp>

#include "isa/tensor.hpp"
#include "mapper/neuroncore/compile.hpp"
#include "models/neuroncore/core.hpp"
#include "sim/scenario.hpp"

namespace tessera::sim {
// The scenario's /mapping and /precision as compiler options.
neuroncore::MappingOptions nc_mapping_options(const Scenario& s);
// sc_start in slices until nothing is pending, throwing Interrupted on SIGINT between slices;
// `predicted_s` (0: none) for the heartbeat of long runs (sim/console.hpp), timed from the call.
void run_systemc_sliced(double predicted_s = 0);
// Host-side placement of a graph value in its HBM tensor (the program's layout and dtype), and
// reading one back as fp32 in the value's shape.
// `b` says where each element of the value sits in the tensor (a layout of the compiler's choosing).
void nc_write_value(neuroncore::NeuronCore& core, const neuroncore::HbmTensor& t, const Tensor& value, const neuroncore::IoBinding& b);
Tensor nc_read_value(neuroncore::NeuronCore& core, const neuroncore::HbmTensor& t, const neuroncore::IoBinding& b, const Shape& shape);
// A binding of a whole HBM tensor in row-major order (hand-written programs).
neuroncore::IoBinding nc_contiguous_binding(const std::string& name, const neuroncore::HbmTensor& t);
// The per-kernel table of the run just finished: predicted (the estimator) against simulated (a
// kernel's span: from the previous kernel's end to its own last instruction's), on the console and
// in report["kernels"].
void nc_kernel_table(const neuroncore::Compiled& cp, const neuroncore::Program& prog, const neuroncore::NeuronCore& core, nlohmann::json& report);
}  // namespace tessera::sim
