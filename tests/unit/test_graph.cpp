#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "isa/compare.hpp"
#include "isa/error.hpp"
#include "isa/npy.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/graph/summary.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "mapper/wafer/internal.hpp"
#include "sim/model.hpp"
#include "sim/scenario.hpp"

using namespace tessera;
using json = nlohmann::json;

namespace {
const std::string kRoot = TESSERA_SOURCE_DIR;

graph::Graph inline_graph(const json& g) {
  json doc = {{"schema", "tessera.scenario/1"}, {"name", "t"}, {"target", {{"kind", "reference"}}}, {"model", {{"graph", g}}}};
  return sim::load_model(sim::load_scenario_json(doc, ""));
}
}  // namespace

// Hand count in scenarios/models/README.md (B=1, S=16, D=64, H=4, dh=16, F=128, T=B*S=16).
TEST_CASE("graph: transformer layer shapes, parameter bytes and FLOPs match the hand count", "[graph]") {
  graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/models/transformer_layer.onnx");
  passes::prepare(g);
  const int64_t T = 16, D = 64, F = 128, B = 1, H = 4, S = 16, dh = 16;
  std::map<std::string, int64_t> by_op;
  for (const auto& n : g.nodes) by_op[n.op] += graph::node_flops(g, n);
  CHECK(by_op["MatMul"] == 6 * T * D * D + 4 * B * H * S * S * dh + 4 * T * D * F);  // 983,040
  CHECK(by_op["Gemm"] == 2 * T * D * D + T * D);                                     // 132,096
  CHECK(by_op["Add"] == 8 * T * D + 2 * T * F + 2 * T);                              // 12,320
  CHECK(by_op["Div"] == 3 * T * D + T * F);
  CHECK(by_op["Mul"] == 2 * T * D + 2 * T * F);
  CHECK(by_op["Sub"] == 2 * T * D);
  CHECK(by_op["Pow"] == 2 * T * D);
  CHECK(by_op["Sqrt"] == 2 * T);
  CHECK(by_op["Erf"] == T * F);
  CHECK(by_op["ReduceMean"] == 4 * T * D);
  CHECK(by_op["Softmax"] == 5 * B * H * S * S);
  const auto t = graph::totals(g);
  CHECK(t.flops == 1154112);
  CHECK(t.param_bytes == 4 * (4 * D * D + 2 * D * F + 9 * D + F));  // 133,888
  CHECK(t.params == 33472);
  // Folding removed the Constant nodes and the shape arithmetic.
  for (const auto& n : g.nodes) CHECK(n.op != "Constant");
  CHECK(g.value(g.outputs[0]).shape == Shape{1, 16, 64});
}

TEST_CASE("graph: Shape/Gather/Concat/Reshape chains fold to constants", "[graph]") {
  graph::Graph g = inline_graph(json::parse(R"({
    "inputs": {"x": {"shape": [2, 3, 4]}},
    "outputs": ["y"],
    "initializers": {"i0": {"values": [0], "dtype": "int64", "shape": []},
                     "m1": {"values": [-1], "dtype": "int64", "shape": [1]}},
    "nodes": [
      {"name": "shape", "op": "Shape", "inputs": ["x"], "outputs": ["s"]},
      {"name": "first", "op": "Gather", "inputs": ["s", "i0"], "outputs": ["d0"], "attrs": {"axis": 0}},
      {"name": "unsq", "op": "Unsqueeze", "inputs": ["d0"], "outputs": ["d0v"], "attrs": {"axes": [0]}},
      {"name": "cat", "op": "Concat", "inputs": ["d0v", "m1"], "outputs": ["newshape"], "attrs": {"axis": 0}},
      {"name": "reshape", "op": "Reshape", "inputs": ["x", "newshape"], "outputs": ["y"]},
      {"name": "unused", "op": "Relu", "inputs": ["x"], "outputs": ["dead"]}]})"));
  REQUIRE(g.nodes.size() == 1);  // only the Reshape is left; the dead Relu is gone
  CHECK(g.nodes[0].op == "Reshape");
  CHECK(g.value("newshape").data->to_i64() == std::vector<int64_t>{2, -1});
  CHECK(g.value("y").shape == Shape{2, 12});
  CHECK_FALSE(g.has_value("dead"));
}

