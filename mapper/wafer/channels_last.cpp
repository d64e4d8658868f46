// Channels-last blocks (internal.hpp; docs/wafer-compiler.md "Convolutions"): ConvNeXt's block
// permutes a feature map to [batch, H, W, C] and runs a LayerNorm, Linears, GELU and a layer scale
// along the last axis before it permutes back. A Conv's chain ends hold each position's channels as
// a row either way, so this moves the permutation back to right after the LayerNorm (which then
// maps as a LayerNorm over channels, match_norms.cpp channel_norm_at) and writes the ops after it
// on the feature map: a Linear as the 1 x 1 Conv it is (its bias Add folded in), a constant along
// the last axis as one per channel. And a LayerNorm over the channels of a globally pooled map read
// by a Flatten (ConvNeXt's head) runs on the flattened features, at the chain ends of an identity
// dense layer (C x C multiply-adds the model does not have: the pool's chain ends pool before any
// function).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

const std::vector<int64_t> kToLast{0, 2, 3, 1}, kToFirst{0, 3, 1, 2};

bool perm_is(const graph::Node& n, const std::vector<int64_t>& p) { return n.op == "Transpose" && n.attrs.get_ints("perm", {}) == p; }

// A constant that broadcasts along the last axis of a rank-4 value: a scalar, or D values ([D],
// [1, D], [1, 1, 1, D]). Its form on the channels-first map ([D, 1, 1]; a scalar as it is), or none.
std::optional<Tensor> channels_first(const Tensor& t, int64_t D) {
  if (t.numel() == 1) return t;
  const Shape& s = t.shape();
  for (size_t a = 0; a + 1 < s.size(); ++a)
    if (s[a] != 1) return std::nullopt;
  if (s.empty() || s.back() != D) return std::nullopt;
  return t.cast(DType::f32).reshaped({D, 1, 1});
}

// The one node reading v (-1: none, several, or v is a graph output).
long sole_reader(const graph::Graph& g, const std::map<std::string, std::vector<size_t>>& uses, const std::string& v) {
  const auto it = uses.find(v);
  const bool out = std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
  return it == uses.end() || it->second.size() != 1 || out ? -1 : static_cast<long>(it->second[0]);
}

