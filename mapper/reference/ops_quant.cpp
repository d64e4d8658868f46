// Linear quantisation: QuantizeLinear, DequantizeLinear (per tensor or per axis), the 8-bit
// DynamicQuantizeLinear, MatMulInteger and ConvInteger (int32 results), QLinearMatMul and
// QLinearConv (8-bit results). The scalings run in fp32, as in the spec's reference and
// onnxruntime, so that ties round (half to even) the same way; integer products and sums are exact
// (int64, or fp64 for convolutions, exact below 2^53).
#include <algorithm>
#include <cmath>

#include "mapper/reference/kernels.hpp"
#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// Per element of x, the index into a scale/zero-point tensor: 0 (per tensor) or its coordinate along `axis`.
std::vector<size_t> param_index(const OpCall& c, const Tensor& x, const Tensor& scale) {
  std::vector<size_t> idx(static_cast<size_t>(x.numel()), 0);
  if (scale.numel() == 1) return idx;
  if (scale.rank() != 1 || x.rank() == 0)
    fail(c, "scale of shape " + shape_str(scale.shape()) + " must be a scalar or 1-D (per axis)");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 1), x.rank());
  const int64_t dim = x.shape()[static_cast<size_t>(axis)], inner = dims_product(x.shape(), axis + 1, x.rank());
  if (scale.numel() != dim)
    fail(c, "scale has " + std::to_string(scale.numel()) + " values but axis " + std::to_string(axis) + " of input " +
                shape_str(x.shape()) + " has " + std::to_string(dim));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<size_t>((static_cast<int64_t>(i) / inner) % dim);
  return idx;
}

void require_8bit(const OpCall& c, DType t, const char* what) {
  if (t != DType::u8 && t != DType::i8)
    fail(c, std::string(what) + " has dtype " + std::string(dtype_name(t)) + ", expected uint8 or int8");
}

std::vector<Tensor> op_quantize_linear(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& scale = in(c, 1);
  const Tensor* zp = opt_in(c, 2);
  const DType out = zp ? zp->dtype() : DType::u8;
  require_8bit(c, out, "y_zero_point");
  if (zp && zp->shape() != scale.shape())
    fail(c, "y_zero_point of shape " + shape_str(zp->shape()) + " must have the shape of y_scale " +
                shape_str(scale.shape()));
  const auto idx = param_index(c, x, scale);
  const auto xv = x.to_f32();
  const auto sv = scale.to_f32();
  const auto zv = zp ? zp->to_i64() : std::vector<int64_t>(sv.size(), 0);
  const double lo = out == DType::u8 ? 0 : -128, hi = out == DType::u8 ? 255 : 127;
  std::vector<int64_t> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double q = std::nearbyint(xv[i] / sv[idx[i]]) + static_cast<double>(zv[idx[i]]);
    y[i] = static_cast<int64_t>(std::isnan(q) ? 0 : std::clamp(q, lo, hi));
  }
  return {from_i64_as(out, x.shape(), y)};
}

std::vector<Tensor> op_dequantize_linear(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& scale = in(c, 1);
  const Tensor* zp = opt_in(c, 2);
  if (x.dtype() != DType::u8 && x.dtype() != DType::i8 && x.dtype() != DType::i32)
    fail(c, "x has dtype " + std::string(dtype_name(x.dtype())) + ", expected uint8, int8 or int32");
  require_float(c, scale, "x_scale");
  if (zp && zp->dtype() != x.dtype()) require_same_dtype(c, x, *zp);
  if (zp && zp->shape() != scale.shape())
    fail(c, "x_zero_point of shape " + shape_str(zp->shape()) + " must have the shape of x_scale " +
                shape_str(scale.shape()));
  const auto idx = param_index(c, x, scale);
  const auto xv = x.to_i64();
  const auto sv = scale.to_f32();
  const auto zv = zp ? zp->to_i64() : std::vector<int64_t>(sv.size(), 0);
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    y[i] = static_cast<double>(static_cast<float>(xv[i] - zv[idx[i]]) * sv[idx[i]]);
  return {from_f64(scale.dtype(), x.shape(), y)};
}

