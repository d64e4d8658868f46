// Lowering (mapper/neuroncore/compile.hpp): the canonical graph, op by op, onto the kernel families.
// Fusion is an optimisation on top: a matmul or convolution absorbs a following scalar scale, a bias,
// an activation and a residual add (each the only reader of the value before it) into its
// evacuation; everything else compiles as its own kernel.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>

#include "isa/error.hpp"
#include "isa/interrupt.hpp"
#include "mapper/neuroncore/estimate.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"

namespace tessera::neuroncore {

using graph::Graph;
using graph::Node;

namespace {

// Weight prefetch (MappingOptions::prefetch_weights): a plan made from a first compile's estimate.
// A MatMul's constant right operand loads into a region at the top of SBUF while earlier kernels
// run, in the time their own DMAs leave the engines idle (attention, norms): its DMAs are held and
// released spread over those kernels' instructions (Emitter::release); what does not fit in their
// idle time loads as the matmul's kernel begins. The matmul then reads B from SBUF
// (MatmulJob::b_pre). docs/neuroncore-compiler.md "Weight prefetch".
struct PrefetchPart {
  const Node* node = nullptr;
  int64_t first = 0, last = 0;  // its prefetch DMAs [first, last) (prefetch_dmas)
};
struct PrefetchPlan {
  std::vector<std::vector<PrefetchPart>> at;  // per lowered position: released over its kernels
  std::vector<int64_t> every;                 // per lowered position: one DMA after every `every` instructions
  std::map<std::string, int64_t> where;       // by MatMul node: its SBUF offset (Ctx::prefetched)
  std::vector<int64_t> reserved;              // per lowered position: bytes per partition at the top of SBUF held
  std::vector<std::string> notes;
};

class Lowering {
 public:
  Lowering(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt, Compiled& c, const PrefetchPlan* plan = nullptr)
      : g_(g), opt_(opt), c_(c), em_(c.program), st_(g, cfg, opt, c), x_(g, cfg, opt, c, em_, st_), plan_(plan) {
    if (plan_) x_.prefetched = plan_->where;
  }

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
      const size_t i = lowered_.size();
      lowered_.push_back(&n);
      if (plan_) x_.sbuf_reserved = plan_->reserved[i];
      if (plan_ && !plan_->at[i].empty()) {
        // Its own weights' remainder first, in order before the instructions reading them; the
        // later kernels' weights held and released over its instructions.
        em_.begin_hold();
        for (const PrefetchPart& pp : plan_->at[i])
          if (pp.node == &n) prefetch(x_, *pp.node, epilogues_.at(pp.node->name), plan_->where.at(pp.node->name), pp.first, pp.last);
        em_.end_hold_for_next_kernel();
        em_.begin_hold();
        for (const PrefetchPart& pp : plan_->at[i])
          if (pp.node != &n) prefetch(x_, *pp.node, epilogues_.at(pp.node->name), plan_->where.at(pp.node->name), pp.first, pp.last);
        em_.end_hold();
        em_.release(plan_->every[i]);
      }
      const size_t k0 = c_.program.kernels.size(), e0 = em_.size();
      const int64_t hw = c_.sbuf_high_water;
      c_.sbuf_high_water = 0;
      const Status s = lower(n);
      sbuf_of_.push_back(c_.sbuf_high_water);
      c_.sbuf_high_water = std::max(hw, c_.sbuf_high_water);
      if (!s.ok)
        throw InputError(g_.where(n), "the NeuronCore compiler cannot compile this: " + s.reason,
                         s.hint.empty() ? "run the model on target.kind \"reference\"; docs/neuroncore-compiler.md lists what compiles" : s.hint);
      em_.flush_held();
      kernels_of_.push_back({k0, c_.program.kernels.size()});
      instrs_of_.push_back(static_cast<int64_t>(em_.size() - e0));
    }
    em_.schedule(48, &x_.cfg);
    estimate_kernels(c_, x_.cfg);
    if (plan_)
      for (const std::string& note : plan_->notes) c_.notes.push_back(note);
  }

