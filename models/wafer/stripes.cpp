// The fabric on several host threads (FabricOptions::threads; docs/wafer-model.md, "Threads"): the
// PE rows in stripes, one worker per stripe with its own calendar, synchronised so that every
// event that depends on another stripe happens in the order the sequential model gives it.
//
// The sequential model handles a cycle's events PEs first, then routers, each by ascending key
// (row-major). A PE's handler touches its own PE and router; a router's, its PE and its
// neighbours' receiving buffers (room, wavelets) and wakes; every wake of another router or PE is
// for a later cycle (a hop takes at least one). So across a boundary between stripe A (above) and
// B (below) the only order that matters is that of the two boundary rows' routers:
//   A's last row at cycle c  <  B's first row at c  <  A's last row at c + 1,
// and every wake one of them gives the other must be on the receiver's calendar before it handles
// that cycle. Everything else of the two stripes commutes. A worker
//   - publishes two bounds: no event of its own below lb_all is still to come, and none of its
//     first row's routers below lb_first; wakes (and "first wavelet in this buffer" marks) for
//     another stripe's routers go as messages, flushed before the bound that lets the receiver on;
//   - takes its next cycle c once no message for an earlier cycle can come (c <= the worker
//     above's lb_all + 1 and the one below's lb_first + 1: a message is for a cycle after the
//     sender's), handles its PEs, then before its first row's routers waits until the worker above
//     has finished c (lb_all > c) and takes its messages, publishes lb_first = c + 1 after that
//     row, and before its last row's routers waits until the worker below has handled its first
//     row up to c - 1 (lb_first >= c); the cycle ends after both waits (messages for c may come
//     until then).
// Stripes then run about a cycle apart in a pipeline: while B finishes cycle c, A runs c + 1 up to
// its last row. A worker with nothing to do publishes what its neighbours allow (their bound + 1);
// `live` counts workers with events plus messages in flight, and the run ends when it reaches 0.
//
// Stops: a worker stops at its first cycle past the watchdog; a possible deadlock (no progress
// for the window before c, as far as the published progress shows) is confirmed once every worker
// has handled every cycle before c, and then every worker stops before c. Counters, the summary
// and task logs are per worker and merged afterwards (sums, maxima, spans and bins, which do not
// depend on the order); per-PE records (traces at detail kernel and above) are tagged with the
// event (cycle, key) that made them and merged in that order, the sequential loop's. SRAM faults
// are applied by the worker of their PE before its first cycle at or after theirs (no other
// stripe reads that PE's memory), wavelet drops by the router's. A port reply (training's
// verdict) fires from the worker that counts its last wavelet, at the latest such event, and its
// streams reach each lane's worker as a message (`in_any`), due a SwarmX latency later.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "models/wafer/fabric_impl.hpp"

