#include "mapper/neuroncore/estimate.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace tessera::neuroncore {

void estimate_kernels(Compiled& c, const CoreConfig& cfg) {
  const Program& p = c.program;
  const size_t nk = p.kernels.size();
  c.kernels.assign(nk, KernelEstimate{});
  struct Acc {
    std::array<double, kLanes> lane_s{};
    std::map<int64_t, double> engine_s;
    double hbm_bytes = 0, flops = 0;
    int64_t dma_count = 0, stream_count = 0, refills = 0;
    std::vector<Footprint> read;         // SBUF read by the kernel's compute instructions (the recent ones)
    double stream_s = 0, serial_s = 0;
    bool computing = false;              // a compute instruction has been seen
    double prologue_s = 0;               // the longest load before the first compute instruction
    bool prologue_dependent = false;     // one of those loads reads an earlier kernel's output
    bool reads_previous = false;         // a load reads what the kernel just before wrote
    double last_tail_s = 0, last_store_s = 0;
    std::string op;
  };
  std::vector<Acc> acc(nk);
  std::vector<std::pair<int64_t, int64_t>> stored_ranges;  // HBM bytes written by earlier kernels
  auto hbm_range = [](const AccessPattern& ap) {
    const Footprint f = footprint(ap);
    return std::pair<int64_t, int64_t>{f.b_lo, f.b_hi};
  };
  int16_t current = -1;
  std::vector<std::pair<int64_t, int64_t>> pending_ranges, previous_ranges;
  for (const Instr& in : p.instrs) {
    if (in.kernel < 0) continue;
    if (in.kernel != current) {
      stored_ranges.insert(stored_ranges.end(), pending_ranges.begin(), pending_ranges.end());
      previous_ranges = std::move(pending_ranges);
      pending_ranges.clear();
      current = in.kernel;
    }
    Acc& a = acc[static_cast<size_t>(in.kernel)];
    if (in.op == Op::dma) {
      int64_t bytes = 0, chunks = 0;
      dma_shape(in, bytes, chunks);
      double t = 0;
      if (spread_queue(in.queue)) {
        // One piece per partition group on each engine (as the core splits it); its latency is a
        // piece's. Spread transfers are the kernel's streamed loads (or its stores).
        const int64_t rows = std::max<int32_t>(1, in.src0.parts);
        const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(cfg.dma_engines, rows / 8));
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t r = rows * (g + 1) / groups - rows * g / groups;
          const double tp = dma_transfer_seconds(bytes * r / rows, std::max<int64_t>(1, chunks * r / rows), cfg);
          a.engine_s[g] += tp;
          t = std::max(t, tp);
        }
      } else {
        t = dma_transfer_seconds(bytes, chunks, cfg);
        a.engine_s[in.queue % cfg.dma_engines] += t;
      }
      ++a.dma_count;
      if (in.queue < kStreamQueues && (!spread_queue(in.queue) || in.src0.space == Space::hbm)) {
        ++a.stream_count;
        a.stream_s += t;
        // A refill: a load into SBUF the kernel's compute has read before waits for that read.
        if (in.dst.space == Space::sbuf) {
          const Footprint f = footprint(in.dst);
          if (std::any_of(a.read.begin(), a.read.end(), [&](const Footprint& r) { return r.overlaps(f); })) ++a.refills;
        }
      }
      if (in.src0.space == Space::hbm || in.dst.space == Space::hbm) a.hbm_bytes += static_cast<double>(bytes);
      if (in.src0.space == Space::hbm) {
        const auto r = hbm_range(in.src0);
        for (const auto& w : previous_ranges)
          if (r.first < w.second && w.first < r.second) a.reads_previous = true;
      }
      if (!a.computing && in.src0.space == Space::hbm) {
        a.prologue_s = std::max(a.prologue_s, t);
        const auto r = hbm_range(in.src0);
        for (const auto& w : stored_ranges)
          if (r.first < w.second && w.first < r.second) a.prologue_dependent = true;
      }
      if (in.dst.space == Space::hbm) {
        a.last_store_s = t;  // the store of the last tile
        pending_ranges.push_back(hbm_range(in.dst));
      }
      continue;
    }
    a.computing = true;
    for (const AccessPattern* ap : {&in.src0, &in.src1, &in.aux})
      if (ap->present() && ap->space == Space::sbuf) {
        if (a.read.size() >= 256) a.read.erase(a.read.begin());
        a.read.push_back(footprint(*ap));
      }
    const Lane lane = op_lane(in.op);
    const double s = static_cast<double>(instr_cycles(in, cfg)) / lane_clock_hz(lane, cfg);
    a.lane_s[static_cast<size_t>(lane)] += s;
    // The vector/scalar/gpsimd steps of a tile consume each other's results: in a chain each one
    // also waits the hand-off gap (isa.dependent_gap).
    a.serial_s += s;
    if (lane != Lane::tensor) a.serial_s += static_cast<double>(cfg.dependent_gap) / lane_clock_hz(lane, cfg);
    if (in.op == Op::multiply_moving) {
      a.flops += 2.0 * in.src0.parts * in.dst.parts * static_cast<double>(in.src0.free_elems());
      a.op = "matmul";
    }
    if (in.op == Op::activation || in.op == Op::tensor_tensor) a.last_tail_s = s;
  }
  double total = 0, previous_drain = 0;
  for (size_t k = 0; k < nk; ++k) {
    Acc& a = acc[k];
    KernelEstimate& e = c.kernels[k];
    e.name = p.kernels[k];
    e.op = a.op.empty() ? "elementwise" : a.op;
    e.tensor_s = a.lane_s[static_cast<size_t>(Lane::tensor)];
    e.vector_s = a.lane_s[static_cast<size_t>(Lane::vector)];
    e.scalar_s = a.lane_s[static_cast<size_t>(Lane::scalar)];
    e.gpsimd_s = a.lane_s[static_cast<size_t>(Lane::gpsimd)];
    // DMA engines work in parallel, but no more transfers are in flight than the kernel has
    // buffers for its streamed tiles.
    // Each refill of a buffer waits for the instruction that read it and pays the trigger latency.
    for (const auto& [eng, t] : a.engine_s) e.dma_s = std::max(e.dma_s, t);
    // Only refills wait on compute: the streamed transfers beyond the first `inflight` (the bulk
    // queues' operand blocks and stores are not limited by the stream buffers).
    const int64_t inflight = std::max<int64_t>(1, k < c.stream_buffers.size() ? c.stream_buffers[k] : 1);
    const int64_t refills = a.refills;
    const double latency_bound = (a.stream_s + static_cast<double>(refills) * cfg.dma_trigger_latency) /
                                 static_cast<double>(inflight);
    e.dma_s = std::max(e.dma_s, latency_bound);
    e.hbm_s = a.hbm_bytes / cfg.hbm_bandwidth;
    // Engines overlap across tiles, but one tile's steps form a chain; with `inflight` tiles in
    // flight the chains overlap that many ways.
    const int64_t tiles_inflight = std::max<int64_t>(1, std::min<int64_t>(a.stream_count, k < c.stream_buffers.size() ? c.stream_buffers[k] : 1));
    const double compute = std::max({e.tensor_s, e.vector_s, e.scalar_s, e.gpsimd_s, a.serial_s / static_cast<double>(tiles_inflight)});
    const double memory = std::max(e.dma_s, e.hbm_s);
    e.bound = compute >= memory ? "compute" : "memory";
    // Prologue: the loads before the first compute instruction (in parallel: the longest). Then the
    // overlapped middle at the slowest engine's pace, then the last evacuation and store drain. A DMA that waits on another
    // engine (the last store on the evacuation; a first load on an earlier kernel's store) costs
    // dma.trigger_latency ([DMA] ~1300 ns semaphore to start) on top of its transfer.
    const double prologue = a.prologue_s + (a.prologue_dependent ? cfg.dma_trigger_latency : 0.0);
    // The first tile's loads come first (nothing computes before them); the rest overlaps.
    // A kernel made of independent pieces (the heads of a batched matmul) pays each piece's
    // prologue and drain, `overlap` pieces at a time.
    const auto [units, overlap] = k < c.pieces.size() ? c.pieces[k] : std::pair<int64_t, int64_t>{1, 1};
    const double edges = (prologue + a.last_tail_s + a.last_store_s + cfg.dma_trigger_latency) *
                         std::max(1.0, static_cast<double>(units) / static_cast<double>(std::max<int64_t>(1, overlap)));
    // A single-buffered operand's next loads wait for a fraction f of the step's compute (the first
    // release of its buffer): each step takes max(C, f C + L).
    const double f = k < c.serial_fraction.size() ? c.serial_fraction[k] : 0.0;
    e.seconds = std::max(compute, memory - a.prologue_s + f * compute) + edges;
    // A kernel that reads nothing the kernel before it wrote is scheduled beside it: its fixed
    // latencies (the prologue before its first compute, its drain) run under the previous kernel's drain.
    if (k > 0 && !a.reads_previous) e.seconds -= std::min(edges, previous_drain);
    previous_drain = a.last_tail_s + a.last_store_s + cfg.dma_trigger_latency;
    e.flops = a.flops;
    e.bytes = a.hbm_bytes;
    e.tensor_utilisation = e.seconds > 0 ? e.tensor_s / e.seconds : 0;
    total += e.seconds;
  }
  c.predicted_s = total;
}

