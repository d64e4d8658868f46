// The wafer PE: tasks, scalar and control instructions, DSD operations with real numerics over
// lazily paged SRAM, fabric queues and microthreads (docs/wafer-model.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>

#include "isa/numeric.hpp"
#include "models/wafer/fabric_impl.hpp"

namespace tessera::wafer {

namespace {
constexpr uint32_t kPage = static_cast<uint32_t>(FabricStats::kPageBytes);
inline float F(uint32_t b) { return bits_float(b); }
inline uint32_t Fb(float v) { return float_bits(v); }
// A 16-bit float operand (f16, bf16 or cbf16: the instruction's instr_half) and back.
inline float Hf(uint32_t b, Elem e) { return decode_elem(b, e); }
inline uint32_t Hb(float v, Elem e) { return encode_elem(v, e); }
bool is16(Want w) { return w == Want::f16 || w == Want::b16; }
// One element of a DSD op: its result from the operand values v[1..3] (hf: the op's 16-bit format).
inline uint32_t apply_op(Op op, const std::array<uint32_t, 4>& v, Elem hf) {
  switch (op) {
    case Op::fmacs: return Fb(std::fma(F(v[2]), F(v[3]), F(v[1])));
    case Op::fmach: return Hb(std::fma(Hf(v[2], hf), Hf(v[3], hf), Hf(v[1], hf)), hf);
    case Op::fmachs: return Fb(std::fma(Hf(v[2], hf), Hf(v[3], hf), F(v[1])));
    case Op::fadds: return Fb(F(v[1]) + F(v[2]));
    case Op::faddh: return Hb(Hf(v[1], hf) + Hf(v[2], hf), hf);
    case Op::faddhs: return Fb(F(v[1]) + Hf(v[2], hf));
    case Op::fsubs: return Fb(F(v[1]) - F(v[2]));
    case Op::fsubh: return Hb(Hf(v[1], hf) - Hf(v[2], hf), hf);
    case Op::fmuls: return Fb(F(v[1]) * F(v[2]));
    case Op::fmulh: return Hb(Hf(v[1], hf) * Hf(v[2], hf), hf);
    case Op::fmaxs: return Fb(std::fmax(F(v[1]), F(v[2])));
    case Op::fnegs: return v[1] ^ 0x80000000u;
    case Op::fmovs: case Op::mov32: return v[1];
    case Op::fmovh: case Op::mov16: return v[1] & 0xffffu;
    case Op::add16: return (v[1] + v[2]) & 0xffffu;
    case Op::fh2s: return Fb(Hf(v[1], hf));
    case Op::fs2h: return Hb(F(v[1]), hf);
    default: return 0;
  }
}
// Whether an op has an operand in a 16-bit float role (its format comes from instr_half).
bool has_half(Op op) {
  static const std::array<bool, kOps> t = [] {
    std::array<bool, kOps> a{};
    for (const auto& i : all_ops())
      for (Want w : i.types) a[static_cast<size_t>(i.op)] |= w == Want::f16;
    return a;
  }();
  return t[static_cast<size_t>(op)];
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// SRAM: pages allocated on first write; never-written memory reads as zero.

// A new SRAM page for PE s, from worker w's slab (a new slab when it is used up).
uint32_t Fabric::Impl::new_page(Worker& w, uint32_t s) {
  const int64_t total = sram_pages.load(std::memory_order_relaxed) + 1;  // (with threads: racy, as the budget is)
  if (sram_budget >= 0 && total * kPage > sram_budget) {
    const Pe& P = pes[s];
    throw Failure{pe_label(P.x, P.y) + ": SRAM pages written so far need " + std::to_string(total * kPage) +
                  " bytes of host memory, past what the host-memory budget leaves for SRAM (" + std::to_string(sram_budget) +
                  " bytes); raise run.host_memory"};
  }
  if (w.page_next == w.page_end) {
    const uint32_t k = slab_count.fetch_add(1, std::memory_order_relaxed);
    if (k >= slabs.size()) throw Failure{"the SRAM slab table is full (" + std::to_string(slabs.size()) + " slabs of " + std::to_string(kSlabPages) + " pages): run with fewer threads"};
    slabs[k] = std::make_unique<uint8_t[]>(static_cast<size_t>(kSlabPages) * kPage);  // zeroed
    w.page_next = k << kSlabShift;
    w.page_end = w.page_next + kSlabPages;
  }
  sram_pages.fetch_add(1, std::memory_order_relaxed);
  return w.page_next++;
}

// The failures of store and load_elem, out of line (their message's strings made both functions
// save and restore a large frame on every call).
[[noreturn, gnu::cold, gnu::noinline]] void Fabric::Impl::sram_outside(uint32_t s, uint32_t addr, bool write) const {
  const Pe& P = pes[s];
  throw Failure{pe_label(P.x, P.y) + ": SRAM " + (write ? "write" : "read") + " at byte " + std::to_string(addr) + " outside the data area" +
                (write ? " (" + std::to_string(cfg.data_area_bytes()) + " bytes)" : std::string())};
}

void Fabric::Impl::store(Worker& wk, uint32_t s, uint32_t addr, int bytes, uint32_t bits) {
  Pe& P = pes[s];
  if (int64_t{addr} + bytes > cfg.data_area_bytes()) [[unlikely]]
    sram_outside(s, addr, true);
  if (comm && !own_row(P.y)) return;  // (a partitioned fabric: the PE's rank holds its SRAM)
  const uint32_t pg = addr / kPage;
  uint32_t base = P.pg_base;
  if (pg != P.pg_last) {
    if (!P.pages) {
      const size_t n = static_cast<size_t>((cfg.data_area_bytes() + kPage - 1) / kPage);
      P.pages = std::make_unique<uint32_t[]>(n);
      std::fill_n(P.pages.get(), n, kNone);
    }
    uint32_t& entry = P.pages[pg];
    if (entry == kNone) {
      if (bits == 0) return;  // writing zero to a never-written page changes nothing
      entry = new_page(wk, s);
    }
    base = entry;
    P.pg_last = pg;
    P.pg_base = base;
  }
  uint8_t* p = page_ptr(base) + addr % kPage;
  constexpr bool le = std::endian::native == std::endian::little;  // words copied whole (constant sizes: no library call)
  if (le && bytes == 4) std::memcpy(p, &bits, 4);
  else if (le && bytes == 2) std::memcpy(p, &bits, 2);
  else for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

uint32_t Fabric::Impl::load_elem(uint32_t s, uint32_t addr, int bytes) const {
  const Pe& P = pes[s];
  if (int64_t{addr} + bytes > cfg.data_area_bytes()) [[unlikely]]
    sram_outside(s, addr, false);
  const uint32_t pg = addr / kPage;
  uint32_t base = P.pg_base;
  if (pg != P.pg_last) {
    if (!P.pages) return 0;
    base = P.pages[pg];
    if (base == kNone) return 0;
    P.pg_last = pg;
    P.pg_base = base;
  }
  const uint8_t* p = page_ptr(base) + addr % kPage;
  uint32_t v = 0;
  constexpr bool le = std::endian::native == std::endian::little;
  if (le && bytes == 4) std::memcpy(&v, p, 4);
  else if (le && bytes == 2) std::memcpy(&v, p, 2);
  else for (int i = 0; i < bytes; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

uint32_t Fabric::Impl::encode(float v, Elem e) { return encode_elem(v, e); }
float Fabric::Impl::decode(uint32_t b, Elem e) { return decode_elem(b, e); }

// mem_addr's walks other than one dimension within its length (fabric_impl.hpp).
uint32_t Fabric::Impl::mem_addr_dims(const Dsd& d, int64_t i) {
  int64_t off = 0;
  if (i >= 0 && i <= 0xffffffff) {  // 32-bit divisions (a dimension's length is 16 bits)
    uint32_t u = static_cast<uint32_t>(i);
    for (int k = d.ndims - 1; k >= 0; --k) {
      const DsdDim& dm = d.dims[static_cast<size_t>(k)];
      const uint32_t len = static_cast<uint32_t>(dm.len);
      off += static_cast<int64_t>(u % len) * dm.stride;
      u /= len;
    }
  } else {
    for (int k = d.ndims - 1; k >= 0; --k) {
      const DsdDim& dm = d.dims[static_cast<size_t>(k)];
      off += (i % dm.len) * dm.stride;
      i /= dm.len;
    }
  }
  return mem_byte(d, off);
}

int64_t Fabric::Impl::op_length(uint32_t s, const Instr& in) const {
  int64_t fifo = 0;
  for (const auto& o : in.a) {
    if (o.kind != OpndKind::dsd) continue;
    const Dsd& d = dsd(s, o.v);
    if (d.kind != DsdKind::fifo) return d.elems();
    if (!fifo) fifo = d.elems();
  }
  return fifo;
}

std::string Fabric::Impl::where(uint32_t s, int32_t instr) const {
  const Program& p = prog(s);
  const Instr& in = p.instrs[static_cast<size_t>(instr)];
  return p.source + ":" + std::to_string(in.line) + " (" + disassemble(p, in) + ")";
}

// ---------------------------------------------------------------------------------------------
// DSD operations.

bool Fabric::Impl::memory_only(uint32_t s, const Instr& in) const {
  const OpInfo& info = op_info(in.op);
  for (size_t k = 0; k < info.roles.size(); ++k)
    if (in.a[k].kind == OpndKind::dsd && !dsd(s, in.a[k].v).is_mem()) return false;
  return true;
}

int Fabric::Impl::run_group(Worker& wk, uint32_t s, OpRun& op, int64_t t) {
  // An op slower than one group per cycle (simd.fmacs_interval) idles the cycles after a group.
  if (op.pause > 0) return --op.pause == 0 && op.i >= op.len ? 2 : 1;
  if (op.len > 0 && op.i >= op.len) return op.drained_at > t ? 0 : 2;  // computed at issue (eager_memory_ops), or taken ahead (drain)
  Pe& P = pes[s];
  // An op with elements left that reads an empty input queue takes nothing this cycle: what the
  // operand check below finds for its first element, without reading the op's instruction (a PE
  // stepped for a data task while its weight stream's move waits on the fabric). Not with a
  // memory-bandwidth limit (it may idle the cycle first, returning 1) or a bank conflict to pay
  // (counted before the operands).
  if (op.inq && op.i < op.len && !op.bpe && !(cfg.bank_conflicts && !op.conflict_paid))
    for (uint32_t b = op.inq; b; b &= b - 1)
      if (!P.qcount[static_cast<size_t>(std::countr_zero(b))]) return 0;
  const Program& p = prog(s);
  const Instr& in = p.instrs[static_cast<size_t>(op.instr)];
  const OpInfo& info = op_info(in.op);
  const size_t nr = info.roles.size();
  int64_t n = std::min<int64_t>(op.width, op.len - op.i);
  // pe.sram_bytes_per_cycle: no more elements than the memory bandwidth has carried since the op's
  // first processing cycle (a cycle without room idles, like a pause).
  if (op.bpe && n > 0) {  // (an op of no elements ends as before)
    n = std::min(n, sram_cap(t - (op.start + cfg.setup_cycles) + 1, op.bpe, cfg) - op.i);
    if (n <= 0) return 1;
  }
  // pe.bank_conflicts (wafer.md PE SRAM: "the two reads must hit banks with b1 % 4 != b2 % 4"): when
  // the first elements of this cycle's group of two memory sources sit in banks (16-bit words
  // interleaved over pe.sram_banks) with equal bank % 4, the group costs one extra cycle.
  if (cfg.bank_conflicts && !op.conflict_paid && n > 0) {
    uint32_t addr[2];
    int nm = 0;
    for (size_t k = 1; k < nr && nm < 2; ++k)
      if (in.a[k].kind == OpndKind::dsd && dsd(s, in.a[k].v).is_mem()) addr[nm++] = mem_addr(s, dsd(s, in.a[k].v), op.i);
    const int64_t banks = std::max<int64_t>(1, cfg.sram_banks);
    if (nm == 2 && (static_cast<int64_t>(addr[0] / 2) % banks) % 4 == (static_cast<int64_t>(addr[1] / 2) % banks) % 4) {
      op.conflict_paid = true;
      ++wk.st->bank_conflict_cycles;
      return 1;
    }
  }
  const Elem hf = has_half(in.op) ? instr_half(p, in) : Elem::f16;
  // An operand that is not a DSD: its value, the same for every element of a call (registers, wv
  // and the PE's coordinates do not change while an op runs its elements). Scalars other than wv
  // are fp32 values; 16-bit float operands round them to the op's format.
  auto scalar = [&](size_t k) -> uint32_t {
    const Operand& o = in.a[k];
    const Want want = info.types.empty() ? Want::any : info.types[k];
    uint32_t v = 0;
    switch (o.kind) {
      case OpndKind::imm_i: v = want == Want::f32 || want == Want::f16 || want == Want::any ? Fb(static_cast<float>(o.v)) : static_cast<uint32_t>(o.v); break;
      case OpndKind::imm_f: v = static_cast<uint32_t>(o.v); break;
      case OpndKind::reg: v = P.regs[static_cast<size_t>(o.v)]; break;
      case OpndKind::px: v = want == Want::b16 || want == Want::b32 ? static_cast<uint32_t>(P.px) : Fb(static_cast<float>(P.px)); break;
      case OpndKind::py: v = want == Want::b16 || want == Want::b32 ? static_cast<uint32_t>(P.py) : Fb(static_cast<float>(P.py)); break;
      case OpndKind::wv: return is16(want) ? (P.wv & 0xffffu) : P.wv;
      default: break;
    }
    if (want == Want::f16) v = Hb(F(v), hf);
    if (k == 3 && (in.op == Op::fmach || in.op == Op::fmachs)) v = Hb(F(v), hf);
    return v;
  };
  int64_t done = 0;
  // Memory operands only (an op computed at issue, eager_memory_ops, or any op without fabric or
  // fifo operands): nothing can hold an element back, so the operands are resolved once and the
  // elements run in a tight loop -- the same loads, arithmetic and stores in the same order as
  // the general loop below.
  bool mem = n > 0 && in.a[0].kind == OpndKind::dsd;
  for (size_t k = 0; k < nr && mem; ++k) mem = in.a[k].kind != OpndKind::dsd || dsd(s, in.a[k].v).is_mem();
  if (mem) {
    std::array<const Dsd*, 4> md{};
    std::array<int, 4> eb{};
    std::array<uint32_t, 4> v{};
    for (size_t k = 0; k < nr; ++k) {
      if (in.a[k].kind == OpndKind::dsd) {
        md[k] = &dsd(s, in.a[k].v);
        eb[k] = elem_bytes(md[k]->elem);
      } else if (k > 0) {
        v[k] = scalar(k);
      }
    }
    for (; done < n; ++done) {
      const int64_t i = op.i;
      for (size_t k = 1; k < nr; ++k)
        if (md[k]) v[k] = load_elem(s, mem_addr(s, *md[k], i), eb[k]);
      store(wk, s, mem_addr(s, *md[0], i), eb[0], apply_op(in.op, v, hf));
      ++op.i;
    }
  }
  for (; done < n; ++done) {
    // Every operand must be able to go for this element.
    bool ok = true;
    for (size_t k = 0; k < nr && ok; ++k) {
      if (in.a[k].kind != OpndKind::dsd) continue;
      const Dsd& d = dsd(s, in.a[k].v);
      if (d.kind == DsdKind::fabin) {
        if (P.qcount[d.queue] == 0) {
          ok = false;
        } else {
          const Wv& w = qentry(s, d.queue, P.qhead[d.queue]);
          ok = w.ready <= t && !(w.control && for_ctrl_task(pinfo[P.prog], w));
        }
      } else if (d.kind == DsdKind::fabout) {
        ok = P.qcount[8u + d.queue] < out_depth[d.queue];
      } else if (d.kind == DsdKind::fifo) {
        const uint32_t cnt = P.fifo.empty() ? 0 : P.fifo[static_cast<size_t>(in.a[k].v) * 2 + 1];
        ok = k == 0 ? cnt < d.length : cnt > 0;
      }
    }
    if (!ok) break;
    const int64_t i = op.i;
    std::array<uint32_t, 4> v{};
    for (size_t k = 1; k < nr; ++k) {
      const Operand& o = in.a[k];
      if (o.kind != OpndKind::dsd) {
        v[k] = scalar(k);
        continue;
      }
      const Dsd& d = dsd(s, o.v);
      const int eb = elem_bytes(d.elem);
      if (d.is_mem()) {
        v[k] = load_elem(s, mem_addr(s, d, i), eb);
      } else if (d.kind == DsdKind::fabin) {
        const Wv& w = qentry(s, d.queue, P.qhead[d.queue]);
        v[k] = eb == 2 ? (w.payload & 0xffffu) : w.payload;
        pop_queue(s, d.queue);
        wake_router(wk, pe_index(s), t + 1);
      } else {  // fifo pop
        if (P.fifo.empty()) P.fifo.assign(p.dsds.size() * 2, 0);
        uint32_t& head = P.fifo[static_cast<size_t>(o.v) * 2];
        v[k] = load_elem(s, d.base + head * static_cast<uint32_t>(eb), eb);
        head = (head + 1) % d.length;
        --P.fifo[static_cast<size_t>(o.v) * 2 + 1];
      }
    }
    const uint32_t r = apply_op(in.op, v, hf);
    // The destination.
    const Dsd& d = dsd(s, in.a[0].v);
    const int eb = elem_bytes(d.elem);
    if (d.is_mem()) {
      store(wk, s, mem_addr(s, d, i), eb, r);
    } else if (d.kind == DsdKind::fabout) {
      uint32_t payload = r;
      if (eb == 2) payload = (r & 0xffffu) | (d.index ? static_cast<uint32_t>(i & 0xffff) << 16 : 0u);
      const uint8_t kind = d.control ? kControl : d.advance && op.i + 1 == op.len ? kAdvance : kData;  // (advance: the last one)
      push_queue(s, 8 + d.queue, {payload, d.color, kind, t + 1});
      wake_router(wk, pe_index(s), t + 1);
    } else if (d.kind == DsdKind::fifo) {
      if (P.fifo.empty()) P.fifo.assign(p.dsds.size() * 2, 0);
      const uint32_t head = P.fifo[static_cast<size_t>(in.a[0].v) * 2];
      uint32_t& cnt = P.fifo[static_cast<size_t>(in.a[0].v) * 2 + 1];
      store(wk, s, d.base + ((head + cnt) % d.length) * static_cast<uint32_t>(eb), eb, r);
      ++cnt;
    }
    ++op.i;
  }
  wk.st->dsd_elements += done;
  if (done > 0) op.conflict_paid = false;
  if (done == 0 && op.len > 0) return 0;
  if (op.interval > 1 && done > 0) {
    op.pause = static_cast<int16_t>(op.interval - 1);
    return 1;
  }
  return op.i >= op.len ? 2 : 1;
}

// The bytes a memory DSD's walk can touch, [lo, hi) (a bound over its dimensions).
static std::pair<int64_t, int64_t> mem_span(const Dsd& d) {
  int64_t lo = 0, hi = 0;
  for (int k = 0; k < d.ndims; ++k) {
    const int64_t e = int64_t{d.dims[static_cast<size_t>(k)].len - 1} * d.dims[static_cast<size_t>(k)].stride;
    (e < 0 ? lo : hi) += e;
  }
  const int64_t eb = elem_bytes(d.elem);
  return {int64_t{d.base} + lo * eb, int64_t{d.base} + hi * eb + eb};
}

// A fast path with the same effects as queueing the wavelet and letting the microthread take it
// at t1 (run_group): the queue is empty, so the op takes this wavelet at its ready cycle; a move
// has one fabric source and no memory source (no bank conflict); the op's end is still found by
// pe_step at t1 (run_group returns 2 at once), so completion, activation and records are as before.
bool Fabric::Impl::drain(Worker& wk, uint32_t s, int q, const Wv& w, int64_t t1) {
  Pe& P = pes[s];
  if (P.qcount[static_cast<size_t>(q)] || w.control || P.mts.empty()) return false;
  // Not when something due at t1 would see the store early: an SRAM fault, or the watchdog's stop.
  if (wk.next_flip < flips.size() && start + flips[wk.next_flip].f.cycle <= t1) return false;
  if (f.opt_.max_cycles > 0 && t1 - start > f.opt_.max_cycles) return false;
  const Program& p = prog(s);
  // Which ops read queue q: their fabin queues, noted at issue (a fabin DSD's queue never changes).
  const uint16_t qbit = static_cast<uint16_t>(1u << q);
  if (P.main.instr >= 0 && (P.main.inq & qbit)) return false;
  for (Mt& m : P.mts) {
    if (!(m.op.inq & qbit)) continue;
    // The first microthread on this queue takes it (pe_step runs them in order): a move from the
    // fabric into memory (Mt::mv, set at issue).
    if (!m.mv || m.op.next > t1 || m.op.i >= m.op.len) return false;
    const Dsd& dst = m.dst;
    if (m.op.bpe && sram_cap(t1 - (m.op.start + cfg.setup_cycles) + 1, m.op.bpe, cfg) <= m.op.i) return false;  // pe.sram_bytes_per_cycle
    // Microthreads before this one run before it at t1: none of their memory operands may overlap
    // the destination (the store is early for them).
    const auto [dlo, dhi] = mem_span(dst);
    for (const Mt& e : P.mts) {
      if (&e == &m) break;
      const Instr& ei = p.instrs[static_cast<size_t>(e.op.instr)];
      for (const auto& o : ei.a)
        if (o.kind == OpndKind::dsd && dsd(s, o.v).is_mem()) {
          const auto [lo, hi] = mem_span(dsd(s, o.v));
          if (lo < dhi && dlo < hi) return false;
        }
    }
    const uint32_t v = m.mv & kMvSrc16 ? (w.payload & 0xffffu) : w.payload;
    const uint32_t r = m.mv & kMvOp16 ? v & 0xffffu : v;
    store(wk, s, mem_addr(s, dst, m.op.i), elem_bytes(dst.elem), r);
    ++m.op.i;
    m.op.drained_at = t1;
    P.qhw[static_cast<size_t>(q)] = std::max<uint8_t>(P.qhw[static_cast<size_t>(q)], 1);  // (it passed through the queue)
    wake_router(wk, pe_index(s), t1 + 1);  // as the microthread's pop at t1 would (the router may use that cycle)
    ++wk.st->dsd_elements;
    m.op.conflict_paid = false;
    if (m.op.i >= m.op.len) wake_pe(wk, s, t1);
    wk.last_progress = std::max(wk.last_progress, t1 + 1);
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Tasks and instructions.

// Whether a task could fire on the PE's state now: an active task, a wavelet for a data task, or
// one for a control task.
bool Fabric::Impl::may_pick(uint32_t s) const {
  const Pe& P = pes[s];
  const ProgInfo& pi = pinfo[P.prog];
  // Bit q: input queue q holds a wavelet. The eight counts at once: the top bit of each nonzero
  // byte (no carry leaves a byte: 0x7f + 0x7f < 0x100), gathered into one byte by a multiply whose
  // partial products land on distinct bits.
  uint64_t v;
  std::memcpy(&v, &P.qcount[0], sizeof v);
  const uint64_t top = (((v & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | v) & 0x8080808080808080ULL;
  const auto nonempty = static_cast<uint8_t>(((top >> 7) * 0x0102040810204080ULL) >> 56);
  return (P.active & ~P.blocked) || (nonempty & pi.data_q) || (pi.has_ctrl && nonempty);
}

bool Fabric::Impl::pick_task(Worker& wk, uint32_t s, int64_t t) {
  Pe& P = pes[s];
  const Program& p = prog(s);
  const ProgInfo& pi = pinfo[P.prog];
  if (!may_pick(s)) return false;  // nothing can fire
  for (const int8_t k : pi.by_id) {
    const uint64_t bit = uint64_t{1} << k;
    if (P.blocked & bit) continue;
    const Task& tk = p.tasks[static_cast<size_t>(k)];
    if (tk.kind == TaskKind::data) {
      const int q = pi.color_q[static_cast<size_t>(tk.color)];
      if (q < 0 || !P.qcount[static_cast<size_t>(q)]) continue;
      const Wv& w = qentry(s, q, P.qhead[static_cast<size_t>(q)]);
      if (w.ready > t || w.color != tk.color) continue;
      if (for_ctrl_task(pi, w)) continue;  // the head fires a control task, not this one
      P.wv = w.payload;
      pop_queue(s, q);
      wake_router(wk, pe_index(s), t + 1);
    } else if (tk.kind == TaskKind::control) {
      // Fires on a control wavelet naming its id (index half) at the head of an input queue; its
      // data half is wv.
      int q = 0;
      for (; q < 8; ++q) {
        if (!P.qcount[static_cast<size_t>(q)]) continue;
        const Wv& w = qentry(s, q, P.qhead[static_cast<size_t>(q)]);
        if (w.ready <= t && w.control == kControl && (w.payload >> 16) == tk.id) break;
      }
      if (q < 8) {
        P.wv = qentry(s, q, P.qhead[static_cast<size_t>(q)]).payload & 0xffffu;
        pop_queue(s, q);
        wake_router(wk, pe_index(s), t + 1);
      } else {  // `activate` works on any task
        if (!(P.active & bit)) continue;
        P.active &= ~bit;
        P.wv = 0;
      }
    } else {
      if (!(P.active & bit)) continue;
      P.active &= ~bit;
    }
    P.task = k;
    P.pc = tk.entry;
    P.task_start = t;
    ++wk.st->tasks_run;
    return true;
  }
  return false;
}

void Fabric::Impl::pe_step(Worker& wk, uint32_t s, int64_t t) {
  Pe& P = pes[s];
  bool progress = false;
  // Microthreads.
  for (size_t k = 0; k < P.mts.size();) {
    Mt& m = P.mts[k];
    if (m.op.next > t) {
      wake_pe(wk, s, m.op.next);
      ++k;
      continue;
    }
    const int r = run_group(wk, s, m.op, t);
    if (r) progress = true;
    if (r == 2) {
      const int64_t end = m.op.len == 0 ? t : t + 1;
      if (m.on_activate >= 0) P.active |= uint64_t{1} << m.on_activate;
      if (m.on_unblock >= 0) P.blocked &= ~(uint64_t{1} << m.on_unblock);
      if (f.opt_.record) {
        f.note_active(s, m.op.start - start, end - start);
        if (P.rec) record(wk, *wk.ops, wk.tag_o, t, s, OpRecord{P.x, P.y, m.op.instr, true, m.id, m.op.start - start, end - start, m.op.len});
      }
      P.mts.erase(P.mts.begin() + static_cast<std::ptrdiff_t>(k));
      wake_pe(wk, s, end);
      continue;
    }
    if (r == 1) wake_pe(wk, s, t + 1);
    ++k;
  }
  // Main thread.
  for (int guard = 0; !P.halted; ++guard) {
    if (guard == 8) {
      wake_pe(wk, s, t + 1);
      break;
    }
    if (P.main.instr >= 0) {
      OpRun& op = P.main;
      if (op.next > t) {
        wake_pe(wk, s, op.next);
        break;
      }
      const int r = run_group(wk, s, op, t);
      if (r) progress = true;
      if (r == 2) {
        const int64_t end = op.len == 0 ? t : t + 1;
        if (f.opt_.record) {
          f.note_active(s, op.start - start, end - start);
          if (P.rec) record(wk, *wk.ops, wk.tag_o, t, s, OpRecord{P.x, P.y, op.instr, false, 0, op.start - start, end - start, op.len});
        }
        wk.st->stall_cycles += std::max<int64_t>(0, end - op.start - dsd_op_cycles_bw(op.len, op.width, op.interval, op.bpe, cfg));
        op.instr = -1;
        ++P.pc;
        P.ready_at = end;
        if (end > t) {
          wake_pe(wk, s, end);
          break;
        }
        continue;
      }
      if (r == 1) wake_pe(wk, s, t + 1);
      break;  // stalled: woken by a queue or fifo change
    }
    if (P.ready_at > t) {
      wake_pe(wk, s, P.ready_at);
      break;
    }
    if (P.task < 0) {
      if (!pick_task(wk, s, t)) break;
      progress = true;
    }
    const int32_t pc0 = P.pc;
    const bool waited = P.mt_wait;
    exec(wk, s, t);
    if (P.pc != pc0 || P.main.instr >= 0 || P.task < 0 || P.halted) progress = true;
    if (P.mt_wait && waited && P.pc == pc0) break;
  }
  if (progress) {
    wk.last_progress = std::max(wk.last_progress, t + 1);
    // Another thread of this PE may wait for what just happened: the main thread for a free
    // microthread or a fifo, a microthread for a fifo. (A microthread waiting for a wavelet, for
    // room in an output queue or for its start is woken by those.)
    if (P.mt_wait || (P.main.instr >= 0 && P.main.next <= t) || std::any_of(P.mts.begin(), P.mts.end(), [](const Mt& m) { return m.fifo; }))
      wake_pe(wk, s, t + 1);
  }
}

// Runs instructions of the current task from cycle t: scalar and control instructions take one
// cycle each (executed ahead in local time, at most kBatch per call); a DSD instruction starts at
// its issue cycle (the handler returns if that is later than t).
void Fabric::Impl::exec(Worker& wk, uint32_t s, int64_t t) {
  Pe& P = pes[s];
  const Program& p = prog(s);
  constexpr int kBatch = 256;
  int64_t lt = t;
  auto val = [&](const Operand& o) -> uint32_t {
    switch (o.kind) {
      case OpndKind::reg: return P.regs[static_cast<size_t>(o.v)];
      case OpndKind::imm_i: case OpndKind::imm_f: return static_cast<uint32_t>(o.v);
      case OpndKind::px: return static_cast<uint32_t>(P.px);
      case OpndKind::py: return static_cast<uint32_t>(P.py);
      case OpndKind::wv: return P.wv;
      default: return 0;
    }
  };
  auto end_task = [&](int64_t at, bool halt) {
    P.busy += at - P.task_start;
    if (f.opt_.summary) {
      FabricSummary& sm = *wk.sum;
      sm.busy.add(P.task_start - start, 1);
      sm.busy.add(at - start, -1);
      sm.phases[static_cast<size_t>(phase_of[phase_base[P.prog] + static_cast<uint32_t>(P.task)])].span.add(P.task_start - start, at - start);
    }
    if (P.rec) record(wk, *wk.tasks, wk.tag_t, t, s, TaskRecord{P.x, P.y, P.task, P.task_start - start, at - start});
    if (!task_end.empty()) task_end[static_cast<size_t>(s) * 64 + static_cast<size_t>(P.task)] = at - start;
    if (pinfo[P.prog].logged >> P.task & 1) (*wk.log)[uint64_t{s} * 64 + static_cast<uint64_t>(P.task)].push_back(at - start);
    P.task = -1;
    P.ready_at = at;
    if (halt) {
      P.halted = true;
      P.halt_cycle = at;
      P.mts.clear();
    }
    wk.last_progress = std::max(wk.last_progress, at);
    // The next task is picked at `at` -- if one can fire on what the PE holds now. A wavelet
    // delivered, or a microthread ending, before then wakes the PE, which then waits for `at`
    // (ready_at); one after it wakes the PE when it comes. So a PE that would find nothing at
    // `at` is not woken for it (an x task's end, the next x value not in yet).
    if (!halt && may_pick(s)) wake_pe(wk, s, at);
  };
  for (int n = 0; n < kBatch; ++n) {
    const Task& tk = p.tasks[static_cast<size_t>(P.task)];
    if (P.pc >= tk.end) {  // fell off the end: like ret, no cycle
      end_task(lt, false);
      return;
    }
    const Instr& in = p.instrs[static_cast<size_t>(P.pc)];
    const OpInfo& info = op_info(in.op);
    if (info.cls == OpClass::dsd) {
      // A main-thread op of memory operands only, computed at issue (eager_memory_ops), whose
      // end is known then: the thread runs on past it in local time, as it does over scalar
      // instructions, instead of waking at its issue and again at its end. Nothing outside the
      // PE can change what it does meanwhile (no fabric or fifo operand, no fault armed: eager
      // ops are off with faults); a PE whose operations are recorded (traces, tests) keeps the
      // event per op so that its records come in the same order; not past the watchdog.
      const bool mem_only = f.opt_.eager_memory_ops && !cfg.bank_conflicts && !in.async && memory_only(s, in);
      auto defer = [&] {
        P.ready_at = lt;
        wake_pe(wk, s, lt);
      };
      if (lt > t && (!mem_only || P.rec)) return defer();
      const int64_t len = op_length(s, in);
      const int32_t width = pinfo[P.prog].width[static_cast<size_t>(P.pc)];  // (instr_width, at load)
      const int16_t interval = static_cast<int16_t>(op_interval(in.op, cfg));
      const uint8_t bpe = cfg.sram_bw_q > 0 ? static_cast<uint8_t>(sram_limited_bytes(width, instr_mem_bytes(p, in), cfg)) : 0;
      const bool eager = mem_only && len > 0;
      const int64_t cycles = eager ? dsd_op_cycles_bw(len, width, interval, bpe, cfg) : 0;  // an eager op's whole span
      const bool ahead = eager && !P.rec && (f.opt_.max_cycles <= 0 || lt + cycles - start <= f.opt_.max_cycles);
      if (lt > t && !ahead) return defer();
      OpRun op;
      op.instr = P.pc;
      op.len = len;
      op.width = width;
      op.interval = interval;
      op.bpe = bpe;
      bool fifo = false;  // (a microthread's: see Mt::fifo)
      for (size_t k = 0; k < info.roles.size(); ++k) {
        if (in.a[k].kind != OpndKind::dsd) continue;
        const Dsd& d = dsd(s, in.a[k].v);
        if (d.kind == DsdKind::fabin) op.inq |= static_cast<uint16_t>(1u << d.queue);
        fifo = fifo || d.kind == DsdKind::fifo;
      }
      op.start = lt;
      op.next = lt + cfg.setup_cycles;
      ++wk.st->instructions;
      if (in.async) {
        int id = -1;
        for (size_t k = 0; k < info.roles.size() && id < 0; ++k)
          if (in.a[k].kind == OpndKind::dsd && dsd(s, in.a[k].v).is_fabric()) id = dsd(s, in.a[k].v).queue;
        const bool busy = std::any_of(P.mts.begin(), P.mts.end(), [&](const Mt& m) { return m.id == id; });
        if (busy) {
          --wk.st->instructions;
          P.mt_wait = true;  // retried when a microthread finishes
          return;
        }
        P.mt_wait = false;
        Mt m;
        m.op = op;
        m.on_activate = in.on_activate;
        m.on_unblock = in.on_unblock;
        m.id = static_cast<uint8_t>(id);
        m.fifo = fifo;
        const bool half = in.op == Op::fmovh || in.op == Op::mov16;
        if ((half || in.op == Op::fmovs || in.op == Op::mov32) && in.a[0].kind == OpndKind::dsd && in.a[1].kind == OpndKind::dsd) {
          const Dsd& dst = dsd(s, in.a[0].v);
          const Dsd& src = dsd(s, in.a[1].v);
          if (dst.is_mem() && src.kind == DsdKind::fabin) {  // drain's plan
            m.mv = static_cast<uint8_t>(kMvMove | (elem_bytes(src.elem) == 2 ? kMvSrc16 : 0) | (half ? kMvOp16 : 0));
            m.dk = static_cast<int16_t>(in.a[0].v);
            m.dst = dst;
          }
        }
        P.mts.push_back(m);
        wake_pe(wk, s, op.next);
        ++P.pc;
        lt += 1;  // issuing an async op takes one cycle of the main thread
        continue;
      }
      if (eager) {
        // Every element now, in one pass over the PE's SRAM (FabricOptions::eager_memory_ops);
        // the op still completes at issue + setup + ceil(len / width), as the formula says
        // (nothing can stall an op without fabric or fifo operands).
        op.width = static_cast<int32_t>(std::min<int64_t>(op.len, INT32_MAX));
        op.bpe = 0;
        run_group(wk, s, op, lt);
        op.width = width;
        op.bpe = bpe;
        op.pause = 0;
        op.next = op.start + cycles - 1;  // run_group then reports it done at next + 1
        if (ahead) {  // done at next + 1, as pe_step would find it (no stall: stall_cycles unchanged)
          const int64_t end = op.next + 1;
          if (f.opt_.record) f.note_active(s, op.start - start, end - start);
          wk.last_progress = std::max(wk.last_progress, end);
          ++P.pc;
          lt = end;
          continue;
        }
      }
      P.main = op;
      wake_pe(wk, s, op.next);
      return;
    }
    ++wk.st->instructions;
    const auto& a = in.a;
    int32_t next = P.pc + 1;
    switch (in.op) {
      case Op::mov: P.regs[static_cast<size_t>(a[0].v)] = val(a[1]); break;
      case Op::add: P.regs[static_cast<size_t>(a[0].v)] = val(a[1]) + val(a[2]); break;
      case Op::sub: P.regs[static_cast<size_t>(a[0].v)] = val(a[1]) - val(a[2]); break;
      case Op::mul: P.regs[static_cast<size_t>(a[0].v)] = val(a[1]) * val(a[2]); break;
      case Op::dsd_off:
      case Op::dsd_len: {
        if (P.dsds.empty()) P.dsds = p.dsds;
        Dsd& d = P.dsds[static_cast<size_t>(a[0].v)];
        const int32_t x = static_cast<int32_t>(val(a[1]));
        if (in.op == Op::dsd_off) {
          const int64_t b = int64_t{p.dsds[static_cast<size_t>(a[0].v)].base} + int64_t{x} * elem_bytes(d.elem);
          if (b < 0 || b >= cfg.data_area_bytes()) throw Failure{pe_label(P.x, P.y) + ": " + where(s, P.pc) + ": offset " + std::to_string(x) + " leaves the data area"};
          d.base = static_cast<uint32_t>(b);
        } else if (d.is_mem()) {
          if (x < 1 || x > 65535)  // a mem DSD's dimension length is 16 bits
            throw Failure{pe_label(P.x, P.y) + ": " + where(s, P.pc) + ": length " + std::to_string(x) + " outside 1..65535 for a memory DSD"};
          d.dims[0].len = static_cast<uint16_t>(x);
        } else {
          d.length = static_cast<uint32_t>(x);
        }
        for (Mt& m : P.mts)  // a running move's plan sees the change, as its DSD reads would
          if (m.dk == a[0].v) m.dst = d;
        break;
      }
      case Op::jmp: next = a[0].v; break;
      case Op::bz: if (val(a[0]) == 0) next = a[1].v; break;
      case Op::bnz: if (val(a[0]) != 0) next = a[1].v; break;
      case Op::blz: if (static_cast<int32_t>(val(a[0])) < 0) next = a[1].v; break;
      case Op::loop: if (--P.regs[static_cast<size_t>(a[0].v)] != 0) next = a[1].v; break;
      case Op::activate: P.active |= uint64_t{1} << a[0].v; break;
      case Op::block: P.blocked |= uint64_t{1} << a[0].v; break;
      case Op::unblock: P.blocked &= ~(uint64_t{1} << a[0].v); break;
      case Op::ret: end_task(lt + 1, false); return;
      case Op::halt: end_task(lt + 1, true); return;
      default: break;
    }
    P.pc = next;
    lt += 1;
  }
  P.ready_at = lt;
  wake_pe(wk, s, lt);
}

// ---------------------------------------------------------------------------------------------
// Deadlock report.

std::string Fabric::Impl::op_wait(uint32_t s, const OpRun& op, int64_t) const {
  const Pe& P = pes[s];
  const Program& p = prog(s);
  const Instr& in = p.instrs[static_cast<size_t>(op.instr)];
  std::ostringstream o;
  o << where(s, op.instr) << " after " << op.i << " of " << op.len << " element(s)";
  for (size_t k = 0; k < op_info(in.op).roles.size(); ++k) {
    if (in.a[k].kind != OpndKind::dsd) continue;
    const Dsd& d = dsd(s, in.a[k].v);
    const std::string& name = p.dsd_names[static_cast<size_t>(in.a[k].v)];
    if (d.kind == DsdKind::fabin && P.qcount[d.queue] == 0)
      o << ", waits for wavelets of color " << int{d.color} << " (input queue " << int{d.queue} << " empty, '" << name << "')";
    else if (d.kind == DsdKind::fabout && P.qcount[8u + d.queue] >= out_depth[d.queue])
      o << ", waits for room in output queue " << int{d.queue} << " (color " << int{d.color} << ", " << int{P.qcount[8u + d.queue]} << "/"
        << out_depth[d.queue] << " full, '" << name << "')";
    else if (d.kind == DsdKind::fifo)
      o << ", fifo '" << name << "' holds " << (P.fifo.empty() ? 0 : P.fifo[static_cast<size_t>(in.a[k].v) * 2 + 1]) << " of " << d.length;
  }
  return o.str();
}

void Fabric::Impl::report(std::vector<StuckPe>& out, std::vector<StuckRouter>& routers, int64_t y0, int64_t y1, bool with_ports) const {
  for (uint32_t s = 0; s < pes.size(); ++s) {
    const Pe& P = pes[s];
    if (P.y < y0 || P.y >= y1) continue;
    const Program& p = prog(s);
    std::ostringstream o;
    int64_t done = -1;
    bool stuck = !P.halted;
    if (P.task >= 0) {
      o << "task '" << p.tasks[static_cast<size_t>(P.task)].name << "'";
      if (P.main.instr >= 0) {
        o << " in " << op_wait(s, P.main, 0);
        done = P.main.i;
      } else if (P.mt_wait) {
        o << " at " << where(s, P.pc) << ", waits for a busy microthread";
      } else {
        o << " at " << where(s, P.pc);
      }
    } else if (!P.halted) {
      o << "no task can run (";
      bool first = true;
      for (size_t k = 0; k < p.tasks.size(); ++k) {
        const Task& t = p.tasks[k];
        const uint64_t bit = uint64_t{1} << k;
        std::string st;
        if (t.kind == TaskKind::data) st = "waits for color " + std::to_string(t.color);
        else if (t.kind == TaskKind::control) st = "waits for a control wavelet naming id " + std::to_string(t.id);
        else st = P.active & bit ? "activated" : "not activated";
        if (P.blocked & bit) st += ", blocked";
        o << (first ? "" : "; ") << "'" << t.name << "' " << st;
        first = false;
      }
      o << ")";
    }
    for (const Mt& m : P.mts) {
      o << (o.tellp() > 0 ? "; " : "") << "microthread " << int{m.id} << ": " << op_wait(s, m.op, 0);
      stuck = true;
    }
    std::ostringstream q;
    for (int k = 0; k < 16; ++k)
      if (P.qcount[static_cast<size_t>(k)]) {
        q << (q.tellp() > 0 ? ", " : "") << (k < 8 ? "in " : "out ") << k % 8 << ": " << int{P.qcount[static_cast<size_t>(k)]} << "/"
          << (k < 8 ? in_depth[k] : out_depth[k - 8]);
        stuck = true;
      }
    if (q.tellp() > 0) o << "; queues " << q.str();
    if (stuck) out.push_back({P.x, P.y, o.str(), done});
  }
  for (const auto& p : ports)
    for (size_t i = 0; i < p.lanes.size() && with_ports; ++i) {
      const PortLane& ln = p.lanes[i];
      if (ln.next >= ln.in.size()) continue;
      routers.push_back({static_cast<int32_t>(ln.router % W), static_cast<int32_t>(ln.router / W), ln.color,
                         "input port '" + p.spec->name + "' lane " + std::to_string(i) + ": " + std::to_string(ln.in.size() - ln.next) +
                             " wavelet(s) not injected (the router's " + std::string(dir_name(static_cast<Dir>(ln.dir))) + " buffer is full)"});
    }
  for (uint32_t sl = 0; sl < slots.size(); ++sl)
    for (int d = 0; d < 4; ++d) {
      if (const int64_t y = slots[sl].pe / W; y < y0 || y >= y1) break;
      const int c = bcnt(sl * 4 + static_cast<size_t>(d));
      if (!c) continue;
      const SwitchPos& pos = slots[sl].route.pos[slots[sl].pos];
      std::ostringstream o;
      o << c << " wavelet(s) from " << dir_name(static_cast<Dir>(d)) << " waiting for " << format_dirset(pos.tx);
      if (!(pos.rx & (1u << d))) o << " (switch position " << int{slots[sl].pos} << " does not take " << dir_name(static_cast<Dir>(d)) << ")";
      else o << " (buffer or queue full downstream)";
      routers.push_back({static_cast<int32_t>(slots[sl].pe % W), static_cast<int32_t>(slots[sl].pe / W), slot_color[sl], o.str()});
    }
}

}  // namespace tessera::wafer
