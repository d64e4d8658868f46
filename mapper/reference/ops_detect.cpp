// NonMaxSuppression and RoiAlign.
// NonMaxSuppression (opsets 10-11): per batch and class, boxes whose score exceeds score_threshold
// are taken greedily in decreasing score order (ties by box index), each suppressing the later ones
// whose IoU with it exceeds iou_threshold, up to max_output_boxes_per_class. Boxes are corners
// [y1, x1, y2, x2] in either order (center_point_box 0) or [x_center, y_center, width, height].
// RoiAlign (opsets 10, 16): average (or max) of bilinear samples on a regular grid in each output
// bin of each region, following the sampling rules of onnxruntime and torchvision's roi_align
// (samples more than one pixel outside count as 0; near the edge they clamp to it).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

struct Box {
  double y1, x1, y2, x2;
};

double iou(const Box& a, const Box& b) {
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  const double uni = (a.y2 - a.y1) * (a.x2 - a.x1) + (b.y2 - b.y1) * (b.x2 - b.x1) - inter;
  return uni > 0 ? inter / uni : 0;
}

std::vector<Tensor> op_non_max_suppression(const OpCall& c) {
  const Tensor& boxes = in(c, 0);
  const Tensor& scores = in(c, 1);
  require_float(c, boxes, "boxes");
  require_float(c, scores, "scores");
  if (boxes.rank() != 3 || boxes.shape()[2] != 4)
    fail(c, "boxes of shape " + shape_str(boxes.shape()) + " must be [batches, boxes, 4]");
  const int64_t B = boxes.shape()[0], S = boxes.shape()[1];
  if (scores.rank() != 3 || scores.shape()[0] != B || scores.shape()[2] != S)
    fail(c, "scores of shape " + shape_str(scores.shape()) + " must be [" + std::to_string(B) + ", classes, " +
                std::to_string(S) + "]");
  const int64_t classes = scores.shape()[1];
  const int64_t max_out =
      opt_in(c, 2) && opt_in(c, 2)->numel() > 0 ? int_scalar(c, in(c, 2), "max_output_boxes_per_class") : 0;
  const double iou_max = opt_in(c, 3) && opt_in(c, 3)->numel() > 0 ? f64_scalar(c, in(c, 3), "iou_threshold") : 0.0;
  const bool has_min_score = opt_in(c, 4) && opt_in(c, 4)->numel() > 0;
  const double min_score = has_min_score ? f64_scalar(c, in(c, 4), "score_threshold") : 0.0;
  if (iou_max < 0 || iou_max > 1) fail(c, "iou_threshold " + std::to_string(iou_max) + " is outside [0, 1]");
  const bool center = attrs(c).get_int("center_point_box", 0) != 0;
  const auto bv = boxes.to_f64(), sv = scores.to_f64();
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Box> bx(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) {
      const double* p = bv.data() + (b * S + i) * 4;
      if (center)
        bx[static_cast<size_t>(i)] = {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
      else
        bx[static_cast<size_t>(i)] = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
                                      std::max(p[1], p[3])};
    }
    for (int64_t k = 0; k < classes; ++k) {
      const double* sc = sv.data() + (b * classes + k) * S;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < S; ++i)
        if (!has_min_score || sc[i] > min_score) order.push_back(i);
      std::stable_sort(
          order.begin(), order.end(),  // decreasing score; a NaN score sorts last
          [&](int64_t p, int64_t q) { return !std::isnan(sc[p]) && (std::isnan(sc[q]) || sc[p] > sc[q]); });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool suppressed = false;
        for (int64_t j : kept)
          suppressed = suppressed || iou(bx[static_cast<size_t>(i)], bx[static_cast<size_t>(j)]) > iou_max;
        if (suppressed) continue;
        kept.push_back(i);
        selected.insert(selected.end(), {b, k, i});
      }
    }
  }
  return {Tensor::from_i64({static_cast<int64_t>(selected.size() / 3), 3}, selected)};
}

// Bilinear sample of a [H, W] plane at (y, x), with RoiAlign's edge rules.
double roi_sample(const double* plane, int64_t H, int64_t W, double y, double x) {
  if (!(y >= -1.0 && y <= static_cast<double>(H) && x >= -1.0 && x <= static_cast<double>(W))) return 0;  // NaN too
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  auto y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= H - 1) y0 = y1 = H - 1, y = static_cast<double>(y0);
  if (x0 >= W - 1) x0 = x1 = W - 1, x = static_cast<double>(x0);
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0);
  return (1 - ly) * ((1 - lx) * plane[y0 * W + x0] + lx * plane[y0 * W + x1]) +
         ly * ((1 - lx) * plane[y1 * W + x0] + lx * plane[y1 * W + x1]);
}

