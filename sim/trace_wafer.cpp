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

namespace {

// A wavelet stream from one group (a rectangle, or an input port) to another (a rectangle whose
// PEs receive it, or an output port) on one color.
struct StreamLink {
  int32_t from, to;
  int color;
  bool operator<(const StreamLink& o) const { return std::tie(from, to, color) < std::tie(o.from, o.to, o.color); }
};

// The streams between groups: for each group and color that put wavelets into the fabric in the
// run (FabricSummary::sent), the routes are followed from the group's routers (every switch
// position: a superset of what the run used) to the PEs and output ports they reach; the
// destinations that received wavelets on that color (FabricSummary::received) in another group
// are the links. Each router is visited once per (group, color).
std::vector<StreamLink> stream_links(const wafer::Fabric& fab) {
  const wafer::FabricSummary& sm = fab.summary();
  const wafer::LoadedLayout* L = fab.layout();
  std::set<StreamLink> out;
  if (!L || sm.sent.empty()) return {};
  const int64_t W = fab.width(), H = fab.height();
  const int32_t groups = sm.rects + static_cast<int32_t>(L->layout.ports.size());
  // Output port lanes by (router, side, color).
  std::map<std::tuple<int64_t, int64_t, int, int>, int32_t> out_lane;
  for (size_t p = 0; p < L->layout.ports.size(); ++p) {
    const auto& ps = L->layout.ports[p];
    if (ps.input) continue;
    for (int64_t k = 0; k < ps.length; ++k) out_lane[{ps.lane_x(k), ps.lane_y(k), static_cast<int>(ps.side), int{ps.color}}] = static_cast<int32_t>(p);
  }
  std::vector<uint32_t> seen(static_cast<size_t>(W * H), 0);
  uint32_t stamp = 0;
  std::vector<int64_t> stack;
  for (int32_t g = 0; g < groups; ++g)
    for (int c = 0; c < wafer::kMaxColors; ++c) {
      if (sm.sent[static_cast<size_t>(g) * wafer::kMaxColors + static_cast<size_t>(c)].count == 0) continue;
      ++stamp;
      stack.clear();
      auto push = [&](int64_t x, int64_t y) {
        const size_t i = static_cast<size_t>(y * W + x);
        if (seen[i] == stamp || !fab.route(x, y, c)) return;
        seen[i] = stamp;
        stack.push_back(static_cast<int64_t>(i));
      };
      if (g < sm.rects) {  // the rectangle's PEs that inject on the color
        const auto& r = L->layout.rects[static_cast<size_t>(g)];
        for (int64_t y = r.y; y < r.y + r.height; ++y)
          for (int64_t x = r.x; x < r.x + r.width; ++x)
            if (const wafer::Route* rt = fab.route(x, y, c); rt && (rt->rx_any() & wafer::dir_bit(wafer::Dir::RAMP))) push(x, y);
      } else {
        const auto& ps = L->layout.ports[static_cast<size_t>(g - sm.rects)];
        for (int64_t i = 0; i < ps.length; ++i) push(ps.lane_x(i), ps.lane_y(i));
      }
      auto reached = [&](int32_t to) {
        if (to != g && sm.received[static_cast<size_t>(to) * wafer::kMaxColors + static_cast<size_t>(c)].count > 0) out.insert({g, to, c});
      };
      while (!stack.empty()) {
        const int64_t i = stack.back();
        stack.pop_back();
        const int64_t x = i % W, y = i / W;
        const wafer::DirSet tx = fab.route(x, y, c)->tx_any();
        for (int d = 0; d < wafer::kDirs; ++d) {
          if (!(tx & (1u << d))) continue;
          const auto dir = static_cast<wafer::Dir>(d);
          if (dir == wafer::Dir::RAMP) {
            if (const int r = L->rect_at(x, y); r >= 0) reached(r);
            continue;
          }
          const int64_t nx = x + wafer::dir_dx(dir), ny = y + wafer::dir_dy(dir);
          if (nx < 0 || ny < 0 || nx >= W || ny >= H) {  // off the fabric: an output port's lane
            if (auto it = out_lane.find({x, y, d, c}); it != out_lane.end()) reached(sm.rects + it->second);
            continue;
          }
          if (const wafer::Route* nr = fab.route(nx, ny, c); nr && (nr->rx_any() & wafer::dir_bit(wafer::opposite(dir)))) push(nx, ny);
        }
      }
    }
  return {out.begin(), out.end()};
}

}  // namespace

