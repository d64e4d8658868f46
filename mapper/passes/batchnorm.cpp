// fold_batchnorm: inference BatchNormalization as an affine map per channel (canonicalize.hpp).
#include <algorithm>
#include <cmath>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/rewrite.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

// y = x * s + t per channel: s = scale / sqrt(var + eps), t = bias - mean * s (in fp64).
struct Affine {
  std::vector<double> s, t;
};

std::optional<Affine> affine_of(const Rewriter& rw, const Node& bn) {
  if (bn.outputs.size() > 1 && std::any_of(bn.outputs.begin() + 1, bn.outputs.end(), [](const std::string& o) { return !o.empty(); }))
    return std::nullopt;  // running statistics requested: training
  if (bn.attrs.get_int("training_mode", 0) != 0 || bn.inputs.size() < 5) return std::nullopt;
  std::vector<std::vector<double>> p;
  for (size_t k = 1; k < 5; ++k) {
    const Tensor* t = rw.constant(bn.inputs[k]);
    if (!t || !is_float(t->dtype())) return std::nullopt;
    p.push_back(t->to_f64());
  }
  const double eps = bn.attrs.get_float("epsilon", 1e-5);
  Affine a;
  for (size_t c = 0; c < p[0].size(); ++c) {
    const double s = p[0][c] / std::sqrt(p[3][c] + eps);
    a.s.push_back(s);
    a.t.push_back(p[1][c] - p[2][c] * s);
  }
  return a;
}

Tensor rounded(DType dt, Shape shape, const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_f32(std::move(shape), std::move(f)).cast(dt);
}

// Folds into the Conv producing x when its weights (and bias) are constants and x feeds only the BN.
bool into_conv(Rewriter& rw, size_t bn_idx, const Affine& a) {
  const Node& bn = rw.graph().nodes[bn_idx];
  const size_t ci = rw.producer_index(bn.inputs[0]);
  if (ci == SIZE_MAX || !rw.only_consumer(bn.inputs[0])) return false;
  const Node conv = rw.graph().nodes[ci];
  if (conv.op != "Conv") return false;
  const Tensor* w = rw.constant(conv.inputs[1]);
  const Tensor* b = conv.inputs.size() > 2 && !conv.inputs[2].empty() ? rw.constant(conv.inputs[2]) : nullptr;
  if (!w || (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !b)) return false;
  const int64_t cout = w->shape()[0];
  if (static_cast<int64_t>(a.s.size()) != cout) return false;
  const int64_t per = w->numel() / cout;
  auto wv = w->to_f64();
  for (int64_t co = 0; co < cout; ++co)
    for (int64_t k = 0; k < per; ++k) wv[static_cast<size_t>(co * per + k)] *= a.s[static_cast<size_t>(co)];
  std::vector<double> bv(static_cast<size_t>(cout), 0.0);
  if (b) bv = b->to_f64();
  for (int64_t co = 0; co < cout; ++co) bv[static_cast<size_t>(co)] = bv[static_cast<size_t>(co)] * a.s[static_cast<size_t>(co)] + a.t[static_cast<size_t>(co)];
  Node folded = conv;
  folded.inputs.resize(3);
  folded.inputs[1] = rw.add_constant(conv.inputs[1] + "/bn", rounded(w->dtype(), w->shape(), wv));
  folded.inputs[2] = rw.add_constant(conv.name + "/bn_bias", rounded(w->dtype(), {cout}, bv));
  folded.outputs = {bn.outputs[0]};
  rw.remove_node(ci);
  rw.remove_node(bn_idx);
  rw.add_node(std::move(folded));
  return true;
}

// y = x * s + t with s, t shaped [C, 1, ...] to broadcast over the spatial dimensions.
void to_mul_add(Rewriter& rw, size_t bn_idx, const Affine& a) {
  const Node bn = rw.graph().nodes[bn_idx];
  const auto& x = rw.value(bn.inputs[0]);
  Shape cs{static_cast<int64_t>(a.s.size())};
  for (size_t k = 2; k < x.shape.size(); ++k) cs.push_back(1);
  const std::string s = rw.add_constant(bn.name + "/scale", rounded(x.dtype, cs, a.s));
  const std::string t = rw.add_constant(bn.name + "/shift", rounded(x.dtype, cs, a.t));
  const std::string mid = rw.add_value(bn.outputs[0] + "/scaled", x.dtype, x.shape);
  rw.add_node(Node{bn.name + "/mul", "Mul", {}, {bn.inputs[0], s}, {mid}});
  rw.add_node(Node{bn.name + "/add", "Add", {}, {mid, t}, {bn.outputs[0]}});
  rw.remove_node(bn_idx);
}

}  // namespace

bool fold_batchnorm(Graph& g) {
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != "BatchNormalization" || rw.removed(i)) continue;
    const auto a = affine_of(rw, g.nodes[i]);
    if (!a) continue;
    if (!into_conv(rw, i, *a)) to_mul_add(rw, i, *a);
  }
  return rw.commit();
}

}  // namespace tessera::passes
