// Traces: the protobuf wire encoder, the format-neutral builder (Perfetto protobuf and Chrome JSON),
// our reader, protoc against the committed proto subset, and a NeuronCore run rendered end to end.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <systemc>

#include "isa/fileio.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/params.hpp"
#include "models/neuroncore/core.hpp"
#include "isa/wafer/asm.hpp"
#include "models/wafer/fabric.hpp"
#include "sim/trace_neuroncore.hpp"
#include "sim/trace_wafer.hpp"
#include "traces/reader.hpp"
#include "traces/trace_builder.hpp"
#include "traces/wire.hpp"

using namespace tessera;
using namespace tessera::traces;

namespace {

std::filesystem::path scratch_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() / ("tessera_traces_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

// Runs protoc --decode on `file` against the committed subset; returns its exit status and output.
int protoc_decode(const std::filesystem::path& file, std::string& text) {
  const std::string src = TESSERA_SOURCE_DIR;
  const std::string out = file.string() + ".txt";
  const std::string cmd = std::string("\"") + TESSERA_PROTOC + "\" --decode=perfetto.protos.Trace -I \"" + src +
                          "/traces\" \"" + src + "/traces/perfetto_subset.proto\" < \"" + file.string() + "\" > \"" +
                          out + "\" 2>&1";
  const int rc = std::system(cmd.c_str());
  text = read_file(out);
  return rc;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// A small trace exercising every feature.
TraceBuilder sample_trace() {
  TraceBuilder b;
  const uint64_t p = b.process("machine", 7);
  const uint64_t t1 = b.thread(p, "engine a", 1);
  const uint64_t t2 = b.thread(p, "engine b", 2);
  const uint64_t c = b.counter(p, "occupancy", "bytes");
  b.slice(t1, "outer", 100, 1000, {{"count", int64_t{3}}, {"ratio", 0.25}, {"text", std::string("a \"quoted\" arg")}}, {42});
  b.slice(t1, "inner", 200, 300, {{"text", std::string("repeated value")}});
  b.slice(t1, "inner", 300, 500, {{"text", std::string("repeated value")}});
  b.slice(t1, "after", 1000, 1200);
  b.instant(t1, "mark", 250, {{"why", std::string("test")}});
  b.slice(t2, "consumer", 1500, 2500, {}, {}, {42});
  b.counter_value(c, 0, 0);
  b.counter_value(c, 100, 4096);
  b.counter_value(c, 2500, 1024.5);
  return b;
}

// A hand-written wafer layout (scenarios/wafer/micro/NAME.json) run once on a WSE-2 fabric that keeps
// both its per-op records and its summary (one elaboration: one per test case).
struct WaferRun {
  wafer::WaferConfig cfg = wafer::preset_config("wse2");
  wafer::LoadedLayout L;
  std::unique_ptr<wafer::Fabric> fab;
  // `trace_cfg` (non-null): the records are kept for its traced PEs only (sim::wafer_trace_pes), as a run does.
  explicit WaferRun(const std::string& name, const nlohmann::json* trace_cfg = nullptr) {
    models::set_fs_resolution();
    L = wafer::load_layout(std::string(TESSERA_SOURCE_DIR) + "/scenarios/wafer/micro/" + name + ".json", cfg);
    wafer::FabricOptions opt;
    opt.record = true;
    opt.summary = true;
    if (trace_cfg) opt.record_only = sim::wafer_trace_pes(*trace_cfg, L);
    fab = std::make_unique<wafer::Fabric>("fabric", cfg, opt);
    fab->load(L);
    fab->start();
    sc_core::sc_start();
    tessera::models::after_systemc();
    REQUIRE(fab->finished());
    REQUIRE_FALSE(fab->error());
  }
};

}  // namespace

TEST_CASE("traces: wire varints fixed64 and nested messages round trip", "[traces]") {
  wire::Writer inner;
  inner.bytes(2, "hello");
  inner.int64(3, -5);
  wire::Writer w;
  w.varint(1, 300);
  w.fixed64(47, 0x0102030405060708ull);
  w.dbl(5, 2.5);
  w.message(11, inner);
  CHECK(w.data().substr(0, 3) == std::string("\x08\xac\x02", 3));  // 300 = 0xac 0x02
  wire::Reader r(w.data());
  wire::Field f;
  REQUIRE(r.next(f));
  CHECK((f.number == 1 && f.value == 300));
  REQUIRE(r.next(f));
  CHECK((f.number == 47 && f.type == wire::kFixed64 && f.value == 0x0102030405060708ull));
  REQUIRE(r.next(f));
  CHECK(f.as_double() == 2.5);
  REQUIRE(r.next(f));
  REQUIRE(f.type == wire::kLengthDelimited);
  wire::Reader ri(f.bytes);
  REQUIRE(ri.next(f));
  CHECK(f.bytes == "hello");
  REQUIRE(ri.next(f));
  CHECK(f.as_int64() == -5);
  CHECK_FALSE(r.next(f));
  const std::string truncated = w.data().substr(0, w.size() - 2);
  wire::Reader bad(truncated);
  CHECK_THROWS_AS([&] { while (bad.next(f)) {} }(), std::runtime_error);
}

TEST_CASE("traces: builder round trip through the reader", "[traces]") {
  const TraceBuilder b = sample_trace();
  const std::string bytes = b.perfetto_bytes();
  const Trace t = read_perfetto(bytes);

  REQUIRE(t.tracks.size() == 4);
  const Track* p = t.find("machine");
  REQUIRE(p);
  CHECK(p->kind == Track::Kind::process);
  CHECK(p->pid == 7);
  const Track* a = t.find("engine a");
  REQUIRE(a);
  CHECK(a->kind == Track::Kind::thread);
  CHECK(a->parent == p->uuid);
  CHECK((a->pid == 7 && a->tid == 1));
  const Track* c = t.find("occupancy");
  REQUIRE(c);
  CHECK(c->kind == Track::Kind::counter);
  CHECK(c->unit == 3);  // UNIT_SIZE_BYTES
  CHECK(t.path(a->uuid) == "machine / engine a");

  // Names, times, nesting (depth) and args.
  REQUIRE(t.slices.size() == 5);
  std::map<std::string, std::vector<const Slice*>> by;
  for (const auto& s : t.slices) by[s.name].push_back(&s);
  const Slice& outer = *by.at("outer").at(0);
  CHECK((outer.begin_ns == 100 && outer.end_ns == 1000 && outer.depth == 0));
  REQUIRE(by.at("inner").size() == 2);
  CHECK((by["inner"][0]->begin_ns == 200 && by["inner"][0]->end_ns == 300 && by["inner"][0]->depth == 1));
  CHECK((by["inner"][1]->begin_ns == 300 && by["inner"][1]->end_ns == 500 && by["inner"][1]->depth == 1));
  CHECK((by.at("after").at(0)->begin_ns == 1000 && by["after"][0]->depth == 0));  // touching, not nested
  REQUIRE(outer.args.size() == 3);
  CHECK(outer.args[0] == Arg{"count", int64_t{3}});
  CHECK(outer.args[1] == Arg{"ratio", 0.25});
  CHECK(outer.args[2] == Arg{"text", std::string("a \"quoted\" arg")});
  CHECK(by["inner"][1]->arg("text"));

  // Flows: out of "outer", into "consumer" on the other thread.
  CHECK(outer.flow_out == std::vector<uint64_t>{42});
  CHECK(by.at("consumer").at(0)->flow_in == std::vector<uint64_t>{42});
  CHECK(t.track(by["consumer"][0]->track)->name == "engine b");

  REQUIRE(t.instants.size() == 1);
  CHECK((t.instants[0].name == "mark" && t.instants[0].ts_ns == 250));
  REQUIRE(t.counters.size() == 3);
  CHECK((t.counters[1].ts_ns == 100 && t.counters[1].value == 4096));
  CHECK(t.counters[2].value == 1024.5);

  // Interning: each event name, argument name and string value is written once.
  CHECK(count_of(bytes, "inner") == 1);
  CHECK(count_of(bytes, "repeated value") == 1);
  CHECK(count_of(bytes, "text") == 1);

  // Determinism: the same calls give the same bytes.
  CHECK(sample_trace().perfetto_bytes() == bytes);
  CHECK(sample_trace().chrome_json() == b.chrome_json());
}

TEST_CASE("traces: slices that do not nest on a track are rejected", "[traces]") {
  TraceBuilder b;
  const uint64_t t = b.thread(b.process("p", 1), "t", 1);
  b.slice(t, "a", 0, 100);
  b.slice(t, "b", 50, 150);
  CHECK_THROWS_WITH(b.perfetto_bytes(), Catch::Contains("do not nest"));
  CHECK_THROWS_AS(b.slice(t, "backwards", 10, 5), std::invalid_argument);
  // Perfetto identifies threads by tid and processes by pid: both must be unique in a trace.
  CHECK_THROWS_AS(b.thread(b.process("q", 2), "t again", 1), std::invalid_argument);
  CHECK_THROWS_AS(b.process("p again", 1), std::invalid_argument);
}

TEST_CASE("traces: the byte budget trims slices and warns", "[traces]") {
  TraceBuilder b;
  b.set_byte_budget(4000);
  const uint64_t t = b.thread(b.process("p", 1), "t", 1);
  for (int i = 0; i < 1000; ++i) b.slice(t, "op" + std::to_string(i % 7), i * 10, i * 10 + 5, {{"i", int64_t{i}}});
  CHECK(b.dropped() > 0);
  CHECK(b.dropped() + b.slices() == 1000);
  CHECK_THAT(b.warning(), Catch::Contains("dropped") && Catch::Contains("4000"));
  const std::string bytes = b.perfetto_bytes();
  CHECK(bytes.size() <= 4000);
  const Trace tr = read_perfetto(bytes);
  CHECK(tr.slices.size() == b.slices());
  CHECK(tr.slices.back().begin_ns < 9990);  // the tail was dropped, the head kept

  TraceBuilder unlimited;
  unlimited.slice(unlimited.thread(unlimited.process("p", 1), "t", 1), "x", 0, 1);
  CHECK(unlimited.dropped() == 0);
  CHECK(unlimited.warning().empty());
}

TEST_CASE("traces: Chrome JSON parses and has the events", "[traces]") {
  const TraceBuilder b = sample_trace();
  const std::string text = b.chrome_json();
  const nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j.contains("traceEvents"));
  std::map<std::string, int> phases;
  for (const auto& e : j["traceEvents"]) {
    ++phases[e["ph"].get<std::string>()];
    if (e["ph"] == "X" && e["name"] == "consumer") {
      CHECK(e["ts"].get<double>() == Approx(1.5));  // us
      CHECK(e["dur"].get<double>() == Approx(1.0));
      CHECK((e["pid"] == 7 && e["tid"] == 2));
    }
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 1) CHECK(e["args"]["name"] == "engine a");
    if (e["ph"] == "C") CHECK(e["name"] == "occupancy");
  }
  CHECK(phases["X"] == 5);
  CHECK(phases["i"] == 1);
  CHECK(phases["C"] == 3);
  CHECK(phases["s"] == 1);
  CHECK(phases["f"] == 1);
  CHECK(phases["M"] == 6);  // names and sort order of 1 process + 2 threads

