// The wafer compiler (compile.hpp; choices and figures in docs/wafer-compiler.md).
#include "mapper/wafer/compile.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/sequential_vertex_coloring.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "isa/error.hpp"

namespace tessera::wafer {

using json = nlohmann::json;

namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
std::string fnum(double v);  // a float literal for PE text (defined with the training code)

const char* kOpsHint =
    "the wafer compiler maps in this build: Gemm, or MatMul by a constant weight, with a bias Add; Conv (padded only the first), "
    "MaxPool after a Conv, a Flatten into a dense layer; Relu, Tanh, GELU (erf form); a final Softmax; residual Adds, "
    "LayerNorm and multi-head attention (pipelined: the transformer layer's pattern; docs/wafer-compiler.md); run other models on target.kind neuroncore or reference";

// ---------------------------------------------------------------------------------------------
// Graph -> dense layers.

// A node fused into the dense layer before it: named in its op and node list, the layer named by it.
void absorb(DenseKernel& k, const graph::Node& n) {
  k.op += "+" + n.op;
  k.nodes.push_back(n.name);
  k.name = n.name.empty() ? n.outputs[0] : n.name;
}

std::vector<DenseKernel> match_layers(const graph::Graph& g, std::string& input, std::string& output) {
  if (g.inputs.size() != 1 || g.outputs.size() != 1)
    throw InputError(g.source, "the wafer compiler maps graphs with one input and one output (this one has " + std::to_string(g.inputs.size()) +
                                   " and " + std::to_string(g.outputs.size()) + ")",
                     kOpsHint);
  // Ops first: every node the compiler cannot map, named (all of them at once).
  std::vector<const graph::Node*> bad;
  for (const auto& n : g.nodes)
    if (n.op != "Gemm" && n.op != "MatMul" && n.op != "Add" && n.op != "Relu" && n.op != "Tanh" && n.op != "Softmax" && n.op != "Conv" &&
        n.op != "MaxPool" && n.op != "Flatten" && n.op != "Reshape" && n.op != "Div" && n.op != "Mul" && n.op != "Erf" && n.op != "ReduceMean" &&
        n.op != "Sub" && n.op != "Pow" && n.op != "Sqrt" && n.op != "LayerNormalization" && n.op != "Transpose")
      bad.push_back(&n);
  DiagnosticList unmapped;  // every such node, the hint (what is mapped) once, after the last
  for (size_t i = 0; i < bad.size(); ++i)
    unmapped.add(g.where(*bad[i]), "op " + bad[i]->op + " is not mapped by the wafer compiler in this build", i + 1 == bad.size() ? kOpsHint : "");
  unmapped.throw_if_any();
  input = g.inputs[0];
  output = g.outputs[0];
  const graph::Value& in = g.value(input);
  if (in.shape.size() < 2 || in.shape.size() > 4)
    throw InputError("graph input '" + input + "'", "is " + shape_str(in.shape) + "; the wafer compiler takes [batch, features] or, into a Conv, [batch, channels, height, width]", kOpsHint);
  std::vector<DenseKernel> ks;
  std::string cur = input;  // the activation flowing through the chain
  bool flat = false;        // cur is a Flatten of the last kernel's spatial output
  auto constant = [&](const std::string& v) -> const Tensor* {
    if (v.empty() || !g.has_value(v)) return nullptr;
    const graph::Value& val = g.value(v);
    return val.data ? &*val.data : nullptr;
  };
  // Patterns spanning several nodes (GELU's erf form, a decomposed LayerNorm) are matched from
  // their first node; the rest are marked consumed.
  std::map<std::string, std::vector<size_t>> uses;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& v : g.nodes[i].inputs) uses[v].push_back(i);
  std::set<size_t> consumed;
  auto sole = [&](const std::string& v, const char* op) -> long {  // the one consumer of v, if it is `op`
    const auto it = uses.find(v);
    if (it == uses.end() || it->second.size() != 1 || g.nodes[it->second[0]].op != op) return -1;
    return static_cast<long>(it->second[0]);
  };
  auto other_in = [](const graph::Node& nn, const std::string& v) -> std::string {
    if (nn.inputs.size() != 2) return "";
    return nn.inputs[0] == v ? nn.inputs[1] : nn.inputs[1] == v ? nn.inputs[0] : "";
  };
  auto scalar = [&](const std::string& v, double want, double tol) {
    const Tensor* t = constant(v);
    return t && t->numel() == 1 && std::fabs(t->to_f32()[0] - want) <= tol;
  };
  // Layout-only nodes: a Reshape that keeps the last axis, or a Transpose that only moves axes of
  // size 1, leaves the rows as they are -- its output is an alias of its input.
  std::map<std::string, std::string> alias;
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& v : g.nodes[i].outputs) producer[v] = i;
  auto canon = [&](std::string v) {
    for (auto it = alias.find(v); it != alias.end(); it = alias.find(v)) v = it->second;
    return v;
  };
  for (const size_t i : g.topo_order()) {
    const graph::Node& n = g.nodes[i];
    if ((n.op != "Reshape" && n.op != "Transpose") || n.inputs.empty()) continue;
    const Shape& a = g.value(n.inputs[0]).shape;
    const Shape& b = g.value(n.outputs[0]).shape;
    if (a.empty() || b.empty() || a.back() != b.back() || a.size() < 2 || b.size() < 2) continue;
    bool keeps = true;
    if (n.op == "Transpose") {
      std::vector<int64_t> perm = n.attrs.get_ints("perm", {});
      int64_t last = -1;
      for (const int64_t d : perm)
        if (a[static_cast<size_t>(d)] != 1) keeps = keeps && d > last, last = d;
    }
    if (keeps) alias[n.outputs[0]] = n.inputs[0], consumed.insert(i);
  }
  // Multi-head attention (PyTorch's export for one sequence): Q, K, V rows [S, d] -> Reshape
  // [S, H, dh] -> Transpose to [H, S, dh] (K: [H, dh, S]) -> MatMul(Q / c, K) -> Softmax -> MatMul(., V)
  // -> Transpose [S, H, dh] -> Reshape [S, d]: one block, attached to the kernel computing V.
  struct AttnBlock {
    std::string q, k, v, out;
    int64_t heads = 0, dh = 0;
    double scale = 1;
    bool done = false;
  };
  std::vector<AttnBlock> blocks;
  for (const size_t i : g.topo_order()) {
    const graph::Node& sm = g.nodes[i];
    if (sm.op != "Softmax" || !producer.count(sm.inputs[0])) continue;
    const int64_t sm_axis = sm.attrs.get_int("axis", g.opset >= 13 ? -1 : 1), sm_rank = static_cast<int64_t>(g.value(sm.inputs[0]).shape.size());
    if (sm_axis != -1 && sm_axis != sm_rank - 1) continue;  // over the keys only (an older opset's axis 1 would flatten the heads)
    const graph::Node& a = g.nodes[producer[sm.inputs[0]]];
    const long ci = sole(sm.outputs[0], "MatMul");
    if (a.op != "MatMul" || ci < 0) continue;
    const graph::Node& cm = g.nodes[static_cast<size_t>(ci)];
    if (cm.inputs[0] != sm.outputs[0] || g.value(sm.outputs[0]).shape.size() != 3) continue;
    std::vector<size_t> path = {producer[sm.inputs[0]], i, static_cast<size_t>(ci)};
    AttnBlock blk;
    // Back from an operand: scalar scalings, a Transpose with `perm`, a Reshape from rows to [S, H, dh].
    auto trace = [&](std::string v, const std::vector<int64_t>& perm, double* scale) -> std::string {
      bool transposed = false;
      while (producer.count(v)) {
        const size_t pi = producer[v];
        const graph::Node& pn = g.nodes[pi];
        if (scale && (pn.op == "Div" || pn.op == "Mul") && pn.inputs.size() == 2 && constant(pn.inputs[1]) && constant(pn.inputs[1])->numel() == 1) {
          const double c = constant(pn.inputs[1])->to_f32()[0];
          *scale *= pn.op == "Div" ? 1.0 / c : c;
          v = pn.inputs[0];
        } else if (pn.op == "Transpose" && !transposed && pn.attrs.get_ints("perm", {}) == perm) {
          transposed = true;
          v = pn.inputs[0];
        } else if (pn.op == "Reshape" && transposed && g.value(v).shape.size() == 3) {
          const Shape& hs = g.value(v).shape;  // [S, H, dh]
          if (blk.heads && (blk.heads != hs[1] || blk.dh != hs[2])) return "";
          blk.heads = hs[1];
          blk.dh = hs[2];
          path.push_back(pi);
          return pn.inputs[0];
        } else {
          return "";
        }
        path.push_back(pi);
      }
      return "";
    };
    blk.q = trace(a.inputs[0], {1, 0, 2}, &blk.scale);
    blk.k = trace(a.inputs[1], {1, 2, 0}, nullptr);
    blk.v = trace(cm.inputs[1], {1, 0, 2}, nullptr);
    const long t = sole(cm.outputs[0], "Transpose");
    const long r = t < 0 ? -1 : sole(g.nodes[static_cast<size_t>(t)].outputs[0], "Reshape");
    if (blk.q.empty() || blk.k.empty() || blk.v.empty() || r < 0 || g.nodes[static_cast<size_t>(t)].attrs.get_ints("perm", {}) != std::vector<int64_t>{1, 0, 2})
      continue;
    path.push_back(static_cast<size_t>(t));
    path.push_back(static_cast<size_t>(r));
    blk.out = g.nodes[static_cast<size_t>(r)].outputs[0];
    const Shape& os = g.value(blk.out).shape;
    if (os.empty() || os.back() != blk.heads * blk.dh) continue;
    for (const size_t q : path) consumed.insert(q);
    blocks.push_back(blk);
  }
  // Nodes in a topological order that keeps the file's order where it can (Kahn's algorithm,
  // smallest index first): kernels are numbered -- and run -- in the order the model lists them.
  std::vector<size_t> order;
  {
    std::vector<int> pending(g.nodes.size(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& v : g.nodes[i].inputs)
        if (producer.count(v)) ++pending[i];
    std::set<size_t> ready;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!pending[i]) ready.insert(i);
    while (!ready.empty()) {
      const size_t i = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(i);
      for (const auto& v : g.nodes[i].outputs)
        for (const size_t u : uses[v])
          for (const auto& vi : g.nodes[u].inputs)
            if (vi == v && --pending[u] == 0) ready.insert(u);
    }
  }
  // A new kernel of node n: its weight value, the bias from a third input (Conv, Gemm; MatMul has
  // none), the value it reads; appended to ks.
  auto start_kernel = [&](DenseKernel& k, const graph::Node& n, const char* per) {
    k.bias.assign(static_cast<size_t>(k.N), 0.0f);
    k.w_value = n.inputs[1];
    if (n.op != "MatMul" && n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const Tensor* c = constant(n.inputs[2]);
      if (!c || c->numel() != k.N)
        throw InputError(g.where(n), n.op + " bias must be a constant of " + std::to_string(k.N) + " values (" + per + ")", kOpsHint);
      k.bias = c->to_f32();
      k.b_value = n.inputs[2];
    }
    k.in_value = cur;
    ks.push_back(std::move(k));
  };
  std::vector<std::string> kout;  // each kernel's output value so far
  for (const size_t i : order) {
    if (consumed.count(i)) continue;
    graph::Node n = g.nodes[i];
    for (auto& v : n.inputs) v = canon(v);
    if (ks.size() > kout.size()) kout.push_back(cur);  // the previous node's result
    else if (!ks.empty()) kout.back() = cur;
    // An attention block whose V is the running activation and whose Q and K are kernels' outputs
    // attaches to the kernel computing V.
    for (auto& blk : blocks) {
      if (blk.done || canon(blk.v) != cur || ks.empty()) continue;
      const auto qi = std::find(kout.begin(), kout.end(), canon(blk.q)), ki = std::find(kout.begin(), kout.end(), canon(blk.k));
      if (qi == kout.end() || ki == kout.end()) continue;  // V first: reported below
      DenseKernel& k = ks.back();
      if (k.relu || k.tanh || k.gelu || k.residual >= 0 || k.layernorm || k.attn || k.spatial())
        throw InputError("kernel '" + k.name + "'", "attention is mapped right after the dense layer computing V (with its bias)", kOpsHint);
      k.attn = true;
      k.attn_q = qi - kout.begin();
      k.attn_k = ki - kout.begin();
      k.heads = blk.heads;
      k.dh = blk.dh;
      k.attn_scale = blk.scale;
      k.op += "+Attention";
      k.name = blk.out;
      cur = kout.back() = blk.out;
      blk.done = true;
    }
    auto unsupported = [&](const std::string& why) { throw InputError(g.where(n), why, kOpsHint); };
    const bool commutative = n.op == "Add" || n.op == "Mul";
    // A dense layer may read the graph input or any kernel's output (weight streaming); the rest
    // continue the running activation.
    const bool dense = n.op == "Gemm" || n.op == "MatMul";
    long src = -2;
    if (dense && !n.inputs.empty()) {
      if (n.inputs[0] == input) src = -1;
      for (size_t q = 0; q < kout.size(); ++q)
        if (kout[q] == n.inputs[0]) src = static_cast<long>(q);
      if (src >= -1 && n.inputs[0] != cur) cur = n.inputs[0], flat = false;
    }
    if (n.inputs.empty() || (n.inputs[0] != cur && !(commutative && n.inputs.size() > 1 && n.inputs[1] == cur))) {
      // Every node must continue the chain from its first input (either input of Add or Mul).
      bool uses_cur = std::find(n.inputs.begin(), n.inputs.end(), cur) != n.inputs.end();
      unsupported(uses_cur ? "takes the running activation as a later input" : "does not continue the chain of layers (it does not read '" + cur + "')");
    }
    const Shape& cs = g.value(cur).shape;
    if (cs.size() == 4 && n.op != "Conv" && n.op != "MaxPool" && n.op != "Relu" && n.op != "Tanh" && n.op != "Flatten" && n.op != "Reshape")
      unsupported(n.op + " on a feature map " + shape_str(cs) + ": the wafer compiler maps Conv, Relu, Tanh, MaxPool and a Flatten to [batch, features] there");
    if (n.op == "Conv") {
      const Tensor* w = n.inputs.size() > 1 ? constant(n.inputs[1]) : nullptr;
      if (cs.size() != 4 || !w || w->rank() != 4) unsupported("Conv needs a [batch, channels, height, width] input and a constant 4-D weight");
      if (!ks.empty() && !ks.back().spatial()) unsupported("Conv reads the output of a dense layer; the wafer compiler maps convolutions on the input or after another Conv");
      if (n.attrs.get_int("group", 1) != 1) unsupported("grouped Conv (group != 1) is not mapped on the wafer");
      for (const int64_t d : n.attrs.get_ints("dilations", {1, 1}))
        if (d != 1) unsupported("dilated Conv is not mapped on the wafer");
      const std::string ap = n.attrs.get_string("auto_pad", "NOTSET");
      if (ap != "NOTSET" && ap != "VALID") unsupported("Conv auto_pad " + ap + " is not mapped; give explicit pads");
      const std::vector<int64_t> st = n.attrs.get_ints("strides", {1, 1}), pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
      if (st.size() != 2 || pads.size() != 4) unsupported("Conv needs 2-D strides and 4 pads");
      const bool padded = pads[0] || pads[1] || pads[2] || pads[3];
      if (padded && !ks.empty())
        unsupported("a padded Conv after another kernel (its input would need a zero border on the chain-end PEs); only the first Conv may be padded in this build");
      DenseKernel k;
      k.name = n.name.empty() ? n.outputs[0] : n.name;
      k.op = "Conv";
      k.nodes = {n.name};
      k.xread = DenseKernel::XRead::conv;
      k.src = static_cast<long>(ks.size()) - 1;
      k.samples = cs[0];
      k.cin = cs[1];
      k.N = w->shape()[0];
      if (w->shape()[1] != k.cin) unsupported("weight " + shape_str(w->shape()) + " does not match the input's " + std::to_string(k.cin) + " channels");
      k.kh = w->shape()[2];
      k.kw = w->shape()[3];
      k.sh = st[0];
      k.sw = st[1];
      k.pad_t = pads[0];
      k.pad_l = pads[1];
      k.ih = cs[2] + pads[0] + pads[2];
      k.iw = cs[3] + pads[1] + pads[3];
      k.oh = (k.ih - k.kh) / k.sh + 1;
      k.ow = (k.iw - k.kw) / k.sw + 1;
      if (k.oh < 1 || k.ow < 1) unsupported("the Conv window is larger than its padded input");
      k.B = k.samples * k.oh * k.ow;
      k.K = k.kflops = k.cin * k.kh * k.kw;
      k.Wconv = w->to_f32();
      start_kernel(k, n, "per output channel");
    } else if (n.op == "MaxPool") {
      if (ks.empty() || !ks.back().spatial() || ks.back().pkh || ks.back().softmax)
        unsupported("MaxPool is mapped once after a Conv (and its activation), at the Conv's chain ends");
      DenseKernel& k = ks.back();
      const std::vector<int64_t> kshape = n.attrs.get_ints("kernel_shape"), st = n.attrs.get_ints("strides", kshape);
      for (const int64_t p : n.attrs.get_ints("pads", {0, 0, 0, 0}))
        if (p) unsupported("padded MaxPool is not mapped on the wafer");
      if (n.attrs.get_int("ceil_mode", 0) || n.attrs.get_int("storage_order", 0) || n.outputs.size() > 1)
        unsupported("MaxPool with ceil_mode, storage_order or an Indices output is not mapped on the wafer");
      for (const int64_t d : n.attrs.get_ints("dilations", {1, 1}))
        if (d != 1) unsupported("dilated MaxPool is not mapped on the wafer");
      if (kshape.size() != 2 || st.size() != 2) unsupported("MaxPool needs a 2-D kernel_shape and strides");
      k.pkh = kshape[0];
      k.pkw = kshape[1];
      k.psh = st[0];
      k.psw = st[1];
      k.ph = (k.oh - k.pkh) / k.psh + 1;
      k.pw = (k.ow - k.pkw) / k.psw + 1;
      if (k.ph < 1 || k.pw < 1) unsupported("the MaxPool window is larger than its input");
      absorb(k, n);
    } else if (n.op == "Flatten" || n.op == "Reshape") {
      const Shape& os = g.value(n.outputs[0]).shape;
      const bool to_rows = cs.size() == 4 && os.size() == 2 && os[0] == cs[0] && os[1] == cs[1] * cs[2] * cs[3];
      if (!to_rows || ks.empty() || !ks.back().spatial() || (n.op == "Flatten" && n.attrs.get_int("axis", 1) != 1))
        unsupported(n.op + " is mapped only as a Flatten of a Conv's [batch, C, H, W] output to [batch, C*H*W]");
      flat = true;  // the next dense layer reads the holders channel-major
    } else if (n.op == "Gemm" || n.op == "MatMul") {
      const Tensor* w = n.inputs.size() > 1 ? constant(n.inputs[1]) : nullptr;
      if (!w || w->rank() != 2) unsupported(n.op + " needs a constant 2-D weight as its second input");
      Shape xs = g.value(cur).shape;  // rows: every axis but the last
      if (n.op == "MatMul" && xs.size() > 2) {
        int64_t rows = 1;
        for (size_t d = 0; d + 1 < xs.size(); ++d) rows *= xs[d];
        xs = {rows, xs.back()};
      }
      if (xs.size() != 2) unsupported(n.op + " on " + shape_str(g.value(cur).shape) + ": the wafer compiler maps dense layers on [rows, features]");
      DenseKernel k;
      k.src = src >= -1 ? src : static_cast<long>(ks.size()) - 1;
      k.name = n.name.empty() ? n.outputs[0] : n.name;
      k.op = n.op;
      k.nodes = {n.name};
      k.B = k.samples = xs[0];
      if (!ks.empty() && ks.back().spatial() && !flat) unsupported(n.op + " after a Conv needs a Flatten between them");
      if (flat) {
        const DenseKernel& p = ks.back();
        k.xread = DenseKernel::XRead::flatten;
        k.cin = p.N;
        k.P = p.pkh ? p.ph * p.pw : p.oh * p.ow;
        flat = false;
      }
      bool trans_b = false;
      if (n.op == "Gemm") {
        if (n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0) unsupported("Gemm with alpha or beta other than 1");
        if (n.attrs.get_int("transA", 0)) unsupported("Gemm with transA");
        trans_b = n.attrs.get_int("transB", 0) != 0;
      }
      const auto wv = w->to_f32();
      k.K = trans_b ? w->shape()[1] : w->shape()[0];
      k.N = trans_b ? w->shape()[0] : w->shape()[1];
      if (k.K != xs[1]) unsupported("weight " + shape_str(w->shape()) + " does not match the activation " + shape_str(xs));
      k.kflops = k.K;
      k.W.resize(static_cast<size_t>(k.K * k.N));
      for (int64_t a = 0; a < k.K; ++a)
        for (int64_t b = 0; b < k.N; ++b)
          k.W[static_cast<size_t>(a * k.N + b)] = trans_b ? wv[static_cast<size_t>(b * k.K + a)] : wv[static_cast<size_t>(a * k.N + b)];
      k.w_trans = trans_b;
      start_kernel(k, n, "per output feature");
    } else if (n.op == "Add" && !ks.empty() && !constant(other_in(n, cur)) && !other_in(n, cur).empty()) {
      // A residual: the other input must be the input of an earlier kernel (held on the PEs).
      const std::string o2 = other_in(n, cur);
      long r = -1;
      for (size_t q = 0; q < ks.size(); ++q)
        if (ks[q].in_value == o2) r = static_cast<long>(q);
      if (r < 0 || ks.back().residual >= 0 || ks.back().layernorm || ks.back().softmax || ks.back().attn || ks.back().spatial())
        unsupported("Add of two activations is mapped only as a residual: the running activation plus the input of an earlier dense layer, before any LayerNorm");
      ks.back().residual = r;
      absorb(ks.back(), n);
    } else if (n.op == "Add") {
      const Tensor* c = constant(other_in(n, cur));
      if (ks.empty() || !c || c->numel() != ks.back().N || ks.back().relu || ks.back().tanh || ks.back().gelu || ks.back().residual >= 0 || ks.back().softmax || ks.back().attn || ks.back().layernorm)
        unsupported("Add is mapped only as a bias (a constant of N values) right after a MatMul or Gemm, or as a residual");
      const auto cv = c->to_f32();
      for (int64_t b = 0; b < ks.back().N; ++b) ks.back().bias[static_cast<size_t>(b)] += cv[static_cast<size_t>(b)];
      ks.back().b_value = ks.back().b_value.empty() ? other_in(n, cur) : "*";  // "*": two biases (training refuses it)
      absorb(ks.back(), n);
    } else if (n.op == "Softmax") {
      const int64_t r = static_cast<int64_t>(g.value(n.inputs[0]).shape.size());
      const int64_t axis = n.attrs.get_int("axis", g.opset >= 13 ? -1 : 1);
      if (ks.empty() || ks.back().softmax || ks.back().attn || ks.back().residual >= 0 || ks.back().layernorm || (axis != -1 && axis != r - 1))
        unsupported("Softmax is mapped only over the features, after the last dense layer");
      ks.back().softmax = true;
      absorb(ks.back(), n);
    } else if ((n.op == "Div" && scalar(other_in(n, cur), std::sqrt(2.0), 1e-5)) || (n.op == "Mul" && scalar(other_in(n, cur), std::sqrt(0.5), 1e-6))) {
      // GELU, erf form: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5
      const long e = sole(n.outputs[0], "Erf");
      const long a = e < 0 ? -1 : sole(g.nodes[static_cast<size_t>(e)].outputs[0], "Add");
      const long m = a < 0 || !scalar(other_in(g.nodes[static_cast<size_t>(a)], g.nodes[static_cast<size_t>(e)].outputs[0]), 1.0, 1e-6)
                         ? -1
                         : sole(g.nodes[static_cast<size_t>(a)].outputs[0], "Mul");
      const long h = m < 0 || other_in(g.nodes[static_cast<size_t>(m)], g.nodes[static_cast<size_t>(a)].outputs[0]) != cur ? -1
                                                                                                                          : sole(g.nodes[static_cast<size_t>(m)].outputs[0], "Mul");
      if (h < 0 || !scalar(other_in(g.nodes[static_cast<size_t>(h)], g.nodes[static_cast<size_t>(m)].outputs[0]), 0.5, 1e-6))
        unsupported(n.op + " is mapped only as the start of GELU's erf form: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5");
      if (ks.empty() || ks.back().relu || ks.back().tanh || ks.back().gelu || ks.back().softmax || ks.back().attn || ks.back().residual >= 0 || ks.back().layernorm || ks.back().spatial())
        unsupported("GELU is mapped only right after a dense layer");
      ks.back().gelu = true;
      absorb(ks.back(), n);
      for (const long q : {e, a, m, h}) consumed.insert(static_cast<size_t>(q)), absorb(ks.back(), g.nodes[static_cast<size_t>(q)]);
      cur = g.nodes[static_cast<size_t>(h)].outputs[0];
      continue;
    } else if (n.op == "ReduceMean" || n.op == "LayerNormalization") {
      // LayerNorm over the last axis: the LayerNormalization op, or its decomposition ReduceMean ->
      // Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> Mul gamma -> Add beta.
      const int64_t rank = static_cast<int64_t>(cs.size());
      const std::string why = "is mapped only as a LayerNorm over the features (LayerNormalization, or ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> Mul -> Add)";
      if (ks.empty() || ks.back().layernorm || ks.back().softmax || ks.back().attn || ks.back().spatial()) unsupported("LayerNorm is mapped only after a dense layer");
      DenseKernel& k = ks.back();
      const Tensor *gam = nullptr, *bet = nullptr;
      bool has_beta = false;  // a bias is named (it must then be a constant)
      std::string out;
      if (n.op == "LayerNormalization") {
        const int64_t ax = n.attrs.get_int("axis", -1);
        if ((ax != -1 && ax != rank - 1) || n.inputs.size() < 2) unsupported(n.op + " " + why);
        gam = constant(n.inputs[1]);
        has_beta = n.inputs.size() > 2 && !n.inputs[2].empty();
        bet = has_beta ? constant(n.inputs[2]) : nullptr;
        k.ln_eps = n.attrs.get_float("epsilon", 1e-5);
        out = n.outputs[0];
      } else {
        const std::vector<int64_t> axes = n.attrs.get_ints("axes", {});
        if (axes.size() != 1 || (axes[0] != -1 && axes[0] != rank - 1) || !n.attrs.get_int("keepdims", 1)) unsupported(n.op + " " + why);
        long sub = -1;
        for (const size_t u : uses[cur])
          if (g.nodes[u].op == "Sub" && g.nodes[u].inputs.size() == 2 && g.nodes[u].inputs[0] == cur && g.nodes[u].inputs[1] == n.outputs[0]) sub = static_cast<long>(u);
        if (sub < 0 || sole(n.outputs[0], "Sub") != sub) unsupported(n.op + " " + why);
        const std::string d = g.nodes[static_cast<size_t>(sub)].outputs[0];
        long pw = -1, dv = -1;
        for (const size_t u : uses[d]) {
          if (g.nodes[u].op == "Pow" && g.nodes[u].inputs[0] == d && scalar(g.nodes[u].inputs[1], 2.0, 0)) pw = static_cast<long>(u);
          if (g.nodes[u].op == "Div" && g.nodes[u].inputs[0] == d) dv = static_cast<long>(u);
        }
        if (pw < 0 || dv < 0 || uses[d].size() != 2) unsupported(n.op + " " + why);
        long rm = sole(g.nodes[static_cast<size_t>(pw)].outputs[0], "ReduceMean");
        if (rm >= 0 && (g.nodes[static_cast<size_t>(rm)].attrs.get_ints("axes", {}) != axes || !g.nodes[static_cast<size_t>(rm)].attrs.get_int("keepdims", 1))) rm = -1;
        const long ae = rm < 0 ? -1 : sole(g.nodes[static_cast<size_t>(rm)].outputs[0], "Add");
        const Tensor* eps = ae < 0 ? nullptr : constant(other_in(g.nodes[static_cast<size_t>(ae)], g.nodes[static_cast<size_t>(rm)].outputs[0]));
        const long sq = ae < 0 ? -1 : sole(g.nodes[static_cast<size_t>(ae)].outputs[0], "Sqrt");
        if (!eps || eps->numel() != 1 || sq < 0 || g.nodes[static_cast<size_t>(dv)].inputs[1] != g.nodes[static_cast<size_t>(sq)].outputs[0])
          unsupported(n.op + " " + why);
        k.ln_eps = eps->to_f32()[0];
        const long mu = sole(g.nodes[static_cast<size_t>(dv)].outputs[0], "Mul");
        const long ad = mu < 0 ? -1 : sole(g.nodes[static_cast<size_t>(mu)].outputs[0], "Add");
        if (ad < 0) unsupported(n.op + " " + why + " (with the scale and bias)");
        gam = constant(other_in(g.nodes[static_cast<size_t>(mu)], g.nodes[static_cast<size_t>(dv)].outputs[0]));
        has_beta = true;
        bet = constant(other_in(g.nodes[static_cast<size_t>(ad)], g.nodes[static_cast<size_t>(mu)].outputs[0]));
        k.nodes.push_back(n.name);
        for (const long q : {sub, pw, rm, ae, sq, dv, mu, ad}) consumed.insert(static_cast<size_t>(q)), k.nodes.push_back(g.nodes[static_cast<size_t>(q)].name);
        out = g.nodes[static_cast<size_t>(ad)].outputs[0];
      }
      if (!gam || gam->numel() != k.N || (bet && bet->numel() != k.N) || (!bet && has_beta)) unsupported("LayerNorm needs a constant scale (and bias) of " + std::to_string(k.N) + " values");
      k.layernorm = true;
      k.ln_gamma = gam->to_f32();
      k.ln_beta = bet ? bet->to_f32() : std::vector<float>(static_cast<size_t>(k.N), 0.0f);
      if (n.op == "LayerNormalization") k.nodes.push_back(n.name);
      k.op += "+LayerNorm";
      k.name = out;
      cur = out;
      continue;
    } else if (n.op == "Relu" || n.op == "Tanh") {
      // After a MaxPool, Relu is applied before the pool instead (max commutes with a monotone function).
      if (ks.empty() || ks.back().relu || ks.back().tanh || ks.back().gelu || ks.back().attn || flat || ks.back().softmax || ks.back().residual >= 0 || ks.back().layernorm)
        unsupported(n.op + " is mapped only right after a dense layer or Conv");
      (n.op == "Relu" ? ks.back().relu : ks.back().tanh) = true;
      absorb(ks.back(), n);
    } else {
      unsupported("op " + n.op + " is not mapped by the wafer compiler in this build");
    }
    cur = n.outputs[0];
  }
  if (ks.empty()) throw InputError(g.source, "the graph has no dense layer to map", kOpsHint);
  for (const auto& blk : blocks)
    if (!blk.done)
      throw InputError(g.source, "an attention block (its output '" + blk.out + "') must follow the dense layers computing its Q, K and then V (each with its bias)", kOpsHint);
  if (cur != canon(output)) throw InputError(g.source, "the graph's output '" + output + "' is not the end of the layer chain", kOpsHint);
  if (flat) throw InputError(g.source, "the graph ends in a Flatten; the wafer compiler maps a Flatten only into a dense layer", kOpsHint);
  return ks;
}

