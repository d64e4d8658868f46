// The wafer compiler's estimate (mapper/wafer/estimate.cpp, estimate_loads.cpp) on models whose
// kernels sit in rectangles of different sizes. Built in the core set too (tests/core), so the
// sanitizers see every vector the estimate indexes.
#include <catch2/catch.hpp>

#include <string>

#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/wafer/compile.hpp"

using namespace tessera;
using namespace tessera::wafer;

namespace {
// scenarios/models/transformer_layer.onnx as tessera run compiles it for the wafer.
graph::Graph transformer_layer() {
  graph::Graph g = frontend::load_onnx(std::string(TESSERA_SOURCE_DIR) + "/scenarios/models/transformer_layer.onnx");
  passes::prepare(g);
  passes::canonicalize(g, false);
  return g;
}
}  // namespace

// The reduce spans the load model keeps are indexed by PE of the one rectangle every kernel spans
// under weight streaming. A pipelined model's kernels have rectangles of their own: the estimate
// once built each span's running maximum over the previous kernel's vector, reading past its end
// when a later rectangle was larger (AddressSanitizer reports it; here, under the core set's
// sanitizers). Pipelined, it keeps none; the prediction is the same compile after compile.
TEST_CASE("wafer-estimate: a pipelined model whose later rectangles are larger compiles and predicts the same twice", "[wafer-compiler]") {
  const graph::Graph g = transformer_layer();
  MappingOptions mo;
  mo.mode = MapMode::pipelined;
  const Compiled a = compile(g, preset_config("wse2"), mo);
  bool grows = false;  // (the case under test: a kernel after a smaller one)
  for (size_t l = 1; l < a.kernels.size(); ++l) grows = grows || a.kernels[l].pes() > a.kernels[l - 1].pes();
  REQUIRE(grows);
  REQUIRE(a.predicted_cycles > 0);
  const Compiled b = compile(g, preset_config("wse2"), mo);
  CHECK(b.predicted_cycles == a.predicted_cycles);
  for (size_t l = 0; l < a.kernels.size(); ++l) CHECK(b.kernels[l].est.end == a.kernels[l].est.end);
}

// Weight streaming: every kernel spans the one rectangle, so its spans line up PE for PE.
TEST_CASE("wafer-estimate: weight-streamed kernels share one rectangle", "[wafer-compiler]") {
  const graph::Graph g = transformer_layer();
  MappingOptions mo;
  mo.mode = MapMode::weight_streaming;
  const Compiled c = compile(g, preset_config("wse2"), mo);
  REQUIRE(c.kernels.size() > 1);
  for (const DenseKernel& k : c.kernels) CHECK(k.pes() == c.kernels.front().pes());
  CHECK(c.predicted_cycles > 0);
}
