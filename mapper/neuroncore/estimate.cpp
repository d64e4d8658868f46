#include "mapper/neuroncore/estimate.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <vector>

namespace tessera::neuroncore {

namespace {

// The schedule replay: when each kernel ends if the bundles issue as the compiler packed them.
// The compiler's own timing model of the core -- bundles in order, a bundle issuing when each of
// its compute instructions' unit is free and its operands are ready (a result read on another
// engine one isa.dependent_gap later), DMAs waiting in their queue and engine (dma.trigger_latency
// when triggered by another engine's result) at the cost table's transfer cost and no faster than
// HBM bandwidth -- on exact-overlap footprints of what each instruction reads and writes. It leaves
// out what the simulated core adds: clock edges (times here are continuous), HBM bandwidth shared
// between concurrent transfers, semaphores and branches (compiled programs have none); it keeps
// NeuronCore-v2's port conflicts, without which a bundle issues early, finds a DMA's operand not
// yet written and charges the trigger latency the core does not. docs/neuroncore-compiler.md
// "The estimator".
struct Replay {
  const CoreConfig& cfg;
  // Per kernel, what it asks of each engine (the compile report's breakdown and the bound).
  struct Load {
    std::array<double, kLanes> lane_s{};
    std::vector<double> engine_s;  // busy seconds per DMA engine
    std::vector<double> own_s;     // the same without weight prefetches (kQueuePrefetch)
    double hbm_bytes = 0, flops = 0;
    bool matmul = false;
  };
  std::vector<Load> loads;
  struct Pending {
    Footprint r;
    double end;
    bool write;
  };
  std::vector<Pending> pending;
  std::array<double, kLanes> unit_free{};
  double loader_free = 0;
  // NeuronCore-v2's shared ports (core.port_conflicts): until when vector and gpsimd hold the SBUF
  // port, vector and scalar the PSUM port.
  double vector_sbuf = 0, gpsimd_sbuf = 0, vector_psum = 0, scalar_psum = 0;
  static bool touches(const Instr& in, Space s) {
    for (const AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux})
      if (ap->present() && ap->space == s) return true;
    return false;
  }
  std::vector<double> queue_free, engine_free;

  explicit Replay(const CoreConfig& c)
      : cfg(c), queue_free(static_cast<size_t>(c.dma_engines * c.dma_queues_per_engine), 0.0), engine_free(static_cast<size_t>(c.dma_engines), 0.0) {}

  // When `in`'s operands are ready; raw: the latest wait is on a result.
  double ready(const Instr& in, bool& raw) const {
    double t = 0;
    raw = false;
    auto consider = [&](const AccessPattern& ap, bool is_write) {
      const Footprint r = footprint(ap);
      for (const auto& p : pending)
        if ((p.write || is_write) && p.end > t && p.r.overlaps(r)) {
          t = p.end;
          raw = p.write && !is_write;
        }
    };
    for (const AccessPattern* ap : {&in.src0, &in.src1})
      if (ap->present()) consider(*ap, false);
    if (in.aux.present()) consider(in.aux, in.op == Op::activation);
    if (in.dst.present()) consider(in.dst, true);
    return t;
  }
  void occupy(const Instr& in, double end) {
    for (const AccessPattern* ap : {&in.src0, &in.src1})
      if (ap->present()) pending.push_back({footprint(*ap), end, false});
    if (in.aux.present()) pending.push_back({footprint(in.aux), end, in.op == Op::activation});
    if (in.dst.present()) pending.push_back({footprint(in.dst), end, true});
  }
  double dma(const Instr& in, double issued, Load* load) {
    bool raw = false;
    double ts = std::max(issued, ready(in, raw));
    if (ts > issued) ts += cfg.dma_trigger_latency;
    int64_t bytes = 0, chunks = 0;
    dma_shape(in, bytes, chunks);
    const bool hbm = in.src0.space == Space::hbm || in.dst.space == Space::hbm;
    double end = ts;
    auto piece = [&](size_t q, int64_t rows, int64_t all_rows) {
      const size_t e = q % engine_free.size();
      const int64_t pb = bytes * rows / all_rows, pch = std::max<int64_t>(1, chunks * rows / all_rows);
      const double s0 = std::max({ts, queue_free[q], engine_free[e]});
      const double transfer = dma_transfer_seconds(pb, pch, cfg);
      if (load) {
        load->engine_s[e] += transfer;
        if (in.queue != kQueuePrefetch) load->own_s[e] += transfer;
      }
      double pe = s0 + transfer;
      if (hbm) pe = std::max(pe, s0 + static_cast<double>(pb) / cfg.hbm_bandwidth) + cfg.hbm_latency;
      queue_free[q] = engine_free[e] = pe;
      end = std::max(end, pe);
    };
    if (spread_queue(in.queue)) {
      const int64_t rows = std::max<int32_t>(1, in.src0.parts), engines = static_cast<int64_t>(engine_free.size());
      const int64_t groups = std::max<int64_t>(1, std::min(engines, rows / 8));
      const size_t base = engine_free.size() * static_cast<size_t>(-in.queue);
      for (int64_t g = 0; g < groups; ++g) piece(base + static_cast<size_t>(g), rows * (g + 1) / groups - rows * g / groups, rows);
    } else {
      piece(static_cast<size_t>(in.queue) % queue_free.size(), 1, 1);
    }
    if (load && hbm) load->hbm_bytes += static_cast<double>(bytes);
    occupy(in, end);
    return end;
  }

