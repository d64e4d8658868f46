// Indexed reads and writes: GatherElements, GatherND, ScatterElements (and the older Scatter),
// ScatterND, OneHot, NonZero, Compress, Unique. Data moves as bytes, so every dtype works; reductions of
// Scatter* compute in fp64 (floats) or int64 (integers). Negative indices count from the end.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// Row-major coordinates of flat index i in shape s.
std::vector<int64_t> coords_of(int64_t i, const Shape& s) {
  std::vector<int64_t> co(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    co[d] = s[d] == 0 ? 0 : i % s[d];
    i = s[d] == 0 ? 0 : i / s[d];
  }
  return co;
}

// For every element of `indices` (same rank as data), the flat data index it addresses along `axis`
// (other coordinates taken from the element's own position).
std::vector<int64_t> element_targets(const OpCall& c, const Tensor& data, const Tensor& indices, int64_t axis) {
  require_index(c, indices);
  if (indices.rank() != data.rank())
    fail(c,
         "indices of shape " + shape_str(indices.shape()) + " must have the rank of data " + shape_str(data.shape()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape()[static_cast<size_t>(d)] > data.shape()[static_cast<size_t>(d)])
      fail(c, "indices of shape " + shape_str(indices.shape()) + " exceed data " + shape_str(data.shape()) +
                  " in dimension " + std::to_string(d));
  const auto idx = indices.to_i64();
  const auto st = strides_of(data.shape());
  const int64_t dim = data.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> target(idx.size());
  std::vector<int64_t> co(static_cast<size_t>(data.rank()), 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < co.size(); ++d)
      off += (static_cast<int64_t>(d) == axis ? norm_index(c, idx[i], dim) : co[d]) * st[d];
    target[i] = off;
    for (size_t d = co.size(); d-- > 0;) {  // odometer over indices' shape
      if (++co[d] < indices.shape()[d]) break;
      co[d] = 0;
    }
  }
  return target;
}

std::vector<Tensor> op_gather_elements(const OpCall& c) {
  const Tensor& data = in(c, 0);
  const Tensor& indices = in(c, 1);
  if (data.rank() == 0) fail(c, "data must have rank >= 1");
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), data.rank());
  return {take(data, indices.shape(), element_targets(c, data, indices, axis))};
}

// Writes updates into a copy of data at flat element offsets, combining by `reduction`.
Tensor scatter_into(const OpCall& c, const Tensor& data, const Tensor& updates, const std::vector<int64_t>& target,
                    int64_t block) {
  if (updates.dtype() != data.dtype()) require_same_dtype(c, data, updates);
  const std::string red = c.opset >= 16 ? attrs(c).get_string("reduction", "none") : "none";
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    fail(c, "attribute 'reduction' = '" + red + "' is not supported", "use none, add, mul, max or min");
  if (red == "none") {
    Tensor r = data;
    const size_t es = dtype_size(data.dtype()), bytes = static_cast<size_t>(block) * es;
    for (size_t i = 0; i < target.size(); ++i)
      if (bytes) std::memcpy(r.data() + static_cast<size_t>(target[i]) * es, updates.data() + i * bytes, bytes);
    return r;
  }
  auto combine = [&](auto& dv, const auto& uv) {
    for (size_t i = 0; i < target.size(); ++i)
      for (int64_t k = 0; k < block; ++k) {
        auto& d = dv[static_cast<size_t>(target[i] + k)];
        const auto u = uv[i * static_cast<size_t>(block) + static_cast<size_t>(k)];
        if (red == "add")
          d += u;
        else if (red == "mul")
          d *= u;
        else if (red == "max")
          d = std::max(d, u);
        else
          d = std::min(d, u);
      }
  };
  if (is_float(data.dtype())) {
    auto dv = data.to_f64();
    combine(dv, updates.to_f64());
    return from_f64(data.dtype(), data.shape(), dv);
  }
  auto dv = data.to_i64();
  combine(dv, updates.to_i64());
  return from_i64_as(data.dtype(), data.shape(), dv);
}

