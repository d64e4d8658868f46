// Graph -> dense layers (compile.hpp; docs/wafer-compiler.md "What it maps"): the graph's nodes as a
// chain of DenseKernels with their post-ops. The attention pattern is matched in match_attention.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "isa/error.hpp"
#include "mapper/passes/rewrite.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

// The ops the layer chain is made of besides kUnary (Add is a bias or a residual when its other
// operand is not a scalar constant).
const std::set<std::string> kStructural = {"Gemm", "MatMul", "Add", "Softmax", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
                                           "Flatten", "Reshape", "Div", "Mul", "LayerNormalization", "RMSNormalization", "Transpose", "Where", "Slice", "Concat",
                                           "ReduceMean", "LogSoftmax", "InstanceNormalization", "ConvTranspose", "Resize", "RNN", "GRU", "LSTM"};  // (Where: an attention mask; Slice and Concat: rotary embeddings in an attention, tokens)

}  // namespace

namespace {
// match_layers with the graph input the chain starts from chosen (`first`: 0 or 1).
std::vector<DenseKernel> match_from(const graph::Graph& g0, size_t first, std::string& input, std::string& output, std::string& input2);
}  // namespace

std::vector<DenseKernel> match_layers(const graph::Graph& g0, std::string& input, std::string& output, std::string& input2) {
  // Two inputs (a decoder's target and memory, in either order): the chain starts from the one
  // that maps; the first one's error is reported when neither does.
  if (g0.inputs.size() != 2) return match_from(g0, 0, input, output, input2);
  try {
    return match_from(g0, 0, input, output, input2);
  } catch (const InputError& first) {
    try {
      return match_from(g0, 1, input, output, input2);
    } catch (const InputError& second) {
      // The error of the order that is not refused for the inputs' roles (a chain started from the
      // memory stops at its first attention, reading the target as the second input).
      auto about_roles = [](const InputError& e) { return std::string(e.what()).find("the second graph input") != std::string::npos; };
      if (about_roles(first) && !about_roles(second)) throw second;
      throw first;
    }
  }
}

