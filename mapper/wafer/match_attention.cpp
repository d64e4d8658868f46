// The multi-head attention pattern of PyTorch's export (internal.hpp: AttnBlock), for match_layers.
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
      } else if (pn.op == "Where" && pn.inputs.size() == 3 && constant(pn.inputs[0]) && constant(pn.inputs[1]) && constant(pn.inputs[1])->numel() == 1 &&
                 constant(pn.inputs[0])->numel() == S * S) {
        const std::vector<float> cond = constant(pn.inputs[0])->to_f32();
        const double x = constant(pn.inputs[1])->to_f32()[0];
        if (blk.mask.empty()) blk.mask.assign(static_cast<size_t>(S * S), 0.0f);
        for (int64_t e = 0; e < S * S; ++e)
          if (cond[static_cast<size_t>(e)] != 0.0f) blk.mask[static_cast<size_t>(e)] = static_cast<float>(x * post);  // (replaces: -inf, or a large negative)
        sv = pn.inputs[2];
      } else if (pn.op == "Add" && pn.inputs.size() == 2 && (constant(pn.inputs[0]) || constant(pn.inputs[1]))) {
        const bool first = constant(pn.inputs[0]) != nullptr;
        const Tensor* m = constant(pn.inputs[first ? 0 : 1]);
        if (m->numel() != S * S) {
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
    blk.q = trace(a.inputs[0], pq, &blk.scale);
    blk.k = trace(a.inputs[1], pk, nullptr);
    blk.v = trace(cm.inputs[1], pq, nullptr);
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

}  // namespace tessera::wafer::detail