std::vector<Tensor> op_scatter_elements(const OpCall& c) {
  const Tensor& data = in(c, 0);
  const Tensor& indices = in(c, 1);
  const Tensor& updates = in(c, 2);
  if (data.rank() == 0) fail(c, "data must have rank >= 1");
  if (updates.shape() != indices.shape())
    fail(c, "updates of shape " + shape_str(updates.shape()) + " must have the shape of indices " +
                shape_str(indices.shape()));
  const int64_t axis = norm_axis(c, attrs(c).get_int("axis", 0), data.rank());
  return {scatter_into(c, data, updates, element_targets(c, data, indices, axis), 1)};
}

// Offsets of the slices GatherND/ScatterND address: indices [..., k] index the first k dims of data
// (after batch_dims shared leading dims). Returns the slice offsets and sets `block` to the slice size.
std::vector<int64_t> nd_targets(const OpCall& c, const Tensor& data, const Tensor& indices, int64_t batch,
                                int64_t& block) {
  require_index(c, indices);
  if (indices.rank() < 1) fail(c, "indices must have rank >= 1");
  const int64_t k = indices.shape().back();
  if (batch < 0 || batch >= indices.rank() || batch >= data.rank())
    fail(c, "batch_dims = " + std::to_string(batch) + " must be smaller than the ranks of data and indices");
  for (int64_t d = 0; d < batch; ++d)
    if (data.shape()[static_cast<size_t>(d)] != indices.shape()[static_cast<size_t>(d)])
      fail(c, "the batch dimensions of data " + shape_str(data.shape()) + " and indices " + shape_str(indices.shape()) +
                  " differ");
  if (k < 1 || batch + k > data.rank())
    fail(c, "the last dimension of indices " + shape_str(indices.shape()) + " must be in [1, " +
                std::to_string(data.rank() - batch) + "] for data " + shape_str(data.shape()));
  const int64_t nb = dims_product(data.shape(), 0, batch);
  block = dims_product(data.shape(), batch + k, data.rank());
  const int64_t per_batch_data = dims_product(data.shape(), batch, data.rank());
  const int64_t tuples = nb == 0 ? 0 : indices.numel() / k / nb;
  const auto idx = indices.to_i64();
  const auto st = strides_of(data.shape());
  std::vector<int64_t> r(static_cast<size_t>(nb * tuples));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = b * per_batch_data;
      for (int64_t j = 0; j < k; ++j) {
        const size_t d = static_cast<size_t>(batch + j);
        off += norm_index(c, idx[static_cast<size_t>((b * tuples + t) * k + j)], data.shape()[d]) * st[d];
      }
      r[static_cast<size_t>(b * tuples + t)] = off;
    }
  return r;
}

std::vector<Tensor> op_gather_nd(const OpCall& c) {
  const Tensor& data = in(c, 0);
  const Tensor& indices = in(c, 1);
  const int64_t batch = attrs(c).get_int("batch_dims", 0);
  int64_t block = 0;
  const auto targets = nd_targets(c, data, indices, batch, block);
  Shape out(indices.shape().begin(), indices.shape().end() - 1);
  out.insert(out.end(), data.shape().begin() + batch + indices.shape().back(), data.shape().end());
  Tensor r(data.dtype(), out);
  const size_t bytes = static_cast<size_t>(block) * dtype_size(data.dtype());
  for (size_t i = 0; i < targets.size(); ++i)
    if (bytes)
      std::memcpy(r.data() + i * bytes, data.data() + static_cast<size_t>(targets[i]) * dtype_size(data.dtype()),
                  bytes);
  return {std::move(r)};
}

