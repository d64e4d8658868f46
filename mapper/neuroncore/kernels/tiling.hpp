#pragma once
// Tiles of an elementwise loop: views of one shape (view 0 the output, the others its operands
// broadcast to it) walked as rows on the partitions and up to `max_free` elements per partition.
// After coalescing, dims [0, k) are rows and dims [k, n) the free dims; dim k is cut into chunks
// when the free dims hold more than max_free elements. A tile is up to 128 consecutive rows; its
// rows are loaded by one DMA per run of rows along the innermost row dim (one stride per view).
#include <vector>

#include "isa/neuroncore/isa.hpp"
#include "mapper/graph/view.hpp"

namespace tessera::neuroncore {

struct Loop {
  Shape dims;
  std::vector<std::vector<int64_t>> strides;  // per view
  std::vector<int64_t> offsets;               // per view, elements
  size_t k = 0;                               // first free dim
  int64_t chunk = 1;                          // elements of dim k per tile (1 when there is no free dim)
  int64_t rows() const;
  int64_t row_stride(size_t view) const { return k == 0 ? 0 : strides[view][k - 1]; }
  // Free dims (count, element stride) of a view in a tile whose chunk of dim k has `cn` elements.
  std::vector<Dim> free_dims(size_t view, int64_t cn) const;
  int64_t free_elems(int64_t cn) const;
};

Loop plan_loop(std::vector<graph::Strided> views, int64_t partitions, int64_t max_free);

struct Run {
  int32_t p0 = 0, parts = 0;
  std::vector<int64_t> offset;  // per view: element offset of the run's first row
};
struct Tile {
  int32_t parts = 0;
  std::vector<Run> runs;
  int64_t cn = 1;               // elements of dim k
  std::vector<int64_t> col;     // per view: element offset of the chunk (added to each run's offset)
};
std::vector<Tile> tiles_of(const Loop& l, int64_t partitions);

// A view's tile in SBUF, packed: the free dims it does not repeat (nonzero stride) laid out densely.
struct Packed {
  std::vector<Dim> read;  // dims that read the packed tile in the loop's order (stride 0 where it repeats)
  std::vector<Dim> hbm;   // the DMA's HBM dims (repeated dims dropped)
  std::vector<Dim> sbuf;  // the DMA's SBUF dims (dense)
  int64_t elems = 1;      // elements per partition
};
Packed pack(const std::vector<Dim>& hbm_free);

}  // namespace tessera::neuroncore
