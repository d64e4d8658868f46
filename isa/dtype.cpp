#include "isa/dtype.hpp"

#include <array>

namespace tessera {

namespace {
struct Row {
  DType t;
  std::string_view name;
  size_t size;
};
constexpr std::array<Row, 13> kRows = {{
    {DType::f32, "fp32", 4},     {DType::f64, "fp64", 8},       {DType::f16, "fp16", 2},
    {DType::bf16, "bf16", 2},    {DType::cbf16, "cbf16", 2},    {DType::f8e4m3, "fp8_e4m3", 1},
    {DType::f8e5m2, "fp8_e5m2", 1}, {DType::i8, "int8", 1},     {DType::u8, "uint8", 1},
    {DType::i16, "int16", 2},    {DType::i32, "int32", 4},      {DType::i64, "int64", 8},
    {DType::boolean, "bool", 1},
}};
}  // namespace

std::string_view dtype_name(DType t) { return kRows[static_cast<size_t>(t)].name; }
size_t dtype_size(DType t) { return kRows[static_cast<size_t>(t)].size; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& r : kRows)
    if (r.name == s) return r.t;
  if (s == "float32") return DType::f32;
  if (s == "float16") return DType::f16;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float64") return DType::f64;
  return std::nullopt;
}

bool is_float(DType t) { return t <= DType::f8e5m2; }

std::optional<FloatFormat> float_format(DType t) {
  switch (t) {
    case DType::f32: return FloatFormat::fp32;
    case DType::f16: return FloatFormat::fp16;
    case DType::bf16: return FloatFormat::bf16;
    case DType::cbf16: return FloatFormat::cbf16;
    case DType::f8e4m3: return FloatFormat::fp8_e4m3;
    case DType::f8e5m2: return FloatFormat::fp8_e5m2;
    default: return std::nullopt;
  }
}

}  // namespace tessera
