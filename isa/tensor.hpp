#pragma once
// A dense tensor: shape, dtype and contiguous row-major (C order) storage.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "isa/dtype.hpp"

namespace tessera {

using Shape = std::vector<int64_t>;

// Elements of a shape; kCountMax (isa/checked.hpp) when the product does not fit in int64.
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled

  static Tensor from_f32(Shape shape, std::vector<float> values);
  static Tensor from_i64(Shape shape, std::vector<int64_t> values);
  static Tensor scalar_f32(float v) { return from_f32({}, {v}); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return bytes_.size(); }

  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }

  // Typed views; the dtype must match exactly (std::logic_error otherwise: a caller bug).
  template <typename T>
  std::span<T> as();
  template <typename T>
  std::span<const T> as() const;

  // Value conversions through fp32 / int64 for any dtype (floats widen exactly; fp64 rounds).
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  std::vector<int64_t> to_i64() const;
  // Conversion to another dtype; floats round to nearest even. Float -> integer truncates toward
  // zero and saturates to the target's range (NaN -> 0); integer -> integer wraps as in C++.
  Tensor cast(DType to) const;
  // Same data, new shape (numel must match).
  Tensor reshaped(Shape s) const;

  bool operator==(const Tensor& o) const {
    return dtype_ == o.dtype_ && shape_ == o.shape_ && bytes_ == o.bytes_;
  }

 private:
  void check_view(bool ok) const;
  DType dtype_ = DType::f32;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

// Which dtypes a typed view of T may look at. uint16_t/uint8_t view the raw bits of the 16-/8-bit
// float formats (and uint8 itself); the others match one dtype exactly.
template <typename T>
bool view_accepts(DType t);

template <typename T>
std::span<T> Tensor::as() {
  check_view(view_accepts<T>(dtype_));
  return {reinterpret_cast<T*>(bytes_.data()), static_cast<size_t>(numel())};
}
template <typename T>
std::span<const T> Tensor::as() const {
  check_view(view_accepts<T>(dtype_));
  return {reinterpret_cast<const T*>(bytes_.data()), static_cast<size_t>(numel())};
}

}  // namespace tessera

namespace tessera {
// The transpose of a 2-D tensor, as fp32.
Tensor transpose2d(const Tensor& t);

// Seeded random values (mt19937_64; normal(0, scale) or uniform(-scale, scale)), generated in fp32
// and rounded to `dtype`. Deterministic for a given seed with the same standard library.
Tensor random_tensor(DType dtype, Shape shape, uint64_t seed, bool normal, double scale);
}  // namespace tessera
