// Channel views (internal.hpp; docs/wafer-compiler.md "Convolutions"): a feature map that is a
// Concat, a Slice along the channels or a channel shuffle of kernels' outputs -- ShuffleNet's
// channel split and shuffle -- moves no data on the wafer. Each of its channels is a channel of some
// kernel's output (its source); a Conv reading it is the sum of one Conv per source, whose weight
// takes the reader's columns of the channels that source gives (zeros for its other channels).
// And a dense head on a pooled concatenation as the 1 x 1 Conv it is (dense_heads_as_convs).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

using Channels = std::vector<std::pair<std::string, int64_t>>;  // per channel: (source value, its channel)

bool feature_map(const graph::Graph& g, const std::string& v) {
  const size_t r = g.value(v).shape.size();
  return r == 3 || r == 4;
}

// A Slice of axis 1 with constant bounds and step 1: [lo, hi) clamped to C, or false.
bool channel_slice(const graph::Graph& g, const graph::Node& n, int64_t C, int64_t& lo, int64_t& hi) {
  if (n.inputs.size() < 3) return false;
  const Tensor *st = constant_of(g, n.inputs[1]), *en = constant_of(g, n.inputs[2]);
  const Tensor* ax = n.inputs.size() > 3 ? constant_of(g, n.inputs[3]) : nullptr;
  const Tensor* sp = n.inputs.size() > 4 ? constant_of(g, n.inputs[4]) : nullptr;
  if (!st || !en || st->numel() != 1 || en->numel() != 1 || (n.inputs.size() > 3 && !n.inputs[3].empty() && !ax)) return false;
  if (!ax || ax->numel() != 1 || ax->to_i64()[0] != 1) return false;
  if (sp && (sp->numel() != 1 || sp->to_i64()[0] != 1)) return false;
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + C : v, 0, C); };
  lo = clamp(st->to_i64()[0]), hi = clamp(en->to_i64()[0]);
  return lo < hi;
}

}  // namespace