std::vector<Tensor> op_scatter_nd(const OpCall& c) {
  const Tensor& data = in(c, 0);
  const Tensor& indices = in(c, 1);
  const Tensor& updates = in(c, 2);
  int64_t block = 0;
  const auto targets = nd_targets(c, data, indices, 0, block);
  Shape want(indices.shape().begin(), indices.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + indices.shape().back(), data.shape().end());
  if (updates.shape() != want)
    fail(c, "updates of shape " + shape_str(updates.shape()) + " do not match " + shape_str(want) +
                " (indices.shape[:-1] + data.shape[k:])");
  return {scatter_into(c, data, updates, targets, block)};
}

std::vector<Tensor> op_one_hot(const OpCall& c) {
  const Tensor& indices = in(c, 0);
  const Tensor& values = in(c, 2);
  if (values.numel() != 2) fail(c, "values must hold two elements [off, on], got shape " + shape_str(values.shape()));
  const double dd = f64_scalar(c, in(c, 1), "depth");
  if (!(dd >= 1) || dd > 1e9) fail(c, "depth must be >= 1, got " + std::to_string(dd));
  const int64_t depth = static_cast<int64_t>(dd);
  const int64_t r = indices.rank();
  const int64_t axis_attr = attrs(c).get_int("axis", -1);
  if (axis_attr < -r - 1 || axis_attr > r)
    fail(c, "axis " + std::to_string(axis_attr) + " is out of range for output rank " + std::to_string(r + 1));
  const int64_t axis = axis_attr < 0 ? axis_attr + r + 1 : axis_attr;
  const auto idx = indices.to_f64();  // indices may be any numeric type; fractions truncate
  const int64_t outer = dims_product(indices.shape(), 0, axis), inner = dims_product(indices.shape(), axis, r);
  Shape out = indices.shape();
  out.insert(out.begin() + axis, depth);
  require_sane_shape(c, out, "output shape");
  Tensor res(values.dtype(), out);
  const size_t es = dtype_size(values.dtype());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < depth; ++d)
      for (int64_t i = 0; i < inner; ++i) {
        const double v = idx[static_cast<size_t>(o * inner + i)];
        int64_t k = std::fabs(v) < 1e18 ? static_cast<int64_t>(v) : -1 - depth;  // NaN, huge: out of range
        if (k < 0) k += depth;  // negative indices count from the end; others out of range stay "off"
        const size_t dst = static_cast<size_t>((o * depth + d) * inner + i);
        std::memcpy(res.data() + dst * es, values.data() + (k == d ? es : 0), es);
      }
  return {std::move(res)};
}

std::vector<Tensor> op_non_zero(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const auto v = x.to_f64();
  std::vector<int64_t> hits;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0) hits.push_back(static_cast<int64_t>(i));
  const int64_t r = x.rank(), n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(r * n));
  for (int64_t j = 0; j < n; ++j) {
    const auto co = coords_of(hits[static_cast<size_t>(j)], x.shape());
    for (int64_t d = 0; d < r; ++d) out[static_cast<size_t>(d * n + j)] = co[static_cast<size_t>(d)];
  }
  return {Tensor::from_i64({r, n}, out)};
}

