#include "sim/trace_wafer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "isa/error.hpp"
#include "isa/wafer/asm.hpp"
#include "models/wafer/fabric.hpp"

namespace tessera::sim {

using json = nlohmann::json;
using traces::Arg;
using traces::TraceBuilder;

TraceBuilder build_wafer_trace(const json& cfg, const wafer::LoadedLayout& L, const wafer::Fabric& fab, const std::string& name) {
  const std::string detail = cfg.value("detail", std::string("kernel"));
  if (detail != "kernel" && detail != "instruction" && detail != "pe")
    throw InputError("/trace/detail", "unknown trace detail '" + detail + "'", "use kernel, instruction or pe");
  TraceBuilder b;
  if (cfg.contains("max_bytes") && cfg["max_bytes"].is_number()) b.set_byte_budget(static_cast<size_t>(cfg["max_bytes"].get<double>()));
  const double hz = fab.clock().hz() > 0 ? static_cast<double>(fab.clock().hz()) : 1e9;
  auto ns = [&](int64_t cycle) { return static_cast<int64_t>(std::llround(static_cast<double>(cycle) * 1e9 / hz)); };
  const wafer::FabricStats& st = fab.stats();

  // Sampled PEs per rectangle.
  std::map<std::pair<int64_t, int64_t>, uint64_t> pe_track, pe_proc;
  int32_t pid = 1, tid = 1000;
  for (size_t r = 0; r < L.layout.rects.size(); ++r) {
    const auto& rect = L.layout.rects[r];
    const uint64_t proc = b.process("rect " + rect.name, pid++);
    const uint64_t k = b.thread(proc, "kernel", tid++);
    b.slice(k, name, 0, ns(st.cycles), {{"cycles", st.cycles}, {"width", int64_t{rect.width}}, {"height", int64_t{rect.height}}});
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
  // DSD operations of the sampled PEs (microthread ops overlap the main thread's: their own track).
  std::map<std::pair<int64_t, int64_t>, uint64_t> async_track;
  for (const auto& op : fab.op_records()) {
    auto it = pe_track.find({op.x, op.y});
    if (it == pe_track.end()) continue;
    uint64_t track = it->second;
    if (op.async) {
      auto a = async_track.find({op.x, op.y});
      if (a == async_track.end())
        a = async_track
                .emplace(std::make_pair(op.x, op.y),
                         b.thread(pe_proc.at({op.x, op.y}), "PE (" + std::to_string(op.x) + "," + std::to_string(op.y) + ") async", tid++))
                .first;
      track = a->second;
    }
    const wafer::Program* prog = fab.program(op.x, op.y);
    std::string text = prog && op.instr >= 0 && op.instr < static_cast<int32_t>(prog->instrs.size())
                           ? wafer::disassemble(*prog, prog->instrs[static_cast<size_t>(op.instr)])
                           : std::string("?");
    std::string opname = text.substr(0, text.find(' '));
    b.slice(track, opname, ns(op.start), std::max(ns(op.end), ns(op.start)),
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
  return b;
}

}  // namespace tessera::sim
