#pragma once
// The reference executor's operators: plain fp32 arithmetic (fp64 accumulation in reductions,
// matmul and convolution), numpy-style broadcasting, ONNX semantics per opset. Independent of every
// hardware model: it is the oracle that simulated outputs are checked against.
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/attributes.hpp"

namespace tessera::reference {

struct OpCall {
  std::string op;                      // ONNX op_type, e.g. "Conv"
  std::string node;                    // node name, for errors
  int opset = 17;                      // ai.onnx opset of the model
  const graph::Attributes* attrs = nullptr;
  std::vector<const Tensor*> inputs;   // nullptr = optional input not given
  size_t num_outputs = 1;
};

// Runs one op. Throws InputError (naming node, op and opset) for an unsupported op, attribute or
// dtype, or for inputs whose shapes do not fit (naming both shapes).
std::vector<Tensor> run_op(const OpCall& call);

// Whether run_op implements this op_type (at any opset).
bool supports_op(const std::string& op);
std::vector<std::string> supported_ops();

}  // namespace tessera::reference
