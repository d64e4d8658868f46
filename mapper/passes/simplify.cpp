// simplify: one form per concept (canonicalize.hpp).
#include <algorithm>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/rewrite.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

// A node whose output equals its input: consumers read the input instead. A graph output keeps
// the node (it must be produced under its name), as an Identity.
void forward(Rewriter& rw, size_t idx, const std::string& in, const std::string& out) {
  if (rw.replace_uses(out, in)) {
    rw.remove_node(idx);
    return;
  }
  Node& n = rw.graph().nodes[idx];
  if (n.op == "Identity") return;
  Node id{n.name, "Identity", {}, {in}, {out}};
  rw.remove_node(idx);
  rw.add_node(std::move(id));
}

std::string shape_const(Rewriter& rw, const Node& n, const Shape& s) { return rw.add_constant(n.name + "/shape", i64_tensor(s)); }

void to_reshape(Rewriter& rw, size_t idx) {
  Node& n = rw.graph().nodes[idx];
  const Shape out = rw.value(n.outputs[0]).shape;
  Node r{n.name, "Reshape", {}, {n.inputs[0], shape_const(rw, n, out)}, {n.outputs[0]}};
  if (std::find(out.begin(), out.end(), 0) != out.end()) r.attrs.set("allowzero", int64_t{1});  // a 0 there is a size
  rw.remove_node(idx);
  rw.add_node(std::move(r));
}

// Split along `axis` into Slices of the outputs' sizes.
void split_to_slices(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  if (std::any_of(n.outputs.begin(), n.outputs.end(), [](const std::string& o) { return o.empty(); })) return;  // sizes unknown
  const int64_t r = static_cast<int64_t>(rw.value(n.inputs[0]).shape.size());
  int64_t axis = n.attrs.get_int("axis", 0);
  if (axis < 0) axis += r;
  int64_t start = 0;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const int64_t len = rw.value(n.outputs[k]).shape[static_cast<size_t>(axis)];
    {
      Node s{n.name + "/" + std::to_string(k), "Slice", {},
             {n.inputs[0], rw.add_constant(n.name + "/starts", i64_tensor({start})), rw.add_constant(n.name + "/ends", i64_tensor({start + len})),
              rw.add_constant(n.name + "/axes", i64_tensor({axis}))},
             {n.outputs[k]}};
      rw.add_node(std::move(s));
    }
    start += len;
  }
  rw.remove_node(idx);
}

// Gather of constant indices that are consecutive and ascending: a Slice (and a Reshape when a
// scalar index drops the axis).
bool gather_to_slice(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  const Tensor* ix = rw.constant(n.inputs[1]);
  if (!ix || is_float(ix->dtype()) || ix->numel() == 0 || ix->rank() > 1) return false;
  const Shape in = rw.value(n.inputs[0]).shape;
  const int64_t r = static_cast<int64_t>(in.size());
  int64_t axis = n.attrs.get_int("axis", 0);
  if (axis < 0) axis += r;
  auto v = ix->to_i64();
  const int64_t dim = in[static_cast<size_t>(axis)];
  for (auto& x : v)
    if (x < 0) x += dim;
  for (size_t k = 1; k < v.size(); ++k)
    if (v[k] != v[k - 1] + 1) return false;
  if (v[0] < 0 || v.back() >= dim) return false;
  const std::string out = n.outputs[0];
  const DType dt = rw.value(out).dtype;
  Shape sliced = in;
  sliced[static_cast<size_t>(axis)] = static_cast<int64_t>(v.size());
  const bool drop = ix->rank() == 0;
  rw.remove_node(idx);
  const std::string mid = drop ? rw.add_value(out + "/slice", dt, sliced) : out;
  rw.add_node(Node{n.name, "Slice", {},
                   {n.inputs[0], rw.add_constant(n.name + "/starts", i64_tensor({v[0]})),
                    rw.add_constant(n.name + "/ends", i64_tensor({v.back() + 1})), rw.add_constant(n.name + "/axes", i64_tensor({axis}))},
                   {mid}});
  if (drop) rw.add_node(Node{n.name + "/squeeze", "Reshape", {}, {mid, shape_const(rw, n, rw.value(out).shape)}, {out}});
  return true;
}

