// Wafer ISA tables: directions, the opcode table with operand signatures, DSD geometry, the
// preset-derived configuration, the SIMD width rule and the cost table (shared/reference/wafer.md).
#include "isa/wafer/isa.hpp"

#include <algorithm>
#include <cmath>

#include "isa/error.hpp"
#include "isa/numeric.hpp"
#include "isa/wafer/params.hpp"

namespace tessera::wafer {

std::string_view dir_name(Dir d) {
  static constexpr std::string_view n[] = {"N", "S", "E", "W", "RAMP"};
  return n[static_cast<int>(d)];
}
Dir opposite(Dir d) {
  switch (d) {
    case Dir::N: return Dir::S;
    case Dir::S: return Dir::N;
    case Dir::E: return Dir::W;
    case Dir::W: return Dir::E;
    default: return Dir::RAMP;
  }
}

std::string format_dirset(DirSet s) {
  std::string out = "{";
  for (int i = 0; i < kDirs; ++i)
    if (s & (1u << i)) out += (out.size() > 1 ? "," : "") + std::string(dir_name(static_cast<Dir>(i)));
  return out + "}";
}

DirSet Route::rx_any() const {
  DirSet s = 0;
  for (int i = 0; i < npos; ++i) s |= pos[static_cast<size_t>(i)].rx;
  return s;
}
DirSet Route::tx_any() const {
  DirSet s = 0;
  for (int i = 0; i < npos; ++i) s |= pos[static_cast<size_t>(i)].tx;
  return s;
}

std::string_view elem_name(Elem e) {
  static constexpr std::string_view n[] = {"f16", "f32", "i16", "i32", "bf16", "cbf16"};
  return n[static_cast<int>(e)];
}
uint32_t encode_elem(float v, Elem e) {
  switch (e) {
    case Elem::f16: return fp32_to_fp16(v);
    case Elem::bf16: return fp32_to_bf16(v);
    case Elem::cbf16: return narrow_bits(v, FloatFormat::cbf16);
    case Elem::f32: return float_bits(v);
    case Elem::i16: return static_cast<uint16_t>(static_cast<int32_t>(v));
    default: return static_cast<uint32_t>(static_cast<int32_t>(v));
  }
}
float decode_elem(uint32_t b, Elem e) {
  switch (e) {
    case Elem::f16: return fp16_to_fp32(static_cast<uint16_t>(b));
    case Elem::bf16: return bf16_to_fp32(static_cast<uint16_t>(b));
    case Elem::cbf16: return widen_bits(b & 0xffffu, FloatFormat::cbf16);
    case Elem::f32: return bits_float(b);
    case Elem::i16: return static_cast<float>(static_cast<int16_t>(b));
    default: return static_cast<float>(static_cast<int32_t>(b));
  }
}

std::string_view dsd_kind_name(DsdKind k) {
  static constexpr std::string_view n[] = {"mem1d", "mem4d", "fabin", "fabout", "fifo"};
  return n[static_cast<int>(k)];
}
std::string_view task_kind_name(TaskKind k) {
  static constexpr std::string_view n[] = {"data", "local", "control"};
  return n[static_cast<int>(k)];
}

int64_t Dsd::elems() const {
  if (!is_mem()) return length;
  int64_t n = 1;
  for (int i = 0; i < ndims; ++i) n *= dims[static_cast<size_t>(i)].len;
  return n;
}

std::pair<int64_t, int64_t> Dsd::byte_range() const {
  if (kind == DsdKind::fifo) return {base, int64_t{base} + int64_t{length} * elem_bytes(elem)};
  int64_t lo = 0, hi = 0;  // element offsets
  for (int i = 0; i < ndims; ++i) {
    const auto& d = dims[static_cast<size_t>(i)];
    const int64_t span = int64_t{d.len - 1} * d.stride;
    (span < 0 ? lo : hi) += span;
  }
  const int64_t e = elem_bytes(elem);
  return {int64_t{base} + lo * e, int64_t{base} + (hi + 1) * e};
}

int64_t Program::data_bytes() const {
  int64_t end = 0;
  for (const auto& d : data) end = std::max(end, int64_t{d.addr} + d.bytes());
  return end;
}

int Program::find_task(std::string_view name) const {
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].name == name) return static_cast<int>(i);
  return -1;
}