  // Our reader reads it back like the protobuf form.
  const Trace tj = read_chrome_json(text);
  const Trace tp = read_perfetto(b.perfetto_bytes());
  REQUIRE(tj.slices.size() == tp.slices.size());
  for (size_t i = 0; i < tj.slices.size(); ++i) {
    CHECK(tj.slices[i].name == tp.slices[i].name);
    CHECK(tj.slices[i].begin_ns == tp.slices[i].begin_ns);
    CHECK(tj.slices[i].end_ns == tp.slices[i].end_ns);
    CHECK(tj.slices[i].depth == tp.slices[i].depth);
    CHECK(tj.slices[i].flow_out == tp.slices[i].flow_out);
    CHECK(tj.slices[i].flow_in == tp.slices[i].flow_in);
  }
  CHECK(tj.counters.size() == 3);
}

TEST_CASE("traces: protoc decodes a builder trace against the committed subset", "[traces]") {
  const auto dir = scratch_dir("protoc");
  const auto file = dir / "sample.pftrace";
  write_file_atomic(file.string(), sample_trace().perfetto_bytes());
  std::string text;
  const int rc = protoc_decode(file, text);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(count_of(text, "track_descriptor") == 4);
  CHECK(count_of(text, "type: TYPE_SLICE_BEGIN") == 5);
  CHECK(count_of(text, "type: TYPE_SLICE_END") == 5);
  CHECK(count_of(text, "type: TYPE_COUNTER") == 3);
  CHECK(count_of(text, "type: TYPE_INSTANT") == 1);
  CHECK_THAT(text, Catch::Contains("process_name: \"machine\"") && Catch::Contains("thread_name: \"engine b\"") &&
                       Catch::Contains("event_names") && Catch::Contains("flow_ids: 42") &&
                       Catch::Contains("terminating_flow_ids: 42") && Catch::Contains("unit: UNIT_SIZE_BYTES"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("traces: summary lists tracks busy time counters and top slices", "[traces]") {
  const std::string s = summarize(read_perfetto(sample_trace().perfetto_bytes()));
  INFO(s);
  CHECK_THAT(s, Catch::Contains("5 slices") && Catch::Contains("1 flows") && Catch::Contains("machine / engine a") &&
                    Catch::Contains("machine / occupancy") && Catch::Contains("top slices by time"));
  // engine a is busy 100..1200 (outer and after; inner is nested inside outer): 1.100 us.
  CHECK_THAT(s, Catch::Contains("1.100 us"));
}

TEST_CASE("traces: a NeuronCore gemm256 run renders lanes queues counters and flows", "[traces][neuroncore]") {
  using namespace tessera::neuroncore;
  models::set_fs_resolution();
  DiagnosticList d;
  const TargetDesc* td = target_of_preset("trn1");
  const CoreConfig cfg = CoreConfig::from(ParamSet::resolve(*td, *td->find_preset("trn1"), {}, d));
  const Program prog = assemble_file(std::string(TESSERA_SOURCE_DIR) + "/scenarios/neuroncore/micro/gemm256_bf16.s");
  validate(prog, cfg);
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(prog);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.finished());
  REQUIRE_FALSE(core.error());
  const CoreStats& st = core.stats();
  const auto& recs = core.records();

  const std::vector<sim::PredictedKernel> predicted{{"gemm256_bf16", 0.0, 4e-6}};
  const TraceBuilder b = sim::build_neuroncore_trace({{"detail", "instruction"}}, prog, core, predicted);
  const std::string bytes = b.perfetto_bytes();
  const Trace t = read_perfetto(bytes);
  const std::string summary = summarize(t);
  INFO(summary);
  CHECK_THAT(summary, Catch::Contains("neuroncore core0 / tensor") && Catch::Contains("multiply_moving") &&
                          Catch::Contains("neuroncore core0 / dma q3"));
  const Track* proc = t.find("neuroncore core0");
  REQUIRE(proc);
  REQUIRE(t.find("predicted (compiler)"));

  // A track per used lane and DMA queue; slice durations per lane sum to its busy cycles.
  std::map<std::string, std::pair<int64_t, size_t>> per_track;  // name -> (sum of durations, slices)
  for (const auto& s : t.slices) {
    const Track* tk = t.track(s.track);
    REQUIRE(tk);
    if (tk->parent != proc->uuid) continue;
    per_track[tk->name].first += s.dur_ns();
    ++per_track[tk->name].second;
  }
  std::array<bool, kLanes> used{};
  for (const auto& r : recs) used[static_cast<size_t>(r.lane)] = true;
  for (int l = 0; l < kLanes; ++l) {
    const Lane lane = static_cast<Lane>(l);
    if (!used[static_cast<size_t>(l)] || lane == Lane::dma0 || lane == Lane::dma1) continue;
    const std::string name(lane_name(lane));
    INFO("lane " << name);
    REQUIRE(t.find(name, proc->uuid));
    auto [sum, n] = per_track[name];
    if (lane == Lane::tensor) {  // load_stationary runs on the loader, beside the array
      REQUIRE(t.find("tensor loader", proc->uuid));
      sum += per_track["tensor loader"].first;
      n += per_track["tensor loader"].second;
    }
    CHECK(static_cast<int64_t>(n) == st.instructions[static_cast<size_t>(l)]);
    const double busy_ns = static_cast<double>(st.busy_cycles[static_cast<size_t>(l)]) * 1e9 / static_cast<double>(core.clock(lane).hz());
    CHECK(std::fabs(static_cast<double>(sum) - busy_ns) <= static_cast<double>(n) + 1e-9);
  }
  size_t queues = 0;
  for (size_t q = 0; q < st.dma_queue_transfers.size(); ++q) {
    if (!st.dma_queue_transfers[q]) continue;
    ++queues;
    const std::string name = "dma q" + std::to_string(q);
    INFO(name);
    REQUIRE(t.find(name, proc->uuid));
    CHECK(static_cast<int64_t>(per_track[name].second) == st.dma_queue_transfers[q]);
  }
  CHECK(queues == 4);  // gemm256 uses queues 0..3

  // Flows: from a DMA transfer to each instruction reading its data, which starts after it ends.
  std::map<uint64_t, const Slice*> src, dst;
  for (const auto& s : t.slices) {
    for (const uint64_t id : s.flow_out) src[id] = &s;
    for (const uint64_t id : s.flow_in) dst[id] = &s;
  }
  size_t expected_flows = 0;
  for (const auto& r : recs) expected_flows += r.flow_from >= 0;
  CHECK(expected_flows > 0);
  CHECK(dst.size() == expected_flows);
  for (const auto& [id, to] : dst) {
    REQUIRE(src.count(id));
    const Slice* from = src[id];
    CHECK(from->name == "dma");
    CHECK_THAT(t.track(from->track)->name, Catch::StartsWith("dma q"));
    CHECK(to->begin_ns >= from->end_ns);
  }

  // Args: opcode, operands, cycles in the lane clock.
  bool saw_matmul = false;
  for (const auto& s : t.slices) {
    if (s.name != "multiply_moving") continue;
    saw_matmul = true;
    REQUIRE(s.arg("operands"));
    CHECK_THAT(std::get<std::string>(s.arg("operands")->value), Catch::Contains("ps.fp32[0:128]"));
    const int64_t cycles = std::get<int64_t>(s.arg("cycles")->value);
    CHECK(cycles == 256);
    CHECK(std::get<int64_t>(s.arg("end_cycle")->value) - std::get<int64_t>(s.arg("start_cycle")->value) == cycles);
  }
  CHECK(saw_matmul);

  // Counters: high-water marks end at the core's figures; HBM bandwidth integrates to the bytes moved.
  auto series = [&](const std::string& name) {
    const Track* c = t.find(name, proc->uuid);
    REQUIRE(c);
    CHECK(c->kind == Track::Kind::counter);
    std::vector<CounterPoint> v;
    for (const auto& p : t.counters)
      if (p.track == c->uuid) v.push_back(p);
    REQUIRE_FALSE(v.empty());
    return v;
  };
  CHECK(series("SBUF high-water (bytes/partition)").back().value == static_cast<double>(st.sbuf_high_water));
  CHECK(series("PSUM high-water (bytes/partition)").back().value == static_cast<double>(st.psum_high_water));
  const auto hbm = series("HBM bandwidth (GB/s)");
  CHECK(hbm.size() <= 1002);
  double moved = 0;
  for (size_t i = 0; i + 1 < hbm.size(); ++i) moved += hbm[i].value * static_cast<double>(hbm[i + 1].ts_ns - hbm[i].ts_ns);
  CHECK(moved == Approx(static_cast<double>(st.hbm_read_bytes + st.hbm_write_bytes)).epsilon(1e-6));

  // The predicted process carries the compiler's kernel.
  bool saw_predicted = false;
  for (const auto& s : t.slices)
    if (t.track(s.track)->parent == t.find("predicted (compiler)")->uuid) {
      saw_predicted = true;
      CHECK((s.name == "gemm256_bf16" && s.begin_ns == 0 && s.end_ns == 4000));
    }
  CHECK(saw_predicted);

  // detail = kernel: one summary slice per lane and queue, busy cycles in its args.
  const Trace k = read_perfetto(sim::build_neuroncore_trace({{"detail", "kernel"}}, prog, core, {}).perfetto_bytes());
  const Track* kt = k.find("tensor");
  REQUIRE(kt);
  size_t tensor_slices = 0;
  for (const auto& s : k.slices)
    if (s.track == kt->uuid) {
      ++tensor_slices;
      CHECK(std::get<int64_t>(s.arg("busy_cycles")->value) == st.busy_cycles[0]);
    }
  CHECK(tensor_slices == 1);
  CHECK(k.slices.size() < t.slices.size());

  // Written to disk: protoc decodes the file; the JSON fallback reads back with the same slices.
  const auto dir = scratch_dir("nc");
  const std::string note = sim::write_neuroncore_trace({{"file", "trace.pftrace"}, {"detail", "instruction"}}, prog, core,
                                                       predicted, dir.string());
  CHECK_THAT(note, Catch::Contains("trace.pftrace") && Catch::Contains("slices"));
  WARN("gemm256_bf16 instruction trace: " << note << " (" << bytes.size() << " bytes)");
  CHECK(read_file((dir / "trace.pftrace").string()) == bytes);
  std::string text;
  const int rc = protoc_decode(dir / "trace.pftrace", text);
  INFO(text.substr(0, 2000));
  REQUIRE(rc == 0);
  CHECK(count_of(text, "type: TYPE_SLICE_BEGIN") == t.slices.size());
  sim::write_neuroncore_trace({{"file", "trace.json"}, {"detail", "instruction"}, {"format", "json"}}, prog, core, predicted,
                              dir.string());
  const Trace tj = read_trace_file((dir / "trace.json").string());
  CHECK(tj.slices.size() == t.slices.size());
  CHECK(read_trace_file((dir / "trace.pftrace").string()).slices.size() == t.slices.size());
  if (!std::getenv("TESSERA_KEEP_TRACES")) std::filesystem::remove_all(dir);  // set it to look at the files

  // Sampling keeps 1 in N instruction slices per track.
  const TraceBuilder sampled = sim::build_neuroncore_trace({{"detail", "instruction"}, {"sample", 4}}, prog, core, {});
  CHECK(sampled.slices() < b.slices());
  // A byte budget (a number or a size with a unit) trims the instruction slices.
  const TraceBuilder small = sim::build_neuroncore_trace({{"detail", "instruction"}, {"max_bytes", "3KiB"}}, prog, core, {});
  CHECK(small.dropped() > 0);
  CHECK(small.perfetto_bytes().size() <= 3072);
  CHECK_THROWS_AS(sim::build_neuroncore_trace({{"max_bytes", "3GHz"}}, prog, core, {}), InputError);
}

// A wafer run rendered: per sampled PE, task slices whose durations add up to the PE's busy
// cycles (within 1 ns of rounding per slice), DSD ops nested inside them, and the fabric counters.
TEST_CASE("traces: a wafer GEMV run renders task slices that sum to each PE's busy cycles", "[traces][wafer]") {
  using namespace tessera::wafer;
  const WaferRun run("gemv_8x8");
  const WaferConfig& cfg = run.cfg;
  const LoadedLayout& L = run.L;
  const Fabric& fab = *run.fab;
  const TraceBuilder b = sim::build_wafer_trace({{"detail", "pe"}}, L, fab, "gemv_8x8");
  const Trace t = read_perfetto(b.perfetto_bytes());
  INFO(summarize(t));
  const Track* proc = t.find("rect grid");
  REQUIRE(proc);
  const double ns_per_cycle = 1e9 / cfg.clock_hz;
  int checked = 0;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      const Track* tk = t.find("PE (" + std::to_string(x) + "," + std::to_string(y) + ")", proc->uuid);
      REQUIRE(tk);
      int64_t sum = 0, tasks = 0, ops = 0;
      for (const auto& s : t.slices) {
        if (s.track != tk->uuid) continue;
        if (s.name.rfind("task ", 0) == 0) {
          CHECK(s.depth == 0);
          sum += s.dur_ns();
          ++tasks;
        } else {
          CHECK(s.depth == 1);  // every DSD op inside its task
          ++ops;
        }
      }
      INFO("PE (" << x << "," << y << ")");
      CHECK(tasks > 0);
      CHECK(ops > 0);
      CHECK(std::fabs(static_cast<double>(sum) - static_cast<double>(fab.busy_cycles(x, y)) * ns_per_cycle) <= static_cast<double>(tasks));
      ++checked;
    }
  CHECK(checked == 64);
  REQUIRE(t.find("fabric"));
  CHECK(t.find("active PEs", t.find("fabric")->uuid));
}

// trace.pes: the PEs of the region are the traced ones (at detail pe and instruction alike), not
// the default sample; a region off the layout, or one holding no PE with a program, is an
// InputError at /trace/pes before a run.
TEST_CASE("traces: a wafer trace records the PEs of the region trace.pes", "[traces][wafer]") {
  using namespace tessera::wafer;
  using json = nlohmann::json;
  const WaferRun run("gemv_8x8");
  const json region = {{"x", 2}, {"y", 3}, {"width", 3}, {"height", 2}};
  for (const char* detail : {"pe", "instruction"}) {
    const json cfg = {{"detail", detail}, {"pes", region}};
    REQUIRE_NOTHROW(sim::check_wafer_trace_pes(cfg, run.L));
    const Trace t = read_perfetto(sim::build_wafer_trace(cfg, run.L, *run.fab, "gemv_8x8").perfetto_bytes());
    INFO(detail << "\n" << summarize(t));
    const Track* proc = t.find("rect grid");
    REQUIRE(proc);
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const bool in = x >= 2 && x < 5 && y >= 3 && y < 5;
        const Track* tk = t.find("PE (" + std::to_string(x) + "," + std::to_string(y) + ")", proc->uuid);
        INFO("PE (" << x << "," << y << ")");
        CHECK((tk != nullptr) == in);
        if (!tk) continue;
        int64_t tasks = 0;
        for (const auto& s : t.slices) tasks += s.track == tk->uuid && s.name.rfind("task ", 0) == 0;
        CHECK(tasks > 0);
      }
  }
  // One PE by default width and height.
  const Trace one = read_perfetto(sim::build_wafer_trace({{"detail", "pe"}, {"pes", {{"x", 7}, {"y", 7}}}}, run.L, *run.fab, "gemv_8x8").perfetto_bytes());
  CHECK(one.find("PE (7,7)"));
  CHECK_FALSE(one.find("PE (6,7)"));
  auto refused = [&](const json& pes, const LoadedLayout& L, const std::string& what) {
    try {
      sim::check_wafer_trace_pes({{"detail", "pe"}, {"pes", pes}}, L);
      FAIL("accepted " << pes.dump());
    } catch (const InputError& e) {
      INFO(e.what());
      CHECK(e.diagnostics()[0].where == "/trace/pes");
      CHECK_THAT(e.diagnostics()[0].message, Catch::Matchers::Contains(what));
    }
  };
  refused({{"x", 6}, {"y", 0}, {"width", 3}}, run.L, "reaches beyond the layout's 8 x 8 PEs");
  refused({{"x", 0}, {"y", 8}}, run.L, "reaches beyond");
  LoadedLayout routing_only = run.L;
  routing_only.layout.rects[0].program.clear();
  refused({{"x", 0}, {"y", 0}}, routing_only, "holds no PE with a program");
}

