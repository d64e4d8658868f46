// The canonical graph (mapper/passes/canonicalize.hpp): views, and every pass checked on the zoo of
// stock exports by running the reference executor before and after it.
#include <catch2/catch.hpp>
#include <filesystem>

#include "isa/compare.hpp"
#include "mapper/graph/view.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "sim/model.hpp"
#include "sim/scenario.hpp"

using namespace tessera;
using graph::Strided;

TEST_CASE("views: permute, slice, broadcast and the reshapes a stride allows", "[canonical]") {
  const Strided x = Strided::contiguous({2, 3, 4});
  CHECK(x.strides == std::vector<int64_t>{12, 4, 1});
  const Strided t = graph::permute(x, {0, 2, 1});  // [2, 4, 3]
  CHECK(t.strides == std::vector<int64_t>{12, 1, 4});
  CHECK_FALSE(t.is_contiguous());
  // Merging the transposed pair needs a copy; splitting the untouched dim does not.
  CHECK_FALSE(graph::reshape(t, {2, 12}).has_value());
  const auto split = graph::reshape(t, {2, 2, 2, 3});
  REQUIRE(split);
  CHECK(split->strides == std::vector<int64_t>{12, 2, 1, 4});
  const auto merged = graph::reshape(x, {6, 4});
  REQUIRE(merged);
  CHECK(merged->strides == std::vector<int64_t>{4, 1});
  const Strided s = graph::slice(x, 2, 1, 2, 2);  // elements 1, 3 of the last dim
  CHECK(s.offset == 1);
  CHECK(s.strides == std::vector<int64_t>{12, 4, 2});
  CHECK(s.extent() == std::pair<int64_t, int64_t>{1, 24});
  const Strided b = graph::broadcast_to(Strided::contiguous({3, 1}), {2, 3, 4});
  CHECK(b.strides == std::vector<int64_t>{0, 1, 0});
  CHECK(b.has_broadcast());
  const Strided sel = graph::select(x, 1, 2);
  CHECK(sel.shape == Shape{2, 4});
  CHECK(sel.offset == 8);
  // Coalescing: [2, 3, 4] contiguous with a [3, 4]-broadcast operand merges the inner pair only.
  Strided o = x, a = graph::broadcast_to(Strided::contiguous({3, 4}), {2, 3, 4});
  graph::coalesce({&o, &a});
  CHECK(o.shape == Shape{2, 12});
  CHECK(a.strides == std::vector<int64_t>{0, 1});
}

namespace {

std::map<std::string, Tensor> run(const graph::Graph& g, const std::map<std::string, Tensor>& in) { return reference::execute(g, in); }

std::vector<std::filesystem::path> zoo_scenarios() {
  std::vector<std::filesystem::path> r;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TESSERA_SOURCE_DIR) + "/scenarios/zoo"))
    if (std::filesystem::exists(e.path() / "reference.json")) r.push_back(e.path() / "reference.json");
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

TEST_CASE("canonicalize: every pass keeps what every zoo model computes (reference before and after)", "[canonical]") {
  const auto files = zoo_scenarios();
  REQUIRE(files.size() >= 15);
  for (const auto& f : files) {
    INFO(f.string());
    const sim::Scenario s = sim::load_scenario(f.string());
    graph::Graph g = sim::load_model(s);
    if (s.resolved.contains("training")) continue;  // inputs are per step; the forward model is checked by its inference twin
    passes::prepare(g);
    auto inputs = sim::load_inputs(s, g);
    const auto before = run(g, inputs);
    for (const auto& p : passes::canonical_passes()) {
      INFO("pass " << p.name);
      p.run(g);
      passes::prepare(g);
      const auto after = run(g, inputs);
      for (const auto& o : g.outputs) {
        const auto c = compare(after.at(o), before.at(o), 1e-4, 1e-5);
        INFO("output " << o << ": max abs error " << c.max_abs_error);
        CHECK(c.pass);
      }
    }
    for (const auto& n : g.nodes) {
      INFO("node " << n.name << " (" << n.op << ")");
      for (const char* gone : {"Identity", "Dropout", "Flatten", "Squeeze", "Unsqueeze", "Split", "Gemm", "BatchNormalization", "Erf", "LSTM", "GRU"}) CHECK(n.op != gone);
    }
    CHECK(g.opset == 17);
  }
}

TEST_CASE("canonicalize: PyTorch's LayerNorm, RMSNorm and activation decompositions become single ops", "[canonical]") {
  auto ops_of = [](const std::string& dir) {
    const sim::Scenario s = sim::load_scenario(std::string(TESSERA_SOURCE_DIR) + "/scenarios/zoo/" + dir + "/reference.json");
    graph::Graph g = sim::load_model(s);
    passes::canonicalize(g);
    std::map<std::string, int> ops;
    for (const auto& n : g.nodes) ++ops[n.op];
    return ops;
  };
  const auto post = ops_of("encoder_postnorm");  // opset 13: LayerNorm decomposed, GELU as Relu (PyTorch's default)
  CHECK(post.count("LayerNormalization"));
  CHECK_FALSE(post.count("ReduceMean"));
  const auto gpt = ops_of("gpt2_block");  // GELU, tanh form, written out
  CHECK(gpt.count("Gelu"));
  CHECK_FALSE(gpt.count("Tanh"));
  const auto llama = ops_of("llama_block");  // RMSNorm written out; SiLU as x * sigmoid(x)
  CHECK(llama.at("RMSNormalization") == 2);
  CHECK(llama.count("Swish"));
  CHECK_FALSE(llama.count("Sigmoid"));
  const auto eff = ops_of("efficientnet_b0");
  CHECK(eff.count("Swish"));
}

