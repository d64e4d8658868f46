// The wafer fabric model: flat router and PE state, the event calendar and the SystemC thread.
// Execution of PE instructions and DSD operations is in pe.cpp; semantics in docs/wafer-model.md.
#include "models/wafer/fabric.hpp"

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <bit>
#include <map>
#include <sstream>

#include "isa/error.hpp"
#include "isa/numeric.hpp"
#include "models/wafer/fabric_impl.hpp"

namespace tessera::wafer {

void BinSeries::widen() {
  const size_t n = (count.size() + 1) / 2;
  for (size_t k = 0; k < n; ++k) {
    const size_t a = 2 * k, b = a + 1;
    const int64_t c = count[a] + (b < count.size() ? count[b] : 0);
    const int64_t w = weight[a] + width * count[a] + (b < count.size() ? weight[b] : 0);
    count[k] = c;
    weight[k] = w;
  }
  count.resize(n);
  weight.resize(n);
  width *= 2;
}

void BinSeries::add_new(int64_t cycle, int64_t v) {
  cycle = std::max<int64_t>(0, cycle);
  // The bin: cycle / width, a shift while the width is a power of two, as it is from 64 on (a
  // 64-bit division's latency otherwise; add takes the common case inline before this).
  const auto bin = [&] {
    const auto u = static_cast<uint64_t>(width);
    return static_cast<size_t>((u & (u - 1)) == 0 ? static_cast<uint64_t>(cycle) >> std::countr_zero(u) : static_cast<uint64_t>(cycle / width));
  };
  size_t b = bin();
  while (b >= kMaxBins) {  // merge neighbours: bins twice as wide
    widen();
    b = bin();
  }
  if (b >= count.size()) {
    count.resize(b + 1, 0);
    weight.resize(b + 1, 0);
  }
  count[b] += v;
  weight[b] += v * ((static_cast<int64_t>(b) + 1) * width - cycle);
}

void BinSeries::merge(const BinSeries& o) {
  // Both at the wider width (each bin's sums are linear in the amounts, so widening before or
  // after adding gives the same figures), then bin by bin.
  BinSeries t = o;
  while (width < t.width) widen();
  while (t.width < width) t.widen();
  if (t.count.size() > count.size()) {
    count.resize(t.count.size(), 0);
    weight.resize(t.count.size(), 0);
  }
  for (size_t b = 0; b < t.count.size(); ++b) {
    count[b] += t.count[b];
    weight[b] += t.weight[b];
  }
}

std::vector<double> BinSeries::integrals() const {
  std::vector<double> out(count.size());
  int64_t level = 0;
  for (size_t b = 0; b < count.size(); ++b) {
    out[b] = static_cast<double>(level * width + weight[b]);
    level += count[b];
  }
  return out;
}

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
  task_records_.clear();
  for (auto& a : active_runs_) a.runs.clear();
  std::optional<std::string> stop;
  int64_t next_left = INT64_MAX;  // the earliest event not handled (a stopped run)
  if (m.comm) {  // stripes on ranks (ranks.cpp): the same results
    Impl::StripedEnd se = m.run_parts(c0);
    stop = se.stop;
    next_left = se.next_cycle;
  } else if (m.workers.size() > 1) {  // stripes on threads (stripes.cpp): the same results
    Impl::StripedEnd se = m.run_striped(c0);
    stop = se.stop;
    next_left = se.next_cycle;
  } else {
    Impl::Worker& w = m.w0();
    int64_t synced = c0;
    // Cycle by cycle: the checks hold for every event of a cycle or for none (last_progress only grows).
    int64_t polled = 0;
    while (!w.cal.empty()) {
      const int64_t cycle = w.cal.top().cycle;
      if (++polled % 1024 == 0 && opt_.progress) opt_.progress(cycle - c0, stats_.wavelet_hops);
      if (opt_.stop && polled % 1024 == 0 && opt_.stop()) {
        stop = "interrupted at cycle " + std::to_string(cycle - c0);
        break;
      }
      if (cycle > w.last_progress + opt_.deadlock_window) break;  // nothing moved for the window
      if (opt_.max_cycles > 0 && cycle - c0 > opt_.max_cycles) {
        stop = "watchdog: the run passed " + std::to_string(opt_.max_cycles) + " cycles (fabric option max_cycles)";
        break;
      }
      if (cycle - synced > opt_.quantum_cycles) {
        sync_to(cycle);
        synced = cycle;
      }
      if (w.next_flip < m.flips.size()) m.apply_flips(w, cycle);
      uint32_t key;
      while (w.cal.next_key(key)) m.handle(w, cycle, key);
      if (opt_.summary) m.bin_hops(w, cycle);  // the cycle's router -> router hops, for traces
    }
    stats_.events = static_cast<int64_t>(w.cal.consumed());
    if (!w.cal.empty()) next_left = w.cal.top().cycle;
  }
  const bool work = m.comm ? m.work_all : m.work_remains();
  const int64_t lp = m.last_progress();
  int64_t end = lp;
  if (!stop && work) {
    end = std::max(end, lp + opt_.deadlock_window);
    stop = "deadlock: nothing moved for " + std::to_string(opt_.deadlock_window) + " cycles (from cycle " +
           std::to_string(lp - c0) + ") while work remains";
  }
  if (stop && next_left != INT64_MAX) end = std::max(end, next_left);
  m.finish_stats(end);
  sync_to(end);
  if (stop) {
    if (m.comm) m.report_parts(stuck_pes_, stuck_routers_);
    else m.report(stuck_pes_, stuck_routers_);
    std::ostringstream s;
    s << *stop;
    const size_t kShow = std::getenv("TESSERA_DEADLOCK_ALL") ? SIZE_MAX : 12;  // everything, for debugging
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
// Faults.

void Fabric::add_fault(const SramFlip& f) {
  Impl& m = *impl_;
  if (!m.L) throw std::logic_error("Fabric::add_fault: no layout loaded");
  const uint32_t s = m.slot_of(f.x, f.y);
  if (s == kNone) throw InputError(pe_label(f.x, f.y), "an SRAM fault needs a PE that runs a program (outside the fabric or routing only)");
  if (int64_t{f.addr} >= cfg_.data_area_bytes() || f.bit < 0 || f.bit > 7)
    throw InputError(pe_label(f.x, f.y), "SRAM fault at byte " + std::to_string(f.addr) + " bit " + std::to_string(f.bit) + " is outside the data area (" +
                                             std::to_string(cfg_.data_area_bytes()) + " bytes, bits 0-7)");
  if (f.cycle < 0) throw InputError(pe_label(f.x, f.y), "an SRAM fault's cycle must be >= 0");
  m.flips.push_back({f, s, m.faults++});
}

void Fabric::add_fault(const WaveletDrop& f) {
  Impl& m = *impl_;
  if (!m.L) throw std::logic_error("Fabric::add_fault: no layout loaded");
  if (f.x < 0 || f.y < 0 || f.x >= W_ || f.y >= H_) throw InputError(pe_label(f.x, f.y), "a wavelet drop needs a router inside the fabric");
  const uint32_t r = static_cast<uint32_t>(f.y * W_ + f.x);
  const uint32_t sl = m.find_slot(r, f.color);
  if (sl == kNone) throw InputError(pe_label(f.x, f.y), "the router has no route for color " + std::to_string(f.color), "drop wavelets on a color the layout routes there");
  if (!(m.slots[sl].route.tx_any() & dir_bit(f.dir)))
    throw InputError(pe_label(f.x, f.y), "color " + std::to_string(f.color) + " is never sent " + std::string(dir_name(f.dir)) + " from this router",
                     "name a direction in the route's tx set");
  if (f.count < 1 || f.from_cycle < 0) throw InputError(pe_label(f.x, f.y), "a wavelet drop needs count >= 1 and cycle >= 0");
  if (m.has_drop.empty()) m.has_drop.assign(static_cast<size_t>(W_ * H_), 0);
  m.has_drop[r] = 1;
  m.drops.push_back({f, r, m.faults++});
}

void Fabric::clear_faults() {
  impl_->flips.clear();
  impl_->drops.clear();
  impl_->has_drop.clear();
  impl_->faults = 0;
  fired_.clear();
}

void Fabric::Impl::apply_flips(Worker& w, int64_t cycle) {
  while (w.next_flip < flips.size() && start + flips[w.next_flip].f.cycle <= cycle) {
    const Flip& fl = flips[w.next_flip++];
    if (!w.owns(pe_index(fl.slot))) continue;  // (another stripe's PE: its worker flips it)
    const uint32_t v = load_elem(fl.slot, fl.f.addr, 1);
    const uint32_t bit = 1u << fl.f.bit;
    store(w, fl.slot, fl.f.addr, 1, fl.f.force < 0 ? v ^ bit : fl.f.force ? v | bit : v & ~bit);
    Fabric::FaultFired& r = f.fired_[fl.idx];
    r.count = 1;
    r.first_cycle = r.last_cycle = fl.f.cycle;
  }
}

int Fabric::Impl::drop_rule(uint32_t r, int d, int color, int64_t t) {
  if (!has_drop[r]) return -1;
  for (size_t i = 0; i < drops.size(); ++i) {
    const Drop& dr = drops[i];
    if (dr.router == r && static_cast<int>(dr.f.dir) == d && dr.f.color == color && t >= start + dr.f.from_cycle &&
        f.fired_[dr.idx].count < dr.f.count)
      return static_cast<int>(i);
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Host access.

int64_t Fabric::port_lanes(const std::string& port) const {
  for (const auto& p : impl_->ports)
    if (p.spec->name == port) return static_cast<int64_t>(p.lanes.size());
  return 0;
}

void Fabric::set_port_stream(const std::string& port, int64_t lane, std::vector<uint32_t> payloads, std::vector<int64_t> ready) {
  if (!ready.empty() && ready.size() != payloads.size()) throw std::logic_error("Fabric::set_port_stream: one ready cycle per payload");
  for (auto& p : impl_->ports)
    if (p.spec->name == port) {
      if (!p.spec->input) throw InputError("port '" + port + "'", "is an output port; it collects, it takes no stream");
      if (lane < 0 || lane >= static_cast<int64_t>(p.lanes.size()))
        throw InputError("port '" + port + "'", "has lanes 0-" + std::to_string(p.lanes.size() - 1) + ", not " + std::to_string(lane));
      p.lanes[static_cast<size_t>(lane)].in = std::move(payloads);
      p.lanes[static_cast<size_t>(lane)].ready = std::move(ready);
      return;
    }
  throw InputError("port '" + port + "'", "the layout declares no such port");
}

void Fabric::set_port_reply(PortReply reply) {
  Impl& m = *impl_;
  auto index = [&](const std::string& name, bool input) {
    for (size_t i = 0; i < m.ports.size(); ++i)
      if (m.ports[i].spec->name == name) {
        if (m.ports[i].spec->input != input) throw InputError("port '" + name + "'", input ? "is an output port: a reply goes into an input port" : "is an input port: a reply answers output ports");
        return static_cast<uint32_t>(i);
      }
    throw InputError("port '" + name + "'", "the layout declares no such port");
  };
  std::vector<uint8_t> from(m.ports.size(), 0);
  for (const auto& f : reply.from) from[index(f, false)] = 1;
  const uint32_t to = index(reply.to, true);
  m.reply_from = std::move(from);  // (armed only when every port is known)
  m.reply_to = to;
  m.reply = std::move(reply);
}

// The reply's streams into its input port, once the wavelets it answers have left (cycle t).
void Fabric::Impl::fire_reply(Worker* w, int64_t t) {
  std::vector<std::pair<std::vector<uint32_t>, int64_t>> streams;
  try {
    streams = reply.fn(t - start);
  } catch (const std::exception& e) {  // the host's error, not the fabric model's
    throw Failure{std::string("port reply to '") + ports[reply_to].spec->name + "': " + e.what()};
  }
  PortRt& p = ports[reply_to];
  if (streams.size() != p.lanes.size()) throw std::logic_error("Fabric port reply: one stream per lane of '" + p.spec->name + "'");
  for (size_t i = 0; i < streams.size(); ++i) {
    PortLane& ln = p.lanes[i];
    const int64_t at = std::max(streams[i].second, t + 1 - start);
    if (comm) {  // every rank fires it: each keeps the lanes' streams; the owner wakes the router
      ln.in = std::move(streams[i].first);
      ln.ready.assign(ln.in.size(), at);
      ln.next = 0;
      ln.last = -1;
      if (ln.in.empty() || !w) continue;
      if (own_row(ln.router / W)) {
        if (start + at <= w->cur_cycle)  // (reply_gate keeps every worker far enough behind)
          throw std::logic_error("wafer fabric ranks: a port reply's stream for cycle " + std::to_string(start + at) + " reached rank " + std::to_string(me) +
                                 " at cycle " + std::to_string(w->cur_cycle));
        wake_router(*w, ln.router, start + at);
        w->idle_now = false;  // (a probe answered before the loop looks again must not say idle)
      }
      w->last_progress = std::max(w->last_progress, start + at);
      continue;
    }
    if (workers.size() > 1) {  // the lane's router's worker installs it (stripes.cpp, apply_inbox)
      ln.staged = std::move(streams[i].first);
      ln.staged_at = at;
      if (!ln.staged.empty()) w->last_progress = std::max(w->last_progress, start + at);
      send_any(worker_of_row(ln.router / W), {start + at, ln.router, kInstall | static_cast<uint32_t>(i)});
      continue;
    }
    ln.in = std::move(streams[i].first);
    ln.ready.assign(ln.in.size(), at);
    ln.next = 0;
    ln.last = -1;
    if (ln.in.empty()) continue;
    wake_router(*w, ln.router, start + at);
    w->last_progress = std::max(w->last_progress, start + at);  // due: not a deadlock while it travels
  }
}

const std::vector<std::pair<uint32_t, int64_t>>& Fabric::port_output(const std::string& port, int64_t lane) const {
  for (const auto& p : impl_->ports)
    if (p.spec->name == port) {
      if (p.spec->input) throw InputError("port '" + port + "'", "is an input port; it collects nothing");
      if (lane < 0 || lane >= static_cast<int64_t>(p.lanes.size()))
        throw InputError("port '" + port + "'", "has lanes 0-" + std::to_string(p.lanes.size() - 1) + ", not " + std::to_string(lane));
      return p.lanes[static_cast<size_t>(lane)].out;
    }
  throw InputError("port '" + port + "'", "the layout declares no such port");
}

void Fabric::note_active(uint32_t slot, int64_t start, int64_t end) {
  auto& runs = active_runs_[slot].runs;
  const int64_t b0 = start / kActiveBin, b1 = std::max(start, end) / kActiveBin;
  // Ops end roughly in time order: extend or append at the back (the common case); an op that
  // started before the last run (a long async op ending after shorter ones) is merged in where it
  // belongs, the runs it covers erased at once.
  if (runs.empty() || b0 > runs.back().second + 1) {
    runs.push_back({b0, b1});
    return;
  }
  if (b0 >= runs.back().first) {
    runs.back().second = std::max(runs.back().second, b1);
    return;
  }
  auto lo = runs.begin();  // the first run that ends at or after b0 - 1 (touches or follows the op)
  while (lo != runs.end() && lo->second + 1 < b0) ++lo;
  auto hi = lo;  // past the last run that starts at or before b1 + 1
  while (hi != runs.end() && hi->first <= b1 + 1) ++hi;
  if (lo == hi) {
    runs.insert(lo, {b0, b1});
    return;
  }
  lo->first = std::min(lo->first, b0);
  lo->second = std::max(std::prev(hi)->second, b1);
  runs.erase(std::next(lo), hi);
}

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
    impl_->store(impl_->w0(), s, a, eb, Impl::encode(values[i], d.elem));
  }
}

std::vector<float> Fabric::read_array(int64_t x, int64_t y, const std::string& array) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  const DataDecl& d = find_array(impl_->prog(s), array, x, y);
  const int eb = elem_bytes(d.elem);
  std::vector<float> out(static_cast<size_t>(d.count));
  for (int32_t i = 0; i < d.count; ++i) out[static_cast<size_t>(i)] = Impl::decode(impl_->load_elem(s, d.addr + static_cast<uint32_t>(i * eb), eb), d.elem);
  if (impl_->comm) {  // (collective: the PE's rank holds its SRAM)
    std::vector<uint8_t> b(out.size() * sizeof(float));
    std::memcpy(b.data(), out.data(), b.size());
    impl_->comm->bcast(impl_->rank_of_row(y), b);
    std::memcpy(out.data(), b.data(), b.size());
  }
  return out;
}

void Fabric::write_bytes(int64_t x, int64_t y, uint32_t addr, std::span<const uint8_t> bytes) {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  if (int64_t{addr} + static_cast<int64_t>(bytes.size()) > cfg_.data_area_bytes()) throw InputError(pe_label(x, y), "write past the data area");
  for (size_t i = 0; i < bytes.size(); ++i) impl_->store(impl_->w0(), s, addr + static_cast<uint32_t>(i), 1, bytes[i]);
}

std::vector<uint8_t> Fabric::read_bytes(int64_t x, int64_t y, uint32_t addr, uint32_t n) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) throw InputError(pe_label(x, y), "no program runs there");
  if (int64_t{addr} + n > cfg_.data_area_bytes()) throw InputError(pe_label(x, y), "read past the data area");
  std::vector<uint8_t> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(impl_->load_elem(s, addr + i, 1));
  if (impl_->comm) impl_->comm->bcast(impl_->rank_of_row(y), out);  // (collective, as read_array)
  return out;
}