// Bytes of data one PE of kernel `l` needs (pipelined: its own W block).
int64_t pe_bytes(const DenseKernel& k, bool own_w, int64_t wbytes) {
  int64_t b = k.B * k.nb * 4 + (own_w ? k.kb * k.nb * wbytes : 0);  // y, W
  b += k.nb * 4;                                                     // bias (chain end)
  if (k.tanh) b += 3 * k.B * k.nb * 4;                               // tanh temporaries (chain end)
  if (k.softmax) b += (2 * k.B * k.N + 4 * k.B) * 4;                 // softmax arrays (chain end)
  if (k.pkh) b += k.rows_out() * k.nb * 4;                           // the pooled output (chain end)
  if (k.gelu) b += 4 * k.B * k.nb * 4;                               // GELU temporaries (chain end)
  if (k.attn) b += (k.B * k.feat_nb() + 2 * k.attn_rows() * k.B + k.attn_rows() * std::min(k.dh, k.feat_nb()) + 4 * k.attn_rows()) * 4;  // attention arrays (chain end)
  if (k.res_host) b += k.B * k.nb * 4;                               // the graph input's block for the residual (chain end)
  if (k.layernorm) b += (k.B * k.nb + 4 * k.B + 3 * k.nb) * 4;       // LayerNorm arrays (chain end)
  if (wbytes == 2) b += k.rows_out() * k.nb * 2;                     // y in fp16 (chain end)
  if (k.input_layer) b += (k.spatial() ? k.xs_elems() : k.B * k.kb) * wbytes;  // xs (source)
  return b + 16;
}

// Convolutions and Flatten consumers read whole channel blocks from the PE that holds them: the
// producer's nb channels, so kb = cb kh kw (conv) or cb P (flatten) and the K blocks line up with
// the producer's N blocks. The first Conv reads the graph input, which the host places: cb
// channels per source, and its kernel rows split over the lines left (`lines` along K; pipelined:
// about `per_line` K values per line) -- every source of a channel block holds the block's image,
// each line starts its walk at its own kernel row, so an input with few channels still spreads
// its K over many lines.
void channel_blocks(std::vector<DenseKernel>& ks, size_t l, int64_t input_cb, int64_t lines, int64_t per_line) {
  DenseKernel& k = ks[l];
  if (k.xread == DenseKernel::XRead::rows) return;
  k.cblk = l == 0 ? input_cb : ks[l - 1].nb;
  k.khb = k.kh;
  if (l == 0 && k.spatial()) {
    const int64_t spare = std::max<int64_t>(1, lines / cdiv(k.cin, k.cblk));
    k.khb = lines > 0 ? cdiv(k.kh, std::min(k.kh, spare)) : std::clamp<int64_t>(per_line / (k.cblk * k.kw), 1, k.kh);
  }
  k.kb = k.cblk * (k.spatial() ? k.khb * k.kw : k.P);
}

// A conv's W [cin kh kw, N] in the order its lines take x values: K block j holds channels
// j cb .. j cb + cb - 1, within it (kh, kw, channel) -- the holder's [h, w, c] order, so that kw and
// the channels are one contiguous run of the gathered send. K becomes kblocks kb (zero rows pad).
void conv_weights(DenseKernel& k) {
  if (!k.spatial()) return;
  const int64_t kblocks = k.kblocks(), nkh = k.kh_blocks();
  k.K = kblocks * k.kb;
  k.W.assign(static_cast<size_t>(k.K * k.N), 0.0f);
  for (int64_t j = 0; j < kblocks; ++j)  // line j: channel block j / nkh, kernel rows from (j % nkh) khb
    for (int64_t a = (j % nkh) * k.khb; a < std::min(k.kh, (j % nkh + 1) * k.khb); ++a)
      for (int64_t b = 0; b < k.kw; ++b)
        for (int64_t c = 0; c < k.cblk && j / nkh * k.cblk + c < k.cin; ++c) {
          const int64_t row = j * k.kb + ((a - (j % nkh) * k.khb) * k.kw + b) * k.cblk + c, ci = j / nkh * k.cblk + c;
          for (int64_t n = 0; n < k.N; ++n)
            k.W[static_cast<size_t>(row * k.N + n)] = k.Wconv[static_cast<size_t>(((n * k.cin + ci) * k.kh + a) * k.kw + b)];
        }
}

// ---------------------------------------------------------------------------------------------
// Geometry.

struct RectR {
  int64_t x0, y0, x1, y1;  // inclusive
  bool meets(const RectR& o) const { return x0 <= o.x1 && o.x0 <= x1 && y0 <= o.y1 && o.y0 <= y1; }
};

// Places the kernels of a pipelined mapping with one block edge b: a staircase, each layer next
// to its producer. Returns the extent (width, height) used.
std::pair<int64_t, int64_t> place_pipelined(std::vector<DenseKernel>& ks, int64_t b) {
  int64_t x = 0, y = 0, W = 0, H = 0;
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& k = ks[l];
    k.kb = b;
    k.nb = k.qkv ? 3 * b : b;  // fused Q, K, V: fb = b features of each per chain end
    channel_blocks(ks, l, std::min(b, k.cin), 0, b);
    k.k_on_columns = l % 2 == 0;
    k.x_flow = k.k_on_columns ? Dir::S : Dir::E;
    k.w = k.k_on_columns ? k.kblocks() : k.nblocks();
    k.h = k.k_on_columns ? k.nblocks() : k.kblocks();
    if (l > 0) {
      const DenseKernel& p = ks[l - 1];
      if (p.k_on_columns) {  // p's outputs leave its east column: this layer to the east, same rows
        x = p.x0 + p.w;
        y = p.y0;
      } else {  // p's outputs leave its south row: this layer below, same columns
        x = p.x0;
        y = p.y0 + p.h;
      }
    }
    k.x0 = x;
    k.y0 = y;
    W = std::max(W, x + k.w);
    H = std::max(H, y + k.h);
  }
  return {W, H};
}

// Pipelined attention (docs/wafer-compiler.md "Transformers, pipelined"): the Q, K and V kernels
// of every attention block become one kernel -- V's, with DenseKernel::qkv -- so that a chain end
// computes all three for its features; the Q and K kernels go and the others' indices follow.
void fuse_qkv(std::vector<DenseKernel>& ks) {
  // Refusals name /mapping/mode, so that `auto` streams such a model instead.
  const char* hint = "pipelined mode fuses an attention's Q, K and V projections into one kernel; use \"mapping\": {\"mode\": \"weight_streaming\"} for other shapes";
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& v = ks[l];
    if (!v.attn || v.qkv) continue;
    const size_t qi = static_cast<size_t>(v.attn_q), ki = static_cast<size_t>(v.attn_k);
    for (const size_t pi : {qi, ki}) {
      const DenseKernel& p = ks[pi];
      if (p.src != v.src || p.K != v.K || p.N != v.N || p.B != v.B || p.xread != DenseKernel::XRead::rows || v.xread != DenseKernel::XRead::rows || p.relu || p.tanh ||
          p.gelu || p.softmax || p.residual >= 0 || p.layernorm || p.attn || p.pkh)
        throw InputError("/mapping/mode", "kernel '" + p.name + "': the attention's Q and K (and V, kernel '" + v.name + "') must be dense layers of the same input and size with only a bias", hint);
      for (size_t m = 0; m < ks.size(); ++m)
        if (m != l && ks[m].src == static_cast<int64_t>(pi))
          throw InputError("/mapping/mode", "kernel '" + ks[m].name + "' reads the attention's " + std::string(pi == qi ? "Q" : "K") + " projection ('" + p.name + "'), which pipelined mode fuses into kernel '" + v.name + "'", hint);
    }
    v.qkv = true;
    v.attn_d = v.N;
    v.Wq = ks[qi].W, v.Wk = ks[ki].W, v.bq = ks[qi].bias, v.bk = ks[ki].bias;
    std::vector<std::string> nodes = ks[qi].nodes;
    nodes.insert(nodes.end(), ks[ki].nodes.begin(), ks[ki].nodes.end());
    nodes.insert(nodes.end(), v.nodes.begin(), v.nodes.end());
    v.nodes = nodes;
    v.op = "QKV(" + ks[qi].op + ")+Attention";
    // Renumber: the removed kernels' readers (a residual of their input) read the fused one.
    auto gone = [&](int64_t i) { return static_cast<int64_t>(i > static_cast<int64_t>(qi)) + static_cast<int64_t>(i > static_cast<int64_t>(ki)); };
    const int64_t fused = static_cast<int64_t>(l) - gone(static_cast<int64_t>(l));
    for (auto& k : ks)
      for (int64_t* ref : {&k.src, &k.residual, &k.attn_q, &k.attn_k})  // (later blocks' Q and K are other kernels)
        if (*ref >= 0) *ref = *ref == static_cast<int64_t>(qi) || *ref == static_cast<int64_t>(ki) ? fused : *ref - gone(*ref);
    ks.erase(ks.begin() + static_cast<std::ptrdiff_t>(std::max(qi, ki)));
    ks.erase(ks.begin() + static_cast<std::ptrdiff_t>(std::min(qi, ki)));
    l = static_cast<size_t>(fused);  // on after it (earlier blocks are fused already)
  }
}

