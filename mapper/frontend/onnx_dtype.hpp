#pragma once
#include <optional>

#include "isa/dtype.hpp"

namespace tessera::frontend {
// ONNX TensorProto.DataType codes <-> tessera dtypes.
std::optional<DType> dtype_from_onnx(int code);
int onnx_from_dtype(DType t);
const char* onnx_dtype_name(int code);
}  // namespace tessera::frontend
