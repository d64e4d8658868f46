// The multi-head attention pattern of PyTorch's export (internal.hpp: AttnBlock), for match_layers.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

std::vector<AttnBlock> match_attention(const graph::Graph& g, std::map<std::string, size_t>& producer, const ConstantOf& constant,
                                       const SoleConsumer& sole, std::set<size_t>& consumed) {
  std::vector<AttnBlock> blocks;
  for (const size_t i : g.topo_order()) {
    const graph::Node& sm = g.nodes[i];
    if (sm.op != "Softmax" || !producer.count(sm.inputs[0])) continue;
    const int64_t sm_axis = sm.attrs.get_int("axis", g.opset >= 13 ? -1 : 1), sm_rank = static_cast<int64_t>(g.value(sm.inputs[0]).shape.size());
    if (sm_axis != -1 && sm_axis != sm_rank - 1) continue;  // over the keys only (an older opset's axis 1 would flatten the heads)
    // Rank 3: [batch x H, S, S] (nn.MultiheadAttention's export, [S, batch x H, dh] heads); rank 4:
    // [batch, H, S, S] (a model's own attention: [batch, S, H, dh] reshaped and transposed).
    const bool four = sm_rank == 4;
    if (sm_rank != 3 && !four) continue;
    AttnBlock blk;
    blk.seq_major = !four;
    std::vector<size_t> path = {i};
    // Back from the Softmax to the scores' MatMul: scalings (Mul or Div by a scalar constant) and
    // masks -- Where(constant condition, constant scalar, scores) (a causal masked_fill) or an Add of
    // a constant -- as an additive mask over [S, S] (the same for every sample and head), in the
    // scaled scores' units (a mask applied before a later scaling is scaled with it).
    const int64_t S = g.value(sm.inputs[0]).shape.back();
    auto is_ss = [&](const Tensor* t) {  // [S, S] after dropping leading 1s: the same for every sample and head
      if (!t) return false;
      Shape sh = t->shape();
      while (sh.size() > 2 && sh.front() == 1) sh.erase(sh.begin());
      return sh == Shape{S, S};
    };
    double post = 1.0;  // the scalings after the current node
    std::string sv = sm.inputs[0];
    bool ok = true;
    while (ok && producer.count(sv) && g.nodes[producer[sv]].op != "MatMul") {
      const graph::Node& pn = g.nodes[producer[sv]];
      const size_t pi = producer[sv];
      const Tensor* c1 = pn.inputs.size() == 2 ? constant(pn.inputs[1]) : nullptr;
      if ((pn.op == "Mul" || pn.op == "Div") && c1 && c1->numel() == 1) {
        const double c = c1->to_f32()[0];
        blk.scale *= pn.op == "Div" ? 1.0 / c : c;
        post *= pn.op == "Div" ? 1.0 / c : c;
        sv = pn.inputs[0];
      } else if (pn.op == "Where" && pn.inputs.size() == 3 && is_ss(constant(pn.inputs[0])) && constant(pn.inputs[1]) && constant(pn.inputs[1])->numel() == 1 &&
                 constant(pn.inputs[1])->to_f32()[0] <= -1e30) {
        // (only a fill of -inf, or float's lowest: the score it replaces then does not matter, so an
        // added -inf is the same; a finite fill would replace, not add, and is not matched)
        const std::vector<float> cond = constant(pn.inputs[0])->to_f32();
        if (blk.mask.empty()) blk.mask.assign(static_cast<size_t>(S * S), 0.0f);
        for (int64_t e = 0; e < S * S; ++e)
          if (cond[static_cast<size_t>(e)] != 0.0f) blk.mask[static_cast<size_t>(e)] = -INFINITY;
        sv = pn.inputs[2];
      } else if (pn.op == "Add" && pn.inputs.size() == 2 && (constant(pn.inputs[0]) || constant(pn.inputs[1]))) {
        const bool first = constant(pn.inputs[0]) != nullptr;
        const Tensor* m = constant(pn.inputs[first ? 0 : 1]);
        if (!is_ss(m)) {
          ok = false;
          break;
        }
        const std::vector<float> mv = m->to_f32();
        if (blk.mask.empty()) blk.mask.assign(static_cast<size_t>(S * S), 0.0f);
        for (int64_t e = 0; e < S * S; ++e) blk.mask[static_cast<size_t>(e)] += static_cast<float>(mv[static_cast<size_t>(e)] * post);
        sv = pn.inputs[first ? 1 : 0];
      } else {
        ok = false;
        break;
      }
      path.push_back(pi);
    }
    if (!ok || !producer.count(sv)) continue;
    const graph::Node& a = g.nodes[producer[sv]];
    const long ci = sole(sm.outputs[0], "MatMul");
    if (a.op != "MatMul" || ci < 0) continue;
    const graph::Node& cm = g.nodes[static_cast<size_t>(ci)];
    if (cm.inputs[0] != sm.outputs[0]) continue;
    path.push_back(producer[sv]);
    path.push_back(static_cast<size_t>(ci));
    // Rotary embeddings (LLaMA's q cos + rotate_half(q) sin, rotate_half(q) = [-q2, q1]): an Add of
    // Mul(t, cos) and Mul(Concat(Neg(Slice(t, dh/2:)), Slice(t, :dh/2)), sin) with constant cos and
    // sin of [S, dh]; t is returned (empty: not that pattern) and the nodes go on `path`.
    auto rope = [&](const graph::Node& add, std::vector<float>& cs, std::vector<float>& sn) -> std::string {
      if (add.op != "Add" || add.inputs.size() != 2 || !producer.count(add.inputs[0]) || !producer.count(add.inputs[1])) return "";
      auto mul_const = [&](const std::string& v, std::string& x, const Tensor*& c) {  // Mul(x, c) either way
        if (!producer.count(v)) return false;
        const graph::Node& m = g.nodes[producer[v]];
        if (m.op != "Mul" || m.inputs.size() != 2) return false;
        for (int side = 0; side < 2; ++side)
          if (constant(m.inputs[static_cast<size_t>(side)]) && !constant(m.inputs[static_cast<size_t>(1 - side)])) {
            c = constant(m.inputs[static_cast<size_t>(side)]), x = m.inputs[static_cast<size_t>(1 - side)];
            return true;
          }
        return false;
      };
      auto slice_of = [&](const std::string& v, const std::string& t, int64_t lo, int64_t hi) {  // Slice(t, lo:hi) on the last axis
        if (!producer.count(v)) return false;
        const graph::Node& sl = g.nodes[producer[v]];
        if (sl.op != "Slice" || sl.inputs.size() < 3 || sl.inputs[0] != t) return false;
        const Tensor *st = constant(sl.inputs[1]), *en = constant(sl.inputs[2]), *ax = sl.inputs.size() > 3 ? constant(sl.inputs[3]) : nullptr;
        if (!st || !en || st->numel() != 1 || en->numel() != 1) return false;
        const int64_t r = static_cast<int64_t>(g.value(t).shape.size()), aa = ax ? ax->to_i64()[0] : 0;
        if (ax ? (aa != -1 && aa != r - 1) : r != 1) return false;
        const int64_t s0 = st->to_i64()[0], e0 = std::min(en->to_i64()[0], hi);
        if (sl.inputs.size() > 4 && constant(sl.inputs[4]) && constant(sl.inputs[4])->to_i64()[0] != 1) return false;
        return s0 == lo && e0 == hi;
      };
      for (int o = 0; o < 2; ++o) {
        std::string x1, x2;
        const Tensor *c1 = nullptr, *c2 = nullptr;
        if (!mul_const(add.inputs[static_cast<size_t>(o)], x1, c1) || !mul_const(add.inputs[static_cast<size_t>(1 - o)], x2, c2)) continue;
        const Shape& ts = g.value(x1).shape;
        if (ts.empty() || !producer.count(x2)) continue;
        const int64_t dh = ts.back(), h = dh / 2, Sr = ts.size() >= 2 ? ts[ts.size() - 2] : 1;
        const graph::Node& cat = g.nodes[producer[x2]];
        if (cat.op != "Concat" || cat.inputs.size() != 2 || dh % 2 || c1->numel() != Sr * dh || c2->numel() != Sr * dh) continue;
        const int64_t cax = cat.attrs.get_int("axis", -1);
        if (cax != -1 && cax != static_cast<int64_t>(ts.size()) - 1) continue;
        if (!producer.count(cat.inputs[0]) || g.nodes[producer[cat.inputs[0]]].op != "Neg") continue;
        const graph::Node& ng = g.nodes[producer[cat.inputs[0]]];
        if (!slice_of(ng.inputs[0], x1, h, dh) || !slice_of(cat.inputs[1], x1, 0, h)) continue;
        cs = c1->to_f32(), sn = c2->to_f32();
        for (const std::string& v : {add.inputs[0], add.inputs[1], x2, cat.inputs[0], ng.inputs[0], cat.inputs[1]}) path.push_back(producer[v]);
        return x1;
      }
      return "";
    };
    // Back from an operand: scalar scalings, rotary embeddings, a Transpose with `perm` (K in the 4-D
    // form: [0, 2, 1, 3] then [0, 1, 3, 2], rotated between them), a Reshape from rows to [S, H, dh]
    // (3-D) or from [batch, S, d] to [batch, S, H, dh] (4-D).
    auto trace = [&](std::string v, std::vector<int64_t> perm, double* scale, std::vector<float>* rcos, std::vector<float>* rsin) -> std::string {
      bool transposed = false;
      while (producer.count(v)) {
        const size_t pi = producer[v];
        const graph::Node& pn = g.nodes[pi];
        if (scale && (pn.op == "Div" || pn.op == "Mul") && pn.inputs.size() == 2 && constant(pn.inputs[1]) && constant(pn.inputs[1])->numel() == 1) {
          const double c = constant(pn.inputs[1])->to_f32()[0];
          *scale *= pn.op == "Div" ? 1.0 / c : c;
          v = pn.inputs[0];
        } else if (four && !transposed && perm == std::vector<int64_t>{0, 2, 3, 1} && pn.op == "Transpose" && pn.attrs.get_ints("perm", {}) == std::vector<int64_t>{0, 1, 3, 2}) {
          perm = {0, 2, 1, 3};  // (K transposed last: rotated in Q's layout)
          v = pn.inputs[0];
        } else if (four && !transposed && rcos && rcos->empty() && pn.op == "Add") {
          const std::string t = rope(pn, *rcos, *rsin);  // (its other nodes go on path)
          if (t.empty()) return "";
          v = t;
        } else if (pn.op == "Transpose" && !transposed && pn.attrs.get_ints("perm", {}) == perm) {
          transposed = true;
          v = pn.inputs[0];
        } else if (pn.op == "Reshape" && transposed && !four && g.value(v).shape.size() == 3) {
          const Shape& hs = g.value(v).shape;  // [S, H, dh]
          // A batch: [S, batch, d] reshaped to [S, batch x H, dh] (nn.MultiheadAttention's export).
          const Shape& is = g.value(pn.inputs[0]).shape;
          const int64_t nb = is.size() == 3 && is[0] == hs[0] && is[1] * is[2] == hs[1] * hs[2] && hs[1] % is[1] == 0 ? is[1] : 1;
          if (blk.heads && (blk.heads != hs[1] / nb || blk.dh != hs[2] || blk.samples != nb)) return "";
          blk.heads = hs[1] / nb;
          blk.dh = hs[2];
          blk.samples = nb;
          path.push_back(pi);
          return pn.inputs[0];
        } else if (pn.op == "Reshape" && transposed && four && g.value(v).shape.size() == 4) {
          const Shape& hs = g.value(v).shape;  // [batch, S, H, dh] of [batch, S, d]
          const Shape& is = g.value(pn.inputs[0]).shape;
          if (is.size() != 3 || is[0] != hs[0] || is[1] != hs[1] || is[2] != hs[2] * hs[3]) return "";
          if (blk.heads && (blk.heads != hs[2] || blk.dh != hs[3] || blk.samples != hs[0])) return "";
          blk.heads = hs[2];
          blk.dh = hs[3];
          blk.samples = hs[0];
          path.push_back(pi);
          return pn.inputs[0];
        } else {
          return "";
        }
        path.push_back(pi);
      }
      return "";
    };
    const std::vector<int64_t> pq = four ? std::vector<int64_t>{0, 2, 1, 3} : std::vector<int64_t>{1, 0, 2}, pk = four ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{1, 2, 0};
    blk.q = trace(a.inputs[0], pq, &blk.scale, &blk.q_cos, &blk.q_sin);
    blk.k = trace(a.inputs[1], pk, nullptr, &blk.k_cos, &blk.k_sin);
    blk.v = trace(cm.inputs[1], pq, nullptr, nullptr, nullptr);
    const long t = sole(cm.outputs[0], "Transpose");
    const long r = t < 0 ? -1 : sole(g.nodes[static_cast<size_t>(t)].outputs[0], "Reshape");
    if (blk.q.empty() || blk.k.empty() || blk.v.empty() || r < 0 || g.nodes[static_cast<size_t>(t)].attrs.get_ints("perm", {}) != pq)
      continue;
    path.push_back(static_cast<size_t>(t));
    path.push_back(static_cast<size_t>(r));
    blk.out = g.nodes[static_cast<size_t>(r)].outputs[0];
    const Shape& os = g.value(blk.out).shape;
    if (os.empty() || os.back() != blk.heads * blk.dh) continue;
    for (const size_t q : path) consumed.insert(q);
    blocks.push_back(blk);
  }
  return blocks;
}

