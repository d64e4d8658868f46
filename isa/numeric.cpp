#include "isa/numeric.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

namespace tessera {

namespace {

// Widths and biases: IEEE 754-2008 (fp16), Google/Intel bfloat16, Cerebras cbfloat16
// (shared/reference/wafer.md "Numeric formats"), OCP OFP8 v1.0 (e4m3fn, e5m2).
constexpr std::array<FormatInfo, 6> kInfos = {{
    {FloatFormat::fp32, "fp32", 32, 8, 23, 127, true},
    {FloatFormat::fp16, "fp16", 16, 5, 10, 15, true},
    {FloatFormat::bf16, "bf16", 16, 8, 7, 127, true},
    {FloatFormat::cbf16, "cbf16", 16, 6, 9, 31, true},
    {FloatFormat::fp8_e4m3, "fp8_e4m3", 8, 4, 3, 7, false},
    {FloatFormat::fp8_e5m2, "fp8_e5m2", 8, 5, 2, 15, true},
}};

struct Encodings {
  uint32_t exp_all_ones, inf, nan, max_finite, mant_mask;
};

Encodings encodings(const FormatInfo& fi) {
  Encodings e{};
  const int M = fi.mantissa_bits;
  e.exp_all_ones = (1u << fi.exponent_bits) - 1;
  e.mant_mask = (1u << M) - 1;
  e.inf = e.exp_all_ones << M;
  if (fi.has_inf) {
    // 16-bit formats: quiet NaN, top fraction bit set (0x7e00, 0x7fc0). fp8 e5m2: all fraction
    // bits set (0x7f), as documented in numeric.hpp and as PyTorch's float8_e5m2 does.
    e.nan = e.inf | (fi.bits == 8 ? e.mant_mask : (1u << (M - 1)));
    e.max_finite = e.inf - 1;
  } else {
    e.nan = e.inf | e.mant_mask;      // e4m3fn: S.1111.111 is the only NaN
    e.max_finite = e.nan - 1;
  }
  return e;
}

uint32_t narrow_generic(float x, const FormatInfo& fi, bool saturate) {
  const uint32_t b = float_bits(x);
  const uint32_t sign = (b >> 31) << (fi.bits - 1);
  const uint32_t absb = b & 0x7fffffffu;
  const Encodings enc = encodings(fi);
  if (absb > 0x7f800000u) return sign | enc.nan;
  if (absb == 0x7f800000u) {
    if (fi.has_inf) return sign | enc.inf;
    return sign | (saturate ? enc.max_finite : enc.nan);
  }
  if (absb == 0) return sign;

  const int M = fi.mantissa_bits;
  int exp = static_cast<int>(absb >> 23);
  uint64_t sig = absb & 0x7fffffu;
  if (exp == 0) {
    exp = -126;  // fp32 subnormal: normalise so that bit 23 is the leading one
    while (!(sig & 0x800000u)) {
      sig <<= 1;
      --exp;
    }
  } else {
    exp -= 127;
    sig |= 0x800000u;
  }
  // value = sig * 2^(exp-23). The target's quantum near this value is 2^(texp-M), where texp is
  // the exponent clamped to the smallest normal exponent (subnormals share its quantum).
  const int emin = 1 - fi.bias;
  const int texp = exp > emin ? exp : emin;
  const int shift = 23 + texp - M - exp;  // >= 23-M >= 13, so the remainder logic below holds
  uint64_t q = 0;
  if (shift < 63) {
    q = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // q is in [2^M, 2^(M+1)] for normals (2^(M+1) after a rounding carry) and below 2^M for
  // subnormals; this one expression encodes both, and the carry bumps the exponent field.
  const uint64_t e = (static_cast<uint64_t>(texp + fi.bias) << M) + q - (uint64_t{1} << M);
  if (e > enc.max_finite) {
    if (saturate) return sign | enc.max_finite;
    return sign | (fi.has_inf ? enc.inf : enc.nan);
  }
  return sign | static_cast<uint32_t>(e);
}

float widen_generic(uint32_t bits, const FormatInfo& fi) {
  const Encodings enc = encodings(fi);
  const int M = fi.mantissa_bits;
  const bool neg = (bits >> (fi.bits - 1)) & 1;
  const uint32_t e = (bits >> M) & enc.exp_all_ones;
  const uint32_t m = bits & enc.mant_mask;
  float v;
  if (fi.has_inf && e == enc.exp_all_ones) {
    v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (!fi.has_inf && e == enc.exp_all_ones && m == enc.mant_mask) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - fi.bias - M);
  } else {
    v = std::ldexp(static_cast<float>(m | (1u << M)), static_cast<int>(e) - fi.bias - M);
  }
  return neg ? -v : v;
}

// Widening tables for the 8- and 16-bit formats: 64K floats each, built on first use.
const float* widen_table(FloatFormat f) {
  static std::array<std::unique_ptr<float[]>, kInfos.size()> tables = [] {
    std::array<std::unique_ptr<float[]>, kInfos.size()> t;
    for (const auto& fi : kInfos) {
      if (fi.bits == 32) continue;
      const size_t n = size_t{1} << fi.bits;
      auto tab = std::make_unique<float[]>(n);
      for (size_t i = 0; i < n; ++i) tab[i] = widen_generic(static_cast<uint32_t>(i), fi);
      t[static_cast<size_t>(fi.format)] = std::move(tab);
    }
    return t;
  }();
  return tables[static_cast<size_t>(f)].get();
}

}  // namespace

uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

const FormatInfo& format_info(FloatFormat f) {
  const auto i = static_cast<size_t>(f);
  if (i >= kInfos.size()) throw std::logic_error("format_info: unknown FloatFormat");
  return kInfos[i];
}

uint32_t narrow_bits(float x, FloatFormat f, bool saturate) {
  if (f == FloatFormat::fp32) return float_bits(x);
  if (f == FloatFormat::bf16 && !saturate) return fp32_to_bf16(x);
  return narrow_generic(x, format_info(f), saturate);
}

float widen_bits(uint32_t bits, FloatFormat f) {
  if (f == FloatFormat::fp32) return bits_float(bits);
  if (f == FloatFormat::bf16) return bf16_to_fp32(static_cast<uint16_t>(bits));
  const auto& fi = format_info(f);
  return widen_table(f)[bits & ((1u << fi.bits) - 1)];
}

uint16_t fp32_to_fp16(float x) {
  return static_cast<uint16_t>(narrow_generic(x, kInfos[1], false));
}

float fp16_to_fp32(uint16_t h) { return widen_table(FloatFormat::fp16)[h]; }

uint16_t fp32_to_bf16(float x) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7fc0u);
  // Round to nearest even on the dropped 16 bits; a carry into the exponent is the right result,
  // including overflow to infinity.
  const uint32_t rounding = 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding) >> 16);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