  double seconds_at(size_t i) const {  // predicted seconds of lowered position i's kernels
    double t = 0;
    for (size_t k = kernels_of_[i].first; k < kernels_of_[i].second; ++k) t += c_.kernels[k].seconds;
    return t;
  }
  // The prefetch plan from this compile's estimate (one made without prefetches, or with the plan
  // before: the idle time counts only the kernels' own DMAs); nullopt: nothing to prefetch.
  // `plain`: the compile without prefetches, whose kernel times bound those here (a kernel that
  // got longer here did so by the prefetches it hosted, which are not idle time of its own) and
  // whose SBUF use and instruction counts are the kernels' own.
  std::optional<PrefetchPlan> plan_prefetch(const Lowering& plain) const {
    const size_t L = lowered_.size();
    std::vector<double> idle(L, 0.0);
    for (size_t i = 0; i < L; ++i) {
      const double t = std::min(seconds_at(i), plain.seconds_at(i));
      double own = 0;
      for (size_t k = kernels_of_[i].first; k < kernels_of_[i].second; ++k) own += c_.kernels[k].own_dma_s;
      idle[i] = std::max(0.0, t - own);
    }
    PrefetchPlan plan;
    plan.at.assign(L, {});
    plan.every.assign(L, 1);
    std::vector<int64_t> held(L, 0);
    const int64_t cap = x_.cfg.sbuf_partition_bytes / 2 / 64 * 64;
    struct Placed {
      size_t from, to;  // lowered positions it is live over
      int64_t lo, hi;   // bytes from the region's start
    };
    std::vector<Placed> placed;
    std::vector<int64_t> reserved(L, 0);  // per position: the region's extent live there
    for (size_t j = 1; j < L; ++j) {
      const Node& n = *lowered_[j];
      if (n.op != "MatMul" || attention_.count(n.name) || group_at_.count(n.name)) continue;
      const Epilogue& ep = epilogues_.at(n.name);
      const int64_t bytes = prefetch_bytes(x_, n, ep);
      if (bytes <= 0 || bytes > cap) continue;
      const int64_t count = prefetch_dmas(x_, n, ep);
      const double each = prefetch_dma_seconds(x_, n, ep);
      // The latest windows first, so the operand holds SBUF for as short a time as it can.
      std::vector<std::pair<size_t, int64_t>> take;  // (position, DMAs)
      int64_t left = count, top = 0;  // top: the most the region can reach while it is live
      for (size_t i = j; i-- > 0 && left > 0;) {
        // Not over a kernel that needs the SBUF (a kernel takes what it can use: the region would
        // cost it its buffers).
        top = std::max(top, reserved[i]);
        if (std::min(plain.sbuf_of_[i], sbuf_of_[i]) + top + bytes > x_.cfg.sbuf_partition_bytes) break;
        const auto t = std::min<int64_t>(left, static_cast<int64_t>(idle[i] / each));
        if (t > 0) take.push_back({i, t});
        left -= t;
      }
      if (take.empty()) continue;
      // A place in the region clear of the operands live at the same time (first fit).
      const size_t from = take.back().first;
      int64_t lo = 0;
      for (bool moved = true; moved;) {
        moved = false;
        for (const Placed& q : placed)
          if (q.from <= j && from <= q.to && q.lo < lo + bytes && lo < q.hi) {
            lo = q.hi;
            moved = true;
          }
      }
      if (lo + bytes > cap) continue;
      placed.push_back({from, j, lo, lo + bytes});
      for (size_t i = from; i <= j; ++i) reserved[i] = std::max(reserved[i], lo + bytes);
      // (operands sit from the top of SBUF down: [top - hi, top - lo))
      plan.where[n.name] = x_.cfg.sbuf_partition_bytes - (lo + bytes);
      int64_t next = 0;
      for (auto it = take.rbegin(); it != take.rend(); ++it) {
        plan.at[it->first].push_back({&n, next, next + it->second});
        held[it->first] += it->second;
        idle[it->first] -= static_cast<double>(it->second) * each;
        next += it->second;
      }
      if (next < count) plan.at[j].push_back({&n, next, count});  // loaded as its kernel starts
      char line[256];
      std::snprintf(line, sizeof line, "weights of %s prefetched (%lld KiB per partition): %lld of %lld DMAs while the %zu kernel(s) before it run",
                    n.name.c_str(), static_cast<long long>(bytes / 1024), static_cast<long long>(next), static_cast<long long>(count), take.size());
      plan.notes.push_back(line);
    }
    if (placed.empty()) return std::nullopt;
    plan.reserved = reserved;
    for (size_t i = 0; i < L; ++i)
      if (held[i] > 0) plan.every[i] = std::max<int64_t>(1, plain.instrs_of_[i] / (held[i] + 1));
    return plan;
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
    if (op == "Resize") return resize(x_, n);
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
        ep.bias_value = *other;
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
    // A LayerNormalization over the last axis of a MatMul's result (post-norm transformers' "Add &
    // Norm" after the out-projection and the feed-forward) normalises the result in SBUF before
    // it is stored (kernels/matmul_core.cpp): no store and reload of the pre-norm value.
    if (const Node* c = p.op == "MatMul" && opt_.fuse_norm ? only_consumer(ep.out) : nullptr;
        c && c->op == "LayerNormalization" && c->inputs[0] == ep.out && !tied_.count(c->outputs[0])) {
      const auto& xs = g_.value(ep.out).shape;
      int64_t axis = c->attrs.get_int("axis", -1);
      if (axis < 0) axis += static_cast<int64_t>(xs.size());
      bool ok = !xs.empty() && axis == static_cast<int64_t>(xs.size()) - 1 && xs.back() <= 4096 && same_dims(g_.value(c->outputs[0]).shape, out_shape);
      for (size_t o = 1; o < c->outputs.size(); ++o) ok = ok && c->outputs[o].empty();
      for (size_t k = 1; k < c->inputs.size(); ++k)
        ok = ok && (c->inputs[k].empty() || (g_.value(c->inputs[k]).data && g_.value(c->inputs[k]).shape == Shape{xs.back()}));
      if (ok) {
        Epilogue::Norm nm;
        nm.node = c;
        nm.in = ep.out;
        if (c->inputs.size() > 1 && !c->inputs[1].empty()) nm.scale = st_.ref(c->inputs[1]);
        if (c->inputs.size() > 2 && !c->inputs[2].empty()) nm.bias = st_.ref(c->inputs[2]);
        nm.eps = c->attrs.get_float("epsilon", 1e-5);
        ep.norm = nm;
        ep.out = c->outputs[0];
        fused_.insert(c->name);
      }
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
  const PrefetchPlan* plan_ = nullptr;
  std::vector<const Node*> lowered_;                       // the nodes lowered to kernels, in order
  std::vector<std::pair<size_t, size_t>> kernels_of_;      // per lowered node: its kernels [first, last)
  std::vector<int64_t> instrs_of_;                         // per lowered node: instructions emitted
  std::vector<int64_t> sbuf_of_;                           // per lowered node: SBUF bytes per partition its kernels use
};

}  // namespace

Compiled compile_once(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt) {
  Compiled c;
  c.program.source = g.source + " (compiled)";
  auto best = std::make_unique<Lowering>(g, cfg, opt, c);
  best->run();
  if (!opt.prefetch_weights) return c;
  // Weight prefetch: planned from the estimate of the compile before (the kernels' idle DMA time),
  // again from the compile with the plan (a matmul reading prefetched weights leaves the engines
  // idle in turn, for the next one's), kept only when the estimate says it is faster. A plan whose
  // region leaves a kernel too little SBUF is dropped (the program without it stands).
  struct Round {  // a plan and its compile (the Lowering refers to both)
    std::unique_ptr<PrefetchPlan> plan;
    std::unique_ptr<Compiled> out;
    std::unique_ptr<Lowering> lowering;
  };
  std::vector<Round> rounds;
  Compiled* chosen = &c;
  for (int round = 0; round < 2; ++round) {
    auto plan = (rounds.empty() ? *best : *rounds.back().lowering).plan_prefetch(*best);
    if (!plan) break;
    Round r{std::make_unique<PrefetchPlan>(std::move(*plan)), std::make_unique<Compiled>(), nullptr};
    r.out->program.source = c.program.source;
    r.lowering = std::make_unique<Lowering>(g, cfg, opt, *r.out, r.plan.get());
    try {
      r.lowering->run();
    } catch (const InputError&) {
      poll_interrupt();  // an interruption is not a plan that did not fit
      break;
    }
    if (r.out->predicted_s < chosen->predicted_s) chosen = r.out.get();
    rounds.push_back(std::move(r));
  }
  if (chosen == &c) return c;
  chosen->attention_choices = c.attention_choices;
  return std::move(*chosen);
}

Compiled compile(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt) {
  if (!opt.fuse_attention || opt.attention_kernel != AttentionKernel::automatic) return compile_once(g, cfg, opt);
  // Both attention kernels where either could take a chain; the faster program by the estimate
  // (ties: key_blocks).
  MappingOptions blocks = opt, bank = opt;
  blocks.attention_kernel = AttentionKernel::key_blocks;
  bank.attention_kernel = AttentionKernel::one_bank;
  Compiled a = compile_once(g, cfg, blocks);
  if (a.attention_choices == 0) return a;
  Compiled b = compile_once(g, cfg, bank);
  Compiled& keep = b.predicted_s < a.predicted_s ? b : a;
  const Compiled& other = &keep == &a ? b : a;
  char line[256];
  std::snprintf(line, sizeof line, "attention: the %s kernel (program predicted %.3f us; with the %s kernel %.3f us)",
                &keep == &a ? "key-block" : "one-bank", keep.predicted_s * 1e6, &keep == &a ? "one-bank" : "key-block", other.predicted_s * 1e6);
  keep.notes.push_back(line);
  return std::move(keep);
}

}  // namespace tessera::neuroncore
