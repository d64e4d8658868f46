// NeuronCore compiler speed: compile time of the BERT-base encoder layer (ONNX, bf16; target < 2 s)
// and of the NKI matmul tutorial's fully blocked step at full size, from a loaded, prepared graph
// to a scheduled program with its estimate (mapper/neuroncore).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "isa/params.hpp"
#include "mapper/frontend/json_graph.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/neuroncore/compile.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "tests/unit/nc_test_config.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

void BM_CompileBertLayer(benchmark::State& state) {
  graph::Graph g = frontend::load_onnx(TESSERA_SOURCE_DIR "/scenarios/models/bert_layer.onnx");
  passes::canonicalize(g);
  const CoreConfig cfg = preset_config();
  MappingOptions mo;
  mo.compute = DType::bf16;
  size_t instrs = 0;
  for (auto _ : state) {
    Compiled c = compile(g, cfg, mo);
    instrs = c.program.instrs.size();
    benchmark::DoNotOptimize(c.predicted_s);
  }
  state.counters["instructions"] = static_cast<double>(instrs);
}
BENCHMARK(BM_CompileBertLayer)->Unit(benchmark::kMillisecond);

void BM_CompileNkiMatmulBlocked(benchmark::State& state) {
  // The graph of scenarios/neuroncore/nki_matmul/4_blocked_mnk.json.
  const auto j = nlohmann::json::parse(R"({
    "inputs": { "lhsT": { "shape": [8192, 4096], "dtype": "bf16" }, "rhs": { "shape": [8192, 8192], "dtype": "bf16" } },
    "outputs": ["result"],
    "nodes": [
      { "name": "lhs", "op": "Transpose", "inputs": ["lhsT"], "outputs": ["lhs"], "attrs": { "perm": [1, 0] } },
      { "name": "matmul", "op": "MatMul", "inputs": ["lhs", "rhs"], "outputs": ["result"] }
    ] })");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", ".");
  passes::prepare(g);
  const CoreConfig cfg = preset_config();
  MappingOptions mo;
  mo.compute = DType::bf16;
  mo.matmul_schedule = MatmulSchedule::blocked_mnk;
  size_t instrs = 0;
  for (auto _ : state) {
    Compiled c = compile(g, cfg, mo);
    instrs = c.program.instrs.size();
    benchmark::DoNotOptimize(c.predicted_s);
  }
  state.counters["instructions"] = static_cast<double>(instrs);
}
BENCHMARK(BM_CompileNkiMatmulBlocked)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
