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

// ---------------------------------------------------------------------------------------------
// Training (training.cpp backward_program, loss_program, xent_program): the loss at the last layer's chain
// ends, then per layer (last to first) the dy multicast, the per-wavelet tasks, the input
// gradient's reduce and the weight gradient's gather to the port, then the MemoryX updates.
namespace {

void estimate_training(Compiled& c, const WaferConfig& cfg, const std::vector<int64_t>& fwd_end) {
  const int64_t S = cfg.setup_cycles, hop = cfg.hop_latency, pass = 2 + hop;
  const double hz = cfg.clock_hz;
  auto dsd = [&](int64_t len, Op op = Op::fadds, int64_t stride = 1) { return dsd_cycles(op, len, stride, cfg); };
  const size_t L = c.kernels.size();
  const DenseKernel& kl = c.kernels.back();
  const int64_t Bl = kl.B;  // the loss's samples
  // ---- the loss, per chain end q of the last layer: when its bstart begins
  const int64_t Lq = static_cast<int64_t>(fwd_end.size());
  std::vector<int64_t> bstart(static_cast<size_t>(Lq), 0);
  int64_t loss_end = 0;
  const bool xent = c.loss == "softmax_cross_entropy";
  if (!xent) {
    const int64_t n = Bl * kl.nb;
    const int64_t body = 3 * dsd(n) + 1 + dsd(1) + 1 + (n - 1) * (5 + dsd(1)) + 2;
    int64_t lead = INT64_MIN;
    for (int64_t q = 0; q < Lq; ++q) {
      const int64_t own = fwd_end[static_cast<size_t>(q)] + 2 + body;  // red: activate lossk, ret
      lead = std::max(lead, own + S - q * pass);
      int64_t sent = lead + q * pass + 1;  // this position's one-element send (or the end's fadds) done
      if (q == Lq - 1) sent += dsd(1);     // the end scales the sum into `loss`
      bstart[static_cast<size_t>(q)] = sent + 2;
      loss_end = std::max(loss_end, sent);
    }
  } else {
    const int64_t N = kl.N, nb = kl.nb, BN = Bl * N;
    const int64_t exp_ops = kExpOps;
    int64_t body = dsd(Bl, Op::fmovs, nb) + (N - 1) * dsd(Bl, Op::fmaxs, nb) + N * dsd(Bl, Op::fsubs, std::max(nb, N));
    body += exp_ops * dsd(BN) + dsd(Bl, Op::fmovs, N) + (N - 1) * dsd(Bl, Op::fadds, N) + kRecipOps * dsd(Bl);  // exp, sum, 1 / s
    body += dsd(Bl * nb) + 3 * N * dsd(Bl, Op::fmuls, std::max(nb, N));                              // dy
    body += dsd(Bl) + kRecipOps * dsd(Bl) + 3 * dsd(Bl) + 5 * ((1 + exp_ops + 3) * dsd(Bl));           // ln s
    body += dsd(Bl) + 2 * N * dsd(Bl, Op::fmuls, std::max(nb, N));                                   // t (m + ln s - z)
    body += 1 + dsd(1) + 1 + (BN - 1) * (5 + dsd(1)) + 2 + dsd(1);                                 // the sum, the loss
    for (int64_t q = 0; q < Lq; ++q) {
      const int64_t sent = fwd_end[static_cast<size_t>(q)] + 2 + body;
      bstart[static_cast<size_t>(q)] = sent + 2;
      loss_end = std::max(loss_end, sent);
    }
  }
  c.train_est.forward = *std::max_element(fwd_end.begin(), fwd_end.end());
  c.train_est.loss = loss_end;

  // ---- the backward pass, layer by layer; `freed` per PE: its previous layer's gradient block has
  // left. The shared tasks (bstart, bdone, g2, g3) search for their kernel first (dd cycles).
  const int64_t dd = 2 * detail::dispatch_depth(L), ld_d = 2 * detail::dispatch_depth(L + c.reloads.size());
  const int64_t Qw = cfg.input_depth.size() > 3 ? std::min(cfg.input_depth[2], cfg.input_depth[3]) : 1;
  std::vector<int64_t> freed;
  std::vector<int64_t> port_end_of(L, 0);
  std::vector<std::vector<int64_t>> bdone_end_of(L);
  int64_t fabric_end = 0;
  for (size_t li = L; li-- > 0;) {
    const DenseKernel& k = c.kernels[li];
    const int64_t Lk = k.k_on_columns ? k.w : k.h, Ln = k.k_on_columns ? k.h : k.w;
    const int64_t B = k.B;  // (a Conv's: its im2col rows)
    const int64_t kb = k.kb, nb = k.nb, n = B * nb, bs = kb * nb;
    if (freed.empty()) freed.assign(static_cast<size_t>(k.w * k.h), 0);
    // A reload (Compiled::reloads): each PE of a line starts taking the stream when the kernel whose
    // block its buffer holds has ended its dy tasks there -- the load (id 0) runs once that kernel's
    // bdone has returned (after its input gradient's reduce): the search and the check; the stream moves when every PE of the line takes it, a block at a wavelet per
    // cycle with the load steps' gaps between blocks, and the block is in a PE hops later, after
    // ldd (the search, the join's check, the unblock).
    std::vector<int64_t> wready(static_cast<size_t>(k.w * k.h), 0);
    if (std::find(c.reloads.begin(), c.reloads.end(), static_cast<int64_t>(li)) != c.reloads.end()) {
      const std::vector<int64_t>& prev = bdone_end_of[static_cast<size_t>(detail::buffer_after(c, li))];
      const int64_t gap = std::max<int64_t>(0, S + 2 + ld_d - Qw);
      for (int64_t ln = 0; ln < k.lanes; ++ln) {
        int64_t go = 0;
        for (int64_t p = 0; p < Lk; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          go = std::max(go, prev[static_cast<size_t>(py * k.w + px)] + ld_d + 2);
        }
        const int64_t t_last = go + S + Lk * bs + (Lk - 1) * gap - 1;
        for (int64_t p = 0; p < Lk; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          wready[static_cast<size_t>(py * k.w + px)] = t_last + (p + 1) * hop + 2 + 3 + ld_d + 4;
        }
      }
    }
    // bstart at each chain end q: mask (ReLU), bias gradient and update, then the multicast
    int64_t body = dd + (k.activated() ? 4 * dsd(n) : 0) + 1 + dsd(nb) + 1 + (B - 1) * (6 + dsd(nb)) + 2 + dsd(nb, Op::fmacs) + 1 + (c.momentum != 0 ? 2 * dsd(nb) : 0);
    if (k.spatial() && k.pkh)  // a Conv's max pool: per window offset the mask (4 ops) and dy at the offset, strided walks
      body += k.pkh * k.pkw * 5 * dsd(k.rows_out() * nb, Op::fmuls, k.psw * nb);
    // per dy wavelet at every PE (bdy): the weight gradient's fmacs (fmuls for the first sample),
    // from layer 1 on the input gradient's (fmuls for the first column), and the bookkeeping
    const int64_t g_mac = dsd(kb, Op::fmacs, nb), g_first = dsd(kb, Op::fmuls, nb) + 1;
    const int64_t x_mac = dsd(kb, Op::fmacs, nb), x_first = dsd(kb, Op::fmuls, nb) + 1;
    int64_t work = n * (li ? 12 : 8) + (n - nb) * g_mac + nb * g_first + 4 * B + 2;
    if (li) work += (n - B) * x_mac + B * x_first;
    std::vector<int64_t> bdy_end(static_cast<size_t>(k.w * k.h), 0);
    for (int64_t q = 0; q < Ln; ++q) {
      const int64_t send = bstart[static_cast<size_t>(q)] + body;  // fmovs dyout issues
      for (int64_t p = 0; p < Lk; ++p) {
        const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
        const size_t i = static_cast<size_t>(py * k.w + px);
        const int64_t first = send + S + (Lk - 1 - p) * hop + 2;
        bdy_end[i] = std::max({first, freed[i] + 1, wready[i] + 1}) + work;
      }
    }
    // bdone: the input gradient reduced along the x lines (the previous layer's chains), then the
    // gather; the reduce's end starts the previous layer's bstart.
    std::vector<int64_t> gstart(static_cast<size_t>(k.w * k.h), 0);
    std::vector<int64_t> next_bstart;
    if (li) {
      const int64_t ne = B * kb;
      next_bstart.assign(static_cast<size_t>(Lk), 0);
      for (int64_t p = 0; p < Lk; ++p) {  // an x line: fixed K position p, N positions 0..Ln-1
        int64_t lead = INT64_MIN;
        for (int64_t q = 0; q < Ln; ++q) {
          const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
          const size_t i = static_cast<size_t>(py * k.w + px);
          lead = std::max(lead, bdy_end[i] + 2 + dd + 1 + (c.reloads.empty() ? 0 : 1) + S - q * pass);  // bdone: the search, the count, the load's unblock
          gstart[i] = lead + q * pass + ne + 1;  // this position's part is out (or summed, at the end)
        }
        next_bstart[static_cast<size_t>(p)] = lead + (Ln - 1) * pass + ne + 3;
      }
    } else {
      for (size_t i = 0; i < gstart.size(); ++i) gstart[i] = bdy_end[i] + 2 + dd + 1 + (c.reloads.empty() ? 0 : 1);
    }
    bdone_end_of[li] = gstart;  // (+ bdone's last ops: the activation, the async send, ret)
    for (auto& e : bdone_end_of[li]) e += 3;
    // the gather along each chain (N position q): own block, then the blocks from behind, relayed;
    // the chain end's output carries Lk blocks at a wavelet per cycle.
    int64_t port_end = 0;
    std::vector<int64_t> line_end(static_cast<size_t>(Ln), 0);
    for (int64_t q = 0; q < Ln; ++q) {
      int64_t e = 0;
      for (int64_t p = 0; p < Lk; ++p) {
        const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
        const int64_t g = gstart[static_cast<size_t>(py * k.w + px)];
        // from p: its own block (setup, bs wavelets), then (beyond the chain end) every later
        // position's relay stage (completion, g2, setup) and the remaining blocks
        e = std::max(e, g + S + (Lk - p) * bs + (Lk - 1 - p) * pass);
        if (p == Lk - 1 && Lk > 1) e = std::max(e, g + 2 * S + 2 + dd + Lk * bs);
      }
      line_end[static_cast<size_t>(q)] = e + pass;
      port_end = std::max(port_end, e + pass);
    }
    port_end_of[li] = port_end;
    for (int64_t q = 0; q < Ln; ++q)
      for (int64_t p = 0; p < Lk; ++p) {
        const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
        freed[static_cast<size_t>(py * k.w + px)] = line_end[static_cast<size_t>(q)] + 2 + dd + 2;  // g3: the search, the count (and, before a reload, its check)
        fabric_end = std::max(fabric_end, line_end[static_cast<size_t>(q)] + 3);
      }
    bstart = next_bstart;
  }
  c.train_est.backward = fabric_end;
  // ---- MemoryX: each layer's gradient through the tree (bytes at the SwarmX bandwidth, then its
  // latency) and written at the MemoryX bandwidth (its latency after the last burst), last layer first
  double tree = 0, store = 0, done = 0;
  for (size_t li = L; li-- > 0;) {
    const DenseKernel& k = c.kernels[li];
    const double bytes = static_cast<double>(k.lanes * k.lane_len) * 4;
    const double t0 = static_cast<double>(port_end_of[li]) / hz;
    tree = std::max(t0, tree) + bytes / cfg.swarmx_bandwidth;
    const double at = tree + cfg.swarmx_latency;
    store = std::max(at, store) + bytes / cfg.memoryx_bandwidth;
    done = std::max(done, store + cfg.memoryx_latency);
  }
  c.train_est.update_end_s = done;
  c.predicted_cycles = fabric_end;
  c.predicted_s = std::max(static_cast<double>(fabric_end) / hz, done);
}

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
  std::vector<std::vector<std::pair<int64_t, int64_t>>> busy_of;  // per kernel: per PE, its chain-end task's span
  // A task (a load's next step) that becomes ready at PE i at cycle t while the PE runs a chain-end
  // task runs when that task ends.
  auto after_busy = [&](size_t i, int64_t t) {
    for (const auto& b : busy_of)
      if (b[i].first <= t && t < b[i].second) t = b[i].second;
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
  const bool step_passes = ws && c.sequenced && !c.training && !c.kernels.empty();
  int64_t prev_total = -1;
  for (int iter = 0; iter < (step_passes ? 6 : 1); ++iter) {
  next_of.clear(), x0_of.clear(), last_chain_end.clear(), compute_end_of.clear(), wready_of.clear(), busy_of.clear();
  mx_bytes_before = 0;
  if (step_passes) steps_now.assign(static_cast<size_t>(c.kernels.front().w * c.kernels.front().h), {});
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
    const int64_t compute = k.B * ((k.kb - 1) * per_x + first_x) + 4 * k.B + 2 + (wrap_ld ? 1 : 0) + seq_end;
    k.est.compute = compute;
    const int64_t nf = k.nflops ? k.nflops : k.N;  // without pass-through columns and padding
    k.est.flops = 2.0 * static_cast<double>(k.B * k.kflops * nf) + static_cast<double>(k.B * nf) * (k.act_is(Unary::Kind::relu) ? 2 : 1);
    k.est.weight_bytes = static_cast<double>(k.kflops * nf) * 4;

    // When the first x of each K block is readable at its source PE.
    std::vector<int64_t> x0(static_cast<size_t>(Lk), 0);
    if (k.src < 0) std::fill(x0.begin(), x0.end(), S + 2 + (k.spatial() ? 5 : 0));  // `send` at cycle 0 (a conv's: its offset first), its own ramp
    else if (c.sequenced && detail::follower(c, l)) {
      // A follower: sent right after kernel l - 1's x values (their count per line later) by the same chain ends.
      const DenseKernel& pk = c.kernels[l - 1];
      x0 = x0_of[l - 1];
      for (auto& v : x0) v += pk.oh * pk.ow * pk.kb * pk.samples + 8 + 2 * detail::dispatch_depth(detail::followers(c).size());  // (gsf's search)
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
    std::vector<int64_t> wready(static_cast<size_t>(k.w * k.h), 0);
    if (ws) {
      const int64_t qw = c.weight_queue(l);
      const int64_t Q = qw < static_cast<int64_t>(cfg.input_depth.size()) ? cfg.input_depth[static_cast<size_t>(qw)] : 1;
      // (Sequenced: the next load step's search first. Run-time block lengths: the step after a
      // PE's own block sets the length of the blocks after it first -- sub, mul, two dsd_len.)
      const int64_t gap = std::max<int64_t>(0, S + 2 + seq_ld + (detail::runtime_block_lengths(c.training, k) ? 4 : 0) - Q);
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
      for (int64_t ln = 0; ln < lines; ++ln) {
        int64_t go = 0;  // every PE of the line has started this layer's load
        for (int64_t p = 0; p < along; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          const size_t i = static_cast<size_t>(py * k.w + px);
          if (l >= 1) go = std::max(go, after_busy(i, wready_of[l - 1][i] + 1));
          if (pb >= 0) go = std::max(go, after_busy(i, compute_end_of[static_cast<size_t>(pb)][i] + 1));
        }
        // The first wavelet enters the line when it is out of SwarmX and the PEs are loading (their
        // first op set up); the last one, lane_len - 1 wavelets and the boundary gaps later, or
        // when SwarmX delivers it.
        const int64_t t0 = std::max(first, go + S + (c.training || (along - 1) * k.kb * k.nb > 65535 ? 0 : 3) +  // run-time lengths: the pre length set first (mul, 2 dsd_len)
                                               seq_ld + (c.sequenced && pb >= 0 ? 2 : 0) + (c.sequenced && l == 0 ? (c.training ? 7 : 6) : 0));  // sequenced: the search, the buffer's check, kernel 0's registers
        // Block by block: at each boundary two PEs switch load ops (the one whose block ended to
        // the blocks after it, the next to its own); one that runs an earlier kernel's chain-end
        // task then (bias, functions, attention, LayerNorm, a pool -- blocking in its receives)
        // switches when the task ends, and the line's stream waits for it (an async op in flight
        // goes on meanwhile: only the switches need the PE).
        const int64_t blk = k.kb * k.nb;
        int64_t T = t0;  // when block q's first wavelet enters the line
        std::vector<int64_t> Tq(static_cast<size_t>(along), t0);
        for (int64_t q = 1; q < along; ++q) {
          int64_t m = T + blk;  // block q - 1 is in: the switch
          for (const int64_t p : {q - 1, q}) {
            const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
            for (size_t e = 0; e < l; ++e) {
              const auto [b0, b1] = busy_of[e][static_cast<size_t>(py * k.w + px)];
              if (b0 <= m + p * hop && m + p * hop < b1) m = b1 - p * hop;
            }
          }
          T = m + gap;
          Tq[static_cast<size_t>(q)] = T;
        }
        const int64_t t_last = std::max(T + blk - 1, supply_end);
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
    std::vector<int64_t> cend(static_cast<size_t>(k.w * k.h), 0);
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
        // (Own tasks: at an earlier kernel's chain end -- a reader of the same data as the kernel
        // before it, whose chain ends are these PEs -- that kernel's chain-end task runs within
        // this one's x tasks, which wait for it: its span is added.)
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
    for (int64_t pn = 0; pn < Ln; ++pn) {
      int64_t lead = INT64_MIN;  // max_j(T(j) + S - j * pass)
      int64_t tmax = 0;
      for (int64_t pk = 0; pk < Lk; ++pk) {
        const int64_t px = k.k_on_columns ? pk : pn, py = k.k_on_columns ? pn : pk;
        const int64_t T = cend[static_cast<size_t>(py * k.w + px)];
        tmax = std::max(tmax, T);
        lead = std::max(lead, T + S - pk * pass);
      }
      compute_end = std::max(compute_end, tmax);
      int64_t t = Lk == 1 ? tmax : lead + (Lk - 1) * pass + n_el;  // the chain end holds the sum
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
      t += (S + cdiv(n_el, w32)) * (1 + (k.residual >= 0 && !k.res_move ? 1 : 0) + (k.res_mul && c.half() ? 1 : 0)) + act_cycles;  // bias, residual (a gate's widening), activation
      if (k.res_move) t += S + n_el;  // a moved residual is added as it arrives: a wavelet per cycle
      if (k.gate_of >= 0) t += S + cdiv(k.gate_rows * k.nb, w32);  // squeeze-excitation: the feature map times the gate
      if (k.softmax) {  // softmax_program over the N outputs of the B samples (strided columns)
        const int64_t N = k.N, B = k.B;
        t += dsd(B, Op::fmovs, k.nb) + (N - 1) * dsd(B, Op::fmaxs, k.nb) + N * dsd(B, Op::fsubs, std::max(k.nb, N)) + kExpOps * dsd(B * N, Op::fmuls, 1) +
             dsd(B, Op::fmovs, N) + (N - 1) * dsd(B, Op::fadds, N) + kRecipOps * dsd(B, Op::fmuls, 1) + N * dsd(B, Op::fmuls, std::max(k.nb, N));
      }
      t_of[static_cast<size_t>(pn)] = t;
      tmax_of[static_cast<size_t>(pn)] = tmax;
    }
    if (k.attn) {
      // chain_end_program.cpp attention_program, per head (part) of each chain end's block: the scores (w
      // products of broadcast walks), with heads split over g PEs the group's chain of S x S
      // partial scores to its last PE (the reduce's formula), the softmax there, P broadcast back
      // hop by hop; then P V over the PE's w features.
      // Query blocks of Sq rows run one after another (a block's scores: Sq x S).
      // A batch: every (sample, head) pair of the PE in turn, over its sample's Sk keys.
      const int64_t fb = k.feat_nb(), Sk = k.attn_keys(), Sq = k.attn_rows(), nq = Sk / Sq, SS = Sq * Sk, g = k.attn_group(), w = g > 1 ? fb : k.dh,
                    hp = (g > 1 ? 1 : fb / k.dh) * k.attn_samples;
      auto op = [&](int64_t len, int64_t stride) { return dsd(len, Op::fmuls, stride); };
      const int64_t scores = w * op(SS, k.nb) + (w - 1) * op(SS, 1) + (nq > 1 ? w + 1 : 0);
      const int64_t softmax = (k.attn_mask.empty() ? 0 : op(SS, 1)) + op(SS, 1) + Sk * op(Sq, Sk) + op(SS, 1) + kExpOps * op(SS, 1) + Sk * op(Sq, Sk) + recip_op_count(1.0, static_cast<double>(Sk)) * op(Sq, 1) + op(SS, 1);
      const int64_t pv = (2 * Sk - 1) * op(Sq * w, 1);
      for (const bool isq : {true, false})  // rotary embeddings: five ops over Q's (K's) rows x fb, two over halves, strided
        if (!(isq ? k.attn_q_cos : k.attn_k_cos).empty())
          for (auto& tq : t_of) tq += 3 * op(k.B * fb / 2, 2) + op(k.B * fb, 2) + op(k.B * fb, 1);
      if (g == 1) {
        for (auto& tq : t_of) tq += nq * (hp * (scores + softmax + pv) + (nq > 1 ? 4 + (fb != k.nb ? 1 : 0) + (k.attn_mask.empty() ? 0 : 2) : 0));
      } else {
        for (int64_t qb = 0; qb < nq * hp; ++qb) {
        if (nq > 1 && qb % hp == 0)  // a query block's start: its offsets (and the mask's rows)
          for (auto& tq : t_of) tq += 4 + (fb != k.nb ? 1 : 0) + (k.attn_mask.empty() ? 0 : 2);
        for (int64_t g0 = 0; g0 < Ln; g0 += g) {
          const int64_t gl = std::min(Ln, g0 + g) - 1;  // the group's last position
          int64_t lead = INT64_MIN;
          for (int64_t q = g0; q <= gl; ++q) lead = std::max(lead, t_of[static_cast<size_t>(q)] + scores + S - (q - g0) * pass);
          const int64_t chain = gl == g0 ? t_of[static_cast<size_t>(g0)] + scores : lead + (gl - g0) * pass + SS;
          const int64_t sent = chain + softmax + S + 1;
          for (int64_t q = g0; q <= gl; ++q) {
            const int64_t own = t_of[static_cast<size_t>(q)] + scores + (q < gl ? S + SS : 0);
            t_of[static_cast<size_t>(q)] = std::max(own, sent + (gl - q) * hop + SS + 2) + 1 + pv;
          }
        }
        }
      }
    }
    if (k.keeps_preln)  // the copy of the value before the LayerNorm (fmovs over B nb)
      for (auto& tq : t_of) tq += dsd(k.B * k.nb, Op::fmovs);
    if (k.layernorm) {
      // LayerNorm along the chain ends (chain_end_program.cpp ln_program), twice: each position's row sums (nb
      // strided ops over B), the pipelined chain of B values to the edge's end (the reduce's
      // formula), its own ops there, then the broadcast back -- hop by hop, B wavelets -- which
      // each position takes before its next ops.
      const int64_t B = k.B, nb = k.nb;
      const bool padded = Ln * nb > k.N;
      auto pass_ln = [&](std::vector<int64_t>& T, int64_t at_end) {
        const int64_t local = dsd(B, Op::fmovs, nb) + (nb - 1) * dsd(B, Op::fadds, nb);
        int64_t lead = INT64_MIN;
        for (int64_t q = 0; q < Ln; ++q) lead = std::max(lead, T[static_cast<size_t>(q)] + local + S - q * pass);
        const int64_t chain = Ln == 1 ? T[0] + local : lead + (Ln - 1) * pass + B;
        const int64_t sent = chain + at_end + S + 1;  // the async broadcast's first wavelet leaves
        for (int64_t q = 0; q < Ln; ++q) {
          const int64_t own = T[static_cast<size_t>(q)] + local + (q + 1 < Ln ? S + B : 0);  // this position's part of the chain is out
          T[static_cast<size_t>(q)] = std::max(own, sent + (Ln - 1 - q) * hop + B + 2) + 1;
        }
      };
      if (!k.rms) {  // (RMSNorm: no mean pass)
        pass_ln(t_of, dsd(B));
        for (auto& tq : t_of) tq += dsd(n_el) * (padded ? 3 : 2);  // subtract the mean (mask), square
      } else {
        for (auto& tq : t_of) tq += dsd(n_el);  // square
      }
      pass_ln(t_of, 2 * dsd(B) + dsd(B, Op::fmovs) + kRsqrtIters * (3 * dsd(B, Op::fmuls) + dsd(B, Op::fmacs)));  // rsqrt_ops: 3 fmuls and an fmacs per step
      for (auto& tq : t_of) tq += (k.rms ? 2 : 3) * dsd(n_el);  // times rstd, scale (, bias)
    }
    for (int64_t pn = 0; pn < Ln; ++pn) {
      int64_t t = t_of[static_cast<size_t>(pn)];
      const int64_t tmax = tmax_of[static_cast<size_t>(pn)];
      if (k.pkh) t += (k.pkh * k.pkw + (k.pavg ? 1 : 0)) * (S + cdiv(k.rows_out() * k.nb, w32));  // the pool: a copy, a max (sum) per other window; the mean's product
      if (k.pool_padded()) t += S + cdiv(k.B * k.nb, w32);  // y into the pool's border first
      end = std::max(end, t);
      transfer = std::max(transfer, t - tmax);
      // The next kernel's x: the chain end's yout (issue, setup, out queue) -- into the next
      // rectangle (pipelined: router, link, ramp) or to its own ramp (weight streaming, async).
      // fp16: fs2h converts y first (activate the task, then S + B nb / conversion width).
      // A padded Conv reading it: y copied into its bordered holder (fmovs; fp16: the fs2h writes there).
      const std::vector<size_t>& rd = c.readers[l + 1];
      const bool held = detail::output_used(c, l);
      const int64_t conv = !held ? 0 : c.half() ? S + cdiv(k.rows_out() * k.nb, std::max<int64_t>(1, cfg.simd_convert)) : k.xp_h ? S + cdiv(k.rows_out() * k.nb, w32) : 0;
      // A conv's im2col gather: the out task activates the gather task (activate, ret, the switch),
      // which sets the first sample's offset (mul, dsd_off, add, sub, bz) before its send.
      // (Sequenced: the hand-off is kernel l + 1's, whichever kernel it reads.)
      const size_t hn = c.sequenced ? l + 1 : rd.empty() ? nk : rd[0];
      const int64_t gather = hn < nk && c.kernels[hn].spatial() ? 3 + 5 : 0;
      next[static_cast<size_t>(pn)] = (ws ? t + S + 2 : t + S + pass) + conv + gather + (gather ? 2 : 1) * seq_out;  // (sequenced: the hand-off's search, the gather's)
      if (!steps_prev.empty()) {  // load steps ready from the chain-end task's start until the send run first
        const int64_t px = k.k_on_columns ? k.w - 1 : pn, py = k.k_on_columns ? pn : k.h - 1;
        int64_t& nx = next[static_cast<size_t>(pn)];
        for (const auto& [ready, cost] : steps_prev[static_cast<size_t>(py * k.w + px)])
          if (ready >= chain_of[static_cast<size_t>(pn)] && ready < nx) nx += cost;
      }
      if (l + 1 == c.kernels.size()) last_chain_end.push_back(t);
    }
    k.est.compute_end = compute_end;
    k.est.end = end;
    k.est.transfer = transfer;
    next_of.push_back(std::move(next));
    std::vector<std::pair<int64_t, int64_t>> busy(static_cast<size_t>(k.w * k.h), {0, 0});
    for (int64_t pn = 0; pn < Ln; ++pn) {
      const int64_t px = k.k_on_columns ? k.w - 1 : pn, py = k.k_on_columns ? pn : k.h - 1;
      busy[static_cast<size_t>(py * k.w + px)] = {chain_of[static_cast<size_t>(pn)], t_of[static_cast<size_t>(pn)]};
    }
    busy_of.push_back(std::move(busy));
    compute_end_of.push_back(std::move(cend));
    wready_of.push_back(std::move(wready));
  }
  if (!step_passes) break;
  const int64_t total = c.kernels.back().est.end;
  if (total == prev_total) break;
  prev_total = total;
  steps_prev = std::move(steps_now);
  for (auto& v : steps_prev) std::sort(v.begin(), v.end());
  }
  // The run ends when the last chain end halts.
  c.predicted_cycles = c.kernels.empty() ? 0 : c.kernels.back().est.end + 1;
  c.predicted_s = static_cast<double>(c.predicted_cycles) / hz;
  if (c.training) estimate_training(c, cfg, last_chain_end);
}

}  // namespace tessera::wafer