namespace {

// The trace config's region `pes` (x, y, width, height; width and height default to 1).
struct PeRegion {
  int64_t x, y, w, h;
};
PeRegion pe_region(const json& cfg) {
  const json& r = cfg["pes"];
  return {r["x"].get<int64_t>(), r["y"].get<int64_t>(), r.value("width", int64_t{1}), r.value("height", int64_t{1})};
}

}  // namespace

void check_wafer_trace_pes(const json& cfg, const wafer::LoadedLayout& L) {
  if (!cfg.is_object() || !cfg.contains("pes")) return;
  const auto [px, py, pw, ph] = pe_region(cfg);
  const int64_t W = L.layout.width, H = L.layout.height;
  const std::string region = std::to_string(pw) + " x " + std::to_string(ph) + " PEs at (" + std::to_string(px) + "," + std::to_string(py) + ")";
  if (px + pw > W || py + ph > H)
    throw InputError("/trace/pes", "the region of " + region + " reaches beyond the layout's " + std::to_string(W) + " x " + std::to_string(H) + " PEs",
                     "give x + width <= " + std::to_string(W) + " and y + height <= " + std::to_string(H) + " in fabric coordinates, x east, y south");
  std::string rects;
  for (const auto& rect : L.layout.rects) {
    if (rect.program.empty()) continue;
    if (px < rect.x + rect.width && rect.x < px + pw && py < rect.y + rect.height && rect.y < py + ph) return;
    if (rects.size() < 200)
      rects += (rects.empty() ? "" : ", ") + rect.name + " " + std::to_string(rect.width) + " x " + std::to_string(rect.height) + " at (" + std::to_string(rect.x) + "," +
               std::to_string(rect.y) + ")";
  }
  throw InputError("/trace/pes", "the region of " + region + " holds no PE with a program", "pick PEs inside a rectangle of the layout: " + rects);
}

std::vector<std::pair<int32_t, int32_t>> wafer_trace_pes(const json& cfg, const wafer::LoadedLayout& L, size_t rect) {
  const std::string detail = cfg.is_object() ? cfg.value("detail", std::string("kernel")) : std::string("kernel");
  const auto& rc = L.layout.rects[rect];
  std::set<std::pair<int32_t, int32_t>> picked;  // (x, then y: the tracks' order)
  if (rc.program.empty() || detail == "summary") return {};
  auto add = [&](int64_t x, int64_t y) {
    if (L.program_at(x, y) != wafer::kNoProgram) picked.insert({static_cast<int32_t>(x), static_cast<int32_t>(y)});
  };
  const int64_t rx = rc.x, ry = rc.y, rw = rc.width, rh = rc.height;
  if (cfg.contains("pes")) {  // the user's region (check_wafer_trace_pes checked it before the run)
    const auto [px, py, pw, ph] = pe_region(cfg);
    for (int64_t y = std::max(py, ry); y < std::min(py + ph, ry + rh); ++y)
      for (int64_t x = std::max(px, rx); x < std::min(px + pw, rx + rw); ++x) add(x, y);
  } else if (detail == "pe") {  // (the first 64 cells, as before: cells without a program count)
    for (int64_t i = 0; i < std::min<int64_t>(64, rw * rh); ++i) add(rx + i % rw, ry + i / rw);
  } else {
    const int64_t x0 = rx, y0 = ry, x1 = rx + rw - 1, y1 = ry + rh - 1;
    for (const auto& [x, y] : {std::pair{x0, y0}, {x1, y0}, {x0, y1}, {x1, y1}, {(x0 + x1) / 2, (y0 + y1) / 2}}) add(x, y);
  }
  return {picked.begin(), picked.end()};
}