// The fused kernel's W [K, 3 b nblocks] and bias for block edge b: chain-end block j holds Q's
// features j b .. j b + b - 1, then K's, then V's (zero beyond d).
void qkv_weights(DenseKernel& k, int64_t b) {
  const int64_t d = k.attn_d, nblk = cdiv(d, b), Np = 3 * b * nblk;
  // k.W and k.bias hold V's projection until then (each candidate block starts from them).
  k.nflops = 3 * d;
  std::vector<float> W(static_cast<size_t>(k.K * Np), 0.0f), bias(static_cast<size_t>(Np), 0.0f);
  const std::vector<float>* Ws[3] = {&k.Wq, &k.Wk, &k.W};
  const std::vector<float>* bs[3] = {&k.bq, &k.bk, &k.bias};
  for (int64_t j = 0; j < nblk; ++j)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t i = 0; i < b && j * b + i < d; ++i) {
        const int64_t col = j * 3 * b + part * b + i, f = j * b + i;
        for (int64_t r = 0; r < k.K; ++r) W[static_cast<size_t>(r * Np + col)] = (*Ws[part])[static_cast<size_t>(r * d + f)];
        bias[static_cast<size_t>(col)] = (*bs[part])[static_cast<size_t>(f)];
      }
  k.W = std::move(W);
  k.bias = std::move(bias);
  k.N = Np;
}

// A residual over two pipelined layers (kernel l adds the input of kernel r = its producer, which
// reads another kernel's output): the input passes through r as identity columns after r's own
// (padded to whole blocks of b; no activation on them) and l adds it as identity rows of its W --
// x 1 and zeros, exact -- so it reaches l's chain ends without a route of its own.
void pass_through(std::vector<DenseKernel>& ks, size_t l, int64_t b) {
  DenseKernel& k2 = ks[l];
  DenseKernel& k1 = ks[static_cast<size_t>(k2.residual)];
  const int64_t d = k1.K, N1 = k1.N, Np = cdiv(N1, b) * b, N1p = Np + d;
  std::vector<float> W1(static_cast<size_t>(k1.K * N1p), 0.0f), b1(static_cast<size_t>(N1p), 0.0f);
  for (int64_t r = 0; r < k1.K; ++r) {
    for (int64_t n = 0; n < N1; ++n) W1[static_cast<size_t>(r * N1p + n)] = k1.W[static_cast<size_t>(r * N1 + n)];
    W1[static_cast<size_t>(r * N1p + Np + r)] = 1.0f;
  }
  for (int64_t n = 0; n < N1; ++n) b1[static_cast<size_t>(n)] = k1.bias[static_cast<size_t>(n)];
  k1.W = std::move(W1);
  k1.bias = std::move(b1);
  k1.nflops = N1;
  k1.N = N1p;
  k1.act_blocks = Np / b;
  const int64_t K2 = k2.K, K2p = Np + d, N2 = k2.N;
  std::vector<float> W2(static_cast<size_t>(K2p * N2), 0.0f);
  for (int64_t r = 0; r < K2; ++r)
    for (int64_t n = 0; n < N2; ++n) W2[static_cast<size_t>(r * N2 + n)] = k2.W[static_cast<size_t>(r * N2 + n)];
  for (int64_t r = 0; r < d; ++r) W2[static_cast<size_t>((Np + r) * N2 + r)] = 1.0f;
  k2.W = std::move(W2);
  k2.K = K2p;
  k2.residual = -1;
}

// Weight streaming: every layer on the rectangle [0, w) x [0, h), K on columns for even layers.
void place_streaming(std::vector<DenseKernel>& ks, int64_t w, int64_t h) {
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& k = ks[l];
    // The orientation follows the data: the graph input sits on the south row (K along the
    // columns), a kernel's outputs on its chain ends -- the east column or the south row.
    k.k_on_columns = k.src < 0 || !ks[static_cast<size_t>(k.src)].k_on_columns;
    k.x_flow = k.k_on_columns ? Dir::N : Dir::W;  // from the previous layer's outputs: the south row / east column
    k.x0 = k.y0 = 0;
    k.w = w;
    k.h = h;
    k.kb = cdiv(k.K, k.k_on_columns ? w : h);
    k.nb = cdiv(k.N, k.k_on_columns ? h : w);
    channel_blocks(ks, l, cdiv(k.cin, k.k_on_columns ? w : h), k.k_on_columns ? w : h, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Colors: one vertex per stream (a kernel's x multicast, its two reduce colors, its weight stream);
// streams whose routers overlap conflict (a router routes a color one way); Boost's sequential
// vertex colouring assigns the colors.

struct Stream {
  size_t kernel;
  char what;  // 'x', '0', '1', 'w'
  std::vector<RectR> routers;
};

// The first kernel with kernel l's orientation (l itself when none before it): in weight-streaming
// inference the kernels of one orientation share its reduce and weight colors and routes.
size_t first_of_orientation(const Compiled& c, size_t l) {
  for (size_t q = 0; q < l; ++q)
    if (c.kernels[q].k_on_columns == c.kernels[l].k_on_columns) return q;
  return l;
}

void allocate_colors(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt) {
  std::vector<Stream> st;
  // Weight streaming (inference): kernels of one orientation share their reduce and weight colors
  // -- the same routes, used one kernel after another (a PE finishes a kernel's tasks before the
  // next kernel's data reaches it; the streams come in order) -- so only the x multicasts, which
  // select a data task each, need a color per kernel.
  const bool share = c.mode == MapMode::weight_streaming && !c.training;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    const RectR r{k.x0, k.y0, k.x0 + k.w - 1, k.y0 + k.h - 1};
    if (k.layernorm) {  // the edge chain and the broadcast back, along the chain ends
      st.push_back({l, 'n', {r}});
      st.push_back({l, 'o', {r}});
      st.push_back({l, 'p', {r}});
    }
    if (k.attn_group() > 1) {  // attention's per-head chains and broadcasts, along the chain ends
      st.push_back({l, 'a', {r}});
      st.push_back({l, 'c', {r}});
      st.push_back({l, 'e', {r}});
    }
    if (share && first_of_orientation(c, l) != l) {
      st.push_back({l, 'x', {r}});
      continue;
    }
    Stream x{l, 'x', {r}};
    if (l > 0) {  // the previous layer's chain ends send this layer's x
      const DenseKernel& p = c.kernels[l - 1];
      x.routers.push_back(p.k_on_columns ? RectR{p.x0 + p.w - 1, p.y0, p.x0 + p.w - 1, p.y0 + p.h - 1}
                                         : RectR{p.x0, p.y0 + p.h - 1, p.x0 + p.w - 1, p.y0 + p.h - 1});
    }
    st.push_back(x);
    st.push_back({l, '0', {r}});
    st.push_back({l, '1', {r}});
    if (c.mode == MapMode::weight_streaming) st.push_back({l, 'w', {r}});
    if (c.training) st.push_back({l, 'b', {r}});
  }
  if (c.training) {  // the loss chain along the last layer's chain ends
    const DenseKernel& k = c.kernels.back();
    const RectR r{k.x0, k.y0, k.x0 + k.w - 1, k.y0 + k.h - 1};
    st.push_back({c.kernels.size() - 1, 'L', {r}});
    st.push_back({c.kernels.size() - 1, 'M', {r}});
  }
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;
  G g(st.size());
  for (size_t a = 0; a < st.size(); ++a)
    for (size_t b = a + 1; b < st.size(); ++b) {
      bool meet = false;
      for (const auto& ra : st[a].routers)
        for (const auto& rb : st[b].routers) meet = meet || ra.meets(rb);
      if (meet) boost::add_edge(a, b, g);
    }
  std::vector<boost::graph_traits<G>::vertices_size_type> color(st.size());
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, g));
  const auto used = static_cast<int64_t>(boost::sequential_vertex_coloring(g, cmap));
  const int64_t avail = cfg.colors - opt.reserved_colors;
  auto label = [&](size_t v) {
    const char w = st[v].what;
    return "kernel '" + c.kernels[st[v].kernel].name + "' " +
           (w == 'x' ? "x multicast" : w == 'w' ? "weight stream" : w == 'b' ? "dy multicast" : w == 'L' || w == 'M' ? "loss chain" : w == 'n' || w == 'o' ? "LayerNorm chain" : w == 'p' ? "LayerNorm broadcast" : w == 'a' || w == 'c' ? "attention score chain" : w == 'e' ? "attention P broadcast" : std::string("reduce ") + w);
  };
  if (used > avail) {
    size_t worst = 0;
    for (size_t v = 0; v < st.size(); ++v)
      if (color[v] > color[worst]) worst = v;
    std::string names;
    auto [a, e] = boost::adjacent_vertices(worst, g);
    std::set<std::string> ks;
    for (; a != e; ++a) ks.insert(c.kernels[st[*a].kernel].name);
    for (const auto& n : ks) names += (names.empty() ? "" : ", ") + n;
    throw InputError("color allocation", "the routes need " + std::to_string(used) + " colors, " + std::to_string(avail) +
                                             " are available (router.colors - reserved); " + label(worst) + " conflicts with streams of " + names,
                     c.mode == MapMode::weight_streaming ? "weight streaming uses a color per layer plus 3 per orientation (4 per layer when training) on one rectangle: map fewer layers"
                                                         : "use a larger block (mapping.wafer_block) or weight streaming");
  }
  std::map<int, std::vector<std::string>> by_color;
  for (size_t v = 0; v < st.size(); ++v) {
    DenseKernel& k = c.kernels[st[v].kernel];
    const int col = static_cast<int>(opt.reserved_colors + static_cast<int64_t>(color[v]));
    const char w = st[v].what;
    (w == 'x' ? k.cx : w == '0' ? k.cr0 : w == '1' ? k.cr1 : w == 'b' ? k.cb : w == 'L' ? c.cl0 : w == 'M' ? c.cl1 : w == 'n' ? k.cn0 : w == 'o' ? k.cn1 : w == 'p' ? k.cnb
     : w == 'a' ? k.ca0 : w == 'c' ? k.ca1 : w == 'e' ? k.cab : k.cw) = col;
    by_color[col].push_back(label(v));
  }
  if (share)  // the shared colors: from the first kernel of the same orientation
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const size_t q = first_of_orientation(c, l);
      if (q == l) continue;
      DenseKernel& k = c.kernels[l];
      k.cr0 = c.kernels[q].cr0, k.cr1 = c.kernels[q].cr1, k.cw = c.kernels[q].cw;
      by_color[k.cr0].push_back("kernel '" + k.name + "' reduce 0 (shared)");
      by_color[k.cr1].push_back("kernel '" + k.name + "' reduce 1 (shared)");
      by_color[k.cw].push_back("kernel '" + k.name + "' weight stream (shared)");
    }
  c.colors_used = static_cast<int>(used);
  for (auto& [col, v] : by_color) c.color_streams.push_back({std::to_string(col), v});
}

// ---------------------------------------------------------------------------------------------
// Code generation.

std::string dirs(std::initializer_list<std::pair<bool, const char*>> ds) {
  std::string s = "[";
  for (const auto& [on, d] : ds)
    if (on) s += std::string(s.size() > 1 ? ", " : "") + "\"" + d + "\"";
  return s + "]";
}

// The route region of one color: `rx` and `tx` direction sets, rect-relative region.
json route(int color, int64_t x, int64_t y, int64_t w, int64_t h, const std::string& rx, const std::string& tx) {
  return {{"color", color}, {"x", x}, {"y", y}, {"width", w}, {"height", h}, {"rx", json::parse(rx)}, {"tx", json::parse(tx)}};
}

// Routes of kernel k's x multicast within its rectangle: lines along the N axis, entering at the
// source end (from the neighbour outside, or from the source PE's own ramp).
void x_routes(const DenseKernel& k, bool from_ramp, json& routes) {
  const Dir f = k.x_flow;
  const char* fwd = dir_name(f).data();
  const char* back = dir_name(opposite(f)).data();
  const int64_t len = k.k_on_columns ? k.h : k.w;  // PEs along a line
  auto region = [&](int64_t from, int64_t n, const std::string& rx, const std::string& tx) {
    // `from`: index along the flow (0 = source end), n PEs.
    int64_t a = from, b = from + n - 1;  // flow positions
    int64_t p0, p1;
    if (f == Dir::S || f == Dir::E) {
      p0 = a, p1 = b;
    } else {
      p0 = len - 1 - b, p1 = len - 1 - a;
    }
    if (k.k_on_columns) routes.push_back(route(k.cx, 0, p0, k.w, p1 - p0 + 1, rx, tx));
    else routes.push_back(route(k.cx, p0, 0, p1 - p0 + 1, k.h, rx, tx));
  };
  const std::string rx0 = from_ramp ? "[\"RAMP\"]" : "[\"" + std::string(back) + "\"]";
  const std::string rxn = "[\"" + std::string(back) + "\"]";
  if (len == 1) {
    region(0, 1, rx0, "[\"RAMP\"]");
    return;
  }
  region(0, 1, rx0, dirs({{true, fwd}, {true, "RAMP"}}));
  if (len > 2) region(1, len - 2, rxn, dirs({{true, fwd}, {true, "RAMP"}}));
  region(len - 1, 1, rxn, "[\"RAMP\"]");
}

// Reduce routes: along the K axis towards E (K on columns) or S; position p sends on color
// c(p) = p even ? cr0 : cr1 and the next PE takes it from its ramp.
void reduce_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const char* fwd = k.k_on_columns ? "E" : "S";
  const char* back = k.k_on_columns ? "W" : "N";
  for (int64_t p = 0; p < len; ++p) {
    // Color of position p's send and of its receive, per route region (one line across).
    std::vector<std::pair<int, std::pair<std::string, std::string>>> at;  // color -> rx, tx
    if (p + 1 < len) at.push_back({p % 2 == 0 ? k.cr0 : k.cr1, {"[\"RAMP\"]", "[\"" + std::string(fwd) + "\"]"}});
    if (p > 0) at.push_back({(p - 1) % 2 == 0 ? k.cr0 : k.cr1, {"[\"" + std::string(back) + "\"]", "[\"RAMP\"]"}});
    for (const auto& [col, rt] : at) {
      if (k.k_on_columns) routes.push_back(route(col, p, 0, 1, k.h, rt.first, rt.second));
      else routes.push_back(route(col, 0, p, k.w, 1, rt.first, rt.second));
    }
  }
}

// Routes at kernel p's chain ends that send the next kernel's x towards it (pipelined) -- in
// p's rectangle. In weight streaming the chain ends are the next kernel's x sources.
void handoff_routes(const DenseKernel& p, const DenseKernel& n, json& routes) {
  if (p.k_on_columns) routes.push_back(route(n.cx, p.w - 1, 0, 1, p.h, "[\"RAMP\"]", "[\"E\"]"));
  else routes.push_back(route(n.cx, 0, p.h - 1, p.w, 1, "[\"RAMP\"]", "[\"S\"]"));
}

// Weight stream routes (weight streaming): rows from the west edge (K on columns), columns from
// the north edge (K on rows); every PE of a line takes the line's stream and passes it on.
void weight_routes(const DenseKernel& k, json& routes) {
  if (k.k_on_columns) {
    if (k.w > 1) routes.push_back(route(k.cw, 0, 0, k.w - 1, k.h, "[\"W\"]", "[\"E\", \"RAMP\"]"));
    routes.push_back(route(k.cw, k.w - 1, 0, 1, k.h, "[\"W\"]", "[\"RAMP\"]"));
  } else {
    if (k.h > 1) routes.push_back(route(k.cw, 0, 0, k.w, k.h - 1, "[\"N\"]", "[\"S\", \"RAMP\"]"));
    routes.push_back(route(k.cw, 0, k.h - 1, k.w, 1, "[\"N\"]", "[\"RAMP\"]"));
  }
}

// Parameters of kernel l for one rectangle (expressions of px, py): source, chain position, colors.
// Weight streaming: whether a PE sets the lengths of the blocks before and after its own at run time
// (inference, and the longest run fits a DSD length, 16 bits) or takes them as parameters (one
// program instance per position along the chain).
bool runtime_block_lengths(bool training, const DenseKernel& k) {
  return !training && ((k.k_on_columns ? k.w : k.h) - 1) * k.kb * k.nb <= 65535;
}

void layer_params(const DenseKernel& k, size_t l, bool ws, bool training, json& params) {
  const std::string L = std::to_string(l);
  const std::string pk = k.k_on_columns ? "px" : "py";              // position along the chain (K axis)
  const std::string kl = k.k_on_columns ? "width" : "height";
  std::string src;
  switch (k.x_flow) {
    case Dir::S: src = "py == 0"; break;
    case Dir::N: src = "py == height - 1"; break;
    case Dir::E: src = "px == 0"; break;
    default: src = "px == width - 1"; break;
  }
  if (k.input_layer) params["src" + L] = src;  // only the input layer's sources hold x (other layers get it from the fabric)
  if (k.input_layer && k.spatial())  // the first kernel row of the source's line (its walk's start)
    params["xoff" + L] = "(" + std::string(k.k_on_columns ? "px" : "py") + " % " + std::to_string(k.kh_blocks()) + ") * " + std::to_string(k.khb * k.iw * k.cblk);
  params["first" + L] = pk + " == 0";
  params["last" + L] = pk + " == " + kl + " - 1";
  const std::string d = "(" + std::to_string(k.cr1) + " - " + std::to_string(k.cr0) + ")";
  params["cout" + L] = std::to_string(k.cr0) + " + (" + pk + " % 2) * " + d;
  params["cin" + L] = std::to_string(k.cr0) + " + ((" + pk + " + 1) % 2) * " + d;
  if (ws && !runtime_block_lengths(training, k)) {  // else computed at run time from px / py (no program instance per PE)
    const std::string bs = std::to_string(k.kb * k.nb);
    params["pre" + L] = pk;                                // blocks before this PE's in its line's stream
    params["post" + L] = kl + " - 1 - " + pk;              // blocks after it
    params["npre" + L] = pk + " * " + bs;                  // ... in wavelets
    params["npost" + L] = "(" + kl + " - 1 - " + pk + ") * " + bs;
  }
}

// The input queue of kernel l's chain colors (a color arrives in one queue of a PE). Training
// gives every layer its own (1, 5, 6): a fabin takes the head of its queue whatever its color, and
// in the backward pass a PE reads the input gradient on layer l-1's colors while gradient blocks
// (layer l's, or layer l+1's still draining) may arrive from a neighbour on another layer's.
int chain_queue(const Compiled& c, size_t l) { return !c.training || l == 0 ? 1 : l == 1 ? 5 : 6; }

// Softmax over the N outputs of each sample at the (single) chain end: m = max, e = exp(z - m)
// (exp_text), s = sum e (in [1, N]), y = e / s (recip_text). kSoftmaxOps(N) operations.
void softmax_text(std::ostringstream& o, const DenseKernel& k, const std::string& L) {
  const int64_t N = k.N;
  const std::string z = "sz" + L + "_", e = "sx" + L + "_";
  o << "  fmovs sm" << L << ", " << z << "0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fmaxs sm" << L << ", sm" << L << ", " << z << cc << "\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs " << e << cc << ", " << z << cc << ", sm" << L << "\n";
  exp_text(o, "sem" + L, "stm" + L);
  o << "  fmovs ss" << L << ", " << e << "0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fadds ss" << L << ", ss" << L << ", " << e << cc << "\n";
  recip_text(o, "sr" + L, "ss" + L, "su" + L, 1.0, static_cast<double>(N));
  for (int64_t cc = 0; cc < N; ++cc) o << "  fmuls " << z << cc << ", " << e << cc << ", sr" << L << "\n";
}

// The im2col send of a conv's x values (docs/wafer-compiler.md "Convolutions"): `src` a 4-D DSD
// over one sample of the holder array (oh, ow, kh, then kw and the channels as one run), moved by
// `stride` elements per sample; each send is async and activates the task again for the next
// sample (r15 counts; `rt` is a scratch register of the receiving layer, free between its tasks),
// the last one without, so no task runs after the gather ends. `halt_after`: the sender takes no
// part in the layer (pipelined chain ends): the last send blocks and the PE halts.
void gather_text(std::ostringstream& o, const std::string& task, int id, bool active, const std::string& src, const std::string& out, int64_t stride,
                 int64_t samples, int rt, const std::string& mov, bool halt_after) {
  o << ".task " << task << " local id=" << id << (active ? " active" : "") << "   # one sample's im2col rows per send\n";
  o << "  mul r" << rt << ", r15, " << stride << "\n  dsd_off " << src << ", r" << rt << "\n  add r15, r15, 1\n  sub r" << rt << ", r15, " << samples << "\n  bz r"
    << rt << ", " << task << "_z\n";
  o << "  " << mov << " " << out << ", " << src << " async activate=" << task << "\n  ret\n";
  o << task << "_z:\n  mov r15, 0\n  " << mov << " " << out << ", " << src << (halt_after ? "\n  halt\n" : " async\n  ret\n");
}

