#pragma once
// Strided views of a dense buffer: the data-movement ops that move no data (Transpose, Slice with a
// positive step, Reshape where the strides allow it, Squeeze/Unsqueeze, Expand) are index
// arithmetic on a view. Both compilers read and write tensors through views; a view that cannot
// express an op (a Reshape across a transposed dimension) is where a copy is needed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "isa/tensor.hpp"

namespace tessera::graph {

// Element idx of the view lives at buffer element offset + sum(idx[i] * strides[i]).
// A stride of 0 repeats an element (a broadcast dimension); strides are never negative.
struct Strided {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  static Strided contiguous(const Shape& s);
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return shape_numel(shape); }
  bool is_contiguous() const;  // row-major with no gaps (size-1 dimensions ignored)
  bool has_broadcast() const;  // some dimension of size > 1 has stride 0
  // Buffer elements [lo, hi) the view can touch (hi = lo for an empty view).
  std::pair<int64_t, int64_t> extent() const;
  std::string str() const;  // "[2, 3] strides [3, 1] + 0"
  bool operator==(const Strided&) const = default;
};

// Output dimension i is input dimension perm[i].
Strided permute(const Strided& v, const std::vector<int64_t>& perm);
// A view with the new shape over the same elements in row-major order, if the strides allow it
// (PyTorch's view rules); nullopt when the reshape needs a copy.
std::optional<Strided> reshape(const Strided& v, const Shape& to);
// Elements start, start + step, ... (count of them) along `axis`; step >= 1.
Strided slice(const Strided& v, int64_t axis, int64_t start, int64_t count, int64_t step = 1);
// numpy broadcasting of v to `to` (leading dimensions added, size-1 dimensions repeated).
Strided broadcast_to(const Strided& v, const Shape& to);
// Drops dimension `axis` at `index`.
Strided select(const Strided& v, int64_t axis, int64_t index);

// Merges adjacent dimensions that every view walks as one (each view's stride of the outer equals
// its stride times the size of the inner) and drops size-1 dimensions. All views must have the same
// shape; they keep the same (merged) shape. An empty result means a single element.
void coalesce(std::vector<Strided*> views);

}  // namespace tessera::graph
