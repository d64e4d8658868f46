// The wafer compiler's analytical estimate (compile.hpp `estimate`): cycles per kernel from the
// instruction costs of isa/wafer (dsd.setup_cycles + ceil(len / width), 1 cycle per scalar or
// control instruction), the router's hop latency and one wavelet per cycle per link, and the
// MemoryX / SwarmX bandwidths and latencies -- evaluated per line of PEs, never by simulating.
// The formulas follow the generated programs (layer_program.cpp); docs/wafer-compiler.md
// derives them.
#include <algorithm>
#include <cmath>

#include "mapper/wafer/compile.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

namespace {
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

void estimate(Compiled& c, const WaferConfig& cfg) {
  const int64_t S = cfg.setup_cycles, hop = cfg.hop_latency;
  const int64_t wf = std::max<int64_t>(1, cfg.simd_fmacs), w32 = std::max<int64_t>(1, cfg.simd_fp32);
  const bool ws = c.mode == MapMode::weight_streaming;
  const double hz = cfg.clock_hz;
  // A wavelet handed from a PE's output queue to a neighbour's input queue: readable 2 + hop cycles
  // after the element was processed (output queue, router, link, ramp).
  const int64_t pass = 2 + hop;
  // Weight streaming: MemoryX serves the layers' streams one after another; bursts are pipelined
  // (memoryx.latency once per burst in flight, the store busy for bytes / bandwidth).
  const double bw = std::min(cfg.memoryx_bandwidth, cfg.swarmx_bandwidth);
  double mx_bytes_before = 0;

  std::vector<std::vector<int64_t>> next_of;  // per kernel, per chain end: its output's first x readable at the reader's source PE
  std::vector<std::vector<int64_t>> x0_of;    // per kernel, per K block: its first x readable at its source PE
  std::vector<int64_t> last_chain_end;  // the last kernel's chain ends: when each holds its output
  std::vector<std::vector<int64_t>> compute_end_of, wready_of;  // per kernel: per PE (row-major in its rect)
  std::vector<std::vector<std::pair<int64_t, int64_t>>> busy_of;  // per kernel: per PE, its reduce task's span (at a chain end, with the post-ops)
  // A task (a load's next step) that becomes ready at PE i at cycle t while the PE runs an earlier
  // kernel's reduce task (at a chain end with its post-ops) runs when that task ends.
  // Per kernel, per PE: the latest end of the spans of kernels 0..e. The spans that end by t, with
  // every one before them, cannot move t: the scan starts after them (a binary search), which keeps
  // a model of hundreds of kernels (DenseNet-121: ~900) from scanning all of them at every PE.
  std::vector<std::vector<int64_t>> busy_max;
  auto after_busy = [&](size_t i, int64_t t) {
    size_t lo = 0, hi = busy_of.size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (busy_max[mid][i] <= t) lo = mid + 1;
      else hi = mid;
    }
    for (size_t e = lo; e < busy_of.size(); ++e)
      if (busy_of[e][i].first <= t && t < busy_of[e][i].second) t = busy_of[e][i].second;
    return t;
  };
  // The sequencer (sequencer.cpp): its shared tasks find a kernel's body by a binary search of
  // two ops a step over n kernels (the x tasks' end: over the kernels of one orientation; the
  // hand-off: over the kernels with a reader).
  const size_t nk = c.kernels.size();
  const int64_t seq_d = c.sequenced ? 2 * detail::dispatch_depth(nk) : 0, seq_out = c.sequenced ? 2 * detail::dispatch_depth(nk - 1) : 0;
  const int64_t seq_ld = c.sequenced ? 2 * detail::dispatch_depth(nk + c.reloads.size()) : 0;  // the loads' search (training: the reloads too)
  size_t orientation_count[2] = {0, 0};  // kernels with K along the columns, along the rows
  for (const auto& k : c.kernels) ++orientation_count[k.k_on_columns ? 0 : 1];
  // Sequenced weight streaming: the load steps (ld, ldb, ldc, ldd: the highest-priority tasks) that
  // become ready at a chain-end PE while its chain-end task runs, or before its hand-off sends,
  // run first and delay the hand-off -- steps of later kernels' loads, so the estimate runs again
  // with the previous pass's step times (per PE: ready cycle, cost) until the total is stable.
  using Steps = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
  Steps steps_prev, steps_now;
  // A task that waits from `from` until `t` runs after every step (sorted by ready cycle) that
  // becomes ready in [from, t): t grows by each one's cost. (The steps before `from` are skipped
  // by a binary search: a model of ~1,000 kernels has thousands per PE.)
  auto steps_within = [](const std::vector<std::pair<int64_t, int64_t>>& st, int64_t from, int64_t t) {
    for (auto it = std::lower_bound(st.begin(), st.end(), std::pair<int64_t, int64_t>{from, INT64_MIN}); it != st.end() && it->first < t; ++it) t += it->second;
    return t;
  };
  // Per kernel: its weight stream's window ([first wavelet in, last one at the far end]) and its
  // wavelets per lane, from the previous pass. Every PE of a lane copies the stream through its ramp
  // (its own block, and the others into `junk`), an async op that shares the PE's datapath with the
  // reduce chain of the kernel running meanwhile.
  std::vector<std::pair<int64_t, int64_t>> stream_prev, stream_now;
  std::vector<std::vector<int64_t>> spare;                          // arrays of the pass before, for reuse
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spare_spans;
  auto take = [&](size_t n, int64_t v) {
    std::vector<int64_t> a;
    if (!spare.empty()) a = std::move(spare.back()), spare.pop_back();
    a.assign(n, v);
    return a;
  };
  const bool step_passes = ws && c.sequenced && !c.training && !c.kernels.empty();
  int64_t prev_total = -1;
  for (int iter = 0; iter < (step_passes ? 6 : 1); ++iter) {
  // (The per-kernel, per-PE arrays of the pass before are reused, not freed and allocated again:
  // a model of ~1,000 kernels on 128 x 128 PEs fills ~1 GB of them a pass.)
  for (auto* v : {&compute_end_of, &wready_of, &busy_max})
    for (auto& a : *v) spare.push_back(std::move(a));
  for (auto& a : busy_of) spare_spans.push_back(std::move(a));
  next_of.clear(), x0_of.clear(), last_chain_end.clear(), compute_end_of.clear(), wready_of.clear(), busy_of.clear(), busy_max.clear();
  mx_bytes_before = 0;
  if (step_passes) {
    steps_now.resize(static_cast<size_t>(c.kernels.front().w * c.kernels.front().h));
    for (auto& v : steps_now) v.clear();
  }
  stream_now.assign(c.kernels.size(), {INT64_MAX, INT64_MIN});
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    DenseKernel& k = c.kernels[l];
    // The chains and lines span the whole rectangle (weight streaming pads blocks with zeros to
    // cover it; pipelined rectangles are exactly kblocks x nblocks).
    const int64_t Lk = k.k_on_columns ? k.w : k.h;        // chain length (positions along K)
    const int64_t Ln = k.k_on_columns ? k.h : k.w;        // PEs along an x line (N axis)
    const bool wrap_ld = ws && !c.sequenced && l + 2 < nk;  // onx<l> unblocks ld<l+2> (the sequencer's unblock is in seq_end)
    // Per x value: mul, dsd_off, mul, dsd_off, bnz, fmacs (setup + nb / width), add, sub, bnz, ret;
    // the first of a sample's kb values takes fmuls (fp32 width) and a jmp instead of fmacs; every
    // kb values the sample counter wraps (mov, add, sub, bnz); the last value activates the reduce.
    // fp16: fmachs (fp32 SIMD class) for both.
    // Training: each x value is also saved (mul, two adds, dsd_off, a one-element fmovs).
    const int64_t save_x = c.training ? 4 + S + 1 : 0;
    // Sequenced: the y offset's add per x value; after the last, the x task's end (unblock the load,
    // count, block, the next kernel's registers: 6 ops after the search, jmp, sub, bz, unblock) and
    // the reduce's search and mov of r8 before its chain step.
    const int64_t seq = c.sequenced ? 1 : 0;
    const int64_t seq_end = c.sequenced ? 3 + 2 * detail::dispatch_depth(orientation_count[k.k_on_columns ? 0 : 1]) + (l + 1 < nk ? (c.training ? 7 : 6) : 0) + 4 + seq_d + 1 : 0;
    const int64_t per_x = 9 + S + (c.half() ? cdiv(k.nb, w32) : cdiv(k.nb, wf) * op_interval(Op::fmacs, cfg)) + save_x + seq;
    const int64_t first_x = 10 + S + cdiv(k.nb, w32) + save_x + seq;
    // A sequenced Conv reading a chain end's holder gets one sample's im2col rows per send (the
    // gather gs, or a follower's gsf); the chain ends sending them run this kernel's x tasks too,
    // which outrank the gather, so each later sample's rows leave after the sender's x tasks of the
    // sample before: its search, the send's issue and the first hop, a bubble in every x line
    // (a PE trace of a 4 x 4 fp16 run: 35-38 cycles per sample beyond the x tasks' cadence).
    const bool per_sample = c.sequenced && ws && k.spatial() && k.src >= 0 && k.samples > 1;
    const int64_t gather_gap = per_sample ? (k.samples - 1) * (8 + 2 * detail::dispatch_depth(detail::followers(c).size()) + S + 2 + hop) : 0;
    const int64_t compute = k.B * ((k.kb - 1) * per_x + first_x) + 4 * k.B + 2 + (wrap_ld ? 1 : 0) + seq_end + gather_gap;
    k.est.compute = compute;
    const int64_t nf = k.nflops ? k.nflops : k.N;  // without pass-through columns and padding
    k.est.flops = 2.0 * static_cast<double>(k.B * k.kflops * nf) + static_cast<double>(k.B * nf) * (k.act_is(Unary::Kind::relu) ? 2 : 1);
    k.est.weight_bytes = static_cast<double>(k.kflops * nf) * 4;

    // When the first x of each K block is readable at its source PE.
    std::vector<int64_t> x0(static_cast<size_t>(Lk), 0);
    if (k.src < 0 && !(c.sequenced && detail::follower(c, l))) std::fill(x0.begin(), x0.end(), S + 2 + (k.spatial() ? 5 : 0));  // `send` at cycle 0 (a conv's: its offset first), its own ramp
    else if (c.sequenced && detail::follower(c, l)) {
      // A follower: sent right after kernel l - 1's x values (their count per line later) by the same chain ends.
      const DenseKernel& pk = c.kernels[l - 1];
      x0 = x0_of[l - 1];
      const int64_t gsf = 8 + 2 * detail::dispatch_depth(detail::followers(c).size());  // (gsf's search)
      for (auto& v : x0) v += pk.oh * pk.ow * pk.kb * pk.samples + gsf;
      // The gather (gsf, below the loads and the hand-off in priority) runs at the chain ends
      // holding the input (handoff_from's); one that runs an earlier kernel's reduce task then --
      // its part of a chain of the kernel before this one, or a chain end with its post-ops (a
      // narrow rectangle: GoogLeNet's pooled branches on 1 x 1 and 2 x 2 PEs) -- sends them after
      // it, after the load steps that became ready meanwhile and, at that kernel's chain end, its
      // hand-off task. (A PE trace of a 1 x 1 run: the reduce task of a pooled Conv, 297 cycles,
      // then three load steps, the hand-off and the gather; 62 cycles from its end to the send.)
      const size_t hf = k.src >= 0 && !k.reads_input2 ? detail::handoff_from(c, l) : nk;  // (the graph input's followers: the host's sends)
      for (int64_t p = 0; hf < l && k.spatial() && p < Lk; ++p) {
        const DenseKernel& hk = c.kernels[hf];
        const int64_t px = hk.k_on_columns ? hk.w - 1 : p, py = hk.k_on_columns ? p : hk.h - 1;
        const size_t ie = static_cast<size_t>(py * k.w + px);
        // (Its x tasks outrank the gather: it runs after the PE's last x task of the kernel before.)
        const int64_t at = std::max(x0[static_cast<size_t>(p)] - gsf, compute_end_of[l - 1][ie] + 2), free_at = after_busy(ie, at);
        if (free_at == at && at == x0[static_cast<size_t>(p)] - gsf) continue;
        int64_t t = free_at;
        const bool pend = pk.k_on_columns ? px == pk.w - 1 : py == pk.h - 1;  // the kernel before's chain end: its hand-off first
        if (pend) t = std::max(t, next_of[l - 1][static_cast<size_t>(pk.k_on_columns ? py : px)]);
        if (!steps_prev.empty()) t = steps_within(steps_prev[ie], at, t);
        x0[static_cast<size_t>(p)] = t + gsf;
      }
    } else x0 = next_of[c.sequenced ? l - 1 : static_cast<size_t>(k.src)];  // (sequenced: handed off by kernel l - 1's chain ends)
    x0_of.push_back(x0);

    // Weights in place (weight streaming): a line's stream passes every PE of the line and each
    // takes its block (three async ops: the blocks before it, its own, the blocks after). Loads
    // run one layer after another: a PE starts layer l's when layer l-1's block is in (and, from
    // layer 2, when layer l-2 has finished with the buffer). The stream moves at one wavelet per
    // cycle -- or at what MemoryX/SwarmX deliver, if slower -- and loses g = S + 2 - Q cycles at
    // every block boundary: the PE that switches from one op to the next takes nothing for S + 2
    // cycles (completion, task switch and issue, setup) and only its input queue (Q wavelets)
    // absorbs the stream meanwhile.
    std::vector<int64_t> wready = take(static_cast<size_t>(k.w * k.h), 0);
    if (ws) {
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
      const int64_t first = static_cast<int64_t>(std::ceil((lat + (mx_bytes_before + burst) / bw) * hz));
      const int64_t supply_end = static_cast<int64_t>(std::ceil((lat + (mx_bytes_before + bytes) / bw) * hz));
      mx_bytes_before += bytes;
      const int64_t lines = k.lanes, along = k.k_on_columns ? k.w : k.h;
      // The kernel whose buffer this one's weights take (its x tasks done first): l - 2, or
      // sequenced the previous kernel of this orientation.
      const int64_t pb = c.sequenced ? detail::buffer_before(c, l) : static_cast<int64_t>(l) - 2;
      int64_t worst = 0;
      // A PE's first op takes the stream from `lead` cycles after it starts this layer's load.
      const int64_t lead = S + (c.training || (along - 1) * k.kb * k.nb > 65535 ? 0 : 3) +  // run-time lengths: the pre length set first (mul, 2 dsd_len)
                           seq_ld + (c.sequenced && pb >= 0 ? 2 : 0) + (c.sequenced && l == 0 ? (c.training ? 7 : 6) : 0);  // sequenced: the search, the buffer's check, kernel 0's registers
      const int64_t D = std::max<int64_t>(1, cfg.buffer_depth);
      std::vector<int64_t> take(static_cast<size_t>(along), 0);  // per PE of a line: its first op takes the stream
      for (int64_t ln = 0; ln < lines; ++ln) {
        for (int64_t p = 0; p < along; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          const size_t i = static_cast<size_t>(py * k.w + px);
          int64_t go = 0;  // the PE has started this layer's load
          if (l >= 1) go = std::max(go, after_busy(i, wready_of[l - 1][i] + 1));
          if (pb >= 0) go = std::max(go, after_busy(i, compute_end_of[static_cast<size_t>(pb)][i] + 1));
          take[static_cast<size_t>(p)] = go + lead;
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
        for (int64_t p = 1; p < along; ++p) held_m = std::max(held_m, take[static_cast<size_t>(p)] - (Q + (p + 1) * D));
        auto held = [&](int64_t q, int64_t T) { return held_m == INT64_MIN ? T : std::max(T, held_m + q * blk); };
        const int64_t t0 = held(0, std::max(first, take[0]));
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
          T = held(q, m + gap);
          Tq[static_cast<size_t>(q)] = T;
        }
        const int64_t t_last = std::max(T + blk - 1, supply_end);
        stream_now[l].first = std::min(stream_now[l].first, t0);
        stream_now[l].second = std::max(stream_now[l].second, t_last + along * hop);
        if (step_passes) {  // this load's steps at each PE of the line (sequencer.cpp; each after the loads' search)
          const bool rt = detail::runtime_block_lengths(c.training, k);
          for (int64_t p = 0; p < along; ++p) {
            const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
            const size_t i = static_cast<size_t>(py * k.w + px);
            auto& st = steps_now[i];
            // ld: activated by the previous load's ldd, when the buffer is free by then (else the x
            // loop's end unblocks it, charged there): the check, the pre-block op (or the own block's)
            if (l >= 1 && (pb < 0 || compute_end_of[static_cast<size_t>(pb)][i] < wready_of[l - 1][i]))
              st.emplace_back(wready_of[l - 1][i], seq_ld + (pb >= 0 ? 2 : 0) + (rt && p > 0 ? 5 : 2));
            const int64_t at = Tq[static_cast<size_t>(p)] + p * hop + 1;  // block p reaches PE p
            if (p > 0) st.emplace_back(at, seq_ld + 2);                                        // ldb: the own block's op
            st.emplace_back(at + blk, seq_ld + (p + 1 < along ? (rt ? 6 : 2) : 2));            // ldc: the blocks after it (or nothing)
            st.emplace_back(t_last + (p + 1) * hop + 2, seq_ld + 6);                            // ldd
          }
        }
        for (int64_t p = 0; p < along; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          // Readable at PE p (hops, ramp), taken, the op done, ldd picked and run (unblock,
          // activate the next load, ret).
          const int64_t t = after_busy(static_cast<size_t>(py * k.w + px), t_last + (p + 1) * hop + 1 + 1) + 3 + (c.sequenced ? seq_ld + 4 : 0);
          wready[static_cast<size_t>(py * k.w + px)] = t;
          worst = std::max(worst, t);
        }
      }
      k.est.weights_ready = worst;
      k.est.stream = k.lane_len + (along - 1) * gap;
    }

    // The kernel whose load this one's x-loop end unblocks (weight streaming): sequenced, the next
    // one taking this one's buffer; with own tasks, l + 2.
    int64_t ld_next = -1;
    if (ws && !c.training) {
      if (!c.sequenced) ld_next = l + 2 < nk ? static_cast<int64_t>(l) + 2 : -1;
      else
        for (size_t m = l + 1; m < nk && ld_next < 0; ++m)
          if (detail::buffer_before(c, m) == static_cast<int64_t>(l)) ld_next = static_cast<int64_t>(m);
    }
    // Per PE: x lines run along the N axis from the source end; compute ends B kb per-x costs
    // after the first x (or the weights) are there.
    std::vector<int64_t> cend = take(static_cast<size_t>(k.w * k.h), 0);
    int64_t first_start = INT64_MAX;
    for (int64_t pk = 0; pk < Lk; ++pk)
      for (int64_t pn = 0; pn < Ln; ++pn) {
        const bool from_start = k.x_flow == Dir::S || k.x_flow == Dir::E;
        const int64_t d = from_start ? pn : Ln - 1 - pn;
        const int64_t px = k.k_on_columns ? pk : pn, py = k.k_on_columns ? pn : pk;
        const size_t i = static_cast<size_t>(py * k.w + px);
        int64_t st = std::max(x0[static_cast<size_t>(pk)] + d * hop, wready[i]);
        // Weight streaming: a PE takes the kernels' x values in kernel order (one input queue), so
        // a reader after the first of the same data waits for the PE's previous kernel.
        if (ws && l > 0) st = std::max(st, compute_end_of[l - 1][i] + 2);
        first_start = std::min(first_start, st);
        cend[i] = st + compute;
        // The end of the x loop unblocks the load of the kernel that takes this one's weight buffer
        // next (pending once the load before it is in): a load task goes first (ids 0-3), so that
        // load step runs before the reduce -- the sequencer's search and buffer check, then its
        // pre-block op (layer_tasks.cpp ld_body: a one-op async move and ret, or with run-time
        // block lengths past the line's first PE the length set first: mul, two dsd_len).
        if (ld_next >= 0) {
          const DenseKernel& km = c.kernels[static_cast<size_t>(ld_next)];
          const int64_t pos = km.k_on_columns ? px : py;
          cend[i] += (c.sequenced ? seq_ld + 2 : 0) + (detail::runtime_block_lengths(c.training, km) && pos > 0 ? 5 : 2);
        }
        // (Own tasks: an earlier kernel's reduce task that holds the PE within this one's x tasks
        // -- at its chain end, a reader of the same data as the kernel before it, whose chain ends
        // are these PEs; or at any PE of its chain -- delays them: its span is added. The x tasks
        // outrank that reduce, so values already queued when it starts would go first: not
        // modelled.)
        if (ws && !c.sequenced)
          for (const auto& b : busy_of)
            if (b[i].second > st && b[i].first < cend[i]) cend[i] += b[i].second - std::max(b[i].first, st);
      }
    k.est.start = first_start == INT64_MAX ? 0 : first_start;

    // Reduce chains along K, one per N block: element e leaves position i at
    // max_j(T(j) + S + (i - j) * pass) + e; the last position's fadds is done B nb elements later.
    // Then bias and activation over B nb elements at the fp32 width, then the hand-off.
    const int64_t n_el = k.B * k.nb;
    int64_t end = 0, compute_end = 0, transfer = 0;
    std::vector<int64_t> next(static_cast<size_t>(Ln), 0), t_of(static_cast<size_t>(Ln), 0), tmax_of(static_cast<size_t>(Ln), 0), chain_of(static_cast<size_t>(Ln), 0);
    auto dsd = [&](int64_t len, Op o2 = Op::fadds, int64_t stride = 1) { return dsd_cycles(o2, len, stride, cfg); };
    // Each position's reduce task holds its PE from the end of its x tasks until its part of the
    // chain is out (blocking in its receives): position i's last element leaves at
    // max_{j <= i}(T(j) + S - j pass) + i pass + B nb. The chain end's runs on through the
    // post-ops (its span is set below). A load step (and a weight stream's switch) that needs the
    // PE meanwhile waits for it, and with own tasks so do a later kernel's x tasks there. (The span
    // starts 2 cycles after cend, which counts the load step the x loop's end unblocks: a margin
    // that keeps that step, which runs before the reduce, out of the span.) Seen on ResNet's fc: the
    // stream of its 16-value blocks along each row waited at every PE of the GlobalAveragePool
    // kernel's chains for its reduce (row 0, ~40 cycles a PE) and at its chain ends for the pool
    // (~380 cycles), where the estimate had counted the chain ends' post-ops only.
    std::vector<std::pair<int64_t, int64_t>> busy;
    if (!spare_spans.empty()) busy = std::move(spare_spans.back()), spare_spans.pop_back();
    busy.assign(static_cast<size_t>(k.w * k.h), {0, 0});
    for (int64_t pn = 0; pn < Ln; ++pn) {
      int64_t lead = INT64_MIN;  // max_j(T(j) + S - j * pass)
      int64_t tmax = 0;
      for (int64_t pk = 0; pk < Lk; ++pk) {
        const int64_t px = k.k_on_columns ? pk : pn, py = k.k_on_columns ? pn : pk;
        const int64_t T = cend[static_cast<size_t>(py * k.w + px)];
        tmax = std::max(tmax, T);
        lead = std::max(lead, T + S - pk * pass);
        if (pk + 1 < Lk) busy[static_cast<size_t>(py * k.w + px)] = {T + 2, lead + pk * pass + n_el};
      }
      compute_end = std::max(compute_end, tmax);
      int64_t t = Lk == 1 ? tmax : lead + (Lk - 1) * pass + n_el;  // the chain end holds the sum
      // The next kernel's weight stream passing the chain's PEs meanwhile (sequenced: its load runs
      // during this kernel's reduce): each of its wavelets takes a datapath cycle from the chain.
      if (step_passes && Lk > 1 && l + 1 < nk && l + 1 < stream_prev.size() && stream_prev[l + 1].second > stream_prev[l + 1].first) {
        const auto [s0, s1] = stream_prev[l + 1];
        const int64_t overlap = std::min(t, s1) - std::max(lead, s0);
        if (overlap > 0) {
          const double density = std::min(1.0, static_cast<double>(c.kernels[l + 1].lane_len) / static_cast<double>(s1 - s0));
          t += std::min<int64_t>(n_el, std::llround(static_cast<double>(overlap) * density));
        }
      }
      if (ws && !c.sequenced) {  // (own tasks: the chain end runs an earlier kernel's chain-end task first when it still holds the PE)
        const int64_t px = k.k_on_columns ? Lk - 1 : pn, py = k.k_on_columns ? pn : Lk - 1;
        const size_t ie = static_cast<size_t>(py * k.w + px);
        const int64_t free_at = after_busy(ie, cend[ie]);
        if (free_at > cend[ie]) t = std::max(t, free_at + (Lk == 1 ? 0 : S + n_el));
      }
      chain_of[static_cast<size_t>(pn)] = t;
      const bool act = k.act_blocks < 0 || pn < k.act_blocks;  // pass-through blocks (pipelined residuals) take no activation
      int64_t act_cycles = 0;  // the elementwise functions (unary_ops), each op at its own width
      if (act)
        for (const Unary& u : k.acts) act_cycles += unary_cycles(u, n_el, cfg);
      for (const Unary& u : k.acts_after) act_cycles += unary_cycles(u, n_el, cfg);
      if (k.gn_size) act_cycles += detail::gn_cycles(k, cfg);  // GroupNorm, before the functions
      t += (S + cdiv(n_el, w32)) * (1 + (k.residual >= 0 && !k.res_move ? 1 : 0) + (k.res_mul && c.half() ? 1 : 0)) + act_cycles;  // bias, residual (a gate's widening), activation
      if (k.res_move) t += S + n_el;  // a moved residual is added as it arrives: a wavelet per cycle
      if (k.gate_of >= 0) t += S + cdiv(k.gate_rows * k.nb, w32);  // squeeze-excitation: the feature map times the gate
      if (k.softmax) {  // softmax_program over the N outputs of the B samples (strided columns)
        const int64_t N = k.N, B = k.B;
        t += dsd(B, Op::fmovs, k.nb) + (N - 1) * dsd(B, Op::fmaxs, k.nb) + N * dsd(B, Op::fsubs, std::max(k.nb, N)) + kExpOps * dsd(B * N, Op::fmuls, 1) +
             dsd(B, Op::fmovs, N) + (N - 1) * dsd(B, Op::fadds, N);
        if (k.log_softmax)  // ln s: the first guess (4 ops and a reciprocal over [2, N + 1]), five Newton steps (4 ops and an exp), the shift
          t += (4 + recip_op_count(2.0, static_cast<double>(N) + 1.0) + 5 * (4 + kExpOps) + 1) * dsd(B, Op::fmuls, 1) + N * dsd(B, Op::fsubs, k.nb);
        else
          t += kRecipOps * dsd(B, Op::fmuls, 1) + N * dsd(B, Op::fmuls, std::max(k.nb, N));
      }
      t_of[static_cast<size_t>(pn)] = t;
      tmax_of[static_cast<size_t>(pn)] = tmax;
    }
    // Attention, LayerNorm and what follows it, row by row along the chain ends (chain_end_program.cpp).
    detail::row_post_cycles(k, cfg, t_of);
    for (int64_t pn = 0; pn < Ln; ++pn) {
      int64_t t = t_of[static_cast<size_t>(pn)];
      const int64_t tmax = tmax_of[static_cast<size_t>(pn)];
      if (k.pkh) t += (k.pkh * k.pkw + (k.pavg ? 1 : 0)) * (S + cdiv(k.rows_out() * k.nb, w32));  // the pool: a copy, a max (sum) per other window; the mean's product
      if (k.pool_padded()) t += S + cdiv(k.B * k.nb, w32);  // y into the pool's border first
      t_of[static_cast<size_t>(pn)] = t;  // (the chain end's task runs on through the pool)
      end = std::max(end, t);
      transfer = std::max(transfer, t - tmax);
      // The next kernel's x: the chain end's yout (issue, setup, out queue) -- into the next
      // rectangle (pipelined: router, link, ramp) or to its own ramp (weight streaming, async).
      // fp16: fs2h converts y first (activate the task, then S + B nb / conversion width; the
      // attention's output: B fb).
      // A padded Conv reading it: y copied into its bordered holder (fmovs; fp16: the fs2h writes there).
      const std::vector<size_t>& rd = c.readers[l + 1];
      const bool held = detail::output_used(c, l);
      const int64_t conv = (!held ? 0 : c.half() ? S + cdiv(k.rows_out() * k.feat_nb(), std::max<int64_t>(1, cfg.simd_convert)) : k.xp_h ? S + cdiv(k.rows_out() * k.nb, w32) : 0) *
                           k.xp_rh * k.xp_rw;  // (a nearest Resize's copies)
      // A conv's im2col gather: the out task activates the gather task (activate, ret, the switch),
      // which sets the first sample's offset (mul, dsd_off, add, sub, bz) before its send.
      // (Sequenced: the hand-off is kernel l + 1's, whichever kernel it reads.)
      const size_t hn = c.sequenced ? l + 1 : rd.empty() ? nk : rd[0];
      const int64_t gather = hn < nk && c.kernels[hn].spatial() ? 3 + 5 : 0;
      next[static_cast<size_t>(pn)] = (ws ? t + S + 2 : t + S + pass) + conv + gather + (gather ? 2 : 1) * seq_out;  // (sequenced: the hand-off's search, the gather's)
      if (!steps_prev.empty()) {  // load steps ready from the chain-end task's start until the send run first
        const int64_t px = k.k_on_columns ? k.w - 1 : pn, py = k.k_on_columns ? pn : k.h - 1;
        int64_t& nx = next[static_cast<size_t>(pn)];
        nx = steps_within(steps_prev[static_cast<size_t>(py * k.w + px)], chain_of[static_cast<size_t>(pn)], nx);
      }
      if (l + 1 == c.kernels.size()) last_chain_end.push_back(t);
    }
    k.est.compute_end = compute_end;
    k.est.end = end;
    k.est.transfer = transfer;
    next_of.push_back(std::move(next));
    for (int64_t pn = 0; pn < Ln; ++pn) {
      const int64_t px = k.k_on_columns ? k.w - 1 : pn, py = k.k_on_columns ? pn : k.h - 1;
      const size_t ie = static_cast<size_t>(py * k.w + px);
      busy[ie] = {cend[ie] + 2, t_of[static_cast<size_t>(pn)]};  // (a chain of one PE too: the load step the x loop's end unblocks runs first)
    }
    std::vector<int64_t> bmax = take(busy.size(), 0);
    for (size_t i = 0; i < busy.size(); ++i) bmax[i] = std::max(busy[i].second, busy_max.empty() ? INT64_MIN : busy_max.back()[i]);
    busy_max.push_back(std::move(bmax));
    busy_of.push_back(std::move(busy));
    compute_end_of.push_back(std::move(cend));
    wready_of.push_back(std::move(wready));
  }
  if (!step_passes) break;
  const int64_t total = c.kernels.back().est.end;
  if (total == prev_total) break;
  prev_total = total;
  std::swap(steps_prev, steps_now);  // (the old steps' storage is cleared and refilled next pass)
  for (auto& v : steps_prev) std::sort(v.begin(), v.end());
  stream_prev = std::move(stream_now);
  }
  // The run ends when the last chain end halts.
  c.predicted_cycles = c.kernels.empty() ? 0 : c.kernels.back().est.end + 1;
  c.predicted_s = static_cast<double>(c.predicted_cycles) / hz;
  if (c.training) detail::estimate_training(c, cfg, last_chain_end);
}

}  // namespace tessera::wafer
