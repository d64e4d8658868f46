#pragma once
// Private to the fused attention kernels: attention.cpp (keys within one PSUM bank) and
// attention_blocks.cpp (longer key ranges, key block by key block with an online softmax).
#include <algorithm>
#include <cstdint>

#include "mapper/neuroncore/kernels/kernels.hpp"
#include "mapper/neuroncore/kernels/matmul.hpp"

namespace tessera::neuroncore::attn {

// The chain's tensors, their views with the batch dims broadcast to the output's.
struct Operands {
  TensorRef q, kt, v, o;
  graph::Strided qv, ktv, vv, ov, mask, cond;
  Shape batch;
  int64_t Sq = 0, dh = 0, Sk = 0, dv = 0, nb = 1;
};
Operands operands(Ctx& x, const AttentionPlan& a);

inline int64_t round64(int64_t b) { return (b + 63) / 64 * 64; }

// Stores the output tile [sq, dv] at `out` (SBUF) as rows q0.. of batch b's output.
void store_out(Ctx& x, const Operands& o, int64_t b, int64_t q0, int32_t sq, const AccessPattern& out);

// The scale folded into Q as its transposed tiles leave PSUM (the copy becomes a multiply of the
// same cost) when that is exact: Q loaded through the transpose, and the scale a power of two or Q
// kept in fp32. 1 otherwise (the scores carry it).
double q_scale(const Operands& o, const AttentionPlan& a);

// Loads of [K, F] blocks into SBUF with K on the partitions, and PSUM tiles.
struct Loader {
  Ctx& x;
  int64_t bank = 0;    // PSUM bank bytes per partition
  int64_t stages = 0;  // transposed blocks so far (staging positions and PSUM positions rotate)
  int64_t banks = 2;   // PSUM banks the transposed blocks take: 6 and 7, or 7 only

  explicit Loader(Ctx& ctx, int64_t load_banks = 2) : x(ctx), bank(ctx.cfg.psum_bank_bytes()), banks(load_banks) {}
  // A PSUM tile [parts, free] fp32 at byte `off` of bank `b` (mod the banks).
  AccessPattern psum_at(int64_t b, int64_t off, int32_t parts, int32_t free) const;
  // [K, F] of `r` (element (k, f) at elem + k * sk + f * sf) into SBUF at `dst`: one DMA when F is
  // contiguous in HBM, else [F, K] blocks of 128 (K contiguous) turned by the tensor engine (in the
  // last `banks` banks of 8, four positions each, staged at `stage`: 4 x 128 elements per
  // partition) and copied back.
  // `scale` multiplies the values on the way.
  void load_kf(const TensorRef& r, int64_t elem, int64_t K, int64_t sk, int64_t F, int64_t sf, int64_t dst, int64_t stage, double scale = 1.0);
};

// Keys per block of scores: one PSUM bank of fp32 (and a moving tile), in whole 128-key chunks.
inline int64_t key_block(const Ctx& x) {
  const int64_t f = std::min<int64_t>(x.cfg.psum_bank_bytes() / 4, x.cfg.max_moving_free);
  return std::max<int64_t>(128, f / 128 * 128);
}
// The kernel for key ranges over one block (attention_blocks.cpp) and whether it fits.
Status blocks_fit(Ctx& x, const AttentionPlan& a, const Operands& o);
Status blocks(Ctx& x, const AttentionPlan& a);

}  // namespace tessera::neuroncore::attn