int64_t Fabric::task_end(int64_t x, int64_t y, const std::string& name) const {
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone || impl_->task_end.empty()) return -1;
  const int k = impl_->prog(s).find_task(name);
  return k < 0 ? -1 : impl_->task_end[static_cast<size_t>(s) * 64 + static_cast<size_t>(k)];
}

const std::vector<int64_t>& Fabric::task_end_log(int64_t x, int64_t y, const std::string& name) const {
  static const std::vector<int64_t> kNoEnds;
  const uint32_t s = impl_->slot_of(x, y);
  if (s == kNone) return kNoEnds;
  const int k = impl_->prog(s).find_task(name);
  if (k < 0) return kNoEnds;
  const auto it = impl_->task_log.find(uint64_t{s} * 64 + static_cast<uint64_t>(k));
  return it == impl_->task_log.end() ? kNoEnds : it->second;
}

bool Fabric::halted(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s != kNone && impl_->pes[s].halted;
}
int64_t Fabric::halt_cycle(int64_t x, int64_t y) const {
  const uint32_t s = impl_->slot_of(x, y);
  return s != kNone && impl_->pes[s].halted ? impl_->pes[s].halt_cycle - stats_.start_cycle : -1;
}
const Route* Fabric::route(int64_t x, int64_t y, int color) const {
  if (!impl_->L || x < 0 || y < 0 || x >= W_ || y >= H_) return nullptr;
  const uint32_t sl = impl_->find_slot(static_cast<uint32_t>(y * W_ + x), color);
  return sl == kNone ? nullptr : &impl_->slots[sl].route;
}
const LoadedLayout* Fabric::layout() const { return impl_->L; }

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
  ramp = std::max<int64_t>(1, cfg.ramp_latency);
  QD = 1;
  for (int q = 0; q < 8; ++q) {
    in_depth[q] = q < static_cast<int>(cfg.input_depth.size()) ? static_cast<int>(cfg.input_depth[static_cast<size_t>(q)]) : 0;
    out_depth[q] = q < static_cast<int>(cfg.output_depth.size()) ? static_cast<int>(cfg.output_depth[static_cast<size_t>(q)]) : 0;
    QD = std::max({QD, in_depth[q], out_depth[q]});
  }
  const size_t npe = static_cast<size_t>(W * H);
  check_host_memory(layout);
  // Programs: per-program tables.
  pinfo.resize(layout.programs.size());
  for (size_t i = 0; i < layout.programs.size(); ++i) {
    const Program& p = layout.programs[i];
    ProgInfo& pi = pinfo[i];
    if (p.tasks.size() > 64) throw InputError(p.source, "more than 64 tasks in one program (model limit)");
    pi.color_q.fill(-1);
    pi.data_task.fill(-1);
    pi.ctrl_task.fill(-1);
    pi.width.assign(p.instrs.size(), 0);
    for (size_t k = 0; k < p.instrs.size(); ++k)
      if (op_info(p.instrs[k].op).cls == OpClass::dsd) pi.width[k] = static_cast<int32_t>(instr_width(p, p.instrs[k], cfg));
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
      if (t.kind == TaskKind::control && t.id < 64) {
        pi.ctrl_task[t.id] = static_cast<int8_t>(k);
        pi.has_ctrl = true;
      }
      if (t.active) pi.init_active |= uint64_t{1} << k;
      if (t.blocked) pi.init_blocked |= uint64_t{1} << k;
      if (std::find(f.opt_.task_logs.begin(), f.opt_.task_logs.end(), t.name) != f.opt_.task_logs.end()) pi.logged |= uint64_t{1} << k;
      pi.by_id.push_back(static_cast<int8_t>(k));
    }
    pi.used_q = used;
    for (const auto& t : p.tasks)
      if (t.kind == TaskKind::data && pi.color_q[static_cast<size_t>(t.color)] >= 0) pi.data_q = static_cast<uint8_t>(pi.data_q | (1u << pi.color_q[static_cast<size_t>(t.color)]));
    std::sort(pi.by_id.begin(), pi.by_id.end(), [&](int8_t a, int8_t b) { return p.tasks[static_cast<size_t>(a)].id < p.tasks[static_cast<size_t>(b)].id; });
  }
  // PEs.
  pe_slot.assign(npe, kNone);
  std::vector<char> rec_at;  // FabricOptions::record_only as a map over the fabric
  if (f.opt_.record && f.opt_.record_only) {
    rec_at.assign(npe, 0);
    for (const auto& [x, y] : *f.opt_.record_only)
      if (x >= 0 && y >= 0 && x < W && y < H) rec_at[static_cast<size_t>(y * W + x)] = 1;
  }
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
      p.rect = layout.rect_at(x, y);
      p.rec = f.opt_.record && (rec_at.empty() || rec_at[static_cast<size_t>(y * W + x)]);
      pes.push_back(std::move(p));
    }
  f.active_runs_.clear();
  if (f.opt_.record)
    for (const Pe& p : pes) f.active_runs_.push_back({p.x, p.y, {}});
  // Summary phases: each program's tasks interned by (rectangle, task name), the rectangle being
  // the first one found running the program.
  phase_base.clear();
  phase_of.clear();
  if (f.opt_.summary) {
    FabricSummary& sm = f.summary_;
    sm.phases.clear();
    sm.rects = static_cast<int32_t>(layout.layout.rects.size());
    std::map<std::pair<int32_t, std::string>, int32_t> interned;
    phase_base.assign(layout.programs.size(), kNone);
    for (const Pe& p : pes) {
      if (phase_base[p.prog] != kNone) continue;
      phase_base[p.prog] = static_cast<uint32_t>(phase_of.size());
      for (const auto& t : layout.programs[p.prog].tasks) {
        auto [it, fresh] = interned.emplace(std::make_pair(p.rect, t.name), static_cast<int32_t>(sm.phases.size()));
        if (fresh) sm.phases.push_back({p.rect, t.name, {}});
        phase_of.push_back(it->second);
      }
    }
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
  slots.assign(ns, Slot{});
  slot_color.resize(ns);
  slot_buf.resize(ns);
  routers.assign(npe, Router{});
  uint32_t nbuf = 0;
  for (size_t i = 0; i < ns; ++i) {
    slots[i].pe = tmp[i].pe;
    slot_color[i] = tmp[i].color;
    slots[i].color = tmp[i].color;
    slots[i].route = *tmp[i].r;
    slot_buf[i] = nbuf;
    nbuf += static_cast<uint32_t>(std::popcount(static_cast<unsigned>(tmp[i].r->rx_any() & 0xf)));
    ++slot_begin[tmp[i].pe + 1];
  }
  for (size_t i = 0; i < npe; ++i) slot_begin[i + 1] += slot_begin[i];
  for (size_t i = 0; i < npe; ++i) routers[i].first = slot_begin[i];
  bufs.resize(static_cast<size_t>(nbuf) * static_cast<size_t>(D));
  for (size_t i = 0; i < ns; ++i) {
    const unsigned rx = slots[i].route.rx_any() & 0xfu;
    slots[i].rx = static_cast<uint8_t>(rx);
    for (unsigned d = 0; d < 4; ++d)
      slots[i].ring[d] = (slot_buf[i] + static_cast<uint32_t>(std::popcount(rx & ((1u << d) - 1u)))) * static_cast<uint32_t>(D);
  }
  for (int d = 0; d < 4; ++d) nb_delta[static_cast<size_t>(d)] = dir_dy(static_cast<Dir>(d)) * W + dir_dx(static_cast<Dir>(d));
  for (size_t i = 0; i < ns; ++i) {
    const int64_t x = slots[i].pe % W, y = slots[i].pe / W;
    const DirSet tx = slots[i].route.tx_any();
    for (int d = 0; d < 4; ++d) {
      if (!(tx & (1u << d))) continue;
      const int64_t nx = x + dir_dx(static_cast<Dir>(d)), ny = y + dir_dy(static_cast<Dir>(d));
      if (nx < 0 || ny < 0 || nx >= W || ny >= H) continue;
      slots[i].down[static_cast<size_t>(d)] = find_slot(static_cast<uint32_t>(ny * W + nx), slot_color[i]);
    }
  }
  ports.clear();
  for (const auto& ps : layout.layout.ports) {
    PortRt pr;
    pr.spec = &ps;
    for (int64_t i = 0; i < ps.length; ++i) {
      PortLane ln;
      ln.router = static_cast<uint32_t>(ps.lane_y(i) * W + ps.lane_x(i));
      ln.slot = find_slot(ln.router, ps.color);
      ln.dir = static_cast<uint8_t>(ps.side);
      ln.color = ps.color;
      ln.port = static_cast<uint32_t>(ports.size());
      if (ln.slot == kNone) throw std::logic_error("port lane without a route (check_routes lets it through)");
      routers[ln.router].has_port = 1;
      pr.lanes.push_back(std::move(ln));
    }
    ports.push_back(std::move(pr));
  }
  in_lanes.clear();
  for (size_t pi = 0; pi < ports.size(); ++pi)
    if (ports[pi].spec->input)
      for (size_t li = 0; li < ports[pi].lanes.size(); ++li) in_lanes.push_back({ports[pi].lanes[li].router, static_cast<uint32_t>(pi), static_cast<uint32_t>(li)});
  std::sort(in_lanes.begin(), in_lanes.end());
  for (size_t r = 0; r < npe; ++r) {
    if (pe_slot[r] != kNone || slot_begin[r + 1] != slot_begin[r] + 1 || routers[r].has_port) continue;
    const uint32_t sl = slot_begin[r];
    const Route& rt = slots[sl].route;
    const unsigned rx = rt.pos[0].rx, tx = rt.pos[0].tx;
    if (rt.npos != 1 || std::popcount(rx) != 1 || std::popcount(tx) != 1 || rx > 8 || tx > 8) continue;
    Relay& f1 = routers[r].relay;
    const int rd = std::countr_zero(rx), td = std::countr_zero(tx);
    f1.bi = sl * 4 + static_cast<uint32_t>(rd);
    f1.tx = static_cast<uint8_t>(td);
    const uint32_t ds = sdown(static_cast<size_t>(sl) * 4 + static_cast<size_t>(td));
    if (ds != kNone) {
      f1.dbi = ds * 4 + static_cast<uint32_t>(opposite(static_cast<Dir>(td)));
      f1.dr = slots[ds].pe;
    }
  }
  // Control tasks: a color delivered to a PE whose program has control tasks but no fabin or data
  // task for that color still needs an input queue for its control wavelets: the first free one.
  for (uint32_t sl = 0; sl < ns; ++sl) {
    const uint32_t ps = pe_slot[slots[sl].pe];
    if (ps == kNone || !(slots[sl].route.tx_any() & dir_bit(Dir::RAMP))) continue;
    ProgInfo& pi = pinfo[pes[ps].prog];
    if (!pi.has_ctrl || pi.color_q[slot_color[sl]] >= 0) continue;
    for (int q = 0; q < 8; ++q)
      if (!(pi.used_q & (1u << q)) && in_depth[q] > 0) {
        pi.color_q[slot_color[sl]] = static_cast<int8_t>(q);
        pi.used_q = static_cast<uint8_t>(pi.used_q | (1u << q));
        break;
      }
  }
  link.assign(npe * kDirs, 0);
  pwake_last.assign(pes.size(), -1);
  pwake_push.assign(pes.size(), -1);
  // One worker (a run on more threads makes more: plan_workers); SRAM slabs for every page the
  // PEs could write, so the slab table never moves.
  workers.clear();
  workers.push_back(std::make_unique<Worker>());
  w0().cal.init(static_cast<uint32_t>(pes.size()), static_cast<uint32_t>(npe));
  w0().st = &f.stats_;
  w0().sum = &f.summary_;
  w0().log = &task_log;
  w0().deliveries = &f.deliveries_;
  w0().ops = &f.op_records_;
  w0().tasks = &f.task_records_;
  w0().r_lo = 0;
  w0().r_n = static_cast<uint32_t>(npe);
  w0().first_end = static_cast<uint32_t>(npe);
  const size_t max_pages = pes.size() * static_cast<size_t>((cfg.data_area_bytes() + FabricStats::kPageBytes - 1) / FabricStats::kPageBytes);
  slabs.clear();
  slabs.resize(max_pages / kSlabPages + 1 + 2 * 256);  // + partly used slabs: one per worker (up to 256), and those of workers a later run with fewer threads dropped
  slab_count = 0;
  sram_pages = 0;
  // A partitioned fabric: the ranks' stripes, fixed for every run (SRAM lives with its PE's rank).
  if (f.opt_.comm && f.opt_.comm->size() > 1) {
    comm = f.opt_.comm.get();
    me = comm->rank();
    plan_ranks();
  }
  // SRAM: fill values.
  for (uint32_t s = 0; s < pes.size(); ++s)
    for (const auto& d : prog(s).data) {
      if (!d.has_fill) continue;
      const uint32_t bits = encode(d.fill, d.elem);
      if (bits == 0) continue;
      const int eb = elem_bytes(d.elem);
      for (int32_t i = 0; i < d.count; ++i) store(w0(), s, d.addr + static_cast<uint32_t>(i * eb), eb, bits);
    }
}

