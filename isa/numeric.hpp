#pragma once
// Numeric formats the machines compute in, with exact conversions.
//
// Narrowing from fp32 rounds to nearest, ties to even, with correct subnormals. Widening to fp32
// is exact for every format (each one's range and precision fit inside fp32).
//
// Per-format choices (docs/numerics.md has the table):
//   fp16   IEEE binary16 (1-5-10, bias 15). Overflow -> +-inf; NaN -> quiet NaN (0x7e00|sign).
//   bf16   1-8-7, bias 127 (fp32's top half). Overflow -> +-inf; NaN -> quiet NaN (0x7fc0|sign),
//          as PyTorch does.
//   cbf16  Cerebras cbfloat16: 1-6-9, bias 31, with denormals (shared/reference/wafer.md).
//          Cerebras does not publish its inf/NaN encoding; tessera reserves the all-ones exponent
//          for inf/NaN as IEEE does, so max finite is (2-2^-9)*2^31. Overflow -> +-inf.
//   fp8 e4m3 (OCP "fn" variant, 1-4-3, bias 7): no infinities; S.1111.111 is NaN; max finite 448.
//          Out-of-range finite values and +-inf -> NaN (non-saturating, like PyTorch's
//          float8_e4m3fn and ml_dtypes). `saturate=true` clamps to +-448 instead.
//   fp8 e5m2 (1-5-2, bias 15): IEEE-like with inf/NaN. Overflow -> +-inf; NaN -> 0x7f|sign.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

enum class FloatFormat : uint8_t { fp32, fp16, bf16, cbf16, fp8_e4m3, fp8_e5m2 };

struct FormatInfo {
  FloatFormat format;
  std::string_view name;
  int bits;            // storage width
  int exponent_bits;
  int mantissa_bits;   // explicit fraction bits
  int bias;
  bool has_inf;        // false: the all-ones exponent is ordinary except the NaN pattern
};

const FormatInfo& format_info(FloatFormat f);

// fp32 -> format bits (in the low `bits` of the result), round-to-nearest-even.
uint32_t narrow_bits(float x, FloatFormat f, bool saturate = false);
// format bits -> fp32, exact.
float widen_bits(uint32_t bits, FloatFormat f);
// Round an fp32 value to the nearest value representable in f (narrow then widen).
inline float round_to(float x, FloatFormat f) { return widen_bits(narrow_bits(x, f), f); }

// Fast paths for the formats on hot paths.
uint16_t fp32_to_fp16(float x);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float x);
float bf16_to_fp32(uint16_t h);

// Array conversions (used by tensors and, later, the machines' memory models).
void narrow_array(const float* src, void* dst, size_t n, FloatFormat f);
void widen_array(const void* src, float* dst, size_t n, FloatFormat f);

// Bit helpers.
uint32_t float_bits(float x);
float bits_float(uint32_t b);

}  // namespace tessera