// Rewrites one block: nodes[t1] the Transpose to channels-last, nodes[ln] its LayerNorm; returns
// whether it did. The chain after the LayerNorm, each value read once, must end in the Transpose
// back and hold only Linears (MatMul by a constant [C, D], with its bias Add), elementwise functions
// and ops with constants along the last axis.
bool rewrite_block(graph::Graph& g, size_t ln, const std::map<std::string, std::vector<size_t>>& uses) {
  auto sole = [&](const std::string& v) { return sole_reader(g, uses, v); };
  std::vector<size_t> chain;  // the nodes after the LayerNorm, up to the Transpose back
  std::vector<std::string> consts;  // each one's constant operand ("": none)
  std::string v = g.nodes[ln].outputs[0];
  for (long u = sole(v); u >= 0; u = sole(v)) {
    const graph::Node& n = g.nodes[static_cast<size_t>(u)];
    if (perm_is(n, kToFirst)) break;
    // (Add and Mul commute: the constant may come first, as the layer scale's gamma * x does.)
    const bool swapped = (n.op == "Add" || n.op == "Mul") && n.inputs.size() == 2 && n.inputs[1] == v;
    if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[swapped ? 1 : 0] != v) return false;
    const std::string cn = n.inputs.size() > 1 ? n.inputs[swapped ? 0 : 1] : "";
    const bool binary = n.op == "Add" || n.op == "Sub" || n.op == "Mul" || n.op == "Div";
    const Tensor* c = constant_of(g, cn);
    const bool linear = n.op == "MatMul" && c && c->rank() == 2;
    if (!linear && !(binary && c && channels_first(*c, g.value(n.outputs[0]).shape.back())) && !(kUnary.count(n.op) && n.inputs.size() == 1)) return false;
    chain.push_back(static_cast<size_t>(u)), consts.push_back(cn);
    v = n.outputs[0];
  }
  const long back = sole(v);
  if (chain.empty() || back < 0 || !perm_is(g.nodes[static_cast<size_t>(back)], kToFirst)) return false;
  // The Transpose back right after the LayerNorm; the ops after it on [batch, D, H, W].
  const std::string out = g.nodes[static_cast<size_t>(back)].outputs[0];
  std::string x = fresh(g, g.nodes[ln].outputs[0] + "/map");
  Shape xs = g.value(out).shape;
  xs[1] = g.value(g.nodes[ln].outputs[0]).shape.back();
  g.values[x] = graph::Value{x, g.value(out).dtype, xs, true, std::nullopt, false};
  graph::Node tb = g.nodes[static_cast<size_t>(back)];
  tb.inputs = {g.nodes[ln].outputs[0]}, tb.outputs = {x};
  std::vector<graph::Node> ops{tb};
  for (size_t j = 0; j < chain.size(); ++j) {
    graph::Node n = g.nodes[chain[j]];
    const bool last = j + 1 == chain.size();
    const int64_t D = g.value(n.outputs[0]).shape.back();
    Shape ys = xs;
    ys[1] = D;
    const std::string y = last ? out : fresh(g, n.outputs[0] + "/map");
    if (!last) g.values[y] = graph::Value{y, g.value(n.outputs[0]).dtype, ys, true, std::nullopt, false};
    const std::string& cin = consts[j];
    if (n.op == "MatMul") {
      const Tensor wt = transpose2d(*constant_of(g, cin));  // [D, C]
      const std::string wn = fresh(g, cin + "/conv");
      g.values[wn] = graph::Value{wn, DType::f32, Shape{D, xs[1], 1, 1}, true, wt.reshaped({D, xs[1], 1, 1}), g.value(cin).is_initializer};
      n = graph::Node{n.name + "/conv", "Conv", {}, {x, wn}, {y}};
      n.attrs.set("kernel_shape", std::vector<int64_t>{1, 1});
    } else if (!cin.empty()) {
      const std::string cn = fresh(g, cin + "/channels");
      const std::optional<Tensor> cf = channels_first(*constant_of(g, cin), D);
      g.values[cn] = graph::Value{cn, DType::f32, cf->shape(), true, *cf, g.value(cin).is_initializer};
      n.inputs = {x, cn}, n.outputs = {y};
    } else {
      n.inputs = {x}, n.outputs = {y};
    }
    ops.push_back(n);
    x = y, xs = ys;
  }
  // (The ops go right after the LayerNorm in the node list. The list need not be in topological
  // order -- the canonical graph appends the nodes it fuses, the LayerNorm among them -- and the
  // matcher orders the nodes itself, match_ops.cpp chain_order.)
  std::vector<graph::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (static_cast<long>(i) == back || std::find(chain.begin(), chain.end(), i) != chain.end()) continue;
    nodes.push_back(g.nodes[i]);
    if (i == ln) nodes.insert(nodes.end(), ops.begin(), ops.end());
  }
  g.nodes = std::move(nodes);
  return true;
}

