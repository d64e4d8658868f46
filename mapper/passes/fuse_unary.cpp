// fuse_decompositions, part 2: activation functions written as several elementwise ops (GELU's erf
// and tanh forms, SiLU, HardSwish, Mish, Softplus) recognised by what they compute, whatever the
// order and form of the ops. A region of elementwise nodes that reads one tensor x (and scalar
// constants) and writes one tensor y is run on the reference executor over probe points; if it
// computes one of the known functions to fp32 accuracy, the region becomes that one op.
#include <cmath>
#include <functional>
#include <set>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/passes/rewrite.hpp"
#include "mapper/reference/executor.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

bool elementwise(const std::string& op) {
  static const std::set<std::string> ops = {"Add", "Sub",  "Mul",  "Div",     "Pow",        "Sqrt", "Exp",  "Log",  "Tanh",
                                            "Sigmoid", "Erf", "Relu", "Neg", "Abs", "Reciprocal", "Clip", "Max", "Min", "HardSigmoid", "Softplus"};
  return ops.count(op) != 0;
}

struct Known {
  const char* op;
  const char* approximate;  // Gelu's attribute, or nullptr
  std::function<double(double)> f;
};

const std::vector<Known>& known() {
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  static const std::vector<Known> k = {
      {"Gelu", "none", [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {"Gelu", "tanh", [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }},
      {"Swish", nullptr, [=](double x) { return x * sigmoid(x); }},
      {"HardSwish", nullptr, [](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); }},
      {"Mish", nullptr, [=](double x) { return x * std::tanh(softplus(x)); }},
      {"Softplus", nullptr, softplus},
  };
  return k;
}

// The probe points: [-8, 8] in steps of 1/64 (1025 values, exact in fp32), and larger magnitudes
// up to 80 (exp(80) still fits fp32), so a region that only agrees near 0 (a clamp at 9) is not
// taken for the function.
std::vector<float> probe_points() {
  std::vector<float> v;
  for (int i = -512; i <= 512; ++i) v.push_back(static_cast<float>(i) / 64.0f);
  for (float m : {10.0f, 12.0f, 16.0f, 20.0f, 30.0f, 50.0f, 80.0f}) {
    v.push_back(m);
    v.push_back(-m);
  }
  return v;
}

// Runs `nodes` (a region reading x) on the probe points; empty on any failure.
std::vector<double> probe(const Graph& g, const std::vector<size_t>& nodes, const std::string& x, const std::string& y) {
  Graph p;
  p.opset = g.opset;
  p.source = "probe";
  const auto pts = probe_points();
  const Shape s{static_cast<int64_t>(pts.size())};
  p.inputs = {x};
  p.outputs = {y};
  p.values[x] = graph::Value{x, DType::f32, s, true, std::nullopt, false};
  for (size_t i : nodes) {
    const Node& n = g.nodes[i];
    for (const auto& in : n.inputs)
      if (!in.empty() && !p.values.count(in)) {
        const auto& v = g.value(in);
        if (!v.data) return {};
        p.values[in] = v;
        p.values[in].data = v.data->cast(DType::f32);
        p.values[in].dtype = DType::f32;
      }
    for (const auto& o : n.outputs)
      if (!o.empty()) p.values[o] = graph::Value{o, DType::f32, s, true, std::nullopt, false};
    p.nodes.push_back(n);
  }
  try {
    prepare(p);
    const auto out = reference::execute(p, {{x, Tensor::from_f32(s, pts)}});
    return out.at(y).to_f64();
  } catch (const std::exception&) {
    return {};
  }
}

const Known* identify(const std::vector<double>& got) {
  const auto pts = probe_points();
  for (const auto& k : known()) {
    bool ok = got.size() == pts.size();
    for (size_t i = 0; ok && i < pts.size(); ++i) {
      const double want = k.f(pts[i]);
      ok = std::abs(got[i] - want) <= 2e-6 * std::max(1.0, std::abs(want));
    }
    if (ok) return &k;
  }
  return nullptr;
}

// The largest region of elementwise nodes reachable from x whose other inputs are scalar constants.
std::vector<size_t> region_from(const Rewriter& rw, const std::string& x) {
  const Graph& g = rw.graph();
  const auto& xs = g.value(x);
  std::set<std::string> avail{x};
  std::vector<size_t> region;
  std::set<size_t> in_region;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& v : std::vector<std::string>(avail.begin(), avail.end()))
      for (size_t c : rw.consumers(v)) {
        const Node& n = g.nodes[c];
        if (in_region.count(c) || !elementwise(n.op) || n.outputs.size() != 1) continue;
        const auto& ov = g.value(n.outputs[0]);
        if (ov.shape != xs.shape || !is_float(ov.dtype)) continue;
        bool ok = true;
        for (const auto& in : n.inputs)
          if (!in.empty() && !avail.count(in) && !(rw.constant(in) && rw.constant(in)->numel() == 1)) ok = false;
        if (!ok) continue;
        region.push_back(c);
        in_region.insert(c);
        avail.insert(n.outputs[0]);
        grew = true;
      }
  }
  return region;
}

// The nodes of `region` that `y` depends on, if every value they make except y stays inside them.
std::vector<size_t> closed_part(const Rewriter& rw, const std::vector<size_t>& region, const std::string& y) {
  const Graph& g = rw.graph();
  std::set<size_t> in_region(region.begin(), region.end()), part;
  std::vector<std::string> todo{y};
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    const size_t p = rw.producer_index(v);
    if (p == SIZE_MAX || !in_region.count(p) || !part.insert(p).second) continue;
    for (const auto& in : g.nodes[p].inputs) todo.push_back(in);
  }
  for (size_t i : part)
    for (const auto& o : g.nodes[i].outputs) {
      if (o == y) continue;
      if (rw.is_output(o)) return {};
      for (size_t c : rw.consumers(o))
        if (!part.count(c)) return {};
    }
  std::vector<size_t> ordered;
  for (size_t i : region)
    if (part.count(i)) ordered.push_back(i);
  return ordered;
}

}  // namespace

bool fuse_unary_regions(Graph& g) {
  bool any = false;
  for (bool changed = true; changed;) {
    changed = false;
    Rewriter rw(g);
    std::vector<std::string> starts = g.inputs;
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty() && is_float(g.value(o).dtype)) starts.push_back(o);
    for (const auto& x : starts) {
      const auto region = region_from(rw, x);
      if (region.size() < 2) continue;
      // Try the region's outputs from the last one found back (the largest function first).
      for (auto it = region.rbegin(); it != region.rend() && !changed; ++it) {
        const std::string y = g.nodes[*it].outputs[0];
        const auto part = closed_part(rw, region, y);
        if (part.size() < 2) continue;
        const Known* k = identify(probe(g, part, x, y));
        if (!k) continue;
        Node f{g.nodes[*it].name + "+" + k->op, k->op, {}, {x}, {y}};
        if (k->approximate) f.attrs.set("approximate", std::string(k->approximate));
        for (size_t i : part) rw.remove_node(i);
        rw.add_node(std::move(f));
        changed = true;
      }
      if (changed) break;
    }
    if (changed) {
      rw.commit();
      remove_dead(g);
      any = true;
    }
  }
  return any;
}

}  // namespace tessera::passes
