#include "mapper/neuroncore/kernels/tiling.hpp"

#include <algorithm>

namespace tessera::neuroncore {

int64_t Loop::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i < k; ++i) r *= dims[i];
  return r;
}

std::vector<Dim> Loop::free_dims(size_t view, int64_t cn) const {
  std::vector<Dim> d;
  for (size_t i = k; i < dims.size(); ++i)
    d.push_back({static_cast<int32_t>(i == k ? cn : dims[i]), static_cast<int32_t>(strides[view][i])});
  if (d.empty()) d.push_back({1, 1});
  return d;
}

int64_t Loop::free_elems(int64_t cn) const {
  int64_t f = 1;
  for (size_t i = k; i < dims.size(); ++i) f *= i == k ? cn : dims[i];
  return f;
}

namespace {

void split_dim(Loop& l, size_t d, int64_t outer) {
  const int64_t inner = l.dims[d] / outer;
  l.dims[d] = outer;
  l.dims.insert(l.dims.begin() + static_cast<std::ptrdiff_t>(d) + 1, inner);
  for (auto& s : l.strides) {
    const int64_t st = s[d];
    s[d] = st * inner;
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(d) + 1, st);
  }
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

}  // namespace

Loop plan_loop(std::vector<graph::Strided> views, int64_t partitions, int64_t max_free) {
  std::vector<graph::Strided*> ptrs;
  for (auto& v : views) ptrs.push_back(&v);
  graph::coalesce(ptrs);
  Loop l;
  l.dims = views[0].shape;
  for (const auto& v : views) {
    l.strides.push_back(v.strides);
    l.offsets.push_back(v.offset);
  }
  const int64_t total = product(l.dims, 0, l.dims.size());
  // Rows to aim for: every partition when each still gets 256 elements or more.
  const int64_t target = std::min(partitions, std::max<int64_t>(1, total / 256));
  // Elementwise loops may visit dims in any order (every view the same way): when the outermost
  // dim alone gives fewer rows than the target and a later one (not the innermost) gives them,
  // that one becomes the rows, so that a tile's partitions are one run of rows -- one DMA per
  // operand over all of them -- instead of short runs split off several dims ([8, 128, 768] with
  // an operand transposed in its first two dims: 8 runs of 16 partitions per tile, the batch-8
  // BERT layer's residual Add 154 us).
  if (l.dims.size() >= 3 && l.dims[0] < target) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < l.dims.size(); ++i)
      if (l.dims[i] >= target && (best == 0 || l.dims[i] > l.dims[best])) best = i;
    if (best > 0) {
      auto rotate = [&](auto& v) { std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(best), v.begin() + static_cast<std::ptrdiff_t>(best) + 1); };
      rotate(l.dims);
      for (auto& st : l.strides) rotate(st);
    }
  }
  int64_t r = 1;
  while (l.k < l.dims.size() && r < target) {
    const int64_t d = l.dims[l.k];
    if (r * d <= partitions) {
      r *= d;
      ++l.k;
      continue;
    }
    int64_t a = partitions / r;
    while (a >= 2 && d % a) --a;
    if (a < 2) break;
    split_dim(l, l.k, a);
    r *= a;
    ++l.k;
    break;
  }
  // Up to three free dims (a DMA's access pattern has four); the chunked dim's inner dims must fit.
  while (l.dims.size() - l.k > 3) ++l.k;
  while (l.k < l.dims.size() && product(l.dims, l.k + 1, l.dims.size()) > max_free) ++l.k;
  if (l.k < l.dims.size()) l.chunk = std::min(l.dims[l.k], std::max<int64_t>(1, max_free / product(l.dims, l.k + 1, l.dims.size())));
  return l;
}

std::vector<Tile> tiles_of(const Loop& l, int64_t partitions) {
  std::vector<Tile> tiles;
  const int64_t R = l.rows();
  const size_t nv = l.strides.size();
  const int64_t cdim = l.k < l.dims.size() ? l.dims[l.k] : 1;
  for (int64_t r0 = 0; r0 < R; r0 += partitions) {
    const int32_t parts = static_cast<int32_t>(std::min(partitions, R - r0));
    // Runs: consecutive rows along the innermost row dim.
    std::vector<Run> runs;
    for (int64_t r = r0; r < r0 + parts;) {
      std::vector<int64_t> idx(l.k, 0);
      int64_t rem = r;
      for (size_t i = l.k; i-- > 0;) {
        idx[i] = rem % l.dims[i];
        rem /= l.dims[i];
      }
      const int64_t inner_left = l.k == 0 ? 1 : l.dims[l.k - 1] - idx[l.k - 1];
      Run run;
      run.p0 = static_cast<int32_t>(r - r0);
      run.parts = static_cast<int32_t>(std::min<int64_t>(inner_left, r0 + parts - r));
      for (size_t j = 0; j < nv; ++j) {
        int64_t off = l.offsets[j];
        for (size_t i = 0; i < l.k; ++i) off += idx[i] * l.strides[j][i];
        run.offset.push_back(off);
      }
      runs.push_back(std::move(run));
      r += runs.back().parts;
    }
    for (int64_t c0 = 0; c0 < cdim; c0 += l.chunk) {
      Tile t;
      t.parts = parts;
      t.runs = runs;
      t.cn = std::min(l.chunk, cdim - c0);
      for (size_t j = 0; j < nv; ++j) t.col.push_back(l.k < l.dims.size() ? c0 * l.strides[j][l.k] : 0);
      tiles.push_back(std::move(t));
    }
  }
  return tiles;
}

Packed pack(const std::vector<Dim>& hbm_free) {
  Packed p;
  // Dense strides of the kept dims, innermost first.
  std::vector<int32_t> dense(hbm_free.size(), 0);
  int64_t s = 1;
  for (size_t i = hbm_free.size(); i-- > 0;) {
    if (hbm_free[i].stride == 0 && hbm_free[i].num > 1) continue;
    dense[i] = static_cast<int32_t>(s);
    s *= hbm_free[i].num;
  }
  p.elems = s;
  for (size_t i = 0; i < hbm_free.size(); ++i) {
    const bool repeated = hbm_free[i].stride == 0 && hbm_free[i].num > 1;
    p.read.push_back({hbm_free[i].num, repeated ? 0 : dense[i]});
    if (!repeated) {
      p.hbm.push_back(hbm_free[i]);
      p.sbuf.push_back({hbm_free[i].num, dense[i]});
    }
  }
  if (p.hbm.empty()) {
    p.hbm.push_back({1, 1});
    p.sbuf.push_back({1, 1});
  }
  return p;
}

}  // namespace tessera::neuroncore