// Chains along kernel k's chain ends (its N axis, towards S or E) in groups of g consecutive
// positions: each group's chain towards its last position on colors c0/c1 (alternating within the
// group), and the broadcast back from that last position to the group (its own copy through its
// ramp) on cb; adjacent groups use no link between them. LayerNorm: one group, the whole edge;
// attention with split heads: a group per head.
void edge_group_routes(const DenseKernel& k, int64_t g, int c0, int c1, int cb, json& routes) {
  const int64_t len = k.k_on_columns ? k.h : k.w;
  const char* fwd = k.k_on_columns ? "S" : "E";
  const char* back = k.k_on_columns ? "N" : "W";
  auto at = [&](int col, int64_t q, const std::string& rx, const std::string& tx) {
    if (k.k_on_columns) routes.push_back(route(col, k.w - 1, q, 1, 1, rx, tx));
    else routes.push_back(route(col, q, k.h - 1, 1, 1, rx, tx));
  };
  for (int64_t q = 0; q < len; ++q) {
    const int64_t ql = q % g;
    const bool first = ql == 0, last = ql == g - 1 || q == len - 1;
    if (!last) at(ql % 2 == 0 ? c0 : c1, q, "[\"RAMP\"]", "[\"" + std::string(fwd) + "\"]");
    if (!first) at((ql - 1) % 2 == 0 ? c0 : c1, q, "[\"" + std::string(back) + "\"]", "[\"RAMP\"]");
    if (last) at(cb, q, "[\"RAMP\"]", first ? "[\"RAMP\"]" : dirs({{true, back}, {true, "RAMP"}}));
    else if (!first) at(cb, q, "[\"" + std::string(fwd) + "\"]", dirs({{true, back}, {true, "RAMP"}}));
    else at(cb, q, "[\"" + std::string(fwd) + "\"]", "[\"RAMP\"]");
  }
}

// The parameters of those groups, prefixed `pre` and suffixed with l: <pre>first, <pre>last (the
// group's), <pre>cout / <pre>cin (the colors a position sends and takes on).
void edge_group_params(const DenseKernel& k, size_t l, int64_t g, int c0, int c1, const std::string& pre, json& params) {
  const std::string L = std::to_string(l), pn = k.k_on_columns ? "py" : "px", nl = k.k_on_columns ? "height" : "width";
  const std::string G = std::to_string(g), q = "(" + pn + " % " + G + ")";
  params[pre + "first" + L] = q + " == 0";
  params[pre + "last" + L] = "(" + q + " == " + G + " - 1) + (" + pn + " == " + nl + " - 1)";
  const std::string d = "(" + std::to_string(c1) + " - " + std::to_string(c0) + ")";
  params[pre + "cout" + L] = std::to_string(c0) + " + (" + q + " % 2) * " + d;
  params[pre + "cin" + L] = std::to_string(c0) + " + ((" + q + " + 1) % 2) * " + d;
}

void ln_routes(const DenseKernel& k, json& routes) { edge_group_routes(k, k.k_on_columns ? k.h : k.w, k.cn0, k.cn1, k.cnb, routes); }
void ln_params(const DenseKernel& k, size_t l, json& params) { edge_group_params(k, l, k.k_on_columns ? k.h : k.w, k.cn0, k.cn1, "ln", params); }

void attn_routes(const DenseKernel& k, json& routes) { edge_group_routes(k, k.attn_group(), k.ca0, k.ca1, k.cab, routes); }
void attn_params(const DenseKernel& k, size_t l, json& params) { edge_group_params(k, l, k.attn_group(), k.ca0, k.ca1, "ag", params); }

// The array holding kernel l's output where the next kernels read it.
std::string hold_array(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  return c.fp16 ? "y16_" + std::to_string(l) : k.attn ? "att" + std::to_string(l) : k.pkh ? "p" + std::to_string(l) : "y" + std::to_string(l);
}

// LayerNorm at kernel l's chain ends (in `red`, after bias, activation and residual): row sums
// summed along the edge, the mean broadcast back and subtracted; the squared deviations' sums
// likewise, 1 / sqrt(var + eps) by kRsqrtIters Newton steps from 0.01 at the edge's end, broadcast
// back; then the scale and bias.
void ln_text(const DenseKernel& k, size_t l, bool padded, std::ostringstream& o) {
  const std::string L = std::to_string(l);
  const int64_t nb = k.nb;
  auto sums = [&](const std::string& col) {
    o << "  fmovs lnsm" << L << ", " << col << L << "_0\n";
    for (int64_t n = 1; n < nb; ++n) o << "  fadds lnsm" << L << ", lnsm" << L << ", " << col << L << "_" << n << "\n";
    o << ".if $lnfirst" << L << "\n.if !$lnlast" << L << "\n  fmovs lnto" << L << ", lnsm" << L << "\n.endif\n.else\n.if $lnlast" << L << "\n  fadds lnsm" << L
      << ", lnsm" << L << ", lnfr" << L << "\n.else\n  fadds lnto" << L << ", lnsm" << L << ", lnfr" << L << "\n.endif\n.endif\n";
  };
  const std::string invn = fnum(1.0 / static_cast<double>(k.N));
  sums("lyc");
  o << ".if $lnlast" << L << "\n  fmuls lncm" << L << ", lnsm" << L << ", " << invn << "\n  fmovs lnbo" << L << ", lncm" << L << " async\n.endif\n";
  o << "  fmovs lnrm" << L << ", lnbi" << L << "\n  fsubs yall" << L << ", yall" << L << ", lnrb" << L << "\n";
  if (padded) o << "  fmuls yall" << L << ", yall" << L << ", lnkb" << L << "   # padded features stay 0\n";
  o << "  fmuls lnqm" << L << ", yall" << L << ", yall" << L << "\n";
  sums("lqc");
  o << ".if $lnlast" << L << "\n  fmuls lntm" << L << ", lnsm" << L << ", " << invn << "\n  fadds lntm" << L << ", lntm" << L << ", " << fnum(k.ln_eps) << "\n";
  rsqrt_text(o, "lncm" + L, "lntm" + L, "lnsm" + L);
  o << "  fmovs lnbo" << L << ", lncm" << L << " async\n.endif\n";
  o << "  fmovs lnrm" << L << ", lnbi" << L << "\n  fmuls yall" << L << ", yall" << L << ", lnrb" << L << "\n  fmuls yall" << L << ", yall" << L << ", lngb" << L
    << "\n  fadds yall" << L << ", yall" << L << ", lnbb" << L << "\n";
}

// Queues: an async op runs on the microthread of its queue number, and weight loads keep input
// queues 2 and 3's microthreads busy for long stretches, so the broadcasts that other PEs wait for
// in a blocking receive (LayerNorm's on output queue 5, attention's on 4) use other numbers; the
// chains' blocking sends use output queue 2 (blocking ops need no microthread).
// Multi-head attention at the chain end of the kernel computing V (rows S = B), for each of the nb /
// dh heads in the PE's block: scores[s, t] = sum_j Q[s, j] K[t, j] (per j one product of two
// broadcast walks, S x S), times the scale; softmax over t (row max, exp_text, row sum, recip_text
// over [1, S]); out[s, j] = sum_t P[s, t] V[t, j] (per t one product of broadcast walks, S x dh).
void attention_text(const DenseKernel& k, size_t l, int rc, std::ostringstream& o) {
  const std::string L = std::to_string(l);
  const int64_t fb = k.feat_nb(), S = k.B, Sq = k.attn_rows(), nq = S / Sq, g = k.attn_group(), w = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
  // Query blocks of Sq rows, one after another (the kernel's x-task registers): the
  // scores of a block are Sq x S.
  // The kernel's own x-task registers: its counter (0 between its x tasks) counts the blocks, its
  // scratch holds the offset; the counter is back at 0 at the end.
  // Fused Q, K, V (rows of nb = 3 fb): the output's rows (fb) move by a different offset, kept in
  // the kernel's sample counter (0 between its x tasks, set back to 0 at the end).
  const std::string rq = "r" + std::to_string(rc), ro = "r" + std::to_string(rc + 2), rv = fb != k.nb ? "r" + std::to_string(rc + 1) : ro;
  if (nq > 1) {
    o << "  mov " << rq << ", 0\nablk" << L << ":\n  mul " << ro << ", " << rq << ", " << Sq * k.nb << "\n";
    if (rv != ro) o << "  mul " << rv << ", " << rq << ", " << Sq * fb << "\n";
  }
  for (int64_t hh = 0; hh < hp; ++hh) {
    const std::string H = L + "_" + std::to_string(hh);
    if (nq > 1) {
      for (int64_t j = 0; j < w; ++j) o << "  dsd_off aq" << H << "_" << j << ", " << ro << "\n";
      o << "  dsd_off ao" << H << ", " << rv << "\n";
    }
    o << "  fmuls ascm" << L << ", aq" << H << "_0, ak" << H << "_0\n";
    for (int64_t j = 1; j < w; ++j) o << "  fmuls atmm" << L << ", aq" << H << "_" << j << ", ak" << H << "_" << j << "\n  fadds ascm" << L << ", ascm" << L << ", atmm" << L << "\n";
    if (g > 1)  // the head's partial scores summed along its group, to the group's last PE
      o << ".if $agfirst" << L << "\n.if !$aglast" << L << "\n  fmovs aton" << L << ", ascm" << L << "\n.endif\n.else\n.if $aglast" << L << "\n  fadds ascm" << L << ", ascm" << L
        << ", afr" << L << "\n.else\n  fadds aton" << L << ", ascm" << L << ", afr" << L << "\n.endif\n.endif\n.if $aglast" << L << "\n";
    o << "  fmuls ascm" << L << ", ascm" << L << ", " << fnum(k.attn_scale) << "\n";
    o << "  fmovs amm" << L << ", acol" << L << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fmaxs amm" << L << ", amm" << L << ", acol" << L << "_" << t << "\n";
    o << "  fsubs ascm" << L << ", ascm" << L << ", amb" << L << "\n";
    exp_text(o, "ascm" + L, "atmm" + L);
    o << "  fmovs asm" << L << ", acol" << L << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fadds asm" << L << ", asm" << L << ", acol" << L << "_" << t << "\n";
    recip_text(o, "arm" + L, "asm" + L, "aum" + L, 1.0, static_cast<double>(S));
    o << "  fmuls ascm" << L << ", ascm" << L << ", arb" << L << "\n";
    if (g > 1)  // P back to the group (the last PE's own copy through its ramp) into atm
      o << "  fmovs abo" << L << ", ascm" << L << " async\n.endif\n  fmovs atmm" << L << ", abi" << L << "\n";
    o << "  fmuls ao" << H << ", ap" << L << "_0, av" << H << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fmuls atom" << L << ", ap" << L << "_" << t << ", av" << H << "_" << t << "\n  fadds ao" << H << ", ao" << H << ", atom" << L << "\n";
  }
  if (nq > 1) o << "  add " << rq << ", " << rq << ", 1\n  sub " << ro << ", " << rq << ", " << nq << "\n  bnz " << ro << ", ablk" << L << "\n  mov " << rq << ", 0\n"
                << (rv != ro ? "  mov " + rv + ", 0\n" : "");
}

// The first of kernel l's three x-task registers (counter j, sample counter b, scratch): three per
// layer (r0..r14) for up to 5 layers; with more, every layer's x tasks share r0..r2 (a PE
// finishes a kernel's x tasks, the counters back at 0, before the next kernel's x values reach it).
int x_regs(const Compiled& c, size_t l) { return c.kernels.size() > 5 ? 0 : 3 * static_cast<int>(l); }

// The DSD dims of a conv's im2col walk over one sample of its [ih, iw, cb] holder.
std::string im2col_dims(const DenseKernel& n) {
  const int64_t cb = n.cblk;
  return std::to_string(n.oh) + ":" + std::to_string(n.sh * n.iw * cb) + "," + std::to_string(n.ow) + ":" + std::to_string(n.sw * cb) + "," +
         std::to_string(n.khb) + ":" + std::to_string(n.iw * cb) + "," + std::to_string(n.kw * cb) + ":1";
}