TEST_CASE("graph: folding and execution agree with the unfolded graph", "[graph]") {
  // y = (x @ (w1 * 2)) + b : w1*2 folds, the rest runs.
  graph::Graph g = inline_graph(json::parse(R"({
    "inputs": {"x": {"shape": [2, 2]}},
    "outputs": ["y"],
    "initializers": {"w1": {"values": [1, 2, 3, 4], "shape": [2, 2]},
                     "two": {"values": [2], "shape": []},
                     "b": {"values": [0.5, -0.5], "shape": [2]}},
    "nodes": [
      {"op": "Mul", "inputs": ["w1", "two"], "outputs": ["w2"]},
      {"op": "MatMul", "inputs": ["x", "w2"], "outputs": ["h"]},
      {"op": "Add", "inputs": ["h", "b"], "outputs": ["y"]}]})"));
  CHECK(g.nodes.size() == 2);
  auto out = reference::execute(g, {{"x", Tensor::from_f32({2, 2}, {1, 0, 0, 1})}});
  CHECK(out.at("y").to_f32() == std::vector<float>{2.5f, 3.5f, 6.5f, 7.5f});
}

TEST_CASE("graph: a non-constant shape operand is rejected with the node named", "[graph]") {
  try {
    inline_graph(json::parse(R"({
      "inputs": {"x": {"shape": [2, 3]}, "s": {"shape": [2], "dtype": "int64"}},
      "outputs": ["y"],
      "nodes": [{"name": "dyn", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["y"]}]})"));
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("node 'dyn' (Reshape") != std::string::npos);
    CHECK(std::string(e.what()).find("not a constant") != std::string::npos);
  }
}

