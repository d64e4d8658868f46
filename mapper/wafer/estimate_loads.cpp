// The wafer estimate's weight loads (estimate_loads.hpp): per kernel, the stream of its weight
// blocks along each line of PEs from MemoryX through SwarmX, when each PE has its block, and the
// load steps (ld, ldb, ldc, ldd: the sequencer's highest-priority tasks) at each PE, which delay
// the tasks that wait meanwhile (estimate.cpp: a hand-off, a gather, x tasks). docs/wafer-compiler.md
// "The estimate" derives the formulas from PE traces.
#include "mapper/wafer/estimate_loads.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

LoadModel::LoadModel(Compiled& c, const WaferConfig& cfg)
    : c_(c), cfg_(cfg),
      steps_(c.mode == MapMode::weight_streaming && c.sequenced && !c.training && !c.kernels.empty()),
      seq_ld_(c.sequenced ? 2 * dispatch_depth(c.kernels.size() + c.reloads.size()) : 0),  // the loads' search (training: the reloads too)
      mx_before_(c.kernels.size() + 1, 0.0) {
  for (size_t m = 0; m < c.kernels.size(); ++m)
    mx_before_[m + 1] = mx_before_[m] + static_cast<double>(c.kernels[m].lanes * c.kernels[m].lane_len) * 4;
  const size_t npe = c.kernels.empty() ? 0 : static_cast<size_t>(c.kernels.front().w * c.kernels.front().h);
  fin_.resize(steps_ ? npe : 0), prov_.resize(steps_ ? npe : 0);
}

// A task (a load's next step) that becomes ready at PE i at cycle t while the PE runs an earlier
// kernel's reduce task (at a chain end with its post-ops) runs when that task ends. busy_max_ holds
// per kernel, per PE the latest end of the spans of kernels 0..e: the spans that end by t, with
// every one before them, cannot move t, so the scan starts after them (a binary search), which
// keeps a model of hundreds of kernels (DenseNet-121: ~1,200) from scanning all of them at every PE.
int64_t LoadModel::after_busy(size_t i, int64_t t) const {
  size_t lo = 0, hi = busy_of_.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (busy_max_[mid][i] <= t) lo = mid + 1;
    else hi = mid;
  }
  for (size_t e = lo; e < busy_of_.size(); ++e)
    if (busy_of_[e][i].first <= t && t < busy_of_[e][i].second) t = busy_of_[e][i].second;
  return t;
}

// A load step that becomes ready at PE i at cycle t while the PE runs the x tasks of the last
// kernel recorded waits for the task in progress (a task is not preempted; PE traces: every `ldb`
// and `ldc` of MobileNetV2's features.16 load starts as an x task ends). The tasks run back to back
// from the kernel's first x value at the PE, per_x cycles each -- or, at a PE the x line holds back
// (estimate.cpp: it runs at most Q0 - 1 values ahead of the line's slowest PE), for Q0 - 1 tasks,
// then after the wait back to back again up to their end.
int64_t LoadModel::x_wait(size_t i, int64_t t) const {
  if (x_runs_.empty()) return t;
  const auto& [xs, split, resume, xe] = x_runs_[i];
  const int64_t px = per_x_;
  const int64_t from = t > xs && t < split ? xs : t > resume && t < xe ? resume : -1;
  if (from < 0 || px <= 0) return t;
  const int64_t into = (t - from) % px;
  return into == 0 ? t : std::min(t < split ? split : xe, t + px - into);
}

void LoadModel::record_busy(std::vector<std::pair<int64_t, int64_t>> busy) {
  // Indexed by PE of the one rectangle every kernel spans (weight streaming). A pipelined model's
  // kernels have rectangles of their own and different sizes: it records none (an earlier form
  // read past the previous kernel's vector there).
  if (!busy_of_.empty() && busy.size() != busy_of_.front().size())
    throw std::logic_error("wafer estimate: reduce spans of a kernel with " + std::to_string(busy.size()) + " PEs after one with " +
                           std::to_string(busy_of_.front().size()));
  std::vector<int64_t> bmax(busy.size(), 0);
  for (size_t i = 0; i < busy.size(); ++i) bmax[i] = std::max(busy[i].second, busy_max_.empty() ? INT64_MIN : busy_max_.back()[i]);
  busy_max_.push_back(std::move(bmax));
  busy_of_.push_back(std::move(busy));
}

