#include "sim/trace_neuroncore.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/cost_table.hpp"
#include "isa/units.hpp"
#include "models/neuroncore/core.hpp"
#include "models/neuroncore/memory.hpp"
#include "sim/console.hpp"
#include "sim/outdir.hpp"

namespace tessera::sim {

using nlohmann::json;
using namespace tessera::neuroncore;
using traces::Arg;
using traces::TraceBuilder;

namespace {

constexpr size_t kDefaultBudget = size_t{256} << 20;
constexpr int32_t kMeasuredPid = 1, kPredictedPid = 2;

// Thread ids, unique in the trace (Perfetto identifies threads by tid): pid * 1000 + the track's
// place in the display order; overflow tracks (see Lanes) get tid * 100 + n.
int32_t lane_tid(Lane l) {
  switch (l) {
    case Lane::tensor: return 1010;
    case Lane::vector: return 1020;
    case Lane::scalar: return 1030;
    case Lane::gpsimd: return 1040;
    case Lane::sync: return 1060;
    case Lane::control: return 1070;
    default: return 1050;  // dma lanes: tracks are per queue (kDmaTidBase + queue)
  }
}
constexpr int32_t kLoaderTid = 1011, kKernelsTid = 1001, kPredictedKernelsTid = 2001, kDmaTidBase = 1100;

// A logical track that spills onto "<name> #2", "#3", ... when slices would overlap (they should
// not: units are busy one instruction at a time; this only keeps a surprise from breaking nesting).
class Lanes {
 public:
  Lanes(TraceBuilder& b, uint64_t process) : b_(b), process_(process) {}
  // Declares the logical track `key` (creates its first thread track now, for the display order).
  void declare(int key, const std::string& name, int32_t tid) {
    Entry& l = lanes_[key];
    l.name = name;
    l.tid = tid;
    l.subs.push_back({b_.thread(process_, name, tid), INT64_MIN});
  }
  bool has(int key) const { return lanes_.count(key) > 0; }
  uint64_t place(int key, int64_t begin, int64_t end) {
    Entry& l = lanes_.at(key);
    for (auto& [uuid, last] : l.subs)
      if (last <= begin) {
        last = end;
        return uuid;
      }
    const int n = static_cast<int>(l.subs.size()) + 1;
    l.subs.push_back({b_.thread(process_, l.name + " #" + std::to_string(n), l.tid * 100 + n), end});
    return l.subs.back().first;
  }

 private:
  struct Entry {
    std::string name;
    int32_t tid = 0;
    std::vector<std::pair<uint64_t, int64_t>> subs;  // thread uuid, end of its last slice
  };
  TraceBuilder& b_;
  uint64_t process_;
  std::map<int, Entry> lanes_;
};

// Keys of logical tracks: lanes by index, the loader, DMA queues.
constexpr int kLoaderKey = 100, kDmaKeyBase = 1000;

std::string operands_of(const Instr& in, Lane lane) {
  const std::string s = disassemble(in, lane);
  const size_t colon = s.find(": ");
  if (colon == std::string::npos) return s;
  std::string rest = s.substr(colon + 2);
  const std::string op(op_name(in.op));
  if (rest.compare(0, op.size(), op) == 0) rest = rest.substr(op.size());
  const size_t first = rest.find_first_not_of(' ');
  return first == std::string::npos ? std::string() : rest.substr(first);
}

int64_t round_div(int64_t num, int64_t den) {  // nearest, halves away from zero
  return num >= 0 ? (num + den / 2) / den : -((-num + den / 2) / den);
}

// A "nice" bin width (1, 2, 5 x 10^k ns) giving at most `max_bins` bins over `span_ns`.
int64_t bin_width(int64_t span_ns, int64_t max_bins) {
  const int64_t want = std::max<int64_t>(1, (span_ns + max_bins - 1) / max_bins);
  for (int64_t p = 1;; p *= 10)
    for (const int64_t m : {1, 2, 5})
      if (m * p >= want) return m * p;
}

std::string fmt_size(size_t n) {
  char b[32];
  if (n < 1024) std::snprintf(b, sizeof b, "%zu B", n);
  else if (n < (size_t{1} << 20)) std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(n) / 1024.0);
  else std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / 1048576.0);
  return b;
}

}  // namespace