TEST_CASE("graph: undefined inputs and duplicate outputs are all reported", "[graph]") {
  try {
    inline_graph(json::parse(R"({
      "inputs": {"x": {"shape": [2]}},
      "outputs": ["y", "z"],
      "nodes": [{"name": "a", "op": "Relu", "inputs": ["nope"], "outputs": ["y"]},
                {"name": "b", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})"));
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    const std::string w = e.what();
    CHECK(w.find("input 'nope' is not defined") != std::string::npos);
    CHECK(w.find("output 'y' is already defined") != std::string::npos);
    CHECK(w.find("graph output 'z' is not produced") != std::string::npos);
  }
}

TEST_CASE("graph: GELU and LayerNorm decompositions fuse and compute the same values", "[graph]") {
  graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/models/transformer_layer.onnx");
  passes::prepare(g);
  graph::Graph fused = g;
  CHECK(passes::fuse_decompositions(fused));  // one GELU, two LayerNorms
  int gelu = 0, ln = 0;
  for (const auto& n : fused.nodes) {
    gelu += n.op == "Gelu";
    ln += n.op == "LayerNormalization";
    CHECK(n.op != "Erf");
    CHECK(n.op != "ReduceMean");
  }
  CHECK(gelu == 1);
  CHECK(ln == 2);
  CHECK(fused.nodes.size() == g.nodes.size() - 4 - 2 * 8);
  const Tensor x = random_tensor(DType::f32, {1, 16, 64}, 5, true, 1.0);
  const auto a = reference::execute(g, {{"x", x}});
  const auto b = reference::execute(fused, {{"x", x}});
  const auto c = compare(b.at(g.outputs[0]), a.at(g.outputs[0]), 1e-5, 1e-5);
  CHECK(c.pass);
  CHECK(c.max_abs_error < 1e-5);
}

TEST_CASE("graph: inputs that decide a new op's shape must be constants, and constant ones fold", "[graph]") {
  // Tile's repeats, Pad's pads, Resize's scales, Range's bounds and NonZero's input decide shapes.
  const char* dynamic[] = {
      R"({"name": "t", "op": "Tile", "inputs": ["x", "k"], "outputs": ["y"]})",
      R"({"name": "t", "op": "Pad", "inputs": ["x", "k"], "outputs": ["y"]})",
      R"({"name": "t", "op": "NonZero", "inputs": ["x"], "outputs": ["y"]})",
  };
  for (const char* node : dynamic) {
    INFO(node);
    try {
      inline_graph(json::parse(std::string(R"({"inputs": {"x": {"shape": [2, 2]}, "k": {"shape": [4], "dtype": "int64"}},
        "outputs": ["y"], "nodes": [)") + node + "]}"));
      FAIL("expected an InputError");
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("node 't'") && Catch::Contains("decides the output shape"));
    }
  }
  CHECK(passes::shape_inputs("Resize", 13) == std::vector<size_t>{2, 3});
  CHECK(passes::shape_inputs("Resize", 10) == std::vector<size_t>{1});
  CHECK(passes::shape_inputs("ReduceMin", 13).empty());  // axes were an attribute before opset 18
  CHECK(passes::shape_inputs("ReduceMin", 18) == std::vector<size_t>{1});
  // Range -> ConstantOfShape -> Tile on constants fold away; the Tile of x runs.
  graph::Graph g = inline_graph(json::parse(R"({
    "inputs": {"x": {"shape": [1, 2]}},
    "outputs": ["y"],
    "initializers": {"lo": {"values": [1], "dtype": "int64", "shape": []},
                     "hi": {"values": [3], "dtype": "int64", "shape": []},
                     "step": {"values": [1], "dtype": "int64", "shape": []}},
    "nodes": [
      {"op": "Range", "inputs": ["lo", "hi", "step"], "outputs": ["r"]},
      {"op": "Tile", "inputs": ["x", "r"], "outputs": ["y"]}]})"));
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == "Tile");
  CHECK(g.value("y").shape == Shape{1, 4});
  auto out = reference::execute(g, {{"x", Tensor::from_f32({1, 2}, {5, 6})}});
  CHECK(out.at("y").to_f32() == std::vector<float>{5, 6, 5, 6});
}

TEST_CASE("graph: FLOPs of recurrent layers and of the new data-movement ops", "[graph]") {
  // LSTM, 3 steps x 2 batch entries, I = 2, H = 2: 2 * (4 * 2) * (2 + 2) per step and entry = 64.
  graph::Graph g = inline_graph(json::parse(R"({
    "inputs": {"x": {"shape": [3, 2, 2]}},
    "outputs": ["y", "t"],
    "initializers": {"w": {"values": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "shape": [1, 8, 2]},
                     "r": {"values": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "shape": [1, 8, 2]},
                     "reps": {"values": [1, 2, 1], "dtype": "int64", "shape": [3]}},
    "nodes": [
      {"name": "lstm", "op": "LSTM", "inputs": ["x", "w", "r"], "outputs": ["y"]},
      {"name": "tile", "op": "Tile", "inputs": ["x", "reps"], "outputs": ["t"]}]})"));
  std::map<std::string, int64_t> flops;
  for (const auto& n : g.nodes) flops[n.op] = graph::node_flops(g, n);
  CHECK(flops.at("LSTM") == 64 * 3 * 2);
  CHECK(flops.at("Tile") == 0);
}

TEST_CASE("graph: with_batch splits the batch, the Reshape that names it included, and says why a graph does not split", "[graph]") {
  // x.view(x.size(0), -1) exported with fixed shapes: the size folds into the Reshape's constant.
  const json model = json::parse(R"({
    "inputs": {"x": {"shape": [4, 3, 2]}},
    "outputs": ["y"],
    "initializers": {"s": {"values": [4, 6], "dtype": "int64", "shape": [2]},
                     "w": {"shape": [6, 5], "random": {"seed": 1, "dist": "normal"}}},
    "nodes": [
      {"name": "flat", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["f"]},
      {"name": "mm", "op": "MatMul", "inputs": ["f", "w"], "outputs": ["y"]}]})");
  graph::Graph whole = inline_graph(model);
  graph::Graph half = whole;
  passes::with_batch(half, 2);
  CHECK(half.value("x").shape == Shape{2, 3, 2});
  CHECK(half.value("f").shape == Shape{2, 6});
  CHECK(half.value("y").shape == Shape{2, 5});
  // The halves' outputs are the whole batch's rows.
  std::vector<float> xv(24);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i) * 0.25f - 3.0f;
  const Tensor x = Tensor::from_f32({4, 3, 2}, xv);
  const auto yw = reference::execute(whole, {{"x", x}}).at("y").to_f32();
  for (int64_t part = 0; part < 2; ++part) {
    const Tensor xp = Tensor::from_f32({2, 3, 2}, std::vector<float>(xv.begin() + part * 12, xv.begin() + part * 12 + 12));
    const auto yp = reference::execute(half, {{"x", xp}}).at("y").to_f32();
    for (size_t i = 0; i < yp.size(); ++i) CHECK(yp[i] == yw[static_cast<size_t>(part) * 10 + i]);
  }
  {  // 3 does not divide 4
    graph::Graph g = whole;
    CHECK_THROWS_WITH(passes::with_batch(g, 3), Catch::Contains("the batch of 4 does not split"));
  }
  {  // the batch folded into another dimension ([4, 3, 2] -> [2, 12]): the shapes fix it
    json m2 = model;
    m2["initializers"]["s"]["values"] = {2, 12};
    m2["initializers"]["w"]["shape"] = {12, 5};
    graph::Graph g = inline_graph(m2);
    CHECK_THROWS_WITH(passes::with_batch(g, 2), Catch::Contains("fix its batch of 4") || Catch::Contains("not the samples along its first dimension"));
  }
}

