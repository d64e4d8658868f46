// fuse_decompositions, part 1: LayerNorm and RMSNorm recognised by their structure, in the forms
// exporters write (canonicalize.hpp). Part 2 (fuse_unary.cpp) finds activation functions by probing.
#include <algorithm>
#include <cmath>
#include <set>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/passes/rewrite.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

const std::string& other(const Node& n, const std::string& v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; }

struct Match {
  std::set<size_t> nodes;  // matched nodes (removed when the match is applied)
  const Node* node(const Rewriter& rw, const std::string& v, const char* op) {
    const size_t i = rw.producer_index(v);
    if (i == SIZE_MAX || rw.graph().nodes[i].op != op) return nullptr;
    nodes.insert(i);
    return &rw.graph().nodes[i];
  }
};

// ReduceMean over trailing axes [first, rank) with keepdims; returns first (or -1).
int64_t trailing_mean(const Rewriter& rw, const Node& r) {
  if (r.op != "ReduceMean" || r.attrs.get_int("keepdims", 1) != 1) return -1;
  const int64_t rank = static_cast<int64_t>(rw.value(r.inputs[0]).shape.size());
  std::vector<int64_t> axes = r.attrs.get_ints("axes");
  if (axes.empty() && r.inputs.size() > 1 && rw.constant(r.inputs[1])) axes = rw.constant(r.inputs[1])->to_i64();
  if (axes.empty()) return -1;
  for (auto& a : axes)
    if (a < 0) a += rank;
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(k)) return -1;
  return axes[0];
}

// v = mean(d^2 over trailing axes) + eps, d squared as Pow(d, 2) or Mul(d, d).
struct MeanSquare {
  std::string d;
  double eps = 0;
  int64_t axis = -1;
};
std::optional<MeanSquare> mean_square(const Rewriter& rw, Match& m, const std::string& v) {
  const Node* add = m.node(rw, v, "Add");
  if (!add) return std::nullopt;
  for (const auto& mv : add->inputs) {
    const auto eps = rw.scalar(other(*add, mv));
    const Node* mean = eps ? m.node(rw, mv, "ReduceMean") : nullptr;
    if (!mean) continue;
    const int64_t axis = trailing_mean(rw, *mean);
    const size_t qi = rw.producer_index(mean->inputs[0]);
    if (axis < 0 || qi == SIZE_MAX) return std::nullopt;
    const Node& q = rw.graph().nodes[qi];
    m.nodes.insert(qi);
    if (q.op == "Pow" && rw.scalar(q.inputs[1]) == 2.0) return MeanSquare{q.inputs[0], *eps, axis};
    if (q.op == "Mul" && q.inputs[0] == q.inputs[1]) return MeanSquare{q.inputs[0], *eps, axis};
    return std::nullopt;
  }
  return std::nullopt;
}

// n = d / sqrt(v) or d * (1 / sqrt(v)) (Div(1, Sqrt) or Reciprocal(Sqrt)): returns v.
std::optional<std::string> normalized(const Rewriter& rw, Match& m, const Node& n, const std::string& d) {
  if (n.op == "Div" && n.inputs[0] == d) {
    const Node* sq = m.node(rw, n.inputs[1], "Sqrt");
    return sq ? std::optional<std::string>(sq->inputs[0]) : std::nullopt;
  }
  if (n.op != "Mul") return std::nullopt;
  const std::string& r = other(n, d);
  const size_t ri = rw.producer_index(r);
  if (ri == SIZE_MAX) return std::nullopt;
  const Node& inv = rw.graph().nodes[ri];
  m.nodes.insert(ri);
  std::string s;
  if (inv.op == "Reciprocal") s = inv.inputs[0];
  else if (inv.op == "Div" && rw.scalar(inv.inputs[0]) == 1.0) s = inv.inputs[1];
  else return std::nullopt;
  const Node* sq = m.node(rw, s, "Sqrt");
  return sq ? std::optional<std::string>(sq->inputs[0]) : std::nullopt;
}

