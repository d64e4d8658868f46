// A partitioned fabric (FabricOptions::comm; docs/wafer-model.md, "Ranks"): the stripes of
// stripes.cpp on processes instead of threads. Worker k runs on rank k; every rank elaborates the
// same fabric and makes the same calls on it, but holds the SRAM of its own rows only (store()
// drops the rest) and handles only its stripe's events.
//
// What threads share in memory travels as messages (RankComm: ordered per pair of ranks):
//   - Bound: a worker's published bounds, progress and hops (to every worker's rank);
//   - Ship: the wakes for the worker above (after this worker's first row) or below (after its
//     last row), with the receiving buffers that face each other across that boundary: for each
//     router of the boundary row handled in the cycle, its own buffers fed from the other stripe
//     and the other stripe's router's buffers it feeds. Both sides change those buffers, but in
//     the protocol's strict alternation (A's last row at c, B's first row at c, A's last row at
//     c + 1), and each side waits for the other's bound, which follows its Ship -- so the copy a
//     rank receives is the one the sequential model has at that point;
//   - Stop, Fail, Halt: as note_stop / note_fail / halt_all do for threads;
//   - Probe, Ack, End: termination. Threads count live workers in one atomic; ranks cannot, so
//     rank 0 runs Mattern's double counting: waves of probes answered with (idle, wake messages
//     sent, received); two consecutive waves in which every worker is idle, the counts agree and
//     nothing changed mean nothing is in flight (an idle worker only becomes busy by receiving).
// After the loops every rank sends every other (one allgather) what the sequential run leaves in
// the fabric for the driver to read: how the run ended, counters, summary, task logs and records
// (merged as for threads), per-PE results (halted, halt cycle, busy cycles, registers, queue high
// water, task ends, active bins), link counters, output ports, what each fault did (a flip fires on
// its PE's rank, a drop on its router's). SRAM stays where it is: reads are
// collective (the owner broadcasts).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "models/wafer/fabric_impl.hpp"