// Sum, Mean, Max, Min of several inputs: a chain of binary ops (Mean: Sum then / n).
void variadic(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  const std::string bin = n.op == "Sum" || n.op == "Mean" ? "Add" : n.op;
  const auto& outv = rw.value(n.outputs[0]);
  rw.remove_node(idx);
  std::string acc = n.inputs[0];
  for (size_t k = 1; k < n.inputs.size(); ++k) {
    const bool last = k + 1 == n.inputs.size() && n.op != "Mean";
    const std::string o = last ? n.outputs[0] : rw.add_value(n.outputs[0] + "/" + std::to_string(k), outv.dtype, outv.shape);
    rw.add_node(Node{n.name + "/" + std::to_string(k), bin, {}, {acc, n.inputs[k]}, {o}});
    acc = o;
  }
  if (n.op == "Mean") {
    const std::string c = rw.add_constant(n.name + "/n", Tensor::scalar_f32(static_cast<float>(n.inputs.size())).cast(outv.dtype));
    rw.add_node(Node{n.name + "/mean", "Div", {}, {acc, c}, {n.outputs[0]}});
  } else if (n.inputs.size() == 1) {
    if (!rw.replace_uses(n.outputs[0], acc)) rw.add_node(Node{n.name, "Identity", {}, {acc}, {n.outputs[0]}});
  }
}

// Gemm(A, B, C) = alpha * A' @ B' + beta * C: MatMul of (transposed) operands, Mul, Add.
void gemm_to_matmul(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  const auto& outv = rw.value(n.outputs[0]);
  const DType dt = outv.dtype;
  rw.remove_node(idx);
  auto transposed = [&](const std::string& v, const char* tag) {
    const Shape s = rw.value(v).shape;
    const std::string t = rw.add_value(v + "/T", rw.value(v).dtype, {s[1], s[0]});
    Node tr{n.name + "/" + tag, "Transpose", {}, {v}, {t}};
    tr.attrs.set("perm", std::vector<int64_t>{1, 0});
    rw.add_node(std::move(tr));
    return t;
  };
  const std::string a = n.attrs.get_int("transA", 0) ? transposed(n.inputs[0], "transA") : n.inputs[0];
  const std::string b = n.attrs.get_int("transB", 0) ? transposed(n.inputs[1], "transB") : n.inputs[1];
  const double alpha = n.attrs.get_float("alpha", 1.0), beta = n.attrs.get_float("beta", 1.0);
  const bool has_c = n.inputs.size() > 2 && !n.inputs[2].empty() && beta != 0.0;
  std::string y = (alpha != 1.0 || has_c) ? rw.add_value(n.outputs[0] + "/mm", dt, outv.shape) : n.outputs[0];
  rw.add_node(Node{n.name, "MatMul", {}, {a, b}, {y}});
  if (alpha != 1.0) {
    const std::string o = has_c ? rw.add_value(n.outputs[0] + "/alpha", dt, outv.shape) : n.outputs[0];
    rw.add_node(Node{n.name + "/alpha", "Mul", {}, {y, rw.add_constant(n.name + "/alpha", Tensor::scalar_f32(static_cast<float>(alpha)).cast(dt))}, {o}});
    y = o;
  }
  if (has_c) {
    std::string c = n.inputs[2];
    if (beta != 1.0) {
      const std::string cb = rw.add_value(c + "/beta", dt, rw.value(c).shape);
      rw.add_node(Node{n.name + "/beta", "Mul", {}, {c, rw.add_constant(n.name + "/beta", Tensor::scalar_f32(static_cast<float>(beta)).cast(dt))}, {cb}});
      c = cb;
    }
    rw.add_node(Node{n.name + "/bias", "Add", {}, {y, c}, {n.outputs[0]}});
  }
}

// A scalar scale before a layout op (Transpose, Reshape) read only by a MatMul moves past it:
// MatMul(T(x * c)) = MatMul(T(x) * c), exact (the scale commutes with moving elements), and a
// MatMul absorbs a scale of its input (no kernel of its own). The values keep their names where
// anything else reads them: the MatMul's input is still produced under its name.
bool scale_past_layout(Rewriter& rw, size_t idx) {
  const Node t = rw.graph().nodes[idx];
  const Node* m = rw.producer(t.inputs[0]);
  const Node* reader = rw.only_consumer(t.outputs[0]);
  if (!m || (m->op != "Mul" && m->op != "Div") || !reader || reader->op != "MatMul" || !rw.only_consumer(m->outputs[0])) return false;
  const size_t k = m->op == "Mul" && rw.scalar(m->inputs[0]) ? 0 : 1;  // the scale's slot
  if (!rw.scalar(m->inputs[k]) || rw.scalar(m->inputs[1 - k])) return false;
  const graph::Value& z = rw.value(t.outputs[0]);
  if (rw.value(m->inputs[k]).dtype != z.dtype || rw.value(m->inputs[1 - k]).shape != rw.value(m->outputs[0]).shape) return false;
  const Node mul = *m;
  const size_t mi = rw.producer_index(t.inputs[0]);
  Node moved = t;
  moved.inputs[0] = mul.inputs[1 - k];
  moved.outputs[0] = rw.add_value(t.outputs[0] + "/unscaled", z.dtype, z.shape);
  Node scale = mul;
  scale.inputs[1 - k] = moved.outputs[0];
  scale.outputs[0] = t.outputs[0];
  rw.remove_node(idx);
  rw.remove_node(mi);
  rw.add_node(std::move(moved));
  rw.add_node(std::move(scale));
  return true;
}

