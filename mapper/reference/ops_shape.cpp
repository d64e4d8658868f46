// Shape and data-movement operators. They move bytes and so work for every dtype: Transpose,
// Reshape, Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Gather, Expand, Identity, plus Shape.
#include <algorithm>
#include <cstring>
#include <limits>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// Axes from input i (newer opsets) or attribute 'axes' (older ones); nullopt-like flag when absent.
std::vector<int64_t> axes_from(const OpCall& c, size_t input, bool& given) {
  if (const Tensor* t = opt_in(c, input)) {
    given = true;
    return int_values(c, *t, "axes");
  }
  given = attrs(c).has("axes");
  return attrs(c).get_ints("axes", {});
}

std::vector<Tensor> op_identity(const OpCall& c) { return {in(c, 0)}; }

std::vector<Tensor> op_transpose(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = r - 1 - i;
  perm = attrs(c).get_ints("perm", perm);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int64_t>(perm.size()) == r;
  for (int64_t i = 0; ok && i < r; ++i) ok = sorted[static_cast<size_t>(i)] == i;
  if (!ok)
    fail(c, "attribute 'perm' " + shape_str(perm) + " is not a permutation of the axes of input " + shape_str(x.shape()));
  const auto in_st = strides_of(x.shape());
  Shape out(static_cast<size_t>(r));
  std::vector<int64_t> st(static_cast<size_t>(r));
  for (size_t i = 0; i < perm.size(); ++i) {
    out[i] = x.shape()[static_cast<size_t>(perm[i])];
    st[i] = in_st[static_cast<size_t>(perm[i])];
  }
  return {take(x, out, strided_map(out, st, 0))};
}

std::vector<Tensor> op_reshape(const OpCall& c) {
  const Tensor& x = in(c, 0);
  std::vector<int64_t> spec;
  if (c.opset < 5 && attrs(c).has("shape")) spec = attrs(c).get_ints("shape");
  else spec = int_values(c, in(c, 1), "shape");
  const bool allowzero = attrs(c).get_int("allowzero", 0) != 0;
  Shape out(spec.size());
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      if (i >= x.shape().size())
        fail(c, "shape " + shape_str(spec) + " copies dimension " + std::to_string(i) + " (0) but input " +
                    shape_str(x.shape()) + " has rank " + std::to_string(x.rank()));
      d = x.shape()[i];
    } else if (d == -1) {
      if (infer >= 0) fail(c, "shape " + shape_str(spec) + " has more than one -1", "at most one dimension may be inferred");
      infer = static_cast<int64_t>(i);
      continue;
    } else if (d < -1) {
      fail(c, "shape " + shape_str(spec) + " has an invalid dimension " + std::to_string(d));
    }
    out[i] = d;
    if (__builtin_mul_overflow(known, d, &known))
      fail(c, "shape " + shape_str(spec) + " has more elements than a 64-bit count holds");
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      fail(c, "cannot reshape input of shape " + shape_str(x.shape()) + " to " + shape_str(spec) +
                  ": the -1 dimension cannot be inferred");
    out[static_cast<size_t>(infer)] = x.numel() / known;
  }
  if (shape_numel(out) != x.numel())
    fail(c, "cannot reshape input of shape " + shape_str(x.shape()) + " (" + std::to_string(x.numel()) +
                " elements) to " + shape_str(spec) + " (" + std::to_string(shape_numel(out)) + " elements)",
         "the element counts must match");
  return {x.reshaped(out)};
}

std::vector<Tensor> op_flatten(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  int64_t axis = attrs(c).get_int("axis", 1);
  if (axis < -r || axis > r)
    fail(c, "axis " + std::to_string(axis) + " is out of range for input of shape " + shape_str(x.shape()),
         "use a value in [" + std::to_string(-r) + ", " + std::to_string(r) + "]");
  if (axis < 0) axis += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[static_cast<size_t>(i)];
  const int64_t inner = outer == 0 ? shape_numel(Shape(x.shape().begin() + axis, x.shape().end())) : x.numel() / outer;
  return {x.reshaped({outer, inner})};
}

std::vector<Tensor> op_squeeze(const OpCall& c) {
  const Tensor& x = in(c, 0);
  bool given = false;
  const auto raw = axes_from(c, 1, given);
  const int64_t r = x.rank();
  std::vector<bool> drop(static_cast<size_t>(r), false);
  if (raw.empty()) {
    for (int64_t i = 0; i < r; ++i) drop[static_cast<size_t>(i)] = x.shape()[static_cast<size_t>(i)] == 1;
  } else {
    for (int64_t a : norm_axes(c, raw, r)) {
      if (x.shape()[static_cast<size_t>(a)] != 1)
        fail(c, "cannot squeeze axis " + std::to_string(a) + " of input " + shape_str(x.shape()) + ": its size is not 1");
      drop[static_cast<size_t>(a)] = true;
    }
  }
  Shape out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[static_cast<size_t>(i)]) out.push_back(x.shape()[static_cast<size_t>(i)]);
  return {x.reshaped(out)};
}

