// Data-movement operators that build a new layout: Tile, Pad (constant, reflect, edge; negative pads
// crop), DepthToSpace, SpaceToDepth, Trilu, ReverseSequence. They move bytes, so every dtype works.
#include <algorithm>
#include <cstring>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

std::vector<Tensor> op_tile(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const auto reps = int_values(c, in(c, 1), "repeats");
  if (static_cast<int64_t>(reps.size()) != x.rank())
    fail(c, "repeats " + shape_str(reps) + " must have one value per dimension of input " + shape_str(x.shape()));
  Shape out = x.shape();
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) fail(c, "repeats " + shape_str(reps) + " has a negative value");
    out[d] *= reps[d];
  }
  require_sane_shape(c, out, "output shape");
  const auto st = strides_of(x.shape());
  std::vector<int64_t> map(static_cast<size_t>(shape_numel(out)));
  std::vector<int64_t> co(out.size(), 0);
  for (size_t i = 0; i < map.size(); ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < co.size(); ++d) src += (co[d] % x.shape()[d]) * st[d];
    map[i] = src;
    for (size_t d = co.size(); d-- > 0;) {
      if (++co[d] < out[d]) break;
      co[d] = 0;
    }
  }
  return {take(x, out, map)};
}

// Source index along one dimension of size n for padded position p (p < 0 or p >= n outside);
// -1 means "the constant".
int64_t pad_source(int64_t p, int64_t n, const std::string& mode) {
  if (p >= 0 && p < n) return p;
  if (mode == "constant") return -1;
  if (mode == "edge") return p < 0 ? 0 : n - 1;
  if (n == 1) return 0;  // reflect: numpy's mode="reflect" (the edge is not repeated)
  const int64_t period = 2 * (n - 1);
  int64_t q = p % period;
  if (q < 0) q += period;
  return q < n ? q : period - q;
}

std::vector<Tensor> op_pad(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  const std::string mode = attrs(c).get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    fail(c, "attribute 'mode' = '" + mode + "' is not supported", "use constant, reflect or edge");
  std::vector<int64_t> pads;
  Tensor value(x.dtype(), {});
  if (c.opset < 11) {
    pads = attrs(c).get_ints(c.opset < 2 ? "paddings" : "pads");
    value = Tensor::scalar_f32(static_cast<float>(attrs(c).get_float("value", 0.0))).cast(x.dtype());
  } else {
    pads = int_values(c, in(c, 1), "pads");
    if (const Tensor* v = opt_in(c, 2)) {
      if (v->numel() != 1) fail(c, "constant_value must hold one value, got shape " + shape_str(v->shape()));
      if (v->dtype() != x.dtype()) require_same_dtype(c, x, *v);
      value = v->reshaped({});
    }
  }
  std::vector<int64_t> axes;
  if (const Tensor* a = c.opset >= 18 ? opt_in(c, 3) : nullptr)
    axes = norm_axes(c, int_values(c, *a, "axes"), r);
  else
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  const size_t na = axes.size();
  if (pads.size() != 2 * na)
    fail(c, "pads " + shape_str(pads) + " must have 2 values per padded axis (" + std::to_string(2 * na) + ")",
         "pads are [begin_0, begin_1, ..., end_0, end_1, ...]");
  std::vector<int64_t> pb(static_cast<size_t>(r), 0), pe(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < na; ++i) {
    pb[static_cast<size_t>(axes[i])] = pads[i];
    pe[static_cast<size_t>(axes[i])] = pads[i + na];
  }
  Shape out = x.shape();
  for (size_t d = 0; d < out.size(); ++d) {
    out[d] += pb[d] + pe[d];
    if (out[d] < 0)
      fail(c, "pads " + shape_str(pads) + " remove more than dimension " + std::to_string(d) + " of input " +
                  shape_str(x.shape()));
    if (mode != "constant" && x.shape()[d] == 0 && out[d] > 0)
      fail(c, "cannot pad the empty dimension " + std::to_string(d) + " in " + mode + " mode");
  }
  require_sane_shape(c, out, "output shape");
  const auto st = strides_of(x.shape());
  const size_t es = dtype_size(x.dtype());
  Tensor res(x.dtype(), out);
  std::vector<int64_t> co(out.size(), 0);
  const int64_t n = shape_numel(out);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < co.size() && src >= 0; ++d) {
      const int64_t s = pad_source(co[d] - pb[d], x.shape()[d], mode);
      src = s < 0 ? -1 : src + s * st[d];
    }
    std::memcpy(res.data() + static_cast<size_t>(i) * es,
                src < 0 ? value.data() : x.data() + static_cast<size_t>(src) * es, es);
    for (size_t d = co.size(); d-- > 0;) {
      if (++co[d] < out[d]) break;
      co[d] = 0;
    }
  }
  return {std::move(res)};
}

