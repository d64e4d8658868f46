// Numeric formats (isa/numeric.hpp): exhaustive round trips, fp16 against GCC's _Float16, every
// narrow format against an independent brute-force nearest-even oracle, and bf16 against vectors
// produced by PyTorch (tools/gen_bf16_vectors.py -> tests/data/bf16_vectors.npy).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "isa/npy.hpp"
#include "isa/numeric.hpp"
#include "isa/tensor.hpp"

using namespace tessera;

namespace {

// ---- Independent description of each format, written from the specs (not from format_info) ----

struct Spec {
  FloatFormat f;
  const char* name;
  int bits, ebits, mbits, bias;
  bool has_inf;
  double max_finite;
  uint32_t canonical_nan;  // documented encoding of a positive NaN result; 0 = not documented

  uint32_t emask() const { return (1u << ebits) - 1; }
  uint32_t mmask() const { return (1u << mbits) - 1; }
  uint32_t sign_bit() const { return 1u << (bits - 1); }
  uint32_t inf_enc() const { return emask() << mbits; }
  uint32_t exp_field(uint32_t b) const { return (b >> mbits) & emask(); }
  bool is_nan(uint32_t b) const {
    const uint32_t e = exp_field(b), m = b & mmask();
    return has_inf ? (e == emask() && m != 0) : (e == emask() && m == mmask());
  }
  bool is_inf(uint32_t b) const { return has_inf && exp_field(b) == emask() && (b & mmask()) == 0; }
  // Exact value of a finite encoding.
  double value(uint32_t b) const {
    const uint32_t e = exp_field(b), m = b & mmask();
    const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mbits)
                              : std::ldexp(static_cast<double>((1u << mbits) | m), static_cast<int>(e) - bias - mbits);
    return (b & sign_bit()) ? -mag : mag;
  }
};

const Spec kFp16{FloatFormat::fp16, "fp16", 16, 5, 10, 15, true, 65504.0, 0x7e00};
const Spec kBf16{FloatFormat::bf16, "bf16", 16, 8, 7, 127, true, (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127), 0x7fc0};
const Spec kCbf16{FloatFormat::cbf16, "cbf16", 16, 6, 9, 31, true, (2.0 - std::ldexp(1.0, -9)) * std::ldexp(1.0, 31), 0};
const Spec kE4m3{FloatFormat::fp8_e4m3, "fp8_e4m3", 8, 4, 3, 7, false, 448.0, 0x7f};
const Spec kE5m2{FloatFormat::fp8_e5m2, "fp8_e5m2", 8, 5, 2, 15, true, 57344.0, 0x7f};
const Spec* const kSpecs[] = {&kFp16, &kBf16, &kCbf16, &kE4m3, &kE5m2};

// ---- Reporting: count mismatches, keep the first few for the failure message ----

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

std::string show(float x) {
  char b[80];
  std::snprintf(b, sizeof b, "%.9g (%a, bits 0x%08x)", static_cast<double>(x), static_cast<double>(x), float_bits(x));
  return b;
}

class Mismatches {
 public:
  void add(const std::string& s) {
    if (count_ < 12) text_ += "  " + s + "\n";
    ++count_;
  }
  uint64_t count() const { return count_; }
  std::string report() const { return std::to_string(count_) + " mismatch(es); first ones:\n" + text_; }

 private:
  uint64_t count_ = 0;
  std::string text_;
};

#define CHECK_NO_MISMATCHES(m)    \
  do {                            \
    INFO((m).report());           \
    CHECK((m).count() == 0);      \
  } while (0)

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return float_bits(a) == float_bits(b);
}

// ---- GCC's _Float16 (libgcc soft-float on x86-64 without AVX512-FP16): the fp16 reference ----

uint16_t gcc_fp16_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float gcc_fp16_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

// fp32 value from sign, unbiased exponent field (0..255) and fraction.
float make_f32(uint32_t sign, uint32_t biased_exp, uint32_t frac) {
  return bits_float((sign << 31) | (biased_exp << 23) | (frac & 0x7fffffu));
}

