// The wafer fabric model: flat router and PE state, the event calendar and the SystemC thread.
// Execution of PE instructions and DSD operations is in pe.cpp; semantics in docs/wafer-model.md.
#include "models/wafer/fabric.hpp"

#include <algorithm>
#include <bit>
#include <sstream>

#include "isa/error.hpp"
#include "isa/numeric.hpp"
#include "models/wafer/fabric_impl.hpp"

namespace tessera::wafer {

std::string pe_label(int64_t x, int64_t y) { return "PE (" + std::to_string(x) + "," + std::to_string(y) + ")"; }

Fabric::Fabric(sc_core::sc_module_name name, const WaferConfig& cfg, FabricOptions opt)
    : sc_core::sc_module(name), cfg_(cfg), opt_(opt), clock_(cfg.clock_hz) {
  impl_ = new Impl(*this);
  sc_core::sc_spawn_options o;
  sc_core::sc_spawn([this] { thread(); }, sc_core::sc_gen_unique_name("calendar"), &o);
}

Fabric::~Fabric() { delete impl_; }

void Fabric::load(const LoadedLayout& layout) {
  if (impl_->L) throw std::logic_error("Fabric::load: a layout is already loaded");
  impl_->load(layout);
  W_ = impl_->W;
  H_ = impl_->H;
}

void Fabric::start() {
  if (!impl_->L) throw std::logic_error("Fabric::start: no layout loaded");
  if (!finished_) throw std::logic_error("Fabric::start: the previous run is still going");
  finished_ = false;
  error_.reset();
  start_pending_ = true;
  start_ev_.notify(sc_core::SC_ZERO_TIME);
}

void Fabric::thread() {
  while (true) {
    if (!start_pending_) sc_core::wait(start_ev_);
    start_pending_ = false;
    try {
      run();
    } catch (const Impl::Failure& f) {
      error_ = f.msg;
    } catch (const std::exception& e) {
      error_ = std::string("internal error in the wafer fabric model: ") + e.what();
    }
    finished_ = true;
    finished_ev_.notify(sc_core::SC_ZERO_TIME);
  }
}

void Fabric::run() {
  Impl& m = *impl_;
  auto now_fs = [] { return static_cast<Femtos>(sc_core::sc_time_stamp().value()); };
  auto sync_to = [&](int64_t cycle) {
    const Femtos t = clock_.time_of(cycle), now = now_fs();
    if (t > now) sc_core::wait(sc_core::sc_time::from_value(static_cast<uint64_t>(t - now)));
  };
  const int64_t c0 = clock_.cycle_at_or_after(now_fs());
  m.reset(c0);
  stuck_pes_.clear();
  stuck_routers_.clear();
  deliveries_.clear();
  op_records_.clear();
  int64_t synced = c0;
  std::optional<std::string> stop;
  while (!m.cal.empty()) {
    const Impl::Ev e = m.cal.top();
    if (e.cycle > m.last_progress + opt_.deadlock_window) break;  // nothing moved for the window
    if (opt_.max_cycles > 0 && e.cycle - c0 > opt_.max_cycles) {
      stop = "watchdog: the run passed " + std::to_string(opt_.max_cycles) + " cycles (fabric option max_cycles)";
      break;
    }
    if (e.cycle - synced > opt_.quantum_cycles) {
      sync_to(e.cycle);
      synced = e.cycle;
    }
    m.cal.pop();
    m.handle(e);
  }
  const bool work = m.work_remains();
  int64_t end = m.last_progress;
  if (!stop && work) {
    end = std::max(end, m.last_progress + opt_.deadlock_window);
    stop = "deadlock: nothing moved for " + std::to_string(opt_.deadlock_window) + " cycles (from cycle " +
           std::to_string(m.last_progress - c0) + ") while work remains";
  }
  if (stop && !m.cal.empty()) end = std::max(end, m.cal.top().cycle);
  m.finish_stats(end);
  sync_to(end);
  if (stop) {
    m.report(stuck_pes_, stuck_routers_);
    std::ostringstream s;
    s << *stop;
    const size_t kShow = 12;
    for (size_t i = 0; i < stuck_pes_.size() && i < kShow; ++i)
      s << "\n  " << pe_label(stuck_pes_[i].x, stuck_pes_[i].y) << ": " << stuck_pes_[i].what;
    if (stuck_pes_.size() > kShow) s << "\n  ... and " << stuck_pes_.size() - kShow << " more PE(s)";
    for (size_t i = 0; i < stuck_routers_.size() && i < kShow; ++i)
      s << "\n  router " << pe_label(stuck_routers_[i].x, stuck_routers_[i].y) << " color " << int{stuck_routers_[i].color} << ": "
        << stuck_routers_[i].what;
    if (stuck_routers_.size() > kShow) s << "\n  ... and " << stuck_routers_.size() - kShow << " more router buffer(s)";
    error_ = s.str();
  }
}

// ---------------------------------------------------------------------------------------------
// Host access.

const Program* Fabric::program(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s == kNone ? nullptr : &impl_->prog(s);
}

namespace {
const DataDecl& find_array(const Program& p, const std::string& name, int64_t x, int64_t y) {
  for (const auto& d : p.data)
    if (d.name == name) return d;
  std::string names;
  for (const auto& d : p.data) names += (names.empty() ? "" : " ") + d.name;
  throw InputError(pe_label(x, y), "no array '" + name + "' in " + p.source, "arrays: " + names);
}
}  // namespace

void Fabric::write_array(int64_t x, int64_t y, const std::string& array, std::span<const float> values, int64_t offset) {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  const DataDecl& d = find_array(impl_->prog(s), array, x, y);
  if (offset < 0 || offset + static_cast<int64_t>(values.size()) > d.count)
    throw InputError(pe_label(x, y), "array '" + array + "' has " + std::to_string(d.count) + " elements; writing " + std::to_string(values.size()) + " at " + std::to_string(offset));
  const int eb = elem_bytes(d.elem);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t a = d.addr + static_cast<uint32_t>((offset + static_cast<int64_t>(i)) * eb);
    impl_->store(s, a, eb, Impl::encode(values[i], d.elem));
  }
}

