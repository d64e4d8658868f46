// Neural-network operators: Softmax, LogSoftmax, LayerNormalization, BatchNormalization
// (inference), ReduceMean/ReduceSum/ReduceMax, MaxPool, AveragePool, GlobalAveragePool.
// Statistics and sums are computed in fp64 and written in the input dtype.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Softmax / LogSoftmax --------------------------------------------------------------------

std::vector<Tensor> softmax_impl(const OpCall& c, bool log) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input");
  const int64_t r = x.rank();
  const bool legacy = c.opset < 13;  // before 13: coerce to 2-D [prod(:axis), prod(axis:)]
  const int64_t axis_attr = attrs(c).get_int("axis", legacy ? 1 : -1);
  if (r == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = norm_axis(c, axis_attr, r);
  const Shape& s = x.shape();
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
  if (legacy) {
    for (int64_t i = axis; i < r; ++i) n *= s[static_cast<size_t>(i)];
  } else {
    n = s[static_cast<size_t>(axis)];
    for (int64_t i = axis + 1; i < r; ++i) inner *= s[static_cast<size_t>(i)];
  }
  auto v = x.to_f64();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in_i = 0; in_i < inner; ++in_i) {
      double* base = v.data() + o * n * inner + in_i;
      double mx = -kInf;
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, base[k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(base[k * inner] - mx);
      const double lse = std::log(sum);
      for (int64_t k = 0; k < n; ++k) {
        double& e = base[k * inner];
        e = log ? e - mx - lse : std::exp(e - mx) / sum;
      }
    }
  return {from_f64(x.dtype(), s, v)};
}

std::vector<Tensor> op_softmax(const OpCall& c) { return softmax_impl(c, false); }
std::vector<Tensor> op_log_softmax(const OpCall& c) { return softmax_impl(c, true); }

// ---- normalisation -----------------------------------------------------------------------------

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
      fail(c, std::string(what) + " of shape " + shape_str(t->shape()) + " does not broadcast to the normalized shape " +
                  shape_str(norm_shape) + " of input X " + shape_str(s));
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

// ---- reductions --------------------------------------------------------------------------------

enum class Red { sum, mean, max };

std::vector<Tensor> reduce(const OpCall& c, Red kind) {
  const Tensor& x = in(c, 0);
  const auto& at = attrs(c);
  std::vector<int64_t> axes;
  if (const Tensor* a = opt_in(c, 1)) {
    axes = int_values(c, *a, "axes");
  } else {
    const bool axes_input = kind == Red::sum ? c.opset >= 13 : c.opset >= 18;
    if (axes_input && at.has("axes"))
      fail(c, "attribute 'axes' is not allowed at this opset; axes is an input",
           "pass axes as the second input, or declare an older opset");
    axes = at.get_ints("axes", {});
  }
  const bool keepdims = at.get_int("keepdims", 1) != 0;
  const bool noop = at.get_int("noop_with_empty_axes", 0) != 0;
  if (axes.empty() && noop) return {x};
  const int64_t r = x.rank();
  std::vector<bool> red(static_cast<size_t>(r), axes.empty());
  for (int64_t a : norm_axes(c, axes, r)) red[static_cast<size_t>(a)] = true;
  Shape keep = x.shape(), out;
  for (int64_t i = 0; i < r; ++i) {
    if (red[static_cast<size_t>(i)]) keep[static_cast<size_t>(i)] = 1;
    if (!red[static_cast<size_t>(i)] || keepdims) out.push_back(keep[static_cast<size_t>(i)]);
  }
  const auto map = broadcast_map(keep, x.shape());  // input element -> output element
  const int64_t nout = shape_numel(keep);
  const int64_t count = nout == 0 ? 0 : x.numel() / nout;
  if (!is_float(x.dtype()) && kind != Red::mean) {
    const auto v = x.to_i64();
    std::vector<int64_t> acc(static_cast<size_t>(nout),
                             kind == Red::max ? std::numeric_limits<int64_t>::min() : int64_t{0});
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t& a = acc[static_cast<size_t>(map[i])];
      a = kind == Red::max ? std::max(a, v[i])
                           : static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(v[i]));
    }
    return {from_i64_as(x.dtype(), out, acc)};
  }
  const auto v = x.to_f64();
  std::vector<double> acc(static_cast<size_t>(nout), kind == Red::max ? -kInf : 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    double& a = acc[static_cast<size_t>(map[i])];
    if (kind == Red::max) {
      if (std::isnan(v[i]) || v[i] > a) a = v[i];
    } else {
      a += v[i];
    }
  }
  if (kind == Red::mean)
    for (double& a : acc) a /= static_cast<double>(count);  // 0/0 -> NaN for an empty reduction
  if (!is_float(x.dtype())) {  // integer mean truncates, like numpy's mean().astype(int)
    std::vector<int64_t> iv(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) iv[i] = std::isfinite(acc[i]) ? static_cast<int64_t>(acc[i]) : 0;
    return {from_i64_as(x.dtype(), out, iv)};
  }
  return {from_f64(x.dtype(), out, acc)};
}

