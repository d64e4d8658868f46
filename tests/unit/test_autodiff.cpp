// Autodiff (mapper/passes/autodiff.hpp): gradients against central finite differences in fp64, and
// the optimizers' updates against their formulas written out here.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "isa/error.hpp"
#include "mapper/frontend/json_graph.hpp"
#include "mapper/passes/autodiff.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"

using namespace tessera;
using json = nlohmann::json;

namespace {

// x [3, 4] -> Gemm(W1 [4, 5], b1 [5]) -> Relu -> Gemm(W2 [2, 5], transB, b2) -> Tanh -> MatMul(W3 [2, 3])
// -> Add(b3 [3]) -> Sigmoid -> y [3, 3]; every value fp64.
graph::Graph mlp64() {
  const json j = json::parse(R"js({
    "inputs": {"x": {"shape": [3, 4], "dtype": "fp64"}},
    "outputs": ["y"],
    "initializers": {
      "W1": {"shape": [4, 5], "dtype": "fp64", "random": {"seed": 1, "dist": "normal", "scale": 0.7}},
      "b1": {"shape": [5], "dtype": "fp64", "random": {"seed": 2, "dist": "normal", "scale": 0.3}},
      "W2": {"shape": [2, 5], "dtype": "fp64", "random": {"seed": 3, "dist": "normal", "scale": 0.7}},
      "b2": {"shape": [2], "dtype": "fp64", "random": {"seed": 4, "dist": "normal", "scale": 0.3}},
      "W3": {"shape": [2, 3], "dtype": "fp64", "random": {"seed": 5, "dist": "normal", "scale": 0.7}},
      "b3": {"shape": [3], "dtype": "fp64", "random": {"seed": 6, "dist": "normal", "scale": 0.3}}},
    "nodes": [
      {"op": "Gemm", "inputs": ["x", "W1", "b1"], "outputs": ["h1"]},
      {"op": "Relu", "inputs": ["h1"], "outputs": ["r1"]},
      {"op": "Gemm", "inputs": ["r1", "W2", "b2"], "outputs": ["h2"], "attrs": {"transB": 1}},
      {"op": "Tanh", "inputs": ["h2"], "outputs": ["t2"]},
      {"op": "MatMul", "inputs": ["t2", "W3"], "outputs": ["h3"]},
      {"op": "Add", "inputs": ["h3", "b3"], "outputs": ["h4"]},
      {"op": "Sigmoid", "inputs": ["h4"], "outputs": ["y"]}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  return g;
}

Tensor f64(Shape s, uint64_t seed, double scale = 1.0) { return random_tensor(DType::f64, std::move(s), seed, true, scale); }

std::map<std::string, Tensor> feeds(const passes::TrainingGraph& tg, const Tensor& x, const Tensor& t) {
  std::map<std::string, Tensor> in = tg.initial;
  in["x"] = x;
  in["target"] = t;
  Tensor step(DType::f64, {});
  step.as<double>()[0] = 1;
  in["step"] = step;
  return in;
}

double loss_of(const passes::TrainingGraph& tg, const std::map<std::string, Tensor>& in) {
  return reference::execute(tg.g, in).at("loss").to_f64()[0];
}

// Every parameter gradient of one step of `tg` on `in` (the "step" input set here) against central
// finite differences (eps 1e-6, within 1e-7 relative); returns how many elements were checked.
int fd_check(const passes::TrainingGraph& tg, std::map<std::string, Tensor> in) {
  Tensor step(DType::f64, {});
  step.as<double>()[0] = 1;
  in["step"] = step;
  const auto out = reference::execute(tg.g, in);
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& p : tg.params) {
    const auto gr = out.at("grad:" + p).to_f64();
    REQUIRE(static_cast<int64_t>(gr.size()) == tg.initial.at(p).numel());
    for (size_t e = 0; e < gr.size(); ++e) {
      auto plus = in, minus = in;
      plus[p].as<double>()[e] += eps;
      minus[p].as<double>()[e] -= eps;
      const double fd = (loss_of(tg, plus) - loss_of(tg, minus)) / (2 * eps);
      INFO("d/d" << p << "[" << e << "]: autodiff " << gr[e] << " finite difference " << fd);
      CHECK(std::fabs(gr[e] - fd) <= 1e-7 * std::max(1.0, std::fabs(fd)));
      ++checked;
    }
  }
  return checked;
}

void gradient_check(const std::string& loss, const Tensor& target) {
  passes::TrainingSpec spec;
  spec.loss = loss;
  const passes::TrainingGraph tg = passes::make_training_graph(mlp64(), spec);
  REQUIRE(tg.params == std::vector<std::string>{"W1", "b1", "W2", "b2", "W3", "b3"});
  const Tensor x = f64({3, 4}, 11);
  CHECK(fd_check(tg, feeds(tg, x, target)) == 20 + 5 + 10 + 2 + 6 + 3);
}

}  // namespace

TEST_CASE("autodiff: MSE gradients of a Gemm/Relu/Tanh/MatMul/Add/Sigmoid chain match finite differences in fp64", "[autodiff]") {
  gradient_check("mse", f64({3, 3}, 12));
}

TEST_CASE("autodiff: softmax cross-entropy gradients match finite differences in fp64", "[autodiff]") {
  Tensor t(DType::f64, {3, 3});  // one-hot rows
  auto v = t.as<double>();
  v[0 * 3 + 2] = v[1 * 3 + 0] = v[2 * 3 + 1] = 1.0;
  gradient_check("softmax_cross_entropy", t);
}

TEST_CASE("autodiff: SGD, momentum and Adam updates follow their formulas", "[autodiff]") {
  const Tensor x = f64({3, 4}, 21), t = f64({3, 3}, 22);
  for (const std::string opt : {"sgd", "momentum", "adam"}) {
    INFO(opt);
    passes::TrainingSpec spec;
    spec.optimizer = opt;
    spec.learning_rate = 0.05;
    spec.weight_decay = 0.01;
    const passes::TrainingGraph tg = passes::make_training_graph(mlp64(), spec);
    auto in = feeds(tg, x, t);
    // Two steps, the state carried by hand exactly as a session does.
    std::map<std::string, std::vector<double>> m, v;
    for (int step = 1; step <= 2; ++step) {
      in["step"].as<double>()[0] = step;
      const auto out = reference::execute(tg.g, in);
      for (const auto& p : tg.params) {
        const auto w = in.at(p).to_f64(), g0 = out.at("grad:" + p).to_f64(), next = out.at("next:" + p).to_f64();
        auto& mm = m[p];
        auto& vv = v[p];
        mm.resize(w.size(), 0.0);
        vv.resize(w.size(), 0.0);
        for (size_t e = 0; e < w.size(); ++e) {
          const double g = g0[e] + 0.01 * w[e];
          double want;
          if (opt == "sgd") {
            want = w[e] - 0.05 * g;
          } else if (opt == "momentum") {
            mm[e] = 0.9 * mm[e] + g;
            want = w[e] - 0.05 * mm[e];
          } else {
            mm[e] = 0.9 * mm[e] + 0.1 * g;
            vv[e] = 0.999 * vv[e] + 0.001 * g * g;
            const double mh = mm[e] / (1 - std::pow(0.9, step)), vh = vv[e] / (1 - std::pow(0.999, step));
            want = w[e] - 0.05 * mh / (std::sqrt(vh) + 1e-8);
          }
          CHECK(next[e] == Approx(want).epsilon(1e-12).margin(1e-15));
        }
      }
      for (const auto& [st, nx] : tg.state) in[st] = out.at(nx);
    }
  }
}

TEST_CASE("autodiff: an op without a gradient is named", "[autodiff]") {
  const json j = json::parse(R"js({
    "inputs": {"x": {"shape": [2, 3]}}, "outputs": ["y"],
    "initializers": {"W": {"shape": [3, 3], "random": {"seed": 1, "dist": "normal", "scale": 1.0}},
                     "s4": {"shape": [4], "dtype": "int64", "values": [1, 1, 2, 3]}, "s2": {"shape": [2], "dtype": "int64", "values": [2, 3]}},
    "nodes": [{"name": "mm", "op": "MatMul", "inputs": ["x", "W"], "outputs": ["h"]},
              {"name": "to4d", "op": "Reshape", "inputs": ["h", "s4"], "outputs": ["h4"]},
              {"name": "pool", "op": "AveragePool", "inputs": ["h4"], "outputs": ["p"], "attrs": {"kernel_shape": [1, 1]}},
              {"name": "back", "op": "Reshape", "inputs": ["p", "s2"], "outputs": ["y"]}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  try {
    passes::make_training_graph(g, {});
    FAIL("should throw");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("node 'pool' (AveragePool") && Catch::Contains("no gradient for AveragePool"));
  }
}

TEST_CASE("autodiff: learning-rate schedules are functions of the step tensor", "[autodiff]") {
  const Tensor x = f64({3, 4}, 31), t = f64({3, 3}, 32);
  struct Case {
    std::string kind;
    double (*want)(int);
  };
  const Case cases[] = {
      {"constant", [](int) { return 0.2; }},
      {"exponential", [](int s) { return 0.2 * std::pow(0.5, s - 1); }},
      {"step", [](int s) { return 0.2 * std::pow(0.5, (s - 1) / 3); }},
      {"warmup", [](int s) { return 0.2 * std::min(1.0, s / 4.0); }},
  };
  for (const auto& c : cases) {
    passes::TrainingSpec spec;
    spec.learning_rate = 0.2;
    spec.schedule = c.kind;
    spec.gamma = 0.5;
    spec.step_size = 3;
    spec.warmup_steps = 4;
    const passes::TrainingGraph tg = passes::make_training_graph(mlp64(), spec);
    auto in = feeds(tg, x, t);
    for (int step = 1; step <= 8; ++step) {
      in["step"].as<double>()[0] = step;
      INFO(c.kind << " step " << step);
      CHECK(reference::execute(tg.g, in).at("learning_rate").to_f64()[0] == Approx(c.want(step)).epsilon(1e-12));
    }
  }
}

// Attention-like graph in fp64: LayerNormalization (trainable scale and bias), 3-D @ 2-D and
// batched MatMuls, Transpose, Div by a constant, Softmax, Add, Sub, Mul, Erf, Neg, Exp, Sqrt, Log,
// Pow, Reshape and ReduceSum/ReduceMean -- every gradient against central finite differences.
TEST_CASE("autodiff: LayerNorm/attention/elementwise/reduction gradients match finite differences in fp64", "[autodiff]") {
  const json j = json::parse(R"js({
    "opset": 17,
    "inputs": {"x": {"shape": [2, 3, 4], "dtype": "fp64"}},
    "outputs": ["y"],
    "initializers": {
      "g": {"shape": [4], "dtype": "fp64", "random": {"seed": 21, "dist": "normal", "scale": 0.5}},
      "be": {"shape": [4], "dtype": "fp64", "random": {"seed": 22, "dist": "normal", "scale": 0.3}},
      "Wq": {"shape": [4, 4], "dtype": "fp64", "random": {"seed": 23, "dist": "normal", "scale": 0.6}},
      "Wk": {"shape": [4, 4], "dtype": "fp64", "random": {"seed": 24, "dist": "normal", "scale": 0.6}},
      "ba": {"shape": [4], "dtype": "fp64", "random": {"seed": 25, "dist": "normal", "scale": 0.3}},
      "two": {"shape": [], "dtype": "fp64", "values": [2.0]},
      "one": {"shape": [], "dtype": "fp64", "values": [1.0]},
      "three": {"shape": [], "dtype": "fp64", "values": [3.0]},
      "shape64": {"shape": [2], "dtype": "int64", "values": [6, 4]},
      "ax1": {"shape": [1], "dtype": "int64", "values": [1]}},
    "nodes": [
      {"op": "LayerNormalization", "inputs": ["x", "g", "be"], "outputs": ["ln"], "attrs": {"axis": -1, "epsilon": 1e-5}},
      {"op": "MatMul", "inputs": ["ln", "Wq"], "outputs": ["q"]},
      {"op": "MatMul", "inputs": ["ln", "Wk"], "outputs": ["k"]},
      {"op": "Transpose", "inputs": ["k"], "outputs": ["kt"], "attrs": {"perm": [0, 2, 1]}},
      {"op": "MatMul", "inputs": ["q", "kt"], "outputs": ["s"]},
      {"op": "Div", "inputs": ["s", "two"], "outputs": ["s2"]},
      {"op": "Softmax", "inputs": ["s2"], "outputs": ["p"], "attrs": {"axis": -1}},
      {"op": "MatMul", "inputs": ["p", "ln"], "outputs": ["a"]},
      {"op": "Add", "inputs": ["a", "ba"], "outputs": ["a2"]},
      {"op": "Sub", "inputs": ["a2", "x"], "outputs": ["r"]},
      {"op": "Mul", "inputs": ["r", "ln"], "outputs": ["m"]},
      {"op": "Erf", "inputs": ["m"], "outputs": ["e"]},
      {"op": "Neg", "inputs": ["e"], "outputs": ["ne"]},
      {"op": "Exp", "inputs": ["ne"], "outputs": ["ex"]},
      {"op": "Mul", "inputs": ["e", "e"], "outputs": ["e2"]},
      {"op": "Add", "inputs": ["e2", "one"], "outputs": ["e21"]},
      {"op": "Sqrt", "inputs": ["e21"], "outputs": ["sq"]},
      {"op": "Log", "inputs": ["sq"], "outputs": ["lg"]},
      {"op": "Pow", "inputs": ["ex", "three"], "outputs": ["pw"]},
      {"op": "Add", "inputs": ["pw", "lg"], "outputs": ["z"]},
      {"op": "Reshape", "inputs": ["z", "shape64"], "outputs": ["flat"]},
      {"op": "ReduceSum", "inputs": ["flat", "ax1"], "outputs": ["rs"], "attrs": {"keepdims": 1}},
      {"op": "ReduceMean", "inputs": ["flat"], "outputs": ["rm"], "attrs": {"axes": [1], "keepdims": 1}},
      {"op": "Sub", "inputs": ["rs", "rm"], "outputs": ["y"]}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  passes::TrainingSpec spec;
  const passes::TrainingGraph tg = passes::make_training_graph(g, spec);
  REQUIRE(tg.params == std::vector<std::string>{"g", "be", "Wq", "Wk", "ba"});
  auto in = tg.initial;
  in["x"] = f64({2, 3, 4}, 31);
  in["target"] = f64({6, 1}, 32);
  CHECK(fd_check(tg, in) == 4 + 4 + 16 + 16 + 4);
}

// A convolution (stride 2, padding 1) feeding a Gemm: the Conv's weight and bias gradients (a
// ConvTranspose for the input, a dilated correlation for the weight) against finite differences.
TEST_CASE("autodiff: Conv gradients (stride 2, pads 1) match finite differences in fp64", "[autodiff]") {
  const json j = json::parse(R"js({
    "opset": 17,
    "inputs": {"x": {"shape": [2, 2, 5, 5], "dtype": "fp64"}},
    "outputs": ["y"],
    "initializers": {
      "W": {"shape": [3, 2, 3, 3], "dtype": "fp64", "random": {"seed": 41, "dist": "normal", "scale": 0.4}},
      "B": {"shape": [3], "dtype": "fp64", "random": {"seed": 42, "dist": "normal", "scale": 0.3}},
      "Wf": {"shape": [27, 2], "dtype": "fp64", "random": {"seed": 43, "dist": "normal", "scale": 0.3}},
      "bf": {"shape": [2], "dtype": "fp64", "random": {"seed": 44, "dist": "normal", "scale": 0.3}}},
    "nodes": [
      {"op": "Conv", "inputs": ["x", "W", "B"], "outputs": ["c"], "attrs": {"strides": [2, 2], "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}},
      {"op": "Tanh", "inputs": ["c"], "outputs": ["t"]},
      {"op": "Flatten", "inputs": ["t"], "outputs": ["f"], "attrs": {"axis": 1}},
      {"op": "Gemm", "inputs": ["f", "Wf", "bf"], "outputs": ["y"]}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  passes::TrainingSpec spec;
  const passes::TrainingGraph tg = passes::make_training_graph(g, spec);
  REQUIRE(tg.params == std::vector<std::string>{"W", "B", "Wf", "bf"});
  auto in = tg.initial;
  in["x"] = f64({2, 2, 5, 5}, 51);
  in["target"] = f64({2, 2}, 52);
  CHECK(fd_check(tg, in) == 54 + 3 + 54 + 2);
}

// Conv -> Relu -> MaxPool 2x2 (windows tiling the input) -> Flatten -> Gemm: the pool routes the
// gradient to each window's max (random data: no ties).
TEST_CASE("autodiff: MaxPool gradients (2x2 windows) match finite differences in fp64", "[autodiff]") {
  const json j = json::parse(R"js({
    "opset": 17,
    "inputs": {"x": {"shape": [2, 1, 6, 6], "dtype": "fp64"}},
    "outputs": ["y"],
    "initializers": {
      "W": {"shape": [2, 1, 3, 3], "dtype": "fp64", "random": {"seed": 61, "dist": "normal", "scale": 0.5}},
      "B": {"shape": [2], "dtype": "fp64", "random": {"seed": 62, "dist": "normal", "scale": 0.3}},
      "Wf": {"shape": [18, 3], "dtype": "fp64", "random": {"seed": 63, "dist": "normal", "scale": 0.3}}},
    "nodes": [
      {"op": "Conv", "inputs": ["x", "W", "B"], "outputs": ["c"], "attrs": {"pads": [1, 1, 1, 1]}},
      {"op": "Relu", "inputs": ["c"], "outputs": ["r"]},
      {"op": "MaxPool", "inputs": ["r"], "outputs": ["p"], "attrs": {"kernel_shape": [2, 2], "strides": [2, 2]}},
      {"op": "Flatten", "inputs": ["p"], "outputs": ["f"], "attrs": {"axis": 1}},
      {"op": "MatMul", "inputs": ["f", "Wf"], "outputs": ["y"]}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  const passes::TrainingGraph tg = passes::make_training_graph(g, passes::TrainingSpec{});
  REQUIRE(tg.params == std::vector<std::string>{"W", "B", "Wf"});
  auto in = tg.initial;
  in["x"] = f64({2, 1, 6, 6}, 71);
  in["target"] = f64({2, 3}, 72);
  CHECK(fd_check(tg, in) == 18 + 2 + 54);
}

// Asymmetric pads and a stride that skips input rows at the end (8 + 0 + 1 - 3 = 6: the stride 3
// reaches row 6 of 9 padded rows, leaving 2): the input gradient must keep the forward pads.
TEST_CASE("autodiff: Conv gradients with asymmetric pads and stride 3 match finite differences in fp64", "[autodiff]") {
  const json j = json::parse(R"js({
    "opset": 17,
    "inputs": {"x": {"shape": [1, 2, 8, 8], "dtype": "fp64"}},
    "outputs": ["y"],
    "initializers": {
      "W0": {"shape": [2, 2, 1, 1], "dtype": "fp64", "random": {"seed": 80, "dist": "normal", "scale": 0.5}},
      "W": {"shape": [2, 2, 3, 3], "dtype": "fp64", "random": {"seed": 81, "dist": "normal", "scale": 0.4}}},
    "nodes": [
      {"op": "Conv", "inputs": ["x", "W0"], "outputs": ["c0"]},
      {"op": "Tanh", "inputs": ["c0"], "outputs": ["t0"]},
      {"op": "Conv", "inputs": ["t0", "W"], "outputs": ["c"], "attrs": {"strides": [3, 3], "pads": [0, 1, 1, 0]}},
      {"op": "Flatten", "inputs": ["c"], "outputs": ["y"], "attrs": {"axis": 1}}]})js");
  graph::Graph g = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(g);
  const passes::TrainingGraph tg = passes::make_training_graph(g, passes::TrainingSpec{});
  REQUIRE(tg.params == std::vector<std::string>{"W0", "W"});
  auto in = tg.initial;
  in["x"] = f64({1, 2, 8, 8}, 82);
  in["target"] = f64({1, 18}, 83);
  CHECK(fd_check(tg, in) == 4 + 36);
}

// Mixed precision: the forward pass's float constants (a scaling's divisor, an additive mask) are
// read in the compute type like the weights -- else the Div mixes fp16 activations with an fp32
// constant ("input dtypes differ", the stock encoder layer's attention) -- with finite values beyond
// the type's range saturated (a mask subtracting 1e9 subtracts 65504 in fp16, not inf). (An Add's
// initializer of rank >= 1 is a trainable bias, cast as a weight.)
TEST_CASE("autodiff: mixed precision reads the forward pass's float constants in the compute type", "[autodiff]") {
  const json j = json::parse(R"js({
    "inputs": {"x": {"shape": [2, 4]}},
    "outputs": ["y"],
    "initializers": {
      "W": {"shape": [4, 3], "random": {"seed": 1, "dist": "normal", "scale": 0.5}},
      "c": {"shape": [], "values": [4.0]},
      "M": {"shape": [2, 3], "values": [0, 1e9, 0, 0, 0, 1e9]}},
    "nodes": [
      {"op": "MatMul", "inputs": ["x", "W"], "outputs": ["s"]},
      {"op": "Div", "inputs": ["s", "c"], "outputs": ["d"]},
      {"op": "Sub", "inputs": ["d", "M"], "outputs": ["m"]},
      {"op": "Softmax", "inputs": ["m"], "outputs": ["y"], "attrs": {"axis": -1}}]})js");
  graph::Graph fwd = frontend::load_json_graph(j, "/model/graph", "");
  passes::prepare(fwd);
  passes::TrainingSpec spec;
  spec.compute = DType::f16;
  const passes::TrainingGraph tg = passes::make_training_graph(fwd, spec);
  REQUIRE(tg.g.has_value("lp/c"));
  REQUIRE(tg.g.has_value("lp/M"));
  CHECK(tg.g.value("lp/c").dtype == DType::f16);
  const auto m = tg.g.value("lp/M").data->to_f32();
  CHECK(m == std::vector<float>{0, 65504, 0, 0, 0, 65504});
  std::map<std::string, Tensor> in = tg.initial;
  in["x"] = random_tensor(DType::f32, {2, 4}, 3, true, 1.0);
  in["target"] = random_tensor(DType::f32, {2, 3}, 4, true, 0.1);
  in["step"] = Tensor::from_f32({}, {1.0f});
  const auto out = reference::execute(tg.g, in);
  CHECK(std::isfinite(out.at("loss").to_f64()[0]));
  for (const double gw : out.at("grad:W").to_f64()) CHECK(std::isfinite(gw));
}