std::vector<float> Fabric::read_array(int64_t x, int64_t y, const std::string& array) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  const DataDecl& d = find_array(impl_->prog(s), array, x, y);
  const int eb = elem_bytes(d.elem);
  std::vector<float> out(static_cast<size_t>(d.count));
  for (int32_t i = 0; i < d.count; ++i) out[static_cast<size_t>(i)] = Impl::decode(impl_->load_elem(s, d.addr + static_cast<uint32_t>(i * eb), eb), d.elem);
  return out;
}

void Fabric::write_bytes(int64_t x, int64_t y, uint32_t addr, std::span<const uint8_t> bytes) {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  if (int64_t{addr} + static_cast<int64_t>(bytes.size()) > cfg_.data_area_bytes()) throw InputError(pe_label(x, y), "write past the data area");
  for (size_t i = 0; i < bytes.size(); ++i) impl_->store(s, addr + static_cast<uint32_t>(i), 1, bytes[i]);
}

std::vector<uint8_t> Fabric::read_bytes(int64_t x, int64_t y, uint32_t addr, uint32_t n) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  if (int64_t{addr} + n > cfg_.data_area_bytes()) throw InputError(pe_label(x, y), "read past the data area");
  std::vector<uint8_t> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(impl_->load_elem(s, addr + i, 1));
  return out;
}

bool Fabric::halted(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s != kNone && impl_->pes[s].halted;
}
int64_t Fabric::halt_cycle(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s != kNone && impl_->pes[s].halted ? impl_->pes[s].halt_cycle - stats_.start_cycle : -1;
}
int64_t Fabric::busy_cycles(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s == kNone ? 0 : impl_->pes[s].busy;
}
uint32_t Fabric::reg(int64_t x, int64_t y, int r) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s == kNone ? 0 : impl_->pes[s].regs[static_cast<size_t>(r & 15)];
}
int64_t Fabric::link_wavelets(int64_t x, int64_t y, Dir d) const {
  if (x < 0 || y < 0 || x >= W_ || y >= H_) return 0;
  return impl_->link[static_cast<size_t>((y * W_ + x) * kDirs + static_cast<int>(d))];
}
int64_t Fabric::queue_high_water(int64_t x, int64_t y, int queue, bool input) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone || queue < 0 || queue >= 8) return 0;
  return impl_->pes[s].qhw[static_cast<size_t>(queue + (input ? 0 : 8))];
}

// ---------------------------------------------------------------------------------------------
// Impl: loading and the routers.

Fabric::Impl::Impl(Fabric& fab) : f(fab), cfg(fab.cfg_) {}

