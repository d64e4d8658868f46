#pragma once
// The NeuronCore instruction set as tessera renders it: a program is a sequence of 8-lane VLIW
// bundles. Each lane feeds one unit: tensor (128x128 systolic array writing fp32 into PSUM),
// vector, scalar (activation), gpsimd, two DMA lanes, sync (semaphores, step markers) and control
// (scalar registers, loops, branches). An empty slot is a nop.
//
// Facts: shared/reference/neuroncore.md. This header says what instructions are; their cost
// formulas are in cost_table.hpp; when they happen is the model's business (models/neuroncore).
#include <array>
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "isa/dtype.hpp"

namespace tessera::neuroncore {

enum class Lane : uint8_t { tensor, vector, scalar, gpsimd, dma0, dma1, sync, control };
inline constexpr int kLanes = 8;
std::string_view lane_name(Lane l);

enum class Space : uint8_t { sbuf, psum, hbm };
std::string_view space_name(Space s);

// One free dimension of an access pattern: `num` elements `stride` elements apart.
struct Dim {
  int32_t num = 1;
  int32_t stride = 1;
  bool operator==(const Dim&) const = default;
};

// Where an operand lives and how it is walked. SBUF and PSUM are addressed as partitions x bytes
// within a partition; an operand covers `parts` consecutive partitions from `part_start`, and in
// each the same free pattern from byte `offset`. HBM is flat: row p (p < parts) starts at byte
// offset + p * part_stride * dtype_size, and the free pattern walks from there.
struct AccessPattern {
  Space space = Space::sbuf;
  DType dtype = DType::f32;
  int32_t part_start = 0;
  int32_t parts = 0;         // 0 = operand not used
  int64_t part_stride = 0;   // HBM rows, in elements
  int64_t offset = 0;        // bytes
  int8_t offset_reg = -1;    // dynamic addressing: offset += reg[offset_reg] * reg_scale (bytes)
  int32_t reg_scale = 0;
  uint8_t ndims = 1;         // 1..4 free dimensions, outermost first
  std::array<Dim, 4> dims{};

