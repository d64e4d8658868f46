// Lowering (mapper/neuroncore/compile.hpp): the canonical graph, op by op, onto the kernel families.
// Fusion is an optimisation on top: a matmul or convolution absorbs a following scalar scale, a bias,
// an activation and a residual add (each the only reader of the value before it) into its
// evacuation; everything else compiles as its own kernel.
#include <algorithm>
#include <set>

#include "isa/error.hpp"
#include "mapper/neuroncore/estimate.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"

namespace tessera::neuroncore {

using graph::Graph;
using graph::Node;

namespace {

class Lowering {
 public:
  Lowering(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt, Compiled& c)
      : g_(g), opt_(opt), c_(c), em_(c.program), st_(g, cfg, opt, c), x_(g, cfg, opt, c, em_, st_) {}

  void run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& o : g_.nodes[i].outputs)
        if (!o.empty()) producer_[o] = &g_.nodes[i];
      for (const auto& in : g_.nodes[i].inputs)
        if (!in.empty() && (consumers_[in].empty() || consumers_[in].back() != &g_.nodes[i])) consumers_[in].push_back(&g_.nodes[i]);
    }
    st_.plan();
    st_.bind_io();
    const auto order = emission_order();
    for (size_t k = 0; k < order.size(); ++k) position_[g_.nodes[order[k]].name] = k;
    for (size_t idx : order) plan_epilogue(g_.nodes[idx]);
    if (opt_.fuse_attention)
      for (size_t idx : order) plan_attention(g_.nodes[idx]);
    plan_siblings(order);
    for (size_t idx : order) {
      const Node& n = g_.nodes[idx];
      if (fused_.count(n.name) || grouped_.count(n.name) || st_.is_view_node(n)) continue;
      const Status s = lower(n);
      if (!s.ok)
        throw InputError(g_.where(n), "the NeuronCore compiler cannot compile this: " + s.reason,
                         s.hint.empty() ? "run the model on target.kind \"reference\"; docs/neuroncore-compiler.md lists what compiles" : s.hint);
    }
    em_.schedule(48, &x_.cfg);
    estimate_kernels(c_, x_.cfg);
  }

 private:
  Status lower(const Node& n) {
    const std::string& op = n.op;
    if (std::all_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& o) { return o.empty() || shape_numel(g_.value(o).shape) == 0; }))
      return {};  // nothing to compute
    if (op == "LSTM" || op == "GRU" || op == "RNN")
      return Status::fail("this " + op + " is not unrolled (canonicalize's unroll_recurrent covers the default activations, no clip, "
                          "input_forget or batch-first layout, full-length sequences and constant weights)");
    if (is_view_op(op)) {  // a view the strides cannot express: a copy
      const TensorRef in = st_.ref(n.inputs[0]);
      TensorRef src = in, dst = st_.ref(n.outputs[0]);
      if (auto v = st_.derive(n, in.view)) src.view = *v;
      else if (op == "Reshape") dst.view = graph::reshape(dst.view, in.shape()).value();
      else return Status::fail("a Slice with a negative step (reversing) is not compiled");
      return copy(x_, n.name, src, dst);
    }
    if (auto a = attention_.find(n.name); a != attention_.end()) return attention(x_, a->second);
    if (auto sg = group_at_.find(n.name); sg != group_at_.end()) return matmul_group(x_, sg->second.first, sg->second.second);
    if (op == "MatMul") return matmul(x_, n, epilogues_.at(n.name));
    if (op == "Conv" || op == "ConvTranspose") return conv(x_, n, epilogues_.at(n.name));
    if (is_pool(op)) return pool(x_, n);
    if (is_row_op(op)) return rows(x_, n);
    if (op == "Concat") return concat(x_, n);
    if (op == "Pad") return pad(x_, n);
    if (op == "Gather") return gather(x_, n);
    if (is_elementwise(n)) return elementwise(x_, n);
    return Status::fail("op " + op + " is not in the NeuronCore compiler's op set yet");
  }

  const Node* producer(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? nullptr : it->second;
  }

  // The one node reading v (a node reading it twice counts once), if v is not a graph output or a
  // next state (those must be written as themselves).
  const Node* only_consumer(const std::string& v) const {
    if (st_.is_output(v) || tied_.count(v)) return nullptr;
    auto it = consumers_.find(v);
    return it == consumers_.end() || it->second.size() != 1 ? nullptr : it->second[0];
  }

  // A value that is ready when the producer's kernel runs: a graph input, a constant, or computed
  // by a node emitted before it.
  bool ready_before(const std::string& v, const Node& producer_node) const {
    const auto& val = g_.value(v);
    if (val.data || std::find(g_.inputs.begin(), g_.inputs.end(), v) != g_.inputs.end()) return true;
    const Node* p = producer(v);
    return p && position_.at(p->name) < position_.at(producer_node.name);
  }

  // Equal after dropping leading dimensions of size 1.
  static bool same_dims(const Shape& a, const Shape& b) {
    auto lead = [](const Shape& s) {
      size_t i = 0;
      while (i + 1 < s.size() && s[i] == 1) ++i;
      return Shape(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
    };
    return lead(a) == lead(b);
  }

  // A view node reading `in` whose output is `in`'s elements in the same order (its storage view
  // and `in`'s flatten to the same walk) and the same dims but for dims of size 1.
  bool order_preserving_view(const Node& c, const std::string& in) {
    if (!st_.is_view_node(c) || c.inputs.empty() || c.inputs[0] != in || st_.is_output(c.outputs[0]) || tied_.count(c.outputs[0])) return false;
    auto squeezed = [](Shape s) {
      s.erase(std::remove(s.begin(), s.end(), int64_t{1}), s.end());
      return s;
    };
    if (squeezed(g_.value(c.outputs[0]).shape) != squeezed(g_.value(in).shape)) return false;
    const int64_t n = shape_numel(g_.value(in).shape);
    const auto a = graph::reshape(st_.ref(in).view, {n}), b = graph::reshape(st_.ref(c.outputs[0]).view, {n});
    return a && b && *a == *b;
  }

  static bool broadcasts(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (size_t i = 0; i < from.size(); ++i) {
      const int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
      if (f != t && f != 1) return false;
    }
    return true;
  }

  void plan_epilogue(const Node& p) {
    if (p.op != "MatMul" && p.op != "Conv" && p.op != "ConvTranspose") return;
    Epilogue ep;
    ep.out = p.outputs[0];
    if (p.op != "MatMul" && p.inputs.size() > 2 && !p.inputs[2].empty()) {  // the convolution's own bias [Cout]
      TensorRef b = st_.ref(p.inputs[2]);
      const Shape& os = g_.value(p.outputs[0]).shape;
      Shape bs{b.shape()[0]};
      for (size_t k = 2; k < os.size(); ++k) bs.push_back(1);
      b.view = graph::broadcast_to(graph::reshape(b.view, bs).value(), os);
      ep.bias = b;
    }
    // A scalar scale of a matmul's input moves into the epilogue: (c A) @ B = c (A @ B).
    for (size_t i = 0; p.op == "MatMul" && i < 2; ++i) {
      const Node* s = producer(p.inputs[i]);
      // (already fused: the Mul ends an earlier matmul's epilogue, which writes its output)
      if (!s || (s->op != "Mul" && s->op != "Div") || fused_.count(s->name) || only_consumer(p.inputs[i]) != &p) continue;
      const size_t k = s->op == "Mul" && g_.value(s->inputs[0]).data ? 0 : 1;  // the constant's slot
      const auto& cv = g_.value(s->inputs[k]);
      if (!cv.data || cv.data->numel() != 1 || !is_float(cv.dtype) || (s->op == "Div" && k != 1)) continue;
      const double c = cv.data->cast(DType::f64).to_f64()[0];
      ep.scale *= s->op == "Mul" ? c : 1.0 / c;
      ep.operand[i] = s->inputs[1 - k];
      fused_.insert(s->name);
    }
    const Shape out_shape = g_.value(p.outputs[0]).shape;
    for (const Node* c = only_consumer(ep.out); c; c = only_consumer(ep.out)) {
      // Views that keep the elements in order (a Reshape or a Transpose that only adds or moves
      // dimensions of size 1: the attention's out-projection seen as [1, S, d]) are looked through:
      // the node after them fuses and the matmul writes its output.
      std::string in = ep.out;
      while (c && order_preserving_view(*c, in)) {
        in = c->outputs[0];
        c = only_consumer(in);
      }
      // (a next state is written by its own node: the in-place ordering is by node)
      if (!c || !same_dims(g_.value(c->outputs[0]).shape, out_shape) || tied_.count(c->outputs[0])) break;
      Func f;
      const std::string* other = nullptr;
      if (c->inputs.size() == 2) other = c->inputs[0] == in ? &c->inputs[1] : &c->inputs[0];
      const auto* cv = other ? &g_.value(*other) : nullptr;
      const bool scalar = cv && cv->data && cv->data->numel() == 1 && is_float(cv->dtype);
      if ((c->op == "Mul" || (c->op == "Div" && c->inputs[0] == ep.out)) && scalar && !ep.bias && !ep.residual && ep.func == Func::identity) {
        const double v = cv->data->cast(DType::f64).to_f64()[0];
        ep.scale *= c->op == "Mul" ? v : 1.0 / v;
      } else if (c->op == "Add" && cv && (cv->data || (cv->shape != out_shape && ready_before(*other, p))) && broadcasts(cv->shape, out_shape) &&
                 !ep.bias && !ep.residual && ep.func == Func::identity) {
        // A bias: a constant, or a computed value broadcast along the output (a bias being trained).
        TensorRef b = st_.ref(*other);
        b.view = graph::broadcast_to(b.view, out_shape);
        ep.bias = b;
      } else if (c->op == "Add" && cv && !cv->data && cv->shape == g_.value(c->outputs[0]).shape && !ep.residual && ready_before(*other, p)) {
        ep.residual = st_.ref(*other);
        ep.residual_first = ep.func == Func::identity;
      } else if (unary_func(c->op, *c, f) && ep.func == Func::identity && (!ep.residual || ep.residual_first)) {
        ep.func = f;
      } else {
        break;
      }
      fused_.insert(c->name);
      ep.out = c->outputs[0];
    }
    epilogues_[p.name] = ep;
  }

  // Attention: a MatMul whose planned epilogue (scale, mask as bias) is read only by a Softmax over
  // the last axis, read only by a MatMul as its left operand, compiles as one kernel at the second
  // MatMul's place (its inputs, and the first's, are ready there).
  void plan_attention(const Node& p) {
    if (p.op != "MatMul" || fused_.count(p.name)) return;
    const Epilogue& ep = epilogues_.at(p.name);
    AttentionPlan a;
    const Node* sm = only_consumer(ep.out);
    std::string scores = ep.out;
    if (sm && sm->op == "Where" && sm->inputs.size() == 3 && sm->inputs[1] != sm->inputs[2]) {  // masked_fill
      const Node& w = *sm;
      const size_t side = w.inputs[1] == ep.out ? 1 : w.inputs[2] == ep.out ? 2 : 0;
      if (side == 0 || w.inputs[0] == ep.out) return;
      const auto& cv = g_.value(w.inputs[0]);
      const auto& fv = g_.value(w.inputs[3 - side]);
      const Shape& ss = g_.value(ep.out).shape;
      if (!cv.data || !fv.data || fv.data->numel() != 1 || !is_float(fv.dtype) || !broadcasts(cv.shape, ss) ||
          g_.value(w.outputs[0]).shape != ss)
        return;
      TensorRef c = st_.ref(w.inputs[0]);
      c.view = graph::broadcast_to(c.view, ss);
      a.where = &w;
      a.cond = c;
      a.keep_when = side == 1;
      a.fill = fv.data->cast(DType::f64).to_f64()[0];
      scores = w.outputs[0];
      sm = only_consumer(scores);
    }
    if (!sm || sm->op != "Softmax" || sm->inputs[0] != scores) return;
    const int64_t rank = static_cast<int64_t>(g_.value(scores).shape.size());
    int64_t axis = sm->attrs.get_int("axis", -1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) return;
    const Node* p2 = only_consumer(sm->outputs[0]);
    if (!p2 || p2->op != "MatMul" || p2->inputs[0] != sm->outputs[0] || p2->inputs[1] == sm->outputs[0] || fused_.count(p2->name)) return;
    a.scores = &p;
    a.context = p2;
    a.score_ep = ep;
    a.context_ep = epilogues_.at(p2->name);
    if (!attention_fits(x_, a).ok) return;
    fused_.insert(p.name);
    fused_.insert(sm->name);
    if (a.where) fused_.insert(a.where->name);
    attention_[p2->name] = a;
  }

  // Sibling matmuls (kernels.hpp matmul_group): MatMuls reading the same computed left operand, each
  // with a constant right operand, compile as one kernel at the last one's place -- when no kernel
  // emitted between the first and the last reads any of their outputs (through views too).
  void plan_siblings(const std::vector<size_t>& order) {
    std::map<std::string, std::vector<const Node*>> by_a;
    std::vector<std::string> keys;
    for (size_t idx : order) {
      const Node& n = g_.nodes[idx];
      if (n.op != "MatMul" || fused_.count(n.name) || attention_.count(n.name)) continue;
      const Epilogue& ep = epilogues_.at(n.name);
      const std::string& ain = ep.operand[0].empty() ? n.inputs[0] : ep.operand[0];
      if (g_.value(ain).data) continue;
      // Keyed by what the operand is in memory (two Transposes of one input are the same operand).
      const TensorRef& r = st_.ref(ain);
      std::string key = r.hbm + "@" + std::to_string(r.view.offset);
      for (size_t i = 0; i < r.view.shape.size(); ++i) key += ":" + std::to_string(r.view.shape[i]) + "/" + std::to_string(r.view.strides[i]);
      if (!by_a.count(key)) keys.push_back(key);
      by_a[key].push_back(&n);
    }
    for (const std::string& a : keys) {
      const std::vector<const Node*>& nodes = by_a[a];
      if (nodes.size() < 2) continue;
      std::vector<const Epilogue*> eps;
      for (const Node* n : nodes) eps.push_back(&epilogues_.at(n->name));
      if (!matmul_group_fits(x_, nodes, eps)) continue;
      std::set<std::string> derived;
      for (const Epilogue* e : eps) derived.insert(e->out);
      for (size_t idx : g_.topo_order()) {
        const Node& v = g_.nodes[idx];
        if (st_.is_view_node(v) && !v.inputs.empty() && derived.count(v.inputs[0]))
          for (const auto& o : v.outputs) derived.insert(o);
      }
      const size_t first = position_.at(nodes.front()->name), last = position_.at(nodes.back()->name);
      bool ok = true;
      for (size_t idx : order) {
        const Node& v = g_.nodes[idx];
        const size_t pos = position_.at(v.name);
        if (pos <= first || pos >= last || fused_.count(v.name) || st_.is_view_node(v)) continue;
        for (const auto& in : v.inputs) ok = ok && !derived.count(in);
      }
      if (!ok) continue;
      group_at_[nodes.back()->name] = {nodes, eps};
      for (size_t i = 0; i + 1 < nodes.size(); ++i) grouped_.insert(nodes[i]->name);
    }
  }

  // Topological order in which a kernel that writes state in place (MappingOptions::in_place) comes
  // after every node reading that state: the scoreboard keeps program order, so a read placed after
  // the update would see the next step's value.
  std::vector<size_t> emission_order() {
    const auto topo = g_.topo_order();
    for (const auto& [state, next] : opt_.in_place) tied_.insert(next);
    if (opt_.in_place.empty()) return topo;
    const auto prod = g_.producers();
    std::vector<std::set<size_t>> after(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& in : g_.nodes[i].inputs)
        if (auto it = prod.find(in); it != prod.end()) after[i].insert(it->second);
    // Readers of a state through views (Transpose of a weight) read it too.
    auto reads_state = [&](const Node& n, const std::string& state) {
      std::vector<std::string> todo(n.inputs.begin(), n.inputs.end());
      while (!todo.empty()) {
        const std::string v = todo.back();
        todo.pop_back();
        if (v == state) return true;
        if (auto it = prod.find(v); it != prod.end() && is_view_op(g_.nodes[it->second].op)) todo.push_back(g_.nodes[it->second].inputs[0]);
      }
      return false;
    };
    for (const auto& [state, next] : opt_.in_place) {
      auto w = prod.find(next);
      // An Identity that only names the next state: the node before it writes the state.
      while (w != prod.end() && st_.is_view_node(g_.nodes[w->second]) && g_.nodes[w->second].op == "Identity") w = prod.find(g_.nodes[w->second].inputs[0]);
      if (w == prod.end()) continue;
      for (size_t i = 0; i < g_.nodes.size(); ++i)
        if (i != w->second && reads_state(g_.nodes[i], state)) after[w->second].insert(i);
    }
    std::vector<size_t> order;
    std::vector<bool> done(g_.nodes.size(), false);
    while (order.size() < g_.nodes.size()) {
      bool progress = false;
      for (size_t idx : topo) {
        if (done[idx] || !std::all_of(after[idx].begin(), after[idx].end(), [&](size_t p) { return done[p]; })) continue;
        done[idx] = true;
        order.push_back(idx);
        progress = true;
        break;
      }
      if (!progress) throw InputError(g_.source, "state updated in place is read after its update", "report it with the scenario");
    }
    return order;
  }

  const Graph& g_;
  const MappingOptions& opt_;
  Compiled& c_;
  Emitter em_;
  Storage st_;
  Ctx x_;
  std::map<std::string, const Node*> producer_;
  std::map<std::string, std::vector<const Node*>> consumers_;
  std::map<std::string, size_t> position_;
  std::map<std::string, Epilogue> epilogues_;
  std::map<std::string, AttentionPlan> attention_;
  std::map<std::string, std::pair<std::vector<const Node*>, std::vector<const Epilogue*>>> group_at_;
  std::set<std::string> grouped_;
  std::set<std::string> fused_, tied_;
};

}  // namespace

Compiled compile(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt) {
  Compiled c;
  c.program.source = g.source + " (compiled)";
  Lowering(g, cfg, opt, c).run();
  return c;
}

}  // namespace tessera::neuroncore