// Random fp32 inputs: a quarter uniform bit patterns (every exponent, NaNs, infinities), the rest
// with an exponent uniformly in [lo, hi] (biased, clamped to 0..254) and a random fraction.
std::vector<float> random_inputs(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  lo = std::max(lo, 0);
  hi = std::min(hi, 254);
  std::uniform_int_distribution<int> ex(lo, hi);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    if (i % 4 == 0) {
      v[i] = bits_float(r);
    } else {
      const uint32_t frac = (i % 4 == 3) ? (r & 0x7fe000u) : r;  // some with short fractions: more near-ties
      v[i] = make_f32(r >> 31, static_cast<uint32_t>(ex(rng)), frac);
    }
  }
  return v;
}

// ---- The brute-force oracle: nearest representable value, ties to the even encoding ----

constexpr uint32_t kAnyNaN = 0xffffffffu;

class Oracle {
 public:
  explicit Oracle(const Spec& s) : s_(s) {
    for (uint32_t b = 0; b < s.sign_bit(); ++b) {  // non-negative encodings
      if (s.is_nan(b) || s.is_inf(b)) continue;
      vals_.push_back(s.value(b));
      encs_.push_back(b);
    }
    // Sort by value (they should already be in order; the order itself is checked in a test).
    std::vector<size_t> idx(vals_.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return vals_[a] < vals_[b]; });
    std::vector<double> v;
    std::vector<uint32_t> e;
    for (size_t i : idx) {
      v.push_back(vals_[i]);
      e.push_back(encs_[i]);
    }
    vals_ = std::move(v);
    encs_ = std::move(e);
    max_enc_ = encs_.back();
    // The next step past max finite, one ulp further, encoded by max_enc+1: inf (even fraction)
    // for IEEE-like formats, the NaN pattern S.1111.111 (odd) for e4m3. Reaching it is overflow.
    const double n = vals_.back() + (vals_.back() - vals_[vals_.size() - 2]);
    vals_.push_back(n);
    encs_.push_back(max_enc_ + 1);
  }

  const std::vector<double>& values() const { return vals_; }  // incl. the virtual step at the end

  uint32_t narrow(float x, bool saturate) const {
    if (std::isnan(x)) return kAnyNaN;
    const uint32_t sign = std::signbit(x) ? s_.sign_bit() : 0;
    const double a = std::fabs(static_cast<double>(x));
    const uint32_t overflow = saturate ? max_enc_ : (s_.has_inf ? s_.inf_enc() : kAnyNaN);
    if (std::isinf(a)) {
      if (s_.has_inf) return sign | s_.inf_enc();
      return saturate ? (sign | max_enc_) : kAnyNaN;
    }
    const size_t last = vals_.size() - 1;
    size_t i = static_cast<size_t>(std::upper_bound(vals_.begin(), vals_.end(), a) - vals_.begin()) - 1;
    if (i >= last) return overflow == kAnyNaN ? kAnyNaN : sign | overflow;
    const double lo = vals_[i], hi = vals_[i + 1];
    const double mid = lo + (hi - lo) / 2;  // exact in double for every format here
    size_t pick;
    if (a < mid) pick = i;
    else if (a > mid) pick = i + 1;
    else pick = (encs_[i] & 1) ? i + 1 : i;
    if (pick == last) return overflow == kAnyNaN ? kAnyNaN : sign | overflow;
    return sign | encs_[pick];
  }

 private:
  const Spec& s_;
  std::vector<double> vals_;
  std::vector<uint32_t> encs_;
  uint32_t max_enc_ = 0;
};