// ---------------------------------------------------------------------------------------------
// The opcode table. Widths per class: wafer.md PE "SIMD width per cycle" (SDK Appendix).

const std::vector<OpInfo>& all_ops() {
  using R = Role;
  using W = Want;
  using C = OpClass;
  using S = SimdClass;
  static const std::vector<OpInfo> t = {
      {Op::fmacs, "fmacs", C::dsd, S::fmacs, {R::D, R::S, R::S, R::K}, {W::f32, W::f32, W::f32, W::any}, "dst = src1 + src2 * scalar (fp32)"},
      {Op::fmach, "fmach", C::dsd, S::fp16, {R::D, R::S, R::S, R::K}, {W::f16, W::f16, W::f16, W::any}, "dst = src1 + src2 * scalar (fp16)"},
      {Op::fmachs, "fmachs", C::dsd, S::fp32, {R::D, R::S, R::S, R::K}, {W::f32, W::f32, W::f16, W::any}, "dst = src1 + src2 * scalar (fp16 products, fp32 accumulator)"},
      {Op::fadds, "fadds", C::dsd, S::fp32, {R::D, R::S, R::S}, {W::f32, W::f32, W::f32}, "dst = src1 + src2 (fp32)"},
      {Op::faddh, "faddh", C::dsd, S::fp16, {R::D, R::S, R::S}, {W::f16, W::f16, W::f16}, "dst = src1 + src2 (fp16)"},
      {Op::faddhs, "faddhs", C::dsd, S::fp32, {R::D, R::S, R::S}, {W::f32, W::f32, W::f16}, "dst = src1 + src2 (fp16 addend, fp32 accumulator)"},
      {Op::fsubs, "fsubs", C::dsd, S::fp32, {R::D, R::S, R::S}, {W::f32, W::f32, W::f32}, "dst = src1 - src2 (fp32)"},
      {Op::fsubh, "fsubh", C::dsd, S::fp16, {R::D, R::S, R::S}, {W::f16, W::f16, W::f16}, "dst = src1 - src2 (fp16)"},
      {Op::fmuls, "fmuls", C::dsd, S::fp32, {R::D, R::S, R::S}, {W::f32, W::f32, W::f32}, "dst = src1 * src2 (fp32)"},
      {Op::fmulh, "fmulh", C::dsd, S::fp16, {R::D, R::S, R::S}, {W::f16, W::f16, W::f16}, "dst = src1 * src2 (fp16)"},
      {Op::fmaxs, "fmaxs", C::dsd, S::fp32, {R::D, R::S, R::S}, {W::f32, W::f32, W::f32}, "dst = max(src1, src2) (fp32)"},
      {Op::fnegs, "fnegs", C::dsd, S::fp32, {R::D, R::S}, {W::f32, W::f32}, "dst = -src (fp32)"},
      {Op::fmovs, "fmovs", C::dsd, S::fp32, {R::D, R::S}, {W::f32, W::f32}, "dst = src (fp32)"},
      {Op::fmovh, "fmovh", C::dsd, S::fp16, {R::D, R::S}, {W::f16, W::f16}, "dst = src (fp16)"},
      {Op::mov16, "mov16", C::dsd, S::fp16, {R::D, R::S}, {W::b16, W::b16}, "dst = src (16-bit copy)"},
      {Op::mov32, "mov32", C::dsd, S::fp32, {R::D, R::S}, {W::b32, W::b32}, "dst = src (32-bit copy)"},
      {Op::add16, "add16", C::dsd, S::fp16, {R::D, R::S, R::S}, {W::b16, W::b16, W::b16}, "dst = src1 + src2 (16-bit integers, wrapping)"},
      {Op::fh2s, "fh2s", C::dsd, S::convert, {R::D, R::S}, {W::f32, W::f16}, "dst = fp32(src) (exact)"},
      {Op::fs2h, "fs2h", C::dsd, S::convert, {R::D, R::S}, {W::f16, W::f32}, "dst = fp16(src) (nearest even)"},
      {Op::mov, "mov", C::scalar, S::none, {R::R, R::A}, {}, "rD = A"},
      {Op::add, "add", C::scalar, S::none, {R::R, R::A, R::A}, {}, "rD = A + B (32-bit integers)"},
      {Op::sub, "sub", C::scalar, S::none, {R::R, R::A, R::A}, {}, "rD = A - B (32-bit integers)"},
      {Op::mul, "mul", C::scalar, S::none, {R::R, R::A, R::A}, {}, "rD = A * B (32-bit integers)"},
      {Op::dsd_off, "dsd_off", C::scalar, S::none, {R::M, R::A}, {}, "D.base = declared base + A elements (mem1d, mem4d)"},
      {Op::dsd_len, "dsd_len", C::scalar, S::none, {R::M, R::A}, {}, "D.length = A (mem1d, fabin, fabout)"},
      {Op::jmp, "jmp", C::control, S::none, {R::L}, {}, "go to LABEL"},
      {Op::bz, "bz", C::control, S::none, {R::A, R::L}, {}, "go to LABEL if A == 0"},
      {Op::bnz, "bnz", C::control, S::none, {R::A, R::L}, {}, "go to LABEL if A != 0"},
      {Op::blz, "blz", C::control, S::none, {R::A, R::L}, {}, "go to LABEL if A < 0 (signed)"},
      {Op::loop, "loop", C::control, S::none, {R::R, R::L}, {}, "rN -= 1; go to LABEL if rN != 0"},
      {Op::activate, "activate", C::control, S::none, {R::T}, {}, "activate task T"},
      {Op::block, "block", C::control, S::none, {R::T}, {}, "block task T"},
      {Op::unblock, "unblock", C::control, S::none, {R::T}, {}, "unblock task T"},
      {Op::ret, "ret", C::control, S::none, {}, {}, "end the running task"},
      {Op::halt, "halt", C::control, S::none, {}, {}, "end the running task; the PE is done"},
      {Op::nop, "nop", C::control, S::none, {}, {}, "nothing"},
  };
  return t;
}