namespace {
std::vector<DenseKernel> match_from(const graph::Graph& g0, size_t first, std::string& input, std::string& output, std::string& input2) {
  const std::optional<graph::Graph> split = rewrite_branches(g0);  // (concat.cpp)
  const graph::Graph& g = split ? *split : g0;
  // (A second input: a decoder's memory, read only by the dense layers computing cross-attention's
  // keys and values -- checked once the attention blocks are attached.)
  if (g.inputs.empty() || g.inputs.size() > 2 || g.outputs.size() != 1)
    throw InputError(g.source, "the wafer compiler maps graphs with one input (or two: a decoder's target and memory, the memory read only as cross-attention's keys and values) and one output (this one has " +
                                   std::to_string(g.inputs.size()) + " and " + std::to_string(g.outputs.size()) + ")",
                     kOpsHint);
  // Ops first: every node the compiler cannot map, named (all of them at once).
  DiagnosticList unmapped;  // every such node, the hint (what is mapped) once, after the last
  std::vector<const graph::Node*> bad;
  for (const auto& n : g.nodes)
    if (!kStructural.count(n.op) && !kUnary.count(n.op)) bad.push_back(&n);
  for (size_t i = 0; i < bad.size(); ++i) unmapped.add(g.where(*bad[i]), "op " + bad[i]->op + " is not mapped by the wafer compiler in this build", i + 1 == bad.size() ? kOpsHint : "");
  unmapped.throw_if_any();
  input = g.inputs[first];
  input2 = g.inputs.size() > 1 ? g.inputs[1 - first] : std::string();
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
  // Patterns spanning several nodes (attention) are matched first; their nodes are marked consumed.
  std::map<std::string, std::vector<size_t>> uses = g.consumers();
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
  // Layout-only nodes (a Reshape that keeps the last axis, ...): their outputs are aliases of their inputs.
  std::map<std::string, std::string> alias;
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& v : g.nodes[i].outputs) producer[v] = i;
  auto canon = [&](std::string v) {
    for (auto it = alias.find(v); it != alias.end(); it = alias.find(v)) v = it->second;
    return v;
  };
  layout_aliases(g, alias, consumed);  // (match_ops.cpp)
  // Multi-head attention blocks (match_attention.cpp), attached below to the kernel computing V.
  std::vector<AttnBlock> blocks = match_attention(g, producer, constant, sole, consumed);
  // A Transpose swapping the two leading axes of [A, B, d] (nn.MultiheadAttention's batch_first
  // [batch, seq, d] <-> [seq, batch, d]) moves no data either: it changes the rows' logical order
  // against the physical one (which stays the graph input's). `swapped` marks such aliases; a
  // value's parity is the number of swaps, mod 2, between it and the physical order. Only the
  // attention (which rows form a sample) and the graph output (which must be in physical order)
  // depend on it; a residual adds values of the same parity.
  std::map<std::string, bool> swapped;
  leading_swaps(g, alias, swapped, consumed);  // (match_ops.cpp)
  auto rel = [&](std::string v) {  // parity of v against its canonical value
    bool p = false;
    for (auto it = alias.find(v); it != alias.end(); it = alias.find(v)) p = p != swapped.count(v), v = it->second;
    return p;
  };
  std::map<std::string, bool> parity_of;  // canonical values: parity against the physical order
  parity_of[input] = false;
  if (!input2.empty()) parity_of[input2] = false;
  auto parity = [&](const std::string& raw) { return parity_of[canon(raw)] != rel(raw); };
  // Nodes in a topological order that keeps the file's order where it can (match_ops.cpp).
  const std::vector<size_t> order = chain_order(g, producer, uses, input, input2);
  // A new kernel of node n: its weight value, the bias from a third input (Conv, Gemm; MatMul has
  // none), the value it reads; appended to ks.
  auto start_kernel = [&](DenseKernel& k, const graph::Node& n, const char* per) { append_kernel(ks, k, g, n, cur, per); };  // (match_ops.cpp)
  // Tokens (a Vision Transformer's patch embedding, compile.hpp DenseKernel::tokens): the last
  // Conv's output reshaped to [batch, C, positions] (tok_reshaped), then transposed to [batch,
  // positions, C] (tok_view: cur is that Conv's output as rows); a Slice of one token waiting for
  // the dense layers that read it (by value: the row of every `period` rows of kernel `producer`).
  bool tok_reshaped = false, tok_view = false;
  struct TokenSlice { int64_t row, period; long producer; };
  std::map<std::string, TokenSlice> token_slices;
  std::vector<std::string> kout;  // each kernel's output value so far
  // A nearest Resize of the last Conv's output waiting for the Conv that reads it: the value, the factors.
  struct Upsample { std::string value; int64_t sh = 1, sw = 1; };
  std::optional<Upsample> up;
  // The values at the last kernel's chain ends: its functions list each lies in (0: acts, 1:
  // acts_after, 2: acts_post_ln) and its place there -- an Add, Sub, Mul or Div of two of them
  // keeps the earlier one (Unary::Kind::keep, combine).
  struct ChainPos { size_t kernel; int list; size_t at; };
  std::map<std::string, ChainPos> chain_pos;
  auto chain_value = [&](const std::string& v) {  // v lies at the last kernel's chain ends, in its current list
    const auto it = chain_pos.find(v);
    if (ks.empty() || flat || tok_view || tok_reshaped || it == chain_pos.end() || it->second.kernel + 1 != ks.size()) return false;
    DenseKernel& k = ks.back();
    const auto [list, fns] = functions_list(k);
    return list == it->second.list && it->second.at <= fns->size() && !k.attn && !k.softmax && k.gate_of < 0 && !k.pkh;
  };
  // A stack of recurrent layers on the graph input (recurrent.cpp): one kernel per layer and step;
  // the rest of the graph reads its final state (rnn_final) from the last one's rows.
  std::string rnn_final;
  int64_t rnn_slot = -1, rnn_nslots = 1;
  if (auto rm = match_recurrent(g, input, canon, parity, consumed)) {
    for (auto& k : rm->kernels) kout.push_back(k.name), ks.push_back(std::move(k));
    cur = kout.back() = rnn_final = canon(rm->value);
    rnn_slot = rm->slot, rnn_nslots = rm->nslots;
  }
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
      if (k.activated() || k.residual >= 0 || k.layernorm || k.attn || k.spatial())
        throw InputError("kernel '" + k.name + "'", "attention is mapped right after the dense layer computing V (with its bias)", kOpsHint);
      DenseKernel& kq = ks[static_cast<size_t>(qi - kout.begin())];
      DenseKernel& kk = ks[static_cast<size_t>(ki - kout.begin())];
      if (k.reads_input2 || kk.reads_input2 || kq.reads_input2) {
        // Cross-attention: K and V from the second input, right after Q -- followers of Q, whose
        // x values the chain ends holding Q's input send after Q's (DenseKernel::reads_input2).
        const std::string where = "kernel '" + k.name + "'";
        if (!k.reads_input2 || !kk.reads_input2 || kq.reads_input2)
          throw InputError(where, "the second graph input ('" + input2 + "') is mapped only as cross-attention's keys and values: K and V read it, Q reads the first input's layers", kOpsHint);
        if (&kk != &ks[ks.size() - 2] || &kq != &ks[ks.size() - 3] || kq.src < 0)
          throw InputError(where, "cross-attention is mapped with its Q, K and V projections one after another, Q reading a kernel's output (a decoder layer's)", kOpsHint);
        if (!blk.mask.empty() || !blk.q_cos.empty() || !blk.k_cos.empty())
          throw InputError(where, "cross-attention is mapped without a mask or rotary embeddings in this build", kOpsHint);
        if (kk.B != k.B || kk.K != kq.K) throw InputError(where, "cross-attention's K and V read rows of the query's features", kOpsHint);
        k.attn_qrows = kq.B;
        k.src = kk.src = kq.src;
      }
      k.attn = true;
      k.attn_q = qi - kout.begin();
      k.attn_k = ki - kout.begin();
      k.heads = blk.heads;
      k.dh = blk.dh;
      k.attn_scale = blk.scale;
      k.attn_samples = blk.samples;
      // Logical rows [seq, batch] (the exporter's transposed layout) on physical [batch, seq] rows:
      // a sample's rows are contiguous; else (parity 0) they interleave.
      // ([batch, S] rows in the 4-D form, the physical order at parity 0.)
      k.attn_contig = blk.samples > 1 && blk.seq_major == parity(blk.q);
      k.attn_mask = blk.mask;
      k.attn_q_cos = blk.q_cos, k.attn_q_sin = blk.q_sin, k.attn_k_cos = blk.k_cos, k.attn_k_sin = blk.k_sin;
      if (blk.samples > 1 && (parity(blk.q) != parity(blk.k) || parity(blk.q) != parity(blk.v)))
        throw InputError("kernel '" + k.name + "'", "the attention's Q, K and V rows are in different orders", kOpsHint);
      parity_of[canon(blk.out)] = parity(blk.v);
      k.op += "+Attention";
      k.name = blk.out;
      cur = kout.back() = blk.out;
      blk.done = true;
    }
    auto unsupported = [&](const std::string& why) { throw InputError(g.where(n), why, kOpsHint); };
    const bool commutative = n.op == "Add" || n.op == "Mul";
    // A dense layer may read the graph input or any kernel's output (weight streaming); the rest
    // continue the running activation.
    // A Conv may read an earlier Conv's output too (ResNet's downsampling shortcut beside the block).
    const bool dense = n.op == "Gemm" || n.op == "MatMul" || n.op == "Conv" || n.op == "ConvTranspose";
    long src = -2;
    const bool reads2 = dense && !n.inputs.empty() && !input2.empty() && n.inputs[0] == input2;  // (a cross-attention's K or V)
    if (dense && !n.inputs.empty()) {
      if (n.inputs[0] == input || reads2) src = -1;
      for (size_t q = 0; q < kout.size(); ++q)
        if (kout[q] == n.inputs[0]) src = static_cast<long>(q);
      if (src >= -1 && n.inputs[0] != cur) cur = n.inputs[0], flat = false;
    }
    // (Sub and Div may read it second, from a constant: c - x is Neg then Add.)
    const bool from_constant = (n.op == "Sub" || n.op == "Div") && n.inputs.size() == 2 && n.inputs[1] == cur && constant(n.inputs[0]);
    // (And a Concat of tokens with constant rows before them: the class token.)
    const bool tok_concat = n.op == "Concat" && tok_view && std::find(n.inputs.begin(), n.inputs.end(), cur) != n.inputs.end();
    // (An op of two values at the chain ends, the running one second: x - tanh(x), x / (1 + |x|).)
    const bool binary = n.op == "Add" || n.op == "Sub" || n.op == "Mul" || n.op == "Div";
    const bool two_values = binary && n.inputs.size() == 2 && (n.inputs[0] == cur || n.inputs[1] == cur) && !constant(other_in(n, cur)) &&
                            chain_value(other_in(n, cur)) && g.value(other_in(n, cur)).shape == g.value(cur).shape;
    if (n.op == "Concat" && !tok_concat) unsupported(concat_refusal(g, g.nodes[i]));  // (concat.cpp: what a Concat of branches needs)
    if (n.inputs.empty() || (n.inputs[0] != cur && !(commutative && n.inputs.size() > 1 && n.inputs[1] == cur) && !from_constant && !tok_concat && !two_values)) {
      // Every node must continue the chain from its first input (either input of Add or Mul).
      bool uses_cur = std::find(n.inputs.begin(), n.inputs.end(), cur) != n.inputs.end();
      unsupported(uses_cur ? "takes the running activation as a later input" : "does not continue the chain of layers (it does not read '" + cur + "')");
    }
    const Shape& cs = g.value(cur).shape;
    // A Conv's [batch, C, positions] output (reshaped from [batch, C, H, W], or a 1-D Conv's)
    // transposed to [batch, positions, C]: its rows as the chain ends hold them (sample, h, w).
    const bool tok_transpose = n.op == "Transpose" && !ks.empty() && ks.back().spatial() && !flat && !tok_view && !ks.back().tokens && cs.size() == 3 &&
                               n.attrs.get_ints("perm", {}) == std::vector<int64_t>{0, 2, 1} && (tok_reshaped || ks.back().oh == 1) && ks.back().gate_of < 0;
    for (const auto& v : n.inputs)
      if (token_slices.count(v) && !(n.op == "Gemm" || n.op == "MatMul"))
        unsupported("a Slice of one token is mapped only as the input of a dense layer (a Vision Transformer's class token into its head)");
    if (tok_reshaped && !tok_transpose)
      unsupported("a Conv's output reshaped to [batch, C, positions] is mapped only as tokens: transposed to [batch, positions, C] next (a Vision Transformer's patch embedding)");
    // A feature map: [batch, channels, height, width], or [batch, channels, length] into a 1-D Conv
    // and after one (mapped as height 1).
    const bool fmap = !tok_transpose && (cs.size() == 4 || (cs.size() == 3 && (ks.empty() ? (n.op == "Conv" || n.op == "ConvTranspose") : ks.back().spatial() && !flat && !tok_view)));
    // A mean over every spatial axis of a feature map (x.mean((2, 3)): MNASNet's and ShuffleNet's
    // heads) is a GlobalAveragePool -- flattened when it drops the axes.
    const bool spatial_mean = n.op == "ReduceMean" && fmap && means_spatial(n, cs, constant);
    // GroupNorm as exported (a Reshape, InstanceNormalization, a Reshape back) or InstanceNorm
    // (match_norms.cpp): at the Conv's chain ends; the normalised value keeps the Conv's name.
    const GroupNormAt gn = fmap && !ks.empty() ? groupnorm_at(g, n, i, cs, sole) : GroupNormAt{};
    if (gn.in >= 0) {
      if (uses[cur].size() != 1) unsupported("GroupNorm and InstanceNorm are mapped on a value nothing else reads");
      groupnorm_into(ks.back(), g, n, gn, flat, constant, unsupported);
      // (cur now names the normalised value, after the InstanceNormalization's own scale and shift:
      // an op of two values that reads it keeps it there)
      chain_pos[cur] = ChainPos{ks.size() - 1, 0, ks.back().acts.size()};
      alias[n.outputs[0]] = cur;
      for (const long m : {gn.in, gn.back})
        if (m >= 0 && static_cast<size_t>(m) != i) consumed.insert(static_cast<size_t>(m)), alias[g.nodes[static_cast<size_t>(m)].outputs[0]] = cur;
      continue;
    }
    // torchvision's LayerNorm2d (match_norms.cpp): at the Conv's chain ends, a position's channels a row.
    if (const auto [ln, back] = fmap && !ks.empty() && !flat ? channel_norm_at(g, n, cs, sole) : std::pair<long, long>{-1, -1}; ln >= 0) {
      if (uses[cur].size() != 1) unsupported("a LayerNorm over channels is mapped on a value nothing else reads");
      layernorm_into(ks, g.nodes[static_cast<size_t>(ln)], cur, g.value(n.outputs[0]).shape, false, constant, unsupported, true);
      for (const long m : {back, ln}) consumed.insert(static_cast<size_t>(m)), absorb(ks.back(), g.nodes[static_cast<size_t>(m)]);
      for (const long m : {static_cast<long>(i), ln, back}) alias[g.nodes[static_cast<size_t>(m)].outputs[0]] = cur;
      chain_pos[cur] = ChainPos{ks.size() - 1, 2, 0};
      continue;
    }
    if (up && std::find(n.inputs.begin(), n.inputs.end(), up->value) != n.inputs.end() && n.op != "Conv")
      unsupported("a nearest Resize (Upsample) is mapped only into a Conv, which reads the upsampled map from its holder");
    if (n.op == "Resize" && fmap && !ks.empty() && ks.back().spatial() && !flat && !up) {
      // Written into the reading Conv's holder each value sh x sw times by the Conv's chain ends.
      const auto [sh, sw] = upsample_of(n, cs, g.value(n.outputs[0]).shape, unsupported);
      up = Upsample{n.outputs[0], sh, sw};
      absorb(ks.back(), n);
      cur = n.outputs[0];
      continue;
    }
    if (fmap && n.op != "Conv" && n.op != "ConvTranspose" && n.op != "MaxPool" && n.op != "AveragePool" && n.op != "GlobalAveragePool" && !spatial_mean && !kUnary.count(n.op) &&
        n.op != "Flatten" && n.op != "Reshape")
      unsupported(n.op + " on a feature map " + shape_str(cs) + ": the wafer compiler maps Conv, elementwise functions, MaxPool, AveragePool, GlobalAveragePool and a Flatten to [batch, features] there");
    if (n.op == "Conv" || n.op == "ConvTranspose") {
      const Tensor* w = n.inputs.size() > 1 ? constant(n.inputs[1]) : nullptr;
      if (!fmap || !w || w->rank() != static_cast<int64_t>(cs.size()))
        unsupported("Conv needs a [batch, channels, height, width] input and a constant 4-D weight (or [batch, channels, length] and a 3-D weight)");
      const long csrc = src >= -1 ? src : static_cast<long>(ks.size()) - 1;
      if (csrc >= 0 && !ks[static_cast<size_t>(csrc)].spatial()) unsupported("Conv reads the output of a dense layer; the wafer compiler maps convolutions on the input or after another Conv");
      if (csrc < 0 && !ks.empty()) unsupported("Conv reads the graph input beside another kernel; the wafer maps a feature-map input read by one kernel");
      DenseKernel k = conv_kernel(n, cs, *w, csrc, ks, unsupported);
      if (up && n.inputs[0] == up->value) {  // the upsampled map, from the producer's holder
        if (csrc != static_cast<long>(ks.size()) - 1 || k.ish > 1 || k.isw > 1) unsupported("a nearest Resize is mapped into a Conv reading the Resize of the kernel before it");
        DenseKernel& p = ks.back();
        if (!p.xp_h) p.xp_h = k.ih, p.xp_w = k.iw, p.xp_t = k.pad_t, p.xp_l = k.pad_l;
        p.xp_rh = up->sh, p.xp_rw = up->sw, up.reset();
      }
      start_kernel(k, n, "per output channel");
    } else if (n.op == "MaxPool" || n.op == "AveragePool" || n.op == "GlobalAveragePool" || spatial_mean) {
      if (ks.empty() || !ks.back().spatial() || ks.back().pkh || ks.back().softmax)
        unsupported(n.op + " is mapped once after a Conv (and its activation), at the Conv's chain ends");
      graph::Node pool = n;
      if (spatial_mean) pool.op = "GlobalAveragePool", pool.attrs = {};
      pool_into(ks.back(), pool, cur, cs, unsupported);
      absorb(ks.back(), n);
      flat = spatial_mean && !n.attrs.get_int("keepdims", 1);  // [batch, C]: read as a Flatten of the pooled map
    } else if (n.op == "Reshape" && fmap && cs.size() == 4 && !ks.empty() && ks.back().spatial() && g.value(n.outputs[0]).shape.size() == 3 &&
               g.value(n.outputs[0]).shape == Shape{cs[0], cs[1], cs[2] * cs[3]}) {
      tok_reshaped = true;  // [batch, C, H W]: tokens if a Transpose to [batch, H W, C] follows
    } else if (tok_transpose) {
      tok_reshaped = false, tok_view = true;
    } else if (n.op == "Concat" && tok_view) {
      ks.push_back(token_concat(n, g, cur, constant, ks, unsupported));  // (match_ops.cpp)
      tok_view = false;
    } else if (n.op == "Add" && !ks.empty() && constant(other_in(n, cur)) && cs.size() >= 3 && !fmap && !flat && !parity(cur) &&
               !per_feature(*constant(other_in(n, cur)), ks.back().N, false, cs.size()) &&
               constant(other_in(n, cur))->numel() == cs[cs.size() - 2] * cs.back() && !ks.back().spatial() && !ks.back().activated() &&
               ks.back().residual < 0 && !ks.back().softmax && !ks.back().attn && !ks.back().layernorm &&
               (ks.back().row_period == 0 || ks.back().row_period == cs[cs.size() - 2])) {
      // A constant [rows, features] added to every sample's rows (the position embedding).
      add_row_bias(ks.back(), cs, g.value(other_in(n, cur)).shape, *constant(other_in(n, cur)), unsupported);
      absorb(ks.back(), n);
    } else if (n.op == "Slice" && !ks.empty() && !fmap && !flat && cs.size() == 3 && !parity(cur)) {
      // One token of every sample ([batch, tokens, d] -> [batch, 1, d]: ViT's class token, Gather
      // in the file): the next dense layer reads that row of each sample.
      token_slices[n.outputs[0]] = {one_token(n, cs, constant, g.value(n.outputs[0]).shape, unsupported), cs[1], static_cast<long>(ks.size()) - 1};
    } else if (n.op == "Flatten" || n.op == "Reshape") {
      const Shape& os = g.value(n.outputs[0]).shape;
      const bool to_rows = fmap && os.size() == 2 && os[0] == cs[0] && os[1] == cs[1] * cs[2] * (cs.size() == 4 ? cs[3] : 1);
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
      if (const auto ts = token_slices.find(n.inputs[0]); ts != token_slices.end()) {  // one token of each sample: the producer's rows in steps
        const DenseKernel& p = ks[static_cast<size_t>(ts->second.producer)];
        if (p.spatial() || p.B != xs[0] * ts->second.period) unsupported(n.op + " reads a Slice of one token of a value the wafer does not hold as [samples x tokens] rows");
        k.src = ts->second.producer, k.sel_row = ts->second.row, k.sel_period = ts->second.period;
      }
      if (!ks.empty() && ks.back().spatial() && !flat) unsupported(n.op + " after a Conv needs a Flatten between them");
      if (flat) {
        const DenseKernel& p = ks.back();
        k.xread = DenseKernel::XRead::flatten;
        k.cin = p.N;
        k.P = p.rows_out() / p.samples;
        flat = false;
      }
      bool trans_b = false;
      if (n.op == "Gemm") {
        if (n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0) unsupported("Gemm with alpha or beta other than 1");
        if (n.attrs.get_int("transA", 0)) unsupported("Gemm with transA");
        trans_b = n.attrs.get_int("transB", 0) != 0;
      }
      k.reads_input2 = reads2;
      if (n.inputs[0] == rnn_final) k.rnn_slot = rnn_slot, k.rnn_nslots = rnn_nslots;  // (its columns of the last step's rows)
      dense_weights(k, *w, trans_b);  // (match_ops.cpp: W as [K, N])
      if (k.K != xs[1]) unsupported("weight " + shape_str(w->shape()) + " does not match the activation " + shape_str(xs));
      k.w_trans = trans_b;
      start_kernel(k, n, "per output feature");
    } else if (two_values) {
      // An op of two values of the chain end: the earlier one kept (match_norms.cpp).
      const std::string o2 = other_in(n, cur);
      two_values_into(*functions_list(ks.back()).second, chain_pos.at(o2).at, n, n.inputs[0] == o2, unsupported);
      absorb(ks.back(), n);
    } else if (n.op == "Add" && !ks.empty() && !constant(other_in(n, cur)) && !other_in(n, cur).empty()) {
      // A residual: the running activation plus the input (or output) of an earlier kernel (match_norms.cpp).
      const std::string o2 = other_in(n, cur);
      residual_into(ks, kout, o2, input2, flat, unsupported);
      if (shape_numel(g.value(o2).shape) != shape_numel(cs)) unsupported("the residual adds " + shape_str(g.value(o2).shape) + " to " + shape_str(cs) + " (a broadcast): the wafer maps residuals of one shape");
      {
        const graph::Node& rn = g.nodes[i];  // (raw inputs: their parities)
        const bool first_is_cur = canon(rn.inputs[0]) == cur;
        if (parity(rn.inputs[first_is_cur ? 0 : 1]) != parity(rn.inputs[first_is_cur ? 1 : 0]))
          unsupported("the residual adds values whose rows are in different orders (a Transpose of the leading axes lies between them)");
      }
      absorb(ks.back(), n);
    } else if (n.op == "Add" && !ks.empty() && constant(other_in(n, cur)) && per_feature(*constant(other_in(n, cur)), ks.back().N, fmap, cs.size()) &&
               !ks.back().activated() && !ks.back().gn_size && ks.back().residual < 0 && !ks.back().softmax && !ks.back().attn && !ks.back().layernorm && !ks.back().pkh && !flat) {
      // A bias: a constant per output feature (channel), added with the layer's own.
      const auto cv = constant(other_in(n, cur))->to_f32();
      for (int64_t b = 0; b < ks.back().N; ++b) ks.back().bias[static_cast<size_t>(b)] += cv[static_cast<size_t>(b)];
      ks.back().b_value = ks.back().b_value.empty() ? other_in(n, cur) : "*";  // "*": two biases (training refuses it)
      absorb(ks.back(), n);
    } else if (n.op == "Mul" && !ks.empty() && constant(other_in(n, cur)) && constant(other_in(n, cur))->numel() > 1 && !ks.back().spatial() &&
               per_feature(*constant(other_in(n, cur)), ks.back().N, false, cs.size()) && !ks.back().activated() && ks.back().residual < 0 &&
               !ks.back().softmax && !ks.back().attn && !ks.back().layernorm && ks.back().gate_of < 0 && !ks.back().qkv && !flat) {
      // A scale per output feature right after a dense layer (an inference BatchNorm's Mul -- the
      // canonical graph folds one after a Conv into the Conv -- or a layer scale): folded into W's
      // columns, the bias and a row bias.
      scale_features(ks.back(), constant(other_in(n, cur))->to_f32());  // (match_ops.cpp)
      absorb(ks.back(), n);
    } else if (n.op == "Mul" && !ks.empty() && !other_in(n, cur).empty() && !constant(other_in(n, cur))) {
      // Squeeze-excitation or a gated unit (match_norms.cpp).
      const std::string o2 = other_in(n, cur);
      gate_into(ks, kout, o2, g.value(o2).shape, cs, flat, unsupported);
      absorb(ks.back(), n);
    } else if (n.op == "Softmax" || n.op == "LogSoftmax") {
      const int64_t r = static_cast<int64_t>(g.value(n.inputs[0]).shape.size());
      const int64_t axis = n.attrs.get_int("axis", g.opset >= 13 ? -1 : 1);
      if (ks.empty() || ks.back().softmax || ks.back().attn || ks.back().residual >= 0 || ks.back().layernorm || (axis != -1 && axis != r - 1))
        unsupported(n.op + " is mapped only over the features, after the last dense layer");
      ks.back().softmax = true;
      ks.back().log_softmax = n.op == "LogSoftmax";
      absorb(ks.back(), n);
    } else if (n.op == "LayerNormalization" || n.op == "RMSNormalization") {
      // LayerNorm over the last axis (match_ops.cpp; on the graph input: an identity layer's chain ends).
      layernorm_into(ks, n, cur, cs, cur == input && !fmap, constant, unsupported);
      absorb(ks.back(), n);
      ks.back().name = n.outputs[0];  // the value's name (the canonical graph's fused node has a made-up one)
    } else {
      // An elementwise function of the running activation, at the chain ends of the kernel before
      // it, after its bias (elementwise.cpp).
      if (!kUnary.count(n.op))  // a structural op no branch above took (a Transpose that moves the features, ...)
        unsupported(n.op == "Transpose" ? "a Transpose that moves data is not mapped on the wafer in this build (one that only moves axes of size 1 is an alias)"
                                        : n.op == "Where" || n.op == "Slice" || n.op == "Concat"
                                            ? "op " + n.op + " is mapped by the wafer compiler only inside an attention block (a mask; rotary embeddings), not here in this build"
                                            : "op " + n.op + " is not mapped here by the wafer compiler in this build");
      std::string why;
      std::vector<Unary> us;
      const Tensor* pc = binary && n.inputs.size() == 2 ? constant(other_in(n, cur)) : nullptr;
      if (pc && pc->numel() > 1 && !ks.empty() && per_feature(*pc, ks.back().N, fmap, cs.size()) && (n.inputs[0] == cur || commutative)) {
        us = {per_feature_unary(n, *pc)};  // (match_norms.cpp)
      } else {
        us = unary_of(n, constant, why);
      }
      if (us.empty()) unsupported(n.op == "Add" ? "Add is mapped as a bias (a constant per output feature) right after a dense layer or Conv, as a residual, or as an Add of a scalar constant" : why);
      if (ks.empty() || flat) unsupported(n.op + " is mapped only after a dense layer or Conv (at its chain ends)");
      DenseKernel& k = ks.back();
      if (us[0].kind == Unary::Kind::prelu &&  // a slope per output feature: an array at the chain ends, among the kernel's own functions
          (!per_feature(*constant(n.inputs[1]), k.N, fmap, cs.size()) || k.layernorm || k.residual >= 0 || k.attn || k.softmax || k.gate_of >= 0))
        unsupported("PRelu with a slope per channel is mapped right after a dense layer or Conv (before a residual Add or a LayerNorm), one slope per output feature (" +
                    std::to_string(k.N) + ")");
      if ((us[0].kind == Unary::Kind::mul_per || us[0].kind == Unary::Kind::add_per) && (k.layernorm || k.residual >= 0 || k.attn || k.softmax || k.gate_of >= 0))
        unsupported(n.op + " by a constant per output feature is mapped among a layer's own functions (before a residual Add or a LayerNorm)");
      if (k.layernorm && !k.attn && !k.softmax && k.gate_of < 0 && !k.pkh) {  // after the LayerNorm, at the same chain ends
        k.acts_post_ln.insert(k.acts_post_ln.end(), us.begin(), us.end());
      } else {
        if (k.attn || k.softmax || k.layernorm || k.gate_of >= 0)
          unsupported(n.op + " after attention, a Softmax or a squeeze-excitation gate is not mapped on the wafer in this build");
        if (k.pkh && k.pavg) unsupported(n.op + " after an average pool is not mapped on the wafer (a mean does not commute with it); apply it before the pool");
        for (const Unary& u : us)  // after a MaxPool it runs before the pool: exact when max commutes with it
          if (k.pkh && !u.monotone()) unsupported(n.op + " after a MaxPool is not mapped on the wafer (it is applied before the pool, exact only for a non-decreasing function); apply it before the pool");
        auto& acts = k.residual >= 0 ? k.acts_after : k.acts;  // after the residual Add: applied after it
        acts.insert(acts.end(), us.begin(), us.end());
      }
      absorb(k, n);
    }
    {  // the output's parity: the chain input's as the node reads it (a dense layer's: its first input)
      const graph::Node& raw = g.nodes[i];
      std::string in_raw = raw.inputs.empty() ? std::string() : raw.inputs[0];
      for (const auto& v : raw.inputs)  // (a dense layer's cur is its first input)
        if (canon(v) == cur) in_raw = v;
      parity_of[n.outputs[0]] = !in_raw.empty() && parity(in_raw);
    }
    if (!ks.empty() && !flat && !tok_view && !tok_reshaped) {
      const auto [list, fns] = functions_list(ks.back());
      chain_pos[n.outputs[0]] = ChainPos{ks.size() - 1, list, fns->size()};
    }
    cur = n.outputs[0];
  }
  if (ks.empty()) throw InputError(g.source, "the graph has no dense layer to map", kOpsHint);
  if (up) throw InputError(g.source, "the graph ends in a nearest Resize; the wafer compiler maps one only into a Conv", kOpsHint);
  for (size_t l = 0; l < ks.size(); ++l)
    if (ks[l].reads_input2 && !ks[l].attn && !(l + 1 < ks.size() && ks[l + 1].attn && ks[l + 1].attn_k == static_cast<int64_t>(l) && ks[l + 1].reads_input2))
      throw InputError("kernel '" + ks[l].name + "'", "reads the second graph input ('" + input2 + "'), which the wafer compiler maps only as cross-attention's keys and values", kOpsHint);
  if (!input2.empty() && std::none_of(ks.begin(), ks.end(), [](const DenseKernel& k) { return k.reads_input2; }))
    throw InputError(g.source, "the second graph input ('" + input2 + "') is read by no dense layer; the wafer compiler maps a second input only as cross-attention's keys and values", kOpsHint);
  for (const auto& blk : blocks)
    if (!blk.done)
      throw InputError(g.source, "an attention block (its output '" + blk.out + "') must follow the dense layers computing its Q, K and then V (each with its bias)", kOpsHint);
  if (cur != canon(output)) throw InputError(g.source, "the graph's output '" + output + "' is not the end of the layer chain", kOpsHint);
  if (ks.back().rnn) ks.back().rnn_slot = rnn_slot;  // (the graph's output: a final state of the last step's rows)
  if (parity(output)) throw InputError(g.source, "the graph's output '" + output + "' has its rows in another order than the input's (a Transpose of the leading axes is not undone)", kOpsHint);
  // (A Flatten of the last Conv's map ending the graph -- SqueezeNet's head, a mean over the axes
  // that drops them -- is its [batch, C * positions] view: the output is read channel-major.)
  if (flat && !ks.back().spatial()) throw InputError(g.source, "the graph ends in a Flatten; the wafer compiler maps a Flatten only into a dense layer", kOpsHint);
  if (tok_view || tok_reshaped)
    throw InputError(g.source, "the graph ends in a Slice, Reshape or Transpose of tokens; the wafer compiler maps them only into a dense layer", kOpsHint);
  return ks;
}

}  // namespace

}  // namespace tessera::wafer::detail
