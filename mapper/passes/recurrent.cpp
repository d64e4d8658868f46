// unroll_recurrent (canonicalize.hpp): RNN, GRU and LSTM with a static sequence length as the ops of
// each step, so every target compiles them from matmuls, slices and elementwise ops. The input
// projection of all steps is one matmul; each step adds H_{t-1} R^T and applies the gates (ONNX
// semantics, default activations). Left as it is (for the target to refuse, naming the node) when
// it uses something the unrolling does not cover: other activations, clip, input_forget, the
// batch-first layout, per-sequence lengths, computed weights.
#include <algorithm>
#include <cmath>

#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/rewrite.hpp"

namespace tessera::passes {

using graph::Graph;
using graph::Node;

namespace {

// Adds nodes with fresh value names and known shapes.
struct Ops {
  Rewriter& rw;
  std::string base;
  DType dt;
  std::string node(const std::string& op, std::vector<std::string> in, const Shape& shape, graph::Attributes a = {}, const std::string& out = "") {
    const std::string o = out.empty() ? rw.add_value(base + "/" + op, dt, shape) : out;
    Node n{rw.fresh(base + "/" + op), op, std::move(a), std::move(in), {o}};
    rw.add_node(std::move(n));
    return o;
  }
  std::string constant(const std::string& tag, Tensor t) { return rw.add_constant(base + "/" + tag, std::move(t)); }
  std::string ints(const std::vector<int64_t>& v) { return constant("i", i64_tensor(v)); }
  std::string slice(const std::string& v, int64_t axis, int64_t start, int64_t len, Shape shape) {
    shape[static_cast<size_t>(axis)] = len;
    return node("Slice", {v, ints({start}), ints({start + len}), ints({axis})}, shape);
  }
  std::string reshape(const std::string& v, const Shape& s) { return node("Reshape", {v, ints(s)}, s); }
  std::string bin(const std::string& op, const std::string& a, const std::string& b, const Shape& s) { return node(op, {a, b}, s); }
};

// [G*H, In] slice d of a [D, G*H, In] constant, transposed to [In, G*H] (the right operand of X @ W^T).
Tensor transposed_slice(const Tensor& w, int64_t d) {
  const int64_t rows = w.shape()[1], cols = w.shape()[2];
  const auto v = w.cast(DType::f32).to_f32();
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>((d * rows + r) * cols + c)];
  return Tensor::from_f32({cols, rows}, std::move(t)).cast(w.dtype());
}

Tensor row(const Tensor& b, int64_t d, int64_t from, int64_t n) {
  const auto v = b.cast(DType::f32).to_f32();
  const int64_t w = b.shape()[1];
  return Tensor::from_f32({n}, std::vector<float>(v.begin() + d * w + from, v.begin() + d * w + from + n)).cast(b.dtype());
}

bool defaults(const Rewriter& rw, const Node& n, size_t gates_in) {
  if (n.attrs.has("activations") || n.attrs.has("clip") || n.attrs.get_int("input_forget", 0) || n.attrs.get_int("layout", 0)) return false;
  for (size_t k = 1; k < 3; ++k)
    if (!rw.constant(n.inputs[k])) return false;
  for (size_t k = 3; k < n.inputs.size() && k < gates_in; ++k)
    if (!n.inputs[k].empty() && k != 4 && k != 5 && k != 6 && !rw.constant(n.inputs[k])) return false;
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) {  // sequence_lens: every sequence full length
    const Tensor* sl = rw.constant(n.inputs[4]);
    if (!sl) return false;
    const int64_t S = rw.value(n.inputs[0]).shape[0];
    for (int64_t v : sl->to_i64())
      if (v != S) return false;
  }
  return true;
}