// Rewrites g (a copy, rewrite_branches) when every reader of every channel view that involves a
// Slice or a shuffle is a view op or a Conv by a constant weight (any groups: a grouped Conv is
// the dense Conv with zero blocks the wafer maps it as anyway): each such Conv becomes one Conv per
// source, summed by Adds (the bias with the last), which the wafer maps as residuals of outputs no
// kernel reads -- as it does a Concat's readers. FLOPs: each per-source Conv contracts all of its
// source's channels. Returns whether it changed g.
bool channel_views(graph::Graph& g) {
  std::map<std::string, std::vector<size_t>> uses = g.consumers();
  const std::map<std::string, size_t> producer = g.producers();
  auto is_output = [&](const std::string& v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  auto sole = [&](const std::string& v) -> long {
    const auto it = uses.find(v);
    return it != uses.end() && it->second.size() == 1 && !is_output(v) ? static_cast<long>(it->second[0]) : -1;
  };
  std::map<std::string, Channels> view;  // values that are views (a Concat of sources is one too)
  std::set<std::string> moved;           // views through a Slice or a shuffle
  std::set<size_t> view_ops;
  // A source: a feature map a node computes (not the graph input, not a constant).
  auto channels_of = [&](const std::string& v, Channels& out) {
    if (const auto it = view.find(v); it != view.end()) return out = it->second, true;
    if (!producer.count(v) || constant_of(g, v) || !feature_map(g, v)) return false;
    out.clear();
    for (int64_t c = 0; c < g.value(v).shape[1]; ++c) out.emplace_back(v, c);
    return true;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (n.outputs.size() != 1 || n.inputs.empty()) continue;
    Channels in, out;
    if (n.op == "Concat" && feature_map(g, n.outputs[0])) {
      int64_t axis = n.attrs.get_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(g.value(n.outputs[0]).shape.size());
      if (axis != 1) continue;
      bool ok = true, mv = false;
      for (const auto& a : n.inputs) {
        ok = ok && channels_of(a, in);
        mv = mv || moved.count(a);
        out.insert(out.end(), in.begin(), in.end());
      }
      if (!ok) continue;
      view[n.outputs[0]] = out, view_ops.insert(i);
      if (mv) moved.insert(n.outputs[0]);
    } else if (n.op == "Slice" && feature_map(g, n.inputs[0]) && channels_of(n.inputs[0], in)) {
      int64_t lo = 0, hi = 0;
      if (!channel_slice(g, n, static_cast<int64_t>(in.size()), lo, hi)) continue;
      view[n.outputs[0]] = Channels(in.begin() + lo, in.begin() + hi), moved.insert(n.outputs[0]), view_ops.insert(i);
    } else if (n.op == "Reshape" && g.value(n.inputs[0]).shape.size() == 4 && channels_of(n.inputs[0], in)) {
      // A channel shuffle: [N, C, H, W] -> [N, G, C / G, H, W], Transpose(0, 2, 1, 3, 4), -> [N, C, H, W].
      const Shape &s = g.value(n.inputs[0]).shape, &r5 = g.value(n.outputs[0]).shape;
      if (r5.size() != 5 || r5[0] != s[0] || r5[1] * r5[2] != s[1] || r5[3] != s[2] || r5[4] != s[3]) continue;
      const long t = sole(n.outputs[0]);
      if (t < 0 || g.nodes[static_cast<size_t>(t)].op != "Transpose" || g.nodes[static_cast<size_t>(t)].attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 2, 1, 3, 4}) continue;
      const long b = sole(g.nodes[static_cast<size_t>(t)].outputs[0]);
      if (b < 0 || g.nodes[static_cast<size_t>(b)].op != "Reshape" || g.value(g.nodes[static_cast<size_t>(b)].outputs[0]).shape != s) continue;
      const int64_t G = r5[1], per = r5[2];
      for (int64_t o = 0; o < s[1]; ++o) out.push_back(in[static_cast<size_t>((o % G) * per + o / G)]);
      view[g.nodes[static_cast<size_t>(b)].outputs[0]] = out, moved.insert(g.nodes[static_cast<size_t>(b)].outputs[0]);
      view_ops.insert(i), view_ops.insert(static_cast<size_t>(t)), view_ops.insert(static_cast<size_t>(b));
    }
  }
  if (moved.empty()) return false;
  // Every reader of a moved view: a view op, or a Conv by a constant weight reading it first.
  auto conv_reader = [&](const graph::Node& u, const std::string& v) {
    const Tensor* w = u.op == "Conv" && u.inputs.size() >= 2 && u.inputs[0] == v ? constant_of(g, u.inputs[1]) : nullptr;
    return w && w->rank() == static_cast<int64_t>(g.value(v).shape.size()) && std::count(u.inputs.begin(), u.inputs.end(), v) == 1;
  };
  for (const auto& v : moved) {
    if (is_output(v)) return false;
    for (const size_t u : uses[v])
      if (!view_ops.count(u) && !conv_reader(g.nodes[u], v)) return false;
  }
  // Each Conv reading a moved view: one Conv per source, summed.
  std::map<size_t, std::vector<graph::Node>> instead;
  for (const auto& v : moved)
    for (const size_t u : uses[v]) {
      if (view_ops.count(u)) continue;
      const graph::Node& un = g.nodes[u];
      const Tensor& w = *constant_of(g, un.inputs[1]);
      const Shape ws = w.shape();
      const int64_t Cout = ws[0], C = g.value(v).shape[1], groups = un.attrs.get_int("group", 1), cin_g = ws[1], cout_g = Cout / groups;
      int64_t taps = 1;
      for (size_t d = 2; d < ws.size(); ++d) taps *= ws[d];
      const std::vector<float> wv = w.to_f32();
      const Channels& ch = view.at(v);
      std::vector<std::string> sources;  // in order of first use
      for (const auto& [s, c] : ch)
        if (std::find(sources.begin(), sources.end(), s) == sources.end()) sources.push_back(s);
      const graph::Value& ov = g.value(un.outputs[0]);
      std::string sum;
      for (size_t p = 0; p < sources.size(); ++p) {
        const std::string& src = sources[p];
        const int64_t Cs = g.value(src).shape[1];
        Shape ps = ws;
        ps[1] = Cs;
        std::vector<float> pw(static_cast<size_t>(Cout * Cs * taps), 0.0f);
        for (int64_t j = 0; j < C; ++j) {  // view channel j = channel c of src: reader column j (its group's) to column c
          if (ch[static_cast<size_t>(j)].first != src) continue;
          const int64_t c = ch[static_cast<size_t>(j)].second, q = j / cin_g;
          for (int64_t o = q * cout_g; o < (q + 1) * cout_g; ++o)
            for (int64_t k = 0; k < taps; ++k)
              pw[static_cast<size_t>((o * Cs + c) * taps + k)] += wv[static_cast<size_t>((o * cin_g + j % cin_g) * taps + k)];
        }
        const std::string tag = "/src" + std::to_string(p);
        const std::string wn = fresh(g, un.inputs[1] + tag);
        g.values[wn] = graph::Value{wn, DType::f32, ps, true, Tensor::from_f32(ps, std::move(pw)), g.value(un.inputs[1]).is_initializer};
        graph::Node pn = un;
        pn.name = (un.name.empty() ? un.outputs[0] : un.name) + tag;
        pn.attrs.set("group", int64_t{1});
        pn.inputs[0] = src, pn.inputs[1] = wn;
        if (p + 1 < sources.size() && pn.inputs.size() > 2) pn.inputs.resize(2);  // the bias with the last
        const std::string out = p == 0 && sources.size() == 1 ? un.outputs[0] : fresh(g, un.outputs[0] + tag);
        if (out != un.outputs[0]) g.values[out] = graph::Value{out, ov.dtype, ov.shape, true, std::nullopt, false};
        pn.outputs = {out};
        instead[u].push_back(pn);
        if (p == 0) {
          sum = out;
          continue;
        }
        const std::string s = p + 1 == sources.size() ? un.outputs[0] : fresh(g, un.outputs[0] + "/sum" + std::to_string(p));
        if (s != un.outputs[0]) g.values[s] = graph::Value{s, ov.dtype, ov.shape, true, std::nullopt, false};
        instead[u].push_back(graph::Node{pn.name + "/sum", "Add", {}, {sum, out}, {s}});
        sum = s;
      }
    }
  std::vector<graph::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (const auto it = instead.find(i); it != instead.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
    else nodes.push_back(g.nodes[i]);
  }
  g.nodes = std::move(nodes);
  // The view ops nothing reads now (a Concat of sources that Convs read stays, for split_concat_readers).
  for (bool again = true; again;) {
    again = false;
    std::set<std::string> read(g.outputs.begin(), g.outputs.end());
    for (const auto& n : g.nodes) read.insert(n.inputs.begin(), n.inputs.end());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const graph::Node& n = g.nodes[i];
      if ((n.op == "Concat" || n.op == "Slice" || n.op == "Reshape" || n.op == "Transpose") && n.outputs.size() == 1 && !read.count(n.outputs[0])) {
        g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
        again = true;
        break;
      }
    }
  }
  return true;
}

