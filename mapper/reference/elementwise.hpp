#pragma once
// Private templates of the elementwise operator files (ops_elementwise.cpp, ops_math.cpp,
// ops_activation.cpp): binary ops with numpy broadcasting, comparisons, unary maps. Floats compute
// in fp64 and are written back in the input dtype; integers compute in int64 (wrapping) and are
// written back in their own dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mapper/reference/ops.hpp"

namespace tessera::reference::detail {

inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// a op b with broadcasting. ff computes floats, fi integers. With same_dtype false the inputs may
// differ in type (Pow's base and exponent); the output has input 0's dtype.
template <class FF, class IF>
std::vector<Tensor> binary_arith(const OpCall& c, FF ff, IF fi, bool same_dtype = true) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 1);
  if (same_dtype) require_same_dtype(c, a, b);
  const Shape out = broadcast_shapes(c, a.shape(), b.shape());
  const auto ma = broadcast_map(a.shape(), out);
  const auto mb = broadcast_map(b.shape(), out);
  const size_t n = ma.size();
  if (is_float(a.dtype())) {
    const auto av = a.to_f64();
    const auto bv = b.to_f64();
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = ff(av[static_cast<size_t>(ma[i])], bv[static_cast<size_t>(mb[i])]);
    return {from_f64(a.dtype(), out, r)};
  }
  const auto av = a.to_i64();
  std::vector<int64_t> r(n);
  if (is_float(b.dtype())) {  // Pow(int, float): compute in fp64, truncate like numpy's astype
    const auto bv = b.to_f64();
    for (size_t i = 0; i < n; ++i) {
      const double v = std::pow(static_cast<double>(av[static_cast<size_t>(ma[i])]), bv[static_cast<size_t>(mb[i])]);
      r[i] = std::isfinite(v) ? static_cast<int64_t>(std::clamp(v, -9.2e18, 9.2e18)) : 0;
    }
  } else {
    const auto bv = b.to_i64();
    for (size_t i = 0; i < n; ++i) r[i] = fi(av[static_cast<size_t>(ma[i])], bv[static_cast<size_t>(mb[i])]);
  }
  return {from_i64_as(a.dtype(), out, r)};
}

// a cmp b with broadcasting -> bool. cmp is called with two doubles or two int64s.
template <class Cmp>
std::vector<Tensor> compare(const OpCall& c, Cmp cmp) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 1);
  require_same_dtype(c, a, b);
  const Shape out = broadcast_shapes(c, a.shape(), b.shape());
  const auto ma = broadcast_map(a.shape(), out);
  const auto mb = broadcast_map(b.shape(), out);
  Tensor r(DType::boolean, out);
  auto rv = r.as<bool>();
  if (is_float(a.dtype())) {
    const auto av = a.to_f64();
    const auto bv = b.to_f64();
    for (size_t i = 0; i < ma.size(); ++i) rv[i] = cmp(av[static_cast<size_t>(ma[i])], bv[static_cast<size_t>(mb[i])]);
  } else {
    const auto av = a.to_i64();
    const auto bv = b.to_i64();
    for (size_t i = 0; i < ma.size(); ++i) rv[i] = cmp(av[static_cast<size_t>(ma[i])], bv[static_cast<size_t>(mb[i])]);
  }
  return {std::move(r)};
}

// Float-only unary op.
template <class F>
std::vector<Tensor> unary_float(const OpCall& c, F f) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  auto v = x.to_f64();
  for (double& e : v) e = f(e);
  return {from_f64(x.dtype(), x.shape(), v)};
}

// Unary op defined for floats and (signed) integers.
template <class F, class I>
std::vector<Tensor> unary_any(const OpCall& c, F f, I fi) {
  const Tensor& x = in(c, 0);
  if (is_float(x.dtype())) return unary_float(c, f);
  auto v = x.to_i64();
  for (int64_t& e : v) e = fi(e);
  return {from_i64_as(x.dtype(), x.shape(), v)};
}

inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace tessera::reference::detail