// Host memory the fabric's state will take (FabricOptions::host_memory_budget): flat per-router
// arrays, route slots with their buffers, PE slots with their queues, and the SRAM pages the fill
// values need, counted from the layout before anything is allocated. SRAM written later grows it
// (store() checks again).
int64_t Fabric::Impl::estimate_bytes(const LoadedLayout& layout, const WaferConfig& cfg, int64_t& fill_bytes) {
  const int64_t W = layout.layout.width, H = layout.layout.height;
  const int64_t D = static_cast<int64_t>(cfg.buffer_depth);
  int64_t QD = 1;
  for (int q = 0; q < 8; ++q) {
    if (q < static_cast<int>(cfg.input_depth.size())) QD = std::max<int64_t>(QD, static_cast<int64_t>(cfg.input_depth[static_cast<size_t>(q)]));
    if (q < static_cast<int>(cfg.output_depth.size())) QD = std::max<int64_t>(QD, static_cast<int64_t>(cfg.output_depth[static_cast<size_t>(q)]));
  }
  const int64_t npe = W * H;
  int64_t slots = 0, rxbufs = 0;
  for (const auto& rs : layout.layout.routes) {
    const int64_t n = int64_t{rs.width} * rs.height;
    slots += n;
    rxbufs += n * std::popcount(static_cast<unsigned>(rs.route.rx_any() & 0xf));
  }
  int64_t pe_slots = 0, fill_pages = 0;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const uint32_t pr = layout.program_at(x, y);
      if (pr == kNoProgram) continue;
      ++pe_slots;
      for (const auto& d : layout.programs[pr].data)
        if (d.has_fill && d.fill != 0) fill_pages += (d.bytes() + FabricStats::kPageBytes - 1) / FabricStats::kPageBytes + 1;
    }
  const int64_t per_router = sizeof(uint32_t) * 2 + sizeof(Router) + sizeof(int64_t) * kDirs + 2;  // slot_begin, pe_slot, Router, link, calendar bits
  const int64_t per_slot = sizeof(Slot) + sizeof(uint32_t) + sizeof(uint8_t) + 16;  // Slot, slot_buf, slot_color; the sort buffer
  const int64_t per_pe = static_cast<int64_t>(sizeof(Pe)) + 16 * QD * static_cast<int64_t>(sizeof(Wv)) + 2 * sizeof(int64_t) +
                         (cfg.data_area_bytes() / FabricStats::kPageBytes + 1) * static_cast<int64_t>(sizeof(uint32_t));
  fill_bytes = fill_pages * FabricStats::kPageBytes;
  return npe * per_router + slots * per_slot + rxbufs * D * static_cast<int64_t>(sizeof(Wv)) + pe_slots * per_pe + fill_bytes;
}

