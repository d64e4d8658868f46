#pragma once
// The wafer-scale engine's PE and router ISA as tessera renders it (facts: shared/reference/wafer.md,
// syntax: docs/wafer-asm.md).
//
// A PE program is a set of tasks over one instruction array. Tasks are data tasks (fire on a
// wavelet of their color), local tasks (fire on `activate`) and control tasks (fire on a control
// wavelet naming their id); a task runs when it is activated and not blocked, and runs to its
// `ret`. Vector work is done by DSD instructions: one instruction over a whole vector described by
// a DSD (mem1d, mem4d, fabin, fabout, fifo); an `async` DSD instruction runs on the microthread of
// its fabric queue and, when it completes, activates and/or unblocks a task.
//
// Everything here is a small value type so that a fabric model over ~750 x 994 PEs can keep flat
// arrays: an Instr is 44 bytes, a Dsd 32, a Route 10; a Program is shared by every PE of a layout
// rectangle with the same parameter values. This header says what instructions are and what they
// cost; when they happen is the model's business (models/wafer).
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "isa/params.hpp"

namespace tessera::wafer {

// ---------------------------------------------------------------------------------------------
// Wavelets: a 32-bit payload and a 5-bit color; a control wavelet advances switch positions and
// can fire a control task. For 16-bit use the payload splits into index (upper) and data (lower).
inline constexpr int kColorBits = 5;
inline constexpr int kMaxColors = 1 << kColorBits;  // 5-bit color field; router.colors are routable

struct Wavelet {
  uint32_t payload = 0;
  uint8_t color = 0;
  bool control = false;
  uint16_t index() const { return static_cast<uint16_t>(payload >> 16); }
  uint16_t data() const { return static_cast<uint16_t>(payload & 0xffffu); }
  static Wavelet make16(uint8_t color, uint16_t index, uint16_t data, bool control = false) {
    return {(static_cast<uint32_t>(index) << 16) | data, color, control};
  }
  bool operator==(const Wavelet&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Router directions and routes. Coordinates: x grows east, y grows south (PE (0,0) is north-west).
enum class Dir : uint8_t { N, S, E, W, RAMP };
inline constexpr int kDirs = 5;
using DirSet = uint8_t;  // bit (1 << Dir)
constexpr DirSet dir_bit(Dir d) { return static_cast<DirSet>(1u << static_cast<unsigned>(d)); }
inline constexpr DirSet kAllDirs = 0x1f;
std::string_view dir_name(Dir d);
Dir opposite(Dir d);          // N<->S, E<->W, RAMP<->RAMP
constexpr int dir_dx(Dir d) { return d == Dir::E ? 1 : d == Dir::W ? -1 : 0; }  // E +1, W -1
constexpr int dir_dy(Dir d) { return d == Dir::S ? 1 : d == Dir::N ? -1 : 0; }  // S +1, N -1
std::string format_dirset(DirSet s);  // "{E,RAMP}"

// One switch position: where the color is accepted from (rx) and sent to (tx, several = multicast).
struct SwitchPos {
  DirSet rx = 0, tx = 0;
  bool operator==(const SwitchPos&) const = default;
};
// The route of one color at one router: a base position and up to 3 more; each control wavelet
// of the color that passes the router advances the position; after the last it returns to the
// base if `ring`, else it stays.
inline constexpr int kSwitchPositions = 4;
struct Route {
  std::array<SwitchPos, kSwitchPositions> pos{};
  uint8_t npos = 1;
  bool ring = false;
  DirSet rx_any() const;   // union over positions
  DirSet tx_any() const;
  uint8_t next(uint8_t p) const { return p + 1 < npos ? p + 1 : (ring ? 0 : p); }
  bool operator==(const Route&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Element types of arrays and DSDs. A fabric element is one wavelet: 32-bit types use the whole
// payload, 16-bit types its data half. Three 16-bit float formats (isa/numeric.hpp): f16 (IEEE
// half), bf16 (1-8-7) and cbf16 (Cerebras' cbfloat16, 1-6-9 with denormals; wafer.md "Numeric
// formats"). The 16-bit float ops (fmach, fmachs, faddh, ..., fh2s, fs2h) compute in the format of
// their 16-bit float operands, which must agree (`instr_half`).
enum class Elem : uint8_t { f16, f32, i16, i32, bf16, cbf16 };
inline constexpr int kElems = 6;
std::string_view elem_name(Elem e);
inline bool is_half(Elem e) { return e == Elem::f16 || e == Elem::bf16 || e == Elem::cbf16; }
inline int elem_bytes(Elem e) { return e == Elem::f32 || e == Elem::i32 ? 4 : 2; }
// A value as the bits of an element of type e (16-bit types in the low half; floats rounded to
// nearest even, integers truncated) and back (exact for the float types).
uint32_t encode_elem(float v, Elem e);
float decode_elem(uint32_t bits, Elem e);

enum class DsdKind : uint8_t { mem1d, mem4d, fabin, fabout, fifo };
std::string_view dsd_kind_name(DsdKind k);

struct DsdDim {
  uint16_t len = 1;
  int16_t stride = 1;  // elements
  bool operator==(const DsdDim&) const = default;
};
// A data structure descriptor. mem1d/mem4d walk SRAM from `base` (bytes in the data area) over
// dims (outermost first; mem1d has one); fabin/fabout move `length` wavelets on `color` through
// input/output queue `queue`; fifo is a ring buffer over an array (`length` elements).
struct Dsd {
  DsdKind kind = DsdKind::mem1d;
  Elem elem = Elem::f32;
  uint8_t ndims = 1;
  uint8_t color = 0;      // fabin, fabout
  uint8_t queue = 0;      // fabin, fabout (the async microthread)
  bool control : 1 = false;  // fabout: send control wavelets
  bool index : 1 = false;    // fabout, 16-bit: put the element index in the upper half
  bool advance : 1 = false;  // fabout: its last wavelet advances the switch of every router it passes, as a
                             // control wavelet does (CSL's .advance_switch) -- the sender's first, so the route
                             // can take what waits behind it -- but stays data: it fires no control task
  int16_t array = -1;     // mem1d, mem4d, fifo: Program::data index
  uint32_t base = 0;      // mem, fifo: byte address in the data area
  uint32_t length = 0;    // fabin/fabout: wavelets; fifo: capacity in elements
  std::array<DsdDim, 4> dims{};
  bool is_mem() const { return kind == DsdKind::mem1d || kind == DsdKind::mem4d; }
  bool is_fabric() const { return kind == DsdKind::fabin || kind == DsdKind::fabout; }
  int64_t elems() const;  // elements one operation covers (fifo: its capacity)
  // Byte range [lo, hi) a mem DSD touches relative to the data area (may be negative = error).
  std::pair<int64_t, int64_t> byte_range() const;
  bool operator==(const Dsd&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Opcodes.
enum class Op : uint8_t {
  // DSD (vector) ops: dst, src1[, src2][, scalar]
  fmacs, fmach, fmachs, fadds, faddh, faddhs, fsubs, fsubh, fmuls, fmulh, fmaxs, fnegs,
  fmovs, fmovh, mov16, mov32, add16, fh2s, fs2h,
  // scalar ops on registers r0..r15
  mov, add, sub, mul,
  dsd_off,   // D.base = declared base + A elements
  dsd_len,   // D length (mem1d, fabin, fabout) = A
  // control flow and tasks
  jmp, bz, bnz, blz, loop, activate, block, unblock, ret, halt, nop,
};
inline constexpr int kOps = static_cast<int>(Op::nop) + 1;

enum class OpClass : uint8_t { dsd, scalar, control };
// Which preset SIMD width an op uses (wafer.md PE "SIMD width per cycle").
enum class SimdClass : uint8_t { none, fp16, fp32, convert, fmacs };
// Operand roles in an op's signature. D, S: DSD operands (an S may also be a scalar, broadcast);
// K: scalar; R: destination register; A: scalar source; T: task; L: label; M: a DSD to modify.
enum class Role : uint8_t { D, S, K, R, A, T, L, M };
// Element type a DSD operand must have.
enum class Want : uint8_t { any, f16, f32, b16, b32 };

struct OpInfo {
  Op op;
  std::string_view name;
  OpClass cls;
  SimdClass simd;
  std::vector<Role> roles;
  std::vector<Want> types;  // per role (any for non-DSD roles)
  std::string_view meaning;
};
const std::vector<OpInfo>& all_ops();
inline const OpInfo& op_info(Op op) {  // (inline: the PE model asks at every instruction)
  static const OpInfo* const table = all_ops().data();
  return table[static_cast<size_t>(op)];
}
std::string_view op_name(Op op);

// Operands. imm_f keeps fp32 bits (printing); reg/imm values are 32 bits; px/py are the PE's
// coordinates within its rectangle, wv the payload (32-bit ops) or data half (16-bit ops) of the
// wavelet that fired the running data or control task.
enum class OpndKind : uint8_t { none, dsd, reg, imm_i, imm_f, px, py, wv, task, label };
struct Operand {
  OpndKind kind = OpndKind::none;
  int32_t v = 0;  // dsd index, register, immediate bits, task index, instruction index
  bool operator==(const Operand&) const = default;
};

inline constexpr int kRegs = 16;

struct Instr {
  Op op = Op::nop;
  bool async = false;
  int16_t on_activate = -1;  // async completion: Program::tasks index to activate
  int16_t on_unblock = -1;   //                   and/or to unblock
  std::array<Operand, 4> a{};
  int32_t line = 0;
};

// ---------------------------------------------------------------------------------------------
// Tasks and programs.
enum class TaskKind : uint8_t { data, local, control };
std::string_view task_kind_name(TaskKind k);

struct Task {
  std::string name;
  uint8_t id = 0;          // hardware task id (< task.count)
  TaskKind kind = TaskKind::local;
  int16_t color = -1;      // data: the color whose wavelets fire it
  int16_t queue = -1;      // data: input queue it reads (-1: bound by color only, WSE-2 style)
  bool active = false;     // initially activated
  bool blocked = false;    // initially blocked
  int32_t entry = 0;       // first instruction
  int32_t end = 0;         // one past the last
  int32_t line = 0;
};

struct DataDecl {
  std::string name;
  Elem elem = Elem::f32;
  int32_t count = 0;
  uint32_t addr = 0;       // bytes in the data area (4-byte aligned; the lowest free address, in declaration order)
  bool has_fill = false;
  float fill = 0;
  // live=LO..HI: the array holds values only in phases LO..HI of the program (numbered by whoever
  // writes it: the wafer compiler's kernels); arrays whose ranges do not intersect may share
  // addresses. -1: live throughout (every array without live=).
  int32_t live_lo = -1, live_hi = -1;
  int32_t line = 0;
  int64_t bytes() const { return int64_t{count} * elem_bytes(elem); }
  bool always_live() const { return live_lo < 0; }
  // Whether the two arrays may hold values at the same time (then they must not overlap).
  bool live_with(const DataDecl& o) const { return always_live() || o.always_live() || (live_lo <= o.live_hi && o.live_lo <= live_hi); }
};

struct Program {
  std::string source;                         // file name (errors, traces)
  std::map<std::string, double> params;       // the values bound at assembly
  std::vector<DataDecl> data;
  std::vector<Dsd> dsds;
  std::vector<std::string> dsd_names;
  std::vector<int32_t> dsd_lines;
  std::vector<Task> tasks;
  std::vector<Instr> instrs;
  std::map<std::string, int32_t> labels;      // label -> instruction index
  int64_t data_bytes() const;                 // the highest end of an array
  int find_task(std::string_view name) const; // -1 if none
};

// ---------------------------------------------------------------------------------------------
// Parameters the ISA rules, costs and the model need, read once from a ParamSet.
struct WaferConfig {
  int64_t fabric_width = 0, fabric_height = 0;
  double clock_hz = 0;
  int64_t sram_bytes = 0, reserved_bytes = 0, sram_banks = 0;
  bool bank_conflicts = false;  // pe.bank_conflicts: the model charges read-port conflicts (docs/wafer-model.md)
  int64_t simd_fp16 = 0, simd_fp32 = 0, simd_convert = 0, simd_fmacs = 0, setup_cycles = 0;
  int64_t fmacs_interval = 1;  // simd.fmacs_interval: cycles per fmacs element group
  int64_t sram_bw_q = 0;       // pe.sram_bytes_per_cycle in 1/1024 bytes (0: no limit)
  int64_t task_count = 0, colors = 0, hop_latency = 0, buffer_depth = 0;
  int64_t ramp_latency = 1;  // router.ramp_latency: cycles between a PE and its router, each way
  std::vector<int64_t> input_depth, output_depth;
  double memoryx_bandwidth = 0, memoryx_latency = 0, memoryx_capacity = 0, swarmx_bandwidth = 0, swarmx_latency = 0;
  int64_t memoryx_burst = 0;
  static WaferConfig from(const ParamSet& p);
  int64_t data_area_bytes() const { return sram_bytes - reserved_bytes; }
};
WaferConfig preset_config(std::string_view preset);  // "wse2", "wse3" with no overrides

// SIMD width (elements/cycle) of `op` walking a memory operand with innermost stride `stride`
// (elements): the op's class width from the preset, reduced by the stride rule of wafer.md:
// "stride 0/1 full width; stride%8 in {2,3,5,6} full; {1,7} width 2; 0 width 1" -- see
// stride_width_cap. Ops without a SIMD class (scalar, control) return 1.
int64_t simd_width(Op op, int64_t stride, const WaferConfig& c);
int64_t class_width(SimdClass s, const WaferConfig& c);
// The cap the stride puts on the width (0 = no cap): stride 0 or 1 (exactly) -> none;
// otherwise m = stride mod 8 (non-negative): m in {2,3,5,6} -> none; m in {1,7} -> 2;
// m == 0 -> 1; m == 4 -> 1 (not in wafer.md; assumption: banks b and b+4 share b%4, the
// read-port conflict rule of wafer.md PE SRAM).
int64_t stride_width_cap(int64_t stride);
// Width of one instruction: the minimum over its mem operands (fabric, fifo and scalar operands
// do not cap it).
int64_t instr_width(const Program& p, const Instr& in, const WaferConfig& c);
// Elements one DSD instruction processes: the length of its first non-fifo DSD operand (dst, then
// sources); 0 for non-DSD ops.
int64_t instr_length(const Program& p, const Instr& in);
// The 16-bit float format an instruction computes in: the element type of its first DSD operand in
// a 16-bit float role (Want::f16); f16 when it has none (a scalar-only source). The assembler
// checks that its other 16-bit float DSD operands agree.
Elem instr_half(const Program& p, const Instr& in);

struct CostRow {
  std::string_view what;     // op or op group
  std::string_view formula;
  std::string_view source;
};
const std::vector<CostRow>& cost_rows();
// Cycles per element group of `op`: simd.fmacs_interval for fmacs, 1 for every other op.
int64_t op_interval(Op op, const WaferConfig& c);
// DSD op: dsd.setup_cycles + ceil(len / width) * interval; scalar and control ops: 1 cycle.
int64_t dsd_op_cycles(int64_t len, int64_t width, const WaferConfig& c, int64_t interval = 1);
// Bytes one element of `in` moves through SRAM: the element sizes of its memory DSD operands
// (the destination's write and the sources' reads); 0 for non-DSD ops.
int64_t instr_mem_bytes(const Program& p, const Instr& in);
// The memory bytes per element an op is limited by under pe.sram_bytes_per_cycle: `mem_bytes` when
// `width` elements a cycle would move more than the limit, else 0 (the limit never binds).
int64_t sram_limited_bytes(int64_t width, int64_t mem_bytes, const WaferConfig& c);
// Elements an op limited to `bpe` bytes per element may have processed by its k-th processing
// cycle (k from 1): floor(k * pe.sram_bytes_per_cycle / bpe), the limit taken over the op's whole
// run so far.
int64_t sram_cap(int64_t k, int64_t bpe, const WaferConfig& c);
// dsd_op_cycles under the SRAM limit (bpe from sram_limited_bytes; 0 = dsd_op_cycles): the model's
// element groups cycle by cycle -- up to width elements, no more than sram_cap allows, then the
// interval's idle cycles.
int64_t dsd_op_cycles_bw(int64_t len, int64_t width, int64_t interval, int64_t bpe, const WaferConfig& c);
// One DSD op of `op` over `len` elements whose memory operands walk with innermost `stride`.
int64_t dsd_cycles(Op op, int64_t len, int64_t stride, const WaferConfig& c);
int64_t instr_cycles(const Program& p, const Instr& in, const WaferConfig& c);

}  // namespace tessera::wafer
