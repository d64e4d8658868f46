// Wafer compiler speed: compile time of PyTorch's BERT-base encoder layer (128 tokens) for a WSE-2
// in both modes -- weight streaming (147,456 PEs) and pipelined (110,592 PEs, Q/K/V fused) -- from
// a loaded, prepared graph to the layout text, PE programs, host constants and the estimate
// (mapper/wafer). The acceptance asks for this figure next to the run's wall time and
// peak RSS (those come from `tessera run`'s host.json).
#include <benchmark/benchmark.h>

#include "isa/params.hpp"
#include "isa/wafer/asm.hpp"
#include "isa/wafer/builder.hpp"
#include "isa/wafer/isa.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/wafer/compile.hpp"

using namespace tessera;
using namespace tessera::wafer;

namespace {

WaferConfig wse2() {
  DiagnosticList d;
  const TargetDesc* t = target_of_preset("wse2");
  return WaferConfig::from(ParamSet::resolve(*t, *t->find_preset("wse2"), {}, d));
}

// The BERT-base layer as `tessera run` compiles it (the canonical graph).
graph::Graph bert_layer() {
  graph::Graph g = frontend::load_onnx(TESSERA_SOURCE_DIR "/scenarios/models/bert_layer.onnx");
  passes::prepare(g);
  passes::canonicalize(g, false);  // (as tessera run compiles for the wafer)
  return g;
}

void BM_CompileBertLayerWafer(benchmark::State& state) {
  const graph::Graph g = bert_layer();
  const WaferConfig cfg = wse2();
  MappingOptions mo;
  mo.mode = state.range(0) ? MapMode::pipelined : MapMode::weight_streaming;
  int64_t pes = 0;
  size_t layout_bytes = 0;
  for (auto _ : state) {
    Compiled c = compile(g, cfg, mo);
    pes = 0;
    for (const auto& k : c.kernels) pes = mo.mode == MapMode::weight_streaming ? std::max(pes, k.pes()) : pes + k.pes();
    layout_bytes = c.layout_json.size();
    benchmark::DoNotOptimize(c.predicted_s);
  }
  state.SetLabel(state.range(0) ? "pipelined" : "weight_streaming");
  state.counters["PEs"] = static_cast<double>(pes);
  state.counters["layout_bytes"] = static_cast<double>(layout_bytes);
}
BENCHMARK(BM_CompileBertLayerWafer)->Arg(0)->Arg(1)->ArgNames({"pipelined"})->Unit(benchmark::kMillisecond);

// What a run does next: the layout loaded for the fabric model, every distinct PE program instance
// made -- from the compiler's ProgramTemplates (what `tessera run` does), or, as before the
// compiler built programs in code, by assembling their text (text:1; the same programs).
void BM_LoadBertLayerWafer(benchmark::State& state) {
  const graph::Graph g = bert_layer();
  const WaferConfig cfg = wse2();
  MappingOptions mo;
  mo.mode = state.range(0) ? MapMode::pipelined : MapMode::weight_streaming;
  const Compiled c = compile(g, cfg, mo);
  std::map<std::string, std::string> texts;
  for (const auto& [file, t] : c.programs) texts[file] = t.text();
  const bool text = state.range(1) != 0;
  size_t instances = 0;
  for (auto _ : state) {
    LoadedLayout l = text ? load_layout_text(c.layout_json, "layout.json", "", cfg, &texts) : load_layout_text(c.layout_json, "layout.json", "", cfg, nullptr, &c.programs);
    instances = l.programs.size();
    benchmark::DoNotOptimize(l.programs.data());
  }
  state.SetLabel(std::string(state.range(0) ? "pipelined" : "weight_streaming") + (text ? ", assembled from text" : ", from templates"));
  state.counters["instances"] = static_cast<double>(instances);
}
BENCHMARK(BM_LoadBertLayerWafer)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"pipelined", "text"})->Unit(benchmark::kMillisecond);

// Instantiating a program of many parameters, as a rectangle whose PEs all differ does once per PE
// (ConvNeXt-tiny streamed on 192 x 192 PEs: 36,864 instances): a template declaring `params`
// parameters, each the offset of a DSD into one array, instantiated with every parameter bound.
void BM_InstantiateManyParams(benchmark::State& state) {
  const int64_t n = state.range(0);
  ProgramTemplate t("bench.pe");
  for (int64_t i = 0; i < n; ++i) t.param("off" + std::to_string(i));
  t.data("a", Elem::f32, n + 4);
  for (int64_t i = 0; i < n; ++i) t.mem1d("d" + std::to_string(i), "a", ProgramTemplate::Num::of("off" + std::to_string(i)), 4);
  t.task("main", TaskKind::local, 0, -1, -1, true);
  t.op(Op::halt, {});
  Bindings b;
  for (int64_t i = 0; i < n; ++i) b["off" + std::to_string(i)] = static_cast<double>(i % 4);
  for (auto _ : state) {
    Program p = t.instantiate(b);
    benchmark::DoNotOptimize(p.dsds.data());
  }
}
BENCHMARK(BM_InstantiateManyParams)->Arg(100)->Arg(600)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