namespace {
std::string mib(int64_t b) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << static_cast<double>(b) / (1024.0 * 1024.0) << " MiB";
  return o.str();
}
}  // namespace

int64_t Fabric::check_host_memory(const LoadedLayout& layout, const WaferConfig& cfg, int64_t budget) {
  int64_t fill = 0;
  const int64_t need = Impl::estimate_bytes(layout, cfg, fill);
  if (budget > 0 && need > budget)
    throw InputError(layout.layout.source.empty() ? std::string("wafer layout") : layout.layout.source,
                     "the fabric's state needs about " + mib(need) + " of host memory (" + std::to_string(layout.layout.width) + " x " +
                         std::to_string(layout.layout.height) +
                         " routers, not counting SRAM pages first written during the run); the host-memory budget is " + mib(budget),
                     "raise run.host_memory, or run a smaller fabric (target.params fabric.width / fabric.height)");
  return need;
}

void Fabric::Impl::check_host_memory(const LoadedLayout& layout) {
  const int64_t budget = f.opt_.host_memory_budget;
  int64_t fill = 0;
  const int64_t need = Fabric::check_host_memory(layout, cfg, budget);
  estimate_bytes(layout, cfg, fill);
  f.estimated_bytes_ = need;
  if (budget <= 0) return;
  sram_budget = budget - (need - fill);  // SRAM pages (fill values first) may take the rest
}