// Oracle inputs: every representable value, every midpoint between neighbours (including the one
// between max finite and the overflow step) and the fp32 values one ulp either side, both signs,
// plus random inputs around the format's range and special values.
std::vector<float> oracle_inputs(const Spec& s, const Oracle& o, uint32_t seed, size_t n_random) {
  std::vector<float> in;
  const auto& v = o.values();
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const double mid = v[i] + (v[i + 1] - v[i]) / 2;
    const float m = static_cast<float>(mid);
    REQUIRE(static_cast<double>(m) == mid);  // every midpoint is an fp32 value: ties get tested exactly
    for (float x : {static_cast<float>(v[i]), m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  // Biased fp32 exponents from well below the smallest subnormal to above the overflow step.
  const int e_lo = 127 + (1 - s.bias - s.mbits) - 4;
  const int e_hi = 127 + static_cast<int>(s.emask()) - s.bias + 2;
  const auto r = random_inputs(n_random, seed, e_lo, e_hi);
  in.insert(in.end(), r.begin(), r.end());
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
    in.push_back(x);
  return in;
}

void check_against_oracle(const Spec& s, uint32_t seed) {
  const Oracle o(s);
  const auto in = oracle_inputs(s, o, seed, 1500000);
  Mismatches plain, sat, array;
  std::vector<uint16_t> out16(in.size());
  std::vector<uint8_t> out8(in.size());
  if (s.bits == 16) narrow_array(in.data(), out16.data(), in.size(), s.f);
  else narrow_array(in.data(), out8.data(), in.size(), s.f);
  for (size_t i = 0; i < in.size(); ++i) {
    const float x = in[i];
    const uint32_t want = o.narrow(x, false);
    const uint32_t got = narrow_bits(x, s.f);
    const bool ok = want == kAnyNaN ? s.is_nan(got) : got == want;
    if (!ok) plain.add(std::string(s.name) + " narrow(" + show(x) + ") = " + hex(got) + ", oracle " + hex(want));
    const uint32_t got_arr = s.bits == 16 ? out16[i] : out8[i];
    if (got_arr != got) array.add(std::string(s.name) + " narrow_array(" + show(x) + ") = " + hex(got_arr) +
                                  ", narrow_bits " + hex(got));
    // Saturation is documented for e4m3 (finite overflow and +-inf clamp to +-448). For the formats
    // with infinities only finite overflow is checked: it clamps to max finite.
    if (s.has_inf && std::isinf(x)) continue;
    const uint32_t want_s = o.narrow(x, true);
    const uint32_t got_s = narrow_bits(x, s.f, true);
    const bool ok_s = want_s == kAnyNaN ? s.is_nan(got_s) : got_s == want_s;
    if (!ok_s) sat.add(std::string(s.name) + " narrow(" + show(x) + ", saturate) = " + hex(got_s) + ", oracle " + hex(want_s));
  }
  INFO(s.name << ": " << in.size() << " inputs");
  CHECK_NO_MISMATCHES(plain);
  CHECK_NO_MISMATCHES(sat);
  CHECK_NO_MISMATCHES(array);
}

}  // namespace

// ------------------------------------------------------------------------------------------------

TEST_CASE("numeric: format table matches the documented layouts", "[numeric]") {
  for (const Spec* s : kSpecs) {
    INFO(s->name);
    const FormatInfo& fi = format_info(s->f);
    CHECK(fi.format == s->f);
    CHECK(fi.name == s->name);
    CHECK(fi.bits == s->bits);
    CHECK(fi.exponent_bits == s->ebits);
    CHECK(fi.mantissa_bits == s->mbits);
    CHECK(fi.bias == s->bias);
    CHECK(fi.has_inf == s->has_inf);
    CHECK(1 + s->ebits + s->mbits == s->bits);
    // Max finite: widened from the largest finite encoding, and what narrowing it gives back.
    const uint32_t max_enc = s->has_inf ? s->inf_enc() - 1 : s->inf_enc() + s->mmask() - 1;
    CHECK(static_cast<double>(widen_bits(max_enc, s->f)) == s->max_finite);
    CHECK(narrow_bits(static_cast<float>(s->max_finite), s->f) == max_enc);
    CHECK(narrow_bits(-static_cast<float>(s->max_finite), s->f) == (s->sign_bit() | max_enc));
  }
  const FormatInfo& f32 = format_info(FloatFormat::fp32);
  CHECK(f32.bits == 32);
  CHECK(f32.exponent_bits == 8);
  CHECK(f32.mantissa_bits == 23);
  CHECK(f32.bias == 127);
  CHECK_THROWS_AS(format_info(static_cast<FloatFormat>(42)), std::logic_error);
}

TEST_CASE("numeric: every bit pattern widens exactly and narrows back to itself", "[numeric]") {
  for (const Spec* sp : kSpecs) {
    const Spec& s = *sp;
    const uint32_t n = 1u << s.bits;
    Mismatches exact, round, sat, array, order;
    std::vector<float> widened(n);
    std::vector<uint16_t> pats16(n), back16(n);
    std::vector<uint8_t> pats8(n), back8(n);
    for (uint32_t b = 0; b < n; ++b) {
      pats16[b] = static_cast<uint16_t>(b);
      pats8[b] = static_cast<uint8_t>(b);
    }
    if (s.bits == 16) widen_array(pats16.data(), widened.data(), n, s.f);
    else widen_array(pats8.data(), widened.data(), n, s.f);
    if (s.bits == 16) narrow_array(widened.data(), back16.data(), n, s.f);
    else narrow_array(widened.data(), back8.data(), n, s.f);

    float prev = -1.0f;
    for (uint32_t b = 0; b < n; ++b) {
      const float w = widen_bits(b, s.f);
      if (!same_float(w, widened[b])) array.add("widen_array[" + hex(b) + "] = " + show(widened[b]) + ", widen_bits " + show(w));
      const uint32_t back_arr = s.bits == 16 ? back16[b] : back8[b];
      if (s.is_nan(b)) {
        if (!std::isnan(w)) exact.add("NaN pattern " + hex(b) + " widens to " + show(w));
        if (!s.is_nan(narrow_bits(w, s.f))) round.add("NaN pattern " + hex(b) + " -> " + hex(narrow_bits(w, s.f)));
        if (!s.is_nan(narrow_bits(w, s.f, true))) sat.add("NaN pattern " + hex(b) + " -> " + hex(narrow_bits(w, s.f, true)));
        if (!s.is_nan(back_arr)) array.add("narrow_array of NaN pattern " + hex(b) + " = " + hex(back_arr));
        continue;
      }
      if (s.is_inf(b)) {
        const float want = (b & s.sign_bit()) ? -INFINITY : INFINITY;
        if (!same_float(w, want)) exact.add("inf pattern " + hex(b) + " widens to " + show(w));
      } else {
        const double want = s.value(b);
        // Exact value, and the sign of zero is kept.
        if (static_cast<double>(w) != want || std::signbit(w) != ((b & s.sign_bit()) != 0))
          exact.add(hex(b) + " widens to " + show(w) + ", expected " + std::to_string(want));
        // Positive encodings in increasing order have strictly increasing values.
        if (!(b & s.sign_bit())) {
          if (!(w > prev)) order.add(hex(b) + " = " + show(w) + " is not above the previous encoding " + show(prev));
          prev = w;
        }
        if (narrow_bits(w, s.f, true) != b) sat.add(hex(b) + " -> " + show(w) + " -> saturate " + hex(narrow_bits(w, s.f, true)));
      }
      const uint32_t r = narrow_bits(w, s.f);
      if (r != b) round.add(hex(b) + " -> " + show(w) + " -> " + hex(r));
      if (back_arr != b) array.add(hex(b) + " -> narrow_array " + hex(back_arr));
    }
    INFO(s.name);
    CHECK_NO_MISMATCHES(exact);
    CHECK_NO_MISMATCHES(round);
    CHECK_NO_MISMATCHES(sat);
    CHECK_NO_MISMATCHES(array);
    CHECK_NO_MISMATCHES(order);
  }
}

TEST_CASE("numeric: fp16 widening matches _Float16 for all 65536 values", "[numeric][fp16]") {
  Mismatches m;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = gcc_fp16_value(static_cast<uint16_t>(b));
    const float got = widen_bits(b, FloatFormat::fp16);
    const float fast = fp16_to_fp32(static_cast<uint16_t>(b));
    if (!same_float(got, want) || !same_float(fast, want))
      m.add(hex(b) + ": widen_bits " + show(got) + ", fp16_to_fp32 " + show(fast) + ", _Float16 " + show(want));
  }
  CHECK_NO_MISMATCHES(m);
}