void unroll(Rewriter& rw, size_t idx) {
  const Node n = rw.graph().nodes[idx];
  const std::string& op = n.op;
  const int64_t G = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const Shape xs = rw.value(n.inputs[0]).shape;  // [S, B, In]
  const int64_t S = xs[0], B = xs[1], In = xs[2];
  const int64_t H = n.attrs.get_int("hidden_size", rw.value(n.inputs[2]).shape[2]);
  const std::string dir = n.attrs.get_string("direction", "forward");
  const int64_t D = dir == "bidirectional" ? 2 : 1;
  const bool lbr = n.attrs.get_int("linear_before_reset", 0) != 0;
  const DType dt = rw.value(n.inputs[0]).dtype;
  rw.remove_node(idx);
  Ops o{rw, n.name, dt};
  const Tensor& W = *rw.constant(n.inputs[1]);
  const Tensor& R = *rw.constant(n.inputs[2]);
  const Tensor* Bt = n.inputs.size() > 3 && !n.inputs[3].empty() ? rw.constant(n.inputs[3]) : nullptr;
  auto opt_in = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty() ? n.inputs[k] : std::string(); };
  const std::string x2 = o.reshape(n.inputs[0], {S * B, In});
  const Shape bh{B, H}, bgh{B, G * H};
  std::vector<std::vector<std::string>> hs(static_cast<size_t>(D));  // per direction, H_t in time order
  std::vector<std::string> last_h, last_c;
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = dir == "reverse" || d == 1;
    // Input projection of every step, with the input bias (and the recurrent bias where it adds
    // to the same sum: all of it for LSTM and RNN, GRU's z and r gates).
    std::string xw = o.bin("MatMul", x2, o.constant("WT", transposed_slice(W, d)), {S * B, G * H});
    std::string rb_h;  // GRU: the recurrent bias of the h gate, added inside the reset product
    if (Bt) {
      std::vector<float> bias(static_cast<size_t>(G * H));
      const auto wb = row(*Bt, d, 0, G * H).cast(DType::f32).to_f32(), rb = row(*Bt, d, G * H, G * H).cast(DType::f32).to_f32();
      for (int64_t i = 0; i < G * H; ++i) bias[static_cast<size_t>(i)] = wb[static_cast<size_t>(i)] + (op == "GRU" && i >= 2 * H ? 0.0f : rb[static_cast<size_t>(i)]);
      xw = o.bin("Add", xw, o.constant("bias", Tensor::from_f32({G * H}, std::move(bias)).cast(dt)), {S * B, G * H});
      if (op == "GRU") rb_h = o.constant("rb_h", row(*Bt, d, G * H + 2 * H, H));
    }
    const std::string RT = o.constant("RT", transposed_slice(R, d));
    auto initial = [&](size_t k) {
      const std::string v = opt_in(k);
      if (v.empty()) return o.constant("zeros", Tensor::from_f32(bh, std::vector<float>(static_cast<size_t>(B * H), 0.0f)).cast(dt));
      return o.reshape(o.slice(v, 0, d, 1, {D, B, H}), bh);
    };
    std::string h = initial(5), c = op == "LSTM" ? initial(6) : "";
    std::string peep[3];
    if (op == "LSTM" && !opt_in(7).empty())
      for (int k = 0; k < 3; ++k) peep[k] = o.constant("P", row(*rw.constant(n.inputs[7]), d, k * H, H));
    for (int64_t s = 0; s < S; ++s) {
      const int64_t t = reverse ? S - 1 - s : s;
      const std::string xt = o.slice(xw, 0, t * B, B, {S * B, G * H});
      auto gate = [&](const std::string& v, int64_t k) { return o.slice(v, 1, k * H, H, bgh); };
      if (op == "GRU") {  // zrh: z, r from x and h; h~ = tanh(x_h + r (h R_h^T + Rb_h)) (linear_before_reset) or tanh(x_h + (r h) R_h^T + Rb_h)
        const std::string hr = o.bin("MatMul", h, RT, bgh);
        const std::string zr = o.bin("Add", o.slice(xt, 1, 0, 2 * H, bgh), o.slice(hr, 1, 0, 2 * H, bgh), {B, 2 * H});
        const std::string sg = o.node("Sigmoid", {zr}, {B, 2 * H});
        const std::string z = o.slice(sg, 1, 0, H, {B, 2 * H}), r = o.slice(sg, 1, H, H, {B, 2 * H});
        std::string rh;
        if (lbr) {
          std::string hh = gate(hr, 2);
          if (!rb_h.empty()) hh = o.bin("Add", hh, rb_h, bh);
          rh = o.bin("Mul", r, hh, bh);
        } else {
          rh = o.bin("MatMul", o.bin("Mul", r, h, bh), o.slice(RT, 1, 2 * H, H, {H, G * H}), bh);
          if (!rb_h.empty()) rh = o.bin("Add", rh, rb_h, bh);
        }
        const std::string ht = o.node("Tanh", {o.bin("Add", gate(xt, 2), rh, bh)}, bh);
        // H = (1 - z) h~ + z h = h~ + z (h - h~)
        h = o.bin("Add", ht, o.bin("Mul", z, o.bin("Sub", h, ht, bh), bh), bh);
      } else {
        const std::string pre = o.bin("Add", xt, o.bin("MatMul", h, RT, bgh), bgh);
        if (op == "RNN") {
          h = o.node("Tanh", {pre}, bh);
        } else {  // LSTM, iofc
          auto peeped = [&](int64_t k, int pk, const std::string& cell) {
            std::string v = gate(pre, k);
            if (!peep[pk].empty()) v = o.bin("Add", v, o.bin("Mul", peep[pk], cell, bh), bh);
            return o.node("Sigmoid", {v}, bh);
          };
          const std::string i = peeped(0, 0, c), f = peeped(2, 2, c);
          const std::string cc = o.node("Tanh", {gate(pre, 3)}, bh);
          c = o.bin("Add", o.bin("Mul", f, c, bh), o.bin("Mul", i, cc, bh), bh);
          const std::string og = peeped(1, 1, c);
          h = o.bin("Mul", og, o.node("Tanh", {c}, bh), bh);
        }
      }
      hs[static_cast<size_t>(d)].push_back(h);
    }
    if (reverse) std::reverse(hs[static_cast<size_t>(d)].begin(), hs[static_cast<size_t>(d)].end());
    last_h.push_back(h);
    last_c.push_back(c);
  }
  // Y [S, D, B, H]: each step's H as [1, 1, B, H], concatenated over time and directions.
  graph::Attributes ax0, ax1;
  ax0.set("axis", int64_t{0});
  ax1.set("axis", int64_t{1});
  auto out = [&](size_t k) { return k < n.outputs.size() ? n.outputs[k] : std::string(); };
  if (!out(0).empty()) {
    std::vector<std::string> per_dir;
    for (int64_t d = 0; d < D; ++d) {
      std::vector<std::string> steps;
      for (const auto& v : hs[static_cast<size_t>(d)]) steps.push_back(o.reshape(v, {1, 1, B, H}));
      per_dir.push_back(D == 1 ? std::string() : o.node("Concat", steps, {S, 1, B, H}, ax0));
      if (D == 1) o.node("Concat", steps, {S, 1, B, H}, ax0, out(0));
    }
    if (D == 2) o.node("Concat", per_dir, {S, 2, B, H}, ax1, out(0));
  }
  auto finals = [&](const std::vector<std::string>& v, const std::string& name) {
    if (name.empty()) return;
    std::vector<std::string> parts;
    for (const auto& x : v) parts.push_back(o.reshape(x, {1, B, H}));
    o.node("Concat", parts, {D, B, H}, ax0, name);
  };
  finals(last_h, out(1));
  if (op == "LSTM") finals(last_c, out(2));
}

}  // namespace

bool unroll_recurrent(Graph& g) {
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if ((n.op == "LSTM" || n.op == "GRU" || n.op == "RNN") && defaults(rw, n, 8)) unroll(rw, i);
  }
  return rw.commit();
}

}  // namespace tessera::passes
