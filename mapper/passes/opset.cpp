// normalize_opset: the forms older opsets write, rewritten to opset 17's (canonicalize.hpp).
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/rewrite.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

constexpr int kCanonicalOpset = 17;

// Moves int-list attribute `attr` to input slot `slot` (padding with empty optional inputs).
void attr_to_input(Rewriter& rw, Node& n, const char* attr, size_t slot) {
  if (!n.attrs.has(attr)) return;
  const auto v = n.attrs.get_ints(attr);
  graph::Attributes kept;
  for (const auto& [k, a] : n.attrs.all())
    if (k != attr) kept.set(k, a);
  n.attrs = kept;
  if (n.inputs.size() <= slot) n.inputs.resize(slot + 1);
  n.inputs[slot] = rw.add_constant(n.name + "/" + attr, i64_tensor(v));
}

void float_attr_to_input(Rewriter& rw, Node& n, const char* attr, size_t slot, DType dt) {
  if (!n.attrs.has(attr)) return;
  const double v = n.attrs.get_float(attr, 0.0);
  graph::Attributes kept;
  for (const auto& [k, a] : n.attrs.all())
    if (k != attr) kept.set(k, a);
  n.attrs = kept;
  if (n.inputs.size() <= slot) n.inputs.resize(slot + 1);
  n.inputs[slot] = rw.add_constant(n.name + "/" + attr, Tensor::scalar_f32(static_cast<float>(v)).cast(dt));
}

// Softmax, LogSoftmax and Hardmax before opset 13 coerce the input to 2-D [prod(:axis),
// prod(axis:)]; from 13 they work along one axis. Equal when the axis is the last one.
void softmax_13(Rewriter& rw, size_t idx) {
  Node& n = rw.graph().nodes[idx];
  const Shape shape = rw.value(n.inputs[0]).shape;
  const int64_t r = static_cast<int64_t>(shape.size());
  int64_t axis = n.attrs.get_int("axis", 1);
  if (axis < 0) axis += r;
  int64_t inner = 1;
  for (int64_t i = axis; i < r; ++i) inner *= shape[static_cast<size_t>(i)];
  if (axis >= r - 1 || inner == shape.back()) {  // already along the last axis
    n.attrs.set("axis", int64_t{-1});
    return;
  }
  const DType dt = rw.value(n.inputs[0]).dtype;
  const int64_t outer = shape_numel(shape) / std::max<int64_t>(1, inner);
  const std::string flat = rw.add_value(n.outputs[0] + "/2d", dt, {outer, inner});
  const std::string soft = rw.add_value(n.outputs[0] + "/2d_out", dt, {outer, inner});
  Node r1{n.name + "/to2d", "Reshape", {}, {n.inputs[0], rw.add_constant(n.name + "/shape2d", i64_tensor({outer, inner}))}, {flat}};
  Node s = n;
  s.inputs = {flat};
  s.outputs = {soft};
  s.attrs.set("axis", int64_t{-1});
  Node r2{n.name + "/back", "Reshape", {}, {soft, rw.add_constant(n.name + "/shape", i64_tensor(shape))}, {n.outputs[0]}};
  rw.remove_node(idx);
  rw.add_node(std::move(r1));
  rw.add_node(std::move(s));
  rw.add_node(std::move(r2));
}

}  // namespace

// Ops whose form or meaning at this opset differs from opset 17's in a way this pass does not
// rewrite: the graph then keeps its opset (its ops are read as they were written).
bool unhandled(const Node& n, int opset) {
  return (n.op == "Resize" && opset < 11) || n.op == "Upsample" || (n.op == "TopK" && opset < 10) || (n.op == "RoiAlign" && opset < 16) ||
         (n.op == "BatchNormalization" && opset < 9) || n.op == "Scatter";
}

bool normalize_opset(Graph& g) {
  if (g.opset >= kCanonicalOpset) return false;
  for (const auto& n : g.nodes)
    if (unhandled(n, g.opset)) return false;
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const std::string& op = n.op;
    if (g.opset < 13 && (op == "ReduceSum" || op == "Squeeze" || op == "Unsqueeze")) attr_to_input(rw, n, "axes", 1);
    else if (g.opset < 13 && op == "Split") attr_to_input(rw, n, "split", 1);
    else if (g.opset < 13 && (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax")) softmax_13(rw, i);
    else if (g.opset < 11 && op == "Clip") {
      const DType dt = g.value(n.inputs[0]).dtype;
      float_attr_to_input(rw, n, "min", 1, dt);
      float_attr_to_input(rw, n, "max", 2, dt);
    } else if (g.opset < 11 && op == "Pad") {
      const DType dt = g.value(n.inputs[0]).dtype;
      attr_to_input(rw, n, "pads", 1);
      float_attr_to_input(rw, n, "value", 2, dt);
    } else if (g.opset < 10 && op == "Slice") {
      const auto starts = n.attrs.get_ints("starts"), ends = n.attrs.get_ints("ends");
      const auto axes = n.attrs.get_ints("axes");
      n.attrs = graph::Attributes{};
      n.inputs.resize(1);
      n.inputs.push_back(rw.add_constant(n.name + "/starts", i64_tensor(starts)));
      n.inputs.push_back(rw.add_constant(n.name + "/ends", i64_tensor(ends)));
      if (!axes.empty()) n.inputs.push_back(rw.add_constant(n.name + "/axes", i64_tensor(axes)));
    }
  }
  rw.commit();
  g.opset = kCanonicalOpset;
  return true;
}

}  // namespace tessera::passes