namespace tessera::wafer {

namespace {
constexpr int64_t kInf = INT64_MAX / 4;

template <class A, class B>
void put_pairs(std::vector<uint8_t>& m, const std::vector<std::pair<A, B>>& v) {
  put(m, static_cast<uint64_t>(v.size()));
  for (const auto& [a, b] : v) put(m, a), put(m, b);
}
template <class A, class B>
std::vector<std::pair<A, B>> get_pairs(MsgReader& r) {
  std::vector<std::pair<A, B>> v(r.get<uint64_t>());
  for (auto& [a, b] : v) {
    a = r.get<A>();
    b = r.get<B>();
  }
  return v;
}

// The counters workers add up (merge_workers); the rest of FabricStats is the fabric's.
void put_counters(std::vector<uint8_t>& m, const FabricStats& s) {
  for (int64_t v : {s.stall_cycles, s.instructions, s.dsd_elements, s.tasks_run, s.wavelet_hops, s.ramp_deliveries, s.ramp_injections,
                    s.router_buffer_high_water, s.port_in_wavelets, s.port_out_wavelets, s.bank_conflict_cycles, s.dropped_wavelets})
    put(m, v);
  put_vec(m, s.color_hops);
}
void get_counters(MsgReader& r, FabricStats& s) {
  for (int64_t* v : {&s.stall_cycles, &s.instructions, &s.dsd_elements, &s.tasks_run, &s.wavelet_hops, &s.ramp_deliveries, &s.ramp_injections,
                     &s.router_buffer_high_water, &s.port_in_wavelets, &s.port_out_wavelets, &s.bank_conflict_cycles, &s.dropped_wavelets})
    *v = r.get<int64_t>();
  s.color_hops = r.vec<int64_t>();
}
void put_bins(std::vector<uint8_t>& m, const BinSeries& b) {
  put(m, b.width);
  put_vec(m, b.count);
  put_vec(m, b.weight);
}
void get_bins(MsgReader& r, BinSeries& b) {
  b.width = r.get<int64_t>();
  b.count = r.vec<int64_t>();
  b.weight = r.vec<int64_t>();
}
}  // namespace

int Fabric::ranks_used() const { return impl_->comm ? static_cast<int>(impl_->rank_cut.size()) : 1; }

void Fabric::Impl::plan_ranks() {
  rank_cut = cut_rows(comm->size());
  const size_t k = static_cast<size_t>(me);
  own_y0 = k < rank_cut.size() ? rank_cut[k] : H;
  own_y1 = k + 1 < rank_cut.size() ? rank_cut[k + 1] : H;
}

int Fabric::Impl::rank_of_row(int64_t y) const {
  return static_cast<int>(std::upper_bound(rank_cut.begin(), rank_cut.end(), y) - rank_cut.begin()) - 1;
}

void Fabric::Impl::send_msg(int to, std::vector<uint8_t> m) {
  ++sent_to[static_cast<size_t>(to)];
  comm->send(to, std::move(m));
}

void Fabric::Impl::tell_workers(const std::vector<uint8_t>& m) {
  for (int k = 0; k < static_cast<int>(rank_cut.size()); ++k)
    if (k != me) send_msg(k, m);
}

void Fabric::Impl::send_bound(Worker& w) {
  flush_reply(w);  // (before the bound that covers the events that counted them)
  std::vector<uint8_t> m{kMsgBound};
  put(m, epoch);
  put(m, w.lb_first.load()), put(m, w.lb_all.load()), put(m, w.lp_pub.load()), put(m, w.hops_pub.load());
  tell_workers(m);
}

void Fabric::Impl::flush_reply(Worker& w) {
  if (reply_pending.empty()) return;
  std::vector<uint8_t> m{kMsgReply};
  put(m, epoch);
  put(m, reply_count.load(std::memory_order_relaxed)), put(m, w.reply_t), put(m, w.reply_key);
  put_vec(m, reply_pending);
  reply_pending.clear();
  // To every rank: each fires the reply (the ranks without a stripe after the run, gather_parts).
  // A stripe's rank may have to wake a lane's router: for termination it is a message with work.
  for (int k = 0; k < comm->size(); ++k)
    if (k != me) {
      if (static_cast<size_t>(k) < rank_cut.size()) ++work_sent;
      send_msg(k, m);
    }
}

void Fabric::Impl::take_reply(int from, MsgReader& rd, Worker* w) {
  const auto k = static_cast<size_t>(from);
  reply_n[k] = rd.get<int64_t>();
  reply_t_of[k] = rd.get<int64_t>();
  reply_key_of[k] = rd.get<uint32_t>();
  for (const ReplyWv& v : rd.vec<ReplyWv>()) ports.at(v.port).lanes.at(v.lane).out.push_back({v.payload, v.cycle});
  if (int64_t fire = 0; reply.fn && reply_now(fire)) {
    try {
      fire_reply(w, fire + hop + ramp - 1);
    } catch (const Failure& e) {  // the host's error: in the loop it ends the run there (worker_loop)
      if (w && !gone) throw;
      note_fail(fire, kRouterBit, e.msg);  // (after the loop, or without a stripe: gathered as the run's failure)
    }
  }
}

bool Fabric::Impl::reply_now(int64_t& fire) {
  if (reply_fired || !reply_complete(fire)) return false;
  return reply_fired = true;
}

bool Fabric::Impl::reply_complete(int64_t& fire) const {
  int64_t n = 0, ft = -1;
  uint32_t fk = 0;
  for (size_t k = 0; k < reply_n.size(); ++k) {
    const bool mine = static_cast<int>(k) == me;
    const Worker* x = mine && k < workers.size() ? workers[k].get() : nullptr;
    if (mine && !x) continue;  // (a rank without a stripe counts nothing)
    n += mine ? reply_count.load(std::memory_order_relaxed) : reply_n[k];
    const int64_t t = mine ? x->reply_t : reply_t_of[k];
    const uint32_t key = mine ? x->reply_key : reply_key_of[k];
    if (t > ft || (t == ft && key > fk)) ft = t, fk = key;
  }
  fire = ft;
  return n == reply.count;
}

int64_t Fabric::Impl::reply_gate(const Worker& w) const {
  if (!reply.fn || reply_fired) return kInf;
  int64_t g = kInf;
  for (const auto& x : workers)
    if (x.get() != &w) g = std::min(g, x->lb_all.load(std::memory_order_acquire));
  return g >= kInf ? kInf : g + reply_lead + 1;
}

void Fabric::Impl::ship(Worker& w, bool up) {
  std::vector<Msg>& out = up ? w.out_prev : w.out_next;
  std::vector<uint32_t>& routers = up ? touched_first : touched_last;
  std::sort(routers.begin(), routers.end());
  routers.erase(std::unique(routers.begin(), routers.end()), routers.end());
  std::vector<uint8_t> m{kMsgShip};
  put(m, epoch);
  put_vec(m, out);
  // Buffers by direction they receive from: N = 0 (fed by the router above), S = 1.
  const int mine = up ? 0 : 1, theirs = up ? 1 : 0;
  const int64_t step = up ? -W : W;
  const size_t count_at = m.size();
  put(m, uint32_t{0});
  uint32_t rings = 0;
  auto put_buffers = [&](uint32_t r, int d) {
    for (uint32_t sl = slot_begin[r]; sl < slot_begin[r + 1]; ++sl) {
      if (!((slots[sl].rx >> d) & 1u)) continue;
      const uint32_t bi = sl * 4 + static_cast<uint32_t>(d);
      put(m, bi), put(m, bhd(bi)), put(m, bcnt(bi));
      for (int k = 0; k < bcnt(bi); ++k) {
        const Wv& v = bufs[bring(bi) + static_cast<size_t>((bhd(bi) + k) % D)];
        put(m, v.payload), put(m, v.color), put(m, v.control), put(m, v.ready);
      }
      ++rings;
    }
  };
  for (uint32_t r : routers) {
    put_buffers(r, mine);
    put_buffers(static_cast<uint32_t>(static_cast<int64_t>(r) + step), theirs);
  }
  std::memcpy(m.data() + count_at, &rings, sizeof rings);
  routers.clear();
  if (out.empty() && rings == 0) return;
  if (!out.empty()) ++work_sent;
  out.clear();
  send_msg(up ? w.prev->id : w.next->id, std::move(m));
}

void Fabric::Impl::pump(Worker& w) {
  int from = 0;
  std::vector<uint8_t> m;
  while (comm->poll(from, m)) {
    ++recv_from[static_cast<size_t>(from)];
    MsgReader rd{m};
    const auto type = rd.get<uint8_t>();
    if (rd.get<uint32_t>() != epoch) throw std::logic_error("wafer fabric ranks: a message of another run from rank " + std::to_string(from));
    switch (type) {
      case kMsgBound: {
        Worker& x = *workers.at(static_cast<size_t>(from));
        const auto lbf = rd.get<int64_t>(), lba = rd.get<int64_t>(), lp = rd.get<int64_t>(), hops = rd.get<int64_t>();
        x.lp_pub.store(lp);
        x.hops_pub.store(hops);
        x.lb_first.store(lbf);
        x.lb_all.store(lba);
        break;
      }
      case kMsgShip: {
        const std::vector<Msg> msgs = rd.vec<Msg>();
        if (!msgs.empty()) {
          ++work_recv;
          Inbox& in = from < me ? w.in_prev : w.in_next;
          std::lock_guard<std::mutex> g(in.mu);
          in.box.insert(in.box.end(), msgs.begin(), msgs.end());
          in.n.store(static_cast<uint32_t>(in.box.size()));
        }
        const auto rings = rd.get<uint32_t>();
        for (uint32_t i = 0; i < rings; ++i) {
          const auto bi = rd.get<uint32_t>();
          bhd(bi) = rd.get<uint8_t>();
          bcnt(bi) = rd.get<uint8_t>();
          for (int k = 0; k < bcnt(bi); ++k) {
            Wv& v = bufs[bring(bi) + static_cast<size_t>((bhd(bi) + k) % D)];
            v.payload = rd.get<uint32_t>();
            v.color = rd.get<uint8_t>();
            v.control = rd.get<uint8_t>();
            v.ready = rd.get<int64_t>();
          }
        }
        break;
      }
      case kMsgStop: {
        const auto c = rd.get<int64_t>();
        const bool deadlock = rd.get<uint8_t>() != 0;
        note_stop(c, deadlock, rd.str());
        break;
      }
      case kMsgFail: {
        const auto c = rd.get<int64_t>();
        const auto key = rd.get<uint32_t>();
        note_fail(c, key, rd.str());
        break;
      }
      case kMsgHalt:
        halt_all = true;
        break;
      case kMsgProbe: {
        std::vector<uint8_t> a{kMsgAck};
        put(a, epoch), put(a, rd.get<int64_t>());
        const bool idle = gone || (w.idle_now && inbox_empty(w));
        put(a, static_cast<int64_t>(idle)), put(a, work_sent), put(a, work_recv);
        send_msg(0, std::move(a));
        break;
      }
      case kMsgAck: {
        const auto k = rd.get<int64_t>();
        if (k != wave || !wave_open) break;
        for (int i = 0; i < 3; ++i) wave_now[static_cast<size_t>(from) * 3 + static_cast<size_t>(i)] = rd.get<int64_t>();
        ++wave_acks;
        break;
      }
      case kMsgEnd:
        ended = true;
        break;
      case kMsgReply:
        ++work_recv;
        take_reply(from, rd, &w);
        break;
      default:
        throw std::logic_error("wafer fabric ranks: unknown message type " + std::to_string(type));
    }
  }
}

bool Fabric::Impl::term_check(Worker&, bool idle) {
  if (ended) return true;
  if (me != 0) return false;
  const size_t n = rank_cut.size();
  if (n == 1) return ended = true;  // (one worker: its calendar is empty and nothing can come)
  if (wave_open && wave_acks == static_cast<int>(n) - 1) {
    wave_open = false;
    bool ok = true;
    int64_t sent = 0, recv = 0;
    for (size_t k = 0; k < n; ++k) ok = ok && wave_now[k * 3] != 0, sent += wave_now[k * 3 + 1], recv += wave_now[k * 3 + 2];
    ok = ok && sent == recv;
    if (ok && wave_prev_ok && wave_now == wave_prev) {
      std::vector<uint8_t> m{kMsgEnd};
      put(m, epoch);
      tell_workers(m);
      return ended = true;
    }
    wave_prev = wave_now;
    wave_prev_ok = ok;
  }
  if (!wave_open) {
    ++wave;
    wave_open = true;
    wave_acks = 0;
    wave_now.assign(n * 3, 0);
    wave_now[0] = idle;
    wave_now[1] = work_sent;
    wave_now[2] = work_recv;
    std::vector<uint8_t> m{kMsgProbe};
    put(m, epoch), put(m, wave);
    tell_workers(m);
  }
  return false;
}

// A worker that has left its loop (done, stopped or failed) stays in the termination protocol:
// its neighbours may still run (up to their own watchdog, say) and send it wakes, which it takes
// and counts but no longer handles -- as threads drop messages for a retired worker.
void Fabric::Impl::linger(Worker& w) {
  gone = true;
  const auto since = std::chrono::steady_clock::now();
  while (!ended) {
    pump(w);
    if (me == 0 && term_check(w, true)) break;
    if (std::chrono::steady_clock::now() - since < std::chrono::milliseconds(2)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Fabric::Impl::StripedEnd Fabric::Impl::run_parts(int64_t c0) {
  StripedEnd out;
  std::mutex mu;
  begin_run(out, mu);
  ++epoch;
  ended = false;
  gone = false;
  wave = 0;
  wave_open = wave_prev_ok = false;
  work_sent = work_recv = 0;
  sent_to.assign(static_cast<size_t>(comm->size()), 0);
  recv_from.assign(static_cast<size_t>(comm->size()), 0);
  touched_first.clear();
  touched_last.clear();
  for (auto& w : workers) w->idle_now = false, w->reply_t = -1, w->reply_key = 0;
  reply_pending.clear();
  reply_n.assign(static_cast<size_t>(comm->size()), 0);
  reply_t_of.assign(static_cast<size_t>(comm->size()), -1);
  reply_key_of.assign(static_cast<size_t>(comm->size()), 0);
  reply_fired = false;
  // reply_gate: the streams come at least a hop and the ramp after the last counted wavelet
  // (fire_reply), and -- as the driver answers through SwarmX -- its latency later (less two cycles
  // for rounding); a worker further ahead of another than that could be past them.
  reply_lead = hop + ramp - 2 + std::max<int64_t>(0, static_cast<int64_t>(std::floor(cfg.swarmx_latency * cfg.clock_hz)) - 2);
  if (static_cast<size_t>(me) < workers.size()) {
    Worker& w = *workers[static_cast<size_t>(me)];
    w.live = !w.cal.empty();
    worker_loop(w, c0, out, mu);
    linger(w);
    take_leftovers(w, out);
  }
  gather_parts(out);
  run_end = nullptr;
  run_end_mu = nullptr;
  if (failure) {
    Failure fl{*failure};
    failure.reset();
    throw fl;
  }
  if (out.deadlock) out.stop.reset();
  return out;
}

bool Fabric::Impl::work_remains_owned() const {
  for (uint32_t r = static_cast<uint32_t>(own_y0 * W); r < static_cast<uint32_t>(std::min(own_y1, H) * W); ++r)
    for (uint32_t sl = slot_begin[r]; sl < slot_begin[r + 1]; ++sl)
      for (int d = 0; d < 4; ++d)
        if (bcnt(sl * 4 + static_cast<size_t>(d))) return true;
  for (const auto& p : ports)
    for (const auto& ln : p.lanes)
      if (own_row(ln.router / W) && ln.next < ln.in.size()) return true;
  for (const auto& p : pes) {
    if (!own_row(p.y)) continue;
    if (f.opt_.require_halt && !p.halted) return true;
    if (p.main.instr >= 0 || !p.mts.empty()) return true;
    for (int q = 0; q < 16; ++q)
      if (p.qcount[static_cast<size_t>(q)]) return true;
  }
  return false;
}

void Fabric::Impl::gather_parts(StripedEnd& se) {
  const FabricOptions& o = f.opt_;
  const int nr = comm->size();
  // The PE slots of rows [y0, y1) (slots are row-major).
  auto slots_of = [&](int64_t y0, int64_t y1) {
    const auto lo = std::lower_bound(pes.begin(), pes.end(), y0, [](const Pe& p, int64_t y) { return p.y < y; });
    const auto hi = std::lower_bound(pes.begin(), pes.end(), y1, [](const Pe& p, int64_t y) { return p.y < y; });
    return std::make_pair(static_cast<uint32_t>(lo - pes.begin()), static_cast<uint32_t>(hi - pes.begin()));
  };
  std::vector<uint8_t> m;
  put(m, se.stop_cycle), put(m, static_cast<uint8_t>(se.deadlock)), put_str(m, se.stop.value_or(""));
  put(m, static_cast<uint8_t>(failure.has_value())), put_str(m, failure.value_or("")), put(m, fail_cycle.load()), put(m, fail_key);
  put(m, se.next_cycle);
  put_vec(m, sent_to);
  Worker* lw = static_cast<size_t>(me) < workers.size() ? workers[static_cast<size_t>(me)].get() : nullptr;
  if (lw) {
    put(m, lw->last_progress), put(m, static_cast<int64_t>(lw->cal.consumed()));
    put_counters(m, *lw->st);
    if (o.summary) {
      const FabricSummary& s = *lw->sum;
      put_bins(m, s.busy), put_bins(m, s.delivered), put_bins(m, s.hops);
      for (const auto& ph : s.phases) put(m, ph.span);
      put_vec(m, s.sent), put_vec(m, s.received);
    }
    put(m, static_cast<uint64_t>(lw->log->size()));
    for (const auto& [k, v] : *lw->log) put(m, k), put_vec(m, v);
    if (o.record) {
      put_vec(m, *lw->deliveries), put_pairs(m, lw->tag_d);
      put_vec(m, *lw->ops), put_pairs(m, lw->tag_o);
      put_vec(m, *lw->tasks), put_pairs(m, lw->tag_t);
    }
  }
  const auto [s0, s1] = slots_of(own_y0, own_y1);
  for (uint32_t s = s0; s < s1; ++s) {
    const Pe& P = pes[s];
    put(m, static_cast<uint8_t>(P.halted)), put(m, P.halt_cycle), put(m, P.busy), put(m, P.regs), put(m, P.qhw);
    if (o.task_ends)
      for (size_t k = 0; k < 64; ++k) put(m, task_end[static_cast<size_t>(s) * 64 + k]);
    if (o.record) put_pairs(m, f.active_runs_[s].runs);
  }
  const size_t r0 = static_cast<size_t>(std::min(own_y0, H) * W), r1 = static_cast<size_t>(std::min(own_y1, H) * W);
  m.insert(m.end(), reinterpret_cast<const uint8_t*>(link.data() + r0 * kDirs), reinterpret_cast<const uint8_t*>(link.data() + r1 * kDirs));
  for (const auto& p : ports)
    for (const auto& ln : p.lanes)
      if (own_row(ln.router / W)) put(m, static_cast<uint64_t>(ln.next)), put_pairs(m, ln.out);
  put(m, sram_pages.load()), put(m, static_cast<uint8_t>(work_remains_owned()));
  put_vec(m, f.fired_);  // (a flip fires on its PE's rank, a drop on its router's)

  const std::vector<std::vector<uint8_t>> all = comm->allgather(m);

  // What every rank sent here this run is in now: take it (late bounds and the like), so the next
  // run starts with nothing in flight.
  for (int j = 0; j < nr; ++j) {
    MsgReader rd{all[static_cast<size_t>(j)]};
    rd.get<int64_t>(), rd.get<uint8_t>(), rd.str(), rd.get<uint8_t>(), rd.str(), rd.get<int64_t>(), rd.get<uint32_t>(), rd.get<int64_t>();
    const std::vector<int64_t> sent = rd.vec<int64_t>();
    int from = 0;
    std::vector<uint8_t> late;
    while (recv_from[static_cast<size_t>(j)] < sent[static_cast<size_t>(me)])
      if (comm->poll(from, late)) {
        ++recv_from[static_cast<size_t>(from)];
        MsgReader lr{late};
        // A port reply's wavelets (all of them, on a rank without a stripe): its driver answers too.
        if (lr.get<uint8_t>() == kMsgReply && lr.get<uint32_t>() == epoch) take_reply(from, lr, nullptr);
      }
  }
  // ... and no rank starts the next run (its first messages would be taken for late ones here)
  // before every rank has drained.
  comm->barrier();

  // How the run ended: the earliest stop and failure over all ranks (as note_stop, note_fail).
  se = StripedEnd{};
  failure.reset();
  int64_t fc = INT64_MAX;
  uint32_t fk = 0;
  sram_pages_all = 0;
  work_all = false;
  std::vector<Fabric::FaultFired> fired(f.fired_.size());
  for (int j = 0; j < nr; ++j) {
    MsgReader rd{all[static_cast<size_t>(j)]};
    const auto sc = rd.get<int64_t>();
    const bool dl = rd.get<uint8_t>() != 0;
    std::string why = rd.str();
    if (sc != INT64_MAX && (sc < se.stop_cycle || (sc == se.stop_cycle && dl && !se.deadlock))) se.stop_cycle = sc, se.deadlock = dl, se.stop = std::move(why);
    const bool failed = rd.get<uint8_t>() != 0;
    std::string msg = rd.str();
    const auto c = rd.get<int64_t>();
    const auto key = rd.get<uint32_t>();
    if (failed && (!failure || c < fc || (c == fc && key < fk))) failure = std::move(msg), fc = c, fk = key;
    se.next_cycle = std::min(se.next_cycle, rd.get<int64_t>());
    rd.vec<int64_t>();
    Worker* x = static_cast<size_t>(j) < workers.size() ? workers[static_cast<size_t>(j)].get() : nullptr;
    const bool mine = j == me;
    if (x) {
      const auto lp = rd.get<int64_t>();
      const auto events = rd.get<int64_t>();
      FabricStats unused;
      get_counters(rd, mine ? unused : *x->st);  // (worker 0's are the fabric's own: zero on a rank that never ran it)
      FabricSummary sum;
      if (o.summary) {
        get_bins(rd, sum.busy), get_bins(rd, sum.delivered), get_bins(rd, sum.hops);
        sum.rects = x->sum->rects;
        sum.phases = x->sum->phases;
        for (auto& ph : sum.phases) ph.span = rd.get<Span>();
        sum.sent = rd.vec<Span>();
        sum.received = rd.vec<Span>();
      }
      std::map<uint64_t, std::vector<int64_t>> log;
      for (auto n = rd.get<uint64_t>(); n > 0; --n) {
        const auto k = rd.get<uint64_t>();
        log[k] = rd.vec<int64_t>();
      }
      if (!mine) {
        x->last_progress = lp;
        x->events_remote = events;
        if (o.summary) *x->sum = std::move(sum);
        *x->log = std::move(log);
      }
      if (o.record) {
        auto d = rd.vec<DeliveryRecord>();
        auto td = get_pairs<int64_t, uint32_t>(rd);
        auto op = rd.vec<OpRecord>();
        auto to = get_pairs<int64_t, uint32_t>(rd);
        auto t = rd.vec<TaskRecord>();
        auto tt = get_pairs<int64_t, uint32_t>(rd);
        if (!mine) {
          *x->deliveries = std::move(d), x->tag_d = std::move(td);
          *x->ops = std::move(op), x->tag_o = std::move(to);
          *x->tasks = std::move(t), x->tag_t = std::move(tt);
        }
      }
    }
    const int64_t y0 = static_cast<size_t>(j) < rank_cut.size() ? rank_cut[static_cast<size_t>(j)] : H;
    const int64_t y1 = static_cast<size_t>(j) + 1 < rank_cut.size() ? rank_cut[static_cast<size_t>(j) + 1] : H;
    const auto [a, b] = slots_of(y0, y1);
    for (uint32_t sl = a; sl < b; ++sl) {
      Pe& P = pes[sl];
      const bool halted = rd.get<uint8_t>() != 0;
      const auto hc = rd.get<int64_t>(), busy = rd.get<int64_t>();
      const auto regs = rd.get<decltype(P.regs)>();
      const auto qhw = rd.get<decltype(P.qhw)>();
      std::array<int64_t, 64> te{};
      if (o.task_ends)
        for (auto& v : te) v = rd.get<int64_t>();
      std::vector<std::pair<int64_t, int64_t>> runs;
      if (o.record) runs = get_pairs<int64_t, int64_t>(rd);
      if (mine) continue;
      P.halted = halted, P.halt_cycle = hc, P.busy = busy, P.regs = regs, P.qhw = qhw;
      if (o.task_ends) std::copy(te.begin(), te.end(), task_end.begin() + static_cast<std::ptrdiff_t>(sl) * 64);
      if (o.record) f.active_runs_[sl].runs = std::move(runs);
    }
    const size_t lr0 = static_cast<size_t>(y0 * W) * kDirs, lr1 = static_cast<size_t>(y1 * W) * kDirs;
    if (!mine && lr1 > lr0) std::memcpy(link.data() + lr0, all[static_cast<size_t>(j)].data() + rd.at, (lr1 - lr0) * sizeof(int64_t));
    rd.at += (lr1 - lr0) * sizeof(int64_t);
    for (auto& p : ports)
      for (auto& ln : p.lanes)
        if (const int64_t y = ln.router / W; y >= y0 && y < y1) {
          const auto next = rd.get<uint64_t>();
          auto out = get_pairs<uint32_t, int64_t>(rd);
          if (!mine) ln.next = static_cast<size_t>(next), ln.out = std::move(out);
        }
    sram_pages_all += rd.get<int64_t>();
    if (rd.get<uint8_t>() != 0) work_all = true;
    const auto ff = rd.vec<Fabric::FaultFired>();
    for (size_t i = 0; i < fired.size() && i < ff.size(); ++i) {
      if (!ff[i].count) continue;
      Fabric::FaultFired& sum = fired[i];
      sum.first_cycle = sum.count ? std::min(sum.first_cycle, ff[i].first_cycle) : ff[i].first_cycle;
      sum.last_cycle = std::max(sum.last_cycle, ff[i].last_cycle);
      sum.count += ff[i].count;
    }
    if (rd.at != all[static_cast<size_t>(j)].size()) throw std::logic_error("wafer fabric ranks: rank " + std::to_string(j) + "'s results do not parse (" + std::to_string(rd.at) + " of " + std::to_string(all[static_cast<size_t>(j)].size()) + " bytes)");
  }
  if (failure) fail_cycle = fc, fail_key = fk;
  f.fired_ = std::move(fired);
  merge_workers();
}

void Fabric::Impl::report_parts(std::vector<StuckPe>& pes_out, std::vector<StuckRouter>& routers_out) const {
  std::vector<StuckPe> sp;
  std::vector<StuckRouter> sr;
  report(sp, sr, own_y0, own_y1, false);
  std::vector<uint8_t> m;
  put(m, static_cast<uint64_t>(sp.size()));
  for (const auto& p : sp) put(m, p.x), put(m, p.y), put_str(m, p.what), put(m, p.elements_done);
  put(m, static_cast<uint64_t>(sr.size()));
  for (const auto& r : sr) put(m, r.x), put(m, r.y), put(m, r.color), put_str(m, r.what);
  const std::vector<std::vector<uint8_t>> all = comm->allgather(m);
  std::vector<StuckPe> unused;
  report(unused, routers_out, 0, 0, true);  // the input ports (their lanes are every rank's after the run)
  for (const auto& bytes : all) {
    MsgReader rd{bytes};
    for (auto n = rd.get<uint64_t>(); n > 0; --n) {
      StuckPe p;
      p.x = rd.get<int32_t>(), p.y = rd.get<int32_t>(), p.what = rd.str(), p.elements_done = rd.get<int64_t>();
      pes_out.push_back(std::move(p));
    }
    for (auto n = rd.get<uint64_t>(); n > 0; --n) {
      StuckRouter r;
      r.x = rd.get<int32_t>(), r.y = rd.get<int32_t>(), r.color = rd.get<uint8_t>(), r.what = rd.str();
      routers_out.push_back(std::move(r));
    }
  }
}

}  // namespace tessera::wafer