uint32_t Fabric::Impl::find_slot(uint32_t pe, int color) const {
  for (uint32_t s = slot_begin[pe]; s < slot_begin[pe + 1]; ++s)
    if (slot_color[s] == color) return s;
  return kNone;
}

void Fabric::Impl::reset(int64_t c0) {
  start = c0;
  plan_workers(f.opt_.threads);
  for (auto& wp : workers) {
    Worker& w = *wp;
    w.hops_binned = 0;
    w.events_remote = -1;
    w.done_through = -1;
    w.cur_cycle = -1;
    w.next_flip = 0;
    w.reply_t = -1;
    w.reply_key = 0;
    w.last_progress = c0;
    w.cal.clear(c0);
    w.out_prev.clear();
    w.out_next.clear();
    w.own_deliveries.clear();
    w.own_ops.clear();
    w.own_tasks.clear();
    w.tag_d.clear();
    w.tag_o.clear();
    w.tag_t.clear();
    w.in_prev.box.clear();
    w.in_next.box.clear();
    w.lb_all = c0;
    w.lb_first = c0;
    w.lp_pub = c0;
    w.hops_pub = 0;
    w.t_wait_above = w.t_wait_below = 0;
    if (w.id > 0) {
      w.own_st = FabricStats{};
      w.own_st.color_hops.assign(kMaxColors, 0);
      w.own_log.clear();
      if (f.opt_.summary) {
        w.own_sum = FabricSummary{};
        w.own_sum.rects = f.summary_.rects;
        w.own_sum.phases = f.summary_.phases;
        for (auto& ph : w.own_sum.phases) ph.span = Span{};
        const size_t groups = static_cast<size_t>(f.summary_.rects) + ports.size();
        w.own_sum.sent.assign(groups * kMaxColors, Span{});
        w.own_sum.received.assign(groups * kMaxColors, Span{});
      }
    }
  }
  halt_all = false;
  stop_at = INT64_MAX;
  if (f.opt_.task_ends) task_end.assign(pes.size() * 64, -1);
  task_log.clear();
  // Faults: flips in cycle order; routers that drop wavelets leave the relay fast path.
  f.fired_.assign(faults, Fabric::FaultFired{});
  std::stable_sort(flips.begin(), flips.end(), [](const Flip& a, const Flip& b) { return a.f.cycle < b.f.cycle; });
  for (const auto& [r, rl] : relay_saved) routers[r].relay = rl;
  relay_saved.clear();
  for (const Drop& d : drops)
    if (routers[d.router].relay.bi != kNone) {
      relay_saved.emplace_back(d.router, routers[d.router].relay);
      routers[d.router].relay.bi = kNone;
    }
  for (Slot& sl : slots) sl.cnt = {}, sl.head = {}, sl.pos = 0;
  std::fill(link.begin(), link.end(), 0);
  std::fill(pwake_last.begin(), pwake_last.end(), -1);
  std::fill(pwake_push.begin(), pwake_push.end(), -1);
  for (Router& R : routers) R.wake_last = R.wake_push = -1, R.occ = 0;  // (turns carry over, as before)
  reply_count = 0;
  if (reply.fn)  // (the last run's reply is not this run's)
    for (auto& ln : ports[reply_to].lanes) ln.in.clear(), ln.ready.clear();
  for (auto& p : ports)
    for (auto& ln : p.lanes) {
      ln.next = 0;
      ln.last = -1;
      ln.out.clear();
      if (p.spec->input && !ln.in.empty()) wake_router(worker_of_row(ln.router / W), ln.router, c0);
    }
  FabricStats& st = f.stats_;
  st = FabricStats{};
  st.start_cycle = c0;
  if (f.opt_.summary) {
    FabricSummary& sm = f.summary_;
    sm.busy.clear();
    sm.delivered.clear();
    sm.hops.clear();
    for (auto& ph : sm.phases) ph.span = Span{};
    const size_t groups = static_cast<size_t>(sm.rects) + ports.size();
    sm.sent.assign(groups * kMaxColors, Span{});
    sm.received.assign(groups * kMaxColors, Span{});
  }
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
    wake_pe(worker_of_row(p.y), s, c0);
  }
}

bool Fabric::Impl::work_remains() const {
  for (const Slot& sl : slots)
    for (const uint8_t c : sl.cnt)
      if (c) return true;
  for (const auto& p : ports)
    for (const auto& ln : p.lanes)
      if (ln.next < ln.in.size()) return true;
  for (const auto& p : pes) {
    if (f.opt_.require_halt && !p.halted) return true;
    if (p.main.instr >= 0 || !p.mts.empty()) return true;
    for (int q = 0; q < 16; ++q)
      if (p.qcount[static_cast<size_t>(q)]) return true;
  }
  return false;
}

void Fabric::Impl::handle(Worker& w, int64_t cycle, uint32_t key) {
  if (key & kRouterBit) {
    const uint32_t r = key & ~kRouterBit;
    Router& R = routers[r];
    if (R.wake_last == cycle) return;
    R.wake_last = cycle;
    if (R.relay.bi != kNone) relay_step(w, R.relay, r, cycle);
    else router_step(w, r, cycle);
  } else {
    if (pwake_last[key] == cycle) return;
    pwake_last[key] = cycle;
    pe_step(w, key, cycle);
  }
}

