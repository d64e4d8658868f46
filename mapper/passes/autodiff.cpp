// Reverse-mode autodiff, losses and optimizers as graph ops (autodiff.hpp).
#include "mapper/passes/autodiff.hpp"

#include <algorithm>
#include <set>

#include "isa/error.hpp"
#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/passes/passes.hpp"

namespace tessera::passes {

namespace {

const char* kHint =
    "training differentiates MatMul, Gemm, Conv (2-D), MaxPool (tiling windows), Add, Sub, Mul, Div, Neg, Relu, Tanh, Sigmoid, Exp, Log, Sqrt, Pow (constant exponent), Erf, Softmax, "
    "LayerNormalization, ReduceSum, ReduceMean and the shape ops Reshape/Flatten/Squeeze/Unsqueeze/Identity/Transpose (docs/training.md); other ops on "
    "the path from a weight to the loss (overlapping or padded pooling, average pooling, Gather...) are not supported yet";

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

}  // namespace

TrainingGraph make_training_graph(const graph::Graph& forward, const TrainingSpec& spec) {
  TrainingGraph tg;
  graph::Graph& g = tg.g;
  g = forward;
  g.source = forward.source + " (training step)";
  const std::string out = spec.output.empty() ? (forward.outputs.size() == 1 ? forward.outputs[0] : "") : spec.output;
  if (out.empty() || std::find(forward.outputs.begin(), forward.outputs.end(), out) == forward.outputs.end())
    throw InputError("/training/output", "name the graph output the loss is taken of" + (out.empty() ? std::string() : " ('" + out + "' is not one)"),
                     "e.g. \"output\": \"" + (forward.outputs.empty() ? std::string("y") : forward.outputs[0]) + "\"");
  const graph::Value& yv = forward.value(out);
  const DType master = is_float(yv.dtype) ? yv.dtype : DType::f32;  // weights, optimizer, loss output
  const bool mixed = spec.compute != master && spec.compute != DType::f32;
  const DType dt = mixed ? spec.compute : master;                   // forward and backward
  int counter = 0;
  Builder b{g, dt, counter};
  Builder bm{g, master, counter};
  // Nodes are appended section by section: the nodes added since the last mark belong to `phase`.
  size_t marked = 0;
  auto mark = [&](const std::string& phase) {
    for (; marked < g.nodes.size(); ++marked) tg.phase_of[g.nodes[marked].name] = phase;
  };

  // Trainable parameters: float initializers (rank >= 1) that MatMul, Gemm, Conv, Add or LayerNormalization read.
  std::set<std::string> params;
  for (const auto& n : forward.nodes) {
    if (n.op != "MatMul" && n.op != "Gemm" && n.op != "Add" && n.op != "LayerNormalization" && n.op != "Conv") continue;
    for (const auto& i : n.inputs)
      if (!i.empty() && forward.has_value(i) && forward.value(i).is_initializer && forward.value(i).data && is_float(forward.value(i).dtype) &&
          !forward.value(i).shape.empty())  // a 0-d initializer is a folded constant (an epsilon, a 1), not a weight
        params.insert(i);
  }
  if (params.empty()) throw InputError(forward.source, "the model has no trainable weights (float initializers of MatMul, Gemm, Conv, Add or LayerNormalization)", kHint);
  for (const auto& n : forward.nodes)  // graph order, stable
    for (const auto& i : n.inputs)
      if (params.count(i) && std::find(tg.params.begin(), tg.params.end(), i) == tg.params.end()) tg.params.push_back(i);
  for (const auto& p : tg.params) {
    graph::Value& v = g.value(p);
    tg.initial[p] = *v.data;
    v.data.reset();
    v.is_initializer = false;
    g.inputs.push_back(p);
  }
  // The target and the step.
  if (g.has_value(spec.target)) throw InputError("/training/target", "'" + spec.target + "' is already a value of the graph", "choose another name");
  g.values[spec.target] = graph::Value{spec.target, master, yv.shape, true, std::nullopt, false};
  g.inputs.push_back(spec.target);
  if (g.has_value("step")) throw InputError(forward.source, "the model already has a value named 'step'", "rename it");
  g.values["step"] = graph::Value{"step", master, {}, true, std::nullopt, false};
  g.inputs.push_back("step");

  // Mixed precision: the forward nodes read low-precision casts of the weights and inputs.
  std::map<std::string, std::string> lp;  // value -> its low-precision cast
  auto low = [&](const std::string& v) {
    auto it = lp.find(v);
    return it == lp.end() ? v : it->second;
  };
  if (mixed) {
    graph::Attributes to;
    to.set("to", int64_t{spec.compute == DType::f16 ? 10 : spec.compute == DType::cbf16 ? frontend::kCastToCbf16 : 16});  // FLOAT16, cbf16, BFLOAT16
    const size_t nfwd = g.nodes.size();
    std::vector<std::string> cast_of = tg.params;
    for (const auto& i : forward.inputs)
      if (is_float(forward.value(i).dtype)) cast_of.push_back(i);
    cast_of.push_back(spec.target);
    for (const auto& v : cast_of) lp[v] = b.node("Cast", {v}, to, "lp/" + v);
    for (size_t k = 0; k < nfwd; ++k)
      for (auto& i : g.nodes[k].inputs)
        if (lp.count(i)) i = lp.at(i);
  }

  // Which values depend on a parameter (the ones gradients flow to).
  std::set<std::string> needs(params.begin(), params.end());
  const auto order = forward.topo_order();
  for (const size_t i : order) {
    const auto& n = forward.nodes[i];
    if (std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) { return needs.count(v) != 0; }))
      for (const auto& o : n.outputs) needs.insert(o);
  }
  if (!needs.count(out)) throw InputError("/training/output", "'" + out + "' does not depend on any weight", kHint);

  mark("forward");  // the model's nodes and the casts they read
  // The loss and its gradient with respect to the output.
  std::map<std::string, std::string> grad;
  const double numel = static_cast<double>(shape_numel(yv.shape));
  const double batch = yv.shape.empty() ? 1.0 : static_cast<double>(yv.shape[0]);
  std::string loss;
  std::string scale_in;  // dynamic loss scaling: the scale's state input
  if (spec.loss_scaling) {
    scale_in = "loss_scale";
    if (g.has_value(scale_in)) throw InputError(forward.source, "the model already has a value named 'loss_scale'", "rename it");
    g.values[scale_in] = graph::Value{scale_in, master, {}, true, std::nullopt, false};
    g.inputs.push_back(scale_in);
    Tensor s0(master, {});
    s0 = Tensor::from_f32({}, {static_cast<float>(spec.init_scale)}).cast(master);
    tg.initial[scale_in] = s0;
  }
  const std::string target = low(spec.target);
  if (spec.loss == "mse") {
    const std::string diff = b.sub(out, target);
    loss = b.reduce_mean_all(b.mul(diff, diff));
    grad[out] = b.mul(diff, b.scalar(2.0 / numel));
  } else if (spec.loss == "softmax_cross_entropy") {
    if (yv.shape.size() != 2)
      throw InputError("/training/loss", "softmax_cross_entropy takes logits [batch, classes]; '" + out + "' is " + shape_str(yv.shape),
                       "reshape the output to 2-D, or use mse");
    graph::Attributes ax;
    ax.set("axis", int64_t{-1});
    const std::string logp = b.node("LogSoftmax", {out}, ax);
    loss = b.mul(b.reduce_sum(b.mul(target, logp), {}, false), b.scalar(-1.0 / batch));
    const std::string p = b.node("Softmax", {out}, ax);
    grad[out] = b.mul(b.sub(p, target), b.scalar(1.0 / batch));
  } else {
    throw InputError("/training/loss", "unknown loss '" + spec.loss + "'", "mse or softmax_cross_entropy");
  }
  if (spec.loss_scaling) {
    // Scaled in the master precision (the scale itself may not fit the compute type: fp16's largest
    // value is 65504 < 65536), then cast back: only a product too large for it overflows.
    if (dt == master) {
      grad[out] = b.mul(grad[out], scale_in);
    } else {
      graph::Attributes up, down;
      up.set("to", int64_t{master == DType::f64 ? 11 : 1});
      down.set("to", int64_t{dt == DType::f16 ? 10 : dt == DType::cbf16 ? frontend::kCastToCbf16 : 16});
      grad[out] = b.node("Cast", {bm.mul(bm.node("Cast", {grad[out]}, up), scale_in)}, down);
    }
  }
  {  // name it "loss" (in the master precision)
    graph::Node id;
    if (mixed) {
      id.op = "Cast";
      id.attrs.set("to", int64_t{master == DType::f64 ? 11 : 1});
    } else {
      id.op = "Identity";
    }
    id.name = "train/loss";
    id.inputs = {loss};
    id.outputs = {"loss"};
    if (g.has_value("loss")) throw InputError(forward.source, "the model already has a value named 'loss'", "rename it");
    g.values["loss"] = graph::Value{"loss", master, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(id));
  }

  auto acc = [&](const std::string& v, const std::string& gv) {
    auto it = grad.find(v);
    if (it == grad.end()) grad[v] = gv;
    else it->second = b.add(it->second, gv);
  };
  auto shape = [&](const std::string& v) { return forward.value(v).shape; };

  mark("loss");
  // Backward, in reverse topological order of the forward nodes.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const graph::Node& n = forward.nodes[*it];
    if (n.outputs.empty() || !grad.count(n.outputs[0])) continue;
    const std::string go = grad.at(n.outputs[0]);
    auto in = [&](size_t k) { return low(n.inputs[k]); };  // the operand as the forward node read it
    auto wants = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty() && needs.count(n.inputs[k]) != 0; };
    if (n.op == "MatMul") {
      const Shape &sa = shape(n.inputs[0]), &sb = shape(n.inputs[1]);
      if (sa.size() < 2 || sb.size() < 2) throw InputError(forward.where(n), "MatMul gradients need operands of rank 2 or more (got " + shape_str(sa) + " @ " + shape_str(sb) + ")", kHint);
      if (sa.size() == 2 && sb.size() == 2) {
        if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose(in(1))}));
        if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose(in(0)), go}));
      } else if (sa.size() == sb.size() && std::equal(sa.begin(), sa.end() - 2, sb.begin())) {  // batched, same batch dims
        std::vector<int64_t> perm;
        for (size_t i = 0; i < sa.size(); ++i) perm.push_back(static_cast<int64_t>(i));
        std::swap(perm[sa.size() - 1], perm[sa.size() - 2]);
        if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose_perm(in(1), perm)}));
        if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose_perm(in(0), perm), go}));
      } else if (sb.size() == 2 && sa.size() > 2) {  // [.., M, K] @ [K, N]: the weight's gradient sums over the leading axes
        Shape a2{shape_numel(sa) / sa.back(), sa.back()};
        Shape g2{a2[0], sb[1]};
        if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose(in(1))}));
        if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose(b.reshape(in(0), a2)), b.reshape(go, g2)}));
      } else {
        throw InputError(forward.where(n), "MatMul gradients of " + shape_str(sa) + " @ " + shape_str(sb) + " (broadcast batch dimensions) are not supported", kHint);
      }
    } else if (n.op == "Gemm") {
      if (n.attrs.get_int("transA", 0) || n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0)
        throw InputError(forward.where(n), "Gemm gradients need alpha = beta = 1 and no transA", kHint);
      const bool tb = n.attrs.get_int("transB", 0) != 0;
      if (wants(0)) acc(n.inputs[0], tb ? b.node("MatMul", {go, in(1)}) : b.node("MatMul", {go, b.transpose(in(1))}));
      if (wants(1)) acc(n.inputs[1], tb ? b.node("MatMul", {b.transpose(go), in(0)}) : b.node("MatMul", {b.transpose(in(0)), go}));
      if (wants(2)) acc(n.inputs[2], b.unbroadcast(go, shape(n.inputs[2]), shape(n.outputs[0])));
    } else if (n.op == "Add") {
      for (size_t k = 0; k < 2; ++k)
        if (wants(k)) acc(n.inputs[k], b.unbroadcast(go, shape(n.inputs[k]), shape(n.outputs[0])));
    } else if (n.op == "Relu") {
      if (wants(0)) acc(n.inputs[0], b.node("Where", {b.node("Greater", {in(0), b.scalar(0.0)}), go, b.scalar(0.0)}));
    } else if (n.op == "Tanh") {
      const std::string y = n.outputs[0];
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.sub(b.scalar(1.0), b.mul(y, y))));
    } else if (n.op == "Sigmoid") {
      const std::string y = n.outputs[0];
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(y, b.sub(b.scalar(1.0), y))));
    } else if (n.op == "Conv") {
      // 2-D, group 1, no dilation, explicit pads. dX = ConvTranspose(dY, W) to X's size; dW = the
      // correlation of X and dY: a Conv of X^T ([Ci, N, H, W]) with dY^T ([Co, N, OH, OW]) as the
      // kernel, dilated by the forward stride, with the forward pads, cut to the kernel size and
      // transposed back; dB = dY summed over N, OH, OW.
      const Shape &sx = shape(n.inputs[0]), &sw = shape(n.inputs[1]);
      if (sx.size() != 4 || n.attrs.get_int("group", 1) != 1 || n.attrs.get_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1} ||
          n.attrs.get_string("auto_pad", "NOTSET") != "NOTSET")
        throw InputError(forward.where(n), "Conv gradients are 2-D, group 1, without dilation or auto_pad in this build", kHint);
      const std::vector<int64_t> strides = n.attrs.get_ints("strides", {1, 1});
      const std::vector<int64_t> pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
      if (wants(0)) {
        graph::Attributes a;
        // The forward pads as they are, and output_padding for the rows and columns the forward
        // stride skipped at the end (always < stride): output_shape would re-centre the pads.
        const Shape& so = shape(n.outputs[0]);
        std::vector<int64_t> opad(2);
        for (size_t i = 0; i < 2; ++i) opad[i] = sx[2 + i] + pads[i] + pads[2 + i] - sw[2 + i] - strides[i] * (so[2 + i] - 1);
        a.set("strides", strides);
        a.set("pads", pads);
        a.set("output_padding", opad);
        acc(n.inputs[0], b.node("ConvTranspose", {go, in(1)}, a));
      }
      if (wants(1)) {
        graph::Attributes a;
        a.set("dilations", strides);
        a.set("pads", pads);
        const std::string full = b.node("Conv", {b.transpose_perm(in(0), {1, 0, 2, 3}), b.transpose_perm(go, {1, 0, 2, 3})}, a);
        const std::string cut = b.node("Slice", {full, b.ints({0, 0}), b.ints({sw[2], sw[3]}), b.ints({2, 3})});
        acc(n.inputs[1], b.transpose_perm(cut, {1, 0, 2, 3}));
      }
      if (n.inputs.size() > 2 && !n.inputs[2].empty() && wants(2)) acc(n.inputs[2], b.reduce_sum(go, {0, 2, 3}, false));
    } else if (n.op == "MaxPool") {
      // Non-overlapping 2-D windows (kernel = strides, no pads): dY goes to the positions that hold
      // their window's max -- Y repeated over each window (Reshape, Expand, Reshape) compared with X.
      const Shape &sx = shape(n.inputs[0]), &sy = shape(n.outputs[0]);
      const auto ks = n.attrs.get_ints("kernel_shape");
      const auto st = n.attrs.get_ints("strides", ks);
      const auto pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
      if (sx.size() != 4 || ks.size() != 2 || st != ks || pads != std::vector<int64_t>{0, 0, 0, 0} || n.outputs.size() > 1 ||
          n.attrs.get_int("ceil_mode", 0) || sx[2] != sy[2] * ks[0] || sx[3] != sy[3] * ks[1])
        throw InputError(forward.where(n), "MaxPool gradients need 2-D windows that tile the input (kernel = strides, no pads)", kHint);
      const Shape six{sy[0], sy[1], sy[2], 1, sy[3], 1}, big{sy[0], sy[1], sy[2], ks[0], sy[3], ks[1]};
      auto spread = [&](const std::string& v) {
        return b.reshape(b.node("Expand", {b.reshape(v, six), b.ints(std::vector<int64_t>(big.begin(), big.end()))}), sx);
      };
      if (wants(0)) {
        const std::string at_max = b.node("Equal", {in(0), spread(n.outputs[0])});
        acc(n.inputs[0], b.node("Where", {at_max, spread(go), b.scalar(0.0)}));
      }
    } else if (n.op == "Sub" || n.op == "Mul" || n.op == "Div") {
      const Shape& so = shape(n.outputs[0]);
      if (n.op == "Sub") {
        if (wants(0)) acc(n.inputs[0], b.unbroadcast(go, shape(n.inputs[0]), so));
        if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.node("Neg", {go}), shape(n.inputs[1]), so));
      } else if (n.op == "Mul") {
        if (wants(0)) acc(n.inputs[0], b.unbroadcast(b.mul(go, in(1)), shape(n.inputs[0]), so));
        if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.mul(go, in(0)), shape(n.inputs[1]), so));
      } else {  // d(a / c) = go / c, -go a / c^2
        if (wants(0)) acc(n.inputs[0], b.unbroadcast(b.node("Div", {go, in(1)}), shape(n.inputs[0]), so));
        if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.node("Neg", {b.node("Div", {b.mul(go, n.outputs[0]), in(1)})}), shape(n.inputs[1]), so));
      }
    } else if (n.op == "Neg") {
      if (wants(0)) acc(n.inputs[0], b.node("Neg", {go}));
    } else if (n.op == "Exp") {
      if (wants(0)) acc(n.inputs[0], b.mul(go, n.outputs[0]));
    } else if (n.op == "Log") {
      if (wants(0)) acc(n.inputs[0], b.node("Div", {go, in(0)}));
    } else if (n.op == "Sqrt") {
      if (wants(0)) acc(n.inputs[0], b.node("Div", {go, b.mul(n.outputs[0], b.scalar(2.0))}));
    } else if (n.op == "Pow") {
      const auto& e = forward.value(n.inputs[1]);
      if (!e.data || e.data->numel() != 1) throw InputError(forward.where(n), "Pow gradients need a constant scalar exponent", kHint);
      const double p = e.data->cast(DType::f64).to_f64()[0];
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(b.node("Pow", {in(0), b.scalar(p - 1)}), b.scalar(p))));
    } else if (n.op == "Erf") {  // 2 / sqrt(pi) exp(-x^2)
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(b.node("Exp", {b.node("Neg", {b.mul(in(0), in(0))})}), b.scalar(1.1283791670955126))));
    } else if (n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze" || n.op == "Identity") {
      if (wants(0)) acc(n.inputs[0], b.reshape(go, shape(n.inputs[0])));
    } else if (n.op == "Transpose") {
      const size_t r = shape(n.inputs[0]).size();
      std::vector<int64_t> perm = n.attrs.get_ints("perm");
      if (perm.empty())
        for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
      std::vector<int64_t> inv(r);
      for (size_t i = 0; i < r; ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      if (wants(0)) acc(n.inputs[0], b.transpose_perm(go, inv));
    } else if (n.op == "ReduceSum" || n.op == "ReduceMean") {
      // The gradient spread back over the reduced axes: go with the reduced axes kept as 1, times
      // ones of the input's shape (broadcast), divided by the count for a mean.
      const Shape& si = shape(n.inputs[0]);
      std::vector<int64_t> axes = n.attrs.get_ints("axes");
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        const auto& av = forward.value(n.inputs[1]);
        if (!av.data) throw InputError(forward.where(n), "reduction gradients need constant axes", kHint);
        axes = av.data->cast(DType::i64).to_i64();
      }
      const int64_t r = static_cast<int64_t>(si.size());
      if (axes.empty() && n.attrs.get_int("noop_with_empty_axes", 0))
        throw InputError(forward.where(n), "a reduction with noop_with_empty_axes and no axes is not differentiated", kHint);
      std::vector<bool> red(si.size(), axes.empty());
      for (int64_t a : axes) {
        const int64_t ax = a < 0 ? a + r : a;
        if (ax < 0 || ax >= r) throw InputError(forward.where(n), "axis " + std::to_string(a) + " is out of range for " + shape_str(si), kHint);
        red[static_cast<size_t>(ax)] = true;
      }
      Shape keep = si;
      double count = 1;
      for (size_t i = 0; i < si.size(); ++i)
        if (red[i]) {
          keep[i] = 1;
          count *= static_cast<double>(si[i]);
        }
      graph::Value ones{b.fresh("ones"), dt, si, true, Tensor::from_f32(si, std::vector<float>(static_cast<size_t>(shape_numel(si)), 1.0f)).cast(dt), false};
      const std::string on = ones.name;
      g.values[on] = std::move(ones);
      std::string gx = b.mul(b.reshape(go, keep), on);
      if (n.op == "ReduceMean") gx = b.mul(gx, b.scalar(1.0 / count));
      if (wants(0)) acc(n.inputs[0], gx);
    } else if (n.op == "Softmax") {  // dx = y (go - sum(go y))
      const int64_t r = static_cast<int64_t>(shape(n.inputs[0]).size());
      const int64_t axis = n.attrs.get_int("axis", forward.opset >= 13 ? -1 : 1);
      if (axis != -1 && axis != r - 1) throw InputError(forward.where(n), "Softmax gradients over the last axis only", kHint);
      const std::string y = n.outputs[0];
      if (wants(0)) acc(n.inputs[0], b.mul(y, b.sub(go, b.reduce_sum(b.mul(go, y), {r - 1}, true))));
    } else if (n.op == "LayerNormalization") {
      // Over the last axis: xh = (x - mean) rstd; y = xh scale + bias. d bias = sum go, d scale =
      // sum go xh (over the leading axes); dxh = go scale; dx = rstd (dxh - mean(dxh) - xh mean(dxh xh)).
      const Shape& si = shape(n.inputs[0]);
      const int64_t r = static_cast<int64_t>(si.size());
      const int64_t axis = n.attrs.get_int("axis", -1);
      if (axis != -1 && axis != r - 1) throw InputError(forward.where(n), "LayerNormalization gradients over the last axis only", kHint);
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) throw InputError(forward.where(n), "LayerNormalization with Mean/InvStdDev outputs is not differentiated", kHint);
      const double eps = n.attrs.get_float("epsilon", 1e-5);
      const std::string x = in(0);
      const std::string mu = b.reduce_mean(x, {r - 1}, true);
      const std::string xc = b.sub(x, mu);
      const std::string var = b.reduce_mean(b.mul(xc, xc), {r - 1}, true);
      const std::string rstd = b.node("Div", {b.scalar(1.0), b.node("Sqrt", {b.add(var, b.scalar(eps))})});
      const std::string xh = b.mul(xc, rstd);
      std::vector<int64_t> lead;
      for (int64_t i = 0; i + 1 < r; ++i) lead.push_back(i);
      const bool has_scale = n.inputs.size() > 1 && !n.inputs[1].empty();
      auto over_lead = [&](const std::string& v) { return lead.empty() ? v : b.reduce_sum(v, lead, false); };
      if (n.inputs.size() > 2 && !n.inputs[2].empty() && wants(2)) acc(n.inputs[2], b.reshape(over_lead(go), shape(n.inputs[2])));
      if (has_scale && wants(1)) acc(n.inputs[1], b.reshape(over_lead(b.mul(go, xh)), shape(n.inputs[1])));
      if (wants(0)) {
        const std::string dxh = has_scale ? b.mul(go, in(1)) : go;
        auto mean_last = [&](const std::string& v) { return b.reduce_mean(v, {r - 1}, true); };
        acc(n.inputs[0], b.mul(rstd, b.sub(b.sub(dxh, mean_last(dxh)), b.mul(xh, mean_last(b.mul(dxh, xh))))));
      }
    } else {
      throw InputError(forward.where(n), "no gradient for " + n.op + " in this build", kHint);
    }
  }

  mark("backward");
  // Optimizer: the update of every parameter (and its state), as graph ops in the master
  // precision (bm).
  g.outputs = {"loss"};
  for (const auto& o : forward.outputs) g.outputs.push_back(o);
  auto name_as = [&](const std::string& v, const std::string& name) {
    graph::Node id;
    id.op = "Identity";
    id.name = "train/" + name;
    id.inputs = {v};
    id.outputs = {name};
    g.values[name] = graph::Value{name, master, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(id));
    g.outputs.push_back(name);
    return name;
  };
  const int64_t master_to = master == DType::f64 ? 11 : 1;  // ONNX DOUBLE / FLOAT
  // The learning rate, a function of the step.
  std::string lr = bm.scalar(spec.learning_rate);
  if (spec.schedule == "exponential") {
    lr = bm.mul(lr, bm.node("Pow", {bm.scalar(spec.gamma), bm.sub("step", bm.scalar(1.0))}));
  } else if (spec.schedule == "step") {
    graph::Attributes to_int, to_float;
    to_int.set("to", int64_t{7});  // INT64: truncation = floor for t >= 1
    to_float.set("to", master_to);
    const std::string k = bm.node(
        "Cast", {bm.node("Cast", {bm.node("Div", {bm.sub("step", bm.scalar(1.0)), bm.scalar(static_cast<double>(spec.step_size))})}, to_int)}, to_float);
    lr = bm.mul(lr, bm.node("Pow", {bm.scalar(spec.gamma), k}));
  } else if (spec.schedule == "warmup") {
    const std::string w = bm.scalar(static_cast<double>(spec.warmup_steps));
    lr = bm.mul(lr, bm.node("Where", {bm.node("Less", {"step", w}), bm.node("Div", {"step", w}), bm.scalar(1.0)}));
  } else if (spec.schedule != "constant") {
    throw InputError("/training/optimizer/schedule/kind", "unknown schedule '" + spec.schedule + "'", "constant, exponential, step or warmup");
  }
  lr = name_as(lr, "learning_rate");
  auto state_input = [&](const std::string& name, const Tensor& like) {
    g.values[name] = graph::Value{name, like.dtype(), like.shape(), true, std::nullopt, false};
    g.inputs.push_back(name);
    tg.initial[name] = Tensor(like.dtype(), like.shape());  // zeros
    return name;
  };
  // The gradients in the master precision (cast back from the compute precision, unscaled).
  std::map<std::string, std::string> g32;
  for (const auto& p : tg.params) {
    if (!grad.count(p)) throw InputError(forward.source, "weight '" + p + "' does not reach the loss", kHint);
    std::string gp = grad.at(p);
    if (mixed) {
      graph::Attributes to;
      to.set("to", master_to);
      gp = bm.node("Cast", {gp}, to);
    }
    if (spec.loss_scaling) gp = bm.node("Div", {gp, "loss_scale"});
    g32[p] = gp;
    tg.grad_of[p] = name_as(gp, "grad:" + p);
  }
  // Dynamic loss scaling: are all gradients finite? (x * 0 is 0 for finite x, NaN for inf or NaN.)
  std::string finite;
  if (spec.loss_scaling) {
    std::string total;
    for (const auto& p : tg.params) {
      const std::string sp = bm.reduce_sum(g32.at(p), {}, false);
      total = total.empty() ? sp : bm.add(total, sp);
    }
    finite = bm.node("Equal", {bm.mul(total, bm.scalar(0.0)), bm.scalar(0.0)});
    name_as(bm.node("Where", {finite, bm.scalar(0.0), bm.scalar(1.0)}), "skipped");
  }
  auto keep_if_skipped = [&](const std::string& next, const std::string& cur) {
    return spec.loss_scaling ? bm.node("Where", {finite, next, cur}) : next;
  };
  std::vector<std::pair<std::string, std::string>> opt_state;
  if (spec.optimizer == "adam" && spec.loss_scaling) {
    g.values["adam_updates"] = graph::Value{"adam_updates", master, {}, true, std::nullopt, false};
    g.inputs.push_back("adam_updates");
    tg.initial["adam_updates"] = Tensor(master, {});
    opt_state.push_back({"adam_updates", name_as(bm.node("Where", {finite, bm.add("adam_updates", bm.scalar(1.0)), "adam_updates"}), "next:adam_updates")});
  }
  for (const auto& p : tg.params) {
    std::string gp = g32.at(p);
    if (spec.weight_decay != 0) gp = bm.add(gp, bm.mul(p, bm.scalar(spec.weight_decay)));
    std::string next;
    if (spec.optimizer == "sgd") {
      next = bm.sub(p, bm.mul(gp, lr));
    } else if (spec.optimizer == "momentum") {
      const std::string v = state_input("momentum:" + p, tg.initial.at(p));
      const std::string v2 = bm.add(bm.mul(v, bm.scalar(spec.momentum)), gp);
      opt_state.push_back({v, name_as(keep_if_skipped(v2, v), "next:" + v)});
      next = bm.sub(p, bm.mul(v2, lr));
    } else if (spec.optimizer == "adam") {
      const std::string m = state_input("adam_m:" + p, tg.initial.at(p)), v = state_input("adam_v:" + p, tg.initial.at(p));
      // Bias correction counts the updates made: with loss scaling a skipped step is not one
      // (GradScaler skips optimizer.step()), so the count is state of its own.
      const std::string t_opt = spec.loss_scaling ? bm.add("adam_updates", bm.scalar(1.0)) : std::string("step");
      const std::string m2 = bm.add(bm.mul(m, bm.scalar(spec.beta1)), bm.mul(gp, bm.scalar(1 - spec.beta1)));
      const std::string v2 = bm.add(bm.mul(v, bm.scalar(spec.beta2)), bm.mul(bm.mul(gp, gp), bm.scalar(1 - spec.beta2)));
      opt_state.push_back({m, name_as(keep_if_skipped(m2, m), "next:" + m)});
      opt_state.push_back({v, name_as(keep_if_skipped(v2, v), "next:" + v)});
      const std::string bc1 = bm.sub(bm.scalar(1.0), bm.node("Pow", {bm.scalar(spec.beta1), t_opt}));
      const std::string bc2 = bm.sub(bm.scalar(1.0), bm.node("Pow", {bm.scalar(spec.beta2), t_opt}));
      const std::string mhat = bm.node("Div", {m2, bc1}), vhat = bm.node("Div", {v2, bc2});
      next = bm.sub(p, bm.node("Div", {bm.mul(mhat, lr), bm.add(bm.node("Sqrt", {vhat}), bm.scalar(spec.eps))}));
    } else {
      throw InputError("/training/optimizer/kind", "unknown optimizer '" + spec.optimizer + "'", "sgd, momentum or adam");
    }
    tg.state.push_back({p, name_as(keep_if_skipped(next, p), "next:" + p)});
  }
  for (const auto& st : opt_state) tg.state.push_back(st);
  if (spec.loss_scaling) {  // S and the count of finite steps in a row (GradScaler's rules)
    const std::string cnt = "loss_scale_count";
    g.values[cnt] = graph::Value{cnt, master, {}, true, std::nullopt, false};
    g.inputs.push_back(cnt);
    tg.initial[cnt] = Tensor(master, {});
    const std::string grown = bm.add(cnt, bm.scalar(1.0));
    const std::string below = bm.node("Less", {grown, bm.scalar(static_cast<double>(spec.interval))});
    const std::string s2 =
        bm.node("Where", {finite, bm.node("Where", {below, "loss_scale", bm.mul("loss_scale", bm.scalar(spec.growth))}), bm.mul("loss_scale", bm.scalar(spec.backoff))});
    const std::string c2 = bm.node("Where", {finite, bm.node("Where", {below, grown, bm.scalar(0.0)}), bm.scalar(0.0)});
    tg.state.push_back({"loss_scale", name_as(s2, "next:loss_scale")});
    tg.state.push_back({cnt, name_as(c2, "next:" + cnt)});
  }
  mark("optimizer");
  passes::infer_and_fold(g);
  graph::verify(g);
  return tg;
}

}  // namespace tessera::passes
