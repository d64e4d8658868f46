// GridSample (opset 16): samples X [N, C, H, W] at the normalised (x, y) positions of a grid
// [N, Ho, Wo, 2] -- bilinear, nearest (ties to even) or bicubic (A = -0.75), with zeros, border or
// reflection padding, align_corners or not. It follows PyTorch's grid_sample, which the spec
// mirrors and the node tests were generated with: bilinear and nearest pad the sampling position,
// bicubic pads each of its 16 taps. Computed in fp64, written in X's dtype.
#include <algorithm>
#include <cmath>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

struct Sampler {
  const double* plane;
  int64_t H, W;
  std::string padding;
  bool align;

  double unnormalize(double g, int64_t size) const {
    return align ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
  }
  static double reflect(double v, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0;
    const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
    v = std::fabs(v - lo);
    const double extra = std::fmod(v, span);
    const auto flips = static_cast<int64_t>(std::floor(v / span));
    return flips % 2 == 0 ? extra + lo : span - extra + lo;
  }
  // The padding mode applied to a coordinate along a dimension of `size`.
  double pad(double v, int64_t size) const {
    const double hi = static_cast<double>(size - 1);
    if (padding == "border") return std::clamp(v, 0.0, hi);
    if (padding == "reflection") {
      v = align ? reflect(v, 0, 2 * hi) : reflect(v, -1, 2 * static_cast<double>(size) - 1);
      return std::clamp(v, 0.0, hi);
    }
    return v;
  }
  // The pixel at integer-valued (y, x); zero outside (and for NaN), checked before any conversion.
  double at(double y, double x) const {
    if (!(y >= 0 && y < static_cast<double>(H) && x >= 0 && x < static_cast<double>(W))) return 0.0;
    return plane[static_cast<int64_t>(y) * W + static_cast<int64_t>(x)];
  }
  double at_padded(double y, double x) const { return at(std::trunc(pad(y, H)), std::trunc(pad(x, W))); }
};

double cubic(double t, double a = -0.75) {
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

std::vector<Tensor> op_grid_sample(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& grid = in(c, 1);
  require_float(c, x, "input X");
  require_float(c, grid, "grid");
  if (x.rank() != 4) fail(c, "input X of shape " + shape_str(x.shape()) + " must be 4-D (N, C, H, W)");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (grid.rank() != 4 || grid.shape()[0] != N || grid.shape()[3] != 2)
    fail(c, "grid of shape " + shape_str(grid.shape()) + " must be [N, H_out, W_out, 2] with N = " + std::to_string(N));
  const std::string mode = attrs(c).get_string("mode", "bilinear");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    fail(c, "attribute 'mode' = '" + mode + "' is not supported", "use bilinear, nearest or bicubic");
  Sampler s{nullptr, H, W, attrs(c).get_string("padding_mode", "zeros"), attrs(c).get_int("align_corners", 0) != 0};
  if (s.padding != "zeros" && s.padding != "border" && s.padding != "reflection")
    fail(c, "attribute 'padding_mode' = '" + s.padding + "' is not supported", "use zeros, border or reflection");
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2];
  const auto xv = x.to_f64(), gv = grid.to_f64();
  std::vector<double> y(static_cast<size_t>(N * C * Ho * Wo));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      s.plane = xv.data() + (n * C + ch) * H * W;
      for (int64_t i = 0; i < Ho * Wo; ++i) {
        const double gx = gv[static_cast<size_t>((n * Ho * Wo + i) * 2)],
                     gy = gv[static_cast<size_t>((n * Ho * Wo + i) * 2 + 1)];
        double ix = s.unnormalize(gx, W), iy = s.unnormalize(gy, H);
        double r;
        if (mode == "bicubic") {
          const double fx = std::floor(ix), fy = std::floor(iy);
          r = 0;
          for (int64_t a = -1; a <= 2; ++a) {
            double row = 0;
            for (int64_t b = -1; b <= 2; ++b)
              row += cubic(ix - fx - static_cast<double>(b)) *
                     s.at_padded(fy + static_cast<double>(a), fx + static_cast<double>(b));
            r += cubic(iy - fy - static_cast<double>(a)) * row;
          }
        } else {
          ix = s.pad(ix, W);
          iy = s.pad(iy, H);
          if (mode == "nearest") {
            r = s.at(std::nearbyint(iy), std::nearbyint(ix));
          } else {
            const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
            r = (1 - ty) * ((1 - tx) * s.at(fy, fx) + tx * s.at(fy, fx + 1)) +
                ty * ((1 - tx) * s.at(fy + 1, fx) + tx * s.at(fy + 1, fx + 1));
          }
        }
        y[static_cast<size_t>((n * C + ch) * Ho * Wo + i)] = r;
      }
    }
  return {from_f64(x.dtype(), {N, C, Ho, Wo}, y)};
}

}  // namespace

std::vector<OpEntry> gridsample_ops() { return {{"GridSample", op_grid_sample}}; }

}  // namespace tessera::reference
