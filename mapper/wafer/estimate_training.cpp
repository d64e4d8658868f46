// The wafer compiler's estimate of a training step (training.cpp backward_program, loss_program,
// xent_program; compile.hpp `estimate` calls it after the forward pass): the same per-line
// evaluation as the forward estimate (estimate.cpp), from the instruction costs of isa/wafer, the
// hop latency and the MemoryX / SwarmX bandwidths and latencies (docs/wafer-compiler.md "Training").
#include <algorithm>
#include <cmath>

#include "mapper/wafer/compile.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// ---------------------------------------------------------------------------------------------
// Training (training.cpp backward_program, loss_program, xent_program): the loss at the last layer's chain
// ends, then per layer (last to first) the dy multicast, the per-wavelet tasks, the input
// gradient's reduce and the weight gradient's gather to the port, then the MemoryX updates.
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
    const int64_t body = (c.loss_scaling ? 4 : 3) * dsd(n) + 1 + dsd(1) + 1 + (n - 1) * (5 + dsd(1)) + 2;  // (loss scaling: dy *= S)
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
    if (c.loss_scaling) body += dsd(Bl * nb);                                                        // dy *= S
    for (int64_t q = 0; q < Lq; ++q) {  // (the first chain end's; the padding blocks' set dy = 0)
      const int64_t sent = fwd_end[static_cast<size_t>(q)] + 2 + (q == 0 ? body : dsd(Bl * nb, Op::fmovs) + 1);
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
    // (the bias update: weight decay, momentum, SGD; with loss scaling the verdict task's instead)
    const int64_t update = bias_update_cycles(c, li, cfg);
    int64_t body = dd + (k.activated() ? 4 * dsd(n) : 0) + sum_rows_cycles(B, nb, cfg) + (c.verdict() || c.adam ? 0 : update) + 1;  // (the mask, db, the bias update)
    if (c.micro_batches > 1 && !k.b_value.empty()) body += dsd(nb);  // db summed over the micro-batches
    const int64_t after_send = !c.verdict() && c.adam ? update : 0;  // (Adam's update after the multicast has started: the chain end's own dy tasks wait)
    if (c.half()) body += dsd(n, Op::fs2h);  // mixed precision: dy to the compute type before it is sent
    body += pool_backward_cycles(k, cfg) + attention_backward_cycles(c, li, cfg);  // (a Conv's pool: the global pool's spread or the max pool's masks; attention: dV, dQ, dK)
    // per dy wavelet at every PE (bdy): the weight gradient's fmacs (fmuls for the first sample),
    // from layer 1 on the input gradient's (fmuls for the first column), and the bookkeeping
    // (mixed precision: fmachs, 16-bit factors summed in fp32, for both)
    const Op mac = c.half() ? Op::fmachs : Op::fmacs, mac0 = c.half() ? Op::fmachs : Op::fmuls;
    const int64_t g_mac = dsd(kb, mac, nb), g_first = dsd(kb, mac0, nb) + 1;
    const int64_t x_mac = dsd(kb, mac, nb), x_first = dsd(kb, mac0, nb) + 1;
    const bool dx = has_input_grad(c, li);  // (the graph input's readers compute no input gradient)
    int64_t work = n * (dx ? 12 : 8) + (n - nb) * g_mac + nb * g_first + 4 * B + 2;
    if (dx) work += (n - B) * x_mac + B * x_first;
    std::vector<int64_t> bdy_end(static_cast<size_t>(k.w * k.h), 0);
    std::vector<int64_t> bsq = bstart;  // (a LayerNorm's backward first, coupled along the chain ends)
    ln_backward_cycles(c, li, cfg, bsq);
    for (int64_t q = 0; q < Ln; ++q) {
      const int64_t send = bsq[static_cast<size_t>(q)] + body;  // fmovs dyout issues
      for (int64_t p = 0; p < Lk; ++p) {
        const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
        const size_t i = static_cast<size_t>(py * k.w + px);
        int64_t first = send + S + (Lk - 1 - p) * hop + 2;
        if (p == Lk - 1) first = std::max(first, send + after_send + 2);
        bdy_end[i] = std::max({first, freed[i] + 1, wready[i] + 1}) + work;
      }
    }
    // bdone: the input gradient reduced along the x lines (the previous layer's chains), then the
    // gather; the reduce's end starts the previous layer's bstart.
    std::vector<int64_t> gstart(static_cast<size_t>(k.w * k.h), 0);
    std::vector<int64_t> next_bstart;
    if (dx) {
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
        next_bstart[static_cast<size_t>(p)] = lead + (Ln - 1) * pass + ne + 3 + col2im_cycles(c, li, cfg) +  // (a Conv reading a Conv: its col2im there;
                                              (residual_reader(c, li - 1) >= 0 ? dsd(c.kernels[li - 1].B * c.kernels[li - 1].nb) : 0);  // a later residual's gradient added)
      }
    } else {
      for (size_t i = 0; i < gstart.size(); ++i) gstart[i] = bdy_end[i] + 2 + dd + 1 + (c.reloads.empty() ? 0 : 1);
    }
    if (c.half()) {  // the gradient block to the compute type (loss scaling: db's finiteness folded in at the chain ends)
      const int64_t conv = dsd(kb * nb, Op::fs2h);
      for (int64_t q = 0; q < Ln; ++q)
        for (int64_t p = 0; p < Lk; ++p) {
          const int64_t px = k.k_on_columns ? p : q, py = k.k_on_columns ? q : p;
          gstart[static_cast<size_t>(py * k.w + px)] += conv + (c.loss_scaling && !k.b_value.empty() && p == Lk - 1 ? dsd(nb, Op::fs2h) + dsd(nb, Op::fmulh) + dsd(nb, Op::faddh) : 0);
        }
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
    if (!dx && li > 0) {  // attention's K or V: the kernel before starts at each chain end once its gradient blocks have left (g3)
      next_bstart.assign(static_cast<size_t>(Ln), 0);
      for (int64_t q = 0; q < Ln; ++q) next_bstart[static_cast<size_t>(q)] = line_end[static_cast<size_t>(q)] + 2 + dd + 2 + 1;
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
  int64_t skip_end = fabric_end;
  if (c.verdict()) {
    // MemoryX's verdict (with micro-batches: whether this run is the step's last, once the
    // gradients have left: no wait for the update): back through SwarmX once the last update is done, into the east edge; the
    // south row's lane crosses the rectangle (w hops); the verdict task scales db and updates the
    // biases of every kernel whose chain ends are there (the corner PE holds both orientations'),
    // then halts.
    int64_t left = 0;
    for (const int64_t e : port_end_of) left = std::max(left, e);
    const int64_t at = c.loss_scaling ? static_cast<int64_t>(std::ceil((done + cfg.swarmx_latency) * hz - 1e-9))
                                      : left + static_cast<int64_t>(std::ceil(cfg.swarmx_latency * hz - 1e-9));
    // (per PE the kernels whose chain ends it holds: the east column's rows below an A kernel's
    // blocks, the south row's columns below a B kernel's, both at the corner; the slowest PE)
    auto cost = [&](size_t l) {  // (db *= 1 / S first; micro-batches: db from the sum, the sum zeroed)
      const int64_t nb = c.kernels[l].nb, pre = (c.loss_scaling ? dsd(nb) : 0) + (c.micro_batches > 1 ? 2 * dsd(nb, Op::fmovs) : 0);
      return (c.kernels[l].b_value.empty() ? int64_t{0} : pre + bias_update_cycles(c, l, cfg)) + ln_verdict_cycles(c, l, cfg);
    };
    int64_t worst = 0;
    for (int64_t y = 0; y < kl.h; ++y)
      for (int64_t x = 0; x < kl.w; ++x) {
        if (x != kl.w - 1 && y != kl.h - 1) continue;
        int64_t sum = 0;
        for (size_t l = 0; l < L; ++l) {
          const DenseKernel& k = c.kernels[l];
          if ((k.k_on_columns && x == kl.w - 1 && y < k.nblocks()) || (!k.k_on_columns && y == kl.h - 1 && x < k.nblocks())) sum += cost(l);
        }
        worst = std::max(worst, sum);
      }
    const int64_t task = 2 + 1 + worst;  // the branch, the updates, halt
    skip_end = std::max(fabric_end, at + kl.w * hop + 2 + 2 + 1);  // (verdict 0: the branch, halt)
    fabric_end = std::max(fabric_end, at + kl.w * hop + 2 + task);
  }
  c.predicted_cycles = fabric_end;
  c.predicted_s = std::max(static_cast<double>(fabric_end) / hz, done);
  c.train_est.skip_s = std::max(static_cast<double>(skip_end) / hz, done);
}

}  // namespace tessera::wafer::detail