// nodes[ln] a LayerNorm over the channels of a [batch, C, 1, 1] map (a Transpose that moves axes of
// size 1 on either side, or none) whose value a Flatten or Reshape to [batch, C] reads: the Flatten
// first, an identity MatMul, the LayerNorm on [batch, C].
bool rewrite_pooled(graph::Graph& g, size_t ln, const std::map<std::string, std::vector<size_t>>& uses, const std::map<std::string, size_t>& producer) {
  const graph::Node& l = g.nodes[ln];
  std::string in = l.inputs[0];
  const auto pin = producer.find(in);
  const bool t_in = pin != producer.end() && perm_is(g.nodes[pin->second], kToLast);
  if (t_in) in = g.nodes[pin->second].inputs[0];
  const Shape& ms = g.value(in).shape;
  if (ms.size() != 4 || ms[2] != 1 || ms[3] != 1) return false;
  std::string v = l.outputs[0];
  auto one = [&](const std::string& x) { return sole_reader(g, uses, x); };
  long r = one(v);
  if (r >= 0 && perm_is(g.nodes[static_cast<size_t>(r)], kToFirst)) v = g.nodes[static_cast<size_t>(r)].outputs[0], r = one(v);
  if (r < 0 || (g.nodes[static_cast<size_t>(r)].op != "Flatten" && g.nodes[static_cast<size_t>(r)].op != "Reshape")) return false;
  const std::string flat_out = g.nodes[static_cast<size_t>(r)].outputs[0];
  const int64_t N = ms[0], C = ms[1];
  if (g.value(flat_out).shape != Shape{N, C} || (t_in && one(l.inputs[0]) != static_cast<long>(ln))) return false;
  const std::string sh = fresh(g, flat_out + "/shape"), f = fresh(g, flat_out + "/features"), e = fresh(g, flat_out + "/identity"), id = fresh(g, flat_out + "/eye");
  g.values[sh] = graph::Value{sh, DType::i64, Shape{2}, true, Tensor::from_i64({2}, {N, C}), false};
  g.values[f] = graph::Value{f, g.value(flat_out).dtype, Shape{N, C}, true, std::nullopt, false};
  g.values[e] = graph::Value{e, g.value(flat_out).dtype, Shape{N, C}, true, std::nullopt, false};
  std::vector<float> eye(static_cast<size_t>(C * C), 0.0f);
  for (int64_t c = 0; c < C; ++c) eye[static_cast<size_t>(c * C + c)] = 1.0f;
  g.values[id] = graph::Value{id, DType::f32, Shape{C, C}, true, Tensor::from_f32({C, C}, std::move(eye)), false};
  graph::Node lnn = l;
  lnn.inputs[0] = e, lnn.outputs = {flat_out};
  lnn.attrs.set("axis", int64_t{-1});
  const std::vector<graph::Node> ops{graph::Node{l.name + "/flatten", "Reshape", {}, {in, sh}, {f}}, graph::Node{l.name + "/identity", "MatMul", {}, {f, id}, {e}}, lnn};
  std::vector<graph::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    const bool drop = i == ln || static_cast<long>(i) == r || (t_in && i == pin->second) || (perm_is(n, kToFirst) && !n.inputs.empty() && n.inputs[0] == l.outputs[0]);
    if (i == ln) nodes.insert(nodes.end(), ops.begin(), ops.end());
    if (!drop) nodes.push_back(n);
  }
  g.nodes = std::move(nodes);
  return true;
}

}  // namespace

bool channels_last_blocks(graph::Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    const std::map<std::string, std::vector<size_t>> uses = g.consumers();
    const std::map<std::string, size_t> producer = g.producers();
    for (size_t i = 0; i < g.nodes.size() && !again; ++i) {
      const graph::Node& n = g.nodes[i];
      if (n.op != "LayerNormalization" || n.inputs.empty() || g.value(n.inputs[0]).shape.size() != 4) continue;
      const int64_t ax = n.attrs.get_int("axis", -1);
      if (ax != -1 && ax != 3) continue;
      const auto p = producer.find(n.inputs[0]);
      const bool after_transpose = p != producer.end() && perm_is(g.nodes[p->second], kToLast);
      again = (after_transpose && rewrite_block(g, i, uses)) || rewrite_pooled(g, i, uses, producer);
      changed = changed || again;
    }
  }
  return changed;
}

bool has_channels_last(const graph::Graph& g) {  // (a LayerNorm of a rank-4 value: what channels_last_blocks looks at)
  return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const graph::Node& n) {
    return n.op == "LayerNormalization" && !n.inputs.empty() && g.has_value(n.inputs[0]) && g.value(n.inputs[0]).shape.size() == 4;
  });
}

}  // namespace tessera::wafer::detail
