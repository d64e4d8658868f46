// Wafer fabric speed on compiled layouts: a BERT-shaped transformer encoder layer (post-norm, GELU,
// d 256, 4 heads of 64 features as in BERT, ff 1024, 16 tokens; tests/bench/data/bert_shaped_d256.json,
// written by tools/make_wafer_transformer.py) compiled by mapper/wafer for a WSE-2 and simulated as
// `tessera run` does -- weight streaming (its weights from MemoryX through SwarmX, 1,024 PEs) and
// pipelined (196,608 PEs, weights resident) -- timing the simulation only (compile, load and
// elaboration happen once, before the first run). Counters: wavelet hops (router links, RAMP
// deliveries and injections, port wavelets) and calendar events per second, PE instructions.
// Every iteration's output must equal the first one's and match the reference executor (rtol
// 1e-4, atol 1e-5), or the benchmark reports an error.
//
// Full size by hand: TESSERA_BENCH_SCENARIO=path/to/scenario.json adds that scenario (any compiled
// wafer scenario, e.g. scenarios/wafer/large/bert_layer_streaming.json) as a third case (/2):
//   TESSERA_BENCH_SCENARIO=scenarios/wafer/large/bert_layer_pipelined.json (then)
//     build/release/tests/bench/bench_wafer_layer --benchmark_filter='/2/'
// TESSERA_BENCH_CASES=weight_streaming (or pipelined) builds and runs that case alone: CI runs the
// weight-streaming case once (ctest bench.wafer_layer_streaming: it must finish and match the reference).
// Each case runs on 1 and on 2 host threads (FabricOptions::threads, the second argument): the
// two must give the same output bit for bit and the same cycles, hops and instructions.
// SystemC elaborates once per process: every case's fabric is built before the first run.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <systemc>
#include <vector>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/reference/executor.hpp"
#include "mapper/wafer/compile.hpp"
#include "models/common/clock.hpp"
#include "models/common/systemc_env.hpp"
#include "models/wafer/fabric.hpp"
#include "models/wafer/weight_stream.hpp"
#include "sim/model.hpp"
#include "sim/run_wafer.hpp"
#include "sim/scenario.hpp"

using namespace tessera;

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string label;
  sim::Scenario s;
  wafer::WaferConfig cfg;
  wafer::Compiled cp;
  wafer::LoadedLayout L;
  std::unique_ptr<wafer::Fabric> fab;
  std::unique_ptr<wafer::MemoryX> mx;
  std::unique_ptr<wafer::SwarmX> sx;
  Tensor x, want;            // the input; the reference executor's output
  std::vector<float> first;  // the first run's output
  int64_t first_cycles = -1, first_hops = 0, first_instructions = 0;
};

std::unique_ptr<Case> make_case(const std::string& path, const std::string& mode) {
  auto c = std::make_unique<Case>();
  c->s = sim::load_scenario(path, mode.empty() ? std::vector<std::string>{} : std::vector<std::string>{"mapping.mode=" + mode});
  c->cfg = wafer::WaferConfig::from(c->s.params);
  graph::Graph g = sim::load_model(c->s);
  const auto inputs = sim::load_inputs(c->s, g);
  c->x = inputs.at(g.inputs.at(0));
  c->want = reference::execute(g, inputs).at(g.outputs.at(0));
  passes::canonicalize(g, false);  // (as tessera run compiles for the wafer)
  wafer::MappingOptions mo;
  mo.compute = sim::wafer_compute(c->s);
  mo.mode = c->s.resolved["mapping"]["mode"].get<std::string>() == "pipelined" ? wafer::MapMode::pipelined : wafer::MapMode::weight_streaming;
  sim::wafer_rect_option(c->s.resolved["mapping"], mo);
  c->cp = wafer::compile(g, c->cfg, mo);
  c->L = sim::load_compiled_wafer(c->cp, c->cfg);
  c->fab = std::make_unique<wafer::Fabric>(("wafer_" + mode).c_str(), c->cfg, sim::compiled_fabric_options(c->s, c->cfg, nullptr, &c->L));
  c->fab->load(c->L);
  c->mx = std::make_unique<wafer::MemoryX>(("memoryx_" + mode).c_str(), c->cfg);
  c->sx = std::make_unique<wafer::SwarmX>(("swarmx_" + mode).c_str(), c->cfg);
  c->sx->socket.bind(c->mx->socket);
  for (const auto& a : c->cp.constants) c->fab->write_array(a.x, a.y, a.array, a.values);
  if (c->cp.mode == wafer::MapMode::weight_streaming)
    for (const auto& k : c->cp.kernels) c->mx->add_tensor(k.mx_tensor, c->cp.memoryx_layout(k));
  int64_t pes = 0;
  for (const auto& k : c->cp.kernels) pes = c->cp.mode == wafer::MapMode::weight_streaming ? std::max(pes, k.pes()) : pes + k.pes();
  c->label = c->s.name + (c->cp.mode == wafer::MapMode::pipelined ? ", pipelined, " : ", weight streaming, ") + std::to_string(pes) + " PEs";
  return c;
}

