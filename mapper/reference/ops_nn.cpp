// Neural-network operators: Softmax, LogSoftmax, Hardmax, MaxPool, AveragePool, GlobalAveragePool,
// GlobalMaxPool, MaxUnpool. Sums are computed in fp64 and written in the input dtype. (Normalisations are in
// ops_norm.cpp, reductions in ops_reduce.cpp.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Softmax / LogSoftmax / Hardmax ----------------------------------------------------------

enum class Soft { softmax, log_softmax, hardmax };

std::vector<Tensor> softmax_impl(const OpCall& c, Soft kind) {
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
      if (kind == Soft::hardmax) {  // 1 at the first maximum, 0 elsewhere
        int64_t first = -1;
        for (int64_t k = 0; k < n; ++k) {
          if (first < 0 && base[k * inner] == mx) first = k;
          base[k * inner] = 0;
        }
        if (first >= 0) base[first * inner] = 1;
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(base[k * inner] - mx);
      const double lse = std::log(sum);
      for (int64_t k = 0; k < n; ++k) {
        double& e = base[k * inner];
        e = kind == Soft::log_softmax ? e - mx - lse : std::exp(e - mx) / sum;
      }
    }
  return {from_f64(x.dtype(), s, v)};
}

std::vector<Tensor> op_softmax(const OpCall& c) { return softmax_impl(c, Soft::softmax); }
std::vector<Tensor> op_log_softmax(const OpCall& c) { return softmax_impl(c, Soft::log_softmax); }
std::vector<Tensor> op_hardmax(const OpCall& c) { return softmax_impl(c, Soft::hardmax); }

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

std::vector<Tensor> op_max_unpool(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& ind = in(c, 1);
  require_index(c, ind);
  if (ind.shape() != x.shape())
    fail(c, "indices I of shape " + shape_str(ind.shape()) + " must have the shape of X " + shape_str(x.shape()));
  if (x.rank() < 3) fail(c, "input X of shape " + shape_str(x.shape()) + " needs rank >= 3 (N, C, spatial...)");
  const int64_t nsp = x.rank() - 2;
  const size_t ns = static_cast<size_t>(nsp);
  if (!attrs(c).has("kernel_shape")) fail(c, "required attribute 'kernel_shape' is missing");
  const auto ks = attrs(c).get_ints("kernel_shape");
  const auto st = attrs(c).get_ints("strides", std::vector<int64_t>(ns, 1));
  const auto pads = attrs(c).get_ints("pads", std::vector<int64_t>(2 * ns, 0));
  if (ks.size() != ns || st.size() != ns || pads.size() != 2 * ns)
    fail(c, "kernel_shape, strides and pads must have " + std::to_string(nsp) + ", " + std::to_string(nsp) + " and " +
                std::to_string(2 * nsp) + " values for input X " + shape_str(x.shape()));
  // Indices are flat over the unpooled tensor (N and C included), as MaxPool numbers its argmaxes.
  Shape base = x.shape();
  for (size_t i = 0; i < ns; ++i) {
    base[2 + i] = (x.shape()[2 + i] - 1) * st[i] + ks[i] - pads[i] - pads[i + ns];
    if (base[2 + i] < 1 || x.shape()[2 + i] < 1)
      fail(c, "kernel_shape, strides and pads give an empty unpooled shape for input X " + shape_str(x.shape()));
  }
  require_sane_shape(c, base, "unpooled shape");
  Shape out = base;
  if (const Tensor* os = opt_in(c, 2)) {
    // A larger output_shape pads at the end of each dimension (the node tests' reading of the spec).
    out = int_values(c, *os, "output_shape");
    require_sane_shape(c, out, "output_shape");
    bool ok = out.size() == base.size();
    for (size_t d = 0; ok && d < out.size(); ++d) ok = d < 2 ? out[d] == base[d] : out[d] >= base[d];
    if (!ok)
      fail(c, "output_shape " + shape_str(out) + " does not fit the unpooled shape " + shape_str(base) +
                  " of input X " + shape_str(x.shape()));
  }
  const int64_t total = shape_numel(base);
  const auto iv = ind.to_i64();
  const auto bst = strides_of(base), ost = strides_of(out);
  Tensor r(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  for (size_t i = 0; i < iv.size(); ++i) {
    if (iv[i] < 0 || iv[i] >= total)
      fail(c, "index " + std::to_string(iv[i]) + " is outside the unpooled shape " + shape_str(base));
    int64_t rest = iv[i], dst = 0;
    for (size_t d = 0; d < base.size(); ++d) {
      dst += rest / bst[d] * ost[d];
      rest %= bst[d];
    }
    std::memcpy(r.data() + static_cast<size_t>(dst) * es, x.data() + i * es, es);
  }
  return {std::move(r)};
}

std::vector<Tensor> global_pool(const OpCall& c, bool is_max) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  if (x.rank() < 3) fail(c, "input X of shape " + shape_str(x.shape()) + " needs rank >= 3 (N, C, spatial...)");
  const int64_t N = x.shape()[0], C = x.shape()[1];
  const int64_t plane = dims_product(x.shape(), 2, x.rank());
  const auto v = x.to_f64();
  std::vector<double> r(static_cast<size_t>(N * C));
  for (int64_t i = 0; i < N * C; ++i) {
    double acc = is_max ? -kInf : 0.0;
    for (int64_t k = 0; k < plane; ++k) {
      const double e = v[static_cast<size_t>(i * plane + k)];
      if (!is_max) acc += e;
      else if (std::isnan(e) || e > acc) acc = e;
    }
    r[static_cast<size_t>(i)] = is_max ? acc : acc / static_cast<double>(plane);
  }
  Shape out(x.shape().size(), 1);
  out[0] = N;
  out[1] = C;
  return {from_f64(x.dtype(), out, r)};
}

std::vector<Tensor> op_global_average_pool(const OpCall& c) { return global_pool(c, false); }
std::vector<Tensor> op_global_max_pool(const OpCall& c) { return global_pool(c, true); }

}  // namespace

std::vector<OpEntry> nn_ops() {
  return {
      {"Softmax", op_softmax},
      {"LogSoftmax", op_log_softmax},
      {"MaxPool", op_max_pool},
      {"AveragePool", op_average_pool},
      {"GlobalAveragePool", op_global_average_pool},
      {"GlobalMaxPool", op_global_max_pool},
      {"Hardmax", op_hardmax},
      {"MaxUnpool", op_max_unpool},
  };
}

}  // namespace tessera::reference