std::string_view op_name(Op op) { return op_info(op).name; }

// ---------------------------------------------------------------------------------------------

WaferConfig WaferConfig::from(const ParamSet& p) {
  WaferConfig c;
  c.fabric_width = p.integer("fabric.width");
  c.fabric_height = p.integer("fabric.height");
  c.clock_hz = p.num("pe.clock");
  c.sram_bytes = static_cast<int64_t>(p.num("pe.sram_bytes"));
  c.reserved_bytes = static_cast<int64_t>(p.num("pe.reserved_bytes"));
  c.sram_banks = p.integer("pe.sram_banks");
  c.bank_conflicts = p.flag("pe.bank_conflicts");
  c.simd_fp16 = p.integer("simd.fp16");
  c.simd_fp32 = p.integer("simd.fp32");
  c.simd_convert = p.integer("simd.convert");
  c.simd_fmacs = p.integer("simd.fmacs");
  c.fmacs_interval = p.integer("simd.fmacs_interval");
  c.sram_bw_q = std::llround(p.num("pe.sram_bytes_per_cycle") * 1024.0);
  c.setup_cycles = p.integer("dsd.setup_cycles");
  c.task_count = p.integer("task.count");
  c.colors = p.integer("router.colors");
  c.hop_latency = p.integer("router.hop_latency");
  c.ramp_latency = p.integer("router.ramp_latency");
  c.buffer_depth = p.integer("router.buffer_depth");
  c.input_depth = p.list("queue.input_depth");
  c.output_depth = p.list("queue.output_depth");
  c.memoryx_bandwidth = p.num("memoryx.bandwidth");
  c.memoryx_latency = p.num("memoryx.latency");
  c.memoryx_capacity = p.num("memoryx.capacity");
  c.memoryx_burst = static_cast<int64_t>(p.num("memoryx.burst_bytes"));
  c.swarmx_bandwidth = p.num("swarmx.bandwidth");
  c.swarmx_latency = p.num("swarmx.latency");
  return c;
}

