#include "sim/trace_wafer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "isa/error.hpp"
#include "isa/wafer/asm.hpp"
#include "models/wafer/fabric.hpp"
#include "models/wafer/weight_stream.hpp"

namespace tessera::sim {

using json = nlohmann::json;
using traces::Arg;
using traces::TraceBuilder;

TraceBuilder build_wafer_trace(const json& cfg, const wafer::LoadedLayout& L, const wafer::Fabric& fab, const std::string& name) {
  return build_wafer_trace(cfg, L, fab, name, nullptr, nullptr, 0.0);
}

TraceBuilder build_wafer_trace(const json& cfg, const wafer::LoadedLayout& L, const wafer::Fabric& fab, const std::string& name,
                               const wafer::MemoryX* mx, const wafer::SwarmX* sx, double t0_s, const std::vector<PredictedKernel>& predicted,
                               const std::vector<PredictedKernel>& simulated, const std::vector<PredictedKernel>& steps,
                               const std::vector<StepMark>& closures, double detail_offset_s) {
  const std::string detail = cfg.value("detail", std::string("kernel"));
  if (detail != "kernel" && detail != "instruction" && detail != "pe")
    throw InputError("/trace/detail", "unknown trace detail '" + detail + "'", "use kernel, instruction or pe");
  TraceBuilder b;
  if (cfg.contains("max_bytes") && cfg["max_bytes"].is_number()) b.set_byte_budget(static_cast<size_t>(cfg["max_bytes"].get<double>()));
  const double hz = fab.clock().hz() > 0 ? static_cast<double>(fab.clock().hz()) : 1e9;
  const int64_t off_ns = std::llround(detail_offset_s * 1e9);
  auto ns = [&](int64_t cycle) { return off_ns + static_cast<int64_t>(std::llround(static_cast<double>(cycle) * 1e9 / hz)); };
  const wafer::FabricStats& st = fab.stats();

  // Phases per rectangle, from every PE's task runs: the span of each task (its name) over the
  // rectangle's PEs -- e.g. a compiled layer's ld/onx/red/out, one per layer in weight streaming.
  std::map<std::pair<int, std::string>, std::pair<int64_t, int64_t>> phase;  // (rect, task) -> [first start, last end]
  for (const auto& tr : fab.task_records()) {
    const int r = L.rect_at(tr.x, tr.y);
    const wafer::Program* prog = fab.program(tr.x, tr.y);
    if (r < 0 || !prog || tr.task < 0 || tr.task >= static_cast<int32_t>(prog->tasks.size())) continue;
    auto [it, fresh] = phase.emplace(std::make_pair(r, prog->tasks[static_cast<size_t>(tr.task)].name), std::make_pair(tr.start, tr.end));
    if (!fresh) it->second = {std::min(it->second.first, tr.start), std::max(it->second.second, tr.end)};
  }
  // Sampled PEs per rectangle.
  std::map<std::pair<int64_t, int64_t>, uint64_t> pe_track, pe_proc;
  int32_t pid = 1, tid = 1000;
  for (size_t r = 0; r < L.layout.rects.size(); ++r) {
    const auto& rect = L.layout.rects[r];
    const uint64_t proc = b.process("rect " + rect.name, pid++);
    const uint64_t k = b.thread(proc, "kernel", tid++);
    b.slice(k, name, ns(0), ns(st.cycles), {{"cycles", st.cycles}, {"width", int64_t{rect.width}}, {"height", int64_t{rect.height}}});
    for (const auto& [key, span] : phase) {
      if (key.first != static_cast<int>(r)) continue;
      const uint64_t t = b.thread(proc, "phase " + key.second, tid++);
      b.slice(t, key.second, ns(span.first), std::max(ns(span.second), ns(span.first)), {{"cycles", span.second - span.first}});
    }
    if (rect.program.empty()) continue;
    std::set<std::pair<int64_t, int64_t>> pick;
    if (detail == "pe") {
      for (int64_t y = rect.y; y < rect.y + rect.height && pick.size() < 64; ++y)
        for (int64_t x = rect.x; x < rect.x + rect.width && pick.size() < 64; ++x) pick.insert({x, y});
    } else {
      const int64_t x0 = rect.x, y0 = rect.y, x1 = rect.x + rect.width - 1, y1 = rect.y + rect.height - 1;
      pick = {{x0, y0}, {x1, y0}, {x0, y1}, {x1, y1}, {(x0 + x1) / 2, (y0 + y1) / 2}};
    }
    for (const auto& [x, y] : pick)
      if (fab.program(x, y)) {
        pe_track[{x, y}] = b.thread(proc, "PE (" + std::to_string(x) + "," + std::to_string(y) + ")", tid++);
        pe_proc[{x, y}] = proc;
      }
  }
  // Task runs of the sampled PEs (before the ops: a task and an op it ends with may share begin and
  // end, and the task must be the parent). Their durations add up to the PE's busy cycles.
  for (const auto& tr : fab.task_records()) {
    auto it = pe_track.find({tr.x, tr.y});
    if (it == pe_track.end()) continue;
    const wafer::Program* prog = fab.program(tr.x, tr.y);
    const std::string tname = prog && tr.task >= 0 && tr.task < static_cast<int32_t>(prog->tasks.size())
                                  ? prog->tasks[static_cast<size_t>(tr.task)].name
                                  : std::string("task");
    b.slice(it->second, "task " + tname, ns(tr.start), std::max(ns(tr.end), ns(tr.start)),
            {{"cycles", tr.end - tr.start}, {"start_cycle", tr.start}});
  }
  // DSD operations of the sampled PEs (microthread ops overlap the main thread's and each other's:
  // a track per microthread).
  std::map<std::tuple<int64_t, int64_t, int>, uint64_t> async_track;
  // A microthread's next op can be issued in the cycle its previous op processed its last element
  // (the completion activates the next task at once), one cycle before that op's recorded end:
  // on the track each op ends where the next one on the same microthread starts.
  std::map<std::tuple<int64_t, int64_t, int>, std::vector<size_t>> per_mt;
  const auto& recs = fab.op_records();
  std::vector<int64_t> end_of(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    end_of[i] = recs[i].end;
    if (recs[i].async) per_mt[std::make_tuple(int64_t{recs[i].x}, int64_t{recs[i].y}, int{recs[i].thread})].push_back(i);
  }
  for (auto& [key, v] : per_mt) {
    std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t c) { return recs[a].start < recs[c].start; });
    for (size_t j = 0; j + 1 < v.size(); ++j) end_of[v[j]] = std::min(end_of[v[j]], recs[v[j + 1]].start);
  }
  for (size_t ri = 0; ri < recs.size(); ++ri) {
    const wafer::OpRecord& op = recs[ri];
    auto it = pe_track.find({op.x, op.y});
    if (it == pe_track.end()) continue;
    uint64_t track = it->second;
    if (op.async) {
      const auto key = std::make_tuple(int64_t{op.x}, int64_t{op.y}, int{op.thread});
      auto a = async_track.find(key);
      if (a == async_track.end())
        a = async_track
                .emplace(key, b.thread(pe_proc.at({op.x, op.y}),
                                       "PE (" + std::to_string(op.x) + "," + std::to_string(op.y) + ") async " + std::to_string(op.thread), tid++))
                .first;
      track = a->second;
    }
    const wafer::Program* prog = fab.program(op.x, op.y);
    std::string text = prog && op.instr >= 0 && op.instr < static_cast<int32_t>(prog->instrs.size())
                           ? wafer::disassemble(*prog, prog->instrs[static_cast<size_t>(op.instr)])
                           : std::string("?");
    std::string opname = text.substr(0, text.find(' '));
    b.slice(track, opname, ns(op.start), std::max(ns(end_of[ri]), ns(op.start)),
            {{"instruction", text}, {"elements", op.elements}, {"cycles", op.end - op.start}, {"start_cycle", op.start}});
  }
  // Counters over the whole fabric.
  const uint64_t fproc = b.process("fabric", pid++);
  const uint64_t active = b.counter(fproc, "active PEs", "count");
  const uint64_t deliv = b.counter(fproc, "wavelets delivered per 100 cycles", "count");
  const int64_t span = std::max<int64_t>(1, st.cycles);
  const int64_t bin = std::max<int64_t>(100, (span + 999) / 1000);
  std::vector<double> act(static_cast<size_t>(span / bin + 2), 0.0), del(act.size(), 0.0);
  // A PE counts once per bin however many operations it has in flight there.
  std::unordered_map<int64_t, int64_t> counted;  // PE -> last bin counted
  for (const auto& op : fab.op_records()) {
    const int64_t pe = int64_t{op.x} * 65536 + op.y;
    auto [it, fresh] = counted.emplace(pe, -1);
    for (int64_t c = std::max(op.start / bin, it->second + 1);
         c <= std::min<int64_t>(op.end, span) / bin && c < static_cast<int64_t>(act.size()); ++c) {
      act[static_cast<size_t>(c)] += 1;
      it->second = c;
    }
  }
  for (const auto& d : fab.deliveries())
    if (d.cycle / bin < static_cast<int64_t>(del.size())) del[static_cast<size_t>(d.cycle / bin)] += 100.0 / static_cast<double>(bin);
  for (size_t i = 0; i < act.size(); ++i) {
    b.counter_value(active, ns(static_cast<int64_t>(i) * bin), act[i]);
    b.counter_value(deliv, ns(static_cast<int64_t>(i) * bin), del[i]);
  }
  // Steps and step closures (multi-step runs).
  if (!steps.empty()) {
    const uint64_t hp = b.process("host", pid++);
    const uint64_t ht = b.thread(hp, "steps", tid++);
    for (const auto& st_ : steps) {
      const int64_t s0 = std::llround(st_.start_s * 1e9), s1 = std::max(s0, static_cast<int64_t>(std::llround(st_.end_s * 1e9)));
      b.slice(ht, st_.name, s0, s1, {{"seconds", st_.end_s - st_.start_s}});
    }
    for (const auto& m : closures) b.instant(ht, m.name, std::llround(m.t_s * 1e9), m.args);
  }
  // Link utilisation: router -> router hops over all directed links between neighbours, binned.
  if (!st.hop_bins.empty()) {
    const int64_t W = fab.width(), H = fab.height();
    const double links = static_cast<double>(std::max<int64_t>(1, 2 * (W - 1) * H + 2 * W * (H - 1)));
    const uint64_t lu = b.counter(fproc, "link utilisation %", "percent");
    const size_t n = st.hop_bins.size();
    const size_t group = std::max<size_t>(1, (n + 999) / 1000);
    const int64_t bin_cycles = static_cast<int64_t>(group) * wafer::FabricStats::kHopBin;
    for (size_t i = 0; i < n; i += group) {
      double hops = 0;
      for (size_t k = i; k < std::min(n, i + group); ++k) hops += static_cast<double>(st.hop_bins[k]);
      b.counter_value(lu, ns(static_cast<int64_t>(i) * wafer::FabricStats::kHopBin), 100.0 * hops / (links * static_cast<double>(bin_cycles)));
    }
    b.counter_value(lu, ns(static_cast<int64_t>(n) * wafer::FabricStats::kHopBin), 0.0);
  }
  // Kernels of a compiled run: simulated and predicted spans.
  const std::pair<const std::vector<PredictedKernel>*, const char*> spans[] = {{&simulated, "kernels (simulated)"}, {&predicted, "predicted (compiler)"}};
  for (const auto& [v, pname] : spans) {
    if (v->empty()) continue;
    const uint64_t p = b.process(pname, pid++);
    const uint64_t t = b.thread(p, "kernels", tid++);
    for (const auto& k : *v) {
      const int64_t kb = std::llround(k.start_s * 1e9), ke = std::max(kb, static_cast<int64_t>(std::llround(k.end_s * 1e9)));
      b.slice(t, k.name, kb, ke, {{"seconds", k.end_s - k.start_s}});
    }
  }
  // Weight streaming: MemoryX transfers and SwarmX tree passes, and their bandwidth over time.
  const std::vector<wafer::StreamTransfer> none;
  const auto& mxl = mx ? mx->transfers() : none;
  const auto& sxl = sx ? sx->transfers() : none;
  if (!mxl.empty() || !sxl.empty()) {
    auto rel_ns = [&](const sc_core::sc_time& t) { return static_cast<int64_t>(std::llround((t.to_seconds() - t0_s) * 1e9)); };
    int64_t end_ns = 1;
    for (const auto* log : {&mxl, &sxl})
      for (const auto& x : *log) end_ns = std::max(end_ns, rel_ns(x.end));
    const uint64_t wproc = b.process("weight streaming", pid++);
    const int64_t wbin = std::max<int64_t>(100, (end_ns + 499) / 500);  // ns per counter point
    const std::pair<const std::vector<wafer::StreamTransfer>*, const char*> logs[] = {{&mxl, "MemoryX"}, {&sxl, "SwarmX"}};
    for (const auto& [log, unit] : logs) {
      if (log->empty()) continue;
      const uint64_t track = b.thread(wproc, unit, tid++);
      const uint64_t bw = b.counter(wproc, std::string(unit) + " GB/s", "GB/s");
      std::vector<double> bytes(static_cast<size_t>(end_ns / wbin + 2), 0.0);
      for (const auto& x : *log) {
        const int64_t s0 = rel_ns(x.start), s1 = std::max(rel_ns(x.end), s0);
        b.slice(track, wafer::transfer_kind_name(x.kind), s0, s1, {{"bytes", x.bytes}, {"done_ns", rel_ns(x.done)}});
        // Spread the bytes evenly over the transfer's time (its own bandwidth), bin by bin.
        const double rate = static_cast<double>(x.bytes) / static_cast<double>(std::max<int64_t>(1, s1 - s0));
        for (int64_t k = std::max<int64_t>(0, s0 / wbin); k <= s1 / wbin && k < static_cast<int64_t>(bytes.size()); ++k) {
          const int64_t lo = std::max(s0, k * wbin), hi = std::min(s1, (k + 1) * wbin);
          if (hi > lo) bytes[static_cast<size_t>(k)] += rate * static_cast<double>(hi - lo);
          else if (s1 == s0) bytes[static_cast<size_t>(k)] += static_cast<double>(x.bytes);
        }
      }
      for (size_t k = 0; k < bytes.size(); ++k) b.counter_value(bw, static_cast<int64_t>(k) * wbin, bytes[k] / static_cast<double>(wbin));  // bytes/ns = GB/s
    }
  }
  return b;
}

}  // namespace tessera::sim
