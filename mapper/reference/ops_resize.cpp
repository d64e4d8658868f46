// Resize (opsets 10-18) and Upsample: nearest, linear and cubic interpolation, separable over every
// dimension, with the coordinate transformations and nearest rounding modes of the spec. The
// arithmetic follows the ONNX backend tests' reference (onnx/backend/test/case/node/resize.py): the
// output length in the coordinate formulas is scale * input length, neighbours beyond the edges
// repeat the edge value, and exclude_outside renormalises the weights of the neighbours inside.
#include <algorithm>
#include <cmath>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

struct Tap {
  int64_t index;
  double weight;
};

// Per output position of one dimension: the input positions it reads, or nothing (extrapolated).
struct DimPlan {
  std::vector<std::vector<Tap>> taps;
};

struct ResizeSpec {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false;
};

double cubic_weight(double t, double a) {  // Keys' cubic convolution kernel, |t| in [0, 2)
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

DimPlan plan_dim(const OpCall& c, const ResizeSpec& s, int64_t n, int64_t m, double scale, double roi_start,
                 double roi_end) {
  DimPlan p;
  p.taps.resize(static_cast<size_t>(m));
  const double out_len = scale * static_cast<double>(n);
  for (int64_t xo = 0; xo < m; ++xo) {
    const double x = static_cast<double>(xo);
    double xi;
    if (s.coord == "half_pixel") {
      xi = (x + 0.5) / scale - 0.5;
    } else if (s.coord == "pytorch_half_pixel") {
      xi = out_len > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
    } else if (s.coord == "align_corners") {
      xi = out_len == 1 ? 0.0 : x * static_cast<double>(n - 1) / (out_len - 1);
    } else if (s.coord == "asymmetric") {
      xi = x / scale;
    } else if (s.coord == "tf_half_pixel_for_nn") {
      xi = (x + 0.5) / scale;
    } else if (s.coord == "tf_crop_and_resize") {
      const double span = (roi_end - roi_start) * static_cast<double>(n - 1);
      xi = (out_len == 1 ? span / 2 : x * span / (out_len - 1)) + roi_start * static_cast<double>(n - 1);
      if (xi < 0 || xi > static_cast<double>(n - 1)) continue;  // no taps: extrapolation_value
    } else {
      fail(c, "attribute 'coordinate_transformation_mode' = '" + s.coord + "' is not supported",
           "use half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn or tf_crop_and_resize");
    }
    const double fl = std::floor(xi);
    const double r = xi - fl;
    const int64_t base = static_cast<int64_t>(fl);
    std::vector<Tap> taps;
    if (r == 0) {
      taps.push_back({base, 1.0});
    } else if (s.mode == "nearest") {
      bool up;
      if (s.nearest == "round_prefer_floor")
        up = r > 0.5;
      else if (s.nearest == "round_prefer_ceil")
        up = r >= 0.5;
      else if (s.nearest == "floor")
        up = false;
      else if (s.nearest == "ceil")
        up = true;
      else
        fail(c, "attribute 'nearest_mode' = '" + s.nearest + "' is not supported",
             "use round_prefer_floor, round_prefer_ceil, floor or ceil");
      taps.push_back({up ? base + 1 : base, 1.0});
    } else if (s.mode == "linear") {
      taps = {{base, 1 - r}, {base + 1, r}};
    } else {  // cubic
      for (int64_t k = -1; k <= 2; ++k) taps.push_back({base + k, cubic_weight(r - static_cast<double>(k), s.cubic_a)});
    }
    if (s.exclude_outside && taps.size() > 1) {
      double sum = 0;
      for (Tap& t : taps) {
        if (t.index < 0 || t.index >= n) t.weight = 0;
        sum += t.weight;
      }
      for (Tap& t : taps) t.weight /= sum;
    }
    for (Tap& t : taps) t.index = std::clamp<int64_t>(t.index, 0, n - 1);  // edge values beyond the ends
    p.taps[static_cast<size_t>(xo)] = std::move(taps);
  }
  return p;
}

Tensor interpolate(const OpCall& c, const Tensor& x, const ResizeSpec& s, const Shape& out,
                   const std::vector<double>& scales, const std::vector<double>& roi) {
  const size_t r = out.size();
  for (size_t d = 0; d < r; ++d)
    if (x.shape()[d] == 0 && out[d] > 0) fail(c, "cannot resize the empty dimension " + std::to_string(d));
  std::vector<DimPlan> plans;
  for (size_t d = 0; d < r; ++d)
    plans.push_back(
        plan_dim(c, s, x.shape()[d], out[d], scales[d], roi.empty() ? 0.0 : roi[d], roi.empty() ? 1.0 : roi[d + r]));
  const auto v = x.to_f64();
  const auto st = strides_of(x.shape());
  std::vector<double> res(static_cast<size_t>(shape_numel(out)));
  std::vector<int64_t> co(r, 0);
  std::vector<const std::vector<Tap>*> taps(r);
  // Sum over the product of the taps of every dimension (most dimensions have one tap).
  auto accumulate = [&](auto&& self, size_t d, int64_t offset, double w) -> double {
    if (d == r) return w * v[static_cast<size_t>(offset)];
    double sum = 0;
    for (const Tap& t : *taps[d])
      if (t.weight != 0) sum += self(self, d + 1, offset + t.index * st[d], w * t.weight);
    return sum;
  };
  for (size_t i = 0; i < res.size(); ++i) {
    bool extrapolated = false;
    for (size_t d = 0; d < r; ++d) {
      taps[d] = &plans[d].taps[static_cast<size_t>(co[d])];
      extrapolated = extrapolated || taps[d]->empty();
    }
    res[i] = extrapolated ? s.extrapolation : accumulate(accumulate, 0, 0, 1.0);
    for (size_t d = r; d-- > 0;) {
      if (++co[d] < out[d]) break;
      co[d] = 0;
    }
  }
  return to_dtype(x.dtype(), out, res);
}

std::vector<Tensor> op_resize(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const auto& at = attrs(c);
  const int64_t rank = x.rank();
  ResizeSpec s;
  s.mode = at.get_string("mode", "nearest");
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    fail(c, "attribute 'mode' = '" + s.mode + "' is not supported", "use nearest, linear or cubic");
  if (c.opset < 11) {  // Resize-10 is Upsample with scales as an input
    s.coord = "asymmetric";
    s.nearest = "floor";
    if (s.mode == "cubic") fail(c, "mode 'cubic' needs opset 11 or later");
  } else {
    s.coord = at.get_string("coordinate_transformation_mode", "half_pixel");
    s.nearest = at.get_string("nearest_mode", "round_prefer_floor");
    s.cubic_a = at.get_float("cubic_coeff_a", -0.75);
    s.exclude_outside = at.get_int("exclude_outside", 0) != 0;
    s.extrapolation = at.get_float("extrapolation_value", 0.0);
  }
  if (at.get_int("antialias", 0) != 0) fail(c, "attribute 'antialias' = 1 is not supported", "use antialias = 0");
  const std::string policy = at.get_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    fail(c, "attribute 'keep_aspect_ratio_policy' = '" + policy + "' is not supported", "use stretch (give all sizes)");
  std::vector<int64_t> axes;
  for (int64_t a : norm_axes(c, at.get_ints("axes", {}), rank)) axes.push_back(a);
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  const size_t na = axes.size();
  const Tensor* roi_t = c.opset >= 11 ? opt_in(c, 1) : nullptr;
  const Tensor* scales_t = opt_in(c, c.opset >= 11 ? 2 : 1);
  const Tensor* sizes_t = c.opset >= 11 ? opt_in(c, 3) : nullptr;
  if (scales_t && scales_t->numel() == 0) scales_t = nullptr;
  if (sizes_t && sizes_t->numel() == 0) sizes_t = nullptr;
  if (!scales_t == !sizes_t) fail(c, "give exactly one of scales and sizes");
  std::vector<double> scales(static_cast<size_t>(rank), 1.0), roi;
  Shape out = x.shape();
  if (sizes_t) {
    const auto sz = int_values(c, *sizes_t, "sizes");
    if (sz.size() != na) fail(c, "sizes " + shape_str(sz) + " must have " + std::to_string(na) + " values");
    for (size_t i = 0; i < na; ++i) {
      const size_t d = static_cast<size_t>(axes[i]);
      if (sz[i] < 0) fail(c, "sizes " + shape_str(sz) + " has a negative value");
      out[d] = sz[i];
      scales[d] = x.shape()[d] == 0 ? 1.0 : static_cast<double>(sz[i]) / static_cast<double>(x.shape()[d]);
    }
  } else {
    require_float(c, *scales_t, "scales");
    const auto sc = scales_t->to_f64();
    if (sc.size() != na) fail(c, "scales has " + std::to_string(sc.size()) + " values; expected " + std::to_string(na));
    for (size_t i = 0; i < na; ++i) {
      const size_t d = static_cast<size_t>(axes[i]);
      if (!(sc[i] > 0) || sc[i] * static_cast<double>(x.shape()[d]) > 1e9)
        fail(c, "scale " + std::to_string(sc[i]) + " for dimension " + std::to_string(d) + " of input " +
                    shape_str(x.shape()) + " is not positive or too large");
      scales[d] = sc[i];
      out[d] = static_cast<int64_t>(std::floor(sc[i] * static_cast<double>(x.shape()[d])));
    }
  }
  require_sane_shape(c, out, "output shape");
  if (s.coord == "tf_crop_and_resize") {
    if (!roi_t || roi_t->numel() != static_cast<int64_t>(2 * na))
      fail(c, "tf_crop_and_resize needs roi with " + std::to_string(2 * na) + " values (starts, then ends)");
    const auto rv = roi_t->to_f64();
    roi.assign(static_cast<size_t>(2 * rank), 0.0);
    for (int64_t d = 0; d < rank; ++d) roi[static_cast<size_t>(d + rank)] = 1.0;
    for (size_t i = 0; i < na; ++i) {
      roi[static_cast<size_t>(axes[i])] = rv[i];
      roi[static_cast<size_t>(axes[i] + rank)] = rv[i + na];
    }
  }
  return {interpolate(c, x, s, out, scales, roi)};
}

std::vector<Tensor> op_upsample(const OpCall& c) {
  const Tensor& x = in(c, 0);
  ResizeSpec s;
  s.mode = attrs(c).get_string("mode", "nearest");
  if (s.mode != "nearest" && s.mode != "linear")
    fail(c, "attribute 'mode' = '" + s.mode + "' is not supported", "use nearest or linear");
  s.coord = "asymmetric";
  s.nearest = "floor";
  std::vector<double> scales;
  if (c.opset < 9)
    scales = attrs(c).get_floats("scales");
  else
    scales = in(c, 1).to_f64();
  if (static_cast<int64_t>(scales.size()) != x.rank())
    fail(c, "scales has " + std::to_string(scales.size()) + " values for input of shape " + shape_str(x.shape()));
  Shape out = x.shape();
  for (size_t d = 0; d < out.size(); ++d) {
    if (!(scales[d] >= 1) || scales[d] * static_cast<double>(out[d]) > 1e9)
      fail(c, "Upsample scale " + std::to_string(scales[d]) + " is below 1 or too large");
    out[d] = static_cast<int64_t>(std::floor(scales[d] * static_cast<double>(out[d])));
  }
  require_sane_shape(c, out, "output shape");
  return {interpolate(c, x, s, out, scales, {})};
}

}  // namespace

std::vector<OpEntry> resize_ops() { return {{"Resize", op_resize}, {"Upsample", op_upsample}}; }

}  // namespace tessera::reference
