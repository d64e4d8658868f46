#pragma once
// The NeuronCore compiler's mapping options, parsed once from the scenario (sim) into this struct.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "isa/dtype.hpp"

namespace tessera::neuroncore {

// Loop nests for a 2-D matmul, after the NKI matmul tutorial's optimisation steps (nki_matmul_tiled_,
// _hoist_load_, _block_free_dimension_, _fully_optimized_). `automatic` is the compiler's own choice
// (kernels/matmul.cpp).
enum class MatmulSchedule { automatic, tiled, hoisted, blocked_mn, blocked_mnk };

// The fused attention kernel for chains whose keys fit one PSUM bank: kernels/attention.cpp
// (`one_bank`: the whole row of scores in a bank, heads packed in pairs) or
// kernels/attention_blocks.cpp (`key_blocks`: the online softmax, four query tiles side by side);
// longer key ranges always take key_blocks. `automatic`: compile both and keep the one the
// estimate says is faster (compile.cpp).
enum class AttentionKernel { automatic, one_bank, key_blocks };

struct MappingOptions {
  DType compute = DType::bf16;   // matmul operand and activation dtype (accumulation is fp32)
  int64_t tile_m = 0;            // rows of a matmul output tile on the partitions (0: automatic)
  int64_t tile_n = 0;            // free size of a matmul output tile (0: automatic, <= 512)
  int64_t buffers = 0;           // buffers per streamed operand (0: automatic)
  MatmulSchedule matmul_schedule = MatmulSchedule::automatic;
  // Tiles per block (the tutorial's TILES_IN_BLOCK_M/N/K) for the blocked schedules; 0: the
  // tutorial's values (blocked_mn 2x2, blocked_mnk 16x2x8).
  int64_t block_m = 0, block_n = 0, block_k = 0;
  // A MatMul -> Softmax -> MatMul chain (attention) as one fused kernel (kernels/attention.cpp) when
  // it fits; false: each node its own kernel, the scores through HBM.
  bool fuse_attention = true;
  AttentionKernel attention_kernel = AttentionKernel::automatic;
  // A LayerNormalization over the last axis of a MatMul's result normalised in the matmul's kernel
  // (kernels/matmul_core.cpp); false: its own kernel, the result through HBM.
  bool fuse_norm = true;
  // Constant matmul operands loaded into SBUF ahead of their kernels (lower.cpp "prefetch").
  bool prefetch_weights = true;
  // State updated in place (training): (input S, output holding S's next value). The output is
  // stored where S is, so the next step reads it without a host round trip; the kernel writing it
  // runs after every kernel that reads S. S and its next value share a dtype.
  std::vector<std::pair<std::string, std::string>> in_place;
};

}  // namespace tessera::neuroncore