TEST_CASE("numeric: fp16 narrowing matches _Float16 on 4M random fp32 inputs", "[numeric][fp16]") {
  // Exponents from below half the smallest fp16 subnormal (2^-25) to past the overflow (2^16).
  const auto in = random_inputs(4000000, 0x16f16u, 127 - 28, 127 + 17);
  std::vector<uint16_t> arr(in.size());
  narrow_array(in.data(), arr.data(), in.size(), FloatFormat::fp16);
  Mismatches m;
  uint64_t nans = 0, infs = 0, zeros = 0, subnormals = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float x = in[i];
    const uint16_t want = gcc_fp16_bits(x);
    const uint32_t got = narrow_bits(x, FloatFormat::fp16);
    const uint16_t fast = fp32_to_fp16(x);
    bool ok;
    if (std::isnan(x)) {
      ok = kFp16.is_nan(got) && kFp16.is_nan(fast) && kFp16.is_nan(arr[i]);
      ++nans;
    } else {
      ok = got == want && fast == want && arr[i] == want;
    }
    if (!ok) m.add("x = " + show(x) + ": narrow_bits " + hex(got) + ", fp32_to_fp16 " + hex(fast) + ", narrow_array " +
                   hex(arr[i]) + ", _Float16 " + hex(want));
    const uint32_t e = (want >> 10) & 0x1f;
    if (e == 0x1f && !(want & 0x3ff)) ++infs;
    if ((want & 0x7fff) == 0) ++zeros;
    if (e == 0 && (want & 0x3ff)) ++subnormals;
  }
  CHECK_NO_MISMATCHES(m);
  // The input mix reaches every region of the format.
  CHECK(nans > 1000);
  CHECK(infs > 10000);
  CHECK(zeros > 10000);
  CHECK(subnormals > 10000);
}

