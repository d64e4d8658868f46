#pragma once
// Private to autodiff: the builder of training-graph nodes and the per-op gradient rules
// (gradients.cpp), shared by autodiff.cpp.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/graph/graph.hpp"

namespace tessera::passes::detail {

extern const char* kHint;  // what the rules cover, for errors

// Builds nodes into the training graph with fresh value names.
struct Builder {
  graph::Graph& g;
  DType dt;
  int& next;  // shared by every builder of a graph: node and value names stay unique

  std::string fresh(const std::string& hint) {
    std::string n;
    do n = hint + "#" + std::to_string(next++);
    while (g.has_value(n));
    return n;
  }
  std::string node(const std::string& op, std::vector<std::string> inputs, graph::Attributes attrs = {}, const std::string& hint = "") {
    graph::Node n;
    n.op = op;
    n.name = fresh("train/" + (hint.empty() ? op : hint));
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    const std::string out = fresh(hint.empty() ? "t/" + op : hint);
    n.outputs = {out};
    g.values[out] = graph::Value{out, dt, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(n));
    return out;
  }
  std::string scalar(double v) {
    const std::string n = fresh("c");
    graph::Value val{n, dt, {}, true, Tensor::from_f32({}, {static_cast<float>(v)}).cast(dt), false};
    if (dt == DType::f64) {  // exact in fp64 (gradient checks)
      Tensor t(DType::f64, {});
      t.as<double>()[0] = v;
      val.data = t;
    }
    g.values[n] = std::move(val);
    return n;
  }
  std::string ints(const std::vector<int64_t>& v) {
    const std::string n = fresh("axes");
    Tensor t(DType::i64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.as<int64_t>().begin());
    g.values[n] = graph::Value{n, DType::i64, t.shape(), true, t, false};
    return n;
  }
  // Reshape x to a static shape.
  std::string reshape(const std::string& x, const Shape& shape) { return node("Reshape", {x, ints(std::vector<int64_t>(shape.begin(), shape.end()))}); }
  std::string transpose_perm(const std::string& x, const std::vector<int64_t>& perm) {
    graph::Attributes a;
    a.set("perm", perm);
    return node("Transpose", {x}, a);
  }
  std::string transpose(const std::string& x) {
    graph::Attributes a;
    a.set("perm", std::vector<int64_t>{1, 0});
    return node("Transpose", {x}, a);
  }
  // A constant tensor of `shape` filled with `v`.
  std::string zeros(const Shape& shape, double v) {
    const std::string n = fresh(v == 0.0 ? "zeros" : "ones");
    g.values[n] = graph::Value{n, dt, shape, true, Tensor::from_f32(shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)), static_cast<float>(v))).cast(dt), false};
    return n;
  }
  std::string concat(const std::vector<std::string>& parts, int64_t axis) {
    graph::Attributes a;
    a.set("axis", axis);
    return node("Concat", parts, a);
  }
  std::string mul(const std::string& a, const std::string& b) { return node("Mul", {a, b}); }
  std::string add(const std::string& a, const std::string& b) { return node("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return node("Sub", {a, b}); }
  // Sum over `axes`; opset >= 13 takes them as an input.
  std::string reduce_sum(const std::string& x, const std::vector<int64_t>& axes, bool keepdims) {
    graph::Attributes a;
    a.set("keepdims", int64_t{keepdims ? 1 : 0});
    if (axes.empty()) return node("ReduceSum", {x}, a);
    if (g.opset >= 13) return node("ReduceSum", {x, ints(axes)}, a);
    a.set("axes", axes);
    return node("ReduceSum", {x}, a);
  }
  // Mean over `axes` (opset >= 18 takes them as an input).
  std::string reduce_mean(const std::string& x, const std::vector<int64_t>& axes, bool keepdims) {
    graph::Attributes a;
    a.set("keepdims", int64_t{keepdims ? 1 : 0});
    if (g.opset >= 18) return node("ReduceMean", {x, ints(axes)}, a);
    a.set("axes", axes);
    return node("ReduceMean", {x}, a);
  }
  std::string reduce_mean_all(const std::string& x) {
    graph::Attributes a;
    a.set("keepdims", int64_t{0});
    return node("ReduceMean", {x}, a);
  }
  // The gradient of a broadcast operand of shape `s` from the output's gradient of shape `out`.
  std::string unbroadcast(const std::string& go, const Shape& s, const Shape& out) {
    if (s == out) return go;
    const size_t lead = out.size() - s.size();
    std::vector<int64_t> drop, keep1;
    for (size_t i = 0; i < lead; ++i) drop.push_back(static_cast<int64_t>(i));
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == 1 && out[lead + i] != 1) keep1.push_back(static_cast<int64_t>(lead + i));
    std::string r = go;
    if (!keep1.empty()) r = reduce_sum(r, keep1, true);
    if (!drop.empty()) r = reduce_sum(r, drop, false);
    return r;
  }
};

// What a gradient rule works with: the forward graph, the builder of backward nodes, the
// gradients found so far (acc adds to them) and which values need one.
struct Backward {
  const graph::Graph& forward;
  graph::Graph& g;
  Builder& b;
  std::map<std::string, std::string>& grad;
  const std::set<std::string>& needs;
  std::function<std::string(const std::string&)> low;  // the operand as the forward node read it (mixed precision)
  void acc(const std::string& v, const std::string& gv) {
    auto it = grad.find(v);
    if (it == grad.end()) grad[v] = gv;
    else it->second = b.add(it->second, gv);
  }
  const Shape& shape(const std::string& v) const { return forward.value(v).shape; }
};

// Adds the gradients of node `n`'s inputs given its output's gradient `go`; an op without a rule
// is an InputError naming the node.
void differentiate(Backward& bw, const graph::Node& n, const std::string& go);

}  // namespace tessera::passes::detail
