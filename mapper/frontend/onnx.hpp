#pragma once
// ONNX frontend: ModelProto (libonnx/protobuf) -> graph IR. Opsets 1-18 of the default domain are
// accepted; the ops must be in the reference executor's set.
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"

namespace onnx {
class TensorProto;
}

namespace tessera::frontend {

// Throws InputError for an unreadable or truncated file, external data, an op outside the supported
// set (naming the node, op and opset), dynamic dimensions, or unsupported dtypes.
graph::Graph load_onnx(const std::string& path);
graph::Graph load_onnx_bytes(const std::string& bytes, const std::string& name_for_errors);

// The op types a model file uses, as "op" for the default domain and "domain:op" otherwise.
// Throws InputError when the file is not an ONNX model.
std::vector<std::string> model_op_types(const std::string& path);

// A serialised onnx::TensorProto (the node tests' input_N.pb/output_N.pb files) -> Tensor.
Tensor load_tensor_pb(const std::string& path, std::string* name = nullptr);
Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& where);

}  // namespace tessera::frontend