// The steps ready in [from, t) run first, each growing t by its cost. A load's steps follow one
// another (each is activated as the op before it completes): one that runs late -- a step runs
// when the PE is free, at t - 1 here -- moves the load's later steps by as much, and one not ready
// before the task keeps the load's later steps after it too. (The steps before `from` are skipped
// by a binary search: a model of ~1,000 kernels has thousands per PE.)
int64_t LoadModel::steps_within(size_t i, int64_t from, int64_t t) {
  if (!steps_) return t;
  delayed_.clear();
  const auto& a = fin_[i];
  const auto& b = prov_[i];
  const LoadStep lo{from, 0, 0};
  auto ia = std::lower_bound(a.begin(), a.end(), lo), ib = std::lower_bound(b.begin(), b.end(), lo);
  for (;;) {
    const bool ta = ia != a.end() && ia->at < t, tb = ib != b.end() && ib->at < t;
    if (!ta && !tb) break;
    const LoadStep& e = (ta && (!tb || ia->at <= ib->at)) ? *ia++ : *ib++;
    auto d = std::find_if(delayed_.begin(), delayed_.end(), [&](const auto& x) { return x.first == e.load; });
    if (d == delayed_.end()) d = delayed_.insert(delayed_.end(), {e.load, 0});
    if (d->second == INT64_MAX || e.at + d->second >= t) {
      d->second = INT64_MAX;
      continue;
    }
    d->second = std::max(d->second, t - 1 - e.at);
    t += e.cost;
  }
  return t;
}

// A step into a PE's list, kept sorted by ready cycle (a load's steps come after the earlier
// loads' nearly always, so this is an append).
void LoadModel::add(std::vector<LoadStep>& st, int64_t at, int64_t cost) {
  const LoadStep e{at, cost, cur_load_};
  st.insert(std::upper_bound(st.begin(), st.end(), e), e);
}

void LoadModel::loads_after(size_t l, const std::vector<int64_t>& wready_l, std::vector<int64_t>& wready) {
  if (provisional_)
    for (auto& v : prov_) v.clear();
  provisional_ = false;
  const size_t nk = c_.kernels.size();
  if (l + 1 >= nk) return;
  std::pair<int64_t, int64_t> window;
  load(l + 1, wready_l, true, final_steps(), wready, window);
  // (A load whose buffer waits for kernel l + 1's x tasks starts after kernel l's hand-off: its
  // steps, and the later loads', cannot fall before it.)
  std::vector<int64_t> wp = wready, wm;
  for (size_t m = l + 2; steps_ && m < nk && m < l + 10 && buffer_before(c_, m) <= static_cast<int64_t>(l); ++m) {
    load(m, wp, false, &prov_, wm, window);
    provisional_ = true;
    std::swap(wp, wm);
  }
}

