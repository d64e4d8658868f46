// Reverse-mode autodiff, losses and optimizers as graph ops (autodiff.hpp).
#include "mapper/passes/autodiff.hpp"

#include <algorithm>
#include <set>

#include "isa/error.hpp"
#include "mapper/passes/passes.hpp"

namespace tessera::passes {

namespace {

const char* kHint =
    "training differentiates MatMul, Gemm, Add, Relu, Tanh and Sigmoid (docs/training.md); other ops on the path from a weight to the loss are not "
    "supported yet";

// Builds nodes into the training graph with fresh value names.
struct Builder {
  graph::Graph& g;
  DType dt;
  int next = 0;

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
  const DType dt = is_float(yv.dtype) ? yv.dtype : DType::f32;
  Builder b{g, dt};

  // Trainable parameters: float initializers that MatMul, Gemm or Add read.
  std::set<std::string> params;
  for (const auto& n : forward.nodes) {
    if (n.op != "MatMul" && n.op != "Gemm" && n.op != "Add") continue;
    for (const auto& i : n.inputs)
      if (!i.empty() && forward.has_value(i) && forward.value(i).is_initializer && forward.value(i).data && is_float(forward.value(i).dtype)) params.insert(i);
  }
  if (params.empty()) throw InputError(forward.source, "the model has no trainable weights (float initializers of MatMul, Gemm or Add)", kHint);
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
  g.values[spec.target] = graph::Value{spec.target, dt, yv.shape, true, std::nullopt, false};
  g.inputs.push_back(spec.target);
  if (g.has_value("step")) throw InputError(forward.source, "the model already has a value named 'step'", "rename it");
  g.values["step"] = graph::Value{"step", dt, {}, true, std::nullopt, false};
  g.inputs.push_back("step");

  // Which values depend on a parameter (the ones gradients flow to).
  std::set<std::string> needs(params.begin(), params.end());
  const auto order = forward.topo_order();
  for (const size_t i : order) {
    const auto& n = forward.nodes[i];
    if (std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) { return needs.count(v) != 0; }))
      for (const auto& o : n.outputs) needs.insert(o);
  }
  if (!needs.count(out)) throw InputError("/training/output", "'" + out + "' does not depend on any weight", kHint);

  // The loss and its gradient with respect to the output.
  std::map<std::string, std::string> grad;
  const double numel = static_cast<double>(shape_numel(yv.shape));
  const double batch = yv.shape.empty() ? 1.0 : static_cast<double>(yv.shape[0]);
  std::string loss;
  if (spec.loss == "mse") {
    const std::string diff = b.sub(out, spec.target);
    loss = b.reduce_mean_all(b.mul(diff, diff));
    grad[out] = b.mul(diff, b.scalar(2.0 / numel));
  } else if (spec.loss == "softmax_cross_entropy") {
    graph::Attributes ax;
    ax.set("axis", int64_t{-1});
    const std::string logp = b.node("LogSoftmax", {out}, ax);
    loss = b.mul(b.reduce_sum(b.mul(spec.target, logp), {}, false), b.scalar(-1.0 / batch));
    const std::string p = b.node("Softmax", {out}, ax);
    grad[out] = b.mul(b.sub(p, spec.target), b.scalar(1.0 / batch));
  } else {
    throw InputError("/training/loss", "unknown loss '" + spec.loss + "'", "mse or softmax_cross_entropy");
  }
  {  // name it "loss"
    graph::Node id;
    id.op = "Identity";
    id.name = "train/loss";
    id.inputs = {loss};
    id.outputs = {"loss"};
    if (g.has_value("loss")) throw InputError(forward.source, "the model already has a value named 'loss'", "rename it");
    g.values["loss"] = graph::Value{"loss", dt, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(id));
  }

  auto acc = [&](const std::string& v, const std::string& gv) {
    auto it = grad.find(v);
    if (it == grad.end()) grad[v] = gv;
    else it->second = b.add(it->second, gv);
  };
  auto shape = [&](const std::string& v) { return forward.value(v).shape; };