std::vector<Tensor> op_roi_align(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& rois = in(c, 1);
  const Tensor& bidx = in(c, 2);
  require_float(c, x, "input X");
  require_float(c, rois, "rois");
  require_index(c, bidx, "batch_indices");
  if (x.rank() != 4) fail(c, "input X of shape " + shape_str(x.shape()) + " must be 4-D (N, C, H, W)");
  const int64_t R = rois.rank() == 2 ? rois.shape()[0] : -1;
  if (R < 0 || rois.shape()[1] != 4 || bidx.rank() != 1 || bidx.numel() != R)
    fail(c, "rois " + shape_str(rois.shape()) + " and batch_indices " + shape_str(bidx.shape()) +
                " must be [R, 4] and [R]");
  const auto& at = attrs(c);
  const std::string mode = at.get_string("mode", "avg");
  if (mode != "avg" && mode != "max") fail(c, "attribute 'mode' = '" + mode + "' is not supported", "use avg or max");
  const std::string ctm =
      c.opset >= 16 ? at.get_string("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    fail(c, "attribute 'coordinate_transformation_mode' = '" + ctm + "' is not supported",
         "use half_pixel or output_half_pixel");
  const bool half = ctm == "half_pixel";
  const int64_t ph = at.get_int("output_height", 1), pw = at.get_int("output_width", 1);
  const int64_t ratio = at.get_int("sampling_ratio", 0);
  const double scale = at.get_float("spatial_scale", 1.0);
  if (ph < 1 || pw < 1 || ratio < 0) fail(c, "output_height and output_width must be >= 1, sampling_ratio >= 0");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const auto xv = x.to_f64(), rv = rois.to_f64();
  const auto bv = bidx.to_i64();
  std::vector<double> y(static_cast<size_t>(R * C * ph * pw));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = bv[static_cast<size_t>(r)];
    if (n < 0 || n >= N) fail(c, "batch index " + std::to_string(n) + " is outside the batch of " + std::to_string(N));
    const double* box = rv.data() + r * 4;
    const double off = half ? 0.5 : 0.0;
    const double x0 = box[0] * scale - off, y0 = box[1] * scale - off;
    double rw = box[2] * scale - off - x0, rh = box[3] * scale - off - y0;
    if (!half) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    if (!std::isfinite(rw) || !std::isfinite(rh) || rh / static_cast<double>(ph) > 1e4 ||
        rw / static_cast<double>(pw) > 1e4)
      fail(c, "region " + std::to_string(r) + " is not finite or far larger than the input " + shape_str(x.shape()));
    const double bh = rh / static_cast<double>(ph), bw = rw / static_cast<double>(pw);
    const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(ph)));
    const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(pw)));
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    for (int64_t ch = 0; ch < C; ++ch) {
      const double* plane = xv.data() + (n * C + ch) * H * W;
      for (int64_t i = 0; i < ph; ++i)
        for (int64_t j = 0; j < pw; ++j) {
          double acc = mode == "max" ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t a = 0; a < gh; ++a)
            for (int64_t b = 0; b < gw; ++b) {
              const double sy =
                  y0 + static_cast<double>(i) * bh + (static_cast<double>(a) + 0.5) * bh / static_cast<double>(gh);
              const double sx =
                  x0 + static_cast<double>(j) * bw + (static_cast<double>(b) + 0.5) * bw / static_cast<double>(gw);
              const double v = roi_sample(plane, H, W, sy, sx);
              acc = mode == "max" ? std::max(acc, v) : acc + v;
            }
          y[static_cast<size_t>(((r * C + ch) * ph + i) * pw + j)] =
              mode == "max" ? (gh * gw > 0 ? acc : 0.0) : acc / count;
        }
    }
  }
  return {from_f64(x.dtype(), {R, C, ph, pw}, y)};
}

}  // namespace

std::vector<OpEntry> detect_ops() {
  return {{"NonMaxSuppression", op_non_max_suppression}, {"RoiAlign", op_roi_align}};
}

}  // namespace tessera::reference
