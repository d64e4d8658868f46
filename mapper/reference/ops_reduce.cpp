// Reductions and scans along axes: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp,
// ArgMax/ArgMin, CumSum and TopK. Float sums run in fp64 and are written in the input dtype;
// integer ones in int64 (wrapping). Axes are an attribute before the opset where they became an
// input (13 for ReduceSum, 18 for the others).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mapper/reference/elementwise.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Red { sum, mean, max, min, prod, sum_square, l1, l2, log_sum, log_sum_exp };

// Reduced axes -> (shape with reduced dims set to 1, output shape). Empty axes reduce everything
// unless noop_with_empty_axes; `noop` reports that case.
struct ReduceGeom {
  Shape keep, out;
  bool noop = false;
};

ReduceGeom reduce_geometry(const OpCall& c, const Tensor& x, bool axes_input_opset) {
  const auto& at = attrs(c);
  std::vector<int64_t> axes;
  if (const Tensor* a = opt_in(c, 1)) {
    axes = int_values(c, *a, "axes");
  } else {
    if (axes_input_opset && at.has("axes"))
      fail(c, "attribute 'axes' is not allowed at this opset; axes is an input",
           "pass axes as the second input, or declare an older opset");
    axes = at.get_ints("axes", {});
  }
  const bool keepdims = at.get_int("keepdims", 1) != 0;
  ReduceGeom g;
  if (axes.empty() && at.get_int("noop_with_empty_axes", 0) != 0) {
    g.noop = true;
    return g;
  }
  const int64_t r = x.rank();
  std::vector<bool> red(static_cast<size_t>(r), axes.empty());
  for (int64_t a : norm_axes(c, axes, r)) red[static_cast<size_t>(a)] = true;
  g.keep = x.shape();
  for (int64_t i = 0; i < r; ++i) {
    if (red[static_cast<size_t>(i)]) g.keep[static_cast<size_t>(i)] = 1;
    if (!red[static_cast<size_t>(i)] || keepdims) g.out.push_back(g.keep[static_cast<size_t>(i)]);
  }
  return g;
}

std::vector<Tensor> reduce(const OpCall& c, Red kind) {
  const Tensor& x = in(c, 0);
  if (x.dtype() == DType::boolean) fail(c, "input has dtype bool; reductions need a numeric tensor");
  const ReduceGeom g = reduce_geometry(c, x, kind == Red::sum ? c.opset >= 13 : c.opset >= 18);
  if (g.noop) return {x};
  const auto map = broadcast_map(g.keep, x.shape());  // input element -> output element
  const size_t nout = static_cast<size_t>(shape_numel(g.keep));
  const bool fl = is_float(x.dtype());
  const bool int_exact = kind == Red::sum || kind == Red::max || kind == Red::min || kind == Red::prod ||
                         kind == Red::sum_square || kind == Red::l1;
  if (!fl && int_exact) {
    const auto v = x.to_i64();
    const int64_t init = kind == Red::max    ? std::numeric_limits<int64_t>::min()
                         : kind == Red::min  ? std::numeric_limits<int64_t>::max()
                         : kind == Red::prod ? 1
                                             : 0;
    std::vector<int64_t> acc(nout, init);
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t& a = acc[static_cast<size_t>(map[i])];
      const int64_t e = v[i];
      switch (kind) {
        case Red::max:
          a = std::max(a, e);
          break;
        case Red::min:
          a = std::min(a, e);
          break;
        case Red::prod:
          a = wrap_mul(a, e);
          break;
        case Red::sum_square:
          a = wrap_add(a, wrap_mul(e, e));
          break;
        case Red::l1:
          a = wrap_add(a, e < 0 ? wrap_sub(0, e) : e);
          break;
        default:
          a = wrap_add(a, e);
          break;
      }
    }
    return {from_i64_as(x.dtype(), g.out, acc)};
  }
  const auto v = x.to_f64();
  std::vector<double> shift(kind == Red::log_sum_exp ? nout : 0, -kInf);  // per-output max, for a stable exp
  if (!shift.empty())
    for (size_t i = 0; i < v.size(); ++i) {
      double& m = shift[static_cast<size_t>(map[i])];
      m = std::max(m, v[i]);
    }
  for (double& m : shift)
    if (!std::isfinite(m)) m = 0;
  const double init = kind == Red::max ? -kInf : kind == Red::min ? kInf : kind == Red::prod ? 1.0 : 0.0;
  std::vector<double> acc(nout, init);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t o = static_cast<size_t>(map[i]);
    double& a = acc[o];
    const double e = v[i];
    switch (kind) {
      case Red::max:
        if (std::isnan(e) || e > a) a = e;
        break;
      case Red::min:
        if (std::isnan(e) || e < a) a = e;
        break;
      case Red::prod:
        a *= e;
        break;
      case Red::sum_square:
      case Red::l2:
        a += e * e;
        break;
      case Red::l1:
        a += std::fabs(e);
        break;
      case Red::log_sum_exp:
        a += std::exp(e - shift[o]);
        break;
      default:
        a += e;
        break;
    }
  }
  const double count = nout == 0 ? 0.0 : static_cast<double>(x.numel()) / static_cast<double>(nout);
  for (size_t o = 0; o < nout; ++o) {
    double& a = acc[o];
    if (kind == Red::mean)
      a /= count;  // 0/0 -> NaN for an empty reduction
    else if (kind == Red::l2)
      a = std::sqrt(a);
    else if (kind == Red::log_sum)
      a = std::log(a);
    else if (kind == Red::log_sum_exp)
      a = std::log(a) + shift[o];
  }
  if (!fl) {  // integer mean, L2 and logs truncate, like numpy's astype(int)
    std::vector<int64_t> iv(acc.size());
    for (size_t i = 0; i < acc.size(); ++i)
      iv[i] = std::isfinite(acc[i]) ? static_cast<int64_t>(std::clamp(acc[i], -9.2e18, 9.2e18)) : 0;
    return {from_i64_as(x.dtype(), g.out, iv)};
  }
  return {from_f64(x.dtype(), g.out, acc)};
}