  // Backward, in reverse topological order of the forward nodes.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const graph::Node& n = forward.nodes[*it];
    if (n.outputs.empty() || !grad.count(n.outputs[0])) continue;
    const std::string go = grad.at(n.outputs[0]);
    auto wants = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty() && needs.count(n.inputs[k]) != 0; };
    if (n.op == "MatMul") {
      if (shape(n.inputs[0]).size() != 2 || shape(n.inputs[1]).size() != 2) throw InputError(forward.where(n), "MatMul gradients are 2-D only in this build", kHint);
      if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose(n.inputs[1])}));
      if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose(n.inputs[0]), go}));
    } else if (n.op == "Gemm") {
      if (n.attrs.get_int("transA", 0) || n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0)
        throw InputError(forward.where(n), "Gemm gradients need alpha = beta = 1 and no transA", kHint);
      const bool tb = n.attrs.get_int("transB", 0) != 0;
      if (wants(0)) acc(n.inputs[0], tb ? b.node("MatMul", {go, n.inputs[1]}) : b.node("MatMul", {go, b.transpose(n.inputs[1])}));
      if (wants(1)) acc(n.inputs[1], tb ? b.node("MatMul", {b.transpose(go), n.inputs[0]}) : b.node("MatMul", {b.transpose(n.inputs[0]), go}));
      if (wants(2)) acc(n.inputs[2], b.unbroadcast(go, shape(n.inputs[2]), shape(n.outputs[0])));
    } else if (n.op == "Add") {
      for (size_t k = 0; k < 2; ++k)
        if (wants(k)) acc(n.inputs[k], b.unbroadcast(go, shape(n.inputs[k]), shape(n.outputs[0])));
    } else if (n.op == "Relu") {
      if (wants(0)) acc(n.inputs[0], b.node("Where", {b.node("Greater", {n.inputs[0], b.scalar(0.0)}), go, b.scalar(0.0)}));
    } else if (n.op == "Tanh") {
      const std::string y = n.outputs[0];
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.sub(b.scalar(1.0), b.mul(y, y))));
    } else if (n.op == "Sigmoid") {
      const std::string y = n.outputs[0];
      if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(y, b.sub(b.scalar(1.0), y))));
    } else {
      throw InputError(forward.where(n), "no gradient for " + n.op + " in this build", kHint);
    }
  }

  // Optimizer: the update of every parameter (and its state), as graph ops.
  g.outputs = {"loss"};
  for (const auto& o : forward.outputs) g.outputs.push_back(o);
  auto name_as = [&](const std::string& v, const std::string& name) {
    graph::Node id;
    id.op = "Identity";
    id.name = "train/" + name;
    id.inputs = {v};
    id.outputs = {name};
    g.values[name] = graph::Value{name, dt, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(id));
    g.outputs.push_back(name);
    return name;
  };
  // The learning rate, a function of the step.
  std::string lr = b.scalar(spec.learning_rate);
  if (spec.schedule == "exponential") {
    lr = b.mul(lr, b.node("Pow", {b.scalar(spec.gamma), b.sub("step", b.scalar(1.0))}));
  } else if (spec.schedule == "step") {
    graph::Attributes to_int, to_float;
    to_int.set("to", int64_t{7});                           // INT64: truncation = floor for t >= 1
    to_float.set("to", int64_t{dt == DType::f64 ? 11 : 1});  // DOUBLE or FLOAT
    const std::string k = b.node("Cast", {b.node("Cast", {b.node("Div", {b.sub("step", b.scalar(1.0)), b.scalar(static_cast<double>(spec.step_size))})}, to_int)},
                                 to_float);
    lr = b.mul(lr, b.node("Pow", {b.scalar(spec.gamma), k}));
  } else if (spec.schedule == "warmup") {
    const std::string w = b.scalar(static_cast<double>(spec.warmup_steps));
    lr = b.mul(lr, b.node("Where", {b.node("Less", {"step", w}), b.node("Div", {"step", w}), b.scalar(1.0)}));
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
  std::vector<std::pair<std::string, std::string>> opt_state;
  for (const auto& p : tg.params) {
    if (!grad.count(p)) throw InputError(forward.source, "weight '" + p + "' does not reach the loss", kHint);
    std::string gp = grad.at(p);
    tg.grad_of[p] = name_as(gp, "grad:" + p);
    if (spec.weight_decay != 0) gp = b.add(gp, b.mul(p, b.scalar(spec.weight_decay)));
    std::string next;
    if (spec.optimizer == "sgd") {
      next = b.sub(p, b.mul(gp, lr));
    } else if (spec.optimizer == "momentum") {
      const std::string v = state_input("momentum:" + p, tg.initial.at(p));
      const std::string v2 = b.add(b.mul(v, b.scalar(spec.momentum)), gp);
      opt_state.push_back({v, name_as(v2, "next:" + v)});
      next = b.sub(p, b.mul(v2, lr));
    } else if (spec.optimizer == "adam") {
      const std::string m = state_input("adam_m:" + p, tg.initial.at(p)), v = state_input("adam_v:" + p, tg.initial.at(p));
      const std::string m2 = b.add(b.mul(m, b.scalar(spec.beta1)), b.mul(gp, b.scalar(1 - spec.beta1)));
      const std::string v2 = b.add(b.mul(v, b.scalar(spec.beta2)), b.mul(b.mul(gp, gp), b.scalar(1 - spec.beta2)));
      opt_state.push_back({m, name_as(m2, "next:" + m)});
      opt_state.push_back({v, name_as(v2, "next:" + v)});
      const std::string bc1 = b.sub(b.scalar(1.0), b.node("Pow", {b.scalar(spec.beta1), "step"}));
      const std::string bc2 = b.sub(b.scalar(1.0), b.node("Pow", {b.scalar(spec.beta2), "step"}));
      const std::string mhat = b.node("Div", {m2, bc1}), vhat = b.node("Div", {v2, bc2});
      next = b.sub(p, b.node("Div", {b.mul(mhat, lr), b.add(b.node("Sqrt", {vhat}), b.scalar(spec.eps))}));
    } else {
      throw InputError("/training/optimizer/kind", "unknown optimizer '" + spec.optimizer + "'", "sgd, momentum or adam");
    }
    tg.state.push_back({p, name_as(next, "next:" + p)});
  }
  for (const auto& s : opt_state) tg.state.push_back(s);
  passes::infer_and_fold(g);
  graph::verify(g);
  return tg;
}

}  // namespace tessera::passes