std::vector<Tensor> op_unsqueeze(const OpCall& c) {
  const Tensor& x = in(c, 0);
  bool given = false;
  const auto raw = axes_from(c, 1, given);
  if (!given) fail(c, "axes are missing", c.opset >= 13 ? "pass axes as the second input" : "set attribute 'axes'");
  const int64_t r = x.rank() + static_cast<int64_t>(raw.size());
  const auto axes = norm_axes(c, raw, r);
  Shape out(static_cast<size_t>(r), 1);
  std::vector<bool> ins(static_cast<size_t>(r), false);
  for (int64_t a : axes) ins[static_cast<size_t>(a)] = true;
  size_t k = 0;
  for (int64_t i = 0; i < r; ++i)
    if (!ins[static_cast<size_t>(i)]) out[static_cast<size_t>(i)] = x.shape()[k++];
  return {x.reshaped(out)};
}

std::vector<Tensor> op_concat(const OpCall& c) {
  if (c.inputs.empty()) fail(c, "Concat needs at least one input");
  const Tensor& first = in(c, 0);
  if (!attrs(c).has("axis")) fail(c, "required attribute 'axis' is missing");
  const int64_t r = first.rank();
  if (r == 0) fail(c, "Concat inputs must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), r);
  Shape out = first.shape();
  out[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = in(c, i);
    if (t.dtype() != first.dtype()) require_same_dtype(c, first, t);
    bool ok = t.rank() == r;
    for (int64_t d = 0; ok && d < r; ++d)
      ok = d == axis || t.shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
    if (!ok)
      fail(c, "input " + std::to_string(i) + " of shape " + shape_str(t.shape()) + " does not match input 0 of shape " +
                  shape_str(first.shape()) + " outside axis " + std::to_string(axis));
    out[static_cast<size_t>(axis)] += t.shape()[static_cast<size_t>(axis)];
  }
  Tensor r_t(first.dtype(), out);
  const size_t es = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < r; ++d) inner *= out[static_cast<size_t>(d)];
  const size_t out_row = static_cast<size_t>(out[static_cast<size_t>(axis)] * inner) * es;
  size_t col = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = *c.inputs[i];
    const size_t row = static_cast<size_t>(t.shape()[static_cast<size_t>(axis)] * inner) * es;
    for (int64_t o = 0; o < outer; ++o)
      if (row) std::memcpy(r_t.data() + static_cast<size_t>(o) * out_row + col, t.data() + static_cast<size_t>(o) * row, row);
    col += row;
  }
  return {std::move(r_t)};
}

