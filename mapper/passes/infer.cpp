#include "isa/error.hpp"
#include "mapper/passes/passes.hpp"

#include "isa/checked.hpp"
#include "isa/interrupt.hpp"
#include "mapper/reference/kernels.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

bool is_unary_same(const std::string& op) {
  static const std::set<std::string> ops = {"Sqrt", "Exp", "Log", "Erf", "Neg", "Abs", "Reciprocal", "Relu",
                                            "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Identity", "Softmax",
                                            "LogSoftmax", "BatchNormalization"};
  return ops.count(op) != 0;
}

bool is_binary_broadcast(const std::string& op) {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow"};
  return ops.count(op) != 0;
}

Shape broadcast(const Shape& a, const Shape& b, const Graph& g, const Node& n) {
  Shape r(std::max(a.size(), b.size()));
  for (size_t i = 0; i < r.size(); ++i) {
    const int64_t da = i < r.size() - a.size() ? 1 : a[i - (r.size() - a.size())];
    const int64_t db = i < r.size() - b.size() ? 1 : b[i - (r.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      throw InputError(g.where(n), "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast",
                       "numpy broadcasting needs equal dimensions or 1, aligned from the right");
    r[i] = da == 1 ? db : da;
  }
  return r;
}

// Fast rules for the ops whose execution would be expensive; returns false when there is none.
bool infer_fast(Graph& g, const Node& n) {
  auto in = [&](size_t i) -> const graph::Value& { return g.value(n.inputs[i]); };
  auto set = [&](size_t i, DType t, Shape s) {
    auto& v = g.value(n.outputs[i]);
    v.dtype = t;
    v.shape = std::move(s);
    v.shape_known = true;
  };
  // The rules read inputs 0 and 1 and write output 0: a node without them goes to the executor,
  // which names the missing input.
  auto given = [&](size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); };
  if (n.outputs.empty() || n.outputs[0].empty() || !given(0)) return false;
  if (!given(1) && (is_binary_broadcast(n.op) || n.op == "MatMul" || n.op == "Gemm")) return false;
  if (is_unary_same(n.op) && n.outputs.size() == 1) {
    set(0, in(0).dtype, in(0).shape);
    return true;
  }
  if (is_binary_broadcast(n.op)) {
    if (in(0).dtype != in(1).dtype && n.op != "Pow")
      throw InputError(g.where(n), std::string("input dtypes differ: ") + std::string(dtype_name(in(0).dtype)) +
                                       " and " + std::string(dtype_name(in(1).dtype)));
    set(0, in(0).dtype, broadcast(in(0).shape, in(1).shape, g, n));
    return true;
  }
  if (n.op == "MatMul") {
    Shape a = in(0).shape, b = in(1).shape;
    if (a.empty() || b.empty()) return false;
    const bool a1 = a.size() == 1, b1 = b.size() == 1;
    if (a1) a.insert(a.begin(), 1);
    if (b1) b.push_back(1);
    if (a.back() != b[b.size() - 2])
      throw InputError(g.where(n), "MatMul inner dimensions differ: " + shape_str(in(0).shape) + " @ " +
                                       shape_str(in(1).shape));
    Shape batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), g, n);
    if (!a1) batch.push_back(a[a.size() - 2]);
    if (!b1) batch.push_back(b.back());
    set(0, in(0).dtype, batch);
    return true;
  }
  if (n.op == "Gemm") {
    const Shape& a = in(0).shape;
    const Shape& b = in(1).shape;
    if (a.size() != 2 || b.size() != 2)
      throw InputError(g.where(n), "Gemm needs 2-D A and B, got " + shape_str(a) + " and " + shape_str(b));
    const bool ta = n.attrs.get_int("transA", 0) != 0, tb = n.attrs.get_int("transB", 0) != 0;
    const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
    if (K != Kb)
      throw InputError(g.where(n), "Gemm inner dimensions differ: A " + shape_str(a) + (ta ? "^T" : "") + ", B " +
                                       shape_str(b) + (tb ? "^T" : ""));
    set(0, in(0).dtype, {M, N});
    return true;
  }
  return false;
}

// Runs a node on its inputs (constants with their data; other inputs as zeros of the right shape).
int64_t g_zeros_budget = 0;  // prepare(g, host_bytes)