// x viewed as `view` (same elements), permuted by `perm`, laid out as `out`.
Tensor permuted(const Tensor& x, const Shape& view, const std::vector<int64_t>& perm, const Shape& out) {
  const auto st = strides_of(view);
  Shape ps(perm.size());
  std::vector<int64_t> pst(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    ps[i] = view[static_cast<size_t>(perm[i])];
    pst[i] = st[static_cast<size_t>(perm[i])];
  }
  return take(x, ps, strided_map(ps, pst, 0)).reshaped(out);
}

std::vector<Tensor> space_depth(const OpCall& c, bool to_space) {
  const Tensor& x = in(c, 0);
  if (x.rank() != 4) fail(c, "input of shape " + shape_str(x.shape()) + " must be 4-D (N, C, H, W)");
  if (!attrs(c).has("blocksize")) fail(c, "required attribute 'blocksize' is missing");
  const int64_t b = attrs(c).get_int("blocksize", 1);
  if (b < 1 || b > 65536) fail(c, "attribute 'blocksize' must be in [1, 65536], got " + std::to_string(b));
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (!to_space) {
    if (H % b || W % b)
      fail(c, "H and W of input " + shape_str(x.shape()) + " must be divisible by blocksize " + std::to_string(b));
    return {permuted(x, {N, C, H / b, b, W / b, b}, {0, 3, 5, 1, 2, 4}, {N, C * b * b, H / b, W / b})};
  }
  if (C % (b * b))
    fail(c, "C of input " + shape_str(x.shape()) + " must be divisible by blocksize^2 = " + std::to_string(b * b));
  const std::string mode = attrs(c).get_string("mode", "DCR");
  const Shape out{N, C / (b * b), H * b, W * b};
  if (mode == "DCR") return {permuted(x, {N, b, b, C / (b * b), H, W}, {0, 3, 4, 1, 5, 2}, out)};
  if (mode == "CRD") return {permuted(x, {N, C / (b * b), b, b, H, W}, {0, 1, 4, 2, 5, 3}, out)};
  fail(c, "attribute 'mode' = '" + mode + "' is not supported", "use DCR or CRD");
}

std::vector<Tensor> op_depth_to_space(const OpCall& c) { return space_depth(c, true); }
std::vector<Tensor> op_space_to_depth(const OpCall& c) { return space_depth(c, false); }

std::vector<Tensor> op_trilu(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.rank() < 2) fail(c, "input of shape " + shape_str(x.shape()) + " must have rank >= 2");
  const int64_t k = opt_in(c, 1) ? int_scalar(c, in(c, 1), "k") : 0;
  const bool upper = attrs(c).get_int("upper", 1) != 0;
  const int64_t rows = x.shape()[static_cast<size_t>(x.rank() - 2)], cols = x.shape().back();
  Tensor r = x;
  const size_t es = dtype_size(x.dtype());
  const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? j - i >= k : j - i <= k;
        if (!keep) std::memset(r.data() + static_cast<size_t>((m * rows + i) * cols + j) * es, 0, es);
      }
  return {std::move(r)};
}

std::vector<Tensor> op_reverse_sequence(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.rank() < 2) fail(c, "input of shape " + shape_str(x.shape()) + " must have rank >= 2");
  const int64_t time = attrs(c).get_int("time_axis", 0), batch = attrs(c).get_int("batch_axis", 1);
  if (!((time == 0 && batch == 1) || (time == 1 && batch == 0)))
    fail(c, "time_axis = " + std::to_string(time) + " and batch_axis = " + std::to_string(batch) + " are not supported",
         "the spec allows (0, 1) and (1, 0)");
  const auto lens = int_values(c, in(c, 1), "sequence_lens");
  const int64_t T = x.shape()[static_cast<size_t>(time)], B = x.shape()[static_cast<size_t>(batch)];
  if (static_cast<int64_t>(lens.size()) != B)
    fail(c, "sequence_lens has " + std::to_string(lens.size()) + " values for a batch of " + std::to_string(B));
  const auto st = strides_of(x.shape());
  const int64_t inner = dims_product(x.shape(), 2, x.rank());
  std::vector<int64_t> map(static_cast<size_t>(x.numel()));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = lens[static_cast<size_t>(b)];
      if (len < 0 || len > T)
        fail(c, "sequence length " + std::to_string(len) + " is outside [0, " + std::to_string(T) + "]");
      const int64_t src_t = t < len ? len - 1 - t : t;
      const int64_t dst = t * st[static_cast<size_t>(time)] + b * st[static_cast<size_t>(batch)];
      const int64_t src = src_t * st[static_cast<size_t>(time)] + b * st[static_cast<size_t>(batch)];
      for (int64_t i = 0; i < inner; ++i) map[static_cast<size_t>(dst + i)] = src + i;
    }
  return {take(x, x.shape(), map)};
}

}  // namespace

std::vector<OpEntry> layout_ops() {
  return {
      {"Tile", op_tile},
      {"Pad", op_pad},
      {"DepthToSpace", op_depth_to_space},
      {"SpaceToDepth", op_space_to_depth},
      {"Trilu", op_trilu},
      {"ReverseSequence", op_reverse_sequence},
  };
}

}  // namespace tessera::reference