template <Red K>
std::vector<Tensor> op_reduce(const OpCall& c) {
  return reduce(c, K);
}

// outer x dim x inner view of x around `axis`.
struct AxisView {
  int64_t outer, dim, inner;
};
AxisView axis_view(const Tensor& x, int64_t axis) {
  return {dims_product(x.shape(), 0, axis), x.shape()[static_cast<size_t>(axis)],
          dims_product(x.shape(), axis + 1, x.rank())};
}

std::vector<Tensor> arg_extreme(const OpCall& c, bool want_max) {
  const Tensor& x = in(c, 0);
  if (x.dtype() == DType::boolean) fail(c, "input has dtype bool; ArgMax/ArgMin need a numeric tensor");
  if (x.rank() == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), x.rank());
  const bool keepdims = attrs(c).get_int("keepdims", 1) != 0;
  const bool last = attrs(c).get_int("select_last_index", 0) != 0;
  const AxisView a = axis_view(x, axis);
  if (a.dim == 0) fail(c, "cannot take ArgMax/ArgMin over axis " + std::to_string(axis) + " of size 0");
  const auto v = x.to_f64();  // exact for every integer dtype but the extremes of int64
  std::vector<int64_t> r(static_cast<size_t>(a.outer * a.inner));
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t i = 0; i < a.inner; ++i) {
      const double* base = v.data() + o * a.dim * a.inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < a.dim; ++k) {
        const double e = base[k * a.inner], b = base[best * a.inner];
        if (std::isnan(b)) break;  // the first NaN wins, as in numpy
        const bool better = std::isnan(e) || (want_max ? e > b : e < b) || (last && e == b);
        if (better) best = k;
      }
      r[static_cast<size_t>(o * a.inner + i)] = best;
    }
  Shape out = x.shape();
  if (keepdims)
    out[static_cast<size_t>(axis)] = 1;
  else
    out.erase(out.begin() + axis);
  return {Tensor::from_i64(out, r)};
}

std::vector<Tensor> op_arg_max(const OpCall& c) { return arg_extreme(c, true); }
std::vector<Tensor> op_arg_min(const OpCall& c) { return arg_extreme(c, false); }

