#include "mapper/neuroncore/estimate.hpp"

#include "isa/clock.hpp"
#include "isa/neuroncore/dma_engines.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace tessera::neuroncore {

namespace {

// The schedule replay: when each kernel ends if the bundles issue as the compiler packed them.
// The compiler's own timing model of the core -- bundles in order, one per sequencer cycle at most,
// a bundle issuing when each of its compute instructions' unit is free and its operands are ready
// (a result read on another engine one isa.dependent_gap later), each instruction starting at its
// engine's next clock edge (isa/clock.hpp, the core's femtosecond edges), DMAs in the engines'
// round-robin with HBM shared (isa/neuroncore/dma_engines.hpp, the core's arbitration;
// dma.trigger_latency when triggered by another engine's result) at the cost table's transfer
// cost -- on exact-overlap footprints of what each instruction reads and writes. It leaves out
// what the simulated core adds: semaphores and branches (compiled programs have none), and SystemC
// itself. docs/neuroncore-compiler.md "The estimator".
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
    Femtos end;
    bool write;
    int32_t op = -1;  // a DMA in flight (dma_ops): `end` not known yet
  };
  std::vector<Pending> pending;
  std::array<Femtos, kLanes> unit_free{};
  Femtos loader_free = 0;
  // NeuronCore-v2's shared ports (core.port_conflicts): until when vector and gpsimd hold the SBUF
  // port, vector and scalar the PSUM port.
  Femtos vector_sbuf = 0, gpsimd_sbuf = 0, vector_psum = 0, scalar_psum = 0;
  static bool touches(const Instr& in, Space s) {
    for (const AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux})
      if (ap->present() && ap->space == s) return true;
    return false;
  }
  DmaEngines engines;                            // the core's arbitration (isa/neuroncore/dma_engines.hpp)
  std::vector<std::vector<int32_t>> dma_ops;     // per DMA instruction: its pieces
  std::array<ClockDomain, kLanes> clocks;

  explicit Replay(const CoreConfig& c)
      : cfg(c), engines(c.dma_engines, c.dma_queues_per_engine, c.hbm_bandwidth, c.hbm_latency) {
    engines.reset(0);
    for (int l = 0; l < kLanes; ++l) clocks[static_cast<size_t>(l)] = ClockDomain(lane_clock_hz(static_cast<Lane>(l), c));
  }
  static double secs(Femtos t) { return static_cast<double>(t) * 1e-15; }
  static Femtos fs(double s) { return static_cast<Femtos>(std::llround(s * 1e15)); }

  Femtos op_end(int32_t op) {
    double e = 0;
    for (const int32_t id : dma_ops[static_cast<size_t>(op)]) e = std::max(e, engines.end(id));
    return fs(e);
  }
  bool op_finished(int32_t op) const {
    for (const int32_t id : dma_ops[static_cast<size_t>(op)])
      if (!engines.finished(id)) return false;
    return true;
  }
  // When `in`'s operands are ready; raw: the latest wait is on a result. With `after` (a DMA), the
  // DMAs in flight it waits for go there instead of being run to their ends.
  Femtos ready(const Instr& in, bool& raw, std::vector<int32_t>* after = nullptr) {
    Femtos t = 0;
    raw = false;
    auto consider = [&](const AccessPattern& ap, bool is_write) {
      const Footprint r = footprint(ap);
      for (auto& p : pending) {
        if (!(p.write || is_write) || !p.r.overlaps(r)) continue;
        if (p.op >= 0) {
          if (after) {  // a DMA waits for it in the engines
            for (const int32_t id : dma_ops[static_cast<size_t>(p.op)]) after->push_back(id);
            continue;
          }
          p.end = op_end(p.op);  // an instruction waits for it: nothing issues before it ends
          p.op = -1;
        }
        if (p.end > t) {
          t = p.end;
          raw = p.write && !is_write;
        }
      }
    };
    for (const AccessPattern* ap : {&in.src0, &in.src1})
      if (ap->present()) consider(*ap, false);
    if (in.aux.present()) consider(in.aux, in.op == Op::activation);
    if (in.dst.present()) consider(in.dst, true);
    return t;
  }
  void occupy(const Instr& in, Femtos end, int32_t op = -1) {
    for (const AccessPattern* ap : {&in.src0, &in.src1})
      if (ap->present()) pending.push_back({footprint(*ap), end, false, op});
    if (in.aux.present()) pending.push_back({footprint(in.aux), end, in.op == Op::activation, op});
    if (in.dst.present()) pending.push_back({footprint(in.dst), end, true, op});
  }
  // Submits the DMA's pieces to the engines; its index in dma_ops (its end is found when needed).
  int32_t dma(const Instr& in, Femtos issued, Load* load) {
    bool raw = false;
    std::vector<int32_t> after;
    const Femtos known = std::max(issued, ready(in, raw, &after));
    std::vector<int32_t> ids;
    for (const DmaEngines::Piece& pc : dma_pieces(in, cfg, secs(issued), secs(known), after)) {
      const auto e = static_cast<size_t>(pc.queue % cfg.dma_engines);
      if (load) {
        load->engine_s[e] += pc.work;
        if (in.queue != kQueuePrefetch) load->own_s[e] += pc.work;
        load->hbm_bytes += pc.hbm_bytes;
      }
      ids.push_back(engines.submit(pc));
    }
    const auto op = static_cast<int32_t>(dma_ops.size());
    dma_ops.push_back(std::move(ids));
    occupy(in, 0, op);
    return op;
  }

  // Per kernel, the time its last instruction ends (0 for a kernel with none); fills `loads`.
  std::vector<double> kernel_ends(const Program& p, size_t nk) {
    std::vector<Femtos> ends(nk, 0);
    loads.assign(nk, Load{});
    for (Load& l : loads) l.engine_s = l.own_s = std::vector<double>(static_cast<size_t>(cfg.dma_engines), 0.0);
    std::vector<std::pair<size_t, int32_t>> kernel_dmas;  // (kernel, DMA op): ends found at the end
    Femtos next_issue = 0;
    const ClockDomain& seq = clocks[static_cast<size_t>(Lane::control)];
    for (const Bundle& b : p.bundles) {
      Femtos T = next_issue;
      // Nothing issues before T: the engines run to it, and what they finished leaves the scoreboard.
      engines.advance(secs(T));
      for (Pending& q : pending)
        if (q.op >= 0 && op_finished(q.op)) {
          q.end = op_end(q.op);
          q.op = -1;
        }
      pending.erase(std::remove_if(pending.begin(), pending.end(), [&](const Pending& q) { return q.op < 0 && q.end <= T; }), pending.end());
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
        Femtos dep = ready(in, raw);
        const ClockDomain& ck = clocks[static_cast<size_t>(l)];
        if (raw) dep = ck.time_of(ck.cycle_at_or_after(dep) + cfg.dependent_gap);
        T = std::max(T, dep);
      }
      for (int l = 0; l < kLanes; ++l) {
        const int32_t idx = b.slot[static_cast<size_t>(l)];
        if (idx < 0) continue;
        const Instr& in = p.instrs[static_cast<size_t>(idx)];
        const Lane lane = static_cast<Lane>(l);
        const ClockDomain& ck = clocks[static_cast<size_t>(l)];
        const int64_t c0 = ck.cycle_at_or_after(T);
        Load* load = in.kernel >= 0 && static_cast<size_t>(in.kernel) < nk ? &loads[static_cast<size_t>(in.kernel)] : nullptr;
        if (in.op == Op::dma) {
          const Femtos issued = ck.time_of(c0 + 1);
          const int32_t op = dma(in, issued, load);
          unit_free[static_cast<size_t>(l)] = issued;
          if (load) kernel_dmas.push_back({static_cast<size_t>(in.kernel), op});
          continue;
        }
        const int64_t cycles = instr_cycles(in, cfg);
        const Femtos end = ck.time_of(c0 + cycles);
        if (load) {
          load->lane_s[static_cast<size_t>(l)] += static_cast<double>(cycles) / lane_clock_hz(lane, cfg);
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
        if (load) ends[static_cast<size_t>(in.kernel)] = std::max(ends[static_cast<size_t>(in.kernel)], end);
      }
      // A matmul needs its stationary loaded: the array waits for the loader.
      if (b.slot[0] >= 0 && p.instrs[static_cast<size_t>(b.slot[0])].op == Op::load_stationary) unit_free[0] = std::max(unit_free[0], loader_free);
      next_issue = seq.time_of(seq.cycle_at_or_after(T) + 1);
    }
    engines.drain();
    for (const auto& [k, op] : kernel_dmas) ends[k] = std::max(ends[k], op_end(op));
    std::vector<double> out(nk);
    for (size_t k = 0; k < nk; ++k) out[k] = secs(ends[k]);
    return out;
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