  // Per kernel, the time its last instruction ends (0 for a kernel with none); fills `loads`.
  std::vector<double> kernel_ends(const Program& p, size_t nk) {
    std::vector<double> ends(nk, 0.0);
    loads.assign(nk, Load{});
    for (Load& l : loads) l.engine_s = l.own_s = std::vector<double>(engine_free.size(), 0.0);
    double next_issue = 0;
    const double seq_cycle = 1.0 / lane_clock_hz(Lane::control, cfg);
    for (const Bundle& b : p.bundles) {
      double T = next_issue;
      pending.erase(std::remove_if(pending.begin(), pending.end(), [&](const Pending& q) { return q.end <= T; }), pending.end());
      for (int l = 0; l < kLanes; ++l) {
        const int32_t idx = b.slot[static_cast<size_t>(l)];
        const Lane lane = static_cast<Lane>(l);
        if (idx < 0 || lane == Lane::dma0 || lane == Lane::dma1) continue;
        const Instr& in = p.instrs[static_cast<size_t>(idx)];
        T = std::max(T, in.op == Op::load_stationary ? loader_free : unit_free[static_cast<size_t>(l)]);
        if (cfg.port_conflicts) {
          if (lane == Lane::vector && touches(in, Space::sbuf)) T = std::max(T, gpsimd_sbuf);
          if (lane == Lane::gpsimd && touches(in, Space::sbuf)) T = std::max(T, vector_sbuf);
          if (lane == Lane::vector && touches(in, Space::psum)) T = std::max(T, scalar_psum);
          if (lane == Lane::scalar && touches(in, Space::psum)) T = std::max(T, vector_psum);
        }
        bool raw = false;
        double dep = ready(in, raw);
        if (raw) dep += static_cast<double>(cfg.dependent_gap) / lane_clock_hz(lane, cfg);
        T = std::max(T, dep);
      }
      for (int l = 0; l < kLanes; ++l) {
        const int32_t idx = b.slot[static_cast<size_t>(l)];
        if (idx < 0) continue;
        const Instr& in = p.instrs[static_cast<size_t>(idx)];
        const Lane lane = static_cast<Lane>(l);
        const double hz = lane_clock_hz(lane, cfg);
        Load* load = in.kernel >= 0 && static_cast<size_t>(in.kernel) < nk ? &loads[static_cast<size_t>(in.kernel)] : nullptr;
        double end;
        if (in.op == Op::dma) {
          end = dma(in, T + 1.0 / hz, load);
          unit_free[static_cast<size_t>(l)] = T + 1.0 / hz;
        } else {
          const double busy = static_cast<double>(instr_cycles(in, cfg)) / hz;
          end = T + busy;
          if (load) {
            load->lane_s[static_cast<size_t>(l)] += busy;
            if (in.op == Op::multiply_moving) {
              load->flops += 2.0 * in.src0.parts * in.dst.parts * static_cast<double>(in.src0.free_elems());
              load->matmul = true;
            }
          }
          (in.op == Op::load_stationary ? loader_free : unit_free[static_cast<size_t>(l)]) = end;
          if (cfg.port_conflicts) {
            if (lane == Lane::gpsimd && touches(in, Space::sbuf)) gpsimd_sbuf = end;
            if (lane == Lane::scalar && touches(in, Space::psum)) scalar_psum = end;
            if (lane == Lane::vector && touches(in, Space::sbuf)) vector_sbuf = end;
            if (lane == Lane::vector && touches(in, Space::psum)) vector_psum = end;
          }
          occupy(in, end);
        }
        if (load) ends[static_cast<size_t>(in.kernel)] = std::max(ends[static_cast<size_t>(in.kernel)], end);
      }
      // A matmul needs its stationary loaded: the array waits for the loader.
      if (b.slot[0] >= 0 && p.instrs[static_cast<size_t>(b.slot[0])].op == Op::load_stationary) unit_free[0] = std::max(unit_free[0], loader_free);
      next_issue = T + seq_cycle;
    }
    return ends;
  }
};

}  // namespace

