// Reverse-mode autodiff, losses and optimizers as graph ops (autodiff.hpp).
#include "mapper/passes/autodiff.hpp"

#include "mapper/passes/autodiff_builder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "isa/dtype.hpp"
#include "isa/error.hpp"
#include "isa/numeric.hpp"
#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/passes/passes.hpp"

namespace tessera::passes {

using detail::Builder;
using detail::kHint;

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
    // Which forward nodes compute in the compute type: those reading a cast value or such a node's
    // output (a model's own Cast to another float type leaves it).
    std::set<std::string> lowv(cast_of.begin(), cast_of.end());
    std::vector<bool> low_node(nfwd, false);
    for (const size_t k : forward.topo_order()) {
      const graph::Node& n = g.nodes[k];
      low_node[k] = std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) { return lowv.count(v) != 0; });
      const bool out_low = n.op == "Cast" ? n.attrs.get_int("to", 0) == to.get_int("to", 0) : low_node[k];
      if (out_low)
        for (const auto& o : n.outputs)
          if (!o.empty() && g.has_value(o) && is_float(g.value(o).dtype)) lowv.insert(o);
    }
    // The float constants such a node reads (a scaling's divisor, a mask, a decomposed LayerNorm's
    // epsilon) are in the compute type too, or the op would mix two types: new constants, rounded,
    // finite values beyond the type's range saturated to its largest (a -1e9 mask stays finite);
    // not an input that decides a shape (Resize's scales keep theirs).
    const FloatFormat fmt = *float_format(spec.compute);
    const float top = widen_bits(narrow_bits(std::numeric_limits<float>::max(), fmt, true), fmt);
    std::map<std::string, std::string> lc;  // constant -> its compute-type copy
    for (size_t k = 0; k < nfwd; ++k) {
      if (!low_node[k]) continue;
      graph::Node& n = g.nodes[k];
      const std::vector<size_t> shape_in = shape_inputs(n.op, g.opset);
      for (size_t j = 0; j < n.inputs.size(); ++j) {
        const std::string i = n.inputs[j];
        if (i.empty() || lp.count(i) || !g.has_value(i) || std::find(shape_in.begin(), shape_in.end(), j) != shape_in.end()) continue;
        const graph::Value& v = g.value(i);  // (stays valid: adding values moves no element)
        if (!v.data || !is_float(v.dtype) || v.dtype == spec.compute) continue;
        if (!lc.count(i)) {
          std::vector<float> f = v.data->to_f32();
          for (float& x : f)
            if (std::isfinite(x)) x = std::clamp(x, -top, top);
          const std::string name = "lp/" + i;
          if (g.has_value(name)) throw InputError(forward.source, "the model already has a value named '" + name + "'", "rename it");
          g.values[name] = graph::Value{name, spec.compute, v.shape, true, Tensor::from_f32(v.shape, std::move(f)).cast(spec.compute), false};
          lc[i] = name;
        }
        n.inputs[j] = lc.at(i);
      }
    }
    for (size_t k = 0; k < nfwd; ++k)
      for (auto& i : g.nodes[k].inputs)
        if (lp.count(i)) i = lp.at(i);
    for (const auto& [c, name] : lc) lp[c] = name;  // (the backward pass reads a node's operands as it read them)
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

  detail::Backward bw{forward, g, b, grad, needs, low};

  mark("loss");
  // Backward, in reverse topological order of the forward nodes.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const graph::Node& n = forward.nodes[*it];
    // A node with a gradient on its output (a Split: on any of its outputs, the first part may not
    // reach the loss).
    if (std::none_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& o) { return grad.count(o) != 0; })) continue;
    if (!grad.count(n.outputs[0]) && n.op != "Split") continue;
    detail::differentiate(bw, n, grad.count(n.outputs[0]) ? grad.at(n.outputs[0]) : std::string());
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
