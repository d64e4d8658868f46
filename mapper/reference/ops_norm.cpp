// Normalisations: LayerNormalization, BatchNormalization (inference and training statistics),
// InstanceNormalization, MeanVarianceNormalization and LRN. Statistics are computed in fp64 and
// results written in the input dtype.
#include <algorithm>
#include <cmath>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

std::vector<Tensor> op_layer_norm(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const Tensor* scale = opt_in(c, 1);
  const Tensor* bias = opt_in(c, 2);
  const int64_t r = x.rank();
  if (r == 0) fail(c, "input X must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", -1), r);
  const double eps = attrs(c).get_float("epsilon", 1e-5);
  const int64_t stash = attrs(c).get_int("stash_type", 1);
  const Shape& s = x.shape();
  const Shape norm_shape(s.begin() + axis, s.end());
  const Shape outer_shape(s.begin(), s.begin() + axis);
  const int64_t outer = shape_numel(outer_shape), n = shape_numel(norm_shape);
  auto param = [&](const Tensor* t, const char* what) {
    if (!t) return std::vector<double>{};
    if (!broadcastable_to(t->shape(), norm_shape))
      fail(c, std::string(what) + " of shape " + shape_str(t->shape()) +
                  " does not broadcast to the normalized shape " + shape_str(norm_shape) + " of input X " +
                  shape_str(s));
    const auto map = broadcast_map(t->shape(), norm_shape);
    const auto v = t->to_f64();
    std::vector<double> r2(map.size());
    for (size_t i = 0; i < map.size(); ++i) r2[i] = v[static_cast<size_t>(map[i])];
    return r2;
  };
  const auto sv = param(scale, "Scale");
  const auto bv = param(bias, "B");
  auto v = x.to_f64();
  std::vector<double> means(static_cast<size_t>(outer)), inv(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    double* row = v.data() + o * n;
    double mean = 0;
    for (int64_t k = 0; k < n; ++k) mean += row[k];
    mean /= static_cast<double>(n);
    double var = 0;
    for (int64_t k = 0; k < n; ++k) var += (row[k] - mean) * (row[k] - mean);
    var /= static_cast<double>(n);
    const double is = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < n; ++k) {
      double y = (row[k] - mean) * is;
      if (scale) y *= sv[static_cast<size_t>(k)];
      if (bias) y += bv[static_cast<size_t>(k)];
      row[k] = y;
    }
    means[static_cast<size_t>(o)] = mean;
    inv[static_cast<size_t>(o)] = is;
  }
  std::vector<Tensor> out;
  out.push_back(from_f64(x.dtype(), s, v));
  if (c.num_outputs > 1) {
    Shape stat_shape = outer_shape;
    stat_shape.resize(s.size(), 1);
    const DType st = stash == 11 ? DType::f64 : DType::f32;
    out.push_back(from_f64(st, stat_shape, means));
    if (c.num_outputs > 2) out.push_back(from_f64(st, stat_shape, inv));
  }
  return out;
}

std::vector<Tensor> op_batch_norm(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const bool training = attrs(c).get_int("training_mode", 0) != 0;
  if (!training && c.num_outputs > 1)
    fail(c, "BatchNormalization with " + std::to_string(c.num_outputs) + " outputs needs training_mode = 1",
         "use a single output Y for inference");
  if (c.num_outputs > 3)
    fail(c, "BatchNormalization with " + std::to_string(c.num_outputs) + " outputs is not supported",
         "outputs are Y, running_mean, running_var");
  if (x.rank() < 2) fail(c, "input X of shape " + shape_str(x.shape()) + " needs rank >= 2 (N, C, ...)");
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t inner = N * C == 0 ? 0 : x.numel() / (N * C);
  const char* names[] = {"scale", "B", "input_mean", "input_var"};
  std::vector<double> p[4];
  for (size_t i = 0; i < 4; ++i) {
    const Tensor& t = in(c, i + 1);
    if (t.numel() != C || t.rank() != 1)
      fail(c, std::string(names[i]) + " of shape " + shape_str(t.shape()) + " does not match the channels of input X " +
                  shape_str(x.shape()));
    p[i] = t.to_f64();
  }
  const double eps = attrs(c).get_float("epsilon", 1e-5);
  auto v = x.to_f64();
  // Statistics used for normalisation: the running ones (inference) or the batch's (training).
  std::vector<double> mean = p[2], var = p[3];
  if (training) {
    const double cnt = static_cast<double>(N * inner);
    for (int64_t ch = 0; ch < C; ++ch) {
      double s = 0, q = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double* row = v.data() + (n * C + ch) * inner;
        for (int64_t i = 0; i < inner; ++i) s += row[i];
      }
      const double m = s / cnt;
      for (int64_t n = 0; n < N; ++n) {
        const double* row = v.data() + (n * C + ch) * inner;
        for (int64_t i = 0; i < inner; ++i) q += (row[i] - m) * (row[i] - m);
      }
      mean[static_cast<size_t>(ch)] = m;
      var[static_cast<size_t>(ch)] = q / cnt;  // population variance, as ONNX specifies
    }
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      const size_t k = static_cast<size_t>(ch);
      const double a = p[0][k] / std::sqrt(var[k] + eps);
      double* row = v.data() + (n * C + ch) * inner;
      for (int64_t i = 0; i < inner; ++i) row[i] = (row[i] - mean[k]) * a + p[1][k];
    }
  std::vector<Tensor> out;
  out.push_back(from_f64(x.dtype(), x.shape(), v));
  if (training && c.num_outputs > 1) {
    const double mom = attrs(c).get_float("momentum", 0.9);
    for (size_t j = 0; j < 2 && out.size() < c.num_outputs; ++j) {
      const auto& batch = j == 0 ? mean : var;
      std::vector<double> run(static_cast<size_t>(C));
      for (size_t k = 0; k < run.size(); ++k) run[k] = p[2 + j][k] * mom + batch[k] * (1.0 - mom);
      out.push_back(from_f64(in(c, 3 + j).dtype(), {C}, run));
    }
  }
  return out;
}

