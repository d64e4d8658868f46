#include "isa/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "isa/checked.hpp"
#include "isa/error.hpp"
#include "isa/interrupt.hpp"

namespace tessera {

int64_t shape_numel(const Shape& s) {
  for (int64_t d : s)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : s) n = sat_mul(n, d);  // kCountMax past int64: never a wrapped small count
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

template <> bool view_accepts<float>(DType t) { return t == DType::f32; }
template <> bool view_accepts<double>(DType t) { return t == DType::f64; }
template <> bool view_accepts<int64_t>(DType t) { return t == DType::i64; }
template <> bool view_accepts<int32_t>(DType t) { return t == DType::i32; }
template <> bool view_accepts<int16_t>(DType t) { return t == DType::i16; }
template <> bool view_accepts<int8_t>(DType t) { return t == DType::i8; }
template <> bool view_accepts<bool>(DType t) { return t == DType::boolean; }
template <> bool view_accepts<uint16_t>(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::cbf16;
}
template <> bool view_accepts<uint8_t>(DType t) {
  return t == DType::u8 || t == DType::f8e4m3 || t == DType::f8e5m2;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_)
    if (d < 0) throw std::logic_error("Tensor: negative dimension in " + shape_str(shape_));
  const int64_t bytes = sat_mul(numel(), static_cast<int64_t>(dtype_size(dtype_)));
  if (bytes == kCountMax) throw std::bad_alloc();  // more than any machine has; the CLI says which phase
  bytes_.assign(static_cast<size_t>(bytes), std::byte{0});
}

Tensor Tensor::from_f32(Shape shape, std::vector<float> values) {
  Tensor t(DType::f32, std::move(shape));
  if (values.size() != static_cast<size_t>(t.numel()))
    throw std::logic_error("Tensor::from_f32: " + std::to_string(values.size()) + " values for shape " +
                           shape_str(t.shape_));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_i64(Shape shape, std::vector<int64_t> values) {
  Tensor t(DType::i64, std::move(shape));
  if (values.size() != static_cast<size_t>(t.numel()))
    throw std::logic_error("Tensor::from_i64: value count does not match shape " + shape_str(t.shape_));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * 8);
  return t;
}

void Tensor::check_view(bool ok) const {
  if (!ok) throw std::logic_error(std::string("Tensor: typed view does not match dtype ") +
                                  std::string(dtype_name(dtype_)));
}

namespace {
template <typename T, typename Src>
T read_as(const std::byte* p, size_t i) {
  Src v;
  std::memcpy(&v, p + i * sizeof(Src), sizeof(Src));
  return static_cast<T>(v);
}

// Reads element i of any dtype as T (floats widened exactly to fp32/fp64 first).
template <typename T>
T element(DType t, const std::byte* p, size_t i) {
  switch (t) {
    case DType::f32: return read_as<T, float>(p, i);
    case DType::f64: return read_as<T, double>(p, i);
    case DType::f16:
    case DType::bf16:
    case DType::cbf16:
      return static_cast<T>(widen_bits(read_as<uint16_t, uint16_t>(p, i), *float_format(t)));
    case DType::f8e4m3:
    case DType::f8e5m2:
      return static_cast<T>(widen_bits(read_as<uint8_t, uint8_t>(p, i), *float_format(t)));
    case DType::i8: return read_as<T, int8_t>(p, i);
    case DType::u8: return read_as<T, uint8_t>(p, i);
    case DType::i16: return read_as<T, int16_t>(p, i);
    case DType::i32: return read_as<T, int32_t>(p, i);
    case DType::i64: return read_as<T, int64_t>(p, i);
    case DType::boolean: return static_cast<T>(read_as<uint8_t, uint8_t>(p, i) != 0);
  }
  throw std::logic_error("Tensor: unknown dtype");
}

template <typename T>
void store(std::byte* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Saturating float -> integer conversion (NaN -> 0), so a cast never hits undefined behaviour.
template <typename I>
I to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}
}  // namespace