TraceBuilder build_neuroncore_trace(const json& cfg, const Program& prog, const NeuronCore& core,
                                    const std::vector<PredictedKernel>& predicted,
                                    const std::vector<PredictedKernel>& steps,
                                    const std::vector<StepMark>& closures, int64_t origin_fs,
                                    const std::vector<PredictedKernel>& phases) {
  const std::string detail = cfg.value("detail", std::string("kernel"));  // "summary" is "kernel" here
  if (detail != "summary" && detail != "kernel" && detail != "instruction" && detail != "pe")
    throw InputError("/trace/detail", "unknown trace detail '" + detail + "'", "use summary, kernel, instruction or pe");
  const bool per_instruction = detail != "kernel";
  const int64_t sample = cfg.value("sample", int64_t{1});
  if (sample < 1) throw InputError("/trace/sample", "sample must be at least 1 (keep 1 in N instruction slices)");
  size_t budget = kDefaultBudget;
  if (cfg.contains("max_bytes")) {
    const json& m = cfg["max_bytes"];
    std::optional<double> v;
    std::string why = "give a size such as 64MiB";
    if (m.is_number()) v = m.get<double>();
    else if (m.is_string()) {
      const QuantityParse q = parse_quantity(m.get<std::string>(), UnitKind::bytes);
      v = q.value;
      if (!q.error.empty()) why = q.error;
    }
    if (!v || *v < 0) throw InputError("/trace/max_bytes", "not a byte budget: " + m.dump(), why);
    budget = static_cast<size_t>(*v);
  }

  const auto& recs = core.records();
  const CoreStats& st = core.stats();
  const Femtos t0 = origin_fs >= 0 ? static_cast<Femtos>(origin_fs) : core.start_time();
  auto ns = [&](Femtos t) { return round_div(t - t0, 1'000'000); };
  const int64_t end_ns = ns(std::max(st.end_time, t0));

  TraceBuilder b;
  b.set_byte_budget(budget);
  const uint64_t proc = b.process("neuroncore core0", kMeasuredPid);
  Lanes lanes(b, proc);
  lanes.declare(-1, "kernels", kKernelsTid);

  // Which tracks the run uses, in display order.
  std::array<bool, kLanes> lane_used{};
  bool loader_used = false;
  std::map<int, bool> queues;
  for (const auto& r : recs) {
    const Instr& in = prog.instrs[static_cast<size_t>(r.instr)];
    if (in.op == Op::dma) queues[in.queue] = true;
    else if (in.op == Op::load_stationary && per_instruction) loader_used = true;  // kernel detail: on tensor
    else lane_used[static_cast<size_t>(r.lane)] = true;
  }
  for (const Lane l : {Lane::tensor, Lane::vector, Lane::scalar, Lane::gpsimd}) {
    if (lane_used[static_cast<size_t>(l)]) lanes.declare(static_cast<int>(l), std::string(lane_name(l)), lane_tid(l));
    if (l == Lane::tensor && loader_used) lanes.declare(kLoaderKey, "tensor loader", kLoaderTid);
  }
  for (const auto& [q, used] : queues)
    lanes.declare(kDmaKeyBase + q, spread_queue(static_cast<int16_t>(q)) ? "dma all engines, queue " + std::to_string(-q) : "dma q" + std::to_string(q),
                  kDmaTidBase + q);
  for (const Lane l : {Lane::sync, Lane::control})
    if (lane_used[static_cast<size_t>(l)]) lanes.declare(static_cast<int>(l), std::string(lane_name(l)), lane_tid(l));

  const uint64_t c_hbm = b.counter(proc, "HBM bandwidth (GB/s)", "GB/s");
  const uint64_t c_sbuf = b.counter(proc, "SBUF high-water (bytes/partition)", "bytes");
  const uint64_t c_psum = b.counter(proc, "PSUM high-water (bytes/partition)", "bytes");

  // The program as one slice on "kernels".
  std::string stem = std::filesystem::path(prog.source).stem().string();
  if (stem.empty()) stem = "program";
  int64_t n_instr = 0;
  for (const auto n : st.instructions) n_instr += n;
  b.slice(lanes.place(-1, ns(core.start_time()), end_ns), stem, ns(core.start_time()), end_ns,
          {{"bundles", st.bundles}, {"instructions", n_instr}, {"end_fs", static_cast<int64_t>(st.end_time - t0)}});

  // Steps and step closures (multi-step runs).
  if (!steps.empty()) {
    const uint64_t hp = b.process("host", kPredictedPid + 1);
    const uint64_t ht = b.thread(hp, "steps", kPredictedKernelsTid + 1);
    for (const auto& k : steps) {
      const int64_t s0 = std::llround(k.start_s * 1e9), s1 = std::max(s0, static_cast<int64_t>(std::llround(k.end_s * 1e9)));
      b.slice(ht, k.name, s0, s1, {{"seconds", k.end_s - k.start_s}});
    }
    for (const auto& m : closures) b.instant(ht, m.name, std::llround(m.t_s * 1e9), m.args);
    if (!phases.empty()) {
      const uint64_t pt = b.thread(hp, "phases", kPredictedKernelsTid + 2);
      for (const auto& k : phases) {
        const int64_t s0 = std::llround(k.start_s * 1e9), s1 = std::max(s0, static_cast<int64_t>(std::llround(k.end_s * 1e9)));
        b.slice(pt, k.name, s0, s1, {{"seconds", k.end_s - k.start_s}});
      }
    }
  }
  // The compiler's prediction.
  if (!predicted.empty()) {
    const uint64_t pp = b.process("predicted (compiler)", kPredictedPid);
    Lanes plan(b, pp);
    plan.declare(0, "kernels", kPredictedKernelsTid);
    for (const auto& k : predicted) {
      const int64_t kb = std::llround(k.start_s * 1e9), ke = std::max(kb, static_cast<int64_t>(std::llround(k.end_s * 1e9)));
      b.slice(plan.place(0, kb, ke), k.name, kb, ke, {{"predicted_s", k.end_s - k.start_s}});
    }
  }

  // Counters. Register values at each issue are replayed from the control instructions (records
  // come in issue order, the control lane last in its bundle) to place dynamic operands exactly.
  // Registers keep their values across programs: one the program never sets starts at the value
  // that makes the replay end on the core's final register file.
  {
    std::vector<std::pair<Femtos, int64_t>> sbuf_w, psum_w;
    auto replay = [&](RegFile regs, bool collect, std::array<bool, kRegs>& set) {
      for (const auto& r : recs) {
        const Instr& in = prog.instrs[static_cast<size_t>(r.instr)];
        if (collect && in.dst.present() && in.dst.space != Space::hbm) {
          const auto [lo, hi] = in.dst.free_byte_range();
          const int64_t top = CoreMemory::base_offset(in.dst, regs) + (hi - lo);
          (in.dst.space == Space::sbuf ? sbuf_w : psum_w).push_back({r.start, top});
        }
        const auto reg = static_cast<size_t>(std::max<int8_t>(in.reg, 0));
        switch (in.op) {
          case Op::set_reg:
            regs[reg] = static_cast<int64_t>(in.imm[0]);
            set[reg] = true;
            break;
          case Op::add_reg: regs[reg] += static_cast<int64_t>(in.imm[0]); break;
          case Op::dec_branch_nz: --regs[reg]; break;
          default: break;
        }
      }
      return regs;
    };
    std::array<bool, kRegs> set{};
    const RegFile from_zero = replay(RegFile{}, false, set);
    RegFile initial{};
    for (size_t i = 0; i < initial.size(); ++i)
      if (!set[i]) initial[i] = core.regs()[i] - from_zero[i];
    replay(initial, true, set);
    for (auto [writes, track] : {std::pair{&sbuf_w, c_sbuf}, std::pair{&psum_w, c_psum}}) {
      std::stable_sort(writes->begin(), writes->end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      int64_t hw = 0;
      b.counter_value(track, 0, 0);
      for (const auto& [t, top] : *writes)
        if (top > hw) {
          hw = top;
          b.counter_value(track, ns(t), static_cast<double>(hw));
        }
    }

    // HBM bandwidth: each HBM transfer's bytes spread evenly over its interval, in bins.
    const int64_t bin = bin_width(std::max<int64_t>(end_ns, 1), 1000);
    const Femtos bin_fs = bin * 1'000'000;
    const auto nbins = static_cast<size_t>(std::max<Femtos>((st.end_time - t0 + bin_fs - 1) / bin_fs, 1));
    std::vector<double> bytes_in(nbins, 0.0);
    for (const auto& r : recs) {
      const Instr& in = prog.instrs[static_cast<size_t>(r.instr)];
      if (in.op != Op::dma || (in.src0.space != Space::hbm && in.dst.space != Space::hbm)) continue;
      int64_t bytes = 0, chunks = 0;
      dma_shape(in, bytes, chunks);
      const Femtos s = r.start - t0, e = std::max(r.end - t0, s + 1);
      const double rate = static_cast<double>(bytes) / static_cast<double>(e - s);  // bytes per fs
      for (auto k = static_cast<size_t>(std::max<Femtos>(s, 0) / bin_fs); k < nbins; ++k) {
        const Femtos lo = std::max(s, static_cast<Femtos>(k) * bin_fs), hi = std::min(e, static_cast<Femtos>(k + 1) * bin_fs);
        if (lo >= e) break;
        if (hi > lo) bytes_in[k] += rate * static_cast<double>(hi - lo);
      }
    }
    double last = -1;
    for (size_t k = 0; k < nbins; ++k) {
      const double gbps = bytes_in[k] / static_cast<double>(bin);  // bytes per ns = GB/s
      if (gbps != last) b.counter_value(c_hbm, static_cast<int64_t>(k) * bin, gbps);
      last = gbps;
    }
    if (last != 0) b.counter_value(c_hbm, static_cast<int64_t>(nbins) * bin, 0);
  }

  if (!per_instruction) {
    // One summary slice per lane and DMA queue, from its first start to its last end.
    struct Span {
      Femtos lo = INT64_MAX, hi = INT64_MIN;
      int64_t n = 0;
    };
    std::map<int, Span> spans;
    for (const auto& r : recs) {
      const Instr& in = prog.instrs[static_cast<size_t>(r.instr)];
      Span& s = spans[in.op == Op::dma ? kDmaKeyBase + in.queue : static_cast<int>(r.lane)];
      s.lo = std::min(s.lo, r.start);
      s.hi = std::max(s.hi, r.end);
      ++s.n;
    }
    for (const auto& [key, s] : spans) {
      std::vector<Arg> args{{"instructions", s.n}};
      if (key < kDmaKeyBase && key > kDmaKeyBase - 64) {
        args = {{"transfers", s.n}, {"note", std::string("each split over all DMA engines")}};
      } else if (key >= kDmaKeyBase) {
        const auto q = static_cast<size_t>(key - kDmaKeyBase);
        args = {{"transfers", st.dma_queue_transfers[q]}, {"bytes", st.dma_queue_bytes[q]}};
      } else {
        const auto l = static_cast<size_t>(key);
        const ClockDomain& ck = core.clock(static_cast<Lane>(key));
        const double busy_s = static_cast<double>(st.busy_cycles[l]) * ck.period_s();
        const double span_s = static_cast<double>(s.hi - s.lo) / 1e15;
        args.push_back({"busy_cycles", st.busy_cycles[l]});
        args.push_back({"clock_hz", ck.hz()});
        args.push_back({"utilisation", span_s > 0 ? busy_s / span_s : 0.0});
      }
      const int64_t lo = ns(s.lo), hi = ns(s.hi);
      b.slice(lanes.place(key, lo, hi), stem, lo, hi, std::move(args));
    }
    return b;
  }

  // Per instruction. Flow ids: consumer record index + 1; a DMA slice lists all its consumers.
  std::vector<std::vector<uint64_t>> consumers(recs.size());
  std::vector<bool> kept(recs.size(), true);
  if (sample > 1) {
    std::map<int, int64_t> seen;
    for (size_t i = 0; i < recs.size(); ++i) {
      const Instr& in = prog.instrs[static_cast<size_t>(recs[i].instr)];
      const int key = in.op == Op::dma ? kDmaKeyBase + in.queue : in.op == Op::load_stationary ? kLoaderKey : static_cast<int>(recs[i].lane);
      kept[i] = seen[key]++ % sample == 0;
    }
  }
  for (size_t i = 0; i < recs.size(); ++i)
    if (recs[i].flow_from >= 0 && kept[i] && kept[static_cast<size_t>(recs[i].flow_from)])
      consumers[static_cast<size_t>(recs[i].flow_from)].push_back(i + 1);

  for (size_t i = 0; i < recs.size(); ++i) {
    if (!kept[i]) continue;
    const InstrRecord& r = recs[i];
    const Instr& in = prog.instrs[static_cast<size_t>(r.instr)];
    const ClockDomain& ck = core.clock(r.lane);
    const int64_t c_origin = ck.cycle_at_or_after(t0);
    const int64_t lo = ns(r.start), hi = ns(r.end);
    std::vector<Arg> args{{"opcode", std::string(op_name(in.op))},
                          {"operands", operands_of(in, r.lane)},
                          {"bundle", static_cast<int64_t>(r.bundle)},
                          {"line", static_cast<int64_t>(in.line)}};
    int key = static_cast<int>(r.lane);
    if (in.op == Op::dma) {
      key = kDmaKeyBase + in.queue;
      int64_t bytes = 0, chunks = 0;
      dma_shape(in, bytes, chunks);
      args.push_back({"queue", static_cast<int64_t>(in.queue)});
      args.push_back({"bytes", bytes});
      args.push_back({"direction", std::string(space_name(in.src0.space)) + "->" + std::string(space_name(in.dst.space))});
      args.push_back({"lane", std::string(lane_name(r.lane))});
    } else {
      if (in.op == Op::load_stationary) key = kLoaderKey;
      args.push_back({"cycles", r.cycles});
    }
    args.push_back({"start_cycle", ck.cycle_at_or_after(r.start) - c_origin});
    args.push_back({"end_cycle", ck.cycle_at_or_after(r.end) - c_origin});
    args.push_back({"clock_hz", ck.hz()});
    std::vector<uint64_t> in_flow;
    if (r.flow_from >= 0 && kept[static_cast<size_t>(r.flow_from)]) in_flow.push_back(i + 1);
    b.slice(lanes.place(key, lo, hi), std::string(op_name(in.op)), lo, hi, std::move(args), consumers[i], std::move(in_flow));
  }
  return b;
}

std::string write_trace_file(const json& cfg, const TraceBuilder& b, const std::string& out_dir) {
  const std::string format = cfg.value("format", std::string("perfetto"));
  if (format != "perfetto" && format != "json")
    throw InputError("/trace/format", "unknown trace format '" + format + "'", "use perfetto or json");
  const std::string data = format == "json" ? b.chrome_json() : b.perfetto_bytes();
  const std::string path = (std::filesystem::path(out_dir) / cfg.value("file", std::string("trace.pftrace"))).string();
  write_file_atomic(path, data);
  if (b.dropped()) Console::get().warn(b.warning());
  std::string note = "trace: " + shown_path(path) + ", " + fmt_size(data.size()) + ", " + std::to_string(b.slices()) + " slices, detail " +
                     cfg.value("detail", std::string("kernel"));
  if (format == "json") note += ", Chrome JSON";
  if (b.dropped()) note += ", dropped " + std::to_string(b.dropped()) + " (byte budget)";
  return note;
}

std::string write_neuroncore_trace(const json& cfg, const Program& prog, const NeuronCore& core,
                                   const std::vector<PredictedKernel>& predicted, const std::string& out_dir,
                                   const std::vector<PredictedKernel>& steps,
                                   const std::vector<StepMark>& closures, int64_t origin_fs,
                                   const std::vector<PredictedKernel>& phases) {
  return write_trace_file(cfg, build_neuroncore_trace(cfg, prog, core, predicted, steps, closures, origin_fs, phases), out_dir);
}

}  // namespace tessera::sim
