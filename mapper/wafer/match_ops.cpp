// The kernels of single nodes for match_layers (internal.hpp): a Conv's geometry and grouped
// weights, a pool's window at a Conv's chain ends, the packed projections split per slice, and
// the Identity kernels (a pre-norm model's first LayerNorm, a Vision Transformer's class token).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/passes/rewrite.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// A Conv node's kernel (its input [batch, C, H, W] or [batch, C, L] of shape cs, its constant weight
// w): strides, pads, groups as a dense Conv with zero blocks; a padded reader of kernel csrc makes
// that producer hold its output inside the border.
DenseKernel conv_kernel(const graph::Node& n, const Shape& cs, const Tensor& wt, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported) {
  if (n.op == "ConvTranspose") return conv_transpose_kernel(n, cs, wt, csrc, ks, unsupported);  // (match_norms.cpp)
  return conv_kernel_in(n, cs, wt, csrc, ks, unsupported, 1, 1);
}

DenseKernel conv_kernel_in(const graph::Node& n, const Shape& cs, const Tensor& wt, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported, int64_t ish,
                           int64_t isw) {
  const Tensor* w = &wt;
  const bool one_d = cs.size() == 3;
  const int64_t groups = n.attrs.get_int("group", 1);
  std::vector<int64_t> dil = n.attrs.get_ints("dilations", std::vector<int64_t>(cs.size() - 2, 1));
  if (dil.size() != cs.size() - 2 || std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d < 1; })) unsupported("Conv needs one dilation of at least 1 per spatial axis");
  if (one_d) dil = {1, dil[0]};
  const std::string ap = n.attrs.get_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") unsupported("Conv auto_pad " + ap + " is not mapped; give explicit pads");
  // A 1-D Conv is a 2-D one of height 1: strides (1, s), pads (0, begin, 0, end).
  std::vector<int64_t> st = n.attrs.get_ints("strides", one_d ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1});
  std::vector<int64_t> pads = n.attrs.get_ints("pads", std::vector<int64_t>(one_d ? 2 : 4, 0));
  if (st.size() != cs.size() - 2 || pads.size() != 2 * (cs.size() - 2)) unsupported("Conv needs one stride per spatial axis and two pads per axis");
  if (one_d) st = {1, st[0]}, pads = {0, pads[0], 0, pads[1]};
  DenseKernel k;
  k.name = n.name.empty() ? n.outputs[0] : n.name;
  k.op = "Conv";
  k.nodes = {n.name};
  k.xread = DenseKernel::XRead::conv;
  k.src = csrc;
  k.samples = cs[0];
  k.cin = cs[1];
  k.N = w->shape()[0];
  if (groups < 1 || k.cin % groups || k.N % groups || w->shape()[1] * groups != k.cin)
    unsupported("weight " + shape_str(w->shape()) + " does not match the input's " + std::to_string(k.cin) + " channels in " + std::to_string(groups) + " group(s)");
  // A dilated kernel is the kernel of its extent with zeros between the taps: the general path
  // (every tap of the extent computed; docs/wafer-compiler.md "Convolutions").
  const int64_t kh0 = one_d ? 1 : w->shape()[2], kw0 = w->shape().back();
  k.kh = (kh0 - 1) * dil[0] + 1;
  k.kw = (kw0 - 1) * dil[1] + 1;
  k.sh = st[0];
  k.sw = st[1];
  k.pad_t = pads[0];
  k.pad_l = pads[1];
  k.ih_raw = one_d ? 1 : cs[2];
  k.iw_raw = cs.back();
  k.ish = ish, k.isw = isw;
  k.ih = (k.ih_raw - 1) * ish + 1 + pads[0] + pads[2];
  k.iw = (k.iw_raw - 1) * isw + 1 + pads[1] + pads[3];
  k.oh = (k.ih - k.kh) / k.sh + 1;
  k.ow = (k.iw - k.kw) / k.sw + 1;
  if (k.oh < 1 || k.ow < 1) unsupported("the Conv window is larger than its padded input");
  k.B = k.samples * k.oh * k.ow;
  k.K = k.cin * k.kh * k.kw;
  k.groups = groups;
  k.kflops = k.cin * kh0 * kw0 / groups;  // the model's FLOPs: a group's inputs only, the kernel's own taps
  if (k.padded() && csrc >= 0) {  // the producer holds its output inside this reader's zero border
    DenseKernel& p = ks[static_cast<size_t>(csrc)];
    if (p.xp_h && (p.xp_h != k.ih || p.xp_w != k.iw || p.xp_t != k.pad_t || p.xp_l != k.pad_l || p.xp_sh != ish || p.xp_sw != isw))
      unsupported("two padded Convs (or ConvTransposes) read one feature map with different pads or strides; the wafer holds it inside one zero border");
    p.xp_h = k.ih, p.xp_w = k.iw, p.xp_t = k.pad_t, p.xp_l = k.pad_l, p.xp_sh = ish, p.xp_sw = isw;
  }
  k.Wconv = w->to_f32();
  if (k.kh != kh0 || k.kw != kw0) {
    const int64_t per = w->numel() / (kh0 * kw0);  // output channels x a group's inputs
    std::vector<float> spread(static_cast<size_t>(per * k.kh * k.kw), 0.0f);
    for (int64_t q = 0; q < per; ++q)
      for (int64_t i = 0; i < kh0; ++i)
        for (int64_t j = 0; j < kw0; ++j)
          spread[static_cast<size_t>((q * k.kh + i * dil[0]) * k.kw + j * dil[1])] = k.Wconv[static_cast<size_t>((q * kh0 + i) * kw0 + j)];
    k.Wconv = std::move(spread);
    k.op = "Conv(dilation " + std::to_string(dil[0]) + "x" + std::to_string(dil[1]) + ")";
    k.w_derived = "a dilated Conv's kernel is spread out with zeros between its taps";
  }
  if (groups > 1) {
    // A grouped (depthwise: one channel per group) Conv as the dense Conv whose weight is zero
    // between a group's outputs and the other groups' inputs: the general path, every K block
    // of the mesh GEMM still computed (docs/wafer-compiler.md "Convolutions").
    const int64_t cg = k.cin / groups, ng = k.N / groups, taps = k.kh * k.kw;
    std::vector<float> full(static_cast<size_t>(k.N * k.cin * taps), 0.0f);
    for (int64_t o = 0; o < k.N; ++o)
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t tap = 0; tap < taps; ++tap)
          full[static_cast<size_t>((o * k.cin + (o / ng) * cg + c) * taps + tap)] = k.Wconv[static_cast<size_t>((o * cg + c) * taps + tap)];
    k.Wconv = std::move(full);
    k.op = (k.op == "Conv" ? std::string("Conv(") : k.op.substr(0, k.op.size() - 1) + ", ") + "group " + std::to_string(groups) + ")";
  }
  return k;
}