// A run keeps the op, task and delivery records of the traced PEs only (a region's, here), while
// the active-bin runs cover every PE: for the traced PEs they are exactly the bins their op
// records span, and the trace's "active PEs" counter reaches all 64 PEs of the GEMV.
TEST_CASE("traces: a wafer run keeps the traced PEs' records and every PE's active bins", "[traces][wafer]") {
  using namespace tessera::wafer;
  using json = nlohmann::json;
  const json cfg = {{"detail", "instruction"}, {"pes", {{"x", 2}, {"y", 3}, {"width", 3}, {"height", 2}}}};
  const WaferRun run("gemv_8x8", &cfg);
  const Fabric& fab = *run.fab;
  auto in_region = [](int64_t x, int64_t y) { return x >= 2 && x < 5 && y >= 3 && y < 5; };
  REQUIRE_FALSE(fab.op_records().empty());
  REQUIRE_FALSE(fab.task_records().empty());
  std::set<std::pair<int64_t, int64_t>> with_ops;
  for (const auto& r : fab.op_records()) {
    CHECK(in_region(r.x, r.y));
    with_ops.insert({r.x, r.y});
  }
  CHECK(with_ops.size() == 6);
  for (const auto& r : fab.task_records()) CHECK(in_region(r.x, r.y));
  for (const auto& r : fab.deliveries()) CHECK(in_region(r.x, r.y));
  REQUIRE(fab.active_runs().size() == 64);
  for (const auto& pe : fab.active_runs()) {
    INFO("PE (" << pe.x << "," << pe.y << ")");
    CHECK_FALSE(pe.runs.empty());
    for (size_t i = 0; i < pe.runs.size(); ++i) {
      CHECK(pe.runs[i].first <= pe.runs[i].second);
      if (i) CHECK(pe.runs[i - 1].second + 1 < pe.runs[i].first);  // sorted, disjoint, not adjacent
    }
    if (!in_region(pe.x, pe.y)) continue;
    std::set<int64_t> bins, from_runs;  // the bins the PE's op records span
    for (const auto& r : fab.op_records())
      if (r.x == pe.x && r.y == pe.y)
        for (int64_t b = r.start / Fabric::kActiveBin; b <= r.end / Fabric::kActiveBin; ++b) bins.insert(b);
    for (const auto& [a, b] : pe.runs)
      for (int64_t i = a; i <= b; ++i) from_runs.insert(i);
    CHECK(bins == from_runs);
  }
  const Trace t = read_perfetto(sim::build_wafer_trace(cfg, run.L, fab, "gemv_8x8").perfetto_bytes());
  const Track* active = t.find("active PEs", t.find("fabric")->uuid);
  REQUIRE(active);
  double most = 0;
  for (const auto& c : t.counters)
    if (c.track == active->uuid) most = std::max(most, c.value);
  CHECK(most == 64);
  CHECK(t.find("PE (2,3)"));
  CHECK_FALSE(t.find("PE (0,0)"));
}