void Fabric::Impl::load(const LoadedLayout& layout) {
  L = &layout;
  W = layout.layout.width;
  H = layout.layout.height;
  D = static_cast<int>(cfg.buffer_depth);
  hop = cfg.hop_latency;
  QD = 1;
  for (int q = 0; q < 8; ++q) {
    in_depth[q] = q < static_cast<int>(cfg.input_depth.size()) ? static_cast<int>(cfg.input_depth[static_cast<size_t>(q)]) : 0;
    out_depth[q] = q < static_cast<int>(cfg.output_depth.size()) ? static_cast<int>(cfg.output_depth[static_cast<size_t>(q)]) : 0;
    QD = std::max({QD, in_depth[q], out_depth[q]});
  }
  const size_t npe = static_cast<size_t>(W * H);
  // Programs: per-program tables.
  pinfo.resize(layout.programs.size());
  for (size_t i = 0; i < layout.programs.size(); ++i) {
    const Program& p = layout.programs[i];
    ProgInfo& pi = pinfo[i];
    if (p.tasks.size() > 64) throw InputError(p.source, "more than 64 tasks in one program (model limit)");
    pi.color_q.fill(-1);
    pi.data_task.fill(-1);
    uint8_t used = 0;
    for (const auto& d : p.dsds)
      if (d.kind == DsdKind::fabin) {
        pi.color_q[d.color] = static_cast<int8_t>(d.queue);
        used |= static_cast<uint8_t>(1u << d.queue);
      }
    for (const auto& t : p.tasks)
      if (t.kind == TaskKind::data && t.queue >= 0) {
        pi.color_q[static_cast<size_t>(t.color)] = static_cast<int8_t>(t.queue);
        used |= static_cast<uint8_t>(1u << t.queue);
      }
    for (size_t k = 0; k < p.tasks.size(); ++k) {
      const Task& t = p.tasks[k];
      if (t.kind == TaskKind::data) {
        pi.data_task[static_cast<size_t>(t.color)] = static_cast<int8_t>(k);
        if (pi.color_q[static_cast<size_t>(t.color)] < 0)  // bound by color only: the first free input queue
          for (int q = 0; q < 8; ++q)
            if (!(used & (1u << q)) && in_depth[q] > 0) {
              pi.color_q[static_cast<size_t>(t.color)] = static_cast<int8_t>(q);
              used |= static_cast<uint8_t>(1u << q);
              break;
            }
      }
      if (t.active) pi.init_active |= uint64_t{1} << k;
      if (t.blocked) pi.init_blocked |= uint64_t{1} << k;
      pi.by_id.push_back(static_cast<int8_t>(k));
    }
    std::sort(pi.by_id.begin(), pi.by_id.end(), [&](int8_t a, int8_t b) { return p.tasks[static_cast<size_t>(a)].id < p.tasks[static_cast<size_t>(b)].id; });
  }
  // PEs.
  pe_slot.assign(npe, kNone);
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const uint32_t pr = layout.program_at(x, y);
      if (pr == kNoProgram) continue;
      const RectSpec& r = layout.layout.rects[static_cast<size_t>(layout.rect_at(x, y))];
      pe_slot[static_cast<size_t>(y * W + x)] = static_cast<uint32_t>(pes.size());
      Pe p;
      p.prog = pr;
      p.x = static_cast<int32_t>(x);
      p.y = static_cast<int32_t>(y);
      p.px = static_cast<int32_t>(x - r.x);
      p.py = static_cast<int32_t>(y - r.y);
      pes.push_back(std::move(p));
    }
  qbuf.resize(pes.size() * 16 * static_cast<size_t>(QD));
  // Routes: one slot per (PE, color), sorted by PE.
  struct Tmp {
    uint32_t pe;
    uint8_t color;
    const Route* r;
  };
  std::vector<Tmp> tmp;
  for (const auto& rs : layout.layout.routes)
    for (int64_t y = rs.y; y < rs.y + rs.height; ++y)
      for (int64_t x = rs.x; x < rs.x + rs.width; ++x) tmp.push_back({static_cast<uint32_t>(y * W + x), rs.color, &rs.route});
  std::sort(tmp.begin(), tmp.end(), [](const Tmp& a, const Tmp& b) { return a.pe != b.pe ? a.pe < b.pe : a.color < b.color; });
  slot_begin.assign(npe + 1, 0);
  const size_t ns = tmp.size();
  slot_pe.resize(ns);
  slot_color.resize(ns);
  slot_route.resize(ns);
  slot_pos.assign(ns, 0);
  slot_buf.resize(ns);
  bhead.assign(ns * 4, 0);
  bcount.assign(ns * 4, 0);
  uint32_t nbuf = 0;
  for (size_t i = 0; i < ns; ++i) {
    slot_pe[i] = tmp[i].pe;
    slot_color[i] = tmp[i].color;
    slot_route[i] = *tmp[i].r;
    slot_buf[i] = nbuf;
    nbuf += static_cast<uint32_t>(std::popcount(static_cast<unsigned>(tmp[i].r->rx_any() & 0xf)));
    ++slot_begin[tmp[i].pe + 1];
  }
  for (size_t i = 0; i < npe; ++i) slot_begin[i + 1] += slot_begin[i];
  bufs.resize(static_cast<size_t>(nbuf) * static_cast<size_t>(D));
  slot_down.assign(ns * 4, kNone);
  for (size_t i = 0; i < ns; ++i) {
    const int64_t x = slot_pe[i] % W, y = slot_pe[i] / W;
    const DirSet tx = slot_route[i].tx_any();
    for (int d = 0; d < 4; ++d) {
      if (!(tx & (1u << d))) continue;
      const int64_t nx = x + dir_dx(static_cast<Dir>(d)), ny = y + dir_dy(static_cast<Dir>(d));
      if (nx < 0 || ny < 0 || nx >= W || ny >= H) continue;
      slot_down[i * 4 + static_cast<size_t>(d)] = find_slot(static_cast<uint32_t>(ny * W + nx), slot_color[i]);
    }
  }
  link.assign(npe * kDirs, 0);
  rr.assign(npe, 0);
  pwake_last.assign(pes.size(), -1);
  pwake_push.assign(pes.size(), -1);
  rwake_last.assign(npe, -1);
  rwake_push.assign(npe, -1);
  // SRAM: fill values.
  for (uint32_t s = 0; s < pes.size(); ++s)
    for (const auto& d : prog(s).data) {
      if (!d.has_fill) continue;
      const uint32_t bits = encode(d.fill, d.elem);
      if (bits == 0) continue;
      const int eb = elem_bytes(d.elem);
      for (int32_t i = 0; i < d.count; ++i) store(s, d.addr + static_cast<uint32_t>(i * eb), eb, bits);
    }
}