std::vector<Tensor> op_cum_sum(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.dtype() == DType::boolean) fail(c, "input has dtype bool; CumSum needs a numeric tensor");
  if (x.rank() == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = norm_axis(c, int_scalar(c, in(c, 1), "axis"), x.rank());
  const bool exclusive = attrs(c).get_int("exclusive", 0) != 0, reverse = attrs(c).get_int("reverse", 0) != 0;
  const AxisView a = axis_view(x, axis);
  auto scan = [&](auto& v) {
    using T = std::decay_t<decltype(v[0])>;
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        T acc{0};
        for (int64_t s = 0; s < a.dim; ++s) {
          const int64_t k = reverse ? a.dim - 1 - s : s;
          T& e = v[static_cast<size_t>((o * a.dim + k) * a.inner + i)];
          const T cur = e;
          if constexpr (std::is_same_v<T, double>) {
            e = exclusive ? acc : acc + cur;
            acc += cur;
          } else {
            e = exclusive ? acc : wrap_add(acc, cur);
            acc = wrap_add(acc, cur);
          }
        }
      }
  };
  if (is_float(x.dtype())) {
    auto v = x.to_f64();
    scan(v);
    return {from_f64(x.dtype(), x.shape(), v)};
  }
  auto v = x.to_i64();
  scan(v);
  return {from_i64_as(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_top_k(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.dtype() == DType::boolean) fail(c, "input has dtype bool; TopK needs a numeric tensor");
  if (x.rank() == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", -1), x.rank());
  int64_t k;
  if (c.opset < 10) {
    if (!attrs(c).has("k")) fail(c, "required attribute 'k' is missing");
    k = attrs(c).get_int("k", 0);
  } else {
    k = int_scalar(c, in(c, 1), "K");
  }
  const bool largest = attrs(c).get_int("largest", 1) != 0;
  const AxisView a = axis_view(x, axis);
  if (k < 0 || k > a.dim)
    fail(c, "k = " + std::to_string(k) + " is outside [0, " + std::to_string(a.dim) + "] for axis " +
                std::to_string(axis) + " of input " + shape_str(x.shape()));
  const auto v = x.to_f64();
  const auto iv = is_float(x.dtype()) ? std::vector<int64_t>{} : x.to_i64();
  std::vector<double> vals(static_cast<size_t>(a.outer * k * a.inner));
  std::vector<int64_t> vals_i(iv.empty() ? 0 : vals.size()), idx(vals.size());
  std::vector<int64_t> order(static_cast<size_t>(a.dim));
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t i = 0; i < a.inner; ++i) {
      const int64_t base = o * a.dim * a.inner + i;
      auto at = [&](int64_t j) { return v[static_cast<size_t>(base + j * a.inner)]; };
      std::iota(order.begin(), order.end(), 0);
      // Ties keep the lower index first (the spec's rule); NaN counts as larger than any number.
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        const double vp = at(p), vq = at(q);
        if (std::isnan(vp) || std::isnan(vq)) return std::isnan(vp) != std::isnan(vq) && std::isnan(vp) == largest;
        return largest ? vp > vq : vp < vq;
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t dst = static_cast<size_t>((o * k + j) * a.inner + i);
        const int64_t src = order[static_cast<size_t>(j)];
        vals[dst] = at(src);
        if (!iv.empty()) vals_i[dst] = iv[static_cast<size_t>(base + src * a.inner)];
        idx[dst] = src;
      }
    }
  Shape out = x.shape();
  out[static_cast<size_t>(axis)] = k;
  std::vector<Tensor> r;
  r.push_back(iv.empty() ? from_f64(x.dtype(), out, vals) : from_i64_as(x.dtype(), out, vals_i));
  r.push_back(Tensor::from_i64(out, idx));
  return r;
}

}  // namespace

std::vector<OpEntry> reduce_ops() {
  return {
      {"ReduceSum", op_reduce<Red::sum>},
      {"ReduceMean", op_reduce<Red::mean>},
      {"ReduceMax", op_reduce<Red::max>},
      {"ReduceMin", op_reduce<Red::min>},
      {"ReduceProd", op_reduce<Red::prod>},
      {"ReduceSumSquare", op_reduce<Red::sum_square>},
      {"ReduceL1", op_reduce<Red::l1>},
      {"ReduceL2", op_reduce<Red::l2>},
      {"ReduceLogSum", op_reduce<Red::log_sum>},
      {"ReduceLogSumExp", op_reduce<Red::log_sum_exp>},
      {"ArgMax", op_arg_max},
      {"ArgMin", op_arg_min},
      {"CumSum", op_cum_sum},
      {"TopK", op_top_k},
  };
}

}  // namespace tessera::reference
