#include "mapper/frontend/onnx_dtype.hpp"

namespace tessera::frontend {

namespace {
struct Row {
  int code;
  const char* name;
  std::optional<DType> dtype;
};
// onnx.proto TensorProto.DataType.
const Row kRows[] = {
    {1, "float", DType::f32},     {2, "uint8", DType::u8},       {3, "int8", DType::i8},
    {4, "uint16", std::nullopt},  {5, "int16", DType::i16},      {6, "int32", DType::i32},
    {7, "int64", DType::i64},     {8, "string", std::nullopt},   {9, "bool", DType::boolean},
    {10, "float16", DType::f16},  {11, "double", DType::f64},    {12, "uint32", std::nullopt},
    {13, "uint64", std::nullopt}, {14, "complex64", std::nullopt}, {15, "complex128", std::nullopt},
    {16, "bfloat16", DType::bf16},
};
}  // namespace

std::optional<DType> dtype_from_onnx(int code) {
  for (const auto& r : kRows)
    if (r.code == code) return r.dtype;
  return std::nullopt;
}

int onnx_from_dtype(DType t) {
  for (const auto& r : kRows)
    if (r.dtype && *r.dtype == t) return r.code;
  return 0;
}

const char* onnx_dtype_name(int code) {
  for (const auto& r : kRows)
    if (r.code == code) return r.name;
  return "unknown";
}

}  // namespace tessera::frontend