WaferConfig preset_config(std::string_view preset) {
  const TargetDesc& t = target_desc();
  const Preset* pr = t.find_preset(preset);
  if (!pr) throw InputError("preset '" + std::string(preset) + "'", "not a wafer preset", "wafer presets: wse2 wse3");
  DiagnosticList d;
  ParamSet ps = ParamSet::resolve(t, *pr, {}, d);
  d.throw_if_any();
  return WaferConfig::from(ps);
}

int64_t class_width(SimdClass s, const WaferConfig& c) {
  switch (s) {
    case SimdClass::fp16: return c.simd_fp16;
    case SimdClass::fp32: return c.simd_fp32;
    case SimdClass::convert: return c.simd_convert;
    case SimdClass::fmacs: return c.simd_fmacs;
    default: return 1;
  }
}

int64_t stride_width_cap(int64_t stride) {
  if (stride == 0 || stride == 1) return 0;
  const int64_t m = ((stride % 8) + 8) % 8;
  if (m == 2 || m == 3 || m == 5 || m == 6) return 0;
  if (m == 1 || m == 7) return 2;
  return 1;  // m == 0 (wafer.md) and m == 4 (assumption)
}

int64_t simd_width(Op op, int64_t stride, const WaferConfig& c) {
  const int64_t w = class_width(op_info(op).simd, c);
  const int64_t cap = stride_width_cap(stride);
  return cap ? std::min(w, cap) : w;
}

int64_t instr_width(const Program& p, const Instr& in, const WaferConfig& c) {
  const OpInfo& info = op_info(in.op);
  int64_t w = class_width(info.simd, c);
  for (size_t i = 0; i < info.roles.size(); ++i) {
    if (in.a[i].kind != OpndKind::dsd) continue;
    const Dsd& d = p.dsds[static_cast<size_t>(in.a[i].v)];
    if (d.is_mem()) w = std::min(w, simd_width(in.op, d.dims[d.ndims - 1u].stride, c));
  }
  return std::max<int64_t>(w, 1);
}

int64_t instr_length(const Program& p, const Instr& in) {
  if (op_info(in.op).cls != OpClass::dsd) return 0;
  int64_t fifo = 0;
  for (const auto& o : in.a) {
    if (o.kind != OpndKind::dsd) continue;
    const Dsd& d = p.dsds[static_cast<size_t>(o.v)];
    if (d.kind != DsdKind::fifo) return d.elems();
    if (!fifo) fifo = d.elems();
  }
  return fifo;
}

Elem instr_half(const Program& p, const Instr& in) {
  const OpInfo& info = op_info(in.op);
  for (size_t k = 0; k < info.roles.size() && k < info.types.size(); ++k)
    if (info.types[k] == Want::f16 && in.a[k].kind == OpndKind::dsd) return p.dsds[static_cast<size_t>(in.a[k].v)].elem;
  return Elem::f16;
}