// PE program text of kernel l (its `.data`, `.dsd` and tasks), names suffixed with l.
void layer_text(const Compiled& c, size_t l, std::ostringstream& o) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  const std::vector<size_t>& rd = c.readers[l + 1];  // the kernels reading this one's output
  const bool has_next = !rd.empty();
  const bool final_layer = ws ? l + 1 == c.kernels.size() : true;
  const std::string L = std::to_string(l);
  const std::string wbuf = ws ? (l % 2 ? "Wb" : "Wa") : "W" + L;
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  // Three registers per layer (r0..r14 for up to 5 layers): layers that share PEs (weight
  // streaming) never share a counter. With more layers all share r0..r2: a PE finishes a kernel's
  // x tasks (the counters back at 0) before the next kernel's x values reach it.
  const int nk5 = std::max<int>(5, static_cast<int>(c.kernels.size()));
  const int rj = x_regs(c, l), rb = rj + 1, rt = rj + 2;
  // Task ids are priorities (the lowest runnable id goes first): weight loads (4 per layer, ids
  // 0-19 for 5 layers) before x tasks (20-24) so a load is never starved by a busy layer, then the
  // reduce (25-29), the hand-off (30-34) and the input's send (35); with n > 5 layers the same
  // order with bases 4n, 5n, 6n, 7n.
  const int li = static_cast<int>(l);
  const int id_ld = 4 * li, id_onx = 4 * nk5 + li, id_red = 5 * nk5 + li, id_out = 6 * nk5 + li, id_send = 7 * nk5;
  const int qw = c.weight_queue(l);
  // fp16 compute: W blocks and x values in fp16, products exact in fp32 (fmachs), partial sums,
  // bias and activation in fp32; the chain end converts y to fp16 before sending it on.
  const bool h = c.fp16;
  const std::string we = h ? "f16" : "f32", mov = h ? "fmovh" : "fmovs";
  o << "# ---- kernel " << l << ": " << k.name << " (" << k.op << "), X[" << B << "," << k.K << "] x W[" << k.K << "," << k.N << "], block "
    << kb << " x " << nb << (k.k_on_columns ? ", K along columns" : ", K along rows") << "\n";
  if (!ws) o << ".data " << wbuf << " " << we << " " << kb * nb << "   # W block, column j = the weights of x_j\n";
  o << ".data y" << L << " f32 " << B * nb << "\n";
  if (c.training) o << ".data xsave" << L << " f32 " << B * kb << "   # the x values this PE took (the weight gradient needs them)\n.dsd xsv" << L << " mem1d xsave" << L << " len=1\n";
  const DenseKernel* nk = has_next ? &c.kernels[rd[0]] : nullptr;
  const std::string N1 = has_next ? std::to_string(rd[0]) : "";
  const int64_t rows = k.rows_out();
  if (k.input_layer)
    o << ".if $src" << L << "\n.data xs" << L << " " << we << " " << (k.spatial() ? k.xs_elems() : B * kb)
      << (k.spatial() ? "   # [sample, h, w, channel] with the zero border" : "") << "\n.endif\n";
  o << ".if $last" << L << "\n.data bias" << L << " f32 " << nb << "\n";
  if (k.pkh) o << ".data p" << L << " f32 " << rows * nb << "   # the MaxPool's output [sample, ph, pw, channel]\n";
  if (h && has_next) o << ".data y16_" << L << " f16 " << rows * nb << "   # y in fp16, as the next layer takes it\n";
  o << ".endif\n";
  o << ".dsd wcol" << L << " mem1d " << wbuf << " len=" << nb << "\n";
  o << ".dsd yrow" << L << " mem1d y" << L << " len=" << nb << "\n";
  o << ".dsd yall" << L << " mem1d y" << L << "\n";
  if (k.input_layer && k.spatial())
    o << ".if $src" << L << "\n.dsd xsm" << L << " mem4d xs" << L << " off=$xoff" << L << " dims=" << im2col_dims(k) << "\n.dsd xout" << L << " fabout " << we << " color=" << k.cx
      << " queue=0 len=" << k.oh * k.ow * kb << "\n.endif\n";
  else if (k.input_layer) {
    o << ".if $src" << L << "\n.dsd xsm" << L << " mem1d xs" << L << "\n.dsd xout" << L << " fabout " << we << " color=" << k.cx << " queue=0 len=" << B * kb << "\n";
    for (size_t j = 1; j < c.readers[0].size(); ++j)  // the graph input's other readers
      o << ".dsd xout" << L << "_" << j << " fabout " << we << " color=" << c.kernels[c.readers[0][j]].cx << " queue=0 len=" << B * kb << "\n";
    o << ".endif\n";
  }
  o << ".if !$first" << L << "\n.dsd from" << L << " fabin f32 color=$cin" << L << " queue=" << chain_queue(c, l) << " len=" << B * nb << "\n.endif\n";
  o << ".if !$last" << L << "\n.dsd to" << L << " fabout f32 color=$cout" << L << " queue=2 len=" << B * nb << "\n.endif\n";
  o << ".if $last" << L << "\n.dsd bm" << L << " mem4d bias" << L << " dims=" << B << ":0," << nb << ":1   # the bias again for every sample\n";
  if (k.tanh)  // the activation's temporaries
    for (const char* t : {"ta", "tb", "tc"}) o << ".data " << t << L << "_a f32 " << B * nb << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
  if (k.gelu)
    for (const char* t : {"ga", "gb", "gc", "gd"}) o << ".data " << t << L << "_a f32 " << B * nb << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
  if (k.residual >= 0) {  // the residual: the input of kernel r, held here in the same blocks
    const size_t r = static_cast<size_t>(k.residual);
    const int64_t rs = c.kernels[r].src;
    if (k.res_host) o << ".data xr" << L << " f32 " << B * nb << "   # the graph input's block, placed by the host\n";
    o << ".dsd res" << L << " mem1d " << (k.res_host ? "xr" + L : rs < 0 ? "xs0" : hold_array(c, static_cast<size_t>(rs))) << " len=" << B * nb << "\n";
  }
  if (k.layernorm) {
    o << ".data lns" << L << " f32 " << B << "\n.data lnc" << L << " f32 " << B << "\n.data lnr" << L << " f32 " << B << "\n.data lnq" << L << " f32 " << B * nb << "\n";
    o << ".data lng" << L << " f32 " << nb << "\n.data lnb" << L << " f32 " << nb << "\n";
    for (const char* t : {"lns", "lnc", "lnr", "lnq"}) o << ".dsd " << t << "m" << L << " mem1d " << t << L << "\n";
    o << ".dsd lnrb" << L << " mem4d lnr" << L << " dims=" << B << ":1," << nb << ":0\n";
    o << ".dsd lngb" << L << " mem4d lng" << L << " dims=" << B << ":0," << nb << ":1\n.dsd lnbb" << L << " mem4d lnb" << L << " dims=" << B << ":0," << nb << ":1\n";
    if ((k.k_on_columns ? k.h : k.w) * nb > k.N)
      o << ".data lnk" << L << " f32 " << nb << "   # 1 for real features, 0 for padding\n.dsd lnkb" << L << " mem4d lnk" << L << " dims=" << B << ":0," << nb << ":1\n";
    for (int64_t n = 0; n < nb; ++n)
      o << ".dsd lyc" << L << "_" << n << " mem1d y" << L << " off=" << n << " len=" << B << " stride=" << nb << "\n.dsd lqc" << L << "_" << n << " mem1d lnq" << L
        << " off=" << n << " len=" << B << " stride=" << nb << "\n";
    o << ".if !$lnlast" << L << "\n.dsd lnto" << L << " fabout f32 color=$lncout" << L << " queue=2 len=" << B << "\n.endif\n";
    o << ".if !$lnfirst" << L << "\n.dsd lnfr" << L << " fabin f32 color=$lncin" << L << " queue=4 len=" << B << "\n.endif\n";
    o << ".if $lnlast" << L << "\n.dsd lnbo" << L << " fabout f32 color=" << k.cnb << " queue=5 len=" << B << "\n.data lnt" << L << " f32 " << B << "\n.dsd lntm" << L
      << " mem1d lnt" << L << "\n.endif\n";
    o << ".dsd lnbi" << L << " fabin f32 color=" << k.cnb << " queue=5 len=" << B << "\n";
  }
  if (k.attn) {  // attention: scores [S, S] and their work array, the output [S, fb], per-row temporaries
    // S keys; Sq query rows per block (all S when the scores fit); dh here: the head's features on this PE.
    // Fused (pipelined): Q, K and V in y's rows at offsets 0, fb, 2 fb; else the Q and K kernels' y arrays.
    const int64_t fb = k.feat_nb(), S = B, Sq = k.attn_rows(), g = k.attn_group(), dh = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
    const std::string Q = std::to_string(k.attn_q), K = std::to_string(k.attn_k);
    const int64_t qoff = 0, koff = k.qkv ? fb : 0, voff = k.qkv ? 2 * fb : 0;
    o << ".data att" << L << " f32 " << S * fb << "   # the attention's output: what the next kernels read\n.data asc" << L << " f32 " << Sq * S << "\n.data atm" << L << " f32 "
      << Sq * S << "\n.data ato" << L << " f32 " << Sq * dh << "\n";
    if (g > 1) {
      o << ".if !$aglast" << L << "\n.dsd aton" << L << " fabout f32 color=$agcout" << L << " queue=2 len=" << Sq * S << "\n.endif\n";
      o << ".if !$agfirst" << L << "\n.dsd afr" << L << " fabin f32 color=$agcin" << L << " queue=6 len=" << Sq * S << "\n.endif\n";
      o << ".if $aglast" << L << "\n.dsd abo" << L << " fabout f32 color=" << k.cab << " queue=4 len=" << Sq * S << "\n.endif\n";
      o << ".dsd abi" << L << " fabin f32 color=" << k.cab << " queue=7 len=" << Sq * S << "\n";
    }
    for (const char* t : {"am", "as", "ar", "au"}) o << ".data " << t << L << " f32 " << Sq << "\n.dsd " << t << "m" << L << " mem1d " << t << L << "\n";
    o << ".dsd aall" << L << " mem1d att" << L << "\n.dsd ascm" << L << " mem1d asc" << L << "\n.dsd atmm" << L << " mem1d atm" << L << "\n.dsd atom" << L << " mem1d ato" << L << "\n";
    o << ".dsd amb" << L << " mem4d am" << L << " dims=" << Sq << ":1," << S << ":0\n.dsd arb" << L << " mem4d ar" << L << " dims=" << Sq << ":1," << S << ":0\n";
    for (int64_t t = 0; t < S; ++t)
        o << ".dsd acol" << L << "_" << t << " mem1d asc" << L << " off=" << t << " len=" << Sq << " stride=" << S << "\n.dsd ap" << L << "_" << t << " mem4d "
          << (g > 1 ? "atm" : "asc") << L << " off=" << t << " dims=" << Sq << ":" << S << "," << dh << ":0\n";
    for (int64_t hh = 0; hh < hp; ++hh) {
      for (int64_t j = 0; j < dh; ++j)
        o << ".dsd aq" << L << "_" << hh << "_" << j << " mem4d y" << Q << " off=" << qoff + hh * dh + j << " dims=" << Sq << ":" << nb << "," << S << ":0\n.dsd ak" << L << "_" << hh
          << "_" << j << " mem4d y" << K << " off=" << koff + hh * dh + j << " dims=" << Sq << ":0," << S << ":" << nb << "\n";
      for (int64_t t = 0; t < S; ++t)
        o << ".dsd av" << L << "_" << hh << "_" << t << " mem4d y" << L << " off=" << t * nb + voff + hh * dh << " dims=" << Sq << ":0," << dh << ":1\n";
      o << ".dsd ao" << L << "_" << hh << " mem4d att" << L << " off=" << hh * dh << " dims=" << Sq << ":" << fb << "," << dh << ":1\n";
    }
  }
  if (k.softmax) {  // per class c: the logits' column (stride nb) and the exponentials' (stride N)
    o << ".data se" << L << " f32 " << B * k.N << "\n.data st" << L << " f32 " << B * k.N << "\n";
    for (const char* t : {"sm", "ss", "sr", "su"}) o << ".data " << t << L << "_a f32 " << B << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
    o << ".dsd sem" << L << " mem1d se" << L << "\n.dsd stm" << L << " mem1d st" << L << "\n";
    for (int64_t cc = 0; cc < k.N; ++cc)
      o << ".dsd sz" << L << "_" << cc << " mem1d y" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n.dsd sx" << L << "_" << cc << " mem1d se" << L
        << " off=" << cc << " len=" << B << " stride=" << k.N << "\n";
  }
  if (k.pkh) {  // the pool's windows over y: one 4-D walk per window offset
    o << ".dsd pall" << L << " mem1d p" << L << "\n";
    for (int64_t a = 0; a < k.pkh; ++a)
      for (int64_t b = 0; b < k.pkw; ++b)
        o << ".dsd pw" << L << "_" << a * k.pkw + b << " mem4d y" << L << " off=" << (a * k.ow + b) * nb << " dims=" << k.samples << ":" << k.oh * k.ow * nb << ","
          << k.ph << ":" << k.psh * k.ow * nb << "," << k.pw << ":" << k.psw * nb << "," << nb << ":1\n";
  }
  // The array the next layer's x values are read from, and how.
  const std::string hold = hold_array(c, l);
  if (has_next) {
    const int64_t len = nk->spatial() ? nk->oh * nk->ow * nk->kb : rows * k.feat_nb();
    o << ".dsd yout" << L << " fabout " << we << " color=" << nk->cx << " queue=1 len=" << len << "\n";
    for (size_t j = 1; j < rd.size(); ++j) o << ".dsd yout" << L << "_" << j << " fabout " << we << " color=" << c.kernels[rd[j]].cx << " queue=1 len=" << len << "\n";
    if (nk->xread == DenseKernel::XRead::flatten)  // [sample, P, nb] read channel-major: the Flatten's order
      o << ".dsd gx" << N1 << " mem4d " << hold << " dims=" << nk->samples << ":" << nk->P * nb << "," << nb << ":1," << nk->P << ":" << nb << "\n";
    if (nk->spatial()) o << ".dsd gx" << N1 << " mem4d " << hold << " dims=" << im2col_dims(*nk) << "\n";
  }
  if (has_next && h) o << ".dsd y16m" << L << " mem1d y16_" << L << "\n";
  o << ".endif\n";
  if (ws) {
    // Inference: the lengths of the blocks before and after this PE's are set at run time from
    // px / py (dsd_len), so a big rectangle does not need a program instance per PE; training
    // keeps them as parameters (its gradient gather uses them too).
    const bool rt_len = runtime_block_lengths(c.training, k);
    if (!rt_len) {
      o << ".if $pre" << L << "\n.dsd wpre" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=$npre" << L << "\n";
      o << ".dsd jpre" << L << " mem4d junk dims=$pre" << L << ":0," << kb << ":0," << nb << ":0\n.endif\n";
    } else {
      o << ".if !$first" << L << "\n.dsd wpre" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=1\n.dsd jpre" << L << " mem1d junk len=1 stride=0\n.endif\n";
    }
    o << ".dsd wkeep" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=" << kb * nb << "\n";
    o << ".dsd wbuf" << L << " mem1d " << wbuf << " len=" << kb * nb << "\n";
    if (!rt_len) {
      o << ".if $post" << L << "\n.dsd wpost" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=$npost" << L << "\n";
      o << ".dsd jpost" << L << " mem4d junk dims=$post" << L << ":0," << kb << ":0," << nb << ":0\n.endif\n";
    } else {
      o << ".if !$last" << L << "\n.dsd wpost" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=1\n.dsd jpost" << L << " mem1d junk len=1 stride=0\n.endif\n";
    }
  }
  // Tasks.
  if (k.input_layer && k.spatial()) {
    o << ".if $src" << L << "\n";
    gather_text(o, "send" + L, id_send, true, "xsm" + L, "xout" + L, k.ih * k.iw * k.cblk, k.samples, rt, mov, false);
    o << ".endif\n";
  } else if (k.input_layer) {
    const size_t nr = c.readers[0].size();  // one send per reader of the graph input, one after another
    o << ".if $src" << L << "\n.task send" << L << " local id=" << id_send << " active\n  " << mov << " xout" << L << ", xsm" << L << " async"
      << (nr > 1 ? " activate=send" + L + "_1" : "") << "\n  ret\n";
    for (size_t j = 1; j < nr; ++j)
      o << ".task send" << L << "_" << j << " local id=" << c.extra_send_id[0] + static_cast<int>(j) - 1 << "\n  " << mov << " xout" << L << "_" << j << ", xsm" << L
        << " async" << (j + 1 < nr ? " activate=send" + L + "_" + std::to_string(j + 1) : "") << "\n  ret\n";
    o << ".endif\n";
  }
  o << ".task onx" << L << " data id=" << id_onx << " color=" << k.cx << " queue=0" << (ws ? " blocked" : "")
    << "   # one x value: y[b, :] += W[:, j] * x\n";
  if (c.training)
    o << "  mul r" << rt << ", r" << rb << ", " << kb << "\n  add r" << rt << ", r" << rt << ", r" << rj << "\n  dsd_off xsv" << L << ", r" << rt << "\n  fmovs xsv" << L << ", wv\n";
  o << "  mul r" << rt << ", r" << rj << ", " << nb << "\n  dsd_off wcol" << L << ", r" << rt << "\n";
  o << "  mul r" << rt << ", r" << rb << ", " << nb << "\n  dsd_off yrow" << L << ", r" << rt << "\n";
  // The first column of a sample sets y (so y needs no clearing between steps), the others add.
  if (h) {
    o << "  bnz r" << rj << ", a" << L << "\n  fmachs yrow" << L << ", 0.0, wcol" << L << ", wv\n  jmp c" << L << "\na" << L << ":\n";
    o << "  fmachs yrow" << L << ", yrow" << L << ", wcol" << L << ", wv\nc" << L << ":\n";
  } else {
    o << "  bnz r" << rj << ", a" << L << "\n  fmuls yrow" << L << ", wcol" << L << ", wv\n  jmp c" << L << "\na" << L << ":\n";
    o << "  fmacs yrow" << L << ", yrow" << L << ", wcol" << L << ", wv\nc" << L << ":\n";
  }
  o << "  add r" << rj << ", r" << rj << ", 1\n  sub r" << rt << ", r" << rj << ", " << kb << "\n  bnz r" << rt << ", x" << L << "\n";
  o << "  mov r" << rj << ", 0\n  add r" << rb << ", r" << rb << ", 1\n  sub r" << rt << ", r" << rb << ", " << B << "\n  bnz r" << rt << ", x" << L
    << "\n";
  o << "  mov r" << rb << ", 0\n  activate red" << L << "\n";
  if (ws && l + 2 < c.kernels.size()) o << "  unblock ld" << l + 2 << "   # the buffer is free for the layer after next\n";
  o << "x" << L << ":\n  ret\n";
  o << ".task red" << L << " local id=" << id_red << "   # partial sums along the chain; bias and activation at its end\n";
  o << ".if !$first" << L << "\n.if $last" << L << "\n  fadds yall" << L << ", yall" << L << ", from" << L << "\n.else\n  fadds to" << L << ", yall" << L
    << ", from" << L << "\n.endif\n.else\n.if !$last" << L << "\n  fmovs to" << L << ", yall" << L << "\n.endif\n.endif\n";
  o << ".if $last" << L << "\n  fadds yall" << L << ", yall" << L << ", bm" << L << "\n";
  const bool act_some = k.act_split();  // pass-through blocks take none
  if (act_some) o << ".if $act" << L << "\n";
  if (k.relu) o << "  fmaxs yall" << L << ", yall" << L << ", 0.0\n";
  if (k.tanh) tanh_text(o, "yall" + L, "ta" + L, "tb" + L, "tc" + L);
  if (k.gelu) gelu_text(o, "yall" + L, "ga" + L, "gb" + L, "gc" + L, "gd" + L);
  if (act_some) o << ".endif\n";
  if (k.attn) attention_text(k, l, rj, o);
  if (k.softmax) softmax_text(o, k, L);
  if (k.residual >= 0) o << "  fadds yall" << L << ", yall" << L << ", res" << L << "\n";
  if (k.layernorm) ln_text(k, l, (k.k_on_columns ? k.h : k.w) * nb > k.N, o);
  if (k.pkh) {  // MaxPool: the first window's values, then the max with every other window
    o << "  fmovs pall" << L << ", pw" << L << "_0\n";
    for (int64_t i = 1; i < k.pkh * k.pkw; ++i) o << "  fmaxs pall" << L << ", pall" << L << ", pw" << L << "_" << i << "\n";
  }
  if (has_next) o << "  activate out" << L << "\n  ret\n.else\n  " << (final_layer ? "halt" : "ret") << "\n";
  o << ".endif\n";
  if (!has_next && c.training) o << ".if $last" << L << "\n  activate lossk\n.endif\n  ret\n";  // the loss, then the backward pass
  else if (!has_next) o << "  " << (final_layer ? "halt" : "ret") << "\n";
  if (has_next) {  // y is complete at the chain end: send it on as the next layer's x
    const std::string full = k.attn ? "aall" + L : k.pkh ? "pall" + L : "yall" + L;
    o << ".if $last" << L << "\n.task out" << L << " local id=" << id_out << "\n" << (h ? "  fs2h y16m" + L + ", " + full + "\n" : "");
    if (nk->spatial()) {
      o << "  activate gs" << N1 << "\n  ret\n";
      gather_text(o, "gs" + N1, id_send + static_cast<int>(rd[0]), false, "gx" + N1, "yout" + L, nk->ih * nk->iw * nk->cblk, nk->samples, x_regs(c, rd[0]) + 2,
                  mov, !ws);
    } else {
      const std::string src = nk->xread == DenseKernel::XRead::flatten ? "gx" + N1 : h ? "y16m" + L : full;
      o << "  " << mov << " yout" << L << ", " << src << (ws ? " async" + (rd.size() > 1 ? " activate=out" + L + "_1" : std::string()) + "\n  ret" : "\n  halt") << "\n";
      for (size_t j = 1; j < rd.size(); ++j)  // the other readers, one after another
        o << ".task out" << L << "_" << j << " local id=" << c.extra_send_id[l + 1] + static_cast<int>(j) - 1 << "\n  " << mov << " yout" << L << "_" << j << ", " << src
          << " async" << (j + 1 < rd.size() ? " activate=out" + L + "_" + std::to_string(j + 1) : "") << "\n  ret\n";
    }
    o << ".endif\n";
  }
  if (ws) {
    // Loads run one layer after another (a PE's ramp takes one wavelet per cycle: two streams at
    // once would halve both); layer l loads once layer l-1's block is in (activated by ldd{l-1})
    // and, from layer 2 on, once layer l-2 is done with the buffer (unblocked by onx{l-2}).
    o << ".task ld" << L << " local id=" << id_ld << (l == 0 ? " active" : "") << (l >= 2 ? " blocked" : "")
      << "   # take this PE's block from the line's weight stream\n";
    const std::string pos = k.k_on_columns ? "px" : "py", bs = std::to_string(kb * nb), r = "r" + std::to_string(rt);
    const int64_t kl1 = (k.k_on_columns ? k.w : k.h) - 1;
    const bool rt_len = runtime_block_lengths(c.training, k);
    const std::string pre_len = !rt_len ? "" : "  mul " + r + ", " + pos + ", " + bs + "\n  dsd_len wpre" + L + ", " + r + "\n  dsd_len jpre" + L + ", " + r + "\n";
    const std::string post_len =
        !rt_len ? "" : "  sub " + r + ", " + std::to_string(kl1) + ", " + pos + "\n  mul " + r + ", " + r + ", " + bs + "\n  dsd_len wpost" + L + ", " + r + "\n  dsd_len jpost" + L + ", " + r + "\n";
    const std::string has_pre = !rt_len ? "$pre" + L : "!$first" + L, has_post = !rt_len ? "$post" + L : "!$last" + L;
    o << ".if " << has_pre << "\n" << pre_len << "  " << mov << " jpre" << L << ", wpre" << L << " async activate=ldb" << L << "\n.else\n  " << mov << " wbuf" << L << ", wkeep" << L
      << " async activate=ldc" << L << "\n.endif\n  ret\n";
    o << ".task ldb" << L << " local id=" << id_ld + 1 << "\n  " << mov << " wbuf" << L << ", wkeep" << L << " async activate=ldc" << L << "\n  ret\n";
    o << ".task ldc" << L << " local id=" << id_ld + 2 << "\n.if " << has_post << "\n" << post_len << "  " << mov << " jpost" << L << ", wpost" << L << " async activate=ldd"
      << L << "\n.else\n  activate ldd" << L << "\n.endif\n  ret\n";
    o << ".task ldd" << L << " local id=" << id_ld + 3 << "   # the block is in place (its end is the layer's weights-ready cycle)\n  unblock onx" << L
      << "\n" << (l + 1 < c.kernels.size() ? "  activate ld" + std::to_string(l + 1) + "\n" : "") << "  ret\n";
  }
}

// ---------------------------------------------------------------------------------------------
// Training (weight streaming): routes, parameters and the backward program of every layer.

// dy multicast: from each chain end back along its chain to every position (the chain end's own
// copy through its ramp), on color cb.
void dy_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const char* back = k.k_on_columns ? "W" : "N";
  const char* from = k.k_on_columns ? "E" : "S";
  for (int64_t p = 0; p < len; ++p) {
    std::string rx, tx;
    if (p == len - 1) rx = "[\"RAMP\"]", tx = len > 1 ? dirs({{true, back}, {true, "RAMP"}}) : "[\"RAMP\"]";
    else if (p > 0) rx = "[\"" + std::string(from) + "\"]", tx = dirs({{true, back}, {true, "RAMP"}});
    else rx = "[\"" + std::string(from) + "\"]", tx = "[\"RAMP\"]";
    if (k.k_on_columns) routes.push_back(route(k.cb, p, 0, 1, k.h, rx, tx));
    else routes.push_back(route(k.cb, 0, p, k.w, 1, rx, tx));
  }
}

// The chain's color at position p (the forward reduce's alternation).
int chain_color(const DenseKernel& k, int64_t p) { return p % 2 == 0 ? k.cr0 : k.cr1; }

// Weight gradients leave the chain end off the fabric's edge (E or S) into the gradient port, on
// the color the chain end would send on.
void grad_port_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const int col = chain_color(k, len - 1);
  if (k.k_on_columns) routes.push_back(route(col, len - 1, 0, 1, k.h, "[\"RAMP\"]", "[\"E\"]"));
  else routes.push_back(route(col, 0, len - 1, k.w, 1, "[\"RAMP\"]", "[\"S\"]"));
}

// The loss chain along the last layer's chain ends (its N axis), towards S or E, colors cl0/cl1.
void loss_routes(const Compiled& c, json& routes) {
  const DenseKernel& k = c.kernels.back();
  const int64_t len = k.k_on_columns ? k.h : k.w;  // chain ends along the N axis
  const char* fwd = k.k_on_columns ? "S" : "E";
  const char* back = k.k_on_columns ? "N" : "W";
  for (int64_t q = 0; q < len; ++q) {
    std::vector<std::pair<int, std::pair<std::string, std::string>>> at;
    if (q + 1 < len) at.push_back({q % 2 == 0 ? c.cl0 : c.cl1, {"[\"RAMP\"]", "[\"" + std::string(fwd) + "\"]"}});
    if (q > 0) at.push_back({(q - 1) % 2 == 0 ? c.cl0 : c.cl1, {"[\"" + std::string(back) + "\"]", "[\"RAMP\"]"}});
    for (const auto& [col, rt] : at) {
      if (k.k_on_columns) routes.push_back(route(col, k.w - 1, q, 1, 1, rt.first, rt.second));
      else routes.push_back(route(col, q, k.h - 1, 1, 1, rt.first, rt.second));
    }
  }
}