std::vector<Tensor> op_reduce_sum(const OpCall& c) { return reduce(c, Red::sum); }
std::vector<Tensor> op_reduce_mean(const OpCall& c) { return reduce(c, Red::mean); }
std::vector<Tensor> op_reduce_max(const OpCall& c) { return reduce(c, Red::max); }

// ---- pooling -----------------------------------------------------------------------------------

struct PoolGeom {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

PoolGeom pool_geometry(const OpCall& c, const Tensor& x, bool allow_dilations) {
  if (x.rank() < 3 || x.rank() > 5)
    fail(c, "input X of shape " + shape_str(x.shape()) + " is not supported",
         "the reference executor supports 1-D, 2-D and 3-D pooling (X of rank 3..5)");
  const int64_t nsp = x.rank() - 2;
  const auto& at = attrs(c);
  if (!at.has("kernel_shape")) fail(c, "required attribute 'kernel_shape' is missing");
  const auto ks = at.get_ints("kernel_shape");
  auto get = [&](const char* name, int64_t def, size_t want) {
    auto v = at.get_ints(name, std::vector<int64_t>(want, def));
    if (v.size() != want)
      fail(c, std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values; expected " +
                  std::to_string(want));
    return v;
  };
  if (static_cast<int64_t>(ks.size()) != nsp)
    fail(c, "attribute 'kernel_shape' " + shape_str(ks) + " does not match input X of shape " + shape_str(x.shape()));
  const size_t ns = static_cast<size_t>(nsp);
  const auto st = get("strides", 1, ns);
  const auto dl = get("dilations", 1, ns);
  const auto pads = get("pads", 0, 2 * ns);
  if (!allow_dilations)
    for (int64_t d : dl)
      if (d != 1) fail(c, "attribute 'dilations' is not supported for this op", "use dilations of 1");
  const bool ceil_mode = at.get_int("ceil_mode", 0) != 0;
  const std::string ap = at.get_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    fail(c, "attribute 'auto_pad' = '" + ap + "' is not supported", "use NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  PoolGeom g;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = i - (3 - nsp);
    if (j < 0) {
      g.in[i] = g.out[i] = g.k[i] = g.s[i] = g.d[i] = 1;
      g.pb[i] = g.pe[i] = 0;
      continue;
    }
    const size_t ju = static_cast<size_t>(j);
    g.in[i] = x.shape()[2 + ju];
    g.k[i] = ks[ju];
    g.s[i] = st[ju];
    g.d[i] = dl[ju];
    if (g.k[i] < 1 || g.s[i] < 1 || g.d[i] < 1) fail(c, "kernel_shape, strides and dilations must be >= 1");
    const int64_t dk = (g.k[i] - 1) * g.d[i] + 1;
    if (ap == "NOTSET") {
      g.pb[i] = pads[ju];
      g.pe[i] = pads[ju + ns];
      if (g.pb[i] < 0 || g.pe[i] < 0) fail(c, "attribute 'pads' has a negative value");
      const int64_t span = g.in[i] + g.pb[i] + g.pe[i] - dk;
      if (span < 0)
        fail(c, "kernel_shape " + shape_str(ks) + " is larger than the padded input X " + shape_str(x.shape()));
      g.out[i] = (ceil_mode ? (span + g.s[i] - 1) / g.s[i] : span / g.s[i]) + 1;
      // A window that would start in the end padding is dropped (PyTorch / ONNX ceil_mode rule).
      if (ceil_mode && (g.out[i] - 1) * g.s[i] >= g.in[i] + g.pb[i]) --g.out[i];
    } else if (ap == "VALID") {
      g.pb[i] = g.pe[i] = 0;
      if (g.in[i] < dk)
        fail(c, "kernel_shape " + shape_str(ks) + " is larger than input X " + shape_str(x.shape()));
      g.out[i] = (g.in[i] - dk) / g.s[i] + 1;
    } else {
      g.out[i] = (g.in[i] + g.s[i] - 1) / g.s[i];
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * g.s[i] + dk - g.in[i]);
      g.pb[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pe[i] = total - g.pb[i];
    }
  }
  return g;
}

std::vector<Tensor> pool(const OpCall& c, bool is_max) {
  const Tensor& x = in(c, 0);
  if (!is_max) require_float(c, x, "input X");
  const PoolGeom g = pool_geometry(c, x, true);
  const bool include_pad = attrs(c).get_int("count_include_pad", 0) != 0;
  const bool want_idx = is_max && c.num_outputs > 1;
  const bool col_major = attrs(c).get_int("storage_order", 0) != 0;
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
  const auto xv = x.to_f64();
  std::vector<double> r(static_cast<size_t>(N * C * out_plane));
  std::vector<int64_t> idx(want_idx ? r.size() : 0);
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const double* xp = xv.data() + nc * in_plane;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          double acc = is_max ? -kInf : 0.0;
          int64_t best = -1, cnt = 0, cnt_pad = 0;
          for (int64_t kd = 0; kd < g.k[0]; ++kd) {
            const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
            if (id >= g.in[0] + g.pe[0]) continue;
            const bool vd = id >= 0 && id < g.in[0];
            for (int64_t kh = 0; kh < g.k[1]; ++kh) {
              const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
              if (ih >= g.in[1] + g.pe[1]) continue;
              const bool vh = ih >= 0 && ih < g.in[1];
              for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
                if (iw >= g.in[2] + g.pe[2]) continue;
                ++cnt_pad;  // inside the padded input
                if (!(vd && vh && iw >= 0 && iw < g.in[2])) continue;
                const int64_t off = (id * g.in[1] + ih) * g.in[2] + iw;
                const double v = xp[off];
                ++cnt;
                if (is_max) {
                  if (best < 0 || v > acc || (std::isnan(v) && !std::isnan(acc))) {
                    acc = v;
                    best = col_major ? id + g.in[0] * (ih + g.in[1] * iw) : off;
                  }
                } else {
                  acc += v;
                }
              }
            }
          }
          const size_t o = static_cast<size_t>(nc * out_plane + (od * g.out[1] + oh) * g.out[2] + ow);
          if (is_max) {
            r[o] = acc;
            if (want_idx) idx[o] = best < 0 ? 0 : nc * in_plane + best;
          } else {
            const int64_t div = include_pad ? cnt_pad : cnt;
            r[o] = div > 0 ? acc / static_cast<double>(div) : std::numeric_limits<double>::quiet_NaN();
          }
        }
  }
  Shape out{N, C};
  for (int64_t i = 3 - (x.rank() - 2); i < 3; ++i) out.push_back(g.out[i]);
  std::vector<Tensor> res;
  res.push_back(to_dtype(x.dtype(), out, r));
  if (want_idx) res.push_back(Tensor::from_i64(out, idx));
  return res;
}