uint32_t Fabric::Impl::find_slot(uint32_t pe, int color) const {
  for (uint32_t s = slot_begin[pe]; s < slot_begin[pe + 1]; ++s)
    if (slot_color[s] == color) return s;
  return kNone;
}

void Fabric::Impl::reset(int64_t c0) {
  start = c0;
  last_progress = c0;
  while (!cal.empty()) cal.pop();
  std::fill(bhead.begin(), bhead.end(), 0);
  std::fill(bcount.begin(), bcount.end(), 0);
  std::fill(slot_pos.begin(), slot_pos.end(), 0);
  std::fill(link.begin(), link.end(), 0);
  std::fill(pwake_last.begin(), pwake_last.end(), -1);
  std::fill(pwake_push.begin(), pwake_push.end(), -1);
  std::fill(rwake_last.begin(), rwake_last.end(), -1);
  std::fill(rwake_push.begin(), rwake_push.end(), -1);
  FabricStats& st = f.stats_;
  st = FabricStats{};
  st.start_cycle = c0;
  st.color_hops.assign(kMaxColors, 0);
  st.in_queue_high_water.assign(8, 0);
  st.out_queue_high_water.assign(8, 0);
  st.program_pes = static_cast<int64_t>(pes.size());
  for (uint32_t s = 0; s < pes.size(); ++s) {
    Pe& p = pes[s];
    const ProgInfo& pi = pinfo[p.prog];
    p.task = -1;
    p.pc = 0;
    p.ready_at = c0;
    p.active = pi.init_active;
    p.blocked = pi.init_blocked;
    p.regs.fill(0);
    p.wv = 0;
    p.main = OpRun{};
    p.mts.clear();
    p.dsds.clear();
    p.fifo.clear();
    p.halted = false;
    p.halt_cycle = -1;
    p.busy = 0;
    p.qhead.fill(0);
    p.qcount.fill(0);
    p.qhw.fill(0);
    wake_pe(s, c0);
  }
}

bool Fabric::Impl::work_remains() const {
  for (const auto& c : bcount)
    if (c) return true;
  for (const auto& p : pes) {
    if (f.opt_.require_halt && !p.halted) return true;
    if (p.main.instr >= 0 || !p.mts.empty()) return true;
    for (int q = 0; q < 16; ++q)
      if (p.qcount[static_cast<size_t>(q)]) return true;
  }
  return false;
}