int64_t Fabric::Impl::Calendar::peek() const {
  if (loaded_ && (now_i_ < now_.size() || !late_.empty())) return cur_;
  if (loaded_ && bentries_) return cur_ + 1;
  int64_t c = INT64_MAX;
  if (wheel_count_) {
    const size_t nw = nonempty_.size();
    const size_t b0 = static_cast<size_t>(cur_ & (kWheel - 1));
    size_t w = b0 >> 6;
    uint64_t word = nonempty_[w] & (~uint64_t{0} << (b0 & 63));
    for (size_t k = 0; !word; ++k) {  // at most one wrap; wheel_count_ > 0 guarantees a hit
      w = (w + 1) % nw;
      word = nonempty_[w];
      if (k > nw) throw std::logic_error("wafer fabric calendar: lost bucket");
    }
    const size_t b = (w << 6) + static_cast<size_t>(std::countr_zero(word));
    c = cur_ + static_cast<int64_t>((b - b0) & static_cast<size_t>(kWheel - 1));
  }
  if (!far_.empty()) c = std::min(c, far_.front().cycle);
  return c;
}

// ---------------------------------------------------------------------------------------------
// The calendar (fabric_impl.hpp).

void Fabric::Impl::Calendar::init(uint32_t pe_slots, uint32_t routers) {
  wheel_.assign(static_cast<size_t>(kWheel), {});
  nonempty_.assign(static_cast<size_t>((kWheel + 63) / 64), 0);
  pe_slots_ = pe_slots;
  const size_t keys = size_t{pe_slots} + routers;
  bits_.assign((keys + 63) / 64, 0);
  summary_.assign((bits_.size() + 63) / 64, 0);
  clear(0);
}

void Fabric::Impl::Calendar::clear(int64_t c0) {
  if (wheel_count_)
    for (auto& b : wheel_) b.clear();
  std::fill(nonempty_.begin(), nonempty_.end(), 0);
  wheel_count_ = 0;
  far_.clear();
  now_.clear();
  now_i_ = 0;
  late_.clear();
  dups_ = 0;
  consumed_ = 0;
  if (bentries_) {
    std::fill(bits_.begin(), bits_.end(), 0);
    std::fill(summary_.begin(), summary_.end(), 0);
  }
  bentries_ = 0;
  cur_ = c0;
  loaded_ = false;
}

void Fabric::Impl::Calendar::push_slow(int64_t c, uint32_t key) {
  const int64_t d = c - cur_;
  if (d == 0 && loaded_) {  // the current cycle, while it is being handled
    late_.push_back(key);
    std::push_heap(late_.begin(), late_.end(), std::greater<>());
  } else {
    if (d < 0) throw std::logic_error("wafer fabric calendar: an event in the past");
    far_.push_back({c, key});
    std::push_heap(far_.begin(), far_.end(), std::greater<>());
  }
}

void Fabric::Impl::Calendar::advance() {
  // The next cycle with entries (the current one is exhausted): cur_ + 1 if the bitmap holds some,
  // else the first non-empty bucket from the current cycle on, or the far heap.
  const int64_t c = peek();
  if (c == INT64_MAX) throw std::logic_error("wafer fabric calendar: advanced while empty");
  cur_ = c;
  loaded_ = true;
  now_.clear();
  now_i_ = 0;
  const size_t b = static_cast<size_t>(c & (kWheel - 1));
  if (!wheel_[b].empty()) {  // (only cycle c's entries: the wheel spans fewer than kWheel cycles)
    now_.swap(wheel_[b]);
    wheel_count_ -= now_.size();
    nonempty_[b >> 6] &= ~(uint64_t{1} << (b & 63));
  }
  while (!far_.empty() && far_.front().cycle == c) {
    now_.push_back(far_.front().key);
    std::pop_heap(far_.begin(), far_.end(), std::greater<>());
    far_.pop_back();
  }
  // Ascending keys, duplicates merged.
  if (bentries_ == 0 && now_.size() <= 48) {
    const size_t n = now_.size();
    std::sort(now_.begin(), now_.end());
    now_.erase(std::unique(now_.begin(), now_.end()), now_.end());
    dups_ = n - now_.size();
    return;
  }
  for (const uint32_t key : now_) set_bit(key);
  now_.clear();
  for (size_t sw = 0; sw < summary_.size(); ++sw) {
    uint64_t sword = summary_[sw];
    if (!sword) continue;
    summary_[sw] = 0;
    while (sword) {
      const size_t w = (sw << 6) + static_cast<size_t>(std::countr_zero(sword));
      sword &= sword - 1;
      uint64_t word = bits_[w];
      bits_[w] = 0;
      while (word) {
        const size_t i = (w << 6) + static_cast<size_t>(std::countr_zero(word));
        word &= word - 1;
        now_.push_back(i < pe_slots_ ? static_cast<uint32_t>(i) : static_cast<uint32_t>(i - pe_slots_) | kRouterBit);
      }
    }
  }
  dups_ = bentries_ - now_.size();
  bentries_ = 0;
}

// A plain relay (Impl::Relay): what router_step does for its single candidate and tx direction.
void Fabric::Impl::relay_step(Worker& wk, const Relay& rl, uint32_t r, int64_t t) {
  const size_t bi = rl.bi, dbi = rl.dbi;
  Slot& S = slots[bi >> 2];
  const int cnt = S.cnt[bi & 3];
  if (!cnt) return;
  const int head = S.head[bi & 3];
  Wv* const bf = bufs.data();  // (in a local: the uint8_t stores below may alias anything in memory)
  const Wv w = bf[S.ring[bi & 3] + static_cast<size_t>(head)];
  if (w.ready > t) {
    wake_router(wk, r, w.ready);
    return;
  }
  if (dbi == kNone) return;
  Slot& DS = slots[dbi >> 2];
  const int dcnt = DS.cnt[dbi & 3];
  if (dcnt >= D) return;  // woken when space frees
  const int D_ = D;
  int k2 = DS.head[dbi & 3] + dcnt;
  if (k2 >= D_) k2 -= D_;
  bf[DS.ring[dbi & 3] + static_cast<size_t>(k2)] = {w.payload, w.color, w.control, t + hop};
  DS.cnt[dbi & 3] = static_cast<uint8_t>(dcnt + 1);
  S.head[bi & 3] = static_cast<uint8_t>(head + 1 == D_ ? 0 : head + 1);
  S.cnt[bi & 3] = static_cast<uint8_t>(cnt - 1);
  if (cnt == 1) maybe_empty(static_cast<uint32_t>(bi / 4));
  FabricStats& st = *wk.st;
  ++link[static_cast<size_t>(r) * kDirs + rl.tx];
  ++st.color_hops[w.color];
  if (dcnt + 1 > st.router_buffer_high_water) st.router_buffer_high_water = dcnt + 1;
  ++st.wavelet_hops;
  wk.last_progress = std::max(wk.last_progress, t + 1);
  pushed_down(wk, static_cast<uint32_t>(dbi / 4), rl.dr, !dcnt, t + hop);
  wake_router(wk, static_cast<uint32_t>(static_cast<int64_t>(r) + nb_delta[bi & 3]), t + 1);
  if (cnt > 1) wake_router(wk, r, t + 1);
}

namespace {
constexpr int kOpp[4] = {1, 0, 3, 2};  // opposite(N, S, E, W)
}  // namespace

// router_step's parts below are inlined into it (used there only; as calls, their entries and
// exits cost ~5% of a streamed layer's instructions).

// Whether every tx direction of slot s's wavelet can take it this cycle: the PE's input queue for
// its color (RAMP), the downstream buffer, or an output port's lane. A link an injected fault
// drops the wavelet on needs no room.
[[gnu::always_inline]] inline bool Fabric::Impl::has_room(const Router& R, uint32_t r, uint32_t ps, uint32_t s, unsigned tx, int64_t t) {
  if (!tx) return false;
  const Slot& S = slots[s];
  for (unsigned m = tx; m; m &= m - 1) {
    const int d = std::countr_zero(m);
    if (drop_at(r, d, S.color, t) >= 0) continue;  // lost on the link: needs no room
    if (d == static_cast<int>(Dir::RAMP)) {
      if (ps == kNone) return false;
      const int q = pinfo[pes[ps].prog].color_q[S.color];
      if (!(q >= 0 && pes[ps].qcount[static_cast<size_t>(q)] < in_depth[q])) return false;
    } else if (const uint32_t ds = S.down[static_cast<size_t>(d)]; ds != kNone) {
      if (bcnt(static_cast<size_t>(ds) * 4 + static_cast<size_t>(kOpp[d])) >= D) return false;
    } else if (!(R.has_port && out_lane(r, d, S.color) != nullptr)) {  // an output port takes one per cycle
      return false;
    }
  }
  return true;
}