std::vector<Tensor> op_compress(const OpCall& c) {
  const Tensor& x0 = in(c, 0);
  const Tensor& cond = in(c, 1);
  if (cond.dtype() != DType::boolean || cond.rank() != 1)
    fail(c, "condition must be a 1-D bool tensor, got " + std::string(dtype_name(cond.dtype())) + " " +
                shape_str(cond.shape()));
  const bool has_axis = attrs(c).has("axis");
  const Tensor x = has_axis ? x0 : x0.reshaped({x0.numel()});
  if (x.rank() == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = has_axis ? norm_axis(c, attrs(c).get_int("axis", 0), x.rank()) : 0;
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  const auto cv = cond.as<bool>();
  std::vector<int64_t> keep;
  for (size_t i = 0; i < cv.size(); ++i) {
    if (!cv[i]) continue;
    if (static_cast<int64_t>(i) >= dim)
      fail(c, "condition selects position " + std::to_string(i) + " beyond axis " + std::to_string(axis) + " of size " +
                  std::to_string(dim));
    keep.push_back(static_cast<int64_t>(i));
  }
  const int64_t outer = dims_product(x.shape(), 0, axis), inner = dims_product(x.shape(), axis + 1, x.rank());
  Shape out = x.shape();
  out[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  std::vector<int64_t> map;
  map.reserve(static_cast<size_t>(shape_numel(out)));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : keep)
      for (int64_t i = 0; i < inner; ++i) map.push_back((o * dim + k) * inner + i);
  return {take(x, out, map)};
}

std::vector<Tensor> op_unique(const OpCall& c) {
  const Tensor& x0 = in(c, 0);
  const bool has_axis = attrs(c).has("axis");
  const Tensor x = has_axis ? x0 : x0.reshaped({x0.numel()});
  if (x.rank() == 0) fail(c, "input must have rank >= 1");
  const int64_t axis = has_axis ? norm_axis(c, attrs(c).get_int("axis", 0), x.rank()) : 0;
  const bool sorted = attrs(c).get_int("sorted", 1) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis), dim = x.shape()[static_cast<size_t>(axis)];
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  const bool fl = is_float(x.dtype());
  const auto vf = fl ? x.to_f64() : std::vector<double>{};
  const auto vi = fl ? std::vector<int64_t>{} : x.to_i64();
  // Slices along the axis compare element by element, in row-major order.
  auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const size_t pa = static_cast<size_t>((o * dim + a) * inner + i),
                     pb = static_cast<size_t>((o * dim + b) * inner + i);
        if (!fl) {
          if (vi[pa] != vi[pb]) return vi[pa] < vi[pb] ? -1 : 1;
          continue;
        }
        const double u = vf[pa], w = vf[pb];  // NaNs equal each other and sort after numbers (numpy)
        if (std::isnan(u) || std::isnan(w)) {
          if (std::isnan(u) != std::isnan(w)) return std::isnan(u) ? 1 : -1;
        } else if (u != w) {
          return u < w ? -1 : 1;
        }
      }
    return 0;
  };
  std::vector<int64_t> first;  // first occurrence of each unique slice, in output order
  std::vector<int64_t> inverse(static_cast<size_t>(dim));
  for (int64_t j = 0; j < dim; ++j) {
    auto it = std::find_if(first.begin(), first.end(), [&](int64_t f) { return cmp(f, j) == 0; });
    if (it == first.end()) first.push_back(j);
  }
  if (sorted) std::stable_sort(first.begin(), first.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  std::vector<int64_t> counts(first.size(), 0);
  for (int64_t j = 0; j < dim; ++j) {
    const auto k = static_cast<size_t>(
        std::find_if(first.begin(), first.end(), [&](int64_t f) { return cmp(f, j) == 0; }) - first.begin());
    inverse[static_cast<size_t>(j)] = static_cast<int64_t>(k);
    ++counts[k];
  }
  const int64_t n = static_cast<int64_t>(first.size());
  Shape out = x.shape();
  out[static_cast<size_t>(axis)] = n;
  std::vector<int64_t> map;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t f : first)
      for (int64_t i = 0; i < inner; ++i) map.push_back((o * dim + f) * inner + i);
  std::vector<Tensor> r{take(x, out, map)};
  r.push_back(Tensor::from_i64({n}, first));
  r.push_back(Tensor::from_i64({dim}, inverse));
  r.push_back(Tensor::from_i64({n}, counts));
  return r;
}

}  // namespace

std::vector<OpEntry> index_ops() {
  return {
      {"GatherElements", op_gather_elements},
      {"GatherND", op_gather_nd},
      {"ScatterElements", op_scatter_elements},
      {"Scatter", op_scatter_elements},
      {"ScatterND", op_scatter_nd},
      {"OneHot", op_one_hot},
      {"NonZero", op_non_zero},
      {"Compress", op_compress},
      {"Unique", op_unique},
  };
}

}  // namespace tessera::reference