// A dense layer on a Flatten of a [batch, C, 1, 1] map that comes from a Concat (after functions and
// pools: GoogLeNet's global pool and fc) is the 1 x 1 Conv of that map, then the Flatten: as a Conv
// it splits per part like the Concat's other readers (Convs read kernels on either edge; a dense
// layer reads the edge of the kernel before it). MatMul by a constant [C, N] weight (its bias Add
// folded in) or Gemm. Returns whether it changed g.
bool dense_heads_as_convs(graph::Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<std::string, std::vector<size_t>> uses = g.consumers();
    const std::map<std::string, size_t> producer = g.producers();
    auto is_output = [&](const std::string& v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
    auto sole = [&](const std::string& v) { const auto it = uses.find(v); return it != uses.end() && it->second.size() == 1 && !is_output(v); };
    for (size_t di = 0; di < g.nodes.size() && !again; ++di) {
      const graph::Node& d = g.nodes[di];
      if ((d.op != "MatMul" && d.op != "Gemm") || d.inputs.size() < 2 || d.outputs.size() != 1) continue;
      const Tensor* w = constant_of(g, d.inputs[1]);
      if (!w || w->rank() != 2) continue;
      if (d.op == "Gemm" && (d.attrs.get_int("transA", 0) || d.attrs.get_float("alpha", 1.0) != 1.0 || d.attrs.get_float("beta", 1.0) != 1.0)) continue;
      const auto fp = producer.find(d.inputs[0]);
      if (fp == producer.end() || !sole(d.inputs[0])) continue;
      const graph::Node& f = g.nodes[fp->second];
      if (f.op != "Flatten" && f.op != "Reshape") continue;
      const std::string m = f.inputs[0];
      const Shape& ms = g.value(m).shape;
      if ((ms.size() != 3 && ms.size() != 4) || g.value(d.inputs[0]).shape != Shape{ms[0], ms[1]}) continue;
      bool ones = true;
      for (size_t a = 2; a < ms.size(); ++a) ones = ones && ms[a] == 1;
      if (!ones) continue;
      // m comes from a Concat through nodes that act on each part.
      std::string back = m;
      bool from_concat = false;
      for (int guard = 0; guard < 64; ++guard) {
        const auto pr = producer.find(back);
        if (pr == producer.end()) break;
        const graph::Node& pn = g.nodes[pr->second];
        if (pn.op == "Concat") { from_concat = pn.attrs.get_int("axis", 0) == 1; break; }
        if (pn.inputs.empty() || !(pn.op == "GlobalAveragePool" || pn.op == "MaxPool" || pn.op == "AveragePool" || kUnary.count(pn.op))) break;
        back = pn.inputs[0];
      }
      if (!from_concat) continue;
      const bool trans_b = d.op == "Gemm" && d.attrs.get_int("transB", 0);
      const Tensor wt = trans_b ? w->cast(DType::f32) : transpose2d(*w);  // [N, C]
      const int64_t N = wt.shape()[0], C = wt.shape()[1];
      if (C != ms[1]) continue;
      // The bias: Gemm's third input, or an Add of a [N] (or [1, N]) constant that only reads the MatMul's output.
      std::optional<Tensor> bias;
      std::string out = d.outputs[0];
      size_t bias_node = SIZE_MAX;
      if (d.op == "Gemm" && d.inputs.size() > 2 && !d.inputs[2].empty()) {
        const Tensor* b = constant_of(g, d.inputs[2]);
        if (!b || b->numel() != N) continue;
        bias = b->cast(DType::f32).reshaped({N});
      } else if (d.op == "MatMul" && sole(d.outputs[0])) {
        const graph::Node& a = g.nodes[uses[d.outputs[0]][0]];
        const std::string other = a.op == "Add" && a.inputs.size() == 2 ? (a.inputs[0] == d.outputs[0] ? a.inputs[1] : a.inputs[0]) : "";
        const Tensor* b = constant_of(g, other);
        if (b && b->numel() == N) bias = b->cast(DType::f32).reshaped({N}), out = a.outputs[0], bias_node = uses[d.outputs[0]][0];
      }
      Shape ws{N, C, 1};
      if (ms.size() == 4) ws.push_back(1);
      const std::string wn = fresh(g, d.inputs[1] + "/conv");
      g.values[wn] = graph::Value{wn, DType::f32, ws, true, wt.reshaped(ws), g.value(d.inputs[1]).is_initializer};
      graph::Node conv{d.name + "/conv", "Conv", {}, {m, wn}, {}};
      conv.attrs.set("kernel_shape", std::vector<int64_t>(ms.size() - 2, 1));
      if (bias) {
        const std::string bn = fresh(g, d.inputs[1] + "/conv_bias");
        g.values[bn] = graph::Value{bn, DType::f32, Shape{N}, true, *bias, false};
        conv.inputs.push_back(bn);
      }
      Shape ys = ms;
      ys[1] = N;
      const std::string y = fresh(g, out + "/map");
      g.values[y] = graph::Value{y, g.value(out).dtype, ys, true, std::nullopt, false};
      conv.outputs = {y};
      const std::string sh = fresh(g, out + "/shape");
      g.values[sh] = graph::Value{sh, DType::i64, Shape{2}, true, Tensor::from_i64({2}, {ms[0], N}), false};
      graph::Node flat{d.name + "/flatten", "Reshape", {}, {y, sh}, {out}};
      std::vector<graph::Node> nodes;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (i == fp->second || i == bias_node) continue;
        if (i == di) {
          nodes.push_back(conv);
          nodes.push_back(flat);
          continue;
        }
        nodes.push_back(g.nodes[i]);
      }
      g.nodes = std::move(nodes);
      again = changed = true;
    }
  }
  return changed;
}

}  // namespace tessera::wafer::detail