std::vector<Tensor> run_node(const Graph& g, const Node& n, bool zeros_for_unknown) {
  if (g_zeros_budget > 0 && zeros_for_unknown) {
    double need = 0;
    std::string shapes;
    for (const auto& i : n.inputs)
      if (!i.empty() && !g.value(i).data) {
        double b = static_cast<double>(dtype_size(g.value(i).dtype));
        for (int64_t d : g.value(i).shape) b *= static_cast<double>(d);
        need += b;
        shapes += (shapes.empty() ? "" : ", ") + shape_str(g.value(i).shape);
      }
    if (need > static_cast<double>(g_zeros_budget)) {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f GiB", need / (1024.0 * 1024 * 1024));
      throw InputError(g.where(n), "learning this node's output shape means running it on zeros of its inputs (" + shapes + ": " + gib +
                                       "), more than the host-memory budget run.host_memory",
                       "use smaller shapes (batch, sequence), or raise run.host_memory if this machine has it");
    }
  }
  std::vector<Tensor> zeros;
  zeros.reserve(n.inputs.size());
  reference::OpCall call;
  call.op = n.op;
  call.node = n.name;
  call.opset = g.opset;
  call.attrs = &n.attrs;
  call.num_outputs = n.outputs.size();
  for (const auto& i : n.inputs) {
    if (i.empty()) {
      call.inputs.push_back(nullptr);
      continue;
    }
    const auto& v = g.value(i);
    if (v.data) {
      call.inputs.push_back(&*v.data);
    } else {
      if (!zeros_for_unknown || !v.shape_known) throw std::logic_error("run_node: input without data");
      // Zeros stand in for the value. Without a host-memory budget (prepare(g) called alone, e.g.
      // by the fuzz targets) 2^26 elements each (256 MiB of fp32; ops widen to fp64) keep shape
      // inference of a hostile file within a few GiB; with one (tessera run) the budget decides
      // (above).
      double count = 1, nonzero = 1;
      for (int64_t d : v.shape) {
        if (d < 0) throw InputError(g.where(n), "input '" + i + "' has a negative dimension: shape " + shape_str(v.shape));
        count *= static_cast<double>(d);
        if (d != 0) nonzero *= static_cast<double>(d);
      }
      if (nonzero > 9.0e18 || (g_zeros_budget <= 0 && count > 67108864.0))
        throw InputError(g.where(n), "input '" + i + "' of shape " + shape_str(v.shape) + " holds more than 2^26 elements",
                         "tessera infers shapes by running each op on zeros of its input shapes, up to 2^26 elements without a "
                         "host-memory budget");
      zeros.emplace_back(v.dtype, v.shape);
      call.inputs.push_back(&zeros.back());
    }
  }
  return reference::run_op(call);
}

}  // namespace

std::vector<size_t> shape_inputs(const std::string& op, int opset) {
  if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "OneHot" || op == "Compress") return {1};
  if (op == "ConstantOfShape" || op == "NonZero" || op == "Unique" || op == "HannWindow" || op == "HammingWindow" ||
      op == "BlackmanWindow")
    return {0};
  if (op == "NonMaxSuppression") return {0, 1, 2, 3, 4};
  if (op == "MaxUnpool") return {2};
  if (op == "Range") return {0, 1, 2};
  if (op == "Split" || op == "Squeeze" || op == "Unsqueeze" || op == "ReduceSum")
    return opset >= 13 ? std::vector<size_t>{1} : std::vector<size_t>{};
  if (op.rfind("Reduce", 0) == 0) return opset >= 18 ? std::vector<size_t>{1} : std::vector<size_t>{};
  if (op == "Slice") return opset >= 10 ? std::vector<size_t>{1, 2, 3, 4} : std::vector<size_t>{};
  if (op == "Pad") {
    if (opset >= 18) return {1, 3};
    return opset >= 11 ? std::vector<size_t>{1} : std::vector<size_t>{};
  }
  if (op == "TopK") return opset >= 10 ? std::vector<size_t>{1} : std::vector<size_t>{};
  if (op == "Resize") return opset >= 11 ? std::vector<size_t>{2, 3} : std::vector<size_t>{1};
  if (op == "Upsample") return opset >= 9 ? std::vector<size_t>{1} : std::vector<size_t>{};
  return {};
}