std::string compile_report(const Compiled& c, const CoreConfig& cfg) {
  std::ostringstream os;
  char line[256];
  os << "tessera NeuronCore compile report (predicted by the analytical estimator)\n";
  std::snprintf(line, sizeof line, "tensor %.3g GHz, HBM %.4g GB/s, %lld DMA engines at %.4g GB/s\n\n", cfg.tensor_hz / 1e9,
                cfg.hbm_bandwidth / 1e9, static_cast<long long>(cfg.dma_engines), cfg.dma_engine_bandwidth / 1e9);
  os << line;
  std::snprintf(line, sizeof line, "%-28s %-12s %12s %14s %12s %8s %-8s\n", "kernel", "op", "predicted", "FLOPs", "HBM bytes",
                "PE util", "bound");
  os << line;
  for (const auto& k : c.kernels) {
    std::snprintf(line, sizeof line, "%-28.28s %-12s %10.3f us %14.4g %12.4g %7.1f%% %-8s\n", k.name.c_str(), k.op.c_str(),
                  k.seconds * 1e6, k.flops, k.bytes, k.tensor_utilisation * 100, k.bound.c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "\ntotal predicted %.3f us; SBUF high-water %lld bytes/partition; HBM %lld bytes\n",
                c.predicted_s * 1e6, static_cast<long long>(c.sbuf_high_water), static_cast<long long>(c.hbm_bytes));
  os << line;
  return os.str();
}

}  // namespace tessera::neuroncore
