#include "mapper/graph/summary.hpp"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "isa/checked.hpp"

namespace tessera::graph {

std::string count_str(int64_t v) { return v == kCountMax ? std::string(">9.2e18") : std::to_string(v); }

namespace {
int64_t numel_of(const Graph& g, const std::string& name) {
  if (name.empty()) return 0;
  return shape_numel(g.value(name).shape);
}
}  // namespace

int64_t node_flops(const Graph& g, const Node& n) {
  static const std::set<std::string> movement = {
      "Reshape",   "Transpose",       "Flatten",        "Squeeze",  "Unsqueeze",    "Concat",
      "Split",     "Slice",           "Gather",         "Cast",     "Identity",     "Constant",
      "Shape",     "Expand",          "Tile",           "Pad",      "DepthToSpace", "SpaceToDepth",
      "Trilu",     "ReverseSequence", "GatherElements", "GatherND", "Scatter",      "ScatterElements",
      "ScatterND", "Compress",        "NonZero",        "OneHot",   "CastLike",     "ConstantOfShape",
      "Range",     "EyeLike",         "Size",           "Dropout",  "MaxUnpool"};
  if (movement.count(n.op)) return 0;
  const int64_t out = n.outputs.empty() ? 0 : numel_of(g, n.outputs[0]);
  if (n.op == "RNN" || n.op == "GRU" || n.op == "LSTM") {
    // Per step, batch entry and direction: the gates' two matrix-vector products.
    const Shape& w = g.value(n.inputs[1]).shape;  // [dirs, gates * H, I]
    const Shape& r = g.value(n.inputs[2]).shape;  // [dirs, gates * H, H]
    const Shape& x = g.value(n.inputs[0]).shape;  // [S, B, I] or [B, S, I]
    if (w.size() != 3 || r.size() != 3 || x.size() != 3) return out;
    return sat_mul(sat_mul(sat_mul(sat_mul(2 * w[0], w[1]), sat_add(w[2], r[2])), x[0]), x[1]);
  }
  if (n.op == "MatMul") {
    const Shape& a = g.value(n.inputs[0]).shape;
    return sat_mul(sat_mul(2, out), a.empty() ? 1 : a.back());
  }
  if (n.op == "Gemm") {
    const Shape& a = g.value(n.inputs[0]).shape;
    const int64_t K = n.attrs.get_int("transA", 0) ? a[0] : a[1];
    const bool has_c = n.inputs.size() > 2 && !n.inputs[2].empty();
    return sat_add(sat_mul(sat_mul(2, out), K), has_c ? out : 0);
  }
  if (n.op == "Conv" || n.op == "ConvTranspose") {
    const Shape& w = g.value(n.inputs[1]).shape;
    int64_t kernel = 1;
    for (size_t i = 2; i < w.size(); ++i) kernel = sat_mul(kernel, w[i]);
    const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (n.op == "Conv") return sat_add(sat_mul(sat_mul(sat_mul(2, out), w[1]), kernel), bias ? out : 0);
    // ConvTranspose weight is [Cin, Cout/group, k...]: every input element meets Cout/group*kernel.
    return sat_add(sat_mul(sat_mul(sat_mul(2, numel_of(g, n.inputs[0])), w[1]), kernel), bias ? out : 0);
  }
  if (n.op == "Softmax" || n.op == "LogSoftmax") return sat_mul(5, out);
  if (n.op == "LayerNormalization") return sat_mul(8, out);
  if (n.op == "BatchNormalization") return sat_mul(2, out);
  if (n.op.rfind("Reduce", 0) == 0 || n.op.find("Pool") != std::string::npos) {
    if (n.op == "MaxPool" || n.op == "AveragePool") {
      int64_t k = 1;
      for (auto d : n.attrs.get_ints("kernel_shape")) k = sat_mul(k, d);
      return sat_mul(out, k);
    }
    return numel_of(g, n.inputs[0]);
  }
  return out;  // elementwise and activations
}

int64_t node_param_bytes(const Graph& g, const Node& n) {
  int64_t b = 0;
  for (const auto& i : n.inputs) {
    if (i.empty()) continue;
    const auto& v = g.value(i);
    if (v.data && v.is_initializer && is_float(v.dtype) && v.data->numel() > 1) b += static_cast<int64_t>(v.data->nbytes());
  }
  return b;
}

GraphTotals totals(const Graph& g) {
  GraphTotals t;
  std::set<std::string> counted;
  for (const auto& n : g.nodes) {
    t.flops = sat_add(t.flops, node_flops(g, n));
    for (const auto& i : n.inputs) {
      if (i.empty() || counted.count(i)) continue;
      const auto& v = g.value(i);
      if (v.data && v.is_initializer && is_float(v.dtype) && v.data->numel() > 1) {
        counted.insert(i);
        t.param_bytes = sat_add(t.param_bytes, static_cast<int64_t>(v.data->nbytes()));
        t.params = sat_add(t.params, v.data->numel());
      }
    }
  }
  return t;
}

void print_graph(std::ostream& os, const Graph& g) {
  auto type_of = [&](const std::string& name) {
    if (name.empty()) return std::string("-");
    const auto& v = g.value(name);
    return std::string(dtype_name(v.dtype)) + shape_str(v.shape);
  };
  os << "graph " << g.source << " (opset " << g.opset << "): " << g.nodes.size() << " nodes\n";
  for (const auto& i : g.inputs) os << "  input  " << i << ": " << type_of(i) << "\n";
  for (const auto& o : g.outputs) os << "  output " << o << ": " << type_of(o) << "\n";
  os << "\n" << std::left << std::setw(28) << "node" << std::setw(20) << "op" << std::setw(30) << "output"
     << std::right << std::setw(14) << "param bytes" << std::setw(20) << "FLOPs" << "\n";
  for (size_t idx : g.topo_order()) {
    const auto& n = g.nodes[idx];
    std::string name = n.name.size() > 27 ? n.name.substr(0, 24) + "..." : n.name;
    os << std::left << std::setw(28) << name << std::setw(20) << n.op << std::setw(30)
       << (n.outputs.empty() ? "-" : type_of(n.outputs[0])) << std::right << std::setw(14) << node_param_bytes(g, n)
       << std::setw(20) << count_str(node_flops(g, n)) << "\n";
  }
  const auto t = totals(g);
  os << "\ntotal: " << g.nodes.size() << " nodes, " << t.params << " parameters (" << t.param_bytes
     << " bytes), " << count_str(t.flops) << " FLOPs\n";
}

}  // namespace tessera::graph
