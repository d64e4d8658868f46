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
          // A batch: [S, batch, d] reshaped to [S, batch x H, dh] (nn.MultiheadAttention's export).
          const Shape& is = g.value(pn.inputs[0]).shape;
          const int64_t nb = is.size() == 3 && is[0] == hs[0] && is[1] * is[2] == hs[1] * hs[2] && hs[1] % is[1] == 0 ? is[1] : 1;
          if (blk.heads && (blk.heads != hs[1] / nb || blk.dh != hs[2] || blk.samples != nb)) return "";
          blk.heads = hs[1] / nb;
          blk.dh = hs[2];
          blk.samples = nb;
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
  return blocks;
}

}  // namespace tessera::wafer::detail