TEST_CASE("graph: with_batch shrinks a constant Expand over the batch (a class token) beside the batch's input", "[graph]") {
  // ViT's class token: torch.onnx.export writes ConstantOfShape/Where/Expand to [batch, 1, d] with
  // fixed shapes, which folds into a [4, 1, 2] constant of equal samples concatenated with x.
  const json model = json::parse(R"({
    "inputs": {"x": {"shape": [4, 3, 2]}},
    "outputs": ["y"],
    "initializers": {"cls": {"values": [7, 8, 7, 8, 7, 8, 7, 8], "shape": [4, 1, 2]},
                     "odd": {"values": [1, 2, 3, 4, 5, 6, 7, 8], "shape": [4, 1, 2]}},
    "nodes": [{"name": "cat", "op": "Concat", "inputs": ["cls", "x"], "outputs": ["y"], "attrs": {"axis": 1}}]})");
  graph::Graph whole = inline_graph(model);
  graph::Graph half = whole;
  passes::with_batch(half, 2);
  CHECK(half.value("y").shape == Shape{2, 4, 2});
  std::vector<float> xv(12);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  const auto y = reference::execute(half, {{"x", Tensor::from_f32({2, 3, 2}, xv)}}).at("y").to_f32();
  CHECK(std::vector<float>(y.begin(), y.begin() + 4) == std::vector<float>{7, 8, 0, 1});
  // Samples that differ are not an Expand: the graph keeps its batch (and says so).
  json m2 = model;
  m2["nodes"][0]["inputs"][0] = "odd";
  graph::Graph g = inline_graph(m2);
  CHECK_THROWS_WITH(passes::with_batch(g, 2), Catch::Contains("fix its batch of 4"));
}

// The Resize forms both compilers map as a nearest upsampling by whole factors (every output i reads
// input floor(i / f)): the one helper they share, against the forms ONNX defines.
TEST_CASE("graph: nearest Resize forms that read floor(i / f) are told apart from the rest", "[graph]") {
  auto form = [](const std::string& mode, const std::string& ct, const std::string& nm) {
    graph::Node n;
    n.op = "Resize";
    if (!mode.empty()) n.attrs.set("mode", mode);
    if (!ct.empty()) n.attrs.set("coordinate_transformation_mode", ct);
    if (!nm.empty()) n.attrs.set("nearest_mode", nm);
    return graph::nearest_resize_form(n);
  };
  CHECK(form("nearest", "asymmetric", "floor").empty());  // torch.onnx.export's nn.Upsample
  CHECK(form("", "", "").empty());                         // the defaults: half_pixel, round_prefer_floor
  CHECK(form("nearest", "pytorch_half_pixel", "round_prefer_ceil").empty());
  CHECK(form("nearest", "asymmetric", "round_prefer_floor") == "nearest, asymmetric, round_prefer_floor");  // reads round(i / f)
  CHECK(form("nearest", "half_pixel", "ceil") == "nearest, half_pixel, ceil");
  CHECK(form("linear", "asymmetric", "floor") == "linear, asymmetric, floor");
  CHECK(form("nearest", "align_corners", "floor") == "nearest, align_corners, floor");
}