void Fabric::Impl::handle(const Ev& e) {
  ++f.stats_.events;
  if (e.key & kRouterBit) {
    const uint32_t r = e.key & ~kRouterBit;
    if (rwake_last[r] == e.cycle) return;
    rwake_last[r] = e.cycle;
    router_step(r, e.cycle);
  } else {
    if (pwake_last[e.key] == e.cycle) return;
    pwake_last[e.key] = e.cycle;
    pe_step(e.key, e.cycle);
  }
}

void Fabric::Impl::wake_router(uint32_t r, int64_t c) {
  if (rwake_push[r] == c) return;
  rwake_push[r] = c;
  cal.push({c, r | kRouterBit});
}
void Fabric::Impl::wake_pe(uint32_t s, int64_t c) {
  if (pwake_push[s] == c) return;
  pwake_push[s] = c;
  cal.push({c, s});
}

// One router at cycle t: every input (per color: a buffer per rx direction; the PE's output
// queues as the RAMP input) whose head is ready and allowed by the color's switch position goes to
// all its tx directions at once if each of those links is still free this cycle and each
// receiving buffer (or the PE's input queue) has room. Inputs are served round-robin.
void Fabric::Impl::router_step(uint32_t r, int64_t t) {
  struct Cand {
    uint32_t slot;
    int8_t dir;    // 0..3 buffer direction, -1: output queue `q`
    int8_t q;
  };
  Cand cand[4 * kMaxColors + 8];
  int n = 0;
  for (uint32_t s = slot_begin[r]; s < slot_begin[r + 1]; ++s) {
    const unsigned rx = slot_route[s].rx_any() & 0xfu;
    for (int d = 0; d < 4; ++d)
      if ((rx & (1u << d)) && bcount[s * 4 + static_cast<size_t>(d)]) cand[n++] = {s, static_cast<int8_t>(d), -1};
  }
  const uint32_t ps = pe_slot[r];
  if (ps != kNone) {
    const Pe& P = pes[ps];
    for (int q = 0; q < 8; ++q)
      if (P.qcount[static_cast<size_t>(8 + q)]) cand[n++] = {kNone, -1, static_cast<int8_t>(q)};
  }
  if (n == 0) return;
  unsigned used = 0;
  int64_t next = INT64_MAX;
  bool moved = false;
  const int first = rr[r] % n;
  for (int k = 0; k < n; ++k) {
    Cand& c = cand[(first + k) % n];
    Wv* w;
    if (c.dir >= 0) {
      w = &bufs[(slot_buf[c.slot] + buf_index(c.slot, c.dir)) * static_cast<size_t>(D) + bhead[c.slot * 4 + static_cast<size_t>(c.dir)]];
    } else {
      w = &qentry(ps, 8 + c.q, pes[ps].qhead[static_cast<size_t>(8 + c.q)]);
      c.slot = find_slot(r, w->color);
      if (c.slot == kNone) throw Failure{pe_label(r % W, r / W) + ": the PE sends color " + std::to_string(w->color) + " but its router has no route for it"};
    }
    if (w->ready > t) {
      next = std::min(next, w->ready);
      continue;
    }
    const SwitchPos& pos = slot_route[c.slot].pos[slot_pos[c.slot]];
    const unsigned from = c.dir >= 0 ? (1u << c.dir) : dir_bit(Dir::RAMP);
    if (!(pos.rx & from)) continue;  // the switch position does not take this input now
    const unsigned tx = pos.tx;
    if (tx & used) {
      next = std::min(next, t + 1);
      continue;
    }
    bool room = tx != 0;
    for (int d = 0; d < kDirs && room; ++d) {
      if (!(tx & (1u << d))) continue;
      if (d == static_cast<int>(Dir::RAMP)) {
        if (ps == kNone) {
          room = false;
          break;
        }
        const int q = pinfo[pes[ps].prog].color_q[slot_color[c.slot]];
        room = q >= 0 && pes[ps].qcount[static_cast<size_t>(q)] < in_depth[q];
      } else {
        const uint32_t ds = slot_down[c.slot * 4 + static_cast<size_t>(d)];
        room = ds != kNone && bcount[ds * 4 + static_cast<size_t>(opposite(static_cast<Dir>(d)))] < D;
      }
    }
    if (!room) continue;  // woken when space frees
    // Forward to every tx direction in this cycle.
    const Wv wv = *w;
    used |= tx;
    moved = true;
    for (int d = 0; d < kDirs; ++d) {
      if (!(tx & (1u << d))) continue;
      ++link[static_cast<size_t>(r) * kDirs + static_cast<size_t>(d)];
      ++f.stats_.color_hops[wv.color];
      if (d == static_cast<int>(Dir::RAMP)) {
        const int q = pinfo[pes[ps].prog].color_q[slot_color[c.slot]];
        push_queue(ps, q, {wv.payload, wv.color, wv.control, t + 1});
        ++f.stats_.ramp_deliveries;
        if (f.opt_.record)
          f.deliveries_.push_back({pes[ps].x, pes[ps].y, wv.color, static_cast<uint8_t>(q), wv.payload, t + 1 - start});
        wake_pe(ps, t + 1);
      } else {
        const uint32_t ds = slot_down[c.slot * 4 + static_cast<size_t>(d)];
        const int od = static_cast<int>(opposite(static_cast<Dir>(d)));
        const size_t bi = ds * 4 + static_cast<size_t>(od);
        bufs[(slot_buf[ds] + buf_index(ds, od)) * static_cast<size_t>(D) + (bhead[bi] + bcount[bi]) % D] = {wv.payload, wv.color, wv.control, t + hop};
        ++bcount[bi];
        f.stats_.router_buffer_high_water = std::max<int64_t>(f.stats_.router_buffer_high_water, bcount[bi]);
        ++f.stats_.wavelet_hops;
        wake_router(slot_pe[ds], t + hop);
      }
    }
    if (wv.control) slot_pos[c.slot] = slot_route[c.slot].next(slot_pos[c.slot]);
    // Pop the input; wake whoever feeds it (room again).
    bool more;
    if (c.dir >= 0) {
      const size_t bi = c.slot * 4 + static_cast<size_t>(c.dir);
      bhead[bi] = static_cast<uint8_t>((bhead[bi] + 1) % D);
      more = --bcount[bi] > 0;
      const int64_t ux = r % W + dir_dx(static_cast<Dir>(c.dir)), uy = r / W + dir_dy(static_cast<Dir>(c.dir));
      wake_router(static_cast<uint32_t>(uy * W + ux), t + 1);
    } else {
      pop_queue(ps, 8 + c.q);
      more = pes[ps].qcount[static_cast<size_t>(8 + c.q)] > 0;
      ++f.stats_.ramp_injections;
      wake_pe(ps, t + 1);
    }
    if (more) next = std::min(next, t + 1);
  }
  if (moved) {
    rr[r] = static_cast<uint16_t>(rr[r] + 1);
    last_progress = std::max(last_progress, t + 1);
  }
  if (next != INT64_MAX) wake_router(r, next);
}