void estimate_kernels(Compiled& c, const CoreConfig& cfg) {
  const Program& p = c.program;
  const size_t nk = p.kernels.size();
  c.kernels.assign(nk, KernelEstimate{});
  // Kernels overlap (a kernel's loads start while the one before computes): like the simulated
  // kernel table, a kernel's time runs from the previous kernel's end to its own, so the kernel
  // times add up to the total.
  Replay replay(cfg);
  const std::vector<double> ends = replay.kernel_ends(p, nk);
  double previous_end = 0;
  for (size_t k = 0; k < nk; ++k) {
    const Replay::Load& a = replay.loads[k];
    KernelEstimate& e = c.kernels[k];
    e.name = p.kernels[k];
    e.op = a.matmul ? "matmul" : "elementwise";
    e.tensor_s = a.lane_s[static_cast<size_t>(Lane::tensor)];
    e.vector_s = a.lane_s[static_cast<size_t>(Lane::vector)];
    e.scalar_s = a.lane_s[static_cast<size_t>(Lane::scalar)];
    e.gpsimd_s = a.lane_s[static_cast<size_t>(Lane::gpsimd)];
    for (const double t : a.engine_s) e.dma_s = std::max(e.dma_s, t);
    for (const double t : a.own_s) e.own_dma_s = std::max(e.own_dma_s, t);
    e.hbm_s = a.hbm_bytes / cfg.hbm_bandwidth;
    const double compute = std::max({e.tensor_s, e.vector_s, e.scalar_s, e.gpsimd_s});
    e.bound = compute >= std::max(e.dma_s, e.hbm_s) ? "compute" : "memory";
    const double end = std::max(previous_end, ends[k]);
    e.seconds = end - previous_end;
    previous_end = end;
    e.flops = a.flops;
    e.bytes = a.hbm_bytes;
    e.tensor_utilisation = e.seconds > 0 ? e.tensor_s / e.seconds : 0;
  }
  c.predicted_s = previous_end;
}

std::string compile_report(const Compiled& c, const CoreConfig& cfg) {
  std::ostringstream os;
  char line[256];
  os << "tessera NeuronCore compile report (predicted by replaying the schedule: docs/neuroncore-compiler.md \"The estimator\")\n";
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
  if (!c.notes.empty()) os << "\n";
  for (const std::string& n : c.notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace tessera::neuroncore