std::vector<Tensor> op_instance_norm(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input");
  if (x.rank() < 3) fail(c, "input of shape " + shape_str(x.shape()) + " needs rank >= 3 (N, C, spatial...)");
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t plane = dims_product(x.shape(), 2, x.rank());
  const Tensor& scale = in(c, 1);
  const Tensor& bias = in(c, 2);
  for (const Tensor* t : {&scale, &bias})
    if (t->rank() != 1 || t->numel() != C)
      fail(c, std::string(t == &scale ? "scale" : "B") + " of shape " + shape_str(t->shape()) +
                  " does not match the channels of input " + shape_str(x.shape()));
  const double eps = attrs(c).get_float("epsilon", 1e-5);
  const auto sv = scale.to_f64(), bv = bias.to_f64();
  auto v = x.to_f64();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      double* row = v.data() + (n * C + ch) * plane;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < plane; ++i) mean += row[i];
      mean /= static_cast<double>(plane);
      for (int64_t i = 0; i < plane; ++i) var += (row[i] - mean) * (row[i] - mean);
      var /= static_cast<double>(plane);
      const double a = sv[static_cast<size_t>(ch)] / std::sqrt(var + eps);
      for (int64_t i = 0; i < plane; ++i) row[i] = (row[i] - mean) * a + bv[static_cast<size_t>(ch)];
    }
  return {from_f64(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_mean_variance_norm(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const auto axes = norm_axes(c, attrs(c).get_ints("axes", {0, 2, 3}), x.rank());
  Shape keep = x.shape();
  for (int64_t a : axes) keep[static_cast<size_t>(a)] = 1;
  const auto map = broadcast_map(keep, x.shape());
  const size_t nstat = static_cast<size_t>(shape_numel(keep));
  const double count = nstat == 0 ? 0.0 : static_cast<double>(x.numel()) / static_cast<double>(nstat);
  auto v = x.to_f64();
  std::vector<double> mean(nstat, 0.0), sq(nstat, 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    mean[static_cast<size_t>(map[i])] += v[i];
    sq[static_cast<size_t>(map[i])] += v[i] * v[i];
  }
  std::vector<double> sd(nstat);
  for (size_t k = 0; k < nstat; ++k) {
    mean[k] /= count;
    // The spec's definition: sqrt(E[x^2] - E[x]^2), and 1e-9 added to the deviation.
    sd[k] = std::sqrt(std::max(sq[k] / count - mean[k] * mean[k], 0.0)) + 1e-9;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t k = static_cast<size_t>(map[i]);
    v[i] = (v[i] - mean[k]) / sd[k];
  }
  return {from_f64(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_lrn(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  if (x.rank() < 3) fail(c, "input X of shape " + shape_str(x.shape()) + " needs rank >= 3 (N, C, spatial...)");
  if (!attrs(c).has("size")) fail(c, "required attribute 'size' is missing");
  const int64_t size = attrs(c).get_int("size", 1);
  if (size < 1) fail(c, "attribute 'size' must be >= 1, got " + std::to_string(size));
  const double alpha = attrs(c).get_float("alpha", 1e-4), beta = attrs(c).get_float("beta", 0.75);
  const double bias = attrs(c).get_float("bias", 1.0);
  const int64_t N = x.shape()[0], C = x.shape()[1], plane = dims_product(x.shape(), 2, x.rank());
  const int64_t before = (size - 1) / 2, after = size / 2;  // floor and ceil of (size - 1) / 2
  const auto v = x.to_f64();
  std::vector<double> r(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t i = 0; i < plane; ++i) {
        double sum = 0;
        for (int64_t k = std::max<int64_t>(0, ch - before); k <= std::min(C - 1, ch + after); ++k) {
          const double e = v[static_cast<size_t>((n * C + k) * plane + i)];
          sum += e * e;
        }
        const size_t o = static_cast<size_t>((n * C + ch) * plane + i);
        r[o] = v[o] / std::pow(bias + alpha / static_cast<double>(size) * sum, beta);
      }
  return {from_f64(x.dtype(), x.shape(), r)};
}

}  // namespace

std::vector<OpEntry> norm_ops() {
  return {
      {"LayerNormalization", op_layer_norm},
      {"BatchNormalization", op_batch_norm},
      {"InstanceNormalization", op_instance_norm},
      {"MeanVarianceNormalization", op_mean_variance_norm},
      {"LRN", op_lrn},
  };
}

}  // namespace tessera::reference