// Slot s's wavelet wv goes to every tx direction at cycle t (`up`: the cycles a wavelet from the
// PE's output queue still has to the crossbar).
[[gnu::always_inline]] inline void Fabric::Impl::forward(Worker& wk, uint32_t r, uint32_t ps, uint32_t s, const Wv& wv, unsigned tx, int64_t up, int64_t t) {
  FabricStats& st = *wk.st;
  // router.ramp_latency: a wavelet from the PE's output queue still has ramp - 1 cycles to the crossbar.
  const int64_t at_pe = t + ramp + up, at_link = t + hop + up;
  for (unsigned m = tx; m; m &= m - 1) {
    const int d = std::countr_zero(m);
    if (const int di = drop_at(r, d, slots[s].color, t); di >= 0) {  // an injected fault takes it
      Fabric::FaultFired& fr = f.fired_[drops[static_cast<size_t>(di)].idx];
      if (!fr.count++) fr.first_cycle = t - start;
      fr.last_cycle = t - start;
      ++st.dropped_wavelets;
      continue;
    }
    ++link[static_cast<size_t>(r) * kDirs + static_cast<size_t>(d)];
    ++st.color_hops[wv.color];
    if (d == static_cast<int>(Dir::RAMP)) {
      const int q = pinfo[pes[ps].prog].color_q[slots[s].color];
      const Wv in{wv.payload, wv.color, wv.control, at_pe};
      // (drain only at ramp latency 1: a later store would be seen early by the PE's events between)
      if (at_pe != t + 1 || !drain(wk, ps, q, in, at_pe)) {
        push_queue(ps, q, in);
        // The PE takes it at at_pe (t + 1 at ramp latency 1) -- unless its main thread runs on to a later cycle and no
        // microthread reads this queue: then nothing can take it before that cycle, when the
        // PE is woken for it.
        const Pe& P = pes[ps];
        bool later = P.ready_at > at_pe && P.main.instr < 0 && !P.mt_wait;
        for (const Mt& mt : P.mts) later = later && !(mt.op.inq & (1u << q));
        wake_pe(wk, ps, later ? P.ready_at : at_pe);
      }
      ++st.ramp_deliveries;
      if (f.opt_.summary) summary_received(wk, pes[ps].rect, wv.color, at_pe);
      if (pes[ps].rec)
        record(wk, *wk.deliveries, wk.tag_d, t, r | kRouterBit, DeliveryRecord{pes[ps].x, pes[ps].y, wv.color, static_cast<uint8_t>(q), wv.payload, at_pe - start});
    } else if (const uint32_t ds = sdown(static_cast<size_t>(s) * 4 + static_cast<size_t>(d)); ds == kNone) {
      PortLane* ol = out_lane(r, d, wv.color);
      ol->out.push_back({wv.payload, at_link - start});
      ++st.port_out_wavelets;
      if (int64_t fire = t; reply.fn && reply_from[ol->port] && reply_counted(wk, t, r, *ol, fire)) fire_reply(&wk, fire + hop + ramp - 1);  // every counted wavelet has arrived by then, on any thread count
      if (f.opt_.summary) summary_received(wk, wk.sum->rects + static_cast<int32_t>(ol->port), wv.color, at_link);
    } else {
      const size_t bi = static_cast<size_t>(ds) * 4 + static_cast<size_t>(kOpp[d]);
      int k2 = bhd(bi) + bcnt(bi);
      if (k2 >= D) k2 -= D;
      bufs[bring(bi) + static_cast<size_t>(k2)] = {wv.payload, wv.color, wv.control, at_link};
      const bool was_empty = !bcnt(bi)++;
      if (bcnt(bi) > st.router_buffer_high_water) st.router_buffer_high_water = bcnt(bi);
      ++st.wavelet_hops;
      pushed_down(wk, ds, was_empty, at_link);
    }
  }
}

// A control wavelet (kControl or kAdvance) has gone through slot s: its route's next switch
// position. True when the position changed (it may take an input the old one held back).
[[gnu::always_inline]] inline bool Fabric::Impl::switch_on(uint32_t s) {
  Slot& S = slots[s];
  const uint8_t to = S.route.next(S.pos);
  const bool changed = to != S.pos;
  S.pos = to;
  return changed;
}

// Pop the head of slot s's buffer from direction d at router r and wake whoever feeds it (room
// again): the upstream neighbour, or this router if an input port feeds the buffer. True when
// the buffer holds more.
[[gnu::always_inline]] inline bool Fabric::Impl::pop_buffer(Worker& wk, uint32_t r, uint32_t s, int d, int64_t t) {
  const size_t bi = static_cast<size_t>(s) * 4 + static_cast<size_t>(d);
  bhd(bi) = static_cast<uint8_t>(bhd(bi) + 1 == D ? 0 : bhd(bi) + 1);
  const bool more = --bcnt(bi) > 0;
  if (!more) maybe_empty(s);
  const int64_t ux = static_cast<int64_t>(r % W) + dir_dx(static_cast<Dir>(d)), uy = static_cast<int64_t>(r / W) + dir_dy(static_cast<Dir>(d));
  if (ux < 0 || uy < 0 || ux >= W || uy >= H) wake_router(wk, r, t + 1);
  else wake_router(wk, static_cast<uint32_t>(static_cast<int64_t>(r) + nb_delta[static_cast<size_t>(d)]), t + 1);
  return more;
}

// router_step with one input, the buffer of slot s's rx direction d (most calls on a compiled
// layout: a multicast's wavelet at a router of its line): the same effects without the
// arbitration -- a single input holds every link it wants.
[[gnu::always_inline]] inline void Fabric::Impl::step_one(Worker& wk, Router& R, uint32_t r, uint32_t ps, uint32_t s, int d, int64_t t) {
  const Slot& S = slots[s];
  const Wv wv = bufs[S.ring[static_cast<size_t>(d)] + S.head[static_cast<size_t>(d)]];
  if (wv.ready > t) {
    wake_router(wk, r, wv.ready);
    return;
  }
  const SwitchPos& pos = S.route.pos[S.pos];
  if (!(pos.rx & (1u << d))) return;  // the switch position does not take this input now
  const unsigned tx = pos.tx;
  if (!has_room(R, r, ps, s, tx, t)) return;  // woken when space frees
  const uint8_t after = static_cast<uint8_t>((s - R.first) * 4 + static_cast<uint32_t>(d) + 1);  // its input id + 1
  for (unsigned m = tx; m; m &= m - 1) R.turns[static_cast<size_t>(std::countr_zero(m))] = after;
  forward(wk, r, ps, s, wv, tx, 0, t);
  bool again = wv.control && switch_on(s);
  again |= pop_buffer(wk, r, s, d, t);
  wk.last_progress = std::max(wk.last_progress, t + 1);
  if (again) wake_router(wk, r, t + 1);
}