// Every case is elaborated before the first sc_start.
std::vector<std::unique_ptr<Case>>& cases() {
  static std::vector<std::unique_ptr<Case>> all = [] {
    std::vector<std::unique_ptr<Case>> v;
    models::set_fs_resolution();
    const std::string data = TESSERA_SOURCE_DIR "/tests/bench/data/bert_shaped_d256.json";
    // TESSERA_BENCH_CASES=weight_streaming or pipelined: only that one (CI runs the first).
    const char* only = std::getenv("TESSERA_BENCH_CASES");
    for (const char* mode : {"weight_streaming", "pipelined"})
      if (!only || !*only || std::string(only) == mode) v.push_back(make_case(data, mode));
    if (const char* p = std::getenv("TESSERA_BENCH_SCENARIO"); p && *p) v.push_back(make_case(p, ""));
    return v;
  }();
  return all;
}

void BM_CompiledLayer(benchmark::State& state) {
  Case& c = *cases()[static_cast<size_t>(state.range(0))];
  c.fab->set_threads(static_cast<int>(state.range(1)));
  int64_t hops = 0, events = 0, instructions = 0, cycles = 0;
  for (auto _ : state) {
    // What a step does (sim/run_wafer_graph.cpp): the input placed, the weights streamed from now.
    for (const auto& a : c.cp.place_input(c.x)) c.fab->write_array(a.x, a.y, a.array, a.values);
    if (c.cp.mode == wafer::MapMode::weight_streaming) sim::stream_compiled_weights(c.cp, *c.fab, *c.mx, *c.sx, sc_core::sc_time_stamp());
    const auto t0 = Clock::now();
    c.fab->start();
    sc_core::sc_start();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    models::after_systemc();
    state.SetIterationTime(wall);
    if (c.fab->error() || !c.fab->finished()) {
      state.SkipWithError(c.fab->error() ? c.fab->error()->c_str() : "the fabric did not finish");
      return;
    }
    const wafer::FabricStats& st = c.fab->stats();
    const int64_t h = st.wavelet_hops + st.ramp_deliveries + st.ramp_injections + st.port_in_wavelets + st.port_out_wavelets;
    if (c.first_cycles < 0) {
      c.first_cycles = st.cycles, c.first_hops = h, c.first_instructions = st.instructions;
    } else if (st.cycles != c.first_cycles || h != c.first_hops || st.instructions != c.first_instructions) {
      state.SkipWithError("a run's cycles, hops or instructions differ from the first run's");
      return;
    }
    hops += h;
    events += st.events;
    instructions += st.instructions;
    cycles = st.cycles;
    const Tensor y = c.cp.gather_output([&](int64_t x, int64_t yy, const std::string& a) { return c.fab->read_array(x, yy, a); });
    const std::vector<float> v = y.to_f32();
    if (c.first.empty()) {
      const std::vector<float> w = c.want.to_f32();
      if (v.size() != w.size()) {
        state.SkipWithError("the output's size differs from the reference's");
        return;
      }
      for (size_t i = 0; i < v.size(); ++i)
        if (!(std::fabs(v[i] - w[i]) <= 1e-5 + 1e-4 * std::fabs(w[i]))) {
          state.SkipWithError("the output does not match the reference executor's");
          return;
        }
      c.first = v;
    } else if (v != c.first) {
      state.SkipWithError("a later run's output differs from the first run's");
      return;
    }
  }
  state.SetLabel(c.label + ", " + std::to_string(c.fab->threads_used()) + " thread(s)");
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["instr/s"] = benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsRate);
  const double it = static_cast<double>(state.iterations());
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (size_t i = 0; i < cases().size(); ++i)
    for (int64_t threads : {1, 2})
      benchmark::RegisterBenchmark("BM_CompiledLayer", BM_CompiledLayer)->Args({static_cast<int64_t>(i), threads})->UseManualTime()->Unit(benchmark::kSecond)->Iterations(1);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