// BinSeries keeps the integral of a step function exact while its bins coarsen: random task spans
// (+1 at start, -1 at end) over a million cycles, against a brute-force count at the final width.
TEST_CASE("traces: a coarsening bin series keeps every bin's integral exact", "[traces][wafer]") {
  using tessera::wafer::BinSeries;
  BinSeries bs;
  std::vector<std::pair<int64_t, int64_t>> spans;
  uint64_t r = 12345;
  auto next = [&](int64_t n) { r = r * 6364136223846793005ull + 1442695040888963407ull; return static_cast<int64_t>((r >> 33) % static_cast<uint64_t>(n)); };
  int64_t total = 0;
  for (int i = 0; i < 3000; ++i) {
    const int64_t a = next(1'000'000), len = next(i % 10 == 0 ? 200'000 : 500);
    spans.push_back({a, a + len});
    bs.add(a, 1);
    bs.add(a + len, -1);
    total += len;
  }
  CHECK(bs.count.size() <= BinSeries::kMaxBins);
  CHECK(bs.width > 64);
  const std::vector<double> in = bs.integrals();
  double sum = 0;
  for (double v : in) sum += v;
  CHECK(sum == static_cast<double>(total));
  for (size_t b = 0; b < in.size(); b += 97) {  // bins spread over the run
    const int64_t lo = static_cast<int64_t>(b) * bs.width, hi = lo + bs.width;
    int64_t exact = 0;
    for (const auto& [a, e] : spans) exact += std::max<int64_t>(0, std::min(e, hi) - std::max(a, lo));
    INFO("bin " << b);
    CHECK(in[b] == static_cast<double>(exact));
  }
}

// The summary a default wafer run keeps agrees with the full records: busy PE-cycles, deliveries,
// hops, injections and every rectangle's task phases; and the summary trace links the sender's
// stream to the receiver's by a flow, with no PE tracks.
TEST_CASE("traces: a wafer run's summary agrees with its records and links streams by flows", "[traces][wafer]") {
  using namespace tessera::wafer;
  const WaferRun run("p2p_128");
  const LoadedLayout& L = run.L;
  const Fabric& fab = *run.fab;
  const FabricStats& st = fab.stats();
  const FabricSummary& sm = fab.summary();
  double busy = 0;
  for (double v : sm.busy.integrals()) busy += v;
  int64_t pe_busy = 0;
  for (int64_t x = 0; x < fab.width(); ++x) pe_busy += fab.busy_cycles(x, 0);
  CHECK(busy == static_cast<double>(pe_busy));
  CHECK(pe_busy > 0);
  int64_t delivered = 0, hops = 0, sent = 0, received = 0;
  for (int64_t c : sm.delivered.count) delivered += c;
  for (int64_t c : sm.hops.count) hops += c;
  for (const auto& s : sm.sent) sent += s.count;
  for (const auto& s : sm.received) received += s.count;
  CHECK(delivered == st.ramp_deliveries);
  CHECK(delivered == static_cast<int64_t>(fab.deliveries().size()));
  CHECK(hops == st.wavelet_hops);
  CHECK(sent == st.ramp_injections + st.port_in_wavelets);
  CHECK(received == st.ramp_deliveries + st.port_out_wavelets);
  // Phases: the span of each (rectangle, task name) over the task records.
  std::map<std::pair<int, std::string>, std::pair<int64_t, int64_t>> phase;
  for (const auto& tr : fab.task_records()) {
    const Program* p = fab.program(tr.x, tr.y);
    auto [it, fresh] = phase.emplace(std::make_pair(L.rect_at(tr.x, tr.y), p->tasks[static_cast<size_t>(tr.task)].name), std::make_pair(tr.start, tr.end));
    if (!fresh) it->second = {std::min(it->second.first, tr.start), std::max(it->second.second, tr.end)};
  }
  size_t ran = 0;
  for (const auto& ph : sm.phases) {
    if (ph.span.count == 0) continue;
    ++ran;
    INFO(ph.task);
    REQUIRE(phase.count({ph.rect, ph.task}));
    CHECK(phase.at({ph.rect, ph.task}) == std::make_pair(ph.span.first, ph.span.last));
  }
  CHECK(ran == phase.size());
  const Trace t = read_perfetto(sim::build_wafer_trace({{"detail", "summary"}}, L, fab, "p2p").perfetto_bytes());
  INFO(summarize(t));
  const Track* snd = t.find("rect sender");
  const Track* rcv = t.find("rect receiver");
  REQUIRE(snd);
  REQUIRE(rcv);
  const Slice* out = nullptr;
  const Slice* in = nullptr;
  for (const auto& s : t.slices) {
    if (s.name.rfind("send c", 0) == 0) out = &s;
    if (s.name.rfind("recv c", 0) == 0) in = &s;
    CHECK(s.name.rfind("task ", 0) != 0);  // no PE detail at the summary
  }
  REQUIRE(out);
  REQUIRE(in);
  REQUIRE(out->flow_out.size() == 1);
  REQUIRE(in->flow_in.size() == 1);
  CHECK(out->flow_out[0] == in->flow_in[0]);
  CHECK(in->begin_ns >= out->begin_ns);
  CHECK(t.find("busy PEs", t.find("fabric")->uuid));
  CHECK(t.find("link utilisation %", t.find("fabric")->uuid));
}

// A Perfetto file starts with 0x0a, a newline; when the first packet's length byte is '[' (0x5b) or
// '{' (0x7b) the file looks like JSON text to a naive check. Every first-packet length reads back.
TEST_CASE("traces: a Perfetto file reads back whatever its first packet's length byte", "[traces]") {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/tessera_trace_len_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  bool saw_bracket = false;
  for (size_t n = 1; n < 160; ++n) {
    TraceBuilder b;
    const uint64_t p = b.process(std::string(n, 'r'), 1);
    b.slice(b.thread(p, "t", 2), "s", 0, 10);
    const std::string bytes = b.perfetto_bytes();
    saw_bracket = saw_bracket || bytes[1] == '[' || bytes[1] == '{';
    const std::string path = dir + "/t.pftrace";
    tessera::write_file_atomic(path, bytes);
    INFO("process name length " << n);
    const Trace t = read_trace_file(path);
    CHECK(t.slices.size() == 1);
  }
  CHECK(saw_bracket);
  std::filesystem::remove_all(dir);
}