// nki-samples' RMSNorm: n = d / (sqrt(mean(d^2)) + eps), the eps added after the square root.
// Returns the mean's value and eps.
std::optional<std::pair<std::string, double>> normalized_eps_after_sqrt(const Rewriter& rw, Match& m, const Node& n, const std::string& d) {
  if (n.op != "Div" || n.inputs[0] != d) return std::nullopt;
  const Node* add = m.node(rw, n.inputs[1], "Add");
  if (!add) return std::nullopt;
  for (const auto& sv : add->inputs) {
    const auto eps = rw.scalar(other(*add, sv));
    if (!eps || *eps < 0) continue;
    const Node* sq = m.node(rw, sv, "Sqrt");
    if (sq) return std::make_pair(sq->inputs[0], *eps);
  }
  return std::nullopt;
}

// A constant of the normalized shape (the trailing dims from axis), for scale and bias.
bool param_of(const Rewriter& rw, const std::string& p, const Shape& xs, int64_t axis) {
  const Tensor* t = rw.constant(p);
  if (!t || !is_float(t->dtype())) return false;
  Shape s = t->shape();
  while (!s.empty() && s.front() == 1 && s.size() > xs.size() - static_cast<size_t>(axis)) s.erase(s.begin());
  return s == Shape(xs.begin() + axis, xs.end());
}

// Every value produced inside the match, except `out`, is read only inside it.
bool closed(const Rewriter& rw, const Match& m, const std::string& out) {
  for (size_t i : m.nodes)
    for (const auto& o : rw.graph().nodes[i].outputs) {
      if (o == out || o.empty()) continue;
      if (rw.is_output(o)) return false;
      for (size_t c : rw.consumers(o))
        if (!m.nodes.count(c)) return false;
    }
  return true;
}

// Optional trailing Mul(., scale) and Add(., bias) with constants of the normalized shape.
void affine_tail(const Rewriter& rw, Match& m, std::string& out, const Shape& xs, int64_t axis, bool bias_allowed, std::string& scale, std::string& bias) {
  size_t ci = 0;
  const Node* c = rw.only_consumer(out, &ci);
  if (c && c->op == "Mul" && rw.value(c->outputs[0]).shape == xs && param_of(rw, other(*c, out), xs, axis)) {
    scale = other(*c, out);
    m.nodes.insert(ci);
    out = c->outputs[0];
    c = rw.only_consumer(out, &ci);
  }
  if (bias_allowed && c && c->op == "Add" && rw.value(c->outputs[0]).shape == xs && param_of(rw, other(*c, out), xs, axis)) {
    bias = other(*c, out);
    m.nodes.insert(ci);
    out = c->outputs[0];
  }
}

// The fused op's scale: ones of the normalized shape when the graph has none, else the graph's
// constant with its leading 1s dropped.
std::string norm_scale(Rewriter& rw, const std::string& x, const std::string& scale, const Shape& norm) {
  if (scale.empty()) {
    std::vector<float> ones(static_cast<size_t>(shape_numel(norm)), 1.0f);
    return rw.add_constant(x + "/norm_scale", Tensor::from_f32(norm, std::move(ones)).cast(rw.value(x).dtype));
  }
  if (rw.constant(scale)->shape() != norm) return rw.add_constant(scale + "/norm", rw.constant(scale)->reshaped(norm));
  return scale;
}

// The normalized tensor's node(s) after `d`: the consumer of d other than the square.
bool apply(Rewriter& rw, const Match& m, Node fused, const std::string& out) {
  if (!closed(rw, m, out)) return false;
  for (size_t i : m.nodes) rw.remove_node(i);
  rw.add_node(std::move(fused));
  return true;
}