TEST_CASE("numeric: fp16 narrowing matches _Float16 at ties and boundaries", "[numeric][fp16]") {
  std::vector<float> in;
  // Every midpoint between adjacent non-negative fp16 values, including 65504..65536 (= 65520), and
  // the fp32 values one ulp either side of it.
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    const double lo = kFp16.value(b);
    const double hi = b + 1 == 0x7c00 ? 65536.0 : kFp16.value(b + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  // Boundaries.
  const float min_sub = std::ldexp(1.0f, -24), min_norm = std::ldexp(1.0f, -14);
  for (float x : {65504.0f, 65520.0f, 65536.0f, 1e6f, min_sub, min_sub / 2, min_sub * 1.5f, min_norm,
                  min_norm - min_sub, std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 0.0f, INFINITY, 1.0f, 1.0f + std::ldexp(1.0f, -11)}) {
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
      in.push_back(y);
      in.push_back(-y);
    }
  }
  Mismatches m;
  for (float x : in) {
    const uint16_t want = gcc_fp16_bits(x);
    const uint32_t got = narrow_bits(x, FloatFormat::fp16);
    if (got != want) m.add("x = " + show(x) + ": narrow_bits " + hex(got) + ", _Float16 " + hex(want));
  }
  CHECK_NO_MISMATCHES(m);

  // The same facts written out, so the test does not rest on _Float16 alone.
  auto h = [](float x) { return narrow_bits(x, FloatFormat::fp16); };
  CHECK(h(65504.0f) == 0x7bff);
  CHECK(h(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(h(65520.0f) == 0x7c00);  // tie between max finite (odd) and 2^16 (inf, even): inf
  CHECK(h(-65520.0f) == 0xfc00);
  CHECK(h(min_sub) == 0x0001);
  CHECK(h(min_sub / 2) == 0x0000);  // tie between 0 (even) and the smallest subnormal
  CHECK(h(-min_sub / 2) == 0x8000);
  CHECK(h(std::nextafter(min_sub / 2, 1.0f)) == 0x0001);
  CHECK(h(min_sub * 1.5f) == 0x0002);  // tie between 1 and 2 (even)
  CHECK(h(min_sub * 2.5f) == 0x0002);
  CHECK(h(min_norm - min_sub) == 0x03ff);
  CHECK(h(min_norm - min_sub / 2) == 0x0400);  // tie: max subnormal is odd, rounds up into normals
  CHECK(h(min_norm) == 0x0400);
  CHECK(h(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(h(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(h(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(h(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(h(-0.0f) == 0x8000);
  CHECK(h(INFINITY) == 0x7c00);
  CHECK(h(-INFINITY) == 0xfc00);
  CHECK(h(1e6f) == 0x7c00);
}

TEST_CASE("numeric: special values and documented NaN encodings", "[numeric]") {
  for (const Spec* sp : kSpecs) {
    const Spec& s = *sp;
    INFO(s.name);
    for (bool sat : {false, true}) {
      for (float nan : {NAN, -NAN, bits_float(0x7f800001u), bits_float(0xffbfffffu)}) {
        const uint32_t r = narrow_bits(nan, s.f, sat);
        INFO("NaN input " << show(nan) << " saturate " << sat << " -> " << hex(r));
        CHECK(s.is_nan(r));
        if (s.canonical_nan) CHECK((r & ~s.sign_bit()) == s.canonical_nan);
        if (s.canonical_nan) CHECK((r & s.sign_bit()) == (std::signbit(nan) ? s.sign_bit() : 0));
      }
    }
    CHECK(narrow_bits(0.0f, s.f) == 0);
    CHECK(narrow_bits(-0.0f, s.f) == s.sign_bit());
    CHECK(narrow_bits(1.0f, s.f) == static_cast<uint32_t>(s.bias) << s.mbits);
    CHECK(narrow_bits(-2.0f, s.f) == (s.sign_bit() | static_cast<uint32_t>(s.bias + 1) << s.mbits));
    const float min_sub = std::ldexp(1.0f, 1 - s.bias - s.mbits);
    CHECK(narrow_bits(min_sub, s.f) == 1);
    CHECK(narrow_bits(min_sub / 2, s.f) == 0);  // tie with zero: even
    CHECK(narrow_bits(-min_sub / 2, s.f) == s.sign_bit());
    CHECK(narrow_bits(std::nextafter(min_sub / 2, 1.0f), s.f) == 1);
    CHECK(narrow_bits(min_sub * 1.5f, s.f) == 2);
    CHECK(widen_bits(1, s.f) == min_sub);
    CHECK(std::signbit(widen_bits(s.sign_bit(), s.f)));
    CHECK(widen_bits(s.sign_bit(), s.f) == 0.0f);
    if (s.has_inf) {
      CHECK(narrow_bits(INFINITY, s.f) == s.inf_enc());
      CHECK(narrow_bits(-INFINITY, s.f) == (s.sign_bit() | s.inf_enc()));
      CHECK(widen_bits(s.inf_enc(), s.f) == INFINITY);
      CHECK(widen_bits(s.sign_bit() | s.inf_enc(), s.f) == -INFINITY);
    }
  }
  // e4m3fn: no infinities; 464 is the tie between 448 (0x7e, even) and the NaN pattern.
  const auto e4 = FloatFormat::fp8_e4m3;
  CHECK(narrow_bits(448.0f, e4) == 0x7e);
  CHECK(narrow_bits(464.0f, e4) == 0x7e);
  CHECK(narrow_bits(std::nextafter(464.0f, INFINITY), e4) == 0x7f);
  CHECK(narrow_bits(-std::nextafter(464.0f, INFINITY), e4) == 0xff);
  CHECK(narrow_bits(480.0f, e4) == 0x7f);
  CHECK(narrow_bits(1e30f, e4) == 0x7f);
  CHECK(narrow_bits(INFINITY, e4) == 0x7f);
  CHECK(narrow_bits(-INFINITY, e4) == 0xff);
  CHECK(narrow_bits(INFINITY, e4, true) == 0x7e);
  CHECK(narrow_bits(-INFINITY, e4, true) == 0xfe);
  CHECK(narrow_bits(1e30f, e4, true) == 0x7e);
  CHECK(narrow_bits(-500.0f, e4, true) == 0xfe);
  CHECK(widen_bits(0x7e, e4) == 448.0f);
  CHECK(std::isnan(widen_bits(0x7f, e4)));
  CHECK(std::isnan(widen_bits(0xff, e4)));
  CHECK(widen_bits(0x78, e4) == 256.0f);  // S.1111.000 is an ordinary number in e4m3fn
  CHECK(widen_bits(0x01, e4) == std::ldexp(1.0f, -9));
  // e5m2: max 57344; 61440 ties to inf (max is odd).
  const auto e5 = FloatFormat::fp8_e5m2;
  CHECK(narrow_bits(57344.0f, e5) == 0x7b);
  CHECK(narrow_bits(std::nextafter(61440.0f, 0.0f), e5) == 0x7b);
  CHECK(narrow_bits(61440.0f, e5) == 0x7c);
  CHECK(narrow_bits(61440.0f, e5, true) == 0x7b);
  CHECK(std::isnan(widen_bits(0x7d, e5)));
  CHECK(widen_bits(0x01, e5) == std::ldexp(1.0f, -16));
  // cbf16: 1-6-9 bias 31.
  const auto cb = FloatFormat::cbf16;
  CHECK(narrow_bits(1.0f, cb) == 0x3e00);
  CHECK(widen_bits(0x7dff, cb) == static_cast<float>((2.0 - std::ldexp(1.0, -9)) * std::ldexp(1.0, 31)));
  CHECK(narrow_bits(std::ldexp(1.0f, 32), cb) == 0x7e00);  // overflow -> inf
  CHECK(widen_bits(0x0001, cb) == std::ldexp(1.0f, -39));
  CHECK(narrow_bits(1.0f + std::ldexp(1.0f, -10), cb) == 0x3e00);      // tie, even
  CHECK(narrow_bits(1.0f + 3 * std::ldexp(1.0f, -10), cb) == 0x3e02);  // tie, odd -> up
  // bf16.
  CHECK(narrow_bits(1.0f, FloatFormat::bf16) == 0x3f80);
  CHECK(narrow_bits(bits_float(0x7f7f8000u), FloatFormat::bf16) == 0x7f80);  // overflow tie -> inf
  CHECK(narrow_bits(bits_float(0x7f7f7fffu), FloatFormat::bf16) == 0x7f7f);
  CHECK(narrow_bits(bits_float(0x7f7f8000u), FloatFormat::bf16, true) == 0x7f7f);
  // fp32 passes through.
  CHECK(narrow_bits(bits_float(0x7f800001u), FloatFormat::fp32) == 0x7f800001u);
  CHECK(widen_bits(0xc0490fdbu, FloatFormat::fp32) == bits_float(0xc0490fdbu));
}

TEST_CASE("numeric: fp16 rounding matches the brute-force oracle", "[numeric][oracle]") {
  check_against_oracle(kFp16, 101);
}

TEST_CASE("numeric: bf16 rounding matches the brute-force oracle", "[numeric][oracle]") {
  check_against_oracle(kBf16, 102);
}

TEST_CASE("numeric: cbf16 rounding matches the brute-force oracle", "[numeric][oracle]") {
  check_against_oracle(kCbf16, 103);
}

TEST_CASE("numeric: fp8_e4m3 rounding matches the brute-force oracle", "[numeric][oracle]") {
  check_against_oracle(kE4m3, 104);
}

TEST_CASE("numeric: fp8_e5m2 rounding matches the brute-force oracle", "[numeric][oracle]") {
  check_against_oracle(kE5m2, 105);
}

TEST_CASE("numeric: fast paths and round_to and fp32 arrays agree with the generic conversions", "[numeric]") {
  const auto in = random_inputs(300000, 7, 0, 254);
  Mismatches m;
  for (float x : in) {
    if (fp32_to_bf16(x) != narrow_bits(x, FloatFormat::bf16)) m.add("fp32_to_bf16 " + show(x));
    // The generic path (taken for bf16 with saturate=true) agrees wherever saturation is moot.
    if (std::isfinite(x) && std::fabs(x) < 3.3e38f && fp32_to_bf16(x) != narrow_bits(x, FloatFormat::bf16, true))
      m.add("bf16 fast vs generic " + show(x));
    if (fp32_to_fp16(x) != narrow_bits(x, FloatFormat::fp16)) m.add("fp32_to_fp16 " + show(x));
    for (const Spec* s : kSpecs) {
      const float r = round_to(x, s->f);
      if (!same_float(r, widen_bits(narrow_bits(x, s->f), s->f))) m.add(std::string("round_to ") + s->name + " " + show(x));
    }
    const uint16_t hb = fp32_to_bf16(x);
    if (!same_float(bf16_to_fp32(hb), bits_float(static_cast<uint32_t>(hb) << 16))) m.add("bf16_to_fp32 " + hex(hb));
    if (float_bits(bits_float(float_bits(x))) != float_bits(x)) m.add("float_bits " + show(x));
  }
  CHECK_NO_MISMATCHES(m);
  std::vector<float> out(in.size(), 1.0f), back(in.size(), 2.0f);
  narrow_array(in.data(), out.data(), in.size(), FloatFormat::fp32);
  widen_array(out.data(), back.data(), in.size(), FloatFormat::fp32);
  CHECK(std::memcmp(back.data(), in.data(), in.size() * 4) == 0);
  narrow_array(in.data(), out.data(), 0, FloatFormat::fp16);  // n = 0 is fine
  CHECK(round_to(1.0f + std::ldexp(1.0f, -9), FloatFormat::bf16) == 1.0f);
  CHECK(round_to(0.1f, FloatFormat::fp16) == gcc_fp16_value(gcc_fp16_bits(0.1f)));
}

TEST_CASE("numeric: bf16 matches PyTorch vectors", "[numeric][bf16]") {
  // tools/gen_bf16_vectors.py: (N, 2) int32, columns fp32 bits and torch's bf16 bits.
  const Tensor t = read_npy(TESSERA_SOURCE_DIR "/tests/data/bf16_vectors.npy");
  REQUIRE(t.dtype() == DType::i32);
  REQUIRE(t.rank() == 2);
  REQUIRE(t.shape()[1] == 2);
  REQUIRE(t.shape()[0] >= 20000);
  const auto v = t.as<int32_t>();
  Mismatches m;
  int64_t nan_inputs = 0, ties = 0, subnormal_inputs = 0, overflows = 0;
  for (int64_t i = 0; i < t.shape()[0]; ++i) {
    const uint32_t xb = static_cast<uint32_t>(v[static_cast<size_t>(2 * i)]);
    const uint32_t want = static_cast<uint32_t>(v[static_cast<size_t>(2 * i + 1)]);
    REQUIRE(want <= 0xffffu);
    const float x = bits_float(xb);
    const uint32_t got = fp32_to_bf16(x);
    const uint32_t got_generic = narrow_bits(x, FloatFormat::bf16);
    if (std::isnan(x)) {
      ++nan_inputs;
      if (!kBf16.is_nan(want)) m.add("torch gives non-NaN " + hex(want) + " for NaN " + hex(xb));
      if (!kBf16.is_nan(got) || !kBf16.is_nan(got_generic)) m.add("NaN " + hex(xb) + " -> " + hex(got));
      continue;
    }
    if ((xb & 0xffffu) == 0x8000u) ++ties;
    if ((xb & 0x7f800000u) == 0 && (xb & 0x7fffffu)) ++subnormal_inputs;
    if (std::isfinite(x) && kBf16.is_inf(want)) ++overflows;
    if (got != want || got_generic != want)
      m.add("x = " + show(x) + ": fp32_to_bf16 " + hex(got) + ", narrow_bits " + hex(got_generic) + ", torch " + hex(want));
  }
  INFO(t.shape()[0] << " vectors");
  CHECK_NO_MISMATCHES(m);
  // The file holds the cases it was generated for.
  CHECK(nan_inputs > 10);
  CHECK(ties > 1000);
  CHECK(subnormal_inputs > 1000);
  CHECK(overflows > 100);
}