std::vector<Tensor> op_max_pool(const OpCall& c) { return pool(c, true); }
std::vector<Tensor> op_average_pool(const OpCall& c) { return pool(c, false); }

std::vector<Tensor> op_global_average_pool(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  if (x.rank() < 3) fail(c, "input X of shape " + shape_str(x.shape()) + " needs rank >= 3 (N, C, spatial...)");
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t plane = N * C == 0 ? 0 : x.numel() / (N * C);
  const auto v = x.to_f64();
  std::vector<double> r(static_cast<size_t>(N * C));
  for (int64_t i = 0; i < N * C; ++i) {
    double s = 0;
    for (int64_t k = 0; k < plane; ++k) s += v[static_cast<size_t>(i * plane + k)];
    r[static_cast<size_t>(i)] = s / static_cast<double>(plane);
  }
  Shape out(x.shape().size(), 1);
  out[0] = N;
  out[1] = C;
  return {from_f64(x.dtype(), out, r)};
}

}  // namespace

std::vector<OpEntry> nn_ops() {
  return {
      {"Softmax", op_softmax},
      {"LogSoftmax", op_log_softmax},
      {"LayerNormalization", op_layer_norm},
      {"BatchNormalization", op_batch_norm},
      {"ReduceSum", op_reduce_sum},
      {"ReduceMean", op_reduce_mean},
      {"ReduceMax", op_reduce_max},
      {"MaxPool", op_max_pool},
      {"AveragePool", op_average_pool},
      {"GlobalAveragePool", op_global_average_pool},
  };
}

}  // namespace tessera::reference