namespace tessera::wafer {

namespace {
constexpr int64_t kInf = INT64_MAX / 4;
int64_t add1(int64_t v) { return v >= kInf ? kInf : v + 1; }
// Spin briefly, then give the core away (more workers than cores, or a neighbour far behind).
struct Backoff {
  int n = 0;
  void pause() {
    if (++n > 2048) std::this_thread::yield();
  }
};
}  // namespace

int Fabric::threads_used() const { return impl_->comm ? 1 : static_cast<int>(impl_->workers.size()); }

Fabric::Impl::Worker& Fabric::Impl::worker_of_row(int64_t y) {
  const uint32_t r = static_cast<uint32_t>(y * W);
  for (auto& w : workers)
    if (w->owns(r)) return *w;
  return w0();
}

std::vector<int64_t> Fabric::Impl::cut_rows(int n) const {
  const size_t npe = static_cast<size_t>(W * H);
  // Work per row: route slots (a router's events) and program PEs (weighed as four).
  std::vector<int64_t> row(static_cast<size_t>(H), 0);
  for (size_t r = 0; r < npe; ++r) row[r / static_cast<size_t>(W)] += slot_begin[r + 1] - slot_begin[r];
  for (const Pe& p : pes) row[static_cast<size_t>(p.y)] += 4;
  int64_t total = 0, busy_rows = 0;
  for (int64_t v : row) total += v, busy_rows += v > 0;
  n = static_cast<int>(std::min<int64_t>(n, std::max<int64_t>(1, busy_rows)));
  std::vector<int64_t> cut{0};  // first row of each stripe
  if (n > 1) {
    int64_t acc = 0;
    for (int64_t y = 0; y < H && static_cast<int>(cut.size()) < n; ++y) {
      acc += row[static_cast<size_t>(y)];
      if (acc * n >= total * static_cast<int64_t>(cut.size()) && y + 1 < H && y + 1 > cut.back()) cut.push_back(y + 1);
    }
  }
  return cut;
}

int Fabric::Impl::plan_workers(int threads) {
  const size_t npe = static_cast<size_t>(W * H);
  int n = std::max(1, threads);
  // A port reply fires from whichever worker counts its last wavelet, and its streams reach the
  // lane's worker as a message: their first wavelet must be due after every worker's cycle then
  // (workers run at most about two cycles apart a boundary): SwarmX's latency, in practice.
  if (reply.fn && cfg.swarmx_latency * cfg.clock_hz < 4.0 * n + 2 * hop + 8) n = 1;
  // A partitioned fabric: a stripe a rank, as planned at load.
  const std::vector<int64_t> cut = comm ? rank_cut : cut_rows(n);
  n = static_cast<int>(cut.size());
  while (workers.size() > static_cast<size_t>(n)) workers.pop_back();
  while (workers.size() < static_cast<size_t>(n)) {
    auto w = std::make_unique<Worker>();
    w->id = static_cast<int>(workers.size());
    w->cal.init(static_cast<uint32_t>(pes.size()), static_cast<uint32_t>(npe));
    w->st = &w->own_st;
    w->sum = &w->own_sum;
    w->log = &w->own_log;
    w->deliveries = &w->own_deliveries;
    w->ops = &w->own_ops;
    w->tasks = &w->own_tasks;
    w->tagged = true;
    workers.push_back(std::move(w));
  }
  // Records: the fabric's lists on one thread; per worker, tagged, on more (merge_records).
  const bool tag = n > 1 || comm;
  w0().tagged = tag;
  w0().deliveries = tag ? &w0().own_deliveries : &f.deliveries_;
  w0().ops = tag ? &w0().own_ops : &f.op_records_;
  w0().tasks = tag ? &w0().own_tasks : &f.task_records_;
  for (int i = 0; i < n; ++i) {
    Worker& w = *workers[static_cast<size_t>(i)];
    const int64_t y0 = cut[static_cast<size_t>(i)], y1 = i + 1 < n ? cut[static_cast<size_t>(i) + 1] : H;
    w.r_lo = static_cast<uint32_t>(y0 * W);
    w.r_n = static_cast<uint32_t>((y1 - y0) * W);
    w.first_end = static_cast<uint32_t>((y0 + 1) * W);
    w.last_begin = static_cast<uint32_t>((y1 - 1) * W);
    w.prev = i > 0 ? workers[static_cast<size_t>(i) - 1].get() : nullptr;
    w.next = i + 1 < n ? workers[static_cast<size_t>(i) + 1].get() : nullptr;
  }
  return n;
}

int64_t Fabric::Impl::last_progress() const {
  int64_t lp = 0;
  for (const auto& w : workers) lp = std::max(lp, w->last_progress);
  return lp;
}

void Fabric::Impl::begin_run(StripedEnd& out, std::mutex& mu) {
  run_end = &out;
  run_end_mu = &mu;
  failure.reset();
  fail_cycle = INT64_MAX;
  fail_key = 0;
  live = 0;
  for (auto& w : workers)
    for (Inbox* in : {&w->in_prev, &w->in_next, &w->in_any}) in->done = false, in->n = 0, in->box.clear();
}

Fabric::Impl::StripedEnd Fabric::Impl::run_striped(int64_t c0) {
  StripedEnd out;
  std::mutex mu;
  begin_run(out, mu);
  for (auto& w : workers) {
    w->live = !w->cal.empty();
    live += w->live ? 1 : 0;
  }
  std::vector<std::thread> th;
  for (size_t i = 1; i < workers.size(); ++i) th.emplace_back([this, i, c0, &out, &mu] { worker_loop(*workers[i], c0, out, mu); });
  worker_loop(w0(), c0, out, mu);
  for (auto& t : th) t.join();
  if (std::getenv("TESSERA_STRIPE_STATS"))  // (for tuning the split: each worker's share and its waits)
    for (auto& w : workers)
      std::fprintf(stderr, "stripe worker %d: rows %u..%u, %llu events, waited %.3f s for the worker above, %.3f s for the one below\n", w->id,
                   w->r_lo / static_cast<uint32_t>(W), (w->r_lo + w->r_n) / static_cast<uint32_t>(W) - 1, static_cast<unsigned long long>(w->cal.consumed()),
                   w->t_wait_above, w->t_wait_below);
  if (failure) {
    merge_workers();  // (the counters so far, as a sequential run's)
    Failure fl{*failure};
    failure.reset();
    throw fl;
  }
  if (out.deadlock) out.stop.reset();  // (Fabric::run words it, as for a run that ends with work left)
  for (auto& w : workers) take_leftovers(*w, out);
  merge_workers();
  return out;
}

void Fabric::Impl::take_leftovers(Worker& w, StripedEnd& out) {
  const int64_t c = w.cal.peek();
  if (c != INT64_MAX) out.next_cycle = std::min(out.next_cycle, c);
  for (Inbox* in : {&w.in_prev, &w.in_next, &w.in_any}) {
    for (const Msg& m : in->box) out.next_cycle = std::min(out.next_cycle, m.cycle);
    in->box.clear();
    in->n = 0;
  }
}

namespace {
// Every worker's records of one kind in the sequential order: by the event (cycle, key) that made
// them -- the order the sequential loop handles events in -- and within an event as made.
template <class R, class Workers, class Get>
void merge_records(std::vector<R>& out, Workers& workers, Get get) {
  struct At {
    int64_t cycle;
    uint32_t key, w;
    size_t i;
  };
  std::vector<At> all;
  for (size_t k = 0; k < workers.size(); ++k) {
    auto [v, tags] = get(*workers[k]);
    for (size_t i = 0; i < v->size(); ++i) all.push_back({(*tags)[i].first, (*tags)[i].second, static_cast<uint32_t>(k), i});
  }
  std::sort(all.begin(), all.end(), [](const At& a, const At& b) {
    return a.cycle != b.cycle ? a.cycle < b.cycle : a.key != b.key ? a.key < b.key : a.w != b.w ? a.w < b.w : a.i < b.i;
  });
  out.clear();
  out.reserve(all.size());
  for (const At& a : all) out.push_back((*get(*workers[a.w]).first)[a.i]);
}
}  // namespace

void Fabric::Impl::merge_workers() {
  if (f.opt_.record) {
    merge_records(f.deliveries_, workers, [](Worker& w) { return std::make_pair(w.deliveries, &w.tag_d); });
    merge_records(f.op_records_, workers, [](Worker& w) { return std::make_pair(w.ops, &w.tag_o); });
    merge_records(f.task_records_, workers, [](Worker& w) { return std::make_pair(w.tasks, &w.tag_t); });
  }
  FabricStats& st = f.stats_;
  st.events = 0;
  for (auto& wp : workers) {
    Worker& w = *wp;
    st.events += w.events_remote >= 0 ? w.events_remote : static_cast<int64_t>(w.cal.consumed());
    if (w.id == 0) continue;
    const FabricStats& o = w.own_st;
    st.stall_cycles += o.stall_cycles;
    st.instructions += o.instructions;
    st.dsd_elements += o.dsd_elements;
    st.tasks_run += o.tasks_run;
    st.wavelet_hops += o.wavelet_hops;
    st.ramp_deliveries += o.ramp_deliveries;
    st.ramp_injections += o.ramp_injections;
    for (size_t c = 0; c < st.color_hops.size() && c < o.color_hops.size(); ++c) st.color_hops[c] += o.color_hops[c];
    st.router_buffer_high_water = std::max(st.router_buffer_high_water, o.router_buffer_high_water);
    st.port_in_wavelets += o.port_in_wavelets;
    st.port_out_wavelets += o.port_out_wavelets;
    st.bank_conflict_cycles += o.bank_conflict_cycles;
    st.dropped_wavelets += o.dropped_wavelets;
    for (auto& [k, v] : w.own_log) task_log[k] = std::move(v);
    w.own_log.clear();
    if (f.opt_.summary) {
      FabricSummary& sm = f.summary_;
      const FabricSummary& os = w.own_sum;
      sm.busy.merge(os.busy);
      sm.delivered.merge(os.delivered);
      sm.hops.merge(os.hops);
      for (size_t i = 0; i < sm.phases.size(); ++i)
        if (os.phases[i].span.count) sm.phases[i].span.add(os.phases[i].span.first, os.phases[i].span.last, os.phases[i].span.count);
      auto spans = [](std::vector<Span>& a, const std::vector<Span>& b) {
        for (size_t i = 0; i < a.size(); ++i)
          if (b[i].count) a[i].add(b[i].first, b[i].last, b[i].count);
      };
      spans(sm.sent, os.sent);
      spans(sm.received, os.received);
    }
  }
}

bool Fabric::Impl::apply_inbox(Worker& w) {
  bool any = false;
  for (Inbox* in : {&w.in_prev, &w.in_next, &w.in_any}) {
    if (in->n.load(std::memory_order_acquire) == 0) continue;
    {
      std::lock_guard<std::mutex> g(in->mu);
      w.scratch.swap(in->box);
      in->n.store(0, std::memory_order_relaxed);
    }
    if (w.scratch.empty()) continue;
    if (!w.live) {  // counted before the messages stop counting: `live` never passes 0 with work left
      w.live = true;
      live.fetch_add(1);
    }
    for (const Msg& m : w.scratch) {
      if (m.cycle <= w.done_through)
        throw std::logic_error("wafer fabric threads: a wake for cycle " + std::to_string(m.cycle) + " of router " + std::to_string(m.router) + " (slot " +
                               std::to_string(m.occ_slot) + ", from " + (in == &w.in_prev ? "above" : in == &w.in_next ? "below" : "a reply") + ") reached worker " +
                               std::to_string(w.id) + " (routers " + std::to_string(w.r_lo) + ".." + std::to_string(w.r_lo + w.r_n - 1) + ", W " + std::to_string(W) +
                               "), which finished cycle " + std::to_string(w.done_through));
      if (m.occ_slot != kNone && (m.occ_slot & kInstall)) {  // a port reply's stream for one of its lanes
        PortLane& ln = ports[reply_to].lanes[m.occ_slot & 0xffffu];
        if (m.cycle <= w.cur_cycle)  // (plan_workers keeps threads only when SwarmX's latency makes this impossible)
          throw std::logic_error("wafer fabric threads: a port reply's stream for cycle " + std::to_string(m.cycle) + " reached worker " + std::to_string(w.id) +
                                 " at cycle " + std::to_string(w.cur_cycle));
        ln.in = std::move(ln.staged);
        ln.staged.clear();
        ln.ready.assign(ln.in.size(), ln.staged_at);
        ln.next = 0;
        ln.last = -1;
        if (!ln.in.empty()) wake_router(w, m.router, m.cycle);
        continue;
      }
      if (m.occ_slot != kNone) occupied(m.occ_slot);
      wake_router(w, m.router, m.cycle);
    }
    live_sub(static_cast<int64_t>(w.scratch.size()));
    w.scratch.clear();
    any = true;
  }
  return any;
}

void Fabric::Impl::flush(std::vector<Msg>& out, Inbox& to) {
  if (out.empty()) return;
  std::lock_guard<std::mutex> g(to.mu);
  if (!to.done) live.fetch_add(static_cast<int64_t>(out.size()));
  to.box.insert(to.box.end(), out.begin(), out.end());
  to.n.store(static_cast<uint32_t>(to.box.size()), std::memory_order_release);
  out.clear();
}

void Fabric::Impl::send_any(Worker& to, const Msg& m) {
  {
    std::lock_guard<std::mutex> g(to.in_any.mu);
    if (!to.in_any.done) live.fetch_add(1);
    to.in_any.box.push_back(m);
    to.in_any.n.store(static_cast<uint32_t>(to.in_any.box.size()));
  }
  ring(to);
}

bool Fabric::Impl::reply_counted(Worker& w, int64_t t, uint32_t r, const PortLane& ln, int64_t& fire) {
  if (comm) {  // this rank's count; the others' arrive as Reply messages (ranks.cpp)
    const uint32_t key = r | kRouterBit;
    if (t > w.reply_t || (t == w.reply_t && key > w.reply_key)) w.reply_t = t, w.reply_key = key;
    const auto& lanes = ports[ln.port].lanes;
    reply_pending.push_back({ln.port, static_cast<uint32_t>(&ln - lanes.data()), ln.out.back().first, 0, ln.out.back().second});
    reply_count.fetch_add(1, std::memory_order_relaxed);
    return reply_now(fire);
  }
  if (workers.size() == 1) {
    fire = t;
    return reply_count.fetch_add(1, std::memory_order_relaxed) + 1 == reply.count;
  }
  const uint32_t key = r | kRouterBit;
  if (t > w.reply_t || (t == w.reply_t && key > w.reply_key)) w.reply_t = t, w.reply_key = key;
  if (reply_count.fetch_add(1, std::memory_order_acq_rel) + 1 != reply.count) return false;
  // The last one counted here; the latest event of them all is when the sequential loop fires.
  // (Every worker's reply_t was written before its count, which this count follows.)
  int64_t ft = -1;
  uint32_t fk = 0;
  for (const auto& x : workers)
    if (x->reply_t > ft || (x->reply_t == ft && x->reply_key > fk)) ft = x->reply_t, fk = x->reply_key;
  fire = ft;
  return true;
}

void Fabric::Impl::retire(Worker& w) {
  for (Inbox* in : {&w.in_prev, &w.in_next, &w.in_any}) {
    std::lock_guard<std::mutex> g(in->mu);
    if (!in->done && !in->box.empty()) live_sub(static_cast<int64_t>(in->box.size()));
    in->done = true;
  }
  if (w.live) {
    w.live = false;
    live_sub(1);
  }
  w.lb_first.store(kInf);
  w.lb_all.store(kInf);
  if (comm) send_bound(w);
  if (w.prev) ring(*w.prev);
  if (w.next) ring(*w.next);
}

void Fabric::Impl::note_stop(int64_t c, bool deadlock, std::string why) {
  StripedEnd& out = *run_end;
  std::lock_guard<std::mutex> g(*run_end_mu);
  // The earliest stop wins (at one cycle the deadlock, which the sequential loop checks first).
  if (c < out.stop_cycle || (c == out.stop_cycle && deadlock && !out.deadlock)) {
    out.stop_cycle = c;
    out.deadlock = deadlock;
    out.stop = std::move(why);
  }
  if (deadlock) {
    int64_t s = stop_at.load();
    while (c < s && !stop_at.compare_exchange_weak(s, c)) {
    }
    ring_all();
  }
}

void Fabric::Impl::note_fail(int64_t c, uint32_t key, std::string msg) {
  {
    std::lock_guard<std::mutex> g(*run_end_mu);
    const int64_t fc = fail_cycle.load();
    if (!failure || c < fc || (c == fc && key < fail_key)) {
      failure = std::move(msg);
      fail_key = key;
      fail_cycle.store(c);
    }
  }
  ring_all();
}

void Fabric::Impl::worker_loop(Worker& w, int64_t c0, StripedEnd& out, std::mutex& out_mu) {
  const FabricOptions& o = f.opt_;
  (void)out;  // (note_stop writes it)
  Worker* const P = w.prev;
  Worker* const N = w.next;
  int64_t pub = INT64_MIN;  // the bound published last (bounds only grow)
  auto publish = [&](int64_t lb) {
    w.lp_pub.store(w.last_progress, std::memory_order_relaxed);
    w.hops_pub.store(w.st->wavelet_hops, std::memory_order_relaxed);
    w.lb_first.store(lb);
    w.lb_all.store(lb);
    pub = lb;
    if (comm) send_bound(w);
    if (P) ring(*P);
    if (N) ring(*N);
  };
  // Blocked: spin, then yield the core for up to 2 ms (a neighbour a little behind), then sleep
  // on the bell until a neighbour rings it (a bound it may wait for moved, messages, the end of the
  // run) -- so a worker waiting for one that has lost its core gives its own away. `changed` says
  // whether what it waits for has moved meanwhile. `n` counts the calls of one wait (0 first).
  auto doze = [&](int64_t& n, std::chrono::steady_clock::time_point& since, const auto& changed) {
    if (comm) {  // ranks: what the neighbours publish arrives as messages -- poll, then yield the core
      pump(w);   // for up to 2 ms, then sleep 50 us between polls
      if (++n < 64) return;
      if (n == 64) since = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() - since < std::chrono::milliseconds(2)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
      return;
    }
    if (++n < 2048) return;
    if (n == 2048) since = std::chrono::steady_clock::now();
    if (n % 16 != 0 || std::chrono::steady_clock::now() - since < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
      return;
    }
    const uint32_t d = w.bell.load();
    w.sleeping.store(true);
    if (!changed()) w.bell.wait(d);
    w.sleeping.store(false);
  };
  auto stop_run = [&](int64_t c, bool deadlock, std::string why) {
    if (comm) {  // every other rank takes it too
      std::vector<uint8_t> m{kMsgStop};
      put(m, epoch), put(m, c), put(m, static_cast<uint8_t>(deadlock)), put_str(m, why);
      tell_workers(m);
    }
    note_stop(c, deadlock, std::move(why));
  };
  auto halted = [&] { return halt_all.load(std::memory_order_relaxed); };
  // A Failure (an SRAM write outside the data area, a route missing, ...) ends the run with the
  // message of the failure that comes first in the sequential order (cycle, then key): the other
  // workers go on up to that point -- one of them may fail before it -- and stop there.
  int64_t cur_c = -1;
  uint32_t cur_key = 0;
  auto fail = [&](std::string msg) {
    if (comm) {
      std::vector<uint8_t> m{kMsgFail};
      put(m, epoch), put(m, cur_c), put(m, cur_key), put_str(m, msg);
      tell_workers(m);
    }
    note_fail(cur_c, cur_key, std::move(msg));
  };
  auto past_failure = [&](int64_t c, uint32_t key) {  // the sequential run stops before (c, key)
    const int64_t fc = fail_cycle.load(std::memory_order_relaxed);
    if (c < fc) return false;
    if (c > fc) return true;
    std::lock_guard<std::mutex> g(out_mu);
    return key > fail_key;
  };
  // Worker 0 reports progress and asks whether to stop (Ctrl-C), as the sequential loop does every
  // 1024 cycles -- also while it waits, so a run whose top stripe has gone idle still stops.
  auto poll = [&](int64_t c) {
    if (o.progress) {
      int64_t hops = w.st->wavelet_hops;
      for (const auto& x : workers)
        if (x.get() != &w) hops += x->hops_pub.load(std::memory_order_relaxed);
      o.progress(std::max<int64_t>(0, std::min(c, kInf) - c0), hops);
    }
    if (o.stop && o.stop()) {
      stop_run(c, false, "interrupted at cycle " + std::to_string(std::max<int64_t>(0, std::min(c, kInf) - c0)));
      if (comm) {
        std::vector<uint8_t> m{kMsgHalt};
        put(m, epoch);
        tell_workers(m);
      }
      halt_all = true;
      ring_all();
      return false;
    }
    return true;
  };
  int64_t polled = 0;
  try {
    for (;;) {
      // Wait until no wake for the next cycle c or earlier can still come. The neighbours' bounds
      // are read before their messages are taken (they flush before they publish), so no message
      // taken later is for a cycle below the bound published here.
      int64_t c = kInf;
      int64_t spun = 0;
      std::chrono::steady_clock::time_point since;
      for (;;) {
        if (halted()) {
          retire(w);
          return;
        }
        const int64_t pa = P ? P->lb_all.load(std::memory_order_acquire) : kInf;
        const int64_t nf = N ? N->lb_first.load(std::memory_order_acquire) : kInf;
        apply_inbox(w);
        c = std::min(w.cal.peek(), kInf);
        w.idle_now = c >= kInf;
        const int64_t gate = comm ? reply_gate(w) : kInf;  // (ranks: a port reply's streams must find every worker before them)
        const int64_t lb = std::min({c, add1(pa), add1(nf), gate});
        if (lb > pub) publish(lb);
        if (c >= stop_at.load() || (c < kInf && c > fail_cycle.load())) {  // a deadlock decided at or before c; a failure before c
          retire(w);
          return;
        }
        if (c < kInf && c <= add1(pa) && c <= add1(nf) && c <= gate) break;
        if (c >= kInf && comm) {
          if (term_check(w, inbox_empty(w))) {  // nothing left on any rank
            retire(w);
            return;
          }
        } else if (c >= kInf) {
          if (w.live) {
            w.live = false;
            live_sub(1);
          }
          if (live.load() == 0) {  // nothing left anywhere
            retire(w);
            return;
          }
        }
        if (w.id == 0 && spun % 4096 == 4095 && !poll(pub)) {
          retire(w);
          return;
        }
        const int64_t sa = stop_at.load();
        doze(spun, since, [&] {
          return (P && P->lb_all.load() != pa) || (N && N->lb_first.load() != nf) || w.in_prev.n.load() || w.in_next.n.load() || w.in_any.n.load() || halted() ||
                 stop_at.load() != sa || (c >= kInf && live.load() == 0);
        });
      }
      auto progress_view = [&] {
        int64_t lp = w.last_progress;
        for (const auto& x : workers)
          if (x.get() != &w) lp = std::max(lp, x->lp_pub.load(std::memory_order_acquire));
        return lp;
      };
      if (c > progress_view() + o.deadlock_window) {
        Backoff wb;
        for (const auto& x : workers)
          while (x.get() != &w && x->lb_all.load(std::memory_order_acquire) < c && c < stop_at.load()) {
            if (halted()) {
              retire(w);
              return;
            }
            if (comm) pump(w);
            wb.pause();
          }
        if (c < stop_at.load() && c > progress_view() + o.deadlock_window) stop_run(c, true, {});
        if (c >= stop_at.load()) {
          retire(w);
          return;
        }
      }
      // The watchdog (after the deadlock check, as in the sequential loop).
      if (o.max_cycles > 0 && c - c0 > o.max_cycles) {
        stop_run(c, false, "watchdog: the run passed " + std::to_string(o.max_cycles) + " cycles (fabric option max_cycles)");
        retire(w);
        return;
      }
      if (w.id == 0 && ++polled % 1024 == 0 && !poll(c)) {
        retire(w);
        return;
      }
      // The cycle: PEs, then routers. The first row's routers once the worker above has finished
      // c (its wakes for them taken), the last row's once the one below has handled its first row
      // up to c - 1; the cycle ends after both (wakes for c may come until then).
      if (w.next_flip < flips.size()) apply_flips(w, c);
      w.cur_cycle = c;
      w.cal.top();
      bool above = P == nullptr, below = N == nullptr, first_done = false;
      auto wait_for = [&](std::atomic<int64_t>& bound, int64_t v, double& t) {
        if (bound.load(std::memory_order_acquire) < v) {
          int64_t spun = 0;
          std::chrono::steady_clock::time_point since;
          const auto t0 = std::chrono::steady_clock::now();
          while (bound.load(std::memory_order_acquire) < v) {
            if (halted()) return false;
            doze(spun, since, [&] { return bound.load() >= v || halted(); });
          }
          t += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        apply_inbox(w);
        return true;
      };
      auto finish_first = [&] {
        first_done = true;
        if (comm) {
          if (P) ship(w, true);
          touched_first.clear();
        } else if (P) {
          flush(w.out_prev, P->in_next);
        }
        w.lb_first.store(c + 1);
        if (comm) send_bound(w);
        if (P) ring(*P);
      };
      for (;;) {
        uint32_t key;
        const bool any = w.cal.peek_key(key);
        const uint32_t r = any && (key & kRouterBit) ? key & ~kRouterBit : kNone;
        if (!above && (!any || r != kNone)) {
          if (!wait_for(P->lb_all, c + 1, w.t_wait_above)) {
            retire(w);
            return;
          }
          above = true;
          continue;
        }
        // The first row is done at the second row's first router -- or, when the stripe is one row
        // (its first row is its last, which the worker below may still wake), at the end.
        if (!first_done && any && r != kNone && r >= w.first_end && w.first_end <= w.last_begin) finish_first();
        if (!below && (!any || (r != kNone && r >= w.last_begin))) {
          if (!wait_for(N->lb_first, c, w.t_wait_below)) {
            retire(w);
            return;
          }
          below = true;
          continue;
        }
        if (!any) {
          if (!first_done) finish_first();
          break;
        }
        if (past_failure(c, key)) {
          retire(w);
          return;
        }
        w.cal.next_key(key);
        cur_c = c, cur_key = key;
        handle(w, c, key);
        if (comm && r != kNone) {  // a boundary row's router: its facing buffers go to the neighbour
          if (r < w.first_end) touched_first.push_back(r);
          if (r >= w.last_begin) touched_last.push_back(r);
        }
      }
      if (comm) {
        if (N) ship(w, false);
        touched_last.clear();
        flush_reply(w);
      } else if (N) {
        flush(w.out_next, N->in_prev);
      }
      w.done_through = c;
      if (o.summary) bin_hops(w, c);
    }
  } catch (const Failure& e) {
    fail(e.msg);
  } catch (const std::exception& e) {
    fail(std::string("internal error in the wafer fabric model: ") + e.what());
  }
  retire(w);
}

}  // namespace tessera::wafer