std::vector<Tensor> op_dynamic_quantize_linear(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "x");
  const auto xv = x.to_f32();
  float lo = 0, hi = 0;  // the range always includes 0
  for (float v : xv) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const float scale = (hi - lo) / 255.0f;
  auto saturate = [](float v) { return std::isnan(v) ? 0.0f : std::clamp(v, 0.0f, 255.0f); };
  const float zp = scale == 0 ? 0.0f : saturate(std::nearbyint(-lo / scale));
  std::vector<int64_t> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    y[i] = static_cast<int64_t>(scale == 0 ? zp : saturate(std::nearbyint(xv[i] / scale) + zp));
  return {from_i64_as(DType::u8, x.shape(), y), Tensor::scalar_f32(scale),
          from_i64_as(DType::u8, {}, {static_cast<int64_t>(zp)})};
}

std::vector<Tensor> op_matmul_integer(const OpCall& c) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 1);
  require_8bit(c, a.dtype(), "A");
  require_8bit(c, b.dtype(), "B");
  if (a.rank() < 1 || b.rank() < 1) fail(c, "A and B must have rank >= 1");
  // Subtract the zero points (scalar, or per row of A / per column of B) in int64, then MatMul.
  auto shifted = [&](const Tensor& t, size_t zi, bool rows, const char* what) {
    auto v = t.to_i64();
    const Tensor* zp = opt_in(c, zi);
    if (!zp) return Tensor::from_i64(t.shape(), v);
    require_8bit(c, zp->dtype(), what);
    const auto zv = zp->to_i64();
    const int64_t cols = t.shape().back(), lines = t.rank() >= 2 ? t.shape()[t.shape().size() - 2] : 1;
    const int64_t along = rows ? lines : cols;
    if (zp->numel() != 1 && zp->numel() != along)
      fail(c, std::string(what) + " of shape " + shape_str(zp->shape()) + " must be a scalar or have " +
                  std::to_string(along) + " values");
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t k = static_cast<int64_t>(i);
      const size_t z = zp->numel() == 1 ? 0 : static_cast<size_t>(rows ? (k / cols) % lines : k % cols);
      v[i] -= zv[z];
    }
    return Tensor::from_i64(t.shape(), v);
  };
  const Tensor a64 = shifted(a, 2, true, "a_zero_point"), b64 = shifted(b, 3, false, "b_zero_point");
  OpCall mm = c;
  mm.op = "MatMul";
  mm.inputs = {&a64, &b64};
  return {run_op(mm)[0].cast(DType::i32)};
}

// t - zero point as fp64, with the zero point a scalar or one value per index of `axis`.
Tensor minus_zero_point(const OpCall& c, const Tensor& t, const Tensor* zp, int64_t axis, const char* what) {
  auto v = t.to_f64();
  if (!zp) return from_f64(DType::f64, t.shape(), v);
  require_8bit(c, zp->dtype(), what);
  const auto zv = zp->to_i64();
  const int64_t dim = t.shape()[static_cast<size_t>(axis)], inner = dims_product(t.shape(), axis + 1, t.rank());
  if (zp->numel() != 1 && zp->numel() != dim)
    fail(c, std::string(what) + " of shape " + shape_str(zp->shape()) + " must be a scalar or have " +
                std::to_string(dim) + " values");
  for (size_t i = 0; i < v.size(); ++i)
    v[i] -=
        static_cast<double>(zv[zp->numel() == 1 ? 0 : static_cast<size_t>((static_cast<int64_t>(i) / inner) % dim)]);
  return from_f64(DType::f64, t.shape(), v);
}

// The convolution of (x - x_zero_point) and (w - w_zero_point) (padding contributes 0), in fp64.
Tensor conv_centered(const OpCall& c, size_t x_i, size_t xzp_i, size_t w_i, size_t wzp_i) {
  const Tensor& x = in(c, x_i);
  const Tensor& w = in(c, w_i);
  require_8bit(c, x.dtype(), "x");
  require_8bit(c, w.dtype(), "w");
  if (x.rank() < 3 || w.rank() != x.rank())
    fail(c,
         "x " + shape_str(x.shape()) + " and w " + shape_str(w.shape()) + " must be [N, C, ...] and [M, C/group, ...]");
  const Tensor xf = minus_zero_point(c, x, opt_in(c, xzp_i), 0, "x_zero_point");
  const Tensor wf = minus_zero_point(c, w, opt_in(c, wzp_i), 0, "w_zero_point");
  OpCall conv = c;
  conv.op = "Conv";
  conv.inputs = {&xf, &wf};
  return run_op(conv)[0];
}