void narrow_array(const float* src, void* dst, size_t n, FloatFormat f) {
  switch (format_info(f).bits) {
    case 32:
      if (n > 0) std::memcpy(dst, src, n * 4);  // an empty tensor may have no buffer
      return;
    case 16: {
      auto* d = static_cast<uint16_t*>(dst);
      if (f == FloatFormat::bf16) {
        for (size_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      } else {
        const auto& fi = format_info(f);
        for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(narrow_generic(src[i], fi, false));
      }
      return;
    }
    default: {
      auto* d = static_cast<uint8_t*>(dst);
      const auto& fi = format_info(f);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(narrow_generic(src[i], fi, false));
      return;
    }
  }
}

void widen_array(const void* src, float* dst, size_t n, FloatFormat f) {
  switch (format_info(f).bits) {
    case 32:
      if (n > 0) std::memcpy(dst, src, n * 4);  // an empty tensor may have no buffer
      return;
    case 16: {
      const auto* s = static_cast<const uint16_t*>(src);
      if (f == FloatFormat::bf16) {
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      } else {
        const float* t = widen_table(f);
        for (size_t i = 0; i < n; ++i) dst[i] = t[s[i]];
      }
      return;
    }
    default: {
      const auto* s = static_cast<const uint8_t*>(src);
      const float* t = widen_table(f);
      for (size_t i = 0; i < n; ++i) dst[i] = t[s[i]];
      return;
    }
  }
}

}  // namespace tessera