// One router at cycle t: every input (per color: a buffer per rx direction; the PE's output
// queues as the RAMP input) whose head is ready and allowed by the color's switch position goes to
// all its tx directions at once if each of those links is still free this cycle and each
// receiving buffer (or the PE's input queue) has room. Each link serves the inputs that want it
// round-robin (`turns`).
void Fabric::Impl::router_step(Worker& wk, uint32_t r, int64_t t) {
  struct Cand {
    uint32_t slot;
    int8_t dir;    // 0..3 buffer direction, -1: output queue `q`
    int8_t q;
  };
  Cand cand[4 * kMaxColors + 8];
  int n = 0;
  Router& R = routers[r];
  if (R.has_port) inject(wk, r, t);
  for (uint32_t om = R.occ; om; om &= om - 1) {  // slots holding wavelets, ascending
    const uint32_t s = R.first + static_cast<uint32_t>(std::countr_zero(om));
    const uint8_t* bc = &bcnt(static_cast<size_t>(s) * 4);
    for (unsigned m = slots[s].rx; m; m &= m - 1) {  // rx directions in ascending order
      const int d = std::countr_zero(m);
      if (bc[d]) cand[n++] = {s, static_cast<int8_t>(d), -1};
    }
  }
  const uint32_t ps = pe_slot[r];
  if (ps != kNone) {
    const Pe& P = pes[ps];
    uint64_t out;  // the output queues' counts at once: most often all zero
    std::memcpy(&out, &P.qcount[8], sizeof out);
    if (out)
      for (int q = 0; q < 8; ++q)
        if (P.qcount[static_cast<size_t>(8 + q)]) cand[n++] = {kNone, -1, static_cast<int8_t>(q)};
  }
  if (n == 0) return;
  if (n == 1 && cand[0].dir >= 0) return step_one(wk, R, r, ps, cand[0].slot, cand[0].dir, t);
  int64_t next = INT64_MAX;
  bool moved = false;
  // Per-link round-robin (a separable allocator): every input whose head is ready, allowed by its
  // color's switch position and has room at each of its tx directions requests those links; each
  // link grants the first requester at or after its turn (`turn`, by input id: a buffer's
  // (slot, rx direction), then the output queues), and an input moves when it holds every link it
  // needs. A link's turn then passes to the input after its winner, so two inputs that contend for
  // a link take turns whatever their colors and whatever else is ready.
  Wv* head[4 * kMaxColors + 8];  // each input's head wavelet
  uint8_t id[4 * kMaxColors + 8];
  unsigned want[4 * kMaxColors + 8];
  int8_t win[kDirs];
  uint8_t best[kDirs];
  if (n > 1)
    for (int d = 0; d < kDirs; ++d) win[d] = -1, best[d] = 255;
  uint8_t* const turn = R.turns.data();
  int wanting = 0;
  for (int ci = 0; ci < n; ++ci) {
    Cand& c = cand[ci];
    if (c.dir >= 0) {
      head[ci] = &bufs[bring(static_cast<size_t>(c.slot) * 4 + static_cast<size_t>(c.dir)) + bhd(static_cast<size_t>(c.slot) * 4 + static_cast<size_t>(c.dir))];
    } else {  // an output queue: its color's slot
      head[ci] = &qentry(ps, 8 + c.q, pes[ps].qhead[static_cast<size_t>(8 + c.q)]);
      c.slot = find_slot(r, head[ci]->color);
      if (c.slot == kNone) throw Failure{pe_label(r % W, r / W) + ": the PE sends color " + std::to_string(head[ci]->color) + " but its router has no route for it"};
    }
    Wv* const w = head[ci];
    want[ci] = 0;
    id[ci] = static_cast<uint8_t>(c.dir >= 0 ? (c.slot - R.first) * 4 + static_cast<uint32_t>(c.dir) : 4 * kMaxColors + static_cast<uint32_t>(c.q));
    if (w->ready > t) {
      next = std::min(next, w->ready);
      continue;
    }
    const SwitchPos& pos = slots[c.slot].route.pos[slots[c.slot].pos];
    const unsigned from = c.dir >= 0 ? (1u << c.dir) : dir_bit(Dir::RAMP);
    if (!(pos.rx & from)) continue;  // the switch position does not take this input now
    const unsigned tx = pos.tx;
    if (!has_room(R, r, ps, c.slot, tx, t)) continue;  // woken when space frees
    want[ci] = tx;
    ++wanting;
    if (n > 1)  // (a single input holds every link it wants)
      for (unsigned m = tx; m; m &= m - 1) {
        const int d = std::countr_zero(m);
        const uint8_t rank = static_cast<uint8_t>(id[ci] - turn[d]);  // (ids < 256: wraps like the turn)
        if (win[d] < 0 || rank < best[d]) win[d] = static_cast<int8_t>(ci), best[d] = rank;
      }
  }
  for (int ci = 0; ci < n; ++ci) {
    const unsigned tx = want[ci];
    if (!tx) continue;
    bool all = true;
    if (wanting > 1)
      for (unsigned m = tx; m && all; m &= m - 1) all = win[std::countr_zero(m)] == ci;
    if (!all) {  // a link went to another input: again next cycle
      next = std::min(next, t + 1);
      continue;
    }
    const Cand& c = cand[ci];
    for (unsigned m = tx; m; m &= m - 1) turn[std::countr_zero(m)] = static_cast<uint8_t>(id[ci] + 1);
    // Forward to every tx direction in this cycle.
    const Wv wv = *head[ci];
    moved = true;
    forward(wk, r, ps, c.slot, wv, tx, c.dir < 0 ? ramp - 1 : 0, t);
    if (wv.control && switch_on(c.slot)) next = std::min(next, t + 1);  // a new position may take an input the old one held back: look again then
    // Pop the input; wake whoever feeds it (room again).
    bool more;
    if (c.dir >= 0) {
      more = pop_buffer(wk, r, c.slot, c.dir, t);
    } else {
      FabricStats& st = *wk.st;
      pop_queue(ps, 8 + c.q);
      more = pes[ps].qcount[static_cast<size_t>(8 + c.q)] > 0;
      ++st.ramp_injections;
      if (f.opt_.summary) summary_sent(wk, pes[ps].rect, wv.color, t);
      wake_pe(wk, ps, t + 1);
    }
    if (more) next = std::min(next, t + 1);
  }
  if (moved) wk.last_progress = std::max(wk.last_progress, t + 1);
  if (next != INT64_MAX) wake_router(wk, r, next);
}

// Input port lanes at router r: one wavelet per lane and cycle into the buffer of the port's
// side, when it has room; it arrives after a hop, like one from a neighbour.
void Fabric::Impl::inject(Worker& w, uint32_t r, int64_t t) {
  FabricStats& st = *w.st;
  auto it = std::lower_bound(in_lanes.begin(), in_lanes.end(), std::array<uint32_t, 3>{r, 0, 0});
  for (; it != in_lanes.end() && (*it)[0] == r; ++it) {
    PortLane& ln = ports[(*it)[1]].lanes[(*it)[2]];
    if (ln.next >= ln.in.size() || ln.last >= t) continue;
    if (!ln.ready.empty() && start + ln.ready[ln.next] > t) {  // not at the port yet
      wake_router(w, r, start + ln.ready[ln.next]);
      continue;
    }
    const size_t bi = static_cast<size_t>(ln.slot) * 4 + ln.dir;
    if (bcnt(bi) >= D) continue;  // woken when the router pops this buffer
    int k2 = bhd(bi) + bcnt(bi);
    if (k2 >= D) k2 -= D;
    bufs[bring(bi) + static_cast<size_t>(k2)] = {ln.in[ln.next++], ln.color, kData, t + hop};
    if (!bcnt(bi)++) occupied(ln.slot);
    if (bcnt(bi) > st.router_buffer_high_water) st.router_buffer_high_water = bcnt(bi);
    ln.last = t;
    ++st.port_in_wavelets;
    if (f.opt_.summary) summary_sent(w, w.sum->rects + static_cast<int32_t>(ln.port), ln.color, t);
    w.last_progress = std::max(w.last_progress, t + 1);
    wake_router(w, r, t + hop);
    if (ln.next < ln.in.size()) wake_router(w, r, t + 1);
  }
}

Fabric::Impl::PortLane* Fabric::Impl::out_lane(uint32_t r, int dir, int color) {
  for (auto& p : ports) {
    if (p.spec->input || static_cast<int>(p.spec->side) != dir || p.spec->color != color) continue;
    for (auto& ln : p.lanes)
      if (ln.router == r) return &ln;
  }
  return nullptr;
}

void Fabric::Impl::push_queue(uint32_t s, int q, const Wv& w) {
  Pe& P = pes[s];
  const size_t qi = static_cast<size_t>(q);
  const int k = P.qhead[qi] + P.qcount[qi];
  qentry(s, q, k >= QD ? k - QD : k) = w;
  ++P.qcount[qi];
  P.qhw[qi] = std::max(P.qhw[qi], P.qcount[qi]);
}

void Fabric::Impl::pop_queue(uint32_t s, int q) {
  Pe& P = pes[s];
  const size_t qi = static_cast<size_t>(q);
  P.qhead[qi] = static_cast<uint8_t>(P.qhead[qi] + 1 == QD ? 0 : P.qhead[qi] + 1);
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
  st.sram_pages = comm ? sram_pages_all : sram_pages.load();
}

}  // namespace tessera::wafer