void train_params(const Compiled& c, json& params) {
  const DenseKernel& k = c.kernels.back();
  const std::string pn = k.k_on_columns ? "py" : "px", nl = k.k_on_columns ? "height" : "width";
  params["lfirst"] = pn + " == 0";
  params["llast"] = pn + " == " + nl + " - 1";
  const std::string d = "(" + std::to_string(c.cl1) + " - " + std::to_string(c.cl0) + ")";
  params["lcout"] = std::to_string(c.cl0) + " + (" + pn + " % 2) * " + d;
  params["lcin"] = std::to_string(c.cl0) + " + ((" + pn + " + 1) % 2) * " + d;
}

std::string fnum(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  std::string s = b;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// The loss at the last layer's chain ends (after its forward `red`): d = y - t, dy = 2 d / (B N),
// the sum of d^2 over the PE's block, summed along the chain ends; the last one scales it by
// 1 / (B N) into `loss`. Then the layer's backward starts (bstart).
void loss_text(const Compiled& c, std::ostringstream& o) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t n = k.B * k.nb;
  const double inv = 1.0 / static_cast<double>(k.B * k.N);
  o << "# ---- loss (mean squared error) at the chain ends of kernel " << l << "\n";
  o << ".if $last" << L << "\n.data tgt f32 " << n << "   # the target block, placed by the host each step\n.data dd f32 " << n << "\n.data lacc f32 1\n";
  o << ".if $llast\n.data loss f32 1\n.dsd lossm mem1d loss\n.endif\n";
  o << ".dsd tgtm mem1d tgt\n.dsd ddm mem1d dd\n.dsd de mem1d dd len=1\n.dsd laccm mem1d lacc\n";
  o << ".if !$llast\n.dsd lto fabout f32 color=$lcout queue=1 len=1\n.endif\n";
  o << ".if !$lfirst\n.dsd lfrom fabin f32 color=$lcin queue=7 len=1\n.endif\n";
  o << ".task lossk local id=60\n  fsubs ddm, yall" << L << ", tgtm\n  fmuls dym" << L << ", ddm, " << fnum(2.0 * inv) << "\n  fmuls ddm, ddm, ddm\n";
  o << "  dsd_off de, 0\n  fmovs laccm, de\n  mov r14, 1\nlp:\n  sub r15, r14, " << n << "\n  bz r15, le\n  dsd_off de, r14\n  fadds laccm, laccm, de\n  add r14, r14, 1\n  jmp lp\nle:\n";
  o << ".if $lfirst\n.if !$llast\n  fmovs lto, laccm\n.endif\n.else\n.if $llast\n  fadds laccm, laccm, lfrom\n.else\n  fadds lto, laccm, lfrom\n.endif\n.endif\n";
  o << ".if $llast\n  fmuls lossm, laccm, " << fnum(inv) << "\n.endif\n  activate bstart" << L << "\n  ret\n.endif\n";
}

// exp(X) in place for X <= 0 (the PEs have no exp): clamp at -80, t = X / 16, a degree-12 Taylor
// polynomial of exp(t) by Horner into T, squared four times (exp(X) = exp(X/16)^16). Relative error
// at most 5e-6 for X in [-20, 0] (measured 4.1e-6: fp32 rounding, multiplied by 16 through the
// squarings; tests/unit/test_wafer_fabric.cpp); below -20 the
// result stays under 1e-8 (it is added to a sum >= 1).
}  // namespace

void exp_text(std::ostringstream& o, const std::string& X, const std::string& T) {
  o << "  fmaxs " << X << ", " << X << ", -80.0\n  fmuls " << X << ", " << X << ", 0.0625\n";
  o << "  fmuls " << T << ", " << X << ", " << fnum(1.0 / 12) << "\n  fadds " << T << ", " << T << ", 1.0\n";
  for (int k = 11; k >= 1; --k) {
    o << "  fmuls " << T << ", " << T << ", " << X << "\n";
    if (k > 1) o << "  fmuls " << T << ", " << T << ", " << fnum(1.0 / k) << "\n";
    o << "  fadds " << T << ", " << T << ", 1.0\n";
  }
  for (int k = 0; k < 4; ++k) o << "  fmuls " << T << ", " << T << ", " << T << "\n";
  o << "  fmovs " << X << ", " << T << "\n";
}

// R = 1 / S by Newton's iteration r = r (2 - s r) from r0 = 2 / (lo + hi), for S in [lo, hi]: the
// error (hi - lo) / (hi + lo) squares each time; 8 iterations.
int recip_iters(double lo, double hi) {
  // Newton's error squares each step from e0 = (hi - lo) / (hi + lo): enough steps for 1e-8, at least 8.
  const double e0 = (hi - lo) / (hi + lo);
  return e0 <= 0 ? 8 : std::max(8, static_cast<int>(std::ceil(std::log2(std::log(1e-8) / std::log(e0)))));
}

void recip_text(std::ostringstream& o, const std::string& R, const std::string& S, const std::string& U, double lo, double hi) {
  o << "  fmovs " << R << ", " << fnum(2.0 / (lo + hi)) << "\n";
  for (int i = 0; i < recip_iters(lo, hi); ++i)
    o << "  fmuls " << U << ", " << S << ", " << R << "\n  fmuls " << U << ", " << U << ", -1.0\n  fadds " << U << ", " << U << ", 2.0\n  fmuls " << R << ", " << R
      << ", " << U << "\n";
}

void tanh_text(std::ostringstream& o, const std::string& Y, const std::string& T, const std::string& U, const std::string& V) {
  o << "  fnegs " << T << ", " << Y << "\n  fmaxs " << T << ", " << T << ", " << Y << "\n";  // |y|
  o << "  fmuls " << V << ", " << Y << ", 1.2676506e30\n  fnegs " << V << ", " << V << "\n  fmaxs " << V << ", " << V << ", -1.0\n  fnegs " << V << ", " << V
    << "\n  fmaxs " << V << ", " << V << ", -1.0\n";  // sign(y)
  o << "  fmuls " << T << ", " << T << ", -0.125\n  fmaxs " << T << ", " << T << ", -2.5\n";  // t = -|y| / 8 (|y| <= 20)
  o << "  fmuls " << U << ", " << T << ", " << fnum(1.0 / 12) << "\n  fadds " << U << ", " << U << ", 1.0\n";
  for (int k = 11; k >= 2; --k)
    o << "  fmuls " << U << ", " << U << ", " << T << "\n  fmuls " << U << ", " << U << ", " << fnum(1.0 / k) << "\n  fadds " << U << ", " << U << ", 1.0\n";
  o << "  fmuls " << U << ", " << U << ", " << T << "\n";  // m = expm1(t)
  for (int k = 0; k < 4; ++k) o << "  fadds " << T << ", " << U << ", 2.0\n  fmuls " << U << ", " << U << ", " << T << "\n";  // m = expm1(-2|y|)
  o << "  fadds " << T << ", " << U << ", 2.0\n  fmuls " << U << ", " << U << ", " << V << "\n  fmuls " << U << ", " << U << ", -1.0\n";
  recip_text(o, Y, T, V, 1.0, 2.0);
  o << "  fmuls " << Y << ", " << Y << ", " << U << "\n";
}

void gelu_text(std::ostringstream& o, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W) {
  constexpr double p = 0.3275911, zmax = 6.0;  // Abramowitz and Stegun 7.1.26
  o << "  fnegs " << T << ", " << Y << "\n  fmaxs " << T << ", " << T << ", " << Y << "\n  fmuls " << T << ", " << T << ", " << fnum(std::sqrt(0.5)) << "\n";
  o << "  fnegs " << T << ", " << T << "\n  fmaxs " << T << ", " << T << ", " << fnum(-zmax) << "\n  fnegs " << T << ", " << T << "\n";  // z = min(|y| / sqrt 2, 6)
  o << "  fmacs " << U << ", 1.0, " << T << ", " << fnum(p) << "\n";                                                                 // 1 + p z
  recip_text(o, V, U, W, 1.0, 1.0 + p * zmax);                                                                                      // t
  o << "  fmuls " << U << ", " << V << ", 1.061405429\n";
  for (const char* a : {"-1.453152027", "1.421413741", "-0.284496736", "0.254829592"})
    o << "  fadds " << U << ", " << U << ", " << a << "\n  fmuls " << U << ", " << U << ", " << V << "\n";                         // t (a1 + t (a2 + ...))
  o << "  fmuls " << W << ", " << T << ", " << T << "\n  fnegs " << W << ", " << W << "\n";
  exp_text(o, W, V);                                                                                                                 // exp(-z^2)
  o << "  fmuls " << U << ", " << U << ", " << W << "\n";                                                                             // 1 - erf(z)
  o << "  fmuls " << T << ", " << Y << ", 1.2676506e30\n  fmaxs " << T << ", " << T << ", -1.0\n  fnegs " << T << ", " << T << "\n  fmaxs " << T << ", "
    << T << ", -1.0\n  fnegs " << T << ", " << T << "\n";                                                                          // sign(y)
  o << "  fnegs " << U << ", " << U << "\n  fadds " << U << ", " << U << ", 1.0\n";                                                // erf(z)
  o << "  fmuls " << U << ", " << U << ", " << T << "\n  fadds " << U << ", " << U << ", 1.0\n  fmuls " << Y << ", " << Y << ", " << U << "\n  fmuls " << Y
    << ", " << Y << ", 0.5\n";
}

void rsqrt_text(std::ostringstream& o, const std::string& R, const std::string& V, const std::string& T) {
  o << "  fmovs " << R << ", 0.01\n";
  for (int i = 0; i < kRsqrtIters; ++i)
    o << "  fmuls " << T << ", " << R << ", " << R << "\n  fmuls " << T << ", " << T << ", " << V << "\n  fmacs " << T << ", 1.5, " << T << ", -0.5\n  fmuls " << R << ", "
      << R << ", " << T << "\n";
}

namespace {

// Softmax cross-entropy at the last layer's chain end (every class on this PE; docs/wafer-compiler.md):
// per sample m = max z, e = exp(z - m), s = sum e, p = e / s; dy = (p - t) / B; the loss
// sum_c t (m + ln s - z) / B, ln s by Newton's iteration y += s exp(-y) - 1 from 2 (s - 1) / (s + 1).
void xent_text(const Compiled& c, std::ostringstream& o) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t B = k.B, N = k.N, nb = k.nb;
  o << "# ---- loss (softmax cross-entropy) at the chain end of kernel " << l << "\n";
  o << ".if $last" << L << "\n.data tgt f32 " << B * nb << "   # the target block (one-hot or soft), placed by the host each step\n";
  o << ".data xe f32 " << B * N << "\n.data xt f32 " << B * N << "\n.data xm f32 " << B << "\n.data xs f32 " << B << "\n.data xr f32 " << B << "\n.data xu f32 " << B
    << "\n.data xy f32 " << B << "\n.data xv f32 " << B << "\n.data xw f32 " << B << "\n.data lacc f32 1\n.data loss f32 1\n";
  o << ".dsd xem mem1d xe\n.dsd xtm mem1d xt\n.dsd xmm mem1d xm\n.dsd xsm mem1d xs\n.dsd xrm mem1d xr\n.dsd xum mem1d xu\n.dsd xym mem1d xy\n.dsd xvm mem1d xv\n.dsd xwm mem1d xw\n";
  o << ".dsd laccm mem1d lacc\n.dsd lossm mem1d loss\n.dsd de mem1d xe len=1\n";
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    o << ".dsd z" << C << " mem1d y" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd t" << C << " mem1d tgt off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd g" << C << " mem1d dy" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd e" << C << " mem1d xe off=" << cc << " len=" << B << " stride=" << N << "\n";
  }
  o << ".task lossk local id=60\n";
  o << "  fmovs xmm, z0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fmaxs xmm, xmm, z" << cc << "\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs e" << cc << ", z" << cc << ", xmm\n";
  exp_text(o, "xem", "xtm");
  o << "  fmovs xsm, e0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fadds xsm, xsm, e" << cc << "\n";
  recip_text(o, "xrm", "xsm", "xum", 1.0, static_cast<double>(N));
  // dy = (e r - t) / B (padding columns stay 0)
  o << "  fmovs dym" << L << ", 0.0\n";
  for (int64_t cc = 0; cc < N; ++cc)
    o << "  fmuls g" << cc << ", e" << cc << ", xrm\n  fsubs g" << cc << ", g" << cc << ", t" << cc << "\n  fmuls g" << cc << ", g" << cc << ", " << fnum(1.0 / static_cast<double>(B)) << "\n";
  // ln s: y0 = 2 (s - 1) / (s + 1), then y += s exp(-y) - 1, five times
  o << "  fadds xvm, xsm, 1.0\n";
  recip_text(o, "xym", "xvm", "xum", 2.0, static_cast<double>(N) + 1.0);
  o << "  fadds xvm, xsm, -1.0\n  fmuls xym, xym, xvm\n  fmuls xym, xym, 2.0\n";
  for (int i = 0; i < 5; ++i) {
    o << "  fmuls xwm, xym, -1.0\n";
    // exp of a B-long vector: its own temporaries (xv as T)
    exp_text(o, "xwm", "xvm");
    o << "  fmuls xwm, xwm, xsm\n  fadds xym, xym, xwm\n  fadds xym, xym, -1.0\n";
  }
  // per (b, c): t (m + ln s - z), summed
  o << "  fadds xym, xym, xmm\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs e" << cc << ", xym, z" << cc << "\n  fmuls e" << cc << ", e" << cc << ", t" << cc << "\n";
  o << "  dsd_off de, 0\n  fmovs laccm, de\n  mov r14, 1\nlp:\n  sub r15, r14, " << B * N << "\n  bz r15, le\n  dsd_off de, r14\n  fadds laccm, laccm, de\n  add r14, r14, 1\n  jmp lp\nle:\n";
  o << "  fmuls lossm, laccm, " << fnum(1.0 / static_cast<double>(B)) << "\n  activate bstart" << L << "\n  ret\n.endif\n";
}