void LoadModel::load(size_t l, const std::vector<int64_t>& wprev, bool final, LoadSteps* steps, std::vector<int64_t>& wready,
                     std::pair<int64_t, int64_t>& window) {
  Compiled& c = c_;
  const WaferConfig& cfg = cfg_;
  DenseKernel& k = c.kernels[l];
  wready.assign(static_cast<size_t>(k.w * k.h), 0);
  cur_load_ = static_cast<int64_t>(l);
  window = {INT64_MAX, INT64_MIN};
  if (c.mode != MapMode::weight_streaming) return;
  const int64_t S = cfg.setup_cycles, hop = cfg.hop_latency, seq_ld = seq_ld_;
  const double hz = cfg.clock_hz, bw = std::min(cfg.memoryx_bandwidth, cfg.swarmx_bandwidth);
  const auto& compute_end_of = compute_end_of_;
  const auto& mx_before = mx_before_;
  // Weights in place (weight streaming): a line's stream passes every PE of the line and each
  // takes its block (three async ops: the blocks before it, its own, the blocks after). Loads
  // run one layer after another: a PE starts layer l's when layer l-1's block is in (and, from
  // layer 2, when layer l-2 has finished with the buffer). The stream moves at one wavelet per
  // cycle -- or at what MemoryX/SwarmX deliver, if slower -- and loses g = S + 2 - Q cycles at
  // every block boundary: the PE that switches from one op to the next takes nothing for S + 2
  // cycles (completion, task switch and issue, setup) and only its input queue (Q wavelets)
  // absorbs the stream meanwhile.
  const int64_t qw = c.weight_queue(l);
  const int64_t Q = qw < static_cast<int64_t>(cfg.input_depth.size()) ? cfg.input_depth[static_cast<size_t>(qw)] : 1;
  // (Sequenced: the next load step's search first. Run-time block lengths: the step after a
  // PE's own block sets the length of the blocks after it first -- sub, mul, two dsd_len.)
  const int64_t pause = S + 2 + seq_ld + (detail::runtime_block_lengths(c.training, k) ? 4 : 0);
  int64_t gap = std::max<int64_t>(0, pause - Q);
  // Blocks no larger than the queue: a PE's two switches (pre -> own, own -> post: W = p1 + p2
  // + blk cycles in which it takes only its own block) overlap those of the next PEs, whose pre
  // steps end while its queue still takes wavelets (the multicast moves on while every PE's
  // queue has room). Wavelet r, counted from this PE's own block, passes it at once for r < Q,
  // as its own block is taken for r < Q + blk, and once its post step runs after that; so the
  // pre step of PE j + m ends C(m) after PE j's, and a block boundary takes the most of
  // C(m) / m (and at least blk). Seen on vit_tiny's K projections (one value per PE, the
  // stream behind Q's x tasks): about 9 cycles a boundary where pause - Q charged 26.
  if (k.kb * k.nb <= Q) {
    // The two switches, from a PE trace (MobileNetV3-small's features.8 gate, 3-value blocks on
    // rows of 32 PEs, 12-cycle load searches): the step starts as the op before completes, its
    // search, then the next op's issue and its first element S - 1 later: p1 = search + S for
    // pre -> own; own -> post sets the run-time lengths first (+4) and starts a cycle earlier
    // (p2 = 30 there, p1 = 28; `pause`, the larger-block boundary's, is 34).
    const bool rt = detail::runtime_block_lengths(c.training, k);
    const int64_t p1 = S + seq_ld, p2 = S + seq_ld - 2 + (rt ? 4 : 0);
    const int64_t blk = k.kb * k.nb, W = p1 + p2 + blk;
    double tau = static_cast<double>(blk);
    for (int64_t m = 1; m * blk <= 2 * (Q + blk) + blk; ++m) {
      const int64_t r = m * blk - 1;
      const int64_t C = r < Q ? 0 : r < Q + blk ? p1 + m * blk - Q : W + m * blk - Q - blk;
      tau = std::max(tau, static_cast<double>(C) / static_cast<double>(m));
    }
    gap = std::min(gap, static_cast<int64_t>(std::ceil(tau)) - blk);
  }
  const double bytes = static_cast<double>(k.lanes * k.lane_len) * 4;
  const double burst = std::min(static_cast<double>(cfg.memoryx_burst), bytes);
  // This layer's first burst is out of SwarmX after the earlier layers' bytes and its own first
  // burst went through the slower of MemoryX and SwarmX, plus both latencies; its last one
  // after all of its bytes.
  const double lat = cfg.memoryx_latency + cfg.swarmx_latency;
  const int64_t first = static_cast<int64_t>(std::ceil((lat + (mx_before[l] + burst) / bw) * hz));
  const int64_t supply_end = static_cast<int64_t>(std::ceil((lat + (mx_before[l] + bytes) / bw) * hz));
  const int64_t lines = k.lanes, along = k.k_on_columns ? k.w : k.h;
  // The kernel whose buffer this one's weights take (its x tasks done first): l - 2, or
  // sequenced the previous kernel of this orientation.
  const int64_t pb = c.sequenced ? detail::buffer_before(c, l) : static_cast<int64_t>(l) - 2;
  int64_t worst = 0;
  // A PE's first op takes the stream from `lead` cycles after it starts this layer's load.
  const int64_t lead = S + (c.training || (along - 1) * k.kb * k.nb > 65535 ? 0 : 3) +  // run-time lengths: the pre length set first (mul, 2 dsd_len)
                       seq_ld + (c.sequenced && pb >= 0 ? 2 : 0) + (c.sequenced && l == 0 ? (c.training ? 7 : 6) : 0);  // sequenced: the search, the buffer's check, kernel 0's registers
  const int64_t D = std::max<int64_t>(1, cfg.buffer_depth);
  std::vector<int64_t> tk(static_cast<size_t>(along), 0);  // per PE of a line: its first op takes the stream
  for (int64_t ln = 0; ln < lines; ++ln) {
    for (int64_t p = 0; p < along; ++p) {
      const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
      const size_t i = static_cast<size_t>(py * k.w + px);
      int64_t go = 0;  // the PE has started this layer's load
      if (l >= 1) go = std::max(go, after_busy(i, wprev[i] + 1));
      if (pb >= 0) go = std::max(go, after_busy(i, compute_end_of[static_cast<size_t>(pb)][i] + 1));
      tk[static_cast<size_t>(p)] = go + lead;
    }
    // The stream runs ahead of a PE that is not taking it yet by what the line can hold for it
    // -- its input queue and the buffers of the routers up to it, C(p) = Q + (p + 1) D
    // wavelets -- and then waits for it; the PE drains that backlog at a wavelet a cycle. So a
    // PE of the line that is still loading the previous layer's block, or whose buffer is not
    // free yet, holds the line by take(p) - C(p), not by take(p) (MobileNetV3's classifier:
    // the line's last PE starts its load ~500 cycles after the first, and the stream had six
    // of its 32 blocks in by then). The estimate keeps the stream whole: block q enters no
    // sooner than max_p(take(p) - C(p)) + q blk -- the first blocks are not given their
    // earlier entry before the wait (that form, tried, put the zoo's wafer kernels at 1.25%
    // MAPE, 12 beyond 10%, against 1.15% and 6 for this one). The first wavelet enters when
    // it is out of SwarmX and the line's first PE takes it; the last one, lane_len - 1
    // wavelets and the boundary gaps later, or when SwarmX delivers it.
    const int64_t blk = k.kb * k.nb;
    int64_t held_m = INT64_MIN;
    for (int64_t p = 1; p < along; ++p) held_m = std::max(held_m, tk[static_cast<size_t>(p)] - (Q + (p + 1) * D));
    auto held = [&](int64_t q, int64_t T) { return held_m == INT64_MIN ? T : std::max(T, held_m + q * blk); };
    const int64_t t0 = held(0, std::max(first, tk[0]));
    // Block by block: at each boundary two PEs switch load ops (the one whose block ended to
    // the blocks after it, the next to its own); one that runs an earlier kernel's reduce task
    // then (its part of the chain; at a chain end also the bias, functions, attention,
    // LayerNorm, a pool -- blocking in its receives) switches when the task ends, and the
    // line's stream waits for it (an async op in flight goes on meanwhile: only the switches
    // need the PE).
    int64_t T = t0;  // when block q's first wavelet enters the line
    std::vector<int64_t> Tq(static_cast<size_t>(along), t0);
    for (int64_t q = 1; q < along; ++q) {
      int64_t m = T + blk;  // block q - 1 is in: the switch
      for (const int64_t p : {q - 1, q}) {
        const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
        m = after_busy(static_cast<size_t>(py * k.w + px), m + p * hop) - p * hop;
      }
      // Each of the two switches waits for the x task in progress at its PE (x_wait); the two
      // PEs switch at once, so the later of them holds the line -- not the sum (charged in turn,
      // the second PE's wait began where the first one's task ended, one hop out of phase: nearly a
      // whole task more at every boundary).
      int64_t mx = m;
      for (const int64_t p : {q - 1, q}) {
        const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
        mx = std::max(mx, x_wait(static_cast<size_t>(py * k.w + px), m + p * hop) - p * hop);
      }
      m = mx;
      T = held(q, m + gap);
      Tq[static_cast<size_t>(q)] = T;
    }
    const int64_t t_last = std::max(T + blk - 1, supply_end);
    // The last wavelet reaches PE p (p + 1) hops after it entered -- unless the stream is paced by
    // the line's block switches, not by SwarmX: then it is backed up in the line's router buffers,
    // and a PE before the far end takes the last wavelet once the PEs after it have drained what
    // the buffers between hold, D - 1 wavelets a hop at one a cycle, plus a switch (`gap`) each
    // time that crosses a block boundary (PE traces of MobileNetV3-small's column streams, 18-value
    // blocks at D = 4: the last wavelet reaches rows 3 cycles apart, ~30 more every 5-6 rows).
    // The buffers after PE p hold no more than the blocks of the PEs after it (blocks smaller
    // than D - 1: vit_tiny's one-value K blocks), and no PE has the last wavelet before SwarmX
    // has sent it and it has come the hops to that PE.
    const bool backed = T + blk - 1 >= supply_end && D > 1;
    auto last_at = [&](int64_t p) {
      const int64_t far = t_last + along * hop;
      if (!backed) return t_last + (p + 1) * hop;
      const int64_t w = (along - 1 - p) * std::min(D - 1, blk);
      return std::max(supply_end + (p + 1) * hop, std::min(t_last + (p + 1) * hop, far - w - (w > 0 ? (w - 1) / blk * gap : 0)));
    };
    window.first = std::min(window.first, t0);
    window.second = std::max(window.second, t_last + along * hop);
    if (steps) {  // this load's steps at each PE of the line (sequencer.cpp; each after the loads' search)
      const bool rt = detail::runtime_block_lengths(c.training, k);
      for (int64_t p = 0; p < along; ++p) {
        const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
        const size_t i = static_cast<size_t>(py * k.w + px);
        auto& st = (*steps)[i];
        // ld: activated by the previous load's ldd, when the buffer is free by then (else the x
        // loop's end unblocks it, charged there): the check, the pre-block op (or the own block's)
        if (l >= 1 && (pb < 0 || compute_end_of[static_cast<size_t>(pb)][i] < wprev[i]))
          add(st, wprev[i], seq_ld + (pb >= 0 ? 2 : 0) + (rt && p > 0 ? 5 : 2));
        const int64_t at = Tq[static_cast<size_t>(p)] + p * hop + 1;  // block p reaches PE p
        if (p > 0) add(st, at, seq_ld + 2);                                        // ldb: the own block's op
        add(st, at + blk, seq_ld + (p + 1 < along ? (rt ? 6 : 2) : 2));            // ldc: the blocks after it (or nothing)
        add(st, last_at(p) + 2, seq_ld + 6);                                         // ldd
      }
    }
    for (int64_t p = 0; p < along; ++p) {
      const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
      // Readable at PE p (hops, ramp), taken, the op done, ldd picked and run (unblock,
      // activate the next load, ret).
      const int64_t t = after_busy(static_cast<size_t>(py * k.w + px), last_at(p) + 1 + 1) + 3 + (c.sequenced ? seq_ld + 4 : 0);
      wready[static_cast<size_t>(py * k.w + px)] = t;
      worst = std::max(worst, t);
    }
  }
  if (final) k.est.weights_ready = worst, k.est.stream = k.lane_len + (along - 1) * gap;
}

}  // namespace tessera::wafer::detail
