#pragma once
// The evacuation of an accumulated output tile (PSUM, fp32) with a fused epilogue (kernel.hpp:
// y = func(acc * scale + bias) + residual), shared by matmuls and convolutions.
#include <array>

#include "mapper/neuroncore/kernel.hpp"

namespace tessera::neuroncore {

// How one output tile [parts, free] maps onto an operand of the output's shape: element offset of
// the tile's first element, partition stride, free dims (counts and element strides).
struct TileView {
  int64_t elem = 0;
  int64_t part_stride = 0;
  std::vector<Dim> free;
};

// The [parts, nn] tile at row m0, column n0 of a 2-D operand whose element (0, 0) is `at.elem`,
// rows `rs` and columns `cs` apart.
TileView tile_at(const TileView& at, int64_t rs, int64_t cs, int64_t m0, int64_t n0, int64_t nn);

class EpilogueEmitter {
 public:
  // Allocates the epilogue's SBUF buffers for tiles of up to [parts, free] elements.
  EpilogueEmitter(Ctx& x, const Epilogue& ep, Sbuf& sb, int64_t free);
  // dst (SBUF, the output's dtype) = epilogue(acc); `bias` / `residual` locate the tile in those
  // operands (ignored when the epilogue has none). `t` alternates the double-buffered tiles.
  void run(const AccessPattern& dst, const AccessPattern& acc, const TileView& bias, const TileView& residual, int64_t t);
  // Loads a bias that repeats over the tile rows once for the whole kernel: `count` elements from
  // `elem`, `stride` apart (the output's columns), replicated on every partition; tiles then read
  // their columns of it instead of loading their own.
  void preload_row_bias(int64_t elem, int64_t count, int64_t stride);
  // Loads a per-partition bias column ahead of its first use (a kernel's columns, before its loop).
  void preload_column(const TileView& bias, int32_t parts);
  // Before a block's accumulation: dst (SBUF, fp32, the block's [parts, n]) = residual + bias, the
  // residual loaded through `res_off` (n elements of its dtype per partition). False, and nothing
  // emitted, when the epilogue does not take that form (a scale, an activation between bias and
  // residual, a bias that is not the preloaded row); then run() evacuates as usual.
  bool preadd(const AccessPattern& dst, const TileView& bias, const TileView& residual, int64_t res_off);
  // The evacuation after preadd: dst = func(acc + dst), in place.
  void run_preadded(const AccessPattern& dst, const AccessPattern& acc);
  const Epilogue& epilogue() const { return ep_; }

 private:
  Ctx& x_;
  const Epilogue& ep_;
  int64_t free_ = 0;
  Sbuf* sb_ = nullptr;
  // The SBUF column holding the bias for (element, partition stride), loading it on a miss.
  AccessPattern column(const TileView& bias, int32_t parts);
  // The preloaded bias row's columns for `bias`, or nothing when it does not hold them.
  AccessPattern row_bias(const TileView& bias, int32_t parts) const;
  int64_t bias_buf_ = -1, res_buf_ = -1, tmp_buf_ = -1;
  // Per-partition bias columns already in SBUF (element offset, partition stride, partitions),
  // in slot order.
  static constexpr int64_t kColumnSlots = 16;
  std::vector<std::array<int64_t, 3>> columns_;
  int64_t col_buf_ = -1;
  int64_t row_buf_ = -1, row_elem_ = 0, row_count_ = 0, row_stride_ = 1;  // a preloaded bias row
  int64_t last_bias_ = -1;  // the bias tile loaded last (element offset), reused while it repeats
  int32_t last_bias_parts_ = 0;
};

}  // namespace tessera::neuroncore
