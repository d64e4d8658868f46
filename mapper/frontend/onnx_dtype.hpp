#pragma once
#include <optional>

#include "isa/dtype.hpp"

namespace tessera::frontend {
// ONNX TensorProto.DataType codes <-> tessera dtypes.
std::optional<DType> dtype_from_onnx(int code);
int onnx_from_dtype(DType t);
const char* onnx_dtype_name(int code);
// ONNX has no code for Cerebras' cbfloat16: tessera's training graphs (mapper/passes/autodiff) cast
// to it with this code outside ONNX's range, which the reference executor's Cast accepts.
inline constexpr int kCastToCbf16 = 1001;
}  // namespace tessera::frontend
