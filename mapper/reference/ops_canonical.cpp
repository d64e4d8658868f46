// Ops of tessera's canonical graph that ONNX opset 17 does not define (mapper/passes/canonicalize.hpp):
// Swish (ONNX opset 24: x * sigmoid(alpha x)) and RMSNormalization (ONNX opset 23: x / sqrt(mean(x^2
// over axes [axis, rank)) + epsilon) * scale). fp64 inside, written in the input's dtype.
#include <cmath>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

std::vector<Tensor> op_swish(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const double alpha = attrs(c).get_float("alpha", 1.0);
  auto v = x.to_f64();
  for (double& e : v) e = e / (1.0 + std::exp(-alpha * e));
  return {from_f64(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_rms_norm(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& scale = in(c, 1);
  require_float(c, x, "input X");
  const int64_t r = x.rank();
  if (r == 0) fail(c, "input X must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", -1), r);
  const double eps = attrs(c).get_float("epsilon", 1e-5);
  const bool after = attrs(c).get_int("eps_after_sqrt", 0) != 0;  // tessera's: x / (sqrt(mean(x^2)) + eps)
  int64_t outer = 1, n = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : n) *= x.shape()[static_cast<size_t>(i)];
  const Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  if (!broadcastable_to(scale.shape(), norm_shape))
    fail(c, "scale " + shape_str(scale.shape()) + " does not broadcast to the normalized shape " + shape_str(norm_shape));
  const auto smap = broadcast_map(scale.shape(), norm_shape);
  const auto sv = scale.to_f64();
  auto v = x.to_f64();
  for (int64_t o = 0; o < outer; ++o) {
    double* row = v.data() + o * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += row[i] * row[i];
    const double inv = after ? 1.0 / (std::sqrt(ss / static_cast<double>(n)) + eps) : 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) row[i] = row[i] * inv * sv[static_cast<size_t>(smap[static_cast<size_t>(i)])];
  }
  return {from_f64(x.dtype(), x.shape(), v)};
}

}  // namespace

std::vector<OpEntry> canonical_ops() {
  return {
      {"Swish", op_swish},
      {"RMSNormalization", op_rms_norm},
  };
}

}  // namespace tessera::reference