std::vector<float> Tensor::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (auto f = float_format(dtype_)) {
    widen_array(data(), out.data(), out.size(), *f);
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = element<float>(dtype_, data(), i);
  return out;
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if ((i & 0xfffff) == 0) poll_interrupt();  // big tensors convert for a second or more
    out[i] = element<double>(dtype_, data(), i);
  }
  return out;
}

std::vector<int64_t> Tensor::to_i64() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  if (is_float(dtype_)) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_int<int64_t>(element<double>(dtype_, data(), i));
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = element<int64_t>(dtype_, data(), i);
  }
  return out;
}

Tensor Tensor::cast(DType to) const {
  Tensor r(to, shape_);
  const size_t n = static_cast<size_t>(numel());
  if (to == dtype_) return *this;
  if (auto f = float_format(to)) {
    // Float sources widen exactly to fp64; narrow formats are then reached through fp32. fp64 ->
    // fp32 -> fp16 can double-round; graphs that need better cast fp64 -> fp32 explicitly.
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      if ((i & 0xfffff) == 0) poll_interrupt();
      v[i] = static_cast<float>(element<double>(dtype_, data(), i));
    }
    narrow_array(v.data(), r.data(), n, *f);
    return r;
  }
  std::byte* p = r.data();
  const bool from_float = is_float(dtype_);
  for (size_t i = 0; i < n; ++i) {
    if ((i & 0xfffff) == 0) poll_interrupt();
    const double v = element<double>(dtype_, data(), i);
    const int64_t iv = from_float ? 0 : element<int64_t>(dtype_, data(), i);
    // Floats saturate to the target integer's range (NaN -> 0); integers convert as C++ does.
    auto conv = [&](auto zero) {
      using I = decltype(zero);
      return from_float ? to_int<I>(v) : static_cast<I>(iv);
    };
    switch (to) {
      case DType::f64: store<double>(p, i, v); break;
      case DType::i8: store<int8_t>(p, i, conv(int8_t{0})); break;
      case DType::u8: store<uint8_t>(p, i, conv(uint8_t{0})); break;
      case DType::i16: store<int16_t>(p, i, conv(int16_t{0})); break;
      case DType::i32: store<int32_t>(p, i, conv(int32_t{0})); break;
      case DType::i64: store<int64_t>(p, i, conv(int64_t{0})); break;
      case DType::boolean: store<uint8_t>(p, i, v != 0.0 ? 1 : 0); break;
      default: throw std::logic_error("Tensor::cast: unhandled dtype");
    }
  }
  return r;
}

Tensor Tensor::reshaped(Shape s) const {
  if (shape_numel(s) != numel())
    throw std::logic_error("Tensor::reshaped: " + shape_str(shape_) + " -> " + shape_str(s));
  Tensor r = *this;
  r.shape_ = std::move(s);
  return r;
}

}  // namespace tessera

#include <random>

namespace tessera {
Tensor random_tensor(DType dtype, Shape shape, uint64_t seed, bool normal, double scale) {
  std::mt19937_64 rng(seed);
  Tensor t(DType::f32, std::move(shape));  // (drawn into its storage: no second copy of a large tensor)
  const std::span<float> vals = t.as<float>();
  std::normal_distribution<double> nd(0.0, scale);
  std::uniform_real_distribution<double> ud(-scale, scale);
  for (size_t i = 0; i < vals.size(); ++i) {
    if ((i & 0xfffff) == 0) poll_interrupt();  // ~10 ms of draws between polls
    vals[i] = static_cast<float>(normal ? nd(rng) : ud(rng));
  }
  return dtype == DType::f32 ? t : t.cast(dtype);
}
}  // namespace tessera

namespace tessera {
Tensor transpose2d(const Tensor& t) {
  if (t.rank() != 2) throw std::logic_error("transpose2d: rank " + std::to_string(t.rank()));
  const int64_t r = t.shape()[0], c = t.shape()[1];
  const auto v = t.to_f32();
  std::vector<float> o(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) o[static_cast<size_t>(j * r + i)] = v[static_cast<size_t>(i * c + j)];
  return Tensor::from_f32({c, r}, std::move(o));
}
}  // namespace tessera