void pair_rotary_features(Compiled& c, const DenseKernel& k) {
  const int64_t fb = k.feat_nb(), dh = k.dh;
  const std::string where = "kernel '" + k.name + "'";
  if (k.qkv || fb % 2 != 0 || dh % fb != 0)
    throw InputError(where, "rotary embeddings rotate pairs of a head's features; this mapping gives a chain-end PE " + std::to_string(fb) + " of a head's " + std::to_string(dh) +
                                " features" + (k.qkv ? " in a fused Q, K, V kernel" : ", which is not a whole number of pairs"),
                     k.qkv ? "give a block whose chain ends hold whole heads (mapping.wafer_block), or use \"mapping\": {\"mode\": \"weight_streaming\"}, which splits heads with rotary embeddings"
                           : "give a rectangle whose chain ends hold whole heads or an even part of one (mapping.wafer_rect), or run it on target.kind neuroncore");
  const std::string hint = "give a rectangle whose chain ends hold whole heads (mapping.wafer_rect), or run it on target.kind neuroncore";
  for (const int64_t src : {k.attn_q, k.attn_k}) {
    if (src == k.attn_k && k.attn_k == k.attn_q) break;  // (one kernel for both: reordered once)
    DenseKernel& p = c.kernels[static_cast<size_t>(src)];
    // Only the scores may read the reordered features: no other reader of the output (or of its
    // value before a LayerNorm), no other attention over it.
    for (const auto& m : c.kernels)
      if (m.src == src || (m.residual == src && (m.res_out || m.res_preln)) || (&m != &k && m.attn && (m.attn_q == src || m.attn_k == src)))
        throw InputError(where, "rotary embeddings over heads split across PEs reorder the features of kernel '" + p.name + "', which kernel '" + m.name + "' reads too", hint);
    // Per-feature work at its own chain ends other than elementwise functions and a LayerNorm
    // (whose statistics do not depend on the order; its scale and bias are reordered too).
    if (p.residual >= 0 || p.res_mul || p.gate_of >= 0 || p.row_period || p.softmax)
      throw InputError(where, "rotary embeddings over heads split across PEs reorder the features of kernel '" + p.name + "', whose chain ends add or multiply per-feature values", hint);
    auto reorder = [&](std::vector<float>& v, int64_t rows) {  // v [rows, N]: its columns
      const std::vector<float> old = v;
      for (int64_t n = 0; n < p.N; ++n) {
        const int64_t from = n / dh * dh + DenseKernel::rotary_pair_feature(n % dh, fb, dh);
        for (int64_t r = 0; r < rows; ++r) v[static_cast<size_t>(r * p.N + n)] = old[static_cast<size_t>(r * p.N + from)];
      }
    };
    reorder(p.W, p.K);
    reorder(p.bias, 1);
    if (p.layernorm) {
      reorder(p.ln_gamma, 1);
      if (!p.ln_beta.empty()) reorder(p.ln_beta, 1);
    }
  }
}

std::vector<float> rotary_table(const DenseKernel& k, const std::vector<float>& table, int64_t nbk) {
  const int64_t rw = k.rot_width();
  if (rw == k.dh) return table;
  const int64_t S = static_cast<int64_t>(table.size()) / k.dh, p0 = nbk * k.feat_nb() % k.dh;  // the PE's first position in its head
  std::vector<float> out(static_cast<size_t>(S * rw));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < rw; ++i) out[static_cast<size_t>(s * rw + i)] = table[static_cast<size_t>(s * k.dh + DenseKernel::rotary_pair_feature(p0 + i, rw, k.dh))];
  return out;
}

}  // namespace tessera::wafer::detail
