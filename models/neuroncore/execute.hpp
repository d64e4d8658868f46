#pragma once
// The numerics of every NeuronCore instruction (docs/neuroncore-asm.md): what an instruction
// computes into the core's memories, with real values. When it happens is the model's business;
// control, sync and the DMA's queueing/semaphores are not here (execute() ignores those ops), but
// Op::dma performs its copy.
//
// Numerics (ARCHITECTURE.md decision 5: exact where the hardware is exact):
//   - Operands are read as fp32 (exact widening of bf16/fp16/fp8), every engine computes in fp32
//     ("fp32 inside"), and results round to the destination dtype, nearest even, when written.
//   - Tensor engine: stationary and moving tiles are widened to fp32; products of bf16/fp16/fp8
//     values are exact in fp32, so the tile product runs as one Eigen sgemm, and the PSUM
//     accumulation is fp32 (old value read, sum added, written back as fp32). fp32 inputs use
//     the same sgemm: the real engine's fp32 path is multi-pass (x4 cost in the cost table) and
//     its numerics are ~fp32; tessera's are plain fp32 sgemm. Summation order inside the sgemm is
//     Eigen's, so a matmul result is fp32-accurate, not bit-reproducible against a naive loop.
//   - Reductions (tensor_reduce, activation's accumulate, bn_stats, bn_aggr,
//     partition_all_reduce) accumulate in fp32 sequentially in index order.
//
// Operand conventions: an operand's rows are its partitions (HBM: its rows), `p` is the row
// index within the operand (0-based), `i` the flat free index within a row.
//
// Op semantics chosen where the hardware leaves room (keep docs/neuroncore-asm.md in step):
//   load_stationary  te <- src [K, M] (fp32); the K/M limits are the assembler's checks.
//   multiply_moving  dst [M, N] = (start ? 0 : dst) + stat^T @ src [K, N].
//   transpose        dst [F, P] = src [P, F]^T (tensor engine, exact).
//   tensor_tensor    dst = src0 alu src1, all three the same [P, F].
//   tensor_scalar    dst = (src0 alu imm0) alu1 imm1; `bypass` keeps its left operand.
//   tensor_reduce    dst [P, 1] = reduce(alu in add/multiply/max/min) over src0's free elements,
//                    negated if `negate`.
//   tensor_copy      dst = src0 (same [P, F]).
//   transpose32      32x32 blocks of partitions x free, each transposed in place:
//                    dst[p0 + j, f0 + i] = src[p0 + i, f0 + j] for p0, f0 multiples of 32.
//                    Either src is [P, F] with P and F multiples of 32 and dst is [P, F], or src
//                    is one partial block [P <= 32, F <= 32] and dst is [F, P].
//   bn_stats         dst [P, 6] per partition: (count, mean, M2) of the first half of the free
//                    elements (the first ceil(F/2)), then the same of the second half
//                    (floor(F/2)); M2 = sum of squared deviations from that half's mean. An empty
//                    half is (0, 0, 0). Two-pass in fp32.
//   bn_aggr          src0 [P, 6k]: k bn_stats records (2k groups of count, mean, M2) combined
//                    (Chan et al.) into dst [P, 2] = (mean, population variance = M2 / count);
//                    groups with count 0 are skipped; no data -> (0, 0).
//   memset           dst = imm0.
//   select           dst = src0 != 0 ? src1 : aux (all the same [P, F]).
//   activation       dst = func(src0 * imm0 + bias), bias = src1 [P, 1] per partition if present,
//                    else imm1. imm0 is the scale as given (the assembler defaults it to 1; code
//                    that builds an Instr must set it). If aux is present ([P, 1]) it receives
//                    ("accumulate" = reduce along free) the fp32 sum over the row of func's
//                    results before they round to dst's dtype; it overwrites aux, it does not
//                    add to the old aux.
//   iota             dst[p, i] = imm0 + imm1 * p + imm2 * i (computed in fp64, then written).
//   affine_select    v = imm0 + imm1 * p + imm2 * i; dst = (v alu 0) ? src0 : imm3, alu one of
//                    is_equal/is_gt/is_ge/is_lt/is_le.
//   gather           dst[p, i] = src0[p, src1[p, i]]; an index that is not an integer in
//                    [0, src0 free) throws std::runtime_error naming it.
//   partition_all_reduce  dst[p, i] = reduce(alu) over all rows q of src0[q, i].
//   dma              dst <- src element by element in flattened [rows][free] order (same total
//                    count); raw copy if the dtypes agree, else widen to fp32 and round to dst's
//                    dtype (integers wider than 2^24 lose exactness on that path).
//   is_* ALU results are 1.0 / 0.0; max/min are IEEE maxNum/minNum (fmax/fmin); pow is std::pow.
//
// Malformed operands (shape mismatches, wrong spaces for the tensor engine, multiply_moving
// before load_stationary) throw std::runtime_error with the op name and source line.
#include <cstdint>
#include <vector>

#include "isa/neuroncore/isa.hpp"
#include "models/neuroncore/memory.hpp"

namespace tessera::neuroncore {

struct TensorEngineState {
  std::vector<float> stationary;  // [K][M] row-major, fp32
  int64_t K = 0, M = 0;
  bool loaded = false;
};

// Computes the instruction's results into memory (real numerics).
void execute(const Instr& in, CoreMemory& mem, const RegFile& regs, TensorEngineState& te);

// The tensor engine's product: O[M, N] (row stride ostride) = (start ? 0 : O) + S^T B with S [K, M]
// and B [K, N] row-major fp32. Large products split their columns over at most max_parts host
// threads (0: all); the result is the same bit for bit whatever the split.
void stationary_product(float* O, int64_t ostride, const float* S, const float* B, int64_t K, int64_t M, int64_t N,
                        bool start, int max_parts = 0);

// The elementwise building blocks (fp32), exposed for tests and other engines.
float apply_alu(Alu a, float x, float y);
float apply_func(Func f, float x);

}  // namespace tessera::neuroncore
