// The fused projections of attention (nn.MultiheadAttention's in_proj) split into their column
// slices -- a graph rewrite before the kernels are matched (match_layers.cpp) -- and the names of
// the slices' constants, which training maps back to the parameter (param_slice, compile.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/passes/rewrite.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

std::string slice_tag(int64_t lo, int64_t hi) { return "/cols" + std::to_string(lo) + "_" + std::to_string(hi); }

// A packed projection -- MatMul of x by a constant [K, N] weight (and a bias Add of N constants)
// whose output is read only by Slices of its last axis, as nn.MultiheadAttention's in_proj exports
// Q, K and V -- becomes one MatMul (and Add) per Slice of the weight's (and bias') columns, each
// producing its Slice's value: a dense layer per slice, its outputs on chain ends of their own, as
// the attention expects Q, K and V. Returns whether it changed g.

bool split_sliced_projections(graph::Graph& g) {
  passes::Rewriter rw(g);
  for (size_t mi = 0; mi < g.nodes.size(); ++mi) {
    const graph::Node& mm = g.nodes[mi];
    const Tensor* w = mm.op == "MatMul" && mm.inputs.size() == 2 ? rw.constant(mm.inputs[1]) : nullptr;
    if (!w || w->rank() != 2) continue;
    const int64_t K = w->shape()[0], N = w->shape()[1];
    std::string out = mm.outputs[0];
    size_t ai = SIZE_MAX;  // the bias Add, if it is the MatMul's one reader
    const Tensor* bias = nullptr;
    std::string bias_name;
    if (const graph::Node* a = rw.only_consumer(out, &ai); a && a->op == "Add") {
      bias_name = a->inputs[0] == out ? a->inputs[1] : a->inputs[0];
      bias = rw.constant(bias_name);
      if (bias && bias->numel() == N) out = a->outputs[0];
      else bias = nullptr;
    }
    if (!bias) ai = SIZE_MAX;
    struct Piece { int64_t lo, hi; size_t node; };
    std::vector<Piece> pieces;
    bool ok = !rw.consumers(out).empty() && !rw.is_output(out);
    for (const size_t u : rw.consumers(out)) {
      const graph::Node& s = g.nodes[u];
      auto in = [&](size_t i) { return i < s.inputs.size() && !s.inputs[i].empty() ? rw.constant(s.inputs[i]) : nullptr; };
      auto given = [&](size_t i) { return i < s.inputs.size() && !s.inputs[i].empty(); };
      const Tensor *st = in(1), *en = in(2), *ax = in(3), *sp = in(4);
      const int64_t rank = static_cast<int64_t>(g.value(out).shape.size()), axis = ax ? ax->to_i64()[0] : 0;
      if (s.op != "Slice" || s.inputs[0] != out || !st || !en || st->numel() != 1 || en->numel() != 1 || (given(3) && !ax) || (given(4) && !sp) ||
          (sp && sp->to_i64()[0] != 1) || (axis != -1 && axis != rank - 1)) {
        ok = false;
        break;
      }
      auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + N : v, int64_t{0}, N); };
      pieces.push_back({clampi(st->to_i64()[0]), clampi(en->to_i64()[0]), u});
    }
    if (!ok || pieces.size() < 2) continue;
    std::sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) { return x.lo < y.lo; });
    const auto wv = w->to_f32();
    const std::vector<float> bv = bias ? bias->to_f32() : std::vector<float>{};
    for (const Piece& p : pieces) {
      const int64_t n = p.hi - p.lo;
      const std::string tag = slice_tag(p.lo, p.hi);  // (param_slice reads it back: training maps the slices to the parameter)
      std::vector<float> wp(static_cast<size_t>(K * n));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < n; ++j) wp[static_cast<size_t>(k * n + j)] = wv[static_cast<size_t>(k * N + p.lo + j)];
      const std::string wname = rw.add_constant(mm.inputs[1] + tag, Tensor::from_f32({K, n}, std::move(wp)));
      const std::string& sout = g.nodes[p.node].outputs[0];  // the Slice's value, now the new nodes'
      if (!bias) {
        rw.add_node({mm.name + tag, "MatMul", {}, {mm.inputs[0], wname}, {sout}});
        continue;
      }
      const std::string mout = rw.add_value(sout + "/matmul", DType::f32, g.value(sout).shape);
      rw.add_node({mm.name + tag, "MatMul", {}, {mm.inputs[0], wname}, {mout}});
      const std::string bname = rw.add_constant(bias_name + tag, Tensor::from_f32({n}, std::vector<float>(bv.begin() + p.lo, bv.begin() + p.hi)));
      rw.add_node({mm.name + tag + "/bias", "Add", {}, {mout, bname}, {sout}});  // the kernel keeps the MatMul's name
    }
    rw.remove_node(mi);
    if (ai != SIZE_MAX) rw.remove_node(ai);
    for (const Piece& p : pieces) rw.remove_node(p.node);
  }
  return rw.commit();
}

}  // namespace tessera::wafer::detail

namespace tessera::wafer {

std::optional<ParamSlice> param_slice(const std::string& value) {
  const size_t at = value.rfind("/cols");
  if (at == std::string::npos) return std::nullopt;
  const std::string r = value.substr(at + 5);
  const size_t us = r.find('_');
  if (us == std::string::npos || us == 0 || us + 1 >= r.size() || r.find_first_not_of("0123456789_") != std::string::npos) return std::nullopt;
  ParamSlice p{value.substr(0, at), std::stoll(r.substr(0, us)), std::stoll(r.substr(us + 1))};
  if (p.hi <= p.lo || detail::slice_tag(p.lo, p.hi) != value.substr(at)) return std::nullopt;
  return p;
}

}  // namespace tessera::wafer
