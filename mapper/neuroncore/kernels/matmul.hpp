#pragma once
// The 2-D matmul core shared by MatMul (kernels/matmul.cpp) and the NKI tutorial schedules
// (kernels/matmul_nki.cpp): C[M, N] = A[M, K] @ B[K, N] over strided HBM views, with an epilogue.
#include "mapper/neuroncore/kernels/epilogue.hpp"

namespace tessera::neuroncore {

// A 2-D view of a TensorRef: element (r, c) at element offset + r * rs + c * cs.
struct Mat {
  TensorRef ref;
  int64_t off = 0, rows = 0, cols = 0, rs = 0, cs = 0;
  // HBM access: partitions over rows [r0, r0 + nr), free over cols [c0, c0 + nc) -- or the other way.
  AccessPattern by_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const;
  AccessPattern by_cols(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const;
};

class EpilogueEmitter;

// Columns [n0, n0 + n) of a matmul whose right operand concatenates several (sibling matmuls that
// read the same left operand): written to their own output with their own epilogue.
struct MatmulSegment {
  int64_t n0 = 0, n = 0;
  Mat out;
  TileView bias;
  int64_t bias_rs = 0, bias_cs = 0;
  EpilogueEmitter* epi = nullptr;
};

// One 2-D matmul's operands and output, and where its epilogue operands sit (their strides along
// the output's rows and columns; offsets of the output's first element).
struct MatmulJob {
  std::string name;
  Mat a, b, out;
  TileView bias, residual;  // for output tile (0, 0); rows and cols strides in part_stride / free[0]
  int64_t bias_rs = 0, bias_cs = 0, res_rs = 0, res_cs = 0;
  // B already in SBUF for the whole kernel at b_pre, [KT][b_pre_row] per partition (K-tile k's
  // row p at b_pre + (k * b_pre_row + n) * es): a batched matmul's shared right operand.
  int64_t b_pre = -1, b_pre_row = 0;
  std::vector<MatmulSegment> segments;  // empty: one output (out, bias, residual above)
  const Epilogue::Norm* norm = nullptr;  // a fused LayerNorm over each output row (Epilogue::norm)
};

// Whether an operand tile [K on the partitions, F free] (element (k, f) at k * sk + f * sf) loads
// [F, K] and turns through the tensor engine's transpose: its K is contiguous in HBM, F is not.
inline bool loads_transposed(int64_t sk, int64_t sf, int64_t F) { return sf != 1 && sk == 1 && F > 1; }

// The last two dims of `v` at batch index `b` (row-major over v's batch dims).
graph::Strided batch_slice(const graph::Strided& v, int64_t b);

// Enough buffers for streamed tiles ([kp partitions, tile_bytes_per_part]) that the DMAs in flight
// cover a tile's transfer (and the trigger latency of a refill) with the matmuls of the tiles before it.
int64_t auto_buffers(const Ctx& x, int64_t tile_bytes_per_part, int64_t kp, int64_t parts_out, int64_t free);

// Emits the job with the compiler's own loop order (the cheaper of keeping the stationary tiles or
// the moving block resident), loading each operand tile directly when its free dimension is
// contiguous in HBM and through the tensor engine's transpose when its partition dimension is.
void matmul_auto(Ctx& x, const MatmulJob& job, EpilogueEmitter& epi, Sbuf& sb, int64_t& tile_count);

// SBUF bytes per partition matmul_auto takes for `job` with its buffers (the least of its two loop
// orders, with the staging of transposed loads).
int64_t matmul_auto_sbuf(const Ctx& x, const MatmulJob& job);

// The NKI tutorial's loop nests (mapping.matmul_schedule); both operands must load directly (lhsT
// and rhs contiguous along their free dimension).
Status matmul_nki(Ctx& x, const MatmulJob& job, const Epilogue& ep);

}  // namespace tessera::neuroncore
