#pragma once
// Element types of tensors: the machines' float formats plus the integer/bool types graphs use
// (shapes, indices, masks).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "isa/numeric.hpp"

namespace tessera {

enum class DType : uint8_t { f32, f64, f16, bf16, cbf16, f8e4m3, f8e5m2, i8, u8, i16, i32, i64, boolean };

std::string_view dtype_name(DType t);                   // "fp32", "bf16", "int64", "bool", ...
std::optional<DType> parse_dtype(std::string_view s);   // accepts the names above
size_t dtype_size(DType t);                              // bytes per element
bool is_float(DType t);
// The float format behind a floating dtype other than f64 (nullopt for f64 and integers).
std::optional<FloatFormat> float_format(DType t);

}  // namespace tessera
