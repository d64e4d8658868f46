#pragma once
// The kernel families the lowering (mapper/neuroncore/lower.cpp) calls, one file each. Every family
// checks first whether it can compile the node and returns a Status with the reason when it cannot;
// only then does it emit instructions.
#include "mapper/neuroncore/kernel.hpp"

namespace tessera::neuroncore {

// Elementwise ops with numpy broadcasting (unary functions, binary ALU ops and comparisons, Where,
// Clip, Cast, ...): kernels/elementwise.cpp.
bool is_elementwise(const graph::Node& n);
Status elementwise(Ctx& x, const graph::Node& n);
// A copy of `src` into `dst` (same shape, any strides and dtypes): materialised views, casts.
Status copy(Ctx& x, const std::string& kernel, const TensorRef& src, const TensorRef& dst);
// The same inside the current kernel (a Concat's inputs, a Pad's interior).
void copy_into(Ctx& x, const std::string& kernel, const TensorRef& src, const TensorRef& dst);

// MatMul of any rank with broadcast batch dimensions, operands in any strides: kernels/matmul.cpp.
Status matmul(Ctx& x, const graph::Node& n, const Epilogue& ep);
// Sibling matmuls: MatMuls reading the same left operand with constant 2-D right operands of the
// same K (attention's Q, K and V projections) as one kernel: the left operand loaded once, the
// right operands streamed side by side, each output written with its own epilogue (bias,
// activation; no residual).
bool matmul_group_fits(Ctx& x, const std::vector<const graph::Node*>& nodes, const std::vector<const Epilogue*>& eps);
Status matmul_group(Ctx& x, const std::vector<const graph::Node*>& nodes, const std::vector<const Epilogue*>& eps);
// Weight prefetch (lower.cpp): the SBUF bytes per partition MatMul `n`'s constant right operand
// takes loaded whole ([KT][N] per partition), or 0 when it is not prefetched (not a 2-D constant,
// an NKI schedule, a left operand too large to keep resident beside it).
int64_t prefetch_bytes(const Ctx& x, const graph::Node& n, const Epilogue& ep);
// Its prefetch as DMAs (prefetch_dmas of them, each taking about prefetch_dma_seconds on the
// engines), in the order the matmul reads the tiles; prefetch emits those in [first, last) loading
// it into SBUF at `offset` (on the prefetch queues).
int64_t prefetch_dmas(const Ctx& x, const graph::Node& n, const Epilogue& ep);
double prefetch_dma_seconds(const Ctx& x, const graph::Node& n, const Epilogue& ep);
void prefetch(Ctx& x, const graph::Node& n, const Epilogue& ep, int64_t offset, int64_t first, int64_t last);
// A 1-D [N, C, L] tensor's view as 2-D [N, C, 1, L] (a 4-D view is returned as it is).
graph::Strided as_2d_spatial(const graph::Strided& v);

// Attention fused into one kernel: O = softmax(scale * Q @ Kt + mask) @ V, the scores staying in
// PSUM and SBUF: kernels/attention.cpp for keys within one PSUM bank of fp32 scores (512 on trn1),
// kernels/attention_blocks.cpp beyond (key blocks of 512 and an online softmax). The lowering finds the chain: a MatMul whose planned epilogue
// (a scale, a mask added as its bias) is read only by a Softmax over the last axis, read only by a
// MatMul as its left operand.
struct AttentionPlan {
  const graph::Node* scores = nullptr;   // Q @ Kt
  const graph::Node* context = nullptr;  // P @ V
  Epilogue score_ep, context_ep;         // the two matmuls' planned epilogues
  // A masked_fill between the scores and the Softmax: Where(cond, scores, fill) (keep where cond)
  // or Where(cond, fill, scores) (keep where not cond), cond constant, fill a scalar.
  const graph::Node* where = nullptr;
  std::optional<TensorRef> cond;         // broadcast to the scores' shape
  bool keep_when = true;
  double fill = 0;
  bool key_blocks = false;               // the key-block kernel takes it (attention_fits decides)
};
// Whether the fused kernel takes this chain (value width within a PSUM bank, head dimension within
// the array, SBUF for its slots); the reason when not (the chain then compiles kernel by kernel).
Status attention_fits(Ctx& x, AttentionPlan& a);
Status attention(Ctx& x, const AttentionPlan& a);

// Conv and ConvTranspose 1-D/2-D, any stride, dilation, pads and groups: kernels/conv.cpp.
Status conv(Ctx& x, const graph::Node& n, const Epilogue& ep);
// MaxPool, AveragePool (pads, ceil mode, count_include_pad), GlobalAveragePool, GlobalMaxPool:
// kernels/pool.cpp.
bool is_pool(const std::string& op);
Status pool(Ctx& x, const graph::Node& n);
// Row kernels: reductions over any axes, Softmax/LogSoftmax over any axis, LayerNormalization,
// RMSNormalization, InstanceNormalization: kernels/rows.cpp.
bool is_row_op(const std::string& op);
Status rows(Ctx& x, const graph::Node& n);
// Data movement: Concat, Pad (constant), a nearest Resize, Gather (an embedding lookup on gpsimd, or constant
// indices as copies): kernels/movement.cpp.
Status concat(Ctx& x, const graph::Node& n);
Status pad(Ctx& x, const graph::Node& n);
Status resize(Ctx& x, const graph::Node& n);  // nearest, by whole factors
Status gather(Ctx& x, const graph::Node& n);

}  // namespace tessera::neuroncore