// The backward pass of kernel l on every PE. dy[b, i] arrives as wavelets (color cb, from the
// chain end): the weight gradient's column i += x[b, :] dy[b, i] (x as saved in the forward pass)
// and, from layer 1 on, the input gradient's row b += W[:, i] dy[b, i]. After the last wavelet the
// input gradient is reduced along the x lines (the previous layer's chains, so it ends at that
// layer's chain ends) and the weight-gradient block goes out along the chain (own block first, then
// the blocks from behind) to the gradient port. Both reuse the forward chains' colors, so they use
// the same queues (a color arrives in one input queue of a PE).
void backward_text(const Compiled& c, size_t l, double lr, std::ostringstream& o) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), P = l ? std::to_string(l - 1) : "";
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const std::string wbuf = l % 2 ? "Wb" : "Wa";
  const int rI = 6 + 3 * static_cast<int>(l), rB = rI + 1, rT = rI + 2;
  const int li = static_cast<int>(l);
  o << "# ---- backward of kernel " << l << ": " << k.name << "\n";
  o << ".data gW" << L << " f32 " << kb * nb << "   # the weight gradient block (as W's block)\n";
  if (l) o << ".data dx" << L << " f32 " << B * kb << "   # the input gradient (partial over this PE's columns)\n";
  o << ".dsd gcol" << L << " mem1d gW" << L << " len=" << kb << " stride=" << nb << "\n.dsd xrow" << L << " mem1d xsave" << L << " len=" << kb << "\n";
  o << ".dsd gWm" << L << " mem1d gW" << L << "\n";
  if (l) {
    o << ".dsd wcolT" << L << " mem1d " << wbuf << " len=" << kb << " stride=" << nb << "\n.dsd dxrow" << L << " mem1d dx" << L << " len=" << kb << "\n";
    o << ".dsd dxm" << L << " mem1d dx" << L << "\n";
    o << ".if !$first" << P << "\n.dsd dxfrom" << L << " fabin f32 color=$cin" << P << " queue=" << chain_queue(c, l - 1) << " len=" << B * kb << "\n.endif\n";
    o << ".if !$last" << P << "\n.dsd dxto" << L << " fabout f32 color=$cout" << P << " queue=2 len=" << B * kb << "\n.endif\n";
  }
  o << ".dsd gto" << L << " fabout f32 color=$cout" << L << " queue=2 len=" << kb * nb << "\n";
  o << ".if $pre" << L << "\n.dsd gto2" << L << " fabout f32 color=$cout" << L << " queue=2 len=$npre" << L << "\n.dsd gfrom" << L << " fabin f32 color=$cin" << L
    << " queue=" << chain_queue(c, l) << " len=$npre" << L << "\n.endif\n";
  // Chain ends: dy, the bias update, the multicast.
  o << ".if $last" << L << "\n.data dy" << L << " f32 " << B * nb << "\n.data db" << L << " f32 " << nb << "\n";
  if (k.relu || k.tanh) o << ".data mk" << L << " f32 " << B * nb << "\n.dsd mkm" << L << " mem1d mk" << L << "\n";
  o << ".dsd dym" << L << " mem1d dy" << L << "\n.dsd dyrow" << L << " mem1d dy" << L << " len=" << nb << "\n.dsd dbm" << L << " mem1d db" << L << "\n";
  o << ".dsd biasm" << L << " mem1d bias" << L << "\n.dsd dyout" << L << " fabout f32 color=" << k.cb << " queue=3 len=" << B * nb << "\n";
  if (c.momentum != 0) o << ".data vb" << L << " f32 " << nb << "   # the bias velocity (momentum), kept from step to step\n.dsd vbm" << L << " mem1d vb" << L << "\n";
  o << ".task bstart" << L << " local id=" << 56 + li << "   # dy complete: ReLU mask, bias update, multicast\n";
  if (k.relu)  // the ReLU's derivative [y > 0] as -max(-y 2^100, -1): 1 for y >= 2^-100, 0 for y = 0 (y = relu(z) >= 0)
    o << "  fmuls mkm" << L << ", yall" << L << ", -1.2676506e30\n  fmaxs mkm" << L << ", mkm" << L << ", -1.0\n  fnegs mkm" << L << ", mkm" << L
      << "\n  fmuls dym" << L << ", dym" << L << ", mkm" << L << "\n";
  if (k.tanh)  // the derivative 1 - y^2
    o << "  fmuls mkm" << L << ", yall" << L << ", yall" << L << "\n  fmuls mkm" << L << ", mkm" << L << ", -1.0\n  fadds mkm" << L << ", mkm" << L
      << ", 1.0\n  fmuls dym" << L << ", dym" << L << ", mkm" << L << "\n";
  o << "  dsd_off dyrow" << L << ", 0\n  fmovs dbm" << L << ", dyrow" << L << "\n  mov r14, 1\nbl" << L << ":\n  sub r15, r14, " << B << "\n  bz r15, bd" << L
    << "\n  mul r15, r14, " << nb << "\n  dsd_off dyrow" << L << ", r15\n  fadds dbm" << L << ", dbm" << L << ", dyrow" << L << "\n  add r14, r14, 1\n  jmp bl" << L
    << "\nbd" << L << ":\n";
  if (c.momentum != 0)  // v = mu v + db; b -= lr v (torch's SGD with momentum)
    o << "  fmuls vbm" << L << ", vbm" << L << ", " << fnum(c.momentum) << "\n  fadds vbm" << L << ", vbm" << L << ", dbm" << L << "\n  fmacs biasm" << L << ", biasm" << L
      << ", vbm" << L << ", " << fnum(-lr) << "\n";
  else
    o << "  fmacs biasm" << L << ", biasm" << L << ", dbm" << L << ", " << fnum(-lr) << "\n";
  o << "  fmovs dyout" << L << ", dym" << L << " async\n  ret\n.endif\n";
  // Every PE: one task per dy wavelet.
  const bool last_layer = l + 1 == c.kernels.size();
  o << ".task bdy" << L << " data id=" << 40 + li << " color=" << k.cb << " queue=4" << (last_layer ? "" : " blocked") << "   # wv = dy[b, i]\n";
  o << "  mul r" << rT << ", r" << rB << ", " << kb << "\n  dsd_off xrow" << L << ", r" << rT << "\n  dsd_off gcol" << L << ", r" << rI << "\n";
  o << "  bnz r" << rB << ", ga" << L << "\n  fmuls gcol" << L << ", xrow" << L << ", wv\n  jmp gb" << L << "\nga" << L << ":\n  fmacs gcol" << L << ", gcol" << L
    << ", xrow" << L << ", wv\ngb" << L << ":\n";
  if (l) {
    o << "  dsd_off dxrow" << L << ", r" << rT << "\n  dsd_off wcolT" << L << ", r" << rI << "\n  bnz r" << rI << ", da" << L << "\n  fmuls dxrow" << L << ", wcolT" << L
      << ", wv\n  jmp dc" << L << "\nda" << L << ":\n  fmacs dxrow" << L << ", dxrow" << L << ", wcolT" << L << ", wv\ndc" << L << ":\n";
  }
  o << "  add r" << rI << ", r" << rI << ", 1\n  sub r" << rT << ", r" << rI << ", " << nb << "\n  bnz r" << rT << ", bx" << L << "\n  mov r" << rI << ", 0\n  add r" << rB
    << ", r" << rB << ", 1\n  sub r" << rT << ", r" << rB << ", " << B << "\n  bnz r" << rT << ", bx" << L << "\n  mov r" << rB << ", 0\n  activate bdone" << L << "\nbx" << L
    << ":\n  ret\n";
  // All of dy seen: the input gradient's reduce (synchronous), then the weight gradient out.
  o << ".task bdone" << L << " local id=" << 44 + li << "\n";
  if (l) {
    o << ".if $first" << P << "\n.if $last" << P << "\n  fmovs dym" << P << ", dxm" << L << "\n.else\n  fmovs dxto" << L << ", dxm" << L << "\n.endif\n.else\n.if $last" << P
      << "\n  fadds dym" << P << ", dxm" << L << ", dxfrom" << L << "\n.else\n  fadds dxto" << L << ", dxm" << L << ", dxfrom" << L << "\n.endif\n.endif\n";
    o << ".if $last" << P << "\n  activate bstart" << P << "\n.endif\n";
  }
  o << "  fmovs gto" << L << ", gWm" << L << " async activate=g2" << L << "\n  ret\n";
  o << ".task g2" << L << " local id=" << 48 + li << "\n.if $pre" << L << "\n  fmovs gto2" << L << ", gfrom" << L << " async activate=g3" << L << "\n.else\n  activate g3" << L
    << "\n.endif\n  ret\n";
  o << ".task g3" << L << " local id=" << 52 + li << "   # the gradient block has left\n";
  if (l) o << "  unblock bdy" << P << "\n  ret\n";
  else o << "  halt\n";
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Compiled compile(const graph::Graph& g, const WaferConfig& cfg, const MappingOptions& opt) {
  Compiled c;
  c.mode = opt.mode;
  c.clock_hz = cfg.clock_hz;
  c.kernels = match_layers(g, c.input, c.output);
  if (opt.mode == MapMode::pipelined) fuse_qkv(c.kernels);
  c.input_shape = g.value(c.input).shape;
  c.output_shape = g.value(c.output).shape;
  c.kernels.front().input_layer = true;
  const int64_t nker = static_cast<int64_t>(c.kernels.size());
  if (nker > 8) throw InputError(g.source, std::to_string(nker) + " dense layers; this build maps at most 8 (task ids)", kOpsHint);
  c.readers.assign(c.kernels.size() + 1, {});
  if (c.input_shape.size() == 4)
    for (size_t l = 1; l < c.kernels.size(); ++l)
      if (c.kernels[l].src < 0) throw InputError("kernel '" + c.kernels[l].name + "'", "a feature-map input read by several kernels is not mapped", kOpsHint);
  for (size_t l = 0; l < c.kernels.size(); ++l) c.readers[static_cast<size_t>(c.kernels[l].src + 1)].push_back(l);
  {
    const int nk5 = std::max<int>(5, static_cast<int>(nker));
    int next_id = 8 * nk5;  // after the send (7n) and the gathers (7n + reader, reader < n)
    c.extra_send_id.assign(c.readers.size(), 0);
    for (size_t p = 0; p < c.readers.size(); ++p) {
      c.extra_send_id[p] = next_id;
      next_id += std::max<int>(0, static_cast<int>(c.readers[p].size()) - 1);
    }
    if (next_id > static_cast<int>(cfg.task_count))
      throw InputError(g.source, "the kernels' sends need task ids up to " + std::to_string(next_id - 1) + "; a PE has ids 0.." + std::to_string(cfg.task_count - 1), kOpsHint);
  }
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (opt.mode == MapMode::pipelined && k.src != static_cast<int64_t>(l) - 1)
      throw InputError("/mapping/mode", "kernel '" + k.name + "' reads " + (k.src < 0 ? std::string("the graph input") : "kernel '" + c.kernels[static_cast<size_t>(k.src)].name + "'") +
                                            ", not the kernel before it: pipelined mode maps chains of layers",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"} for branching graphs (every kernel on one rectangle)");
    if (c.readers[l + 1].size() > 1 && (k.spatial() || k.pkh))  // one gather per holder: a feature map has one reader
      throw InputError("kernel '" + k.name + "'", "a convolution's output read by several kernels is not mapped (" + std::to_string(c.readers[l + 1].size()) + " read it)",
                       kOpsHint);
    if (k.attn && c.fp16)
      throw InputError("/precision/compute", "kernel '" + k.name + "': attention on the wafer is mapped in fp32 in this build", "use precision.compute fp32");
  }
  for (size_t l = 0; l + 1 < c.kernels.size(); ++l)
    if (c.kernels[l].softmax) throw InputError("kernel '" + c.kernels[l].name + "'", "Softmax is mapped only after the last dense layer", kOpsHint);
  if (c.kernels.back().softmax && c.kernels.back().N > 16)
    throw InputError("kernel '" + c.kernels.back().name + "'", "Softmax on the wafer takes up to 16 outputs per sample (its Newton reciprocal's range); this one has " +
                                                             std::to_string(c.kernels.back().N), kOpsHint);
  if (c.kernels.back().softmax && opt.training)
    throw InputError("kernel '" + c.kernels.back().name + "'", "a model ending in Softmax is not trained on the wafer",
                     "end the model with the logits and use \"loss\": \"softmax_cross_entropy\"");
  const int64_t area = cfg.data_area_bytes();
  c.fp16 = opt.fp16;
  const int64_t wbytes_pe = c.fp16 ? 2 : 4;
  c.training = opt.training;
  c.loss = opt.loss;
  c.momentum = opt.momentum;
  if (c.training) {
    const char* hint = "training on the wafer maps up to three dense layers (Gemm/MatMul, bias, ReLU or Tanh) with weight streaming in fp32, MSE or softmax cross-entropy (docs/wafer-compiler.md); run it on target.kind neuroncore or reference";
    if (opt.mode != MapMode::weight_streaming) throw InputError("/mapping/mode", "training on the wafer runs in weight_streaming mode (weights and their updates in MemoryX)", "set mapping.mode to weight_streaming");
    if (c.fp16) throw InputError("/precision/compute", "training on the wafer is compiled in fp32 in this build", hint);
    if (c.kernels.size() > 3)
      throw InputError(g.source, std::to_string(c.kernels.size()) +
                                     " dense layers: training maps at most 3 (the backward pass reads the weights of every layer but the first from the two buffers "
                                     "that hold the last two layers'; a fourth would need its weights streamed again)",
                       hint);
    for (const auto& k : c.kernels) {
      if (k.b_value == "*") throw InputError("kernel '" + k.name + "'", "two biases (Gemm's C and an Add) are not trained on the wafer", hint);
      if (k.xread != DenseKernel::XRead::rows) throw InputError("kernel '" + k.name + "'", "convolutions are not trained on the wafer in this build", hint);
      if (k.attn || k.src != static_cast<int64_t>(&k - c.kernels.data()) - 1)
        throw InputError("kernel '" + k.name + "'", "attention and branching graphs (a layer reading other than the layer before it) are not trained on the wafer in this build", hint);
    }
    if (opt.loss != "mse" && opt.loss != "softmax_cross_entropy") throw InputError("/training/loss", "the wafer computes mse or softmax_cross_entropy", hint);
  }

  if (opt.mode == MapMode::pipelined) {
    // Residuals: the graph input the host places on the kernel's chain ends; the input of the
    // kernel it reads passes through that kernel (pass_through); others have no place here.
    std::vector<size_t> passes;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      DenseKernel& k = c.kernels[l];
      if (k.residual < 0) continue;
      const DenseKernel& r = c.kernels[static_cast<size_t>(k.residual)];
      if (r.src < 0 && r.xread == DenseKernel::XRead::rows && !k.attn) {
        k.res_host = true;
      } else if (k.src == k.residual && k.N == r.K && r.xread == DenseKernel::XRead::rows && k.xread == DenseKernel::XRead::rows && !r.layernorm && !r.softmax &&
                 !r.attn && !r.pkh && r.residual < 0 && !k.relu && !k.tanh && !k.gelu && !k.attn && !k.softmax && !opt.fp16) {
        // (the identity rows add the input into the sum, before the bias: an activation of k would
        // then act on it, where the graph adds it after)
        passes.push_back(l);
      } else {
        const bool after = k.relu || k.tanh || k.gelu || k.attn || k.softmax;
        throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode maps a residual of the graph input, or of the input of the kernel it reads (x + W2 f(W1 x), fp32, added after the bias); this one adds the input of kernel '" + r.name + "'" +
                                              (after && k.src == k.residual ? " after an activation or attention" : opt.fp16 && k.src == k.residual ? " in fp16" : ""),
                         "use \"mapping\": {\"mode\": \"weight_streaming\"} (every kernel on one rectangle, held inputs on the PEs)");
      }
    }
    // The smallest block (most PEs, shortest per-PE work) whose staircase fits the fabric and whose
    // per-PE data fits the SRAM data area; a given block is taken as is.
    std::vector<int64_t> cands;
    if (opt.block > 0) cands = {opt.block};
    else
      for (int64_t b = 1; b <= 4096; b *= 2) cands.push_back(b);
    std::string why;
    bool placed = false;
    for (const int64_t b : cands) {
      std::vector<DenseKernel> ks = c.kernels;
      int64_t bad_dh = 0;  // the attention takes whole heads, or whole fractions of one, per chain end
      for (auto& k : ks)
        if (k.qkv) {
          if (b % k.dh != 0 && k.dh % b != 0) bad_dh = k.dh;
          qkv_weights(k, b);
        }
      if (bad_dh) {
        if (opt.block > 0)
          throw InputError("/mapping/wafer_block", "block " + std::to_string(b) + ": the attention's heads of " + std::to_string(bad_dh) + " features do not split into blocks of " + std::to_string(b) +
                                                       " (a chain end takes whole heads, or whole fractions of one)",
                           "give a block that divides the head size or is a multiple of it, or leave mapping.wafer_block out");
        continue;  // (the search goes on to the next power of two)
      }
      for (const size_t l : passes) pass_through(ks, l, b);
      const auto [W, H] = place_pipelined(ks, b);
      if (ks.back().softmax && ks.back().nblocks() != 1) {
        if (why.empty()) why = "block " + std::to_string(b) + ": the Softmax's " + std::to_string(ks.back().N) + " outputs would span several PEs";
        continue;
      }
      int64_t worst = 0;
      size_t wk = 0;
      for (size_t l = 0; l < ks.size(); ++l)
        if (pe_bytes(ks[l], true, wbytes_pe) > worst) worst = pe_bytes(ks[l], true, wbytes_pe), wk = l;
      if (W > cfg.fabric_width || H > cfg.fabric_height) {
        why = "block " + std::to_string(b) + ": the layers' rectangles span " + std::to_string(W) + " x " + std::to_string(H) + " PEs, the fabric is " +
              std::to_string(cfg.fabric_width) + " x " + std::to_string(cfg.fabric_height);
        continue;
      }
      if (worst > area) {
        if (why.rfind("block", 0) == 0 && why.find("SRAM") != std::string::npos) continue;  // keep the first such reason (smallest block)
        why = "block " + std::to_string(b) + ": a PE of kernel '" + ks[wk].name + "' needs " + std::to_string(worst) + " bytes of SRAM, the data area is " +
              std::to_string(area);
        continue;
      }
      c.kernels = std::move(ks);
      c.fabric_width = W;
      c.fabric_height = H;
      c.sram_high_water = worst;
      placed = true;
      break;
    }
    if (!placed) {
      int64_t wbytes = 0;
      for (const auto& k : c.kernels) wbytes += k.K * k.N * (k.qkv ? 3 : 1) * 4;  // (a fused kernel holds V's projection until its block is chosen)
      const int64_t sram = cfg.fabric_width * cfg.fabric_height * area;
      const std::string detail = wbytes > sram ? "more than the " + std::to_string(sram) + " bytes of SRAM data area of all " +
                                                     std::to_string(cfg.fabric_width * cfg.fabric_height) + " PEs"
                                               : why;
      throw InputError("/mapping/mode",
                       "the weights (" + std::to_string(wbytes) + " bytes fp32) do not fit on the wafer in pipelined mode: " + detail,
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}: weights then stream from MemoryX layer by layer, or give a larger fabric");
    }
  } else {
    // One rectangle for every layer: as large as useful (blocks of at least kMinBlock per axis)
    // within the fabric, unless given.
    constexpr int64_t kMinBlock = 16;
    int64_t wneed = 1, hneed = 1;
    for (size_t l = 0; l < c.kernels.size(); ++l)  // the orientations (place_streaming's rule)
      c.kernels[l].k_on_columns = c.kernels[l].src < 0 || !c.kernels[static_cast<size_t>(c.kernels[l].src)].k_on_columns;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      const int64_t kd = k.xread == DenseKernel::XRead::rows ? k.K : k.cin;  // conv / flatten: channel blocks along K
      const int64_t on_cols = k.k_on_columns ? kd : k.N, on_rows = k.k_on_columns ? k.N : kd;
      wneed = std::max(wneed, cdiv(on_cols, kMinBlock));
      hneed = std::max(hneed, cdiv(on_rows, kMinBlock));
    }
    // Not given: start from the weights' need and double both sides (within the fabric) while a
    // PE's data does not fit -- activations of many rows need more PEs than the weights do.
    const bool auto_rect = opt.rect_width <= 0 && opt.rect_height <= 0;
    int64_t w = 0, h = 0;
    for (int64_t grow = 1;; grow *= 2) {
    w = opt.rect_width > 0 ? opt.rect_width : std::min(cfg.fabric_width, wneed * grow);
    h = opt.rect_height > 0 ? opt.rect_height : std::min(cfg.fabric_height, hneed * grow);
    for (const auto& k : c.kernels)  // attention: whole heads per chain-end PE (nb a multiple of dh)
      if (k.attn) {
        int64_t& len = k.k_on_columns ? h : w;
        const bool given = k.k_on_columns ? opt.rect_height > 0 : opt.rect_width > 0;
        auto fits = [&](int64_t n) { const int64_t b = cdiv(k.N, n); return b % k.dh == 0 || k.dh % b == 0; };
        while (!given && len > 1 && !fits(len)) --len;
        if (!fits(len))
          throw InputError("/mapping/wafer_rect", "the attention of kernel '" + k.name + "' needs whole heads, or whole fractions of one, on each chain-end PE: " + std::to_string(k.N) +
                                                      " features over " + std::to_string(len) + " PEs is " + std::to_string(cdiv(k.N, len)) + " per PE, heads have " + std::to_string(k.dh),
                           std::string("give a rectangle whose ") + (k.k_on_columns ? "height" : "width") + " makes the features per PE a multiple or a divisor of the head size");
      }
    if (w > cfg.fabric_width || h > cfg.fabric_height)
      throw InputError("/mapping/wafer_rect", "the rectangle " + std::to_string(w) + " x " + std::to_string(h) + " is larger than the fabric " +
                                                 std::to_string(cfg.fabric_width) + " x " + std::to_string(cfg.fabric_height));
    place_streaming(c.kernels, w, h);
    if (c.kernels.back().softmax && c.kernels.back().nblocks() != 1) {
      const DenseKernel& k = c.kernels.back();
      throw InputError("/mapping/wafer_rect", "the Softmax's " + std::to_string(k.N) + " outputs per sample must lie on one PE, but the " + std::to_string(w) + " x " +
                                                  std::to_string(h) + " rectangle splits them into " + std::to_string(k.nblocks()) + " blocks",
                       std::string("give a rectangle one PE ") + (k.k_on_columns ? "high" : "wide") + " along the last layer's output axis");
    }
    if (opt.training && opt.loss == "softmax_cross_entropy" && c.kernels.back().N > 16)
      throw InputError("/training/loss", "softmax cross-entropy on the wafer takes up to 16 classes (its Newton reciprocal and logarithm are accurate over sums in [1, 16]); the model has " +
                                             std::to_string(c.kernels.back().N),
                       "run it on target.kind neuroncore or reference");
    if (opt.training && opt.loss == "softmax_cross_entropy" && (c.kernels.back().k_on_columns ? h : w) != 1) {
      const DenseKernel& k = c.kernels.back();
      throw InputError("/mapping/wafer_rect", "softmax cross-entropy runs on one PE per sample row: the last layer's " + std::to_string(k.N) + " classes must lie on one chain-end PE, but the " +
                                                  std::to_string(w) + " x " + std::to_string(h) + " rectangle splits them into " + std::to_string(k.nblocks()) + " blocks",
                       std::string("give a rectangle one PE ") + (k.k_on_columns ? "high" : "wide") + " along the last layer's output axis, e.g. \"wafer_rect\": [" +
                           (k.k_on_columns ? std::to_string(w) + ", 1" : "1, " + std::to_string(h)) + "]");
    }
    int64_t wa = 0, wb = 0, data = 16;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      (l % 2 ? wb : wa) = std::max(l % 2 ? wb : wa, k.kb * k.nb * wbytes_pe);
      data += pe_bytes(k, false, wbytes_pe);
    }
    if (c.training)
      for (size_t l = 0; l < c.kernels.size(); ++l) {
        const DenseKernel& k = c.kernels[l];
        data += (k.B * k.kb * (l ? 2 : 1) + k.kb * k.nb) * 4;  // saved x, weight gradient, input gradient
        data += (k.B * k.nb * (k.relu || k.tanh ? 2 : 1) + k.nb) * 4;  // chain ends: dy, mask, bias gradient
        if (opt.momentum != 0) data += k.nb * 4;                       // chain ends: the bias velocity
        if (l + 1 == c.kernels.size())
          data += (opt.loss == "softmax_cross_entropy" ? k.B * k.nb + 2 * k.B * k.N + 7 * k.B + 2 : 2 * k.B * k.nb + 2) * 4;  // target, work arrays, loss
      }
    c.sram_high_water = data + wa + wb;
    if (c.sram_high_water > area && auto_rect && (wneed * grow < cfg.fabric_width || hneed * grow < cfg.fabric_height)) continue;
    if (c.sram_high_water > area) {
      size_t big = 0;
      for (size_t l = 0; l < c.kernels.size(); ++l)
        if (c.kernels[l].kb * c.kernels[l].nb > c.kernels[big].kb * c.kernels[big].nb) big = l;
      throw InputError("/mapping/mode",
                       "a PE needs " + std::to_string(c.sram_high_water) + " bytes of SRAM on a " + std::to_string(w) + " x " + std::to_string(h) +
                           " rectangle (kernel '" + c.kernels[big].name + "' has " + std::to_string(c.kernels[big].kb) + " x " +
                           std::to_string(c.kernels[big].nb) + " weight blocks); the data area is " + std::to_string(area),
                       "give a larger rectangle (mapping.wafer_rect or target.params fabric.width/height) or a smaller batch");
    }
    break;
    }
    c.fabric_width = w;
    c.fabric_height = h;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      DenseKernel& k = c.kernels[l];
      k.mx_tensor = "W" + std::to_string(l) + "." + k.name;
      // Inference: one port per orientation (the kernels share its color); training: one per layer.
      k.port = c.training ? "weights" + std::to_string(l) : k.k_on_columns ? "weights_w" : "weights_n";
      k.lanes = k.k_on_columns ? k.h : k.w;
      k.lane_len = (k.k_on_columns ? k.w : k.h) * k.kb * k.nb;
    }
  }
  for (auto& k : c.kernels) conv_weights(k);
  for (const auto& k : c.kernels)
    if (k.attn) {
      const DenseKernel &q = c.kernels[static_cast<size_t>(k.attn_q)], &kk = c.kernels[static_cast<size_t>(k.attn_k)];
      if (q.k_on_columns != k.k_on_columns || kk.k_on_columns != k.k_on_columns || q.nb != k.nb || kk.nb != k.nb || q.B != k.B || kk.B != k.B || q.N != k.N || kk.N != k.N)
        throw InputError("kernel '" + k.name + "'", "the attention's Q, K and V must come out on the same PEs in the same blocks (dense layers of the same input and size)", kOpsHint);
    }
  // Residuals: the held input must lie on this kernel's chain ends in the same blocks.
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (k.residual < 0) continue;
    const DenseKernel& r = c.kernels[static_cast<size_t>(k.residual)];
    const std::string where = "kernel '" + k.name + "'";
    if (c.fp16) throw InputError("/precision/compute", "a residual Add is mapped in fp32 on the wafer in this build", "use precision.compute fp32");
    if (k.res_host) {  // the host places the graph input's blocks on the chain ends
      if (k.N != c.input_shape.back() || k.B != r.B)
        throw InputError(where, "the residual adds the graph input " + shape_str(c.input_shape) + " to " + std::to_string(k.B) + " x " + std::to_string(k.N) + " outputs", kOpsHint);
      continue;
    }
    if (r.k_on_columns == k.k_on_columns || r.kb != k.nb || r.B != k.B || r.xread != DenseKernel::XRead::rows)
      throw InputError(where, "the residual's input (kernel '" + r.name + "') does not lie on this kernel's chain ends in the same blocks (an even number of dense layers between them, or blocks " +
                                  std::to_string(r.kb) + " vs " + std::to_string(k.nb) + ")",
                       "a residual spans an odd number of dense layers after its input, e.g. x + W2 f(W1 x)");
  }
  if (c.training)
    for (const auto& k : c.kernels)
      if (k.gelu || k.layernorm || k.residual >= 0)
        throw InputError("kernel '" + k.name + "'", "GELU, LayerNorm and residuals are not trained on the wafer in this build",
                         "train it on target.kind neuroncore or reference");
  allocate_colors(c, cfg, opt);

  // Layout and programs.
  const bool ws = c.mode == MapMode::weight_streaming;
  json layout = {{"schema", "tessera.wafer-layout/1"}, {"fabric", {{"width", c.fabric_width}, {"height", c.fabric_height}}}, {"rects", json::array()}};
  if (ws) {
    json routes = json::array(), params = json::object(), ports = json::array();
    std::ostringstream o;
    int64_t wa = 0, wb = 0;
    for (size_t l = 0; l < c.kernels.size(); ++l) (l % 2 ? wb : wa) = std::max(l % 2 ? wb : wa, c.kernels[l].kb * c.kernels[l].nb);
    o << "# tessera wafer compiler, weight streaming: every layer on this " << c.fabric_width << " x " << c.fabric_height << " rectangle\n";
    const char* we = c.fp16 ? "f16" : "f32";
    o << ".data Wa " << we << " " << wa << "   # weight blocks of layers 0, 2, 4\n";
    if (wb) o << ".data Wb " << we << " " << wb << "   # layers 1, 3, 5\n";
    o << ".data junk " << we << " 1     # weights of other PEs land here\n";
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      x_routes(k, true, routes);
      if (c.training || first_of_orientation(c, l) == l) {  // shared colors (inference): one set of routes
        reduce_routes(k, routes);
        weight_routes(k, routes);
      }
      layer_params(k, l, true, c.training, params);
      if (k.layernorm) ln_routes(k, routes), ln_params(k, l, params);
      if (k.attn_group() > 1) attn_routes(k, routes), attn_params(k, l, params);
      layer_text(c, l, o);
      bool have = false;
      for (const auto& pj : ports) have = have || pj["name"] == k.port;
      if (!have)
        ports.push_back({{"name", k.port}, {"dir", "in"}, {"side", k.k_on_columns ? "W" : "N"}, {"x", 0}, {"y", 0}, {"length", k.lanes}, {"color", k.cw},
                         {"type", c.fp16 ? "f16" : "f32"}});
    }
    if (c.training) {
      for (size_t l = 0; l < c.kernels.size(); ++l) {
        DenseKernel& k = c.kernels[l];
        dy_routes(k, routes);
        grad_port_routes(k, routes);
        backward_text(c, l, opt.learning_rate, o);
        k.grad_port = "grads" + std::to_string(l);
        const int64_t len = k.k_on_columns ? k.w : k.h;
        ports.push_back({{"name", k.grad_port}, {"dir", "out"}, {"side", k.k_on_columns ? "E" : "S"}, {"x", k.k_on_columns ? k.w - 1 : 0},
                         {"y", k.k_on_columns ? 0 : k.h - 1}, {"length", k.lanes}, {"color", chain_color(k, len - 1)}, {"type", "f32"}});
      }
      loss_routes(c, routes);
      train_params(c, params);
      if (opt.loss == "softmax_cross_entropy") xent_text(c, o);
      else loss_text(c, o);
      c.loss_x = c.fabric_width - 1;
      c.loss_y = c.fabric_height - 1;
    }
    std::string decl;
    for (const auto& [name, v] : params.items()) decl += ".param " + name + "\n";
    c.programs["compiled/streaming.pe"] = decl + o.str();
    layout["rects"].push_back({{"name", "layers"}, {"x", 0}, {"y", 0}, {"width", c.fabric_width}, {"height", c.fabric_height},
                               {"program", "compiled/streaming.pe"}, {"params", params}, {"routes", routes}});
    layout["ports"] = ports;
  } else {
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      json routes = json::array(), params = json::object();
      x_routes(k, l == 0, routes);
      reduce_routes(k, routes);
      if (l + 1 < c.kernels.size()) handoff_routes(k, c.kernels[l + 1], routes);
      layer_params(k, l, false, false, params);
      if (k.act_split())  // the activation's blocks (pass-through columns after them)
        params["act" + std::to_string(l)] = std::string(k.k_on_columns ? "py" : "px") + " < " + std::to_string(k.act_blocks);
      if (k.layernorm) ln_routes(k, routes), ln_params(k, l, params);
      if (k.attn_group() > 1) attn_routes(k, routes), attn_params(k, l, params);
      std::ostringstream o;
      o << "# tessera wafer compiler, pipelined: kernel " << l << " on " << k.w << " x " << k.h << " PEs at (" << k.x0 << "," << k.y0 << ")\n";
      layer_text(c, l, o);
      const std::string file = "compiled/k" + std::to_string(l) + ".pe";
      std::string decl;
      for (const auto& [name, v] : params.items()) decl += ".param " + name + "\n";
      c.programs[file] = decl + o.str();
      layout["rects"].push_back(
          {{"name", "k" + std::to_string(l) + "." + k.name}, {"x", k.x0}, {"y", k.y0}, {"width", k.w}, {"height", k.h}, {"program", file}, {"params", params}, {"routes", routes}});
    }
  }
  c.layout_json = layout.dump(1);

  // Resident constants: W blocks (pipelined) and the bias replicated per sample at the chain ends.
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    for (int64_t py = 0; py < k.h; ++py)
      for (int64_t px = 0; px < k.w; ++px) {
        const int64_t kbk = k.k_on_columns ? px : py, nbk = k.k_on_columns ? py : px;
        const bool last = (k.k_on_columns ? px == k.w - 1 : py == k.h - 1);
        if (!ws) {
          HostArray a{k.x0 + px, k.y0 + py, "W" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.kb * k.nb), 0.0f)};
          for (int64_t j = 0; j < k.kb; ++j)
            for (int64_t i = 0; i < k.nb; ++i) {
              const int64_t kk = kbk * k.kb + j, nn = nbk * k.nb + i;
              if (kk < k.K && nn < k.N) a.values[static_cast<size_t>(j * k.nb + i)] = k.W[static_cast<size_t>(kk * k.N + nn)];
            }
          c.constants.push_back(std::move(a));
        }
        if (last) {
          HostArray a{k.x0 + px, k.y0 + py, "bias" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
          for (int64_t i = 0; i < k.nb; ++i)
            if (nbk * k.nb + i < k.N) a.values[static_cast<size_t>(i)] = k.bias[static_cast<size_t>(nbk * k.nb + i)];
          c.constants.push_back(std::move(a));
          if (k.layernorm) {  // the scale and bias of the block's features (0 beyond N), and the mask when padded
            HostArray ga{k.x0 + px, k.y0 + py, "lng" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            HostArray b2{k.x0 + px, k.y0 + py, "lnb" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            HostArray m{k.x0 + px, k.y0 + py, "lnk" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            for (int64_t i = 0; i < k.nb && nbk * k.nb + i < k.N; ++i) {
              ga.values[static_cast<size_t>(i)] = k.ln_gamma[static_cast<size_t>(nbk * k.nb + i)];
              b2.values[static_cast<size_t>(i)] = k.ln_beta[static_cast<size_t>(nbk * k.nb + i)];
              m.values[static_cast<size_t>(i)] = 1.0f;
            }
            c.constants.push_back(std::move(ga));
            c.constants.push_back(std::move(b2));
            if ((k.k_on_columns ? k.h : k.w) * k.nb > k.N) c.constants.push_back(std::move(m));
          }
        }
      }
  }
  estimate(c, cfg);
  return c;
}

std::vector<HostArray> Compiled::place_input(const Tensor& x) const {
  const DenseKernel& k = kernels.front();
  const auto v = x.to_f32();
  std::vector<HostArray> out;
  const int64_t lines = k.kblocks();
  for (int64_t i = 0; i < lines; ++i) {
    // The source PE of K block i: the start of its line in the flow direction.
    int64_t px = 0, py = 0;
    if (k.k_on_columns) px = i, py = k.x_flow == Dir::S ? 0 : k.h - 1;
    else py = i, px = k.x_flow == Dir::E ? 0 : k.w - 1;
    if (k.spatial()) {  // channels i cb .. i cb + cb - 1 as [sample, h, w, channel], inside a zero border
      const Shape& xs = input_shape;
      HostArray a{k.x0 + px, k.y0 + py, "xs0", std::vector<float>(static_cast<size_t>(k.xs_elems()), 0.0f)};
      for (int64_t s = 0; s < k.samples; ++s)
        for (int64_t c = 0, cc = i / k.kh_blocks() * k.cblk; c < k.cblk && cc + c < k.cin; ++c)
          for (int64_t y = 0; y < xs[2]; ++y)
            for (int64_t x2 = 0; x2 < xs[3]; ++x2)
              a.values[static_cast<size_t>(((s * k.ih + y + k.pad_t) * k.iw + x2 + k.pad_l) * k.cblk + c)] =
                  v[static_cast<size_t>(((s * k.cin + cc + c) * xs[2] + y) * xs[3] + x2)];
      out.push_back(std::move(a));
      continue;
    }
    HostArray a{k.x0 + px, k.y0 + py, "xs0", std::vector<float>(static_cast<size_t>(k.B * k.kb), 0.0f)};
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t j = 0; j < k.kb && i * k.kb + j < k.K; ++j) a.values[static_cast<size_t>(b * k.kb + j)] = v[static_cast<size_t>(b * k.K + i * k.kb + j)];
    out.push_back(std::move(a));
  }
  // Pipelined residuals of the graph input: its blocks on the adding kernel's chain ends too.
  for (size_t l = 0; l < kernels.size(); ++l) {
    const DenseKernel& r = kernels[l];
    if (!r.res_host) continue;
    for (int64_t i = 0; i < r.nblocks(); ++i) {
      const int64_t px = r.k_on_columns ? r.w - 1 : i, py = r.k_on_columns ? i : r.h - 1;
      HostArray a{r.x0 + px, r.y0 + py, "xr" + std::to_string(l), std::vector<float>(static_cast<size_t>(r.B * r.nb), 0.0f)};
      for (int64_t b = 0; b < r.B; ++b)
        for (int64_t j = 0; j < r.nb && i * r.nb + j < r.N; ++j) a.values[static_cast<size_t>(b * r.nb + j)] = v[static_cast<size_t>(b * r.N + i * r.nb + j)];
      out.push_back(std::move(a));
    }
  }
  return out;
}

