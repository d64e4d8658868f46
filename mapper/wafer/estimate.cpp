// The wafer compiler's analytical estimate (compile.hpp `estimate`): cycles per kernel from the
// instruction costs of isa/wafer (dsd.setup_cycles + ceil(len / width), 1 cycle per scalar or
// control instruction), the router's hop latency and one wavelet per cycle per link, and the
// MemoryX / SwarmX bandwidths and latencies -- evaluated per line of PEs, never by simulating.
// The formulas follow the generated programs (compile.cpp layer_text); docs/wafer-compiler.md
// derives them.
#include <algorithm>
#include <cmath>

#include "mapper/wafer/compile.hpp"

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

  std::vector<int64_t> x0_next;  // per K block of the next kernel: first x readable at its source PE
  std::vector<std::vector<int64_t>> compute_end_of, wready_of;  // per kernel: per PE (row-major in its rect)
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    DenseKernel& k = c.kernels[l];
    // The chains and lines span the whole rectangle (weight streaming pads blocks with zeros to
    // cover it; pipelined rectangles are exactly kblocks x nblocks).
    const int64_t Lk = k.k_on_columns ? k.w : k.h;        // chain length (positions along K)
    const int64_t Ln = k.k_on_columns ? k.h : k.w;        // PEs along an x line (N axis)
    const bool wrap_ld = ws && l + 2 < c.kernels.size();
    // Per x value: mul, dsd_off, mul, dsd_off, bnz, fmacs (setup + nb / width), add, sub, bnz, ret;
    // the first of a sample's kb values takes fmuls (fp32 width) and a jmp instead of fmacs; every
    // kb values the sample counter wraps (mov, add, sub, bnz); the last value activates the reduce.
    // fp16: fmachs (fp32 SIMD class) for both.
    const int64_t per_x = 9 + S + cdiv(k.nb, c.fp16 ? w32 : wf);
    const int64_t first_x = 10 + S + cdiv(k.nb, w32);
    const int64_t compute = k.B * ((k.kb - 1) * per_x + first_x) + 4 * k.B + 2 + (wrap_ld ? 1 : 0);
    k.est.compute = compute;
    k.est.flops = 2.0 * static_cast<double>(k.B * k.K * k.N) + static_cast<double>(k.B * k.N) * (k.relu ? 2 : 1);
    k.est.weight_bytes = static_cast<double>(k.K * k.N) * 4;

    // When the first x of each K block is readable at its source PE.
    std::vector<int64_t> x0(static_cast<size_t>(Lk), 0);
    if (l == 0) std::fill(x0.begin(), x0.end(), S + 2);  // `send` at cycle 0, its own ramp
    else x0 = x0_next;

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
      const int64_t qw = 2 + static_cast<int64_t>(l);
      const int64_t Q = qw < static_cast<int64_t>(cfg.input_depth.size()) ? cfg.input_depth[static_cast<size_t>(qw)] : 1;
      const int64_t gap = std::max<int64_t>(0, S + 2 - Q);
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
      int64_t worst = 0;
      for (int64_t ln = 0; ln < lines; ++ln) {
        int64_t go = 0;  // every PE of the line has started this layer's load
        for (int64_t p = 0; p < along; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          const size_t i = static_cast<size_t>(py * k.w + px);
          if (l >= 1) go = std::max(go, wready_of[l - 1][i] + 1);
          if (l >= 2) go = std::max(go, compute_end_of[l - 2][i] + 1);
        }
        // The first wavelet enters the line when it is out of SwarmX and the PEs are loading (their
        // first op set up); the last one, lane_len - 1 wavelets and the boundary gaps later, or
        // when SwarmX delivers it.
        const int64_t t0 = std::max(first, go + S);
        const int64_t t_last = std::max(t0 + k.lane_len - 1 + (along - 1) * gap, supply_end);
        for (int64_t p = 0; p < along; ++p) {
          const int64_t px = k.k_on_columns ? p : ln, py = k.k_on_columns ? ln : p;
          // Readable at PE p (hops, ramp), taken, the op done, ldd picked and run (unblock,
          // activate the next load, ret).
          const int64_t t = t_last + (p + 1) * hop + 1 + 1 + 3;
          wready[static_cast<size_t>(py * k.w + px)] = t;
          worst = std::max(worst, t);
        }
      }
      k.est.weights_ready = worst;
      k.est.stream = k.lane_len + (along - 1) * gap;
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
        const int64_t st = std::max(x0[static_cast<size_t>(pk)] + d * hop, wready[i]);
        first_start = std::min(first_start, st);
        cend[i] = st + compute;
      }
    k.est.start = first_start == INT64_MAX ? 0 : first_start;

    // Reduce chains along K, one per N block: element e leaves position i at
    // max_j(T(j) + S + (i - j) * pass) + e; the last position's fadds is done B nb elements later.
    // Then bias and activation over B nb elements at the fp32 width, then the hand-off.
    const int64_t n_el = k.B * k.nb;
    int64_t end = 0, compute_end = 0, transfer = 0;
    std::vector<int64_t> next(static_cast<size_t>(Ln), 0);
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
      t += (S + cdiv(n_el, w32)) * (k.relu ? 2 : 1);  // bias, then relu
      end = std::max(end, t);
      transfer = std::max(transfer, t - tmax);
      // The next kernel's x: the chain end's yout (issue, setup, out queue) -- into the next
      // rectangle (pipelined: router, link, ramp) or to its own ramp (weight streaming, async).
      // fp16: fs2h converts y first (activate the task, then S + B nb / conversion width).
      const int64_t conv = c.fp16 ? S + cdiv(n_el, std::max<int64_t>(1, cfg.simd_convert)) : 0;
      next[static_cast<size_t>(pn)] = (ws ? t + S + 2 : t + S + pass) + conv;
    }
    k.est.compute_end = compute_end;
    k.est.end = end;
    k.est.transfer = transfer;
    x0_next = std::move(next);
    compute_end_of.push_back(std::move(cend));
    wready_of.push_back(std::move(wready));
  }
  // The run ends when the last chain end halts.
  c.predicted_cycles = c.kernels.empty() ? 0 : c.kernels.back().est.end + 1;
  c.predicted_s = static_cast<double>(c.predicted_cycles) / hz;
}

}  // namespace tessera::wafer