std::vector<std::pair<int32_t, int32_t>> wafer_trace_pes(const json& cfg, const wafer::LoadedLayout& L) {
  std::vector<std::pair<int32_t, int32_t>> all;
  for (size_t r = 0; r < L.layout.rects.size(); ++r)
    for (const auto& p : wafer_trace_pes(cfg, L, r)) all.push_back(p);
  return all;
}

TraceBuilder build_wafer_trace(const json& cfg, const wafer::LoadedLayout& L, const wafer::Fabric& fab, const std::string& name) {
  return build_wafer_trace(cfg, L, fab, name, nullptr, nullptr, 0.0);
}

TraceBuilder build_wafer_trace(const json& cfg, const wafer::LoadedLayout& L, const wafer::Fabric& fab, const std::string& name,
                               const wafer::MemoryX* mx, const wafer::SwarmX* sx, double t0_s, const std::vector<PredictedKernel>& predicted,
                               const std::vector<PredictedKernel>& simulated, const std::vector<PredictedKernel>& steps,
                               const std::vector<StepMark>& closures, double detail_offset_s) {
  const std::string detail = cfg.value("detail", std::string("kernel"));
  if (detail != "summary" && detail != "kernel" && detail != "instruction" && detail != "pe")
    throw InputError("/trace/detail", "unknown trace detail '" + detail + "'", "use summary, kernel, instruction or pe");
  TraceBuilder b;
  if (cfg.contains("max_bytes") && cfg["max_bytes"].is_number()) b.set_byte_budget(static_cast<size_t>(cfg["max_bytes"].get<double>()));
  const double hz = fab.clock().hz() > 0 ? static_cast<double>(fab.clock().hz()) : 1e9;
  const int64_t off_ns = std::llround(detail_offset_s * 1e9);
  auto ns = [&](int64_t cycle) { return off_ns + static_cast<int64_t>(std::llround(static_cast<double>(cycle) * 1e9 / hz)); };
  const wafer::FabricStats& st = fab.stats();

  const wafer::FabricSummary& sm = fab.summary();
  const std::vector<StreamLink> links = stream_links(fab);
  std::map<std::pair<int32_t, int>, std::vector<uint64_t>> flows_out, flows_in;  // (group, color) -> flow ids
  uint64_t next_flow = 1;
  for (const auto& l : links) {
    flows_out[{l.from, l.color}].push_back(next_flow);
    flows_in[{l.to, l.color}].push_back(next_flow++);
  }
  // The streams of a group (a rectangle or a port) that cross to another group: a "send cN" and a
  // "recv cN" thread each, with one slice from the first wavelet to the last.
  auto stream_tracks = [&](uint64_t proc, int32_t g, int32_t& tid_, const std::string& prefix) {
    for (int c = 0; c < wafer::kMaxColors; ++c) {
      const size_t k = static_cast<size_t>(g) * wafer::kMaxColors + static_cast<size_t>(c);
      for (const bool out : {true, false}) {
        auto& fl = out ? flows_out : flows_in;
        auto it = fl.find({g, c});
        if (it == fl.end()) continue;
        const wafer::Span& sp = out ? sm.sent[k] : sm.received[k];
        if (sp.count == 0) continue;
        const std::string nm = prefix + (out ? "send" : "recv") + " c" + std::to_string(c);
        const uint64_t t = b.thread(proc, nm, tid_++);
        b.slice(t, nm, ns(sp.first), std::max(ns(sp.last), ns(sp.first)), {{"wavelets", sp.count}, {"color", int64_t{c}}},
                out ? it->second : std::vector<uint64_t>{}, out ? std::vector<uint64_t>{} : it->second);
      }
    }
  };
  // Sampled PEs per rectangle.
  std::map<std::pair<int64_t, int64_t>, uint64_t> pe_track, pe_proc;
  int32_t pid = 1, tid = 1000;
  for (size_t r = 0; r < L.layout.rects.size(); ++r) {
    const auto& rect = L.layout.rects[r];
    const uint64_t proc = b.process("rect " + rect.name, pid++);
    const uint64_t k = b.thread(proc, "kernel", tid++);
    b.slice(k, name, ns(0), ns(st.cycles), {{"cycles", st.cycles}, {"width", int64_t{rect.width}}, {"height", int64_t{rect.height}}});
    for (const auto& ph : sm.phases) {  // (the phases of one rectangle are in task order)
      if (ph.rect != static_cast<int32_t>(r) || ph.span.count == 0) continue;
      const uint64_t t = b.thread(proc, "phase " + ph.task, tid++);
      b.slice(t, ph.task, ns(ph.span.first), std::max(ns(ph.span.last), ns(ph.span.first)),
              {{"cycles", ph.span.last - ph.span.first}, {"runs", ph.span.count}});
    }
    stream_tracks(proc, static_cast<int32_t>(r), tid, "");
    if (rect.program.empty() || detail == "summary") continue;
    for (const auto& [x, y] : wafer_trace_pes(cfg, L, r)) {
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
  // Ports with streams to or from the rectangles.
  if (!L.layout.ports.empty() && !links.empty()) {
    const uint64_t pp = b.process("ports", pid++);
    for (size_t i = 0; i < L.layout.ports.size(); ++i) stream_tracks(pp, sm.rects + static_cast<int32_t>(i), tid, "port " + L.layout.ports[i].name + " ");
  }
  // Counters over the whole fabric, at most ~1000 points each.
  const uint64_t fproc = b.process("fabric", pid++);
  auto series = [&](const std::string& cname, const std::string& unit, const std::vector<double>& per_bin, int64_t bin_cycles, double scale) {
    if (per_bin.empty()) return;
    const uint64_t c = b.counter(fproc, cname, unit);
    const size_t group = std::max<size_t>(1, (per_bin.size() + 999) / 1000);
    for (size_t i = 0; i < per_bin.size(); i += group) {
      double sum = 0;
      const size_t e = std::min(per_bin.size(), i + group);
      for (size_t k = i; k < e; ++k) sum += per_bin[k];
      b.counter_value(c, ns(static_cast<int64_t>(i) * bin_cycles), scale * sum / static_cast<double>(static_cast<int64_t>(e - i) * bin_cycles));
    }
    b.counter_value(c, ns(static_cast<int64_t>(per_bin.size()) * bin_cycles), 0.0);
  };
  auto counts = [](const wafer::BinSeries& bs) { return std::vector<double>(bs.count.begin(), bs.count.end()); };
  // PEs running a task, on average over each bin (every PE, from the summary).
  series("busy PEs", "count", sm.busy.integrals(), sm.busy.width, 1.0);
  series("wavelets delivered per 100 cycles", "count", counts(sm.delivered), sm.delivered.width, 100.0);
  // Link utilisation: router -> router hops over all directed links between neighbours.
  const double links_n = static_cast<double>(std::max<int64_t>(1, 2 * (fab.width() - 1) * fab.height() + 2 * fab.width() * (fab.height() - 1)));
  series("link utilisation %", "percent", counts(sm.hops), sm.hops.width, 100.0 / links_n);
  // With per-op records (detail kernel and above): PEs with a DSD operation in flight, counted once
  // per bin however many operations a PE has in flight there.
  // Bins of a multiple of the fabric's kActiveBin cycles, at most ~1000 of them.
  if (!fab.active_runs().empty()) {
    const uint64_t active = b.counter(fproc, "active PEs", "count");
    const int64_t span = std::max<int64_t>(1, st.cycles), ab = wafer::Fabric::kActiveBin;
    const int64_t per = std::max<int64_t>(1, (span + 1000 * ab - 1) / (1000 * ab)), bin = per * ab;
    std::vector<double> act(static_cast<size_t>(span / bin + 2), 0.0);
    for (const auto& pe : fab.active_runs()) {
      int64_t last = -1;  // the PE's last bin counted
      for (const auto& [f0, f1] : pe.runs)
        for (int64_t c = std::max(f0 / per, last + 1); c <= std::min(f1, span / ab) / per && c < static_cast<int64_t>(act.size()); ++c) {
          act[static_cast<size_t>(c)] += 1;
          last = c;
        }
    }
    for (size_t i = 0; i < act.size(); ++i) b.counter_value(active, ns(static_cast<int64_t>(i) * bin), act[i]);
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