std::vector<float> Compiled::memoryx_layout(const DenseKernel& k) const {
  // Lane `lane`, stream position t: block `pos` = t / (kb nb) along the line, then column-major
  // within the block. Stored position-major, lanes interleaved (the order SwarmX hands them out).
  std::vector<float> out(static_cast<size_t>(k.lanes * k.lane_len), 0.0f);
  const int64_t bs = k.kb * k.nb;
  for (int64_t t = 0; t < k.lane_len; ++t)
    for (int64_t lane = 0; lane < k.lanes; ++lane) {
      const int64_t pos = t / bs, e = t % bs, j = e / k.nb, i = e % k.nb;
      const int64_t kk = pos * k.kb + j, nn = lane * k.nb + i;  // pos runs along K, the lane along N
      if (kk < k.K && nn < k.N) out[static_cast<size_t>(t * k.lanes + lane)] = k.W[static_cast<size_t>(kk * k.N + nn)];
    }
  return out;
}

std::vector<HostArray> Compiled::place_target(const Tensor& t) const {
  const DenseKernel& k = kernels.back();
  const auto v = t.to_f32();
  std::vector<HostArray> out;
  for (int64_t i = 0; i < k.nblocks(); ++i) {
    const int64_t px = k.k_on_columns ? k.w - 1 : i, py = k.k_on_columns ? i : k.h - 1;
    HostArray a{k.x0 + px, k.y0 + py, "tgt", std::vector<float>(static_cast<size_t>(k.B * k.nb), 0.0f)};
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t n = 0; n < k.nb && i * k.nb + n < k.N; ++n) a.values[static_cast<size_t>(b * k.nb + n)] = v[static_cast<size_t>(b * k.N + i * k.nb + n)];
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<float> Compiled::gradient_layout(const DenseKernel& k, const std::vector<std::vector<float>>& lanes) const {
  // Lane `lane` carries the blocks of its chain from the chain end back: stream block q is the
  // block of position len - 1 - q; MemoryX holds block `pos` at stream positions pos * bs ...
  const int64_t bs = k.kb * k.nb, len = k.lane_len / bs;
  std::vector<float> out(static_cast<size_t>(k.lanes * k.lane_len), 0.0f);
  for (int64_t lane = 0; lane < k.lanes; ++lane)
    for (int64_t pos = 0; pos < len; ++pos)
      for (int64_t e = 0; e < bs; ++e)
        out[static_cast<size_t>((pos * bs + e) * k.lanes + lane)] = lanes[static_cast<size_t>(lane)][static_cast<size_t>((len - 1 - pos) * bs + e)];
  return out;
}

std::vector<float> Compiled::from_memoryx_layout(const DenseKernel& k, const std::vector<float>& mx) const {
  std::vector<float> w(static_cast<size_t>(k.K * k.N), 0.0f);
  const int64_t bs = k.kb * k.nb;
  for (int64_t t = 0; t < k.lane_len; ++t)
    for (int64_t lane = 0; lane < k.lanes; ++lane) {
      const int64_t pos = t / bs, e = t % bs, j = e / k.nb, i = e % k.nb;
      const int64_t kk = pos * k.kb + j, nn = lane * k.nb + i;
      if (kk < k.K && nn < k.N) w[static_cast<size_t>(kk * k.N + nn)] = mx[static_cast<size_t>(t * k.lanes + lane)];
    }
  return w;
}

std::string compile_report(const Compiled& c, const WaferConfig& cfg) {
  std::ostringstream o;
  char line[512];
  const double hz = cfg.clock_hz;
  const int64_t B = c.kernels.front().samples;
  double flops = 0;
  int64_t compute = 0, transfer = 0, active = 0;
  for (const auto& k : c.kernels) {
    flops += k.est.flops;
    compute += k.est.compute;
    transfer += std::max(k.est.transfer, k.est.stream);
    active = c.mode == MapMode::weight_streaming ? std::max(active, k.pes()) : active + k.pes();
  }
  const double total_s = static_cast<double>(c.predicted_cycles) / hz;
  o << "tessera wafer compile report (" << (c.mode == MapMode::pipelined ? "pipelined" : "weight streaming") << ", fabric " << c.fabric_width << " x "
    << c.fabric_height << " PEs of " << cfg.fabric_width << " x " << cfg.fabric_height << ", " << hz / 1e6 << " MHz, batch " << B << ")\n\n";
  o << "Estimated Overall Performance\n";
  const double fab = static_cast<double>(cfg.fabric_width * cfg.fabric_height);
  std::snprintf(line, sizeof line, "  %-28s %14.1f\n  %-28s %14.1f\n  %-28s %14.1f\n  %-28s %13.2f%%\n  %-28s %13.2f%%\n  %-28s %14lld cycles (%.3f us)\n",
                "Samples/s", B / total_s, "Compute Samples/s", compute ? B / (static_cast<double>(compute) / hz) : 0.0, "Transmission Samples/s",
                transfer ? B / (static_cast<double>(transfer) / hz) : 0.0, "Active PEs", 100.0 * static_cast<double>(active) / fab,
                "Compute Utilization", 100.0 * flops / 2 / (static_cast<double>(active) * static_cast<double>(c.predicted_cycles) * std::max<int64_t>(1, cfg.simd_fmacs)),
                "Predicted latency", static_cast<long long>(c.predicted_cycles), total_s * 1e6);
  o << line << "\nPer kernel\n";
  std::snprintf(line, sizeof line, "  %-3s %-22s %-16s %9s %9s %7s %12s %12s %12s %9s %8s %8s\n", "#", "kernel", "op", "PEs", "rect", "block", "start", "end",
                "cycles", "Samples/s", "Active%", "Util%");
  o << line;
  int64_t prev = 0;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const auto& k = c.kernels[l];
    const int64_t span = std::max<int64_t>(1, k.est.end - prev);
    const std::string rect = std::to_string(k.w) + "x" + std::to_string(k.h);
    const std::string blk = std::to_string(k.kb) + "x" + std::to_string(k.nb);
    std::snprintf(line, sizeof line, "  %-3zu %-22.22s %-16.16s %9lld %9s %7s %12lld %12lld %12lld %9.0f %7.2f%% %7.2f%%\n", l, k.name.c_str(), k.op.c_str(),
                  static_cast<long long>(k.pes()), rect.c_str(), blk.c_str(), static_cast<long long>(k.est.start), static_cast<long long>(k.est.end),
                  static_cast<long long>(span), B / (static_cast<double>(span) / hz), 100.0 * static_cast<double>(k.pes()) / fab,
                  100.0 * k.est.flops / 2 / (static_cast<double>(k.pes()) * static_cast<double>(span)));
    o << line;
    prev = k.est.end;
  }
  o << "\nPer kernel detail (cycles): compute = per-PE x tasks, transfer = reduce chain + bias/activation + hand-off";
  if (c.mode == MapMode::weight_streaming) o << ", stream = a line's weight stream, weights = last block in place";
  o << "\n";
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const auto& k = c.kernels[l];
    std::snprintf(line, sizeof line, "  %-3zu compute %10lld  transfer %8lld  stream %10lld  weights %10lld  flops %.3g  weight bytes %.3g\n", l,
                  static_cast<long long>(k.est.compute), static_cast<long long>(k.est.transfer), static_cast<long long>(k.est.stream),
                  static_cast<long long>(k.est.weights_ready), k.est.flops, k.est.weight_bytes);
    o << line;
  }
  o << "\nColors (" << c.colors_used << " used; Boost sequential vertex colouring of the route conflict graph)\n";
  for (const auto& [col, v] : c.color_streams) {
    o << "  " << col << ":";
    for (const auto& s : v) o << " [" << s << "]";
    o << "\n";
  }
  o << "\nSRAM: largest per-PE data " << c.sram_high_water << " bytes of " << cfg.data_area_bytes() << "\n";
  if (c.training) {
    const auto& e = c.train_est;
    std::snprintf(line, sizeof line,
                  "\nTraining step (%s, %s): forward to cycle %lld, loss to %lld, backward to %lld (the fabric's end), MemoryX updates done at %.3f us;\n"
                  "  step %.3f us predicted, %.1f training samples/s (the overall figures above are the fabric's part)\n",
                  c.loss.c_str(), c.momentum != 0 ? "SGD with momentum" : "SGD", static_cast<long long>(e.forward), static_cast<long long>(e.loss),
                  static_cast<long long>(e.backward), e.update_end_s * 1e6, c.predicted_s * 1e6, static_cast<double>(B) / c.predicted_s);
    o << line;
  }
  return o.str();
}

}  // namespace tessera::wafer