const std::vector<CostRow>& cost_rows() {
  static const std::vector<CostRow> rows = {
      {"fmach fmulh faddh fsubh fmovh mov16 add16", "dsd.setup_cycles + ceil(len / width(simd.fp16, stride))",
       "wafer.md PE SIMD widths: fp16 ops 4 / 8 (SDK Appendix); setup: 3P DSD op setup ~15-17 cycles"},
      {"fadds fsubs fmovs mov32 fmachs faddhs", "dsd.setup_cycles + ceil(len / width(simd.fp32, stride))",
       "wafer.md PE SIMD widths: 2 / 4 (SDK Appendix)"},
      {"fmuls fmaxs fnegs", "dsd.setup_cycles + ceil(len / width(simd.fp32, stride))",
       "assumption: fp32 ops not in the SDK table, costed like fadds (wafer.md PE)"},
      {"fh2s fs2h", "dsd.setup_cycles + ceil(len / width(simd.convert, stride))", "wafer.md PE SIMD widths: conversions 1 / 4 (SDK Appendix)"},
      {"fmacs", "dsd.setup_cycles + ceil(len / width(simd.fmacs, stride)) * simd.fmacs_interval",
       "wafer.md PE: fmacs is not SIMD, width 1 (SDK Appendix); 3P measured 0.5 elements/cycle (simd.fmacs_interval 2; default 1)"},
      {"SRAM limit", "with pe.sram_bytes_per_cycle > 0, by the k-th processing cycle at most floor(k * pe.sram_bytes_per_cycle / memory bytes per element) elements",
       "wafer.md Whole wafer: memory bandwidth 20 / 21 PB/s over 850,000 / 900,000 cores (21.4 / 21.2 bytes per cycle at 1.1 GHz); off by default"},
      {"stride rule", "width = min(class width, cap(stride)); cap: stride 0,1 none; stride%8 in {2,3,5,6} none; {1,7} 2; {0,4} 1",
       "wafer.md PE: \"stride 0/1 full width; stride%8 in {2,3,5,6} full; {1,7} width 2; 0 width 1\"; %8==4 assumption (read-port rule b1%4 != b2%4)"},
      {"mov add sub mul dsd_off dsd_len jmp bz bnz blz loop activate block unblock ret halt nop", "1",
       "assumption from wafer.md PE 3P pipeline notes: single issue, in order"},
  };
  return rows;
}

int64_t op_interval(Op op, const WaferConfig& c) { return op == Op::fmacs ? std::max<int64_t>(1, c.fmacs_interval) : 1; }

int64_t dsd_op_cycles(int64_t len, int64_t width, const WaferConfig& c, int64_t interval) {
  const int64_t w = std::max<int64_t>(width, 1);
  return c.setup_cycles + (len + w - 1) / w * std::max<int64_t>(interval, 1);
}

int64_t dsd_cycles(Op op, int64_t len, int64_t stride, const WaferConfig& c) {
  return dsd_op_cycles(len, std::max<int64_t>(1, simd_width(op, stride, c)), c, op_interval(op, c));
}

int64_t instr_mem_bytes(const Program& p, const Instr& in) {
  if (op_info(in.op).cls != OpClass::dsd) return 0;
  int64_t b = 0;
  for (const auto& o : in.a)
    if (o.kind == OpndKind::dsd && p.dsds[static_cast<size_t>(o.v)].is_mem()) b += elem_bytes(p.dsds[static_cast<size_t>(o.v)].elem);
  return b;
}

int64_t sram_limited_bytes(int64_t width, int64_t mem_bytes, const WaferConfig& c) {
  return c.sram_bw_q > 0 && mem_bytes > 0 && width * mem_bytes * 1024 > c.sram_bw_q ? mem_bytes : 0;
}

int64_t sram_cap(int64_t k, int64_t bpe, const WaferConfig& c) { return k * c.sram_bw_q / (bpe * 1024); }

int64_t dsd_op_cycles_bw(int64_t len, int64_t width, int64_t interval, int64_t bpe, const WaferConfig& c) {
  if (bpe <= 0 || len <= 0) return dsd_op_cycles(len, width, c, interval);
  const int64_t w = std::max<int64_t>(width, 1), iv = std::max<int64_t>(interval, 1);
  int64_t i = 0, k = 0;  // elements done; cycles since the first processing cycle
  for (;;) {
    const int64_t n = std::min({w, len - i, sram_cap(k + 1, bpe, c) - i});
    ++k;
    if (n <= 0) continue;
    i += n;
    if (iv > 1) k += iv - 1;  // the group's idle cycles (run_group's pause)
    if (i >= len) return c.setup_cycles + k;
  }
}

int64_t instr_cycles(const Program& p, const Instr& in, const WaferConfig& c) {
  if (op_info(in.op).cls != OpClass::dsd) return 1;
  const int64_t width = instr_width(p, in, c);
  return dsd_op_cycles_bw(instr_length(p, in), width, op_interval(in.op, c), sram_limited_bytes(width, instr_mem_bytes(p, in), c), c);
}

}  // namespace tessera::wafer