void infer_and_fold(Graph& g) {
  const auto order = g.topo_order();
  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t idx : order) {
    const Node& n = g.nodes[idx];
    poll_interrupt();
    bool all_const = true;
    for (const auto& i : n.inputs) {
      if (i.empty()) continue;
      const auto& v = g.value(i);
      if (!v.shape_known && !v.data)
        throw InputError(g.where(n), "the shape of input '" + i + "' is unknown", "give the graph input a static shape");
      all_const = all_const && v.data.has_value();
    }
    if (n.op == "Shape" && !n.inputs.empty() && !n.inputs[0].empty() && !g.value(n.inputs[0]).data) {
      // Shape needs only the input's shape: execute it on a zero tensor of that shape.
      all_const = true;
    }
    if (all_const) {
      auto outs = run_node(g, n, /*zeros_for_unknown=*/true);
      bool from_weights = false;
      for (const auto& i : n.inputs)
        if (!i.empty() && g.value(i).is_initializer) from_weights = true;
      for (size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k) {
        if (n.outputs[k].empty()) continue;
        auto& v = g.value(n.outputs[k]);
        v.dtype = outs[k].dtype();
        v.shape = outs[k].shape();
        v.shape_known = true;
        v.is_initializer = from_weights && is_float(v.dtype);
        v.data = std::move(outs[k]);
      }
      folded[idx] = true;
      continue;
    }
    for (size_t k : shape_inputs(n.op, g.opset)) {
      if (k < n.inputs.size() && !n.inputs[k].empty() && !g.value(n.inputs[k]).data)
        throw InputError(g.where(n), "input '" + n.inputs[k] + "' decides the output shape but is not a constant",
                         "tessera compiles static shapes; export the model with fixed shapes");
    }
    if (infer_fast(g, n)) continue;
    // Everything else is cheap to run: execute on zeros of the input shapes to learn the outputs.
    auto outs = run_node(g, n, /*zeros_for_unknown=*/true);
    for (size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      auto& v = g.value(n.outputs[k]);
      v.dtype = outs[k].dtype();
      v.shape = outs[k].shape();
      v.shape_known = true;
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!folded[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

void remove_dead(Graph& g) {
  using BGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;
  const auto prod = g.producers();
  // Vertex i < N: node i; vertex N: a sink that every graph-output producer feeds.
  const size_t N = g.nodes.size();
  BGraph b(N + 1);
  for (size_t i = 0; i < N; ++i)
    for (const auto& in : g.nodes[i].inputs) {
      auto it = prod.find(in);
      if (!in.empty() && it != prod.end()) boost::add_edge(it->second, i, b);
    }
  for (const auto& o : g.outputs) {
    auto it = prod.find(o);
    if (it != prod.end()) boost::add_edge(it->second, N, b);
  }
  std::vector<boost::default_color_type> color(N + 1, boost::white_color);
  auto rev = boost::make_reverse_graph(b);
  boost::breadth_first_search(rev, N, boost::visitor(boost::default_bfs_visitor()).color_map(color.data()));
  std::vector<Node> kept;
  for (size_t i = 0; i < N; ++i)
    if (color[i] != boost::white_color) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  std::set<std::string> used(g.outputs.begin(), g.outputs.end());
  used.insert(g.inputs.begin(), g.inputs.end());
  for (const auto& n : g.nodes) {
    used.insert(n.inputs.begin(), n.inputs.end());
    used.insert(n.outputs.begin(), n.outputs.end());
  }
  for (auto it = g.values.begin(); it != g.values.end();)
    it = used.count(it->first) ? std::next(it) : g.values.erase(it);
}

void prepare(Graph& g, int64_t host_bytes) {
  graph::verify(g);
  for (const auto& i : g.inputs)
    if (shape_numel(g.value(i).shape) == kCountMax)
      throw InputError("input '" + i + "'", "shape " + shape_str(g.value(i).shape) + " has more elements than a 64-bit count holds", "give a smaller shape");
  g_zeros_budget = host_bytes;
  try {
    infer_and_fold(g);
  } catch (...) {
    g_zeros_budget = 0;
    throw;
  }
  g_zeros_budget = 0;
  remove_dead(g);
  graph::verify(g);
  // Element counts must not overflow (shape_numel saturates; a saturated count is no shape).
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && g.value(o).shape_known && shape_numel(g.value(o).shape) == kCountMax)
        throw InputError(g.where(n), "output '" + o + "' of shape " + shape_str(g.value(o).shape) + " has more elements than a 64-bit count holds",
                         "check the shapes (a Reshape, Expand or Tile with a wrong size?)");
}

}  // namespace tessera::passes
