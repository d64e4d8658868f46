// The wafer compiler's analytical estimate (compile.hpp `estimate`): cycles per kernel from the
// instruction costs of isa/wafer (dsd.setup_cycles + ceil(len / width), 1 cycle per scalar or
// control instruction), the router's hop latency and one wavelet per cycle per link, and the
// MemoryX / SwarmX bandwidths and latencies -- evaluated per line of PEs, never by simulating.
// The formulas follow the generated programs (layer_program.cpp); docs/wafer-compiler.md
// derives them.
#include <algorithm>
#include <array>
#include <cmath>

#include "mapper/wafer/compile.hpp"
#include "mapper/wafer/estimate_loads.hpp"
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

  std::vector<std::vector<int64_t>> next_of;  // per kernel, per chain end: its output's first x readable at the reader's source PE
  // The sequencer (sequencer.cpp): its shared tasks find a kernel's body by a binary search of
  // two ops a step over n kernels (the x tasks' end: over the kernels of one orientation; the
  // hand-off: over the kernels with a reader).
  const size_t nk = c.kernels.size();
  const int64_t seq_d = c.sequenced ? 2 * detail::dispatch_depth(nk) : 0, seq_out = c.sequenced ? 2 * detail::dispatch_depth(nk - 1) : 0;
  const int64_t seq_ld = c.sequenced ? 2 * detail::dispatch_depth(nk + c.reloads.size()) : 0;  // the loads' search (training: the reloads too)
  size_t orientation_count[2] = {0, 0};  // kernels with K along the columns, along the rows
  for (const auto& k : c.kernels) ++orientation_count[k.k_on_columns ? 0 : 1];
  // Sequenced weight streaming: the load steps (ld, ldb, ldc, ldd: the highest-priority tasks) that
  // become ready at a PE while it waits to send -- a chain end before its hand-off, a chain end
  // holding a follower's input before its gather -- run first and delay the send. They are steps
  // of later kernels' loads, so the loads are computed ahead of the kernels (LoadModel): kernel
  // l + 1's once kernel l's reduce spans are known (the spans its switches wait for), and then,
  // provisionally, each later load whose buffer kernel l or an earlier one holds (a load whose
  // buffer waits for kernel l + 1's x tasks starts after kernel l's hand-off: its steps cannot fall
  // before it). One pass: an earlier form ran the estimate again with the previous pass's steps
  // until the total held still, which it did not on most sequenced models (the steps moved with the
  // windows they were compared against, and the sixth pass's figures were kept).
  detail::LoadModel lm(c, cfg);  // (estimate_loads.cpp)
  const bool load_steps = lm.steps_modelled();
  std::vector<std::vector<int64_t>> x0_of;    // per kernel, per K block: its first x readable at its source PE
  std::vector<int64_t> last_chain_end;  // the last kernel's chain ends: when each holds its output
  // Kernel 0's load first; then each kernel's reduce spans are known before the next load is computed.
  std::vector<int64_t> wready_next;
  std::pair<int64_t, int64_t> window{0, 0};
  if (nk) lm.load(0, {}, true, lm.final_steps(), wready_next, window);
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
        const int64_t at = std::max(x0[static_cast<size_t>(p)] - gsf, lm.compute_end(l - 1)[ie] + 2), free_at = lm.after_busy(ie, at);
        if (free_at == at && at == x0[static_cast<size_t>(p)] - gsf) continue;
        int64_t t = free_at;
        const bool pend = pk.k_on_columns ? px == pk.w - 1 : py == pk.h - 1;  // the kernel before's chain end: its hand-off first
        if (pend) t = std::max(t, next_of[l - 1][static_cast<size_t>(pk.k_on_columns ? py : px)]);
        t = lm.steps_within(ie, at, t);
        x0[static_cast<size_t>(p)] = t + gsf;
      }
    } else x0 = next_of[c.sequenced ? l - 1 : static_cast<size_t>(k.src)];  // (sequenced: handed off by kernel l - 1's chain ends)
    x0_of.push_back(x0);
    std::vector<int64_t> wready = std::move(wready_next);  // (load(l): computed after kernel l - 1's reduce)

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
    std::vector<int64_t> cend(static_cast<size_t>(k.w * k.h), 0);
    // Per PE: its x tasks' runs for the next loads' switches (LoadModel::record_x): {first start,
    // end of the first run, start of the second, end}; the middle two are set where the x line
    // holds the PE back, else they are the end.
    std::vector<std::array<int64_t, 4>> xruns(static_cast<size_t>(k.w * k.h), {0, -1, -1, 0});
    int64_t first_start = INT64_MAX;
    std::vector<int64_t> xend(static_cast<size_t>(Ln), 0);  // the line's x tasks' ends
    const int64_t q0 = cfg.input_depth.empty() ? 1 : std::max<int64_t>(1, cfg.input_depth[0]);  // (the x tasks' queue)
    for (int64_t pk = 0; pk < Lk; ++pk) {
      for (int64_t pn = 0; pn < Ln; ++pn) {
        const bool from_start = k.x_flow == Dir::S || k.x_flow == Dir::E;
        const int64_t d = from_start ? pn : Ln - 1 - pn;
        const int64_t px = k.k_on_columns ? pk : pn, py = k.k_on_columns ? pn : pk;
        const size_t i = static_cast<size_t>(py * k.w + px);
        int64_t st = std::max(x0[static_cast<size_t>(pk)] + d * hop, wready[i]);
        // Weight streaming: a PE takes the kernels' x values in kernel order (one input queue), so
        // a reader after the first of the same data waits for the PE's previous kernel.
        if (ws && l > 0) st = std::max(st, lm.compute_end(l - 1)[i] + 2);
        first_start = std::min(first_start, st);
        xruns[i][0] = st;
        cend[i] = st + compute;
        // (The load steps that become ready at this PE meanwhile outrank its x tasks too. Charged,
        // they improve most goldens but worsen the models whose x tasks end spread along a line,
        // which the estimate has too uniform -- docs "The estimate": not charged.)
        // The end of the x loop unblocks the load of the kernel that takes this one's weight buffer
        // next (pending once the load before it is in): a load task goes first (ids 0-3), so that
        // load step runs before the reduce -- the sequencer's search and buffer check, then its
        // pre-block op (layer_tasks.cpp ld_body: a one-op async move and ret, or with run-time
        // block lengths past the line's first PE the length set first: mul, two dsd_len).
        int64_t ldx = 0;  // (the load step after the x tasks)
        if (ld_next >= 0) {
          const DenseKernel& km = c.kernels[static_cast<size_t>(ld_next)];
          const int64_t pos = km.k_on_columns ? px : py;
          ldx = (c.sequenced ? seq_ld + 2 : 0) + (detail::runtime_block_lengths(c.training, km) && pos > 0 ? 5 : 2);
          cend[i] += ldx;
        }
        // (Own tasks: an earlier kernel's reduce task that holds the PE within this one's x tasks
        // -- at its chain end, a reader of the same data as the kernel before it, whose chain ends
        // are these PEs; or at any PE of its chain -- delays them: its span is added. The x tasks
        // outrank that reduce, so values already queued when it starts would go first: not
        // modelled.)
        if (ws && !c.sequenced)
          for (size_t e = 0; e < lm.busy_count(); ++e)
            if (const auto& b = lm.busy(e); b[i].second > st && b[i].first < cend[i]) cend[i] += b[i].second - std::max(b[i].first, st);
        xend[static_cast<size_t>(pn)] = cend[i] - ldx;  // (its x tasks' end: after a reduce that held the PE)
      }
      // The line's x values are one multicast: it moves on when every PE of the line has room for
      // the next value in its x queue (Q0 values), which a PE whose weights come late (or that is
      // still busy) has not -- the others run at most Q0 - 1 values ahead of it, so they end their
      // x tasks no sooner than Q0 - 1 x tasks before it. (Row traces: the zoo's LSTM, row 12's PEs
      // held by the corner PE's late weights, 2,600 cycles for 16 x tasks of 46 cycles; MobileNetV3's
      // depthwise features.10, a column's PEs ending up to 158 cycles, 5 x tasks of 31, apart.)
      // (Counted from the line's source: a PE further along gets each value its hops later.)
      const bool from_start = k.x_flow == Dir::S || k.x_flow == Dir::E;
      auto dist = [&](int64_t pn) { return (from_start ? pn : Ln - 1 - pn) * hop; };
      int64_t last = INT64_MIN;
      for (int64_t pn = 0; pn < Ln; ++pn) last = std::max(last, xend[static_cast<size_t>(pn)] - dist(pn));
      for (int64_t pn = 0; pn < Ln; ++pn) {
        const size_t i = static_cast<size_t>((k.k_on_columns ? pn : pk) * k.w + (k.k_on_columns ? pk : pn));
        const int64_t held = std::max<int64_t>(0, last + dist(pn) - (q0 - 1) * per_x - xend[static_cast<size_t>(pn)]);
        cend[i] += held;  // (the load step after them moves as far)
        // (The values it runs ahead, then it waits -- a PE with no more than Q0 - 1 values has them
        // all queued and never waits: its tasks one run.)
        if (held > 0 && xruns[i][0] + (q0 - 1) * per_x < xend[static_cast<size_t>(pn)]) xruns[i][1] = xruns[i][0] + (q0 - 1) * per_x, xruns[i][2] = xruns[i][1] + held;
      }
    }
    k.est.start = first_start == INT64_MAX ? 0 : first_start;
    for (size_t i = 0; i < cend.size(); ++i) {
      auto& r = xruns[i];
      r[3] = cend[i];
      if (r[1] < 0 || r[1] > r[3]) r[1] = r[2] = r[3];
    }
    lm.record_x(std::move(xruns), per_x);
    lm.record_compute_end(cend);
    // The next kernel's stream (sequenced: its load runs during this kernel's reduce), without
    // this kernel's reduce spans, which it may wait for: they are what this estimates.
    std::pair<int64_t, int64_t> s_next{0, 0};
    if (load_steps && l + 1 < nk) {
      std::vector<int64_t> w;
      lm.load(l + 1, wready, false, nullptr, w, s_next);
    }

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
    std::vector<std::pair<int64_t, int64_t>> busy(static_cast<size_t>(k.w * k.h), {0, 0});
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
      if (load_steps && Lk > 1 && s_next.second > s_next.first) {
        const auto [s0, s1] = s_next;
        const int64_t overlap = std::min(t, s1) - std::max(lead, s0);
        if (overlap > 0) {
          const double density = std::min(1.0, static_cast<double>(c.kernels[l + 1].lane_len) / static_cast<double>(s1 - s0));
          t += std::min<int64_t>(n_el, std::llround(static_cast<double>(overlap) * density));
        }
      }
      if (ws && !c.sequenced) {  // (own tasks: the chain end runs an earlier kernel's chain-end task first when it still holds the PE)
        const int64_t px = k.k_on_columns ? Lk - 1 : pn, py = k.k_on_columns ? pn : Lk - 1;
        const size_t ie = static_cast<size_t>(py * k.w + px);
        const int64_t free_at = lm.after_busy(ie, cend[ie]);
        if (free_at > cend[ie]) t = std::max(t, free_at + (Lk == 1 ? 0 : S + n_el));
      }
      chain_of[static_cast<size_t>(pn)] = t;
      const bool act = k.act_blocks < 0 || pn < k.act_blocks;  // pass-through blocks (pipelined residuals) take no activation
      int64_t act_cycles = 0;  // the elementwise functions (unary_ops), each op at its own width
      if (act)
        for (const Unary& u : k.acts) act_cycles += unary_cycles(u, n_el, cfg);
      for (const Unary& u : k.acts_after) act_cycles += unary_cycles(u, n_el, cfg);
      if (k.gn_size) act_cycles += detail::gn_cycles(k, cfg);  // GroupNorm, before the functions
      if (k.rnn) act_cycles += detail::rnn_cell_cycles(k, cfg);  // a recurrent cell (recurrent.cpp)
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
    detail::row_post_cycles(k, cfg, t_of, c.training);
    for (int64_t pn = 0; pn < Ln; ++pn) {
      int64_t t = t_of[static_cast<size_t>(pn)];
      const int64_t tmax = tmax_of[static_cast<size_t>(pn)];
      if (k.pkh) t += (k.pkh * k.pkw + (k.pavg ? 1 : 0)) * (S + cdiv(k.rows_out() * k.nb, w32));  // the pool: a copy, a max (sum) per other window; the mean's product
      if (k.pool_padded()) t += S + cdiv(k.B * k.nb, w32);  // y into the pool's border first
      t_of[static_cast<size_t>(pn)] = t;  // (the chain end's task runs on through the pool)
      end = std::max(end, t);
      transfer = std::max(transfer, t - tmax);
      if (l + 1 == c.kernels.size()) last_chain_end.push_back(t);
    }
    for (int64_t pn = 0; pn < Ln; ++pn) {
      const int64_t px = k.k_on_columns ? k.w - 1 : pn, py = k.k_on_columns ? pn : k.h - 1;
      const size_t ie = static_cast<size_t>(py * k.w + px);
      busy[ie] = {cend[ie] + 2, t_of[static_cast<size_t>(pn)]};  // (a chain of one PE too: the load step the x loop's end unblocks runs first)
    }
    if (ws) lm.record_busy(std::move(busy));  // (read with weight streaming only, where every kernel spans the one rectangle)
    // The next load, final (it sees this kernel's reduce spans); then the later ones whose buffers
    // are free of kernel l + 1's x tasks, provisionally, for the steps before this kernel's hand-off.
    lm.loads_after(l, wready, wready_next);
    for (int64_t pn = 0; pn < Ln; ++pn) {
      const int64_t t = t_of[static_cast<size_t>(pn)];
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
      // (Sequenced: the hand-off is kernel l + 1's, whichever kernel it reads; a follower's x
      // values leave in its own gather, gsf, charged where its x0 is: the out task activates none.)
      const size_t hn = c.sequenced ? l + 1 : rd.empty() ? nk : rd[0];
      const int64_t gather = hn < nk && c.kernels[hn].spatial() && !(c.sequenced && detail::follower(c, hn)) ? 3 + 5 : 0;
      const int64_t d_out = (ws ? S + 2 : S + pass) + conv + seq_out, d_gs = gather ? gather + seq_out : 0;  // (sequenced: the hand-off's search, the gather's)
      int64_t& nx = next[static_cast<size_t>(pn)];
      nx = t + d_out + d_gs;
      if (load_steps) {
        // Load steps outrank the hand-off: the ones ready by the time the chain-end task ends (from
        // its start) run before the out task, and the ones ready by the time that ends run before a
        // gather; a step ready once a task has started waits for it.
        const size_t ie = static_cast<size_t>((k.k_on_columns ? pn : k.h - 1) * k.w + (k.k_on_columns ? k.w - 1 : pn));
        const int64_t s1 = lm.steps_within(ie, chain_of[static_cast<size_t>(pn)], t + 1) - 1;
        nx = s1 + d_out;
        if (gather) nx = lm.steps_within(ie, s1 + 1, nx + 1) - 1 + d_gs;
      }
    }
    k.est.compute_end = compute_end;
    k.est.end = end;
    k.est.transfer = transfer;
    next_of.push_back(std::move(next));
  }
  // The run ends when the last chain end halts.
  c.predicted_cycles = c.kernels.empty() ? 0 : c.kernels.back().est.end + 1;
  c.predicted_s = static_cast<double>(c.predicted_cycles) / hz;
  if (c.training) detail::estimate_training(c, cfg, last_chain_end);
}

}  // namespace tessera::wafer