// From the ReduceMean of x's mean (LayerNorm) or of x squared (RMSNorm).
bool try_norm(Rewriter& rw, size_t mean_idx) {
  const Node& first = rw.graph().nodes[mean_idx];
  if (trailing_mean(rw, first) < 0) return false;
  const std::string x_or_sq = first.inputs[0];
  // LayerNorm: d = x - mean(x); RMSNorm: first is mean(x^2).
  size_t sub_i = 0;
  const Node* sub = rw.only_consumer(first.outputs[0], &sub_i);
  const bool layer = sub && sub->op == "Sub" && sub->inputs[1] == first.outputs[0] && sub->inputs[0] == x_or_sq;
  Match m;
  std::string x, d;
  if (layer) {
    m.nodes = {mean_idx, sub_i};
    x = x_or_sq;
    d = sub->outputs[0];
  } else {
    const size_t qi = rw.producer_index(x_or_sq);
    if (qi == SIZE_MAX) return false;
    const Node& q = rw.graph().nodes[qi];
    if (!((q.op == "Pow" && rw.scalar(q.inputs[1]) == 2.0) || (q.op == "Mul" && q.inputs[0] == q.inputs[1]))) return false;
    x = d = q.inputs[0];
  }
  const Shape xs = rw.value(x).shape;
  // RMSNorm with the eps after the square root (nki-samples' form): RMSNormalization with
  // `eps_after_sqrt` 1 (a tessera attribute: x / (sqrt(mean(x^2)) + eps) * scale).
  if (!layer)
    for (size_t ni : rw.consumers(d)) {
      const Node& n = rw.graph().nodes[ni];
      Match mm = m;
      mm.nodes.insert(ni);
      mm.nodes.insert(mean_idx);
      mm.nodes.insert(rw.producer_index(x_or_sq));
      const auto me = normalized_eps_after_sqrt(rw, mm, n, d);
      if (!me || me->first != first.outputs[0]) continue;
      const int64_t axis = trailing_mean(rw, first);
      std::string out = n.outputs[0], scale, bias;
      affine_tail(rw, mm, out, xs, axis, false, scale, bias);
      if (!closed(rw, mm, out)) continue;
      scale = norm_scale(rw, x, scale, Shape(xs.begin() + axis, xs.end()));
      Node f{n.name + "+rmsnorm", "RMSNormalization", {}, {x, scale}, {out}};
      f.attrs.set("axis", axis);
      f.attrs.set("epsilon", me->second);
      f.attrs.set("eps_after_sqrt", int64_t{1});
      return apply(rw, mm, std::move(f), out);
    }
  // The consumer of d that normalizes it (a Div or Mul whose other side leads back to mean(d^2)).
  for (size_t ni : rw.consumers(d)) {
    const Node& n = rw.graph().nodes[ni];
    Match mm = m;
    mm.nodes.insert(ni);
    const auto v = normalized(rw, mm, n, d);
    if (!v) continue;
    const auto ms = mean_square(rw, mm, *v);
    if (!ms || ms->d != d || (layer && ms->axis != trailing_mean(rw, first))) continue;  // mean and variance over the same axes
    if (!layer && (rw.producer_index(x_or_sq) == SIZE_MAX || !mm.nodes.count(rw.producer_index(x_or_sq)) || !mm.nodes.count(mean_idx))) continue;
    std::string out = n.outputs[0], scale, bias;
    affine_tail(rw, mm, out, xs, ms->axis, layer, scale, bias);  // RMSNorm has no bias: a trailing Add stays
    if (!closed(rw, mm, out)) continue;
    const Shape norm(xs.begin() + ms->axis, xs.end());
    scale = norm_scale(rw, x, scale, norm);
    if (!bias.empty() && rw.constant(bias)->shape() != norm) bias = rw.add_constant(bias + "/norm", rw.constant(bias)->reshaped(norm));
    Node f{n.name + (layer ? "+layernorm" : "+rmsnorm"), layer ? "LayerNormalization" : "RMSNormalization", {}, {x, scale}, {out}};
    if (!bias.empty()) f.inputs.push_back(bias);
    f.attrs.set("axis", ms->axis);
    f.attrs.set("epsilon", ms->eps);
    return apply(rw, mm, std::move(f), out);
  }
  return false;
}

}  // namespace

bool fuse_unary_regions(Graph& g);  // fuse_unary.cpp

bool fuse_decompositions(Graph& g) {
  bool any = false;
  for (bool changed = true; changed;) {
    changed = false;
    Rewriter rw(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i)
      if (g.nodes[i].op == "ReduceMean" && try_norm(rw, i)) changed = true;
    if (changed) {
      rw.commit();
      remove_dead(g);
      any = true;
    }
  }
  return fuse_unary_regions(g) || any;
}

}  // namespace tessera::passes