std::vector<Tensor> op_conv_integer(const OpCall& c) { return {conv_centered(c, 0, 2, 1, 3).cast(DType::i32)}; }

// acc * (s_a * s_b / s_y) rounded half to even, plus the output zero point, saturated to 8 bits.
// s_b may have one value per index of `axis` of acc.
Tensor requantize(const OpCall& c, const Tensor& acc, float sa, const Tensor& sb, float sy, const Tensor& yzp,
                  int64_t axis) {
  require_8bit(c, yzp.dtype(), "y_zero_point");
  const auto av = acc.to_f64();
  const auto sbv = sb.to_f32();
  const int64_t dim = acc.shape()[static_cast<size_t>(axis)], inner = dims_product(acc.shape(), axis + 1, acc.rank());
  if (sb.numel() != 1 && sb.numel() != dim)
    fail(c, "scale of shape " + shape_str(sb.shape()) + " must be a scalar or have " + std::to_string(dim) + " values");
  const float zp = static_cast<float>(f64_scalar(c, yzp, "y_zero_point"));
  const float lo = yzp.dtype() == DType::u8 ? 0.0f : -128.0f, hi = yzp.dtype() == DType::u8 ? 255.0f : 127.0f;
  std::vector<int64_t> y(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    const float m = sa * sbv[sb.numel() == 1 ? 0 : static_cast<size_t>((static_cast<int64_t>(i) / inner) % dim)] / sy;
    const float q = std::nearbyint(static_cast<float>(av[i]) * m) + zp;
    y[i] = std::isnan(q) ? 0 : static_cast<int64_t>(std::clamp(q, lo, hi));
  }
  return from_i64_as(yzp.dtype(), acc.shape(), y);
}

std::vector<Tensor> op_qlinear_conv(const OpCall& c) {
  Tensor acc = conv_centered(c, 0, 2, 3, 5);
  if (const Tensor* bias = opt_in(c, 8)) {
    if (bias->dtype() != DType::i32 || bias->rank() != 1 || bias->numel() != acc.shape()[1])
      fail(c, "B must be an int32 tensor of " + std::to_string(acc.shape()[1]) + " values, got " +
                  std::string(dtype_name(bias->dtype())) + " " + shape_str(bias->shape()));
    auto v = acc.to_f64();
    const auto bv = bias->to_f64();
    const int64_t M = acc.shape()[1], plane = dims_product(acc.shape(), 2, acc.rank());
    for (size_t i = 0; i < v.size(); ++i) v[i] += bv[static_cast<size_t>((static_cast<int64_t>(i) / plane) % M)];
    acc = from_f64(DType::f64, acc.shape(), v);
  }
  return {requantize(c, acc, static_cast<float>(f64_scalar(c, in(c, 1), "x_scale")), in(c, 4),
                     static_cast<float>(f64_scalar(c, in(c, 6), "y_scale")), in(c, 7), 1)};
}

std::vector<Tensor> op_qlinear_matmul(const OpCall& c) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 3);
  require_8bit(c, a.dtype(), "a");
  require_8bit(c, b.dtype(), "b");
  if (a.rank() < 2 || b.rank() < 2) fail(c, "a and b must have rank >= 2");
  const Tensor af = minus_zero_point(c, a, &in(c, 2), a.rank() - 2, "a_zero_point");
  const Tensor bf = minus_zero_point(c, b, &in(c, 5), b.rank() - 1, "b_zero_point");
  OpCall mm = c;
  mm.op = "MatMul";
  mm.inputs = {&af, &bf};
  const Tensor acc = run_op(mm)[0];
  return {requantize(c, acc, static_cast<float>(f64_scalar(c, in(c, 1), "a_scale")), in(c, 4),
                     static_cast<float>(f64_scalar(c, in(c, 6), "y_scale")), in(c, 7), acc.rank() - 1)};
}

}  // namespace

std::vector<OpEntry> quant_ops() {
  return {{"QuantizeLinear", op_quantize_linear},
          {"DequantizeLinear", op_dequantize_linear},
          {"DynamicQuantizeLinear", op_dynamic_quantize_linear},
          {"MatMulInteger", op_matmul_integer},
          {"ConvInteger", op_conv_integer},
          {"QLinearConv", op_qlinear_conv},
          {"QLinearMatMul", op_qlinear_matmul}};
}

}  // namespace tessera::reference