// The wafer compiler runs kernels in node order. After its branch rewrites, a node the canonical
// graph appended (a BatchNorm's Mul no Conv absorbs) is listed after its reader; it moves to that
// reader, and a list already in topological order keeps its order (concat.cpp).
TEST_CASE("wafer: a node listed after its reader moves to its earliest reader, a topological order stays", "[graph]") {
  auto node = [](const std::string& name, const std::string& in, const std::string& out) { return graph::Node{name, "Relu", {}, {in}, {out}}; };
  auto names = [](const graph::Graph& g) {
    std::vector<std::string> v;
    for (const auto& n : g.nodes) v.push_back(n.name);
    return v;
  };
  graph::Graph g;
  g.inputs = {"x"};
  g.outputs = {"r", "b"};
  // r reads a2, which the list gives last; b is independent of both.
  g.nodes = {node("A", "x", "a"), node("R", "a2", "r"), node("B", "x", "b"), node("A2", "a", "a2")};
  wafer::detail::order_by_first_reader(g);
  CHECK(names(g) == std::vector<std::string>{"A", "A2", "R", "B"});  // (plain Kahn by index: A, B, A2, R)
  graph::Graph t;
  t.inputs = {"x"};
  t.outputs = {"d"};
  t.nodes = {node("A", "x", "a"), node("B", "x", "b"), node("C", "a", "c"), node("D", "b", "d")};
  wafer::detail::order_by_first_reader(t);
  CHECK(names(t) == std::vector<std::string>{"A", "B", "C", "D"});
}

// ConvNeXt's channels-last blocks on the feature map (channels_last.cpp): in torchvision's ConvNeXt
// class as exported, every block's Linears become 1 x 1 Convs after the Transpose back, which moves
// to right after the block's LayerNorm, and the head's LayerNorm of the pooled map runs on the
// flattened features after an identity MatMul -- computing the same values (the reference executor).
TEST_CASE("wafer: ConvNeXt's channels-last blocks are rewritten onto the feature map, same values", "[graph]") {
  graph::Graph g = frontend::load_onnx(kRoot + "/tests/cli/data/wafer_mini_convnext.onnx");
  passes::prepare(g);
  passes::canonicalize(g);
  graph::Graph r = g;
  CHECK(wafer::detail::channels_last_blocks(r));
  const auto uses = r.consumers();
  int convs = 0, matmuls = 0;
  for (const graph::Node& n : r.nodes) {
    convs += n.op == "Conv";
    matmuls += n.op == "MatMul";
    if (n.op == "MatMul") CHECK(r.value(n.inputs[0]).shape.size() == 2);  // (the head's identity and Linear)
    if (n.op == "LayerNormalization" && r.value(n.inputs[0]).shape.size() == 4) {  // each one's only reader: the Transpose back
      const auto& u = uses.at(n.outputs[0]);
      REQUIRE(u.size() == 1);
      CHECK(r.nodes[u[0]].op == "Transpose");
      CHECK(r.nodes[u[0]].attrs.get_ints("perm", {}) == std::vector<int64_t>{0, 3, 1, 2});
    }
  }
  CHECK(convs == 4 + 4);  // the stem, two depthwise, the downsampling; and two Linears per block
  CHECK(matmuls == 2);
  const Tensor x = read_npy(kRoot + "/tests/cli/data/wafer_mini_convnext_x.npy");
  const auto a = reference::execute(g, {{"x", x}});
  const auto b = reference::execute(r, {{"x", x}});
  const auto c = compare(b.at(g.outputs[0]), a.at(g.outputs[0]), 1e-5, 1e-6);
  CHECK(c.pass);
  CHECK(c.max_abs_error < 1e-6);
  CHECK_FALSE(wafer::detail::channels_last_blocks(r));  // (nothing left to rewrite)
}