  int64_t free_elems() const;            // elements per partition (row)
  int64_t elems() const { return free_elems() * parts; }
  // Byte extent touched in one partition (SBUF/PSUM) relative to offset: [lo, hi).
  std::pair<int64_t, int64_t> free_byte_range() const;
  bool contiguous() const;               // innermost stride 1 and dims dense
  bool present() const { return parts > 0; }
  bool operator==(const AccessPattern&) const = default;
};

// The memory an operand touches: partitions [p_lo, p_hi) x bytes [b_lo, b_hi) within a partition
// (SBUF/PSUM), or bytes [b_lo, b_hi) of HBM (p_lo = 0, p_hi = 1). `base` is the effective byte
// offset (offset plus any dynamic part).
struct Footprint {
  Space space;
  int64_t p_lo, p_hi, b_lo, b_hi;
  // HBM rows: `rows` runs of `extent` bytes, `stride` bytes apart, from b_lo (stride 0: the whole
  // range [b_lo, b_hi)). Two row sets with the same stride overlap only where a row of one meets a
  // row of the other: a matmul's column tiles of the same output rows are independent.
  int64_t stride = 0, extent = 0, rows = 1;
  bool overlaps(const Footprint& o) const {
    if (!(space == o.space && p_lo < o.p_hi && o.p_lo < p_hi && b_lo < o.b_hi && o.b_lo < b_hi)) return false;
    if (stride <= 0 || stride != o.stride || extent > stride || o.extent > stride) return true;
    // Row r of this and row q of o meet iff d - k * stride lies in (-o.extent, extent), k = r - q.
    const int64_t d = o.b_lo - b_lo;
    auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    const int64_t k_lo = std::max<int64_t>(floor_div(d - extent, stride) + 1, -(o.rows - 1));
    const int64_t k_hi = std::min<int64_t>(-floor_div(-(d + o.extent), stride) - 1, rows - 1);
    return k_lo <= k_hi;
  }
};
Footprint footprint(const AccessPattern& ap, int64_t base);
inline Footprint footprint(const AccessPattern& ap) { return footprint(ap, ap.offset); }

// ALU operations of the vector and gpsimd engines (tensor_tensor, tensor_scalar, tensor_reduce,
// partition all-reduce, affine_select comparison).
enum class Alu : uint8_t { add, subtract, multiply, divide, max, min, pow, bypass, is_equal, is_gt, is_ge, is_lt, is_le };
std::string_view alu_name(Alu a);

// Scalar-engine activation functions: out = func(in * scale + bias).
enum class Func : uint8_t { identity, relu, gelu, gelu_tanh, sigmoid, tanh, exp, log, sqrt, rsqrt, reciprocal, square, silu, erf, softplus, mish, abs };
std::string_view func_name(Func f);

enum class Op : uint8_t {
  nop,
  // tensor
  load_stationary,   // src: SBUF [K partitions, M elements]: the stationary matrix
  multiply_moving,   // dst: PSUM [M, N] fp32 += stationary^T @ src [K, N]; flags start/stop
  transpose,         // dst: PSUM [F, P] = src [P, F]^T through the array
  // vector
  tensor_tensor,     // dst = src0 alu src1
  tensor_scalar,     // dst = (src0 alu imm0) alu1 imm1; imm0 / imm1 per partition from src1 / aux [P,1] when present
  tensor_reduce,     // dst [P, 1] = reduce_alu over the free elements of src0
  tensor_copy,       // dst = src0 (converting dtype)
  transpose32,       // dst = 32x32 block transposes of src0
  bn_stats,          // dst [P, 6] = (count, mean, M2) per half of src0's free elements
  bn_aggr,           // dst [P, 2] = (mean, variance) aggregated from bn_stats records in src0
  memset,            // dst = imm0
  select,            // dst = src0 != 0 ? src1 : aux
  // scalar
  activation,        // dst = func(src0 * imm0 + (src1 [P,1] if present else imm1)); aux [P,1] = fp32 sum of the results
  // gpsimd
  iota,              // dst[p, i] = imm0 + imm1 * p + imm2 * i (i = flat free index)
  affine_select,     // dst[p, i] = (imm0 + imm1*p + imm2*i) alu 0 ? src0 : imm3
  gather,            // dst[p, i] = src0[p, src1[p, i]] (indices along the free dimension)
  partition_all_reduce,  // dst[p, i] = reduce_alu over partitions q of src0[q, i]
  // dma0, dma1
  dma,               // dst <- src (HBM<->SBUF, SBUF<->SBUF), queue `queue`, optional semaphore signal
  // sync
  sem_wait,          // wait until semaphore[sem] >= imm value
  sem_signal,        // semaphore[sem] += imm value
  step_marker,       // marks the end of host step `imm`
  // control
  set_reg,           // reg[r] = imm
  add_reg,           // reg[r] += imm
  dec_branch_nz,     // reg[r] -= 1; if reg[r] != 0 jump to bundle `target`
  branch_nz,         // if reg[r] != 0 jump to bundle `target`
  jump,              // jump to bundle `target`
  halt,
};
std::string_view op_name(Op op);
Lane op_lane(Op op);  // the lane an op must sit in (dma: dma0 or dma1)

inline constexpr int kRegs = 16;
inline constexpr int kSemaphores = 32;

// A DMA with a negative queue -n is split by partition groups (8 or more partitions each) over
// every DMA engine, one piece on queue n of each engine, as NKI does with each dma_copy ([DMA]:
// "each DMA transfer is by default parallelized up to 16 DMA engines, depending on the shape").
// It completes when its last piece does. Assembler: `queue=all` (n = 1) or `queue=allN`.
inline constexpr int16_t kQueueAll = -1;
inline constexpr bool spread_queue(int16_t q) { return q < 0; }

struct Instr {
  Op op = Op::nop;
  AccessPattern dst, src0, src1, aux;  // unused ones have parts = 0
  Alu alu = Alu::add;       // tensor_tensor, tensor_scalar (first), tensor_reduce, reduce ops, affine_select compare
  Alu alu1 = Alu::bypass;   // tensor_scalar second op
  Func func = Func::identity;
  std::array<double, 4> imm{};  // immediates (see each op)
  bool start = false;       // multiply_moving: zero the accumulator first
  bool stop = false;        // multiply_moving: last of an accumulation group
  bool negate = false;      // tensor_reduce: negate the result
  int8_t reg = -1;          // control register
  int8_t sem = -1;          // sync semaphore; dma: semaphore to signal on completion
  int16_t queue = 0;        // dma queue, or kQueueAll
  int32_t target = -1;      // control: bundle index to jump to
  int32_t line = 0;         // assembly source line (for errors and traces)
  int16_t kernel = -1;      // compiled programs: index into Program::kernels (-1: none)
};

// A bundle: one instruction index (into Program::instrs) per lane, -1 = nop.
struct Bundle {
  std::array<int32_t, kLanes> slot{-1, -1, -1, -1, -1, -1, -1, -1};
  int32_t line = 0;
};

// A named tensor in HBM (program inputs and outputs are bound to these by name).
struct HbmTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // bytes
};

struct Program {
  std::string source;                    // file name, for errors
  std::vector<Instr> instrs;
  std::vector<Bundle> bundles;
  std::map<std::string, int32_t> labels; // label -> bundle index
  std::vector<HbmTensor> hbm;            // declared HBM tensors
  std::vector<std::string> kernels;      // compiled programs: kernel names (Instr::kernel indexes them)
  const HbmTensor* find_hbm(std::string_view name) const;
};

}  // namespace tessera::neuroncore
