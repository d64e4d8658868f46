// Pattern fusion for compilers: the decompositions PyTorch's ONNX exporter writes for GELU (erf form)
// and LayerNorm become the single ops the machines compute natively. The reference executor never
// sees these rewrites: it runs the model as exported, so a compiled result is still checked against
// the decomposition.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "mapper/passes/passes.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

struct Index {
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<size_t>> consumers;
  explicit Index(const Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& o : g.nodes[i].outputs) producer[o] = i;
      for (const auto& in : g.nodes[i].inputs) consumers[in].push_back(i);
    }
  }
  // The single consumer of v, or nullptr.
  const Node* only_consumer(const Graph& g, const std::string& v, size_t* idx = nullptr) const {
    auto it = consumers.find(v);
    if (it == consumers.end() || it->second.size() != 1) return nullptr;
    if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
    if (idx) *idx = it->second[0];
    return &g.nodes[it->second[0]];
  }
};

// A scalar constant's value, if `v` is one.
bool scalar_const(const Graph& g, const std::string& v, double& out) {
  if (!g.has_value(v)) return false;
  const auto& val = g.value(v);
  if (!val.data || val.data->numel() != 1 || !is_float(val.dtype)) return false;
  out = val.data->to_f64()[0];
  return true;
}

// The other input of a binary node.
const std::string& other(const Node& n, const std::string& v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

// x -> Div(x, sqrt2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5), in the exporter's order (the
// 0.5 may also multiply x first). Returns the nodes to drop and the final output.
bool match_gelu(const Graph& g, const Index& ix, size_t erf_idx, std::vector<size_t>& drop, std::string& x, std::string& out) {
  const Node& erf = g.nodes[erf_idx];
  auto p = ix.producer.find(erf.inputs[0]);
  if (p == ix.producer.end()) return false;
  const Node& div = g.nodes[p->second];
  double c = 0;
  if (div.op != "Div" || !scalar_const(g, div.inputs[1], c) || std::abs(c - std::sqrt(2.0)) > 1e-3) return false;
  x = div.inputs[0];
  if (!ix.only_consumer(g, div.outputs[0])) return false;
  size_t add_i = 0, mul_i = 0, half_i = 0;
  const Node* add = ix.only_consumer(g, erf.outputs[0], &add_i);
  double one = 0;
  if (!add || add->op != "Add" || !scalar_const(g, other(*add, erf.outputs[0]), one) || one != 1.0) return false;
  const Node* mul = ix.only_consumer(g, add->outputs[0], &mul_i);
  if (!mul || mul->op != "Mul" || other(*mul, add->outputs[0]) != x) return false;
  const Node* half = ix.only_consumer(g, mul->outputs[0], &half_i);
  double h = 0;
  if (!half || half->op != "Mul" || !scalar_const(g, other(*half, mul->outputs[0]), h) || h != 0.5) return false;
  drop = {p->second, erf_idx, add_i, mul_i, half_i};
  out = half->outputs[0];
  return true;
}

// m = ReduceMean(x, last axis); d = Sub(x, m); q = Pow(d, 2); v = ReduceMean(q); e = Add(v, eps);
// s = Sqrt(e); n = Div(d, s); y = Mul(n, gamma); z = Add(y, beta).
bool match_layernorm(const Graph& g, const Index& ix, size_t mean_idx, std::vector<size_t>& drop, Node& fused) {
  const Node& mean = g.nodes[mean_idx];
  const std::string x = mean.inputs[0];
  const auto& xs = g.value(x).shape;
  auto last_axis_only = [&](const Node& r) {
    if (r.attrs.get_int("keepdims", 1) != 1) return false;
    std::vector<int64_t> axes = r.attrs.get_ints("axes");
    if (axes.empty() && r.inputs.size() > 1 && g.value(r.inputs[1]).data) axes = g.value(r.inputs[1]).data->to_i64();
    return axes.size() == 1 && (axes[0] == -1 || axes[0] == static_cast<int64_t>(xs.size()) - 1);
  };
  if (xs.empty() || !last_axis_only(mean)) return false;
  // Sub(x, m): mean's only consumer.
  size_t sub_i = 0, pow_i = 0, mean2_i = 0, add_i = 0, sqrt_i = 0, div_i = 0, mul_i = 0, badd_i = 0;
  const Node* sub = ix.only_consumer(g, mean.outputs[0], &sub_i);
  if (!sub || sub->op != "Sub" || sub->inputs[0] != x || sub->inputs[1] != mean.outputs[0]) return false;
  // d has two consumers: Pow and Div.
  auto dc = ix.consumers.find(sub->outputs[0]);
  if (dc == ix.consumers.end() || dc->second.size() != 2) return false;
  const Node* pw = nullptr;
  const Node* div = nullptr;
  for (size_t c : dc->second) {
    if (g.nodes[c].op == "Pow") {
      pw = &g.nodes[c];
      pow_i = c;
    } else if (g.nodes[c].op == "Div") {
      div = &g.nodes[c];
      div_i = c;
    }
  }
  double two = 0;
  if (!pw || !div || !scalar_const(g, pw->inputs[1], two) || two != 2.0) return false;
  const Node* mean2 = ix.only_consumer(g, pw->outputs[0], &mean2_i);
  if (!mean2 || mean2->op != "ReduceMean" || !last_axis_only(*mean2)) return false;
  const Node* add = ix.only_consumer(g, mean2->outputs[0], &add_i);
  double eps = 0;
  if (!add || add->op != "Add" || !scalar_const(g, other(*add, mean2->outputs[0]), eps)) return false;
  const Node* sq = ix.only_consumer(g, add->outputs[0], &sqrt_i);
  if (!sq || sq->op != "Sqrt") return false;
  if (ix.only_consumer(g, sq->outputs[0]) != div || div->inputs[0] != sub->outputs[0] || div->inputs[1] != sq->outputs[0]) return false;
  const Node* mul = ix.only_consumer(g, div->outputs[0], &mul_i);
  if (!mul || mul->op != "Mul") return false;
  const std::string gamma = other(*mul, div->outputs[0]);
  const Node* badd = ix.only_consumer(g, mul->outputs[0], &badd_i);
  if (!badd || badd->op != "Add") return false;
  const std::string beta = other(*badd, mul->outputs[0]);
  const int64_t C = xs.back();
  for (const auto& p : {gamma, beta}) {
    const auto& v = g.value(p);
    if (!v.data || v.data->numel() != C) return false;
  }
  drop = {mean_idx, sub_i, pow_i, mean2_i, add_i, sqrt_i, div_i, mul_i, badd_i};
  fused.name = mean.name + "+layernorm";
  fused.op = "LayerNormalization";
  fused.inputs = {x, gamma, beta};
  fused.outputs = {badd->outputs[0]};
  fused.attrs.set("axis", int64_t{-1});
  fused.attrs.set("epsilon", eps);
  return true;
}

}  // namespace

int fuse_patterns(Graph& g) {
  int fused_count = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    const Index ix(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      std::vector<size_t> drop;
      Node repl;
      std::string x, out;
      if (g.nodes[i].op == "Erf" && match_gelu(g, ix, i, drop, x, out)) {
        repl.name = g.nodes[i].name + "+gelu";
        repl.op = "Gelu";
        repl.inputs = {x};
        repl.outputs = {out};
      } else if (g.nodes[i].op == "ReduceMean" && match_layernorm(g, ix, i, drop, repl)) {
      } else {
        continue;
      }
      std::set<size_t> dropset(drop.begin(), drop.end());
      std::vector<Node> kept;
      for (size_t k = 0; k < g.nodes.size(); ++k)
        if (!dropset.count(k)) kept.push_back(std::move(g.nodes[k]));
      kept.push_back(std::move(repl));
      g.nodes = std::move(kept);
      remove_dead(g);
      ++fused_count;
      changed = true;
    }
  }
  graph::verify(g);
  return fused_count;
}

}  // namespace tessera::passes