// A MaxPool, AveragePool or GlobalAveragePool node at the chain ends of Conv kernel k (cur: the
// value before it, of shape cs).
void pool_into(DenseKernel& k, const graph::Node& n, const std::string& cur, const Shape& cs, const Unsupported& unsupported) {
  const bool global = n.op == "GlobalAveragePool";
  const bool one_d = cs.size() == 3;  // a 1-D pool: height 1, as its Conv
  std::vector<int64_t> kshape = global ? std::vector<int64_t>{k.oh, k.ow} : n.attrs.get_ints("kernel_shape");
  std::vector<int64_t> st = global ? std::vector<int64_t>{1, 1} : n.attrs.get_ints("strides", kshape);
  std::vector<int64_t> pads = global ? std::vector<int64_t>{0, 0, 0, 0} : n.attrs.get_ints("pads", std::vector<int64_t>(2 * kshape.size(), 0));
  if (one_d && !global && kshape.size() == 1 && st.size() == 1 && pads.size() == 2) kshape = {1, kshape[0]}, st = {1, st[0]}, pads = {0, pads[0], 0, pads[1]};
  if (pads.size() != 4) unsupported(n.op + " needs two pads per spatial axis");
  const bool padded = pads[0] || pads[1] || pads[2] || pads[3];
  // The border: -inf for a max; zeros for a mean that counts them (count_include_pad = 1).
  if (padded && n.op == "AveragePool" && !n.attrs.get_int("count_include_pad", 0))
    unsupported("padded AveragePool with count_include_pad = 0 (a divisor per window) is not mapped on the wafer; export with count_include_pad=True or without pads");
  if (n.attrs.get_int("storage_order", 0) || n.outputs.size() > 1) unsupported(n.op + " with storage_order or an Indices output is not mapped on the wafer");
  if (!global && n.attrs.get_int("ceil_mode", 0) && kshape.size() == 2 && st.size() == 2 && pads.size() == 4)
    for (size_t a = 0; a < 2; ++a) {
      // ceil_mode: one more window per axis where the last would run past the end -- if it starts
      // inside the input or its first pad (PyTorch's rule; onnx.ai MaxPool) -- the pool with that
      // much more padding at the end, -inf for a max, which never wins over the window's inputs.
      const int64_t in = a ? k.ow : k.oh, span = in + pads[a] + pads[a + 2];
      int64_t out = (span - kshape[a] + st[a] - 1) / st[a] + 1;
      if ((out - 1) * st[a] >= in + pads[a]) --out;
      const int64_t extra = std::max<int64_t>(0, (out - 1) * st[a] + kshape[a] - span);
      if (extra && n.op != "MaxPool")
        unsupported(n.op + " with ceil_mode where a last window runs past the end (its divisor counts fewer inputs) is not mapped on the wafer");
      pads[a + 2] += extra;
    }
  if (const std::string ap = n.attrs.get_string("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "VALID")
    unsupported(n.op + " with auto_pad is not mapped on the wafer; give explicit pads");
  for (const int64_t d : n.attrs.get_ints("dilations", {1, 1}))
    if (d != 1) unsupported("dilated " + n.op + " is not mapped on the wafer");
  if (kshape.size() != 2 || st.size() != 2) unsupported(n.op + " needs a 2-D kernel_shape and strides");
  if (k.gate_of >= 0) unsupported(n.op + " after a squeeze-excitation gate is not mapped on the wafer in this build");
  k.prepool = cur;  // (a later squeeze-excitation gate multiplies it)
  k.pavg = n.op != "MaxPool";  // without pads, count_include_pad changes nothing
  k.pkh = kshape[0];
  k.pkw = kshape[1];
  k.psh = st[0];
  k.psw = st[1];
  k.ppt = pads[0], k.ppl = pads[1], k.ppb = pads[2], k.ppr = pads[3];
  k.ph = (k.pool_ih() - k.pkh) / k.psh + 1;
  k.pw = (k.pool_iw() - k.pkw) / k.psw + 1;
  if (k.ph < 1 || k.pw < 1) unsupported("the " + n.op + " window is larger than its input");
}

}  // namespace tessera::wafer::detail

namespace tessera::wafer::detail {

// A d x d identity layer of `rows` rows reading kernel `src`'s output (-1: the graph input): the
// general path's way to put chain-end work where no layer of the model is -- a pre-norm model's
// first LayerNorm, a Vision Transformer's class token. Its weights stream like any other (the
// values pass through the PEs' multiply-adds exactly); kflops stays 0: the model has no such layer,
// so its FLOPs and weights are not the model's (the streamed weights and the multiply-adds show in
// the simulated time, the stream counters and the estimate).
DenseKernel identity_kernel(const std::string& name, long src, int64_t rows, int64_t d, const std::string& in_value) {
  DenseKernel k;
  k.src = src;
  k.name = name;
  k.op = "Identity";
  k.nodes = {name};
  k.B = k.samples = rows;
  k.K = k.N = d;
  k.W.assign(static_cast<size_t>(d * d), 0.0f);
  for (int64_t a = 0; a < d; ++a) k.W[static_cast<size_t>(a * d + a)] = 1.0f;
  k.bias.assign(static_cast<size_t>(d), 0.0f);
  k.in_value = in_value;
  return k;
}

// A Concat of constant rows (the class token, [batch or 1, r, C], equal across samples: the
// exporter's Expand folded) and a Conv's positions as tokens (`cur`, [batch, positions, C]) along
// the tokens: the Conv (ks.back()) writes y into a holder of lead + positions + trail rows per
// sample (its bordered holder, the constant rows' places zero); the returned Identity kernel reads
// it and adds the constants as its row bias (a position embedding's Add joins it).
DenseKernel token_concat(const graph::Node& n, const graph::Graph& g, const std::string& cur, const ConstantOf& constant, std::vector<DenseKernel>& ks,
                         const Unsupported& unsupported) {
  const Shape& cs = g.value(cur).shape;
  int64_t axis = n.attrs.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(cs.size());
  if (axis != 1) unsupported("Concat of a Conv's positions as tokens is mapped along the tokens (axis 1)");
  DenseKernel& p = ks.back();
  const int64_t samples = cs[0], P = cs[1], C = cs[2];
  std::vector<std::vector<float>> before, after;  // the constant rows, [C] each
  bool seen = false;
  for (const auto& v : n.inputs) {
    if (v == cur && !seen) {
      seen = true;
      continue;
    }
    const Tensor* t = constant(v);
    const Shape& ts = g.value(v).shape;
    if (!t || ts.size() != 3 || ts[2] != C || (ts[0] != 1 && ts[0] != samples))
      unsupported("Concat with a Conv's positions as tokens takes constant rows [batch or 1, rows, " + std::to_string(C) + "] beside them (a class token)");
    const auto tv = t->to_f32();
    for (int64_t b = 1; b < ts[0]; ++b)  // (the exporter's Expand, folded: every sample's rows the same)
      if (!std::equal(tv.begin(), tv.begin() + ts[1] * C, tv.begin() + b * ts[1] * C))
        unsupported("Concat's constant rows differ between samples; the wafer adds one set of rows to every sample");
    for (int64_t r = 0; r < ts[1]; ++r) (seen ? after : before).emplace_back(tv.begin() + r * C, tv.begin() + (r + 1) * C);
  }
  if (!seen) unsupported("Concat must take the tokens once");
  if (p.xp_h) unsupported("the Conv's output is also read by a padded Conv; as tokens it is mapped with one reader");
  const int64_t lead = static_cast<int64_t>(before.size()), R = lead + P + static_cast<int64_t>(after.size());
  p.tokens = true;
  p.xp_h = R, p.xp_w = 1, p.xp_t = lead, p.xp_l = 0;
  DenseKernel k = identity_kernel(n.name.empty() ? n.outputs[0] : n.name, static_cast<long>(ks.size()) - 1, samples * R, C, cur);
  k.row_period = R;
  k.row_bias.assign(static_cast<size_t>(R * C), 0.0f);
  for (int64_t r = 0; r < R; ++r) {
    const std::vector<float>* row = r < lead ? &before[static_cast<size_t>(r)] : r >= lead + P ? &after[static_cast<size_t>(r - lead - P)] : nullptr;
    if (row) std::copy(row->begin(), row->end(), k.row_bias.begin() + r * C);
  }
  return k;
}

// The token a Slice keeps of every sample of [batch, tokens, d] (`cs`): axis 1, one index, step 1
// (a negative start counts from the end); anything else is `unsupported`.
int64_t one_token(const graph::Node& n, const Shape& cs, const ConstantOf& constant, const Shape& os, const Unsupported& unsupported) {
  const Tensor *st = n.inputs.size() > 2 ? constant(n.inputs[1]) : nullptr, *en = n.inputs.size() > 2 ? constant(n.inputs[2]) : nullptr;
  const Tensor *ax = n.inputs.size() > 3 ? constant(n.inputs[3]) : nullptr, *sp = n.inputs.size() > 4 ? constant(n.inputs[4]) : nullptr;
  int64_t a = ax && ax->numel() == 1 ? ax->to_i64()[0] : -9;
  if (a < 0) a += 3;
  if (!st || !en || st->numel() != 1 || a != 1 || (sp && sp->to_i64()[0] != 1) || os.size() != 3 || os[1] != 1)
    unsupported("Slice is mapped on the wafer as one token of every sample ([batch, tokens, d] -> [batch, 1, d], step 1) into a dense layer, or inside an attention block");
  int64_t r0 = st->to_i64()[0];
  if (r0 < 0) r0 += cs[1];
  return std::clamp<int64_t>(r0, 0, cs[1] - 1);
}

}  // namespace tessera::wafer::detail

namespace tessera::wafer::detail {

// A constant c of shape ts ([..., R, N] with ones before) added to every sample's rows of `cs`
// ([..., R, N]) after kernel k: a row bias at its chain ends, added with the bias.
void add_row_bias(DenseKernel& k, const Shape& cs, const Shape& ts, const Tensor& c, const Unsupported& unsupported) {
  const int64_t R = cs[cs.size() - 2];
  for (size_t d = 0; d + 2 < ts.size(); ++d)
    if (ts[d] != 1) unsupported("Add of a constant " + shape_str(ts) + " to " + shape_str(cs) + ": the wafer adds a constant [rows, features] to every sample");
  if (k.row_period == 0) k.row_period = R, k.row_bias.assign(static_cast<size_t>(R * k.N), 0.0f);
  const auto cv = c.to_f32();
  for (size_t i = 0; i < cv.size(); ++i) k.row_bias[i] += cv[i];
}

// A dense layer's weight w ([K, N], or [N, K] with transB) as the kernel's row-major W [K, N]; K,
// N and the contraction counted for FLOPs set from it.
void dense_weights(DenseKernel& k, const Tensor& w, bool trans_b) {
  std::vector<float> wv = w.to_f32();
  k.K = trans_b ? w.shape()[1] : w.shape()[0];
  k.N = trans_b ? w.shape()[0] : w.shape()[1];
  k.kflops = k.K;
  if (!trans_b) {  // (already [K, N]: no second copy of a large weight)
    k.W = std::move(wv);
    return;
  }
  k.W.resize(static_cast<size_t>(k.K * k.N));
  for (int64_t a = 0; a < k.K; ++a)
    for (int64_t b = 0; b < k.N; ++b)
      k.W[static_cast<size_t>(a * k.N + b)] = trans_b ? wv[static_cast<size_t>(b * k.K + a)] : wv[static_cast<size_t>(a * k.N + b)];
}

// Nodes in a topological order that keeps the file's order where it can (Kahn's algorithm,
// smallest index first): kernels are numbered -- and run -- in the order the model lists them.
std::vector<size_t> chain_order(const graph::Graph& g, const std::map<std::string, size_t>& producer, const std::map<std::string, std::vector<size_t>>& uses,
                                const std::string& input, const std::string& input2) {
  std::vector<size_t> order;
  std::vector<int> pending(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& v : g.nodes[i].inputs)
      if (producer.count(v)) ++pending[i];
  // Nodes that depend on the second input only (a decoder's memory projections) wait until
  // nothing else is ready: they come right before the cross-attention that needs them, after its Q.
  std::vector<char> only2(g.nodes.size(), 0);
  if (!input2.empty()) {
    std::map<std::string, int> dep;  // value -> bit 1: depends on the first input, 2: on the second
    dep[input] = 1, dep[input2] = 2;
    for (const size_t i : g.topo_order()) {
      int d = 0;
      for (const auto& v : g.nodes[i].inputs)
        if (const auto it = dep.find(v); it != dep.end()) d |= it->second;
      for (const auto& v : g.nodes[i].outputs) dep[v] = d;
      only2[i] = d == 2;
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!pending[i]) ready.insert(i);
  while (!ready.empty()) {
    // (An elementwise function of the node just placed goes right after it, so a kernel's
    // functions follow it even when the file lists a sibling kernel between them: SwiGLU's
    // w1, w3, silu(w1 x) order.)
    size_t i = *ready.begin();
    for (const size_t u : ready)
      if (!only2[u]) {
        i = u;
        break;
      }
    if (!order.empty() && !g.nodes[order.back()].outputs.empty())
      for (const size_t u : ready)
        if (kUnary.count(g.nodes[u].op) && g.nodes[u].inputs.size() == 1 && g.nodes[u].inputs[0] == g.nodes[order.back()].outputs[0]) {
          i = u;
          break;
        }
    ready.erase(i);
    order.push_back(i);
    for (const auto& v : g.nodes[i].outputs)
      if (const auto it = uses.find(v); it != uses.end())
        for (const size_t u : it->second)
          for (const auto& vi : g.nodes[u].inputs)
            if (vi == v && --pending[u] == 0) ready.insert(u);
  }
  return order;
}

// A LayerNormalization or RMSNormalization over the last axis (the canonical graph's:
// fuse_decompositions recognises the exporters' decompositions) at the chain ends of the last
// kernel; `on_input`: it reads the graph input (not a feature map).
void layernorm_into(std::vector<DenseKernel>& ks, const graph::Node& n, const std::string& cur, const Shape& cs, bool on_input, const ConstantOf& constant,
                    const Unsupported& unsupported, bool channels) {
  const int64_t rank = static_cast<int64_t>(cs.size());
  if (ks.empty() && on_input) {
    // On the graph input (a pre-norm model's first LayerNorm): the chain ends of an identity
    // layer normalise it -- a d x d identity streamed like any weight (the general path: the
    // values pass through the PEs' multiply-adds exactly); its value before the LayerNorm, the
    // input itself, is what the model's first residual adds.
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < cs.size(); ++d) rows *= cs[d];
    ks.push_back(identity_kernel(n.name.empty() ? n.outputs[0] : n.name, -1, rows, cs.back(), cur));
    ks.back().nodes = {};  // (absorb adds the LayerNorm's name)
  }
  if (ks.empty() || ks.back().layernorm || ks.back().softmax || ks.back().attn || (ks.back().spatial() && !channels))
    unsupported("LayerNorm is mapped only after a dense layer, on the graph input, or over a Conv's channels (torchvision's LayerNorm2d)");
  if (channels && (!ks.back().spatial() || ks.back().pkh || ks.back().gate_of >= 0))
    unsupported("a LayerNorm over channels is mapped at a Conv's chain ends, before a pool or a squeeze-excitation gate");
  DenseKernel& k = ks.back();
  k.preln_value = cur;  // (a later residual may add the value before the LayerNorm: pre-norm)
  const int64_t ax = n.attrs.get_int("axis", -1);
  if ((ax != -1 && ax != rank - 1) || n.inputs.size() < 2) unsupported("LayerNormalization is mapped only over the features (the last axis)");
  const Tensor* gam = constant(n.inputs[1]);
  const bool has_beta = n.inputs.size() > 2 && !n.inputs[2].empty();
  const Tensor* bet = has_beta ? constant(n.inputs[2]) : nullptr;
  if (!gam || gam->numel() != k.N || (bet && bet->numel() != k.N) || (!bet && has_beta)) unsupported(n.op + " needs a constant scale (and bias) of " + std::to_string(k.N) + " values");
  k.rms = n.op == "RMSNormalization";
  if (k.rms && n.attrs.get_int("eps_after_sqrt", 0)) unsupported("RMSNormalization with its eps after the square root is not mapped on the wafer");
  if (k.rms && bet) unsupported("RMSNormalization with a bias is not mapped on the wafer");
  k.ln_eps = n.attrs.get_float("epsilon", 1e-5);
  k.layernorm = true;
  k.ln_gamma = gam->to_f32();
  k.ln_gamma_value = n.inputs[1];
  k.ln_beta_value = bet ? n.inputs[2] : "";
  k.ln_beta = bet ? bet->to_f32() : std::vector<float>(static_cast<size_t>(k.N), 0.0f);
}

// Layout-only nodes: a Reshape that keeps the last axis, or a Transpose that only moves axes of
// size 1, leaves the rows as they are -- its output is an alias of its input (marked consumed).
void layout_aliases(const graph::Graph& g, std::map<std::string, std::string>& alias, std::set<size_t>& consumed) {
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
}

// A ReduceMean over every spatial axis of a feature map of shape cs (axes from the attribute, or
// from a constant second input from opset 18).
bool means_spatial(const graph::Node& n, const Shape& cs, const ConstantOf& constant) {
  std::vector<int64_t> axes = n.attrs.get_ints("axes", {});
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor* t = constant(n.inputs[1]);
    if (!t) return false;
    for (const double v : t->to_f64()) axes.push_back(static_cast<int64_t>(v));
  }
  const int64_t r = static_cast<int64_t>(cs.size());
  std::set<int64_t> got;
  for (int64_t a : axes) got.insert(a < 0 ? a + r : a);
  std::set<int64_t> want;
  for (int64_t a = 2; a < r; ++a) want.insert(a);
  return got == want;
}

// A constant scale per output feature right after dense layer k, folded into W's columns, the
// bias and a row bias (DenseKernel::w_derived).
void scale_features(DenseKernel& k, const std::vector<float>& sv) {
  for (int64_t a = 0; a < k.K; ++a)
    for (int64_t b = 0; b < k.N; ++b) k.W[static_cast<size_t>(a * k.N + b)] *= sv[static_cast<size_t>(b)];
  for (int64_t b = 0; b < k.N; ++b) k.bias[static_cast<size_t>(b)] *= sv[static_cast<size_t>(b)];
  for (size_t r = 0; r < k.row_bias.size(); ++r) k.row_bias[r] *= sv[r % static_cast<size_t>(k.N)];
  k.w_derived = "a constant scale per output feature after it (an inference BatchNorm, a layer scale) is folded into its weights";
}

// Transposes swapping the two leading axes of [A, B, d] (match_layers.cpp): aliases of their
// inputs, marked in `swapped`, their nodes consumed.
void leading_swaps(const graph::Graph& g, std::map<std::string, std::string>& alias, std::map<std::string, bool>& swapped, std::set<size_t>& consumed) {
  for (const size_t i : g.topo_order()) {
    const graph::Node& n = g.nodes[i];
    if (n.op != "Transpose" || consumed.count(i) || alias.count(n.outputs[0])) continue;
    const Shape& a = g.value(n.inputs[0]).shape;
    if (a.size() == 3 && n.attrs.get_ints("perm", {}) == std::vector<int64_t>{1, 0, 2})
      alias[n.outputs[0]] = n.inputs[0], swapped[n.outputs[0]] = true, consumed.insert(i);
  }
}

// A new kernel of node n (match_layers.cpp): its weight value, the bias from a third input (Conv,
// Gemm; MatMul has none), the value it reads (cur); appended to ks.
void append_kernel(std::vector<DenseKernel>& ks, DenseKernel& k, const graph::Graph& g, const graph::Node& n, const std::string& cur, const char* per) {
  k.bias.assign(static_cast<size_t>(k.N), 0.0f);
  k.w_value = n.inputs[1];
  if (n.op != "MatMul" && n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const graph::Value* c = g.has_value(n.inputs[2]) ? &g.value(n.inputs[2]) : nullptr;
    if (!c || !c->data || c->data->numel() != k.N)
      throw InputError(g.where(n), n.op + " bias must be a constant of " + std::to_string(k.N) + " values (" + per + ")", kOpsHint);
    k.bias = c->data->to_f32();
    k.b_value = n.inputs[2];
  }
  k.in_value = cur;
  ks.push_back(std::move(k));
}

}  // namespace tessera::wafer::detail
