#include "mapper/passes/canonicalize.hpp"

#include "mapper/passes/passes.hpp"

namespace tessera::passes {

const std::vector<CanonicalPass>& canonical_passes() {
  static const std::vector<CanonicalPass> p = {
      {"normalize_opset", "opset 7-16 forms rewritten to opset 17's", normalize_opset},
      {"simplify", "one form per concept: Reshape for Flatten/Squeeze/Unsqueeze, Slice for Split, MatMul for Gemm, no Identity/Dropout or one-input Concat, a Pad of zeros into the Conv that reads it",
       simplify},
      {"unroll_recurrent", "RNN, GRU and LSTM as the matmuls and gates of each step", unroll_recurrent},
      {"fold_batchnorm", "inference BatchNormalization folded into the convolution before it, or a per-channel Mul and Add", fold_batchnorm},
      {"fuse_decompositions", "LayerNorm, RMSNorm, GELU, SiLU, HardSwish, Mish, Softplus written as several ops, as one op each",
       fuse_decompositions},
  };
  return p;
}

std::vector<std::string> canonicalize(graph::Graph& g, bool unroll) {
  prepare(g);
  std::vector<std::string> changed;
  for (const auto& p : canonical_passes()) {
    if (!unroll && p.run == unroll_recurrent) continue;
    if (!p.run(g)) continue;
    changed.push_back(p.name);
    prepare(g);
  }
  return changed;
}

}  // namespace tessera::passes