int Fabric::Impl::buf_index(uint32_t slot, int dir) const {
  const unsigned rx = slot_route[slot].rx_any() & 0xfu;
  return std::popcount(rx & ((1u << dir) - 1u));
}

void Fabric::Impl::push_queue(uint32_t s, int q, const Wv& w) {
  Pe& P = pes[s];
  const size_t qi = static_cast<size_t>(q);
  qentry(s, q, (P.qhead[qi] + P.qcount[qi]) % QD) = w;
  ++P.qcount[qi];
  P.qhw[qi] = std::max(P.qhw[qi], P.qcount[qi]);
}

void Fabric::Impl::pop_queue(uint32_t s, int q) {
  Pe& P = pes[s];
  const size_t qi = static_cast<size_t>(q);
  P.qhead[qi] = static_cast<uint8_t>((P.qhead[qi] + 1) % QD);
  --P.qcount[qi];
}

void Fabric::Impl::finish_stats(int64_t end) {
  FabricStats& st = f.stats_;
  st.cycles = end - start;
  for (const auto& p : pes) {
    st.busy_cycles += p.busy;
    for (int q = 0; q < 8; ++q) {
      st.in_queue_high_water[static_cast<size_t>(q)] = std::max<int64_t>(st.in_queue_high_water[static_cast<size_t>(q)], p.qhw[static_cast<size_t>(q)]);
      st.out_queue_high_water[static_cast<size_t>(q)] = std::max<int64_t>(st.out_queue_high_water[static_cast<size_t>(q)], p.qhw[static_cast<size_t>(8 + q)]);
    }
  }
  st.idle_cycles = st.program_pes * st.cycles - st.busy_cycles;
  st.sram_pages = static_cast<int64_t>(sram.size()) / FabricStats::kPageBytes;
}

}  // namespace tessera::wafer
