#include "mapper/graph/view.hpp"

#include <stdexcept>

namespace tessera::graph {

Strided Strided::contiguous(const Shape& s) {
  Strided v;
  v.shape = s;
  v.strides.assign(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i)
    v.strides[static_cast<size_t>(i)] = v.strides[static_cast<size_t>(i + 1)] * s[static_cast<size_t>(i + 1)];
  return v;
}

bool Strided::is_contiguous() const {
  int64_t expect = 1;
  for (int64_t i = rank() - 1; i >= 0; --i) {
    const auto k = static_cast<size_t>(i);
    if (shape[k] == 1) continue;
    if (strides[k] != expect) return false;
    expect *= shape[k];
  }
  return true;
}

bool Strided::has_broadcast() const {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1 && strides[i] == 0) return true;
  return false;
}

std::pair<int64_t, int64_t> Strided::extent() const {
  if (numel() == 0) return {offset, offset};
  int64_t hi = offset;
  for (size_t i = 0; i < shape.size(); ++i) hi += (shape[i] - 1) * strides[i];
  return {offset, hi + 1};
}

std::string Strided::str() const {
  std::string s = shape_str(shape) + " strides [";
  for (size_t i = 0; i < strides.size(); ++i) s += (i ? ", " : "") + std::to_string(strides[i]);
  return s + "] + " + std::to_string(offset);
}

Strided permute(const Strided& v, const std::vector<int64_t>& perm) {
  if (perm.size() != v.shape.size()) throw std::logic_error("permute: rank mismatch");
  Strided r;
  r.offset = v.offset;
  for (int64_t p : perm) {
    r.shape.push_back(v.shape.at(static_cast<size_t>(p)));
    r.strides.push_back(v.strides.at(static_cast<size_t>(p)));
  }
  return r;
}

std::optional<Strided> reshape(const Strided& v, const Shape& to) {
  if (shape_numel(to) != v.numel()) throw std::logic_error("reshape: element counts differ");
  Strided r;
  r.shape = to;
  r.offset = v.offset;
  r.strides.assign(to.size(), 0);
  if (v.numel() == 0 || v.shape.empty()) {
    r = Strided::contiguous(to);
    r.offset = v.offset;
    return r;
  }
  // at::detail::computeStride: walk chunks of input dimensions that are contiguous with each other
  // and give each chunk's elements to output dimensions of the same total size.
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_base_stride = v.strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = v.rank() - 1; d >= 0; --d) {
    const auto k = static_cast<size_t>(d);
    tensor_numel *= v.shape[k];
    if (d == 0 || (v.shape[k - 1] != 1 && v.strides[k - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<size_t>(view_d)] == 1)) {
        r.strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= to[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = v.strides[k - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return r;
}

Strided slice(const Strided& v, int64_t axis, int64_t start, int64_t count, int64_t step) {
  if (step < 1) throw std::logic_error("slice: step must be >= 1");
  Strided r = v;
  const auto k = static_cast<size_t>(axis);
  r.offset += start * v.strides.at(k);
  r.shape[k] = count;
  r.strides[k] = v.strides[k] * step;
  return r;
}

Strided broadcast_to(const Strided& v, const Shape& to) {
  if (to.size() < v.shape.size()) throw std::logic_error("broadcast_to: target rank is lower");
  Strided r;
  r.offset = v.offset;
  r.shape = to;
  r.strides.assign(to.size(), 0);
  const size_t lead = to.size() - v.shape.size();
  for (size_t i = 0; i < v.shape.size(); ++i) {
    const int64_t n = v.shape[i];
    if (n == to[lead + i]) r.strides[lead + i] = v.strides[i];
    else if (n != 1) throw std::logic_error("broadcast_to: " + shape_str(v.shape) + " does not broadcast to " + shape_str(to));
  }
  return r;
}

Strided select(const Strided& v, int64_t axis, int64_t index) {
  Strided r = v;
  const auto k = static_cast<size_t>(axis);
  r.offset += index * v.strides.at(k);
  r.shape.erase(r.shape.begin() + axis);
  r.strides.erase(r.strides.begin() + axis);
  return r;
}

void coalesce(std::vector<Strided*> views) {
  if (views.empty()) return;
  const Shape shape = views[0]->shape;
  for (auto* v : views)
    if (v->shape != shape) throw std::logic_error("coalesce: shapes differ");
  // Dimensions kept, innermost first while building.
  Shape out_shape;
  std::vector<std::vector<int64_t>> out_strides(views.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const auto k = static_cast<size_t>(d);
    if (shape[k] == 1) continue;
    bool merge = !out_shape.empty();
    for (size_t j = 0; merge && j < views.size(); ++j)
      merge = views[j]->strides[k] == out_strides[j].back() * out_shape.back();
    if (merge) {
      out_shape.back() *= shape[k];
      continue;
    }
    out_shape.push_back(shape[k]);
    for (size_t j = 0; j < views.size(); ++j) out_strides[j].push_back(views[j]->strides[k]);
  }
  for (size_t j = 0; j < views.size(); ++j) {
    views[j]->shape.assign(out_shape.rbegin(), out_shape.rend());
    views[j]->strides.assign(out_strides[j].rbegin(), out_strides[j].rend());
  }
}

}  // namespace tessera::graph