TEST_CASE("canonicalize: a graph with forms normalize_opset does not rewrite keeps its opset", "[canonical]") {
  // Resize-10 takes scales as input 1 (input 2 from opset 11); reading it as opset 17 would fail.
  const auto g0 = [] {
    graph::Graph g;
    g.opset = 10;
    g.source = "test";
    g.inputs = {"x"};
    g.outputs = {"y"};
    g.values["x"] = graph::Value{"x", DType::f32, {1, 1, 2, 2}, true, std::nullopt, false};
    g.values["sc"] = graph::Value{"sc", DType::f32, {4}, true, Tensor::from_f32({4}, {1, 1, 2, 2}), false};
    g.values["y"] = graph::Value{"y", DType::f32, {}, false, std::nullopt, false};
    graph::Node n;
    n.name = "up";
    n.op = "Resize";
    n.inputs = {"x", "sc"};
    n.outputs = {"y"};
    n.attrs.set("mode", std::string("nearest"));
    g.nodes.push_back(n);
    return g;
  }();
  graph::Graph g = g0;
  passes::prepare(g);
  const std::map<std::string, Tensor> in{{"x", Tensor::from_f32({1, 1, 2, 2}, {1, 2, 3, 4})}};
  const auto before = reference::execute(g, in);
  passes::canonicalize(g);
  CHECK(g.opset == 10);
  CHECK(reference::execute(g, in).at("y") == before.at("y"));
}

TEST_CASE("canonicalize: nki-samples' RMSNorm, eps after the square root, fuses with eps_after_sqrt and computes the same", "[canonical]") {
  const sim::Scenario s = sim::load_scenario(std::string(TESSERA_SOURCE_DIR) + "/scenarios/neuroncore/nki_samples/rmsnorm_qkv_s128_d512_n512_fp16.json");
  graph::Graph g = sim::load_model(s);
  // eps 0.5 instead of 1e-6, so that where it is added matters far beyond the tolerance.
  g.values.at("eps").data = Tensor::from_f32({1}, {0.5f});
  passes::prepare(g);
  const std::map<std::string, Tensor> in{{"hidden", random_tensor(DType::f32, {1, 128, 512}, 3, true, 1.0)}};
  const auto before = reference::execute(g, in);
  passes::canonicalize(g);
  int rms = 0, sqrt_ops = 0;
  for (const auto& n : g.nodes) {
    if (n.op == "RMSNormalization") {
      ++rms;
      CHECK(n.attrs.get_int("eps_after_sqrt", 0) == 1);
      CHECK(n.attrs.get_float("epsilon", 0) == Approx(0.5));
    }
    if (n.op == "Sqrt") ++sqrt_ops;
  }
  CHECK(rms == 1);
  CHECK(sqrt_ops == 0);
  const auto after = reference::execute(g, in);
  const Comparison c = compare(after.at("out"), before.at("out"), 1e-5, 1e-5);
  INFO("max abs " << c.max_abs_error << " max rel " << c.max_rel_error);
  CHECK(c.pass);
}

TEST_CASE("canonicalize: a scalar scale before a Transpose read by a MatMul moves past the Transpose, and computes the same", "[canonical]") {
  // y = MatMul(Transpose(x * c), w): the Mul then feeds the MatMul, which absorbs it (the NeuronCore
  // folds it into its epilogue; the nki-samples attention scales q before transposing it). With the
  // scaled value read elsewhere too (`keep`), nothing moves.
  for (const bool keep : {false, true}) {
    graph::Graph g;
    g.opset = 17;
    g.source = "test";
    g.inputs = {"x", "w"};
    g.outputs = keep ? std::vector<std::string>{"y", "xs"} : std::vector<std::string>{"y"};
    g.values["x"] = graph::Value{"x", DType::f32, {2, 3, 4}, true, std::nullopt, false};
    g.values["w"] = graph::Value{"w", DType::f32, {2, 3, 5}, true, std::nullopt, false};
    g.values["c"] = graph::Value{"c", DType::f32, {}, true, Tensor::from_f32({}, {0.37f}), false};
    for (const char* v : {"xs", "xt", "y"}) g.values[v] = graph::Value{v, DType::f32, {}, false, std::nullopt, false};
    graph::Node mul{"scale", "Mul", {}, {"x", "c"}, {"xs"}}, tr{"turn", "Transpose", {}, {"xs"}, {"xt"}}, mm{"mm", "MatMul", {}, {"xt", "w"}, {"y"}};
    tr.attrs.set("perm", std::vector<int64_t>{0, 2, 1});
    g.nodes = {mul, tr, mm};
    passes::prepare(g);
    const std::map<std::string, Tensor> in{{"x", random_tensor(DType::f32, {2, 3, 4}, 1, true, 1.0)}, {"w", random_tensor(DType::f32, {2, 3, 5}, 2, true, 1.0)}};
    const auto before = reference::execute(g, in);
    passes::canonicalize(g);
    const graph::Node* scale = nullptr;
    for (const auto& n : g.nodes)
      if (n.op == "Mul") scale = &n;
    REQUIRE(scale != nullptr);
    INFO("keep " << keep);
    CHECK((scale->outputs[0] == "xt") == !keep);  // the Mul produces what the MatMul reads
    CHECK(reference::execute(g, in).at("y") == before.at("y"));
  }
}