// A constant Pad of zeros: with all pads 0 it is the identity; read only by a Conv (as its input,
// explicit pads) and padding only the spatial axes by non-negative amounts, it is that Conv's
// pads (nn.ZeroPad2d or F.pad before a Conv; a "same" padding written out).
void fold_pad(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  const Tensor* pads = n.inputs.size() > 1 && !n.inputs[1].empty() ? rw.constant(n.inputs[1]) : nullptr;
  const bool given_value = n.inputs.size() > 2 && !n.inputs[2].empty();
  const Tensor* value = given_value ? rw.constant(n.inputs[2]) : nullptr;
  if (n.attrs.get_string("mode", "constant") != "constant" || !pads || (given_value && (!value || value->numel() != 1 || value->cast(DType::f64).to_f64()[0] != 0.0)) ||
      (n.inputs.size() > 3 && !n.inputs[3].empty()))  // (axes: opset 18's, not folded)
    return;
  const std::vector<int64_t> p = pads->to_i64();
  const size_t r = rw.value(n.inputs[0]).shape.size();
  if (p.size() != 2 * r) return;
  if (std::all_of(p.begin(), p.end(), [](int64_t v) { return v == 0; })) {
    forward(rw, idx, n.inputs[0], n.outputs[0]);
    return;
  }
  size_t ci = 0;
  const Node* c = rw.only_consumer(n.outputs[0], &ci);
  if (!c || c->op != "Conv" || c->inputs[0] != n.outputs[0] || (c->inputs.size() > 1 && c->inputs[1] == n.outputs[0]) || r < 3 ||
      c->attrs.get_string("auto_pad", "NOTSET") != "NOTSET")
    return;
  const size_t sp = r - 2;  // spatial axes
  if (p[0] || p[1] || p[r] || p[r + 1] || std::any_of(p.begin(), p.end(), [](int64_t v) { return v < 0; })) return;
  std::vector<int64_t> cp = c->attrs.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (cp.size() != 2 * sp) return;
  for (size_t a = 0; a < sp; ++a) cp[a] += p[2 + a], cp[sp + a] += p[r + 2 + a];
  Node conv = *c;
  conv.inputs[0] = n.inputs[0];
  conv.attrs.set("pads", cp);
  rw.remove_node(ci);
  rw.remove_node(idx);
  rw.add_node(std::move(conv));
}

}  // namespace

bool simplify(Graph& g) {
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string& op = n.op;
    const auto& out = g.value(n.outputs[0]);
    if (op == "Identity") {
      forward(rw, i, n.inputs[0], n.outputs[0]);
    } else if (op == "Dropout") {
      const bool training = n.inputs.size() > 2 && !n.inputs[2].empty() &&
                            (!rw.constant(n.inputs[2]) || rw.constant(n.inputs[2])->to_i64()[0] != 0);
      const bool mask_used = n.outputs.size() > 1 && !n.outputs[1].empty() && (!rw.consumers(n.outputs[1]).empty() || rw.is_output(n.outputs[1]));
      if (!training && !mask_used) forward(rw, i, n.inputs[0], n.outputs[0]);
    } else if (op == "Cast" && g.value(n.inputs[0]).dtype == out.dtype) {
      forward(rw, i, n.inputs[0], n.outputs[0]);
    } else if (op == "Expand" && g.value(n.inputs[0]).shape == out.shape) {
      forward(rw, i, n.inputs[0], n.outputs[0]);
    } else if (op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      to_reshape(rw, i);
    } else if (op == "Reshape") {
      const Tensor* s = rw.constant(n.inputs[1]);
      if (g.value(n.inputs[0]).shape == out.shape) forward(rw, i, n.inputs[0], n.outputs[0]);
      else if (!s || s->to_i64() != out.shape || n.attrs.has("allowzero")) to_reshape(rw, i);
    } else if (op == "Split") {
      split_to_slices(rw, i);
    } else if (op == "Gather") {
      gather_to_slice(rw, i);
    } else if ((op == "Sum" || op == "Mean" || op == "Max" || op == "Min") && n.inputs.size() != 2) {
      variadic(rw, i);
    } else if (op == "Gemm") {
      gemm_to_matmul(rw, i);
    } else if (op == "Pad") {
      fold_pad(rw, i);
    } else if (op == "Concat" && n.inputs.size() == 1) {  // (torch.cat of a list of one tensor: DenseNet's first layer)
      forward(rw, i, n.inputs[0], n.outputs[0]);
    }
    if ((op == "Transpose" || op == "Reshape") && !rw.removed(i)) scale_past_layout(rw, i);
  }
  return rw.commit();
}

}  // namespace tessera::passes