std::vector<Tensor> op_split(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  if (r == 0) fail(c, "Split input must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), r);
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  if (const Tensor* s = opt_in(c, 1)) sizes = int_values(c, *s, "split");
  else sizes = attrs(c).get_ints("split", {});
  if (sizes.empty()) {
    const int64_t n = attrs(c).get_int("num_outputs", static_cast<int64_t>(c.num_outputs));
    if (n < 1) fail(c, "number of outputs must be >= 1");
    const int64_t chunk = (dim + n - 1) / n;  // opset 18 rule: the last chunk may be smaller
    if (dim % n != 0 && chunk * (n - 1) >= dim)
      fail(c, "axis " + std::to_string(axis) + " of input " + shape_str(x.shape()) + " cannot be split into " +
                  std::to_string(n) + " parts");
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::min(chunk, dim - chunk * i));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(c, "split sizes " + shape_str(sizes) + " contain a negative value");
    total += s;
  }
  if (total != dim)
    fail(c, "split sizes " + shape_str(sizes) + " sum to " + std::to_string(total) + " but axis " +
                std::to_string(axis) + " of input " + shape_str(x.shape()) + " has size " + std::to_string(dim));
  if (sizes.size() != c.num_outputs)
    fail(c, "split produces " + std::to_string(sizes.size()) + " outputs but the node has " +
                std::to_string(c.num_outputs));
  const size_t es = dtype_size(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  const size_t in_row = static_cast<size_t>(dim * inner) * es;
  std::vector<Tensor> outs;
  size_t col = 0;
  for (int64_t s : sizes) {
    Shape os = x.shape();
    os[static_cast<size_t>(axis)] = s;
    Tensor t(x.dtype(), os);
    const size_t row = static_cast<size_t>(s * inner) * es;
    for (int64_t o = 0; o < outer; ++o)
      if (row) std::memcpy(t.data() + static_cast<size_t>(o) * row, x.data() + static_cast<size_t>(o) * in_row + col, row);
    col += row;
    outs.push_back(std::move(t));
  }
  return outs;
}

std::vector<Tensor> op_slice(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  bool have_axes = false;
  if (c.opset < 10) {
    starts = attrs(c).get_ints("starts");
    ends = attrs(c).get_ints("ends");
    have_axes = attrs(c).has("axes");
    axes = attrs(c).get_ints("axes");
  } else {
    starts = int_values(c, in(c, 1), "starts");
    ends = int_values(c, in(c, 2), "ends");
    if (const Tensor* a = opt_in(c, 3)) {
      have_axes = true;
      axes = int_values(c, *a, "axes");
    }
    if (const Tensor* s = opt_in(c, 4)) steps = int_values(c, *s, "steps");
  }
  if (!have_axes)
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(c, "starts " + shape_str(starts) + ", ends " + shape_str(ends) + ", axes " + shape_str(axes) + " and steps " +
                shape_str(steps) + " must have the same length");
  const auto na = norm_axes(c, axes, r);
  const auto in_st = strides_of(x.shape());
  Shape out = x.shape();
  std::vector<int64_t> st = in_st;
  int64_t offset = 0;
  for (size_t i = 0; i < na.size(); ++i) {
    const size_t a = static_cast<size_t>(na[i]);
    const int64_t dim = x.shape()[a], step = steps[i];
    if (step == 0) fail(c, "steps must not be 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (dim == 0) {
      len = 0;
    } else if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    out[a] = len;
    st[a] = in_st[a] * step;
    if (len > 0) offset += s * in_st[a];
  }
  if (shape_numel(out) == 0) return {Tensor(x.dtype(), out)};
  return {take(x, out, strided_map(out, st, offset))};
}

std::vector<Tensor> op_gather(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& ind = in(c, 1);
  if (is_float(ind.dtype()) || ind.dtype() == DType::boolean)
    fail(c, "indices have dtype " + std::string(dtype_name(ind.dtype())) + ", expected int32 or int64");
  const int64_t r = x.rank();
  if (r == 0) fail(c, "Gather data must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), r);
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  auto idx = ind.to_i64();
  for (int64_t& k : idx) {
    if (k < -dim || k >= dim)
      fail(c, "index " + std::to_string(k) + " is out of range for axis " + std::to_string(axis) + " of data " +
                  shape_str(x.shape()));
    if (k < 0) k += dim;
  }
  Shape out(x.shape().begin(), x.shape().begin() + axis);
  out.insert(out.end(), ind.shape().begin(), ind.shape().end());
  out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  const size_t es = dtype_size(x.dtype());
  const size_t blk = static_cast<size_t>(inner) * es;
  Tensor t(x.dtype(), out);
  std::byte* dst = t.data();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : idx) {
      if (blk) std::memcpy(dst, x.data() + static_cast<size_t>(o * dim + k) * blk, blk);
      dst += blk;
    }
  return {std::move(t)};
}

std::vector<Tensor> op_expand(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const auto spec = int_values(c, in(c, 1), "shape");
  for (int64_t d : spec)
    if (d < 0) fail(c, "shape " + shape_str(spec) + " has a negative dimension");
  const Shape out = broadcast_shapes(c, x.shape(), spec);
  require_sane_shape(c, out, "output shape");
  return {take(x, out, broadcast_map(x.shape(), out))};
}

std::vector<Tensor> op_shape(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const int64_t r = x.rank();
  int64_t s = attrs(c).get_int("start", 0), e = attrs(c).get_int("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  std::vector<int64_t> v;
  for (int64_t i = s; i < e; ++i) v.push_back(x.shape()[static_cast<size_t>(i)]);
  const int64_t n = static_cast<int64_t>(v.size());
  return {Tensor::from_i64({n}, v)};
}

}  // namespace

std::vector<OpEntry> shape_ops() {
  return {
      {"Identity", op_identity}, {"Transpose", op_transpose}, {"Reshape", op_reshape},
      {"Flatten", op_flatten},   {"Squeeze", op_squeeze},     {"Unsqueeze", op_unsqueeze},
      {"Concat", op_concat},     {"Split", op_split},         {"Slice", op_slice},
      {"Gather", op_gather},     {"Expand", op_expand},       {"Shape", op_shape},
  };
}

}  // namespace tessera::reference
