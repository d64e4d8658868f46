#pragma once
// From a scenario to a prepared graph and its input tensors.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "isa/npy.hpp"
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

// Whether a .npy of dtype `file` may feed a model input of dtype `want` as it is: the same dtype, or
// fp32 for the dtypes NumPy cannot hold (bf16, cbf16, fp8), which the machine rounds as it places them.
bool file_dtype_fits(DType file, DType want);
// The header of a .npy a scenario names (read_npy_info); its errors are re-raised at `where` (the
// scenario's JSON pointer to the file), with the file's own message and hint.
NpyInfo npy_info_at(const std::string& path, const std::string& where);
// Checks the .npy of /inputs/NAME (`spec`, at JSON pointer `where`) against the model input before
// anything is read: its header and length, its dtype (file_dtype_fits; another dtype only with
// "cast": true, else an error naming both dtypes and the numpy line that converts) and its shape
// (one of `shapes`). Returns the header.
NpyInfo check_input_file(const nlohmann::json& spec, const std::string& where, const std::string& input, DType want,
                         const std::vector<Shape>& shapes);
// Reads the .npy of /inputs/NAME after check_input_file.
Tensor read_input_file(const nlohmann::json& spec, const std::string& where, const std::string& input, DType want,
                       const std::vector<Shape>& shapes);

// Host memory a run will take, in parts ("inputs", "reference executor", "NeuronCore HBM", ...),
// checked against run.host_memory before the run allocates them: an InputError names each part and
// the knob.
struct HostMemory {
  std::vector<std::pair<std::string, double>> parts;
  double total() const;
  void check(const Scenario& s) const;
};

// A graph scenario's data checked before anything big is read or allocated: every input file
// (check_input_file; `only`: the inputs the scenario gives, e.g. not a training step's weights),
// every expected-output file (header, and the shape of the graph output it names), and the host
// memory of the inputs (all steps) and, with `reference`, of the reference executor. Returns the
// host memory so far (a runner adds the machine's and checks again).
HostMemory precheck_graph_data(const Scenario& s, const graph::Graph& g, int64_t steps, bool reference,
                               const std::vector<std::string>* only = nullptr);

}  // namespace tessera::sim
