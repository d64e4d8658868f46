#include "mapper/neuroncore/compile.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "isa/error.hpp"
#include "mapper/neuroncore/emit.hpp"
#include "mapper/neuroncore/estimate.hpp"

namespace tessera::neuroncore {

using graph::Graph;
using graph::Node;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row kernels keep a whole row of fp32 values per partition in SBUF (a few buffers of it).
constexpr int64_t kMaxRowElems = 8192;

// Unary ops the scalar engine computes as func(in * scale + bias).
bool unary_func(const std::string& op, Func& f) {
  static const std::pair<const char*, Func> table[] = {
      {"Relu", Func::relu},   {"Sigmoid", Func::sigmoid}, {"Tanh", Func::tanh},           {"Exp", Func::exp},
      {"Log", Func::log},     {"Sqrt", Func::sqrt},       {"Reciprocal", Func::reciprocal}, {"Identity", Func::identity},
      {"Gelu", Func::gelu}};
  for (const auto& [name, fn] : table)
    if (op == name) {
      f = fn;
      return true;
    }
  return false;
}

bool binary_alu(const std::string& op, Alu& a) {
  if (op == "Add") a = Alu::add;
  else if (op == "Sub") a = Alu::subtract;
  else if (op == "Mul") a = Alu::multiply;
  else if (op == "Div") a = Alu::divide;
  else return false;
  return true;
}

// Comparisons the vector engine computes as 1.0 / 0.0 (tensor_tensor or tensor_scalar).
bool compare_alu(const std::string& op, Alu& a) {
  if (op == "Greater") a = Alu::is_gt;
  else if (op == "GreaterOrEqual") a = Alu::is_ge;
  else if (op == "Less") a = Alu::is_lt;
  else if (op == "LessOrEqual") a = Alu::is_le;
  else if (op == "Equal") a = Alu::is_equal;
  else return false;
  return true;
}

// The comparison with its operands swapped (c > x is x < c).
Alu swapped(Alu a) {
  switch (a) {
    case Alu::is_gt: return Alu::is_lt;
    case Alu::is_ge: return Alu::is_le;
    case Alu::is_lt: return Alu::is_gt;
    case Alu::is_le: return Alu::is_ge;
    default: return a;
  }
}

bool is_reduce(const std::string& op) { return op == "ReduceSum" || op == "ReduceMean"; }

struct MatmulPlan {
  const Node* node = nullptr;
  std::string a, w, out;        // operands (graph values) and final output value after fusion
  std::string bias;             // constant bias [N] (fused Add or Gemm C), "" if none
  Func func = Func::identity;   // fused activation
  bool has_func = false;
  bool w_transposed = false;    // Gemm transB: the weight value is [N, K]
  std::vector<std::string> fused;  // names of fused nodes
};

class Compiler {
 public:
  Compiler(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt) : g_(g), cfg_(cfg), opt_(opt), em_(c_.program) {
    c_.program.source = g.source + " (compiled)";
  }

  Compiled run() {
    analyze_heads();
    analyze_convs();
    check_supported();
    plan_fusion();
    assign_layouts();
    allocate_io();
    for (size_t idx : emission_order()) {
      const Node& n = g_.nodes[idx];
      if (fused_.count(n.name) || view_nodes_.count(n.name)) continue;
      if (batched_.count(n.name)) emit_bmm(n);
      else if (is_reduce(n.op)) emit_reduce(n);
      else if (n.op == "Conv") emit_conv(convs_.at(n.name));
      else if (n.op == "MaxPool") emit_pool(n);
      else if (n.op == "Gather") emit_gather(n);
      else if (n.op == "MatMul" || n.op == "Gemm") emit_matmul(plans_.at(n.name));
      else if (is_alias(n)) continue;
      else if (is_row_kernel(n)) emit_rows(n);
      else emit_elementwise(n);
    }
    em_.schedule(48, &cfg_);
    finish_outputs();
    estimate_kernels(c_, cfg_);
    return std::move(c_);
  }

 private:
  // Stored matrix of a value: [rows, cols] as it lies in HBM (transposed layout swaps them).
  struct Stored {
    int64_t offset;
    DType dtype;
    int64_t rows, cols;
  };

  // A physical sub-matrix in HBM: `rows` x `cols` elements from `offset`, rows `stride` elements apart.
  struct Block {
    int64_t offset;
    DType dtype;
    int64_t rows, cols, stride;
    int64_t at(int64_t r, int64_t c) const { return offset + (r * stride + c) * static_cast<int64_t>(dtype_size(dtype)); }
  };
  static Block whole(const Stored& s) { return {s.offset, s.dtype, s.rows, s.cols, s.cols}; }

  // ---- analysis ------------------------------------------------------------------------------
  // Topological order in which a kernel that writes state in place (MappingOptions::in_place) comes
  // after every node reading that state: the scoreboard keeps program order, so a read placed after
  // the update would see the next step's value.
  std::vector<size_t> emission_order() const {
    const auto topo = g_.topo_order();
    if (opt_.in_place.empty()) return topo;
    const auto prod = g_.producers();
    std::vector<std::set<size_t>> after(g_.nodes.size());  // node -> nodes that must precede it
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& in : g_.nodes[i].inputs) {
        auto it = prod.find(in);
        if (it != prod.end()) after[i].insert(it->second);
      }
    for (const auto& [st, next] : opt_.in_place) {
      auto w = prod.find(storage(next));
      if (w == prod.end()) continue;
      for (size_t i = 0; i < g_.nodes.size(); ++i)
        if (i != w->second && std::any_of(g_.nodes[i].inputs.begin(), g_.nodes[i].inputs.end(),
                                          [&](const std::string& v) { return !v.empty() && g_.has_value(v) && view(v).first == st; }))
          after[w->second].insert(i);
    }
    std::vector<size_t> order;
    std::vector<bool> done(g_.nodes.size(), false);
    // Repeatedly take the first node in topological order whose predecessors are all placed.
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

  // A computed row vector ([N] or [1, N]) broadcast along the rows of a row kernel.
  static bool row_vector(const graph::Value& v) {
    return !v.data && (v.shape.size() == 1 || (v.shape.size() == 2 && v.shape[0] == 1));
  }

  // A training-step graph (state updated in place): float values keep their graph dtypes.
  bool train() const { return !opt_.in_place.empty(); }

  // A constant with one element (a scalar operand the vector engine takes as an immediate).
  std::optional<double> scalar_const(const std::string& v) const {
    if (v.empty() || !g_.has_value(v)) return std::nullopt;
    const auto& val = g_.value(storage(v));
    if (!val.data || val.data->numel() != 1) return std::nullopt;
    return val.data->cast(DType::f64).to_f64()[0];
  }

  bool has_scalar_operand(const Node& n) const {
    return std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) { return scalar_const(v).has_value(); });
  }

  // A computed value of one element (a learning rate or bias correction that depends on the step):
  // broadcast to every element of the other operand.
  bool one_element(const std::string& v) const {
    return !v.empty() && g_.has_value(v) && shape_numel(g_.value(v).shape) == 1 && !scalar_const(v);
  }
  bool has_one_element_operand(const Node& n) const {
    return std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) { return one_element(v); });
  }

  bool is_row_kernel(const Node& n) const {
    Alu a;
    if (n.op == "Softmax" || n.op == "LogSoftmax" || n.op == "LayerNormalization") return true;
    return binary_alu(n.op, a) && !has_scalar_operand(n) && !has_one_element_operand(n) && g_.value(n.inputs[0]).shape != g_.value(n.inputs[1]).shape;
  }

  // How a ReduceSum/ReduceMean reduces its input's [rows, cols] matrix view.
  enum class Reduce { all, over_last, over_leading };
  std::optional<Reduce> reduce_kind(const Node& n) const {
    const Shape& s = g_.value(n.inputs[0]).shape;
    const int64_t r = static_cast<int64_t>(s.size());
    std::vector<int64_t> axes = n.attrs.get_ints("axes", {});
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      const auto& av = g_.value(n.inputs[1]);
      if (!av.data) return std::nullopt;
      axes = av.data->cast(DType::i64).to_i64();
    }
    if (axes.empty()) {
      if (n.attrs.get_int("noop_with_empty_axes", 0)) return std::nullopt;
      return Reduce::all;
    }
    std::set<int64_t> set;
    for (int64_t a : axes) set.insert(a < 0 ? a + r : a);
    if (static_cast<int64_t>(set.size()) == r) return Reduce::all;
    if (set == std::set<int64_t>{r - 1}) return Reduce::over_last;
    std::set<int64_t> lead;
    for (int64_t i = 0; i + 1 < r; ++i) lead.insert(i);
    if (set == lead) return Reduce::over_leading;
    return std::nullopt;
  }

  // A row kernel's data input (for a binary op: the non-constant operand; Add/Mul commute).
  const std::string& row_input(const Node& n) const {
    if ((n.op == "Add" || n.op == "Mul") && g_.value(n.inputs[0]).data && !g_.value(n.inputs[1]).data) return n.inputs[1];
    if ((n.op == "Add" || n.op == "Mul") && n.inputs.size() == 2 && g_.value(n.inputs[0]).shape != g_.value(n.outputs[0]).shape) return n.inputs[1];
    return n.inputs[0];
  }

  bool is_alias(const Node& n) const {
    return n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze" || n.op == "Identity" ||
           n.op == "Transpose";
  }

  std::vector<const Node*> consumers(const std::string& v) const {
    std::vector<const Node*> r;
    for (const auto& n : g_.nodes)
      for (const auto& i : n.inputs)
        if (i == v) {
          r.push_back(&n);
          break;
        }
    return r;
  }

  bool is_output(const std::string& v) const { return std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end(); }

  void unsupported(const Node& n, const std::string& why) const {
    throw InputError(g_.where(n), "the NeuronCore compiler does not handle this yet: " + why,
                     "run the model on target.kind \"reference\", or see docs/neuroncore-compiler.md for the op set");
  }

  void check_supported() const {
    DiagnosticList d;
    for (const auto& n : g_.nodes) {
      Func f = Func::identity;
      Alu a = Alu::add;
      const auto& out = g_.value(n.outputs[0]);
      if (view_nodes_.count(n.name) || convs_.count(n.name) || pools_.count(n.name)) continue;
      if (batched_.count(n.name)) {
        const auto& A = g_.value(n.inputs[0]).shape;
        const auto& B = g_.value(n.inputs[1]).shape;
        if (A.size() != 3 || B.size() != 3 || A[0] != B[0] || A[2] != B[1])
          d.add(g_.where(n), "batched matmuls are compiled as [H, X, Y] @ [H, Y, Z], got " + shape_str(A) + " @ " + shape_str(B));
        continue;
      }
      if (n.op == "MatMul" || n.op == "Gemm") {
        const auto& A = g_.value(n.inputs[0]).shape;
        const auto& B = g_.value(n.inputs[1]).shape;
        if (A.size() < 2 || B.size() != 2)
          d.add(g_.where(n), "the NeuronCore compiler handles 2-D matmuls only, got " + shape_str(A) + " @ " + shape_str(B),
                "batched matmuls (attention) are not compiled yet; run on target.kind \"reference\"");
        if (n.op == "Gemm" && (n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0))
          d.add(g_.where(n), "Gemm with alpha or beta other than 1 is not compiled yet");
        if (n.op == "Gemm" && n.attrs.get_int("transA", 0))
          d.add(g_.where(n), "Gemm with transA is not compiled yet");
      } else if (n.op == "Cast") {
        if (!is_float(out.dtype) || !is_float(g_.value(n.inputs[0]).dtype))
          d.add(g_.where(n), "Cast is compiled between float types only, got " + std::string(dtype_name(g_.value(n.inputs[0]).dtype)) + " to " +
                                 std::string(dtype_name(out.dtype)));
      } else if (unary_func(n.op, f) || is_alias(n)) {
        if (n.op == "Transpose" && g_.value(n.inputs[0]).shape.size() != 2 && !trivial_transpose(n))
          d.add(g_.where(n), "only 2-D transposes are compiled (as a layout change)");
        if ((n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze") &&
            layout_free_shape(g_.value(n.inputs[0]).shape) != layout_free_shape(out.shape))
          d.add(g_.where(n), "a reshape that changes the 2-D matrix view is not compiled yet");
      } else if ((binary_alu(n.op, a) || compare_alu(n.op, a) || n.op == "Pow") && has_scalar_operand(n)) {
        // A scalar constant operand: an immediate of tensor_scalar.
        if (n.op == "Pow" && scalar_const(n.inputs[0]) && !(*scalar_const(n.inputs[0]) > 0))
          d.add(g_.where(n), "Pow with a constant base is compiled as exp(x ln c): the base must be positive");
      } else if ((binary_alu(n.op, a) || compare_alu(n.op, a) || n.op == "Pow") && has_one_element_operand(n)) {
        // A one-element operand: broadcast from HBM to every partition, read with stride 0.
      } else if (compare_alu(n.op, a) || n.op == "Pow") {
        if (g_.value(n.inputs[0]).shape != g_.value(n.inputs[1]).shape)
          d.add(g_.where(n), n.op + " with broadcasting is not compiled yet (" + shape_str(g_.value(n.inputs[0]).shape) + " and " +
                                 shape_str(g_.value(n.inputs[1]).shape) + ")");
      } else if (n.op == "Where") {
        if (scalar_const(n.inputs[0])) d.add(g_.where(n), "Where with a constant condition is not compiled (fold it)");
        for (size_t k = 0; k < 3; ++k)
          if (g_.value(n.inputs[k]).shape != out.shape && !scalar_const(n.inputs[k]) && !one_element(n.inputs[k]))
            d.add(g_.where(n), "Where is compiled with operands of the output's shape or of one element, got " +
                                   shape_str(g_.value(n.inputs[k]).shape) + " for input " + std::to_string(k));
      } else if (is_reduce(n.op)) {
        if (!reduce_kind(n))
          d.add(g_.where(n), n.op + " is compiled over all axes, the last axis, or all but the last; not over these",
                "run the model on target.kind \"reference\"");
      } else if (binary_alu(n.op, a)) {
        const bool commutes = n.op == "Add" || n.op == "Mul";
        const bool swap = commutes && g_.value(n.inputs[0]).data && !g_.value(n.inputs[1]).data;
        const auto& A = g_.value(n.inputs[swap ? 1 : 0]);
        const auto& B = g_.value(n.inputs[swap ? 0 : 1]);
        const bool bias_like = (B.data || row_vector(B)) && shape_numel(B.shape) == out.shape.back() && A.shape == out.shape;
        if (A.shape != B.shape && !bias_like)
          d.add(g_.where(n), "elementwise ops with broadcasting other than a constant along the last axis are not compiled yet (" +
                                 shape_str(A.shape) + " and " + shape_str(B.shape) + ")");
      } else if (n.op == "Gather") {
        const auto& table = g_.value(n.inputs[0]);
        const auto& idx = g_.value(n.inputs[1]);
        const int64_t axis = n.attrs.get_int("axis", 0);
        if (axis != 0 || table.shape.size() != 2 || !table.data)
          d.add(g_.where(n), "Gather is compiled as an embedding lookup: rows (axis 0) of a constant 2-D table, got axis " +
                                 std::to_string(axis) + " of " + shape_str(table.shape) + (table.data ? "" : " (not a constant)"));
        else if (table.shape[0] * static_cast<int64_t>(dtype_size(opt_.compute)) > cfg_.sbuf_partition_bytes / 2)
          d.add(g_.where(n), "the embedding table's " + std::to_string(table.shape[0]) + " rows do not fit half an SBUF partition (" +
                                 std::to_string(cfg_.sbuf_partition_bytes / 2) + " bytes) in " + std::string(dtype_name(opt_.compute)),
                "the gather keeps a column of the table per partition; use a smaller vocabulary or run on target.kind \"reference\"");
        if (is_float(idx.dtype)) d.add(g_.where(n), "Gather indices must be integers, got " + std::string(dtype_name(idx.dtype)));
      } else if (n.op == "Softmax" || n.op == "LogSoftmax") {
        const int64_t r = static_cast<int64_t>(out.shape.size());
        const int64_t axis = n.attrs.get_int("axis", g_.opset >= 13 ? -1 : 1);
        if (axis != -1 && axis != r - 1) d.add(g_.where(n), n.op + " over an axis other than the last is not compiled yet");
        if (out.shape.back() > kMaxRowElems) d.add(g_.where(n), "rows longer than " + std::to_string(kMaxRowElems) + " elements are not compiled yet");
      } else if (n.op == "LayerNormalization") {
        const int64_t r = static_cast<int64_t>(out.shape.size());
        const int64_t axis = n.attrs.get_int("axis", -1);
        if (axis != -1 && axis != r - 1) d.add(g_.where(n), "LayerNormalization over more than the last axis is not compiled yet");
        if (n.outputs.size() > 1) d.add(g_.where(n), "LayerNormalization's Mean/InvStdDev outputs are not compiled");
        for (size_t k = 1; k < n.inputs.size(); ++k)
          if (!n.inputs[k].empty() && !g_.value(n.inputs[k]).data) d.add(g_.where(n), "LayerNormalization's scale and bias must be constants");
        if (out.shape.back() > kMaxRowElems) d.add(g_.where(n), "rows longer than " + std::to_string(kMaxRowElems) + " elements are not compiled yet");
      } else {
        d.add(g_.where(n), "op " + n.op + " is not in the NeuronCore compiler's op set yet",
              "run the model on target.kind \"reference\"; docs/neuroncore-compiler.md lists the compiled ops");
      }
    }
    d.throw_if_any();
  }

  // A shape as the [rows, cols] matrix the compiler stores: leading dims folded into rows.
  static std::pair<int64_t, int64_t> layout_free_shape(const Shape& s) {
    if (s.empty()) return {1, 1};
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < s.size(); ++i) rows *= s[i];
    return {rows, s.back()};
  }

  // Follows aliases (reshape-like) to the value that owns the storage.
  std::string storage(const std::string& v) const {
    auto it = alias_of_.find(v);
    return it == alias_of_.end() ? v : storage(it->second);
  }

  // A bias the matmul epilogue adds per output column: a constant of N elements, or (fp32 only: the
  // epilogue reads fp32) a 1-D graph input of N elements, e.g. a bias being trained.
  bool bias_value(const std::string& v, int64_t N) const {
    const auto& val = g_.value(v);
    if (shape_numel(val.shape) != N) return false;
    if (val.data) return true;
    const DType stored_dt = train() ? val.dtype : opt_.compute;
    return stored_dt == DType::f32 && val.shape.size() == 1 && std::find(g_.inputs.begin(), g_.inputs.end(), v) != g_.inputs.end();
  }

  void plan_fusion() {
    for (const auto& n : g_.nodes) {
      if ((n.op != "MatMul" && n.op != "Gemm") || batched_.count(n.name)) continue;
      MatmulPlan p;
      p.node = &n;
      p.a = n.inputs[0];
      p.w = n.inputs[1];
      p.w_transposed = n.op == "Gemm" && n.attrs.get_int("transB", 0) != 0;
      p.out = n.outputs[0];
      if (n.op == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty()) {
        const auto& c = g_.value(n.inputs[2]);
        if (!bias_value(n.inputs[2], g_.value(p.out).shape.back()))
          unsupported(n, std::string("Gemm's C must be a bias of the output's last dimension: a constant") +
                             (opt_.compute == DType::f32 ? ", or a 1-D graph input" : ", or a 1-D graph input with precision.compute fp32") +
                             ", got " + (c.data ? "a constant " : "") + shape_str(c.shape));
        p.bias = n.inputs[2];
      }
      // Absorb a following bias Add and one activation, each the only consumer.
      for (int step = 0; step < 2; ++step) {
        auto cons = consumers(p.out);
        if (cons.size() != 1 || is_output(p.out)) break;
        const Node& next = *cons[0];
        Func f;
        if (step == 0 && p.bias.empty() && next.op == "Add") {
          const std::string other = next.inputs[0] == p.out ? next.inputs[1] : next.inputs[0];
          if (bias_value(other, g_.value(p.out).shape.back())) {
            p.bias = other;
            p.fused.push_back(next.name);
            p.out = next.outputs[0];
            continue;
          }
          break;
        }
        if (!p.has_func && unary_func(next.op, f) && next.op != "Identity") {
          p.func = f;
          p.has_func = true;
          p.fused.push_back(next.name);
          p.out = next.outputs[0];
          break;
        }
        break;
      }
      for (const auto& f : p.fused) fused_.insert(f);
      plans_[n.name] = p;
    }
    for (const auto& n : g_.nodes)
      if (is_alias(n) && (n.op != "Transpose" || trivial_transpose(n)) && !view_nodes_.count(n.name))
        alias_of_[n.outputs[0]] = n.inputs[0];
  }

  // Layout per stored value: true = transposed. A matmul's A operand wants T, its weight N; a
  // Transpose node flips the layout of the same storage; elementwise ops keep their input's.
  void assign_layouts() {
    // Transposes are views too: value -> (source, flipped).
    for (const auto& n : g_.nodes)
      if (n.op == "Transpose" && !view_nodes_.count(n.name) && !trivial_transpose(n)) transpose_of_[n.outputs[0]] = n.inputs[0];
    // 0. State updated in place keeps one layout: its next value is stored where it is.
    for (const auto& [st, next] : opt_.in_place) tie_.emplace(storage(next), st);
    // 1. Row kernels (softmax, layer norm, a constant broadcast along rows) keep rows on partitions
    // (an input laid out the other way is read from a transposed copy).
    for (const auto& n : g_.nodes)
      if (is_row_kernel(n) && !fused_.count(n.name) && !view_nodes_.count(n.name)) {
        want(row_input(n), false);
        require(n.outputs[0], false, n);
      }
    // 2. Elementwise ops keep their operands' layout, forward in topological order: the output and
    // operands not yet laid out take the first laid-out operand's; one laid out the other way is read
    // from a transposed copy. Reductions prefer the reduced axis along the free dimension.
    for (size_t idx : g_.topo_order()) {
      const Node& n = g_.nodes[idx];
      Func f;
      Alu a;
      if (fused_.count(n.name) || view_nodes_.count(n.name) || is_row_kernel(n)) continue;
      if (is_reduce(n.op)) {
        const auto k = reduce_kind(n);
        if (k && *k != Reduce::all) want(n.inputs[0], *k == Reduce::over_leading);
        continue;
      }
      if (!(unary_func(n.op, f) || binary_alu(n.op, a) || compare_alu(n.op, a) || n.op == "Pow" || n.op == "Where" || n.op == "Cast")) continue;
      for (const auto& in : n.inputs) {
        if (scalar_const(in)) continue;
        auto [st, flip] = view(in);
        auto it = layout_.find(st);
        if (it == layout_.end()) continue;
        const bool in_t = it->second != flip;
        want(n.outputs[0], in_t);
        for (const auto& other : n.inputs)
          if (!scalar_const(other)) want(other, in_t);
        break;
      }
    }
    // 3. A matmul's operands want the contraction dimension first. Constants are transposed at
    // compile time; a value already laid out the other way gets a transposed copy (a transpose
    // kernel on the tensor engine) made once, before its first matmul reads it.
    for (const auto& [name, p] : plans_) {
      want(p.a, true);
      want(p.w, p.w_transposed);
    }
    // Batched matmuls: per head, A_h^T and B_h must be row-major blocks of their storage.
    for (const auto& name : batched_) {
      const Node& n = node_named(name);
      const HeadView a = head_of(n.inputs[0]), b = head_of(n.inputs[1]);
      want(a.storage, !a.transposed);
      want(b.storage, b.transposed);
    }
    // Gathers read the table transposed (a table row per free position, the embedding dims on
    // partitions) and write the rows they look up as columns: the output is best stored T, which
    // is also what a matmul consuming it wants; a row kernel consuming it keeps it N (strided
    // stores).
    for (const auto& n : g_.nodes) {
      if (n.op != "Gather") continue;
      require(n.inputs[0], true, n);
      require(n.inputs[1], false, n);
      auto [st, flip] = view(n.outputs[0]);
      if (!layout_.count(st)) layout_[st] = !flip;
    }
  }

  // A transpose that only moves dimensions of size 1 leaves memory as it is: a reshape.
  bool trivial_transpose(const Node& n) const {
    if (n.op != "Transpose") return false;
    const Shape& in = g_.value(n.inputs[0]).shape;
    std::vector<int64_t> perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(in.size()) - 1; i >= 0; --i) perm.push_back(i);
    int64_t last = -1;
    for (int64_t p : perm) {
      if (in[static_cast<size_t>(p)] == 1) continue;
      if (p < last) return false;
      last = p;
    }
    return true;
  }

  const Node& node_named(const std::string& name) const {
    for (const auto& n : g_.nodes)
      if (n.name == name) return n;
    throw std::logic_error("no node " + name);
  }

  // ---- attention: heads as blocks of 2-D storage ----------------------------------------------
  // A 3-D value [H, X, Y] whose head h is a block of a stored 2-D matrix L (graph orientation):
  // columns [h*w, (h+1)*w) of L (col_blocks) or rows [h*w, (h+1)*w), as is or transposed, times
  // `scale`. The exporter's Reshape [S, D] -> [S, H, dh] + Transpose (1,0,2) or (1,2,0) splits
  // heads as column blocks; a batched matmul writes row blocks of its own [H*X, Y] storage, or
  // column blocks of the [X, H*Z] matrix a following Transpose (1,0,2) + Reshape merges heads into.
  struct HeadView {
    std::string storage;
    bool col_blocks = false;
    int64_t w = 0;
    bool transposed = false;
    double scale = 1.0;
  };

  HeadView head_of(const std::string& v) const {
    auto it = heads_.find(v);
    if (it != heads_.end()) return it->second;
    const auto& shp = g_.value(v).shape;
    return HeadView{v, false, shp.size() == 3 ? shp[1] : 0, false, 1.0};  // own storage, row blocks
  }

  const Node* producer_of(const std::string& v) const {
    for (const auto& n : g_.nodes)
      for (const auto& o : n.outputs)
        if (o == v) return &n;
    return nullptr;
  }

  // The head view of a batched matmul operand `v`: an optional scalar scale (Div/Mul) over a
  // Transpose (1,0,2) or (1,2,0) of a Reshape [S, D] -> [S, H, dh]. Marks the nodes it absorbs.
  std::optional<HeadView> trace_split(const std::string& v) {
    double scale = 1.0;
    std::vector<std::string> absorbed;
    const Node* n = producer_of(v);
    if (n && (n->op == "Div" || n->op == "Mul") && g_.value(n->inputs[1]).data && g_.value(n->inputs[1]).data->numel() == 1 &&
        consumers(n->outputs[0]).size() == 1) {
      const double c = g_.value(n->inputs[1]).data->to_f64()[0];
      scale = n->op == "Div" ? 1.0 / c : c;
      absorbed.push_back(n->name);
      n = producer_of(n->inputs[0]);
    }
    if (!n || n->op != "Transpose" || g_.value(n->inputs[0]).shape.size() != 3) return std::nullopt;
    const auto perm = n->attrs.get_ints("perm", {2, 1, 0});
    const bool split = perm == std::vector<int64_t>{1, 0, 2}, split_t = perm == std::vector<int64_t>{1, 2, 0};
    const Node* r = producer_of(n->inputs[0]);
    if ((!split && !split_t) || !r || r->op != "Reshape") return std::nullopt;
    const Shape& rs = g_.value(r->outputs[0]).shape;  // [S, H, dh]
    const auto [S, D] = layout_free_shape(g_.value(r->inputs[0]).shape);
    if (rs.size() != 3 || rs[0] != S || rs[1] * rs[2] != D) return std::nullopt;
    absorbed.push_back(n->name);
    absorbed.push_back(r->name);
    view_nodes_.insert(absorbed.begin(), absorbed.end());
    return HeadView{r->inputs[0], true, rs[2], split_t, scale};
  }

  void analyze_heads() {
    for (size_t idx : g_.topo_order()) {
      const Node& n = g_.nodes[idx];
      if (n.op != "MatMul" || g_.value(n.inputs[0]).shape.size() != 3 || g_.value(n.inputs[1]).shape.size() != 3) continue;
      batched_.insert(n.name);
      for (const auto& in : n.inputs)
        if (auto hv = trace_split(in)) heads_[in] = *hv;
      const Shape& os = g_.value(n.outputs[0]).shape;  // [H, X, Z]
      HeadView out{n.outputs[0], false, os[1], false, 1.0};
      // Transpose (1,0,2) then Reshape to [X, H*Z] merges the heads as column blocks.
      auto cons = consumers(n.outputs[0]);
      if (cons.size() == 1 && cons[0]->op == "Transpose" && cons[0]->attrs.get_ints("perm") == std::vector<int64_t>{1, 0, 2}) {
        auto cons2 = consumers(cons[0]->outputs[0]);
        if (cons2.size() == 1 && cons2[0]->op == "Reshape") {
          const auto [X, HZ] = layout_free_shape(g_.value(cons2[0]->outputs[0]).shape);
          if (X == os[1] && HZ == os[0] * os[2]) {
            out = HeadView{cons2[0]->outputs[0], true, os[2], false, 1.0};
            view_nodes_.insert(cons[0]->name);
            view_nodes_.insert(cons2[0]->name);
          }
        }
      }
      heads_[n.outputs[0]] = out;
    }
  }

  // The physical HBM block of head h of `hv`, given its storage laid out as `s` (phys_t: s holds
  // the transpose of the graph-orientation matrix).
  static Block head_block(const HeadView& hv, const Stored& s, bool phys_t, int64_t h) {
    const int64_t es = static_cast<int64_t>(dtype_size(s.dtype));
    // In the physical matrix a logical column block is a row block when transposed, and vice versa.
    const bool rows_block = hv.col_blocks == phys_t;
    if (rows_block) return Block{s.offset + h * hv.w * s.cols * es, s.dtype, hv.w, s.cols, s.cols};
    return Block{s.offset + h * hv.w * es, s.dtype, s.rows, hv.w, s.cols};
  }

  // ---- convolutions: channel-major activations, im2col through DMA access patterns ------------
  // A 4-D activation [N, C, H, W] of a convolution or pooling is stored channel-major,
  // [C][N][H + 2*pad][W + 2*pad], with a zero border for the padding of the convolutions that read it
  // (HBM that was never written reads as zero). A convolution is a matmul: out[Cout, (n, oh, ow)] =
  // W[Cout, (ci, kh, kw)] @ im2col; the im2col rows are DMAs with a strided pattern per (ci, kh)
  // group of kw partitions, so nothing is unfolded in memory.
  struct CmStore {
    int64_t offset;
    DType dtype;
    int64_t C, N, H, W, pad;
    int64_t Hp() const { return H + 2 * pad; }
    int64_t Wp() const { return W + 2 * pad; }
    int64_t es() const { return static_cast<int64_t>(dtype_size(dtype)); }
    // Byte address of interior element (c, n, h, w).
    int64_t at(int64_t c, int64_t n, int64_t h, int64_t w) const {
      return offset + (((c * N + n) * Hp() + h + pad) * Wp() + w + pad) * es();
    }
  };
  struct ConvPlan {
    const Node* node = nullptr;
    std::string x, w, bias, out;
    Func func = Func::identity;
    int64_t pad = 0, stride = 1;
  };

  bool four_d(const std::string& v) const { return g_.value(v).shape.size() == 4; }

  void analyze_convs() {
    DiagnosticList d;
    for (const auto& n : g_.nodes) {
      if (n.op == "Conv") {
        ConvPlan p;
        p.node = &n;
        p.x = n.inputs[0];
        p.w = n.inputs[1];
        p.out = n.outputs[0];
        if (n.inputs.size() > 2 && !n.inputs[2].empty()) p.bias = n.inputs[2];
        const auto pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
        const auto strides = n.attrs.get_ints("strides", {1, 1});
        const auto dil = n.attrs.get_ints("dilations", {1, 1});
        const bool sym = pads.size() == 4 && pads[0] == pads[1] && pads[1] == pads[2] && pads[2] == pads[3];
        if (!four_d(p.x) || n.attrs.get_int("group", 1) != 1 || !sym || strides.size() != 2 || strides[0] != strides[1] ||
            dil != std::vector<int64_t>{1, 1} || n.attrs.get_string("auto_pad", "NOTSET") != "NOTSET" || !g_.value(p.w).data ||
            (!p.bias.empty() && !g_.value(p.bias).data)) {
          d.add(g_.where(n), "the NeuronCore compiler handles 2-D convolutions with group 1, no dilation, equal strides and "
                             "pads, and constant weights and bias");
          continue;
        }
        p.pad = pads[0];
        p.stride = strides[0];
        // Absorb a following activation that is the only consumer.
        auto cons = consumers(p.out);
        Func f;
        if (cons.size() == 1 && !is_output(p.out) && unary_func(cons[0]->op, f) && cons[0]->op != "Identity") {
          p.func = f;
          fused_.insert(cons[0]->name);
          p.out = cons[0]->outputs[0];
        }
        cm_pad_[p.x] = std::max(cm_pad_[p.x], p.pad);
        cm_pad_.emplace(p.out, 0);
        convs_[n.name] = p;
      } else if (n.op == "MaxPool") {
        const auto k = n.attrs.get_ints("kernel_shape");
        const auto st = n.attrs.get_ints("strides", {1, 1});
        const auto pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
        const Shape& xs = g_.value(n.inputs[0]).shape;
        if (xs.size() != 4 || k != std::vector<int64_t>{2, 2} || st != std::vector<int64_t>{2, 2} ||
            pads != std::vector<int64_t>{0, 0, 0, 0} || n.attrs.get_int("ceil_mode", 0) != 0 || n.outputs.size() > 1 ||
            xs[2] % 2 || xs[3] % 2 || xs[1] > cfg_.partitions) {
          d.add(g_.where(n), "the NeuronCore compiler handles 2x2 max pooling with stride 2 on even sizes only");
          continue;
        }
        cm_pad_.emplace(n.inputs[0], 0);
        pools_.insert(n.name);
        // A following Flatten(axis=1) is written directly by the pooling kernel.
        auto cons = consumers(n.outputs[0]);
        if (cons.size() == 1 && cons[0]->op == "Flatten" && cons[0]->attrs.get_int("axis", 1) == 1) {
          pool_flatten_[n.name] = cons[0]->outputs[0];
          view_nodes_.insert(cons[0]->name);
        } else {
          cm_pad_.emplace(n.outputs[0], 0);
        }
      }
    }
    d.throw_if_any();
    for (const auto& [v, pad] : cm_pad_)
      if (!four_d(v)) throw InputError(g_.source, "tensor '" + v + "' feeds a convolution or pooling but is not 4-D");
  }

  const CmStore& cm_store(const std::string& v) {
    auto it = cm_.find(v);
    if (it != cm_.end()) return it->second;
    const Shape& sh = g_.value(v).shape;
    CmStore c{0, is_output(v) ? DType::f32 : opt_.compute, sh[1], sh[0], sh[2], sh[3], cm_pad_.at(v)};
    c.offset = hbm_alloc(v, c.dtype, {c.C, c.N, c.Hp(), c.Wp()});
    return cm_[v] = c;
  }

  void emit_conv(const ConvPlan& p) {
    const Node& n = *p.node;
    const Shape& ws = g_.value(p.w).shape;  // [Cout, Cin, KH, KW]
    const int64_t Cout = ws[0], Cin = ws[1], KH = ws[2], KW = ws[3], K = Cin * KH * KW;
    const CmStore& X = cm_store(p.x);
    const CmStore O = cm_store(p.out);
    if (O.pad != 0) unsupported(n, "a convolution feeding a padded convolution directly is not compiled yet");
    const int64_t OH = O.H, OW = O.W, s = p.stride;
    if (OW > std::min<int64_t>(cfg_.max_moving_free, cfg_.psum_bank_bytes() / 4)) unsupported(n, "output rows wider than a PSUM bank");
    // W^T [K, Cout] (rows ci, kh, kw), cast to the compute dtype at compile time.
    const std::string wname = p.w + "@K";
    Tensor wt = transpose2d(g_.value(p.w).data->cast(DType::f32).reshaped({Cout, K}));
    const int64_t woff = hbm_alloc(wname, opt_.compute, {K, Cout});
    c_.hbm_init.push_back({wname, wt.cast(opt_.compute)});
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(0);
    c_.pieces.push_back({1, 1});
    const Block stat{woff, opt_.compute, K, Cout, Cout};
    const Block mov{0, X.dtype, K, X.N * OH * OW, 0};  // loaded by the im2col loader below
    const Block out{O.offset, O.dtype, Cout, O.N * OH * OW, O.N * OH * OW};
    // Column tiles: whole output rows of one image, up to a PSUM bank.
    const int64_t rows_per_tile = std::max<int64_t>(1, std::min<int64_t>(cfg_.max_moving_free, cfg_.psum_bank_bytes() / 4) / OW);
    std::vector<std::pair<int64_t, int64_t>> tiles;
    for (int64_t img = 0; img < X.N; ++img)
      for (int64_t oh0 = 0; oh0 < OH; oh0 += rows_per_tile)
        tiles.push_back({(img * OH + oh0) * OW, std::min(rows_per_tile, OH - oh0) * OW});
    const CmStore Xc = X;
    const int64_t pad = p.pad;
    MovLoader im2col = [this, Xc, KH, KW, OH, OW, s, pad](int64_t f0, int64_t fn, int64_t k0, int64_t kn, const AccessPattern& dst) {
      const int64_t img = f0 / (OH * OW), oh0 = (f0 % (OH * OW)) / OW, nh = fn / OW;
      // Rows k0..k0+kn are (ci, kh, kw) in that order; each (ci, kh) run of kw is one DMA whose
      // partitions step one input column apart.
      for (int64_t k = k0; k < k0 + kn;) {
        const int64_t ci = k / (KH * KW), kh = (k / KW) % KH, kw = k % KW;
        const int64_t cnt = std::min(KW - kw, k0 + kn - k);
        AccessPattern d = dst;
        d.part_start = static_cast<int32_t>(k - k0);
        d.parts = static_cast<int32_t>(cnt);
        // Input row oh*s + kh - pad, column ow*s + kw - pad (the border holds the padding zeros).
        const int64_t src = Xc.at(ci, img, oh0 * s + kh - pad, kw - pad);
        AccessPattern a = in_hbm(Xc.dtype, static_cast<int32_t>(cnt), 1, src,
                                 {{static_cast<int32_t>(nh), static_cast<int32_t>(s * Xc.Wp())}, {static_cast<int32_t>(OW), static_cast<int32_t>(s)}});
        d.ndims = 2;
        d.dims[0] = {static_cast<int32_t>(nh), static_cast<int32_t>(OW)};
        d.dims[1] = {static_cast<int32_t>(OW), 1};
        em_.dma(d, a);  // per-tile operand rows: the stream queues spread them over engines
        k += cnt;
      }
    };
    Epilogue ep;
    ep.bias = p.bias;
    ep.bias_on_partitions = true;
    ep.func = p.func;
    matmul_core(n.name, stat, mov, out, ep, 0, 1, im2col, tiles);
  }

  // 2x2 max pooling with stride 2 over a channel-major value: max of the four strided views.
  void emit_pool(const Node& n) {
    const CmStore& X = cm_store(n.inputs[0]);
    const int64_t C = X.C, N = X.N, H = X.H, W = X.W, OH = H / 2, OW = W / 2;
    const bool to_flat = pool_flatten_.count(n.name) != 0;
    Stored F{};
    CmStore O{};
    if (to_flat) F = stored(pool_flatten_.at(n.name));
    else O = cm_store(n.outputs[0]);
    const DType odt = to_flat ? F.dtype : O.dtype;
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(1);
    c_.pieces.push_back({1, 1});
    Sbuf sb{0, cfg_.sbuf_partition_bytes, n.name};
    const int64_t xin = sb.take(N * H * W * 4), t1 = sb.take(N * OH * OW * 4), t2 = sb.take(N * OH * OW * 4),
                  yo = sb.take(N * OH * OW * 4);
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    const int32_t Ci = static_cast<int32_t>(C);
    // Load the interior [C, N, H, W].
    em_.dma(on_chip(Space::sbuf, X.dtype, 0, Ci, xin, {{static_cast<int32_t>(N * H * W), 1}}),
            in_hbm(X.dtype, Ci, N * X.Hp() * X.Wp(), X.at(0, 0, 0, 0),
                   {{static_cast<int32_t>(N), static_cast<int32_t>(X.Hp() * X.Wp())}, {static_cast<int32_t>(H), static_cast<int32_t>(X.Wp())},
                    {static_cast<int32_t>(W), 1}}));
    // Output rows (n, oh) read input rows 2*(n*OH + oh) (H is even).
    auto view = [&](int64_t dy, int64_t dx) {
      return on_chip(Space::sbuf, X.dtype, 0, Ci, xin + (dy * W + dx) * static_cast<int64_t>(dtype_size(X.dtype)),
                     {{static_cast<int32_t>(N * OH), static_cast<int32_t>(2 * W)}, {static_cast<int32_t>(OW), 2}});
    };
    auto dense = [&](int64_t off, DType t) {
      return on_chip(Space::sbuf, t, 0, Ci, off, {{static_cast<int32_t>(N * OH), static_cast<int32_t>(OW)}, {static_cast<int32_t>(OW), 1}});
    };
    auto vmax = [&](const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b) { tensor_tensor(Alu::max, dst, a, b); };
    vmax(dense(t1, DType::f32), view(0, 0), view(0, 1));
    vmax(dense(t2, DType::f32), view(1, 0), view(1, 1));
    vmax(dense(yo, odt), dense(t1, DType::f32), dense(t2, DType::f32));
    const int64_t HW = OH * OW;
    const AccessPattern y = on_chip(Space::sbuf, odt, 0, Ci, yo, {{static_cast<int32_t>(N), static_cast<int32_t>(HW)}, {static_cast<int32_t>(HW), 1}});
    if (to_flat) {
      // Flatten [N, C*HW]: element (n, c*HW + hw). Stored transposed ([C*HW, N]) or as is.
      if (transposed(view_of_flat(n))) {
        em_.dma(in_hbm(odt, Ci, HW * N, F.offset, {{static_cast<int32_t>(N), 1}, {static_cast<int32_t>(HW), static_cast<int32_t>(N)}}), y,
                Emitter::DmaClass::bulk);
      } else {
        em_.dma(in_hbm(odt, Ci, HW, F.offset, {{static_cast<int32_t>(N), static_cast<int32_t>(C * HW)}, {static_cast<int32_t>(HW), 1}}), y,
                Emitter::DmaClass::bulk);
      }
    } else {
      em_.dma(in_hbm(odt, Ci, N * O.Hp() * O.Wp(), O.at(0, 0, 0, 0),
                     {{static_cast<int32_t>(N), static_cast<int32_t>(O.Hp() * O.Wp())}, {static_cast<int32_t>(OH), static_cast<int32_t>(O.Wp())},
                      {static_cast<int32_t>(OW), 1}}),
              on_chip(Space::sbuf, odt, 0, Ci, yo, {{static_cast<int32_t>(N), static_cast<int32_t>(HW)}, {static_cast<int32_t>(OH), static_cast<int32_t>(OW)}, {static_cast<int32_t>(OW), 1}}),
              Emitter::DmaClass::bulk);
    }
  }

  std::string view_of_flat(const Node& pool) const { return view(pool_flatten_.at(pool.name)).first; }

  // Embedding lookup out[i, :] = table[idx[i], :] on the gpsimd engine: per group of up to 128
  // embedding dims, the table's columns (stored T: [D, V]) sit on the partitions, the indices are
  // broadcast to every partition, and `gather` picks table[d, idx[i]] on partition d. The result is
  // a column per index: stored T it is a plain block; stored N, blocks of 128 indices go through
  // the tensor engine's transpose (PSUM) so that each index's row is stored contiguously.
  void emit_gather(const Node& n) {
    const Stored T = stored(n.inputs[0]);  // [D, V]
    const Stored I = stored(n.inputs[1]);  // indices, row-major
    const Stored O = stored(n.outputs[0]);
    const bool out_t = transposed(view(n.outputs[0]).first);
    const int64_t D = T.rows, V = T.cols, N = I.rows * I.cols;
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(2);
    c_.pieces.push_back({1, 1});
    Sbuf sb{0, cfg_.sbuf_partition_bytes, n.name};
    const int64_t tes = static_cast<int64_t>(dtype_size(T.dtype)), oes = static_cast<int64_t>(dtype_size(O.dtype));
    const int64_t NC = std::min<int64_t>(N, out_t ? 2048 : cfg_.tensor_cols);  // indices per gather
    const int64_t tab = sb.take(V * tes), idx = sb.take(2 * NC * 4), res = sb.take(2 * NC * 4);
    const int64_t rows = out_t ? 0 : sb.take(2 * cfg_.partitions * 4);  // transposed blocks [index, dim]
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    int64_t chunk = 0;
    for (int64_t d0 = 0; d0 < D; d0 += cfg_.partitions) {
      const int32_t dg = static_cast<int32_t>(std::min<int64_t>(cfg_.partitions, D - d0));
      em_.dma(on_chip(Space::sbuf, T.dtype, 0, dg, tab, {{static_cast<int32_t>(V), 1}}),
              in_hbm(T.dtype, dg, V, T.offset + d0 * V * tes, {{static_cast<int32_t>(V), 1}}), Emitter::DmaClass::bulk);
      for (int64_t n0 = 0; n0 < N; n0 += NC, ++chunk) {
        const int32_t nc = static_cast<int32_t>(std::min(NC, N - n0));
        const AccessPattern ix = on_chip(Space::sbuf, DType::i32, 0, dg, idx + (chunk % 2) * NC * 4, {{nc, 1}});
        em_.dma(ix, in_hbm(DType::i32, dg, 0, I.offset + n0 * 4, {{nc, 1}}));  // broadcast to every partition
        const AccessPattern r = on_chip(Space::sbuf, out_t ? O.dtype : T.dtype, 0, dg, res + (chunk % 2) * NC * 4, {{nc, 1}});
        Instr g;
        g.op = Op::gather;
        g.dst = r;
        g.src0 = on_chip(Space::sbuf, T.dtype, 0, dg, tab, {{static_cast<int32_t>(V), 1}});
        g.src1 = ix;
        em_.emit(g, Lane::gpsimd);
        if (out_t)
          em_.dma(in_hbm(O.dtype, dg, N, O.offset + (d0 * N + n0) * oes, {{nc, 1}}), r, Emitter::DmaClass::bulk);
        else {
          const AccessPattern ps = on_chip(Space::psum, DType::f32, 0, nc, (chunk % std::min<int64_t>(cfg_.psum_banks, 8)) * cfg_.psum_bank_bytes(), {{dg, 1}});
          Instr tr;
          tr.op = Op::transpose;
          tr.dst = ps;
          tr.src0 = r;
          em_.emit(tr, Lane::tensor);
          const AccessPattern rw = on_chip(Space::sbuf, O.dtype, 0, nc, rows + (chunk % 2) * cfg_.partitions * 4, {{dg, 1}});
          Instr cp;
          cp.op = Op::tensor_copy;
          cp.dst = rw;
          cp.src0 = ps;
          em_.emit(cp, Lane::vector);
          em_.dma(in_hbm(O.dtype, nc, D, O.offset + (n0 * D + d0) * oes, {{dg, 1}}), rw, Emitter::DmaClass::bulk);
        }
      }
    }
  }

  void emit_bmm(const Node& n) {
    const HeadView a = head_of(n.inputs[0]), b = head_of(n.inputs[1]), o = head_of(n.outputs[0]);
    const Shape& as = g_.value(n.inputs[0]).shape;
    const int64_t H = as[0];
    // A_h^T and B_h as row-major blocks (their storages laid out, or copied, that way).
    const Stored SA = operand(a.storage, !a.transposed);
    const Stored SB = operand(b.storage, b.transposed);
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(0);
    c_.pieces.push_back({1, 1});
    const Stored SO = stored(o.storage);
    const bool out_t = transposed(view(o.storage).first);
    Epilogue ep;
    ep.scale = a.scale * b.scale;
    c_.pieces.back() = {H, 3};  // two SBUF slices alternate, and a head's store drains under the next
    for (int64_t h = 0; h < H; ++h) {
      const Block at = head_block(a, SA, !a.transposed, h);  // [Y, X]
      const Block bh = head_block(b, SB, b.transposed, h);   // [Y, Z]
      const Block oh = head_block(o, SO, out_t, h);          // [X, Z], or [Z, X] when out_t
      if (out_t) matmul_core(n.name, bh, at, oh, ep, h % 2, 2);
      else matmul_core(n.name, at, bh, oh, ep, h % 2, 2);
    }
  }

  // A soft requirement: set the layout if free, else ask for a transposed copy.
  void want(const std::string& v, bool transposed_view) {
    auto [st, flip] = view(v);
    if (auto t = tie_.find(st); t != tie_.end()) {  // stored where the state is: the state's layout
      want(t->second, transposed_view != flip);
      return;
    }
    const bool w = transposed_view != flip;
    auto it = layout_.find(st);
    if (it == layout_.end()) layout_[st] = w;
    else if (it->second != w) copies_.insert(st);
  }

  // Resolves a graph value to its stored value and whether the view is transposed w.r.t. it.
  std::pair<std::string, bool> view(const std::string& v) const {
    auto t = transpose_of_.find(v);
    if (t != transpose_of_.end()) {
      auto [s, flip] = view(t->second);
      return {s, !flip};
    }
    auto a = alias_of_.find(v);
    if (a != alias_of_.end()) return view(a->second);
    return {v, false};
  }

  void require(const std::string& v, bool transposed, const Node& at) {
    auto [s, flip] = view(v);
    if (auto t = tie_.find(s); t != tie_.end()) return require(t->second, transposed != flip, at);
    const bool want = transposed != flip;
    auto it = layout_.find(s);
    if (it != layout_.end() && it->second != want)
      unsupported(at, "tensor '" + s + "' is needed both transposed and not; a transpose kernel is not compiled yet");
    layout_[s] = want;
  }

  bool transposed(const std::string& stored) const {
    if (auto t = tie_.find(stored); t != tie_.end()) return transposed(t->second);
    auto it = layout_.find(stored);
    return it != layout_.end() && it->second;
  }

  // ---- HBM ----------------------------------------------------------------------------------
  int64_t hbm_alloc(const std::string& name, DType t, Shape shape) {
    const int64_t bytes = shape_numel(shape) * static_cast<int64_t>(dtype_size(t));
    HbmTensor h{name, t, std::move(shape), hbm_next_};
    hbm_next_ += (bytes + 4095) / 4096 * 4096;
    if (hbm_next_ > static_cast<int64_t>(cfg_.hbm_capacity))
      throw InputError(g_.source, "the model needs " + std::to_string(hbm_next_) + " bytes of HBM; the core has " +
                                      std::to_string(static_cast<int64_t>(cfg_.hbm_capacity)));
    c_.program.hbm.push_back(h);
    c_.hbm_bytes = hbm_next_;
    return h.offset;
  }



  Stored stored(const std::string& v) {
    auto [s, flip] = view(v);
    if (auto t = tie_.find(s); t != tie_.end()) return stored(t->second);  // next state: in place
    auto it = stored_.find(s);
    if (it != stored_.end()) return it->second;
    const auto& val = g_.value(s);
    auto [r, c] = layout_free_shape(val.shape);
    const bool t = transposed(s);
    if (val.data) {
      // Constants: converted to the layout and dtype the kernels read, at compile time.
      Tensor data = val.data->cast(DType::f32);
      if (t) data = transpose2d(data.reshaped({r, c}));
      const DType dt = train() && is_float(val.dtype) ? val.dtype : opt_.compute;
      const Shape shape = t ? Shape{c, r} : Shape{r, c};
      const int64_t off = hbm_alloc(s, dt, shape);
      c_.hbm_init.push_back({s, data.reshaped(shape).cast(dt)});
      return stored_[s] = Stored{off, dt, shape[0], shape[1]};
    }
    const bool is_out = is_output(s);
    // Integer values (gather indices) live as int32; floating ones in the compute dtype, graph
    // outputs in fp32.
    // Booleans (comparisons) are 1.0 / 0.0 in the compute dtype.
    // Training graphs (mixed precision) keep every float value in its own dtype: fp32 master
    // weights, optimizer state and gradients, fp16/bf16 forward and backward values.
    const DType dt = val.dtype == DType::boolean ? opt_.compute
                     : !is_float(val.dtype)      ? DType::i32
                     : is_out                    ? DType::f32
                     : train()                   ? val.dtype
                                                 : opt_.compute;
    const Shape shape = t ? Shape{c, r} : Shape{r, c};
    const int64_t off = hbm_alloc(s, dt, shape);
    return stored_[s] = Stored{off, dt, shape[0], shape[1]};
  }

  void allocate_io() {
    for (const auto& i : g_.inputs) {
      if (cm_pad_.count(i)) {
        const CmStore& x = cm_store(i);
        IoBinding b{i, i, false};
        b.channel_major = true;
        b.pad = x.pad;
        c_.inputs.push_back(b);
        continue;
      }
      auto [s, flip] = view(i);
      stored(i);
      c_.inputs.push_back({i, s, transposed(s) != flip});
    }
  }

  void finish_outputs() {
    for (const auto& o : g_.outputs) {
      if (cm_pad_.count(o))
        throw InputError(g_.source, "graph output '" + o + "' is a 4-D convolution activation; such outputs are not compiled yet",
                         "end the model with a Flatten/Gemm, or run it on target.kind \"reference\"");
      auto [s, flip] = view(o);
      stored(o);
      auto t = tie_.find(s);  // a next-state output lives in its state's HBM tensor
      c_.outputs.push_back({o, t == tie_.end() ? s : t->second, transposed(s) != flip});
    }
  }

  // ---- SBUF ---------------------------------------------------------------------------------
  // A bump allocator over SBUF bytes [next, limit) of every partition.
  struct Sbuf {
    int64_t next = 0;
    int64_t limit;
    std::string kernel;
    int64_t base = next;
    std::string hint = "use a smaller tile (mapping.tile_n / tile_m) or fewer buffers (mapping.buffers)";
    int64_t take(int64_t bytes) {
      const int64_t off = next;
      next += (bytes + 63) / 64 * 64;
      if (next > limit)
        throw InputError("kernel '" + kernel + "'", "needs " + std::to_string(next - base) + " bytes of SBUF per partition; it has " +
                                                     std::to_string(limit - base),
                         hint);
      return off;
    }
  };

  // ---- kernels ------------------------------------------------------------------------------
  // A value stored in the orientation a matmul needs (`want_t`: the transposed view of its matrix),
  // making the transposed copy first if its own storage is the other way round.
  Stored operand(const std::string& v, bool want_t) {
    auto [st, flip] = view(v);
    const bool w = want_t != flip;
    if (transposed(st) == w) return stored(v);
    {
      const Stored s = stored(v);
      if (s.rows == 1 || s.cols == 1) return Stored{s.offset, s.dtype, s.cols, s.rows};  // a vector reads the same either way
    }
    auto it = copy_.find(st);
    if (it != copy_.end()) return it->second;
    const Stored src = stored(st);
    const std::string name = st + "@T";
    const DType cdt = train() ? src.dtype : opt_.compute;  // training: fp32 values stay fp32
    const int64_t off = hbm_alloc(name, cdt, {src.cols, src.rows});
    const Stored dst{off, cdt, src.cols, src.rows};
    emit_transpose(name, src, dst);
    return copy_[st] = dst;
  }

  // dst [C, R] = src [R, C]^T through the tensor engine, 128x128 blocks: DMA in, transpose into
  // PSUM, copy to SBUF in the destination dtype, DMA out.
  void emit_transpose(const std::string& name, const Stored& src, const Stored& dst) {
    em_.begin_kernel("transpose " + name);
    c_.stream_buffers.push_back(2);
    c_.pieces.push_back({1, 1});
    Sbuf sb{0, cfg_.sbuf_partition_bytes, "transpose " + name};
    const int64_t B = std::min<int64_t>(cfg_.tensor_rows, cfg_.tensor_cols);
    const int64_t in_buf = sb.take(2 * B * 4), out_buf = sb.take(2 * B * 4);
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    const int64_t ses = static_cast<int64_t>(dtype_size(src.dtype)), des = static_cast<int64_t>(dtype_size(dst.dtype));
    int64_t t = 0;
    for (int64_t r0 = 0; r0 < src.rows; r0 += B)
      for (int64_t c0 = 0; c0 < src.cols; c0 += B, ++t) {
        const int32_t pr = static_cast<int32_t>(std::min(B, src.rows - r0));
        const int32_t pc = static_cast<int32_t>(std::min(B, src.cols - c0));
        const AccessPattern in = on_chip(Space::sbuf, src.dtype, 0, pr, in_buf + (t % 2) * B * 4, {{pc, 1}});
        em_.dma(in, in_hbm(src.dtype, pr, src.cols, src.offset + (r0 * src.cols + c0) * ses, {{pc, 1}}));
        const AccessPattern ps = on_chip(Space::psum, DType::f32, 0, pc, (t % std::min<int64_t>(cfg_.psum_banks, 8)) * cfg_.psum_bank_bytes(), {{pr, 1}});
        Instr tr;
        tr.op = Op::transpose;
        tr.dst = ps;
        tr.src0 = in;
        em_.emit(tr, Lane::tensor);
        const AccessPattern out = on_chip(Space::sbuf, dst.dtype, 0, pc, out_buf + (t % 2) * B * 4, {{pr, 1}});
        Instr cp;
        cp.op = Op::tensor_copy;
        cp.dst = out;
        cp.src0 = ps;
        em_.emit(cp, Lane::vector);
        em_.dma(in_hbm(dst.dtype, pc, dst.cols, dst.offset + (c0 * dst.cols + r0) * des, {{pr, 1}}), out, Emitter::DmaClass::bulk);
      }
  }


  struct Epilogue {
    std::string bias;              // constant bias value ("" if none)
    bool bias_on_partitions = false;
    Func func = Func::identity;
    double scale = 1.0;
  };

  void emit_matmul(const MatmulPlan& p) {
    const Node& n = *p.node;
    const auto [M, K] = layout_free_shape(g_.value(p.a).shape);
    const int64_t N = g_.value(p.out).shape.back();
    const Stored A = operand(p.a, true);     // [K, M]
    // The weight as [K, N]: constants are stored so; an activation per its layout (or a copy).
    const Stored W = operand(p.w, p.w_transposed);
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(0);
    c_.pieces.push_back({1, 1});
    const Stored O = stored(p.out);
    const bool out_t = transposed(view(p.out).first);
    if (A.rows != K || A.cols != M) throw std::logic_error("matmul operand A is not stored as [K, M]");
    if (W.rows != K || W.cols != N) throw std::logic_error("matmul weight is not stored as [K, N]");
    Epilogue ep;
    ep.bias = p.bias;
    ep.bias_on_partitions = out_t;
    ep.func = p.has_func ? p.func : Func::identity;
    // T output puts N on the partitions (stationary = weight), N output puts M there.
    if (opt_.matmul_schedule != MatmulSchedule::automatic) matmul_scheduled(n.name, whole(out_t ? W : A), whole(out_t ? A : W), whole(O), ep);
    else matmul_core(n.name, whole(out_t ? W : A), whole(out_t ? A : W), whole(O), ep);
  }

  void set_serial_fraction(double f) {
    c_.serial_fraction.resize(c_.program.kernels.size(), 0.0);
    c_.serial_fraction.back() = f;
  }

  // The matmul output tile: partitions (stationary free size) x free size (one PSUM bank at most).
  std::pair<int64_t, int64_t> tile_shape() const {
    const int64_t part_max = cfg_.tensor_cols;
    const int64_t free_max = std::min<int64_t>(cfg_.max_moving_free, cfg_.psum_bank_bytes() / 4);
    const int64_t tp = opt_.tile_m > 0 ? opt_.tile_m : part_max;  // partitions of an output tile
    const int64_t tf = opt_.tile_n > 0 ? opt_.tile_n : free_max;  // free size of an output tile
    if (tp > part_max || tf > free_max || tp < 1 || tf < 1)
      throw InputError("/mapping", "tile " + std::to_string(tp) + "x" + std::to_string(tf) + " does not fit the tensor engine",
                       "tile_m <= " + std::to_string(part_max) + " (output partitions), tile_n <= " + std::to_string(free_max) +
                           " (one PSUM bank of fp32)");
    return {tp, tf};
  }

  // Enough stationary buffers that the DMAs in flight cover a tile's transfer time with the
  // matmuls of the tiles before it (each buffer is one DMA in flight).
  int64_t auto_buffers(int64_t K, int64_t tp, int64_t tf) const {
    const int64_t es_c = static_cast<int64_t>(dtype_size(opt_.compute));
    const int64_t tpk = std::min<int64_t>(cfg_.tensor_rows, K);
    const double t_dma = dma_transfer_seconds(tpk * tp * es_c, tpk, cfg_);
    Instr probe;
    probe.op = Op::multiply_moving;
    probe.dst.parts = static_cast<int32_t>(tp);
    probe.src0.parts = static_cast<int32_t>(tpk);
    probe.src0.ndims = 1;
    probe.src0.dims[0] = {static_cast<int32_t>(tf), 1};
    probe.src0.dtype = opt_.compute;
    const double t_mm = static_cast<double>(instr_cycles(probe, cfg_)) / cfg_.tensor_hz;
    // A buffer's refill waits for the matmul that read it, so it pays dma.trigger_latency too.
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil((t_dma + cfg_.dma_trigger_latency) / t_mm)) + 2, 3, 64);
  }

  void tensor_tensor(Alu alu, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b) {
    Instr in;
    in.op = Op::tensor_tensor;
    in.alu = alu;
    in.dst = dst;
    in.src0 = a;
    in.src1 = b;
    em_.emit(in, Lane::vector);
  }

  // One matmul of an accumulation group: load the stationary tile, multiply the moving one into
  // `ps` (start: zero it first; stop: last of the group).
  void matmul_step(const AccessPattern& ps, const AccessPattern& stat, const AccessPattern& mov, bool start, bool stop) {
    Instr ls;
    ls.op = Op::load_stationary;
    ls.src0 = stat;
    em_.emit(ls, Lane::tensor);
    Instr mm;
    mm.op = Op::multiply_moving;
    mm.dst = ps;
    mm.src0 = mov;
    mm.start = start;
    mm.stop = stop;
    em_.emit(mm, Lane::tensor);
  }

  // dst = func(scale * (src + bias)) for an accumulated tile (PSUM, or an SBUF accumulator): one
  // scalar-engine activation when the bias is per partition (or absent), else a vector add first.
  // `bias`: [pn, 1] per partition or [pn, fn] along the free dim, absent when the epilogue has none.
  void epilogue(const AccessPattern& dst, const AccessPattern& src, const Epilogue& ep, const AccessPattern& bias) {
    if (ep.bias_on_partitions || !bias.present()) {
      Instr act;
      act.op = Op::activation;
      act.dst = dst;
      act.src0 = src;
      act.func = ep.func;
      act.imm[0] = ep.scale;
      if (bias.present()) act.src1 = bias;
      em_.emit(act, Lane::scalar);
      return;
    }
    tensor_tensor(Alu::add, dst, src, bias);
    if (ep.func != Func::identity || ep.scale != 1.0) {
      Instr act;
      act.op = Op::activation;
      act.dst = dst;
      act.src0 = dst;
      act.func = ep.func;
      act.imm[0] = ep.scale;
      em_.emit(act, Lane::scalar);
    }
  }

  // out [P, F] = stat[K, P]^T @ mov[K, F], tiled: the moving operand's column block (all of K)
  // stays in SBUF, stationary tiles stream through rotating buffers, PSUM accumulates over K and
  // the evacuation applies scale, bias and the activation.
  // `region` / `regions`: the slice of SBUF to use, so that consecutive calls (the heads of a
  // batched matmul) can alternate between slices and overlap instead of waiting for each other.
  // For operands that are not a plain block (a convolution's im2col), `f_tiles` gives the column
  // tiles (start, size) and `load_mov(f0, fn, k0, kn, dst)` emits the DMAs that fill rows k0..k0+kn
  // of columns f0..f0+fn into `dst`.
  using MovLoader = std::function<void(int64_t f0, int64_t fn, int64_t k0, int64_t kn, const AccessPattern& dst)>;
  void matmul_core(const std::string& name, const Block& stat, const Block& mov, const Block& out, const Epilogue& ep,
                   int64_t region = 0, int64_t regions = 1, const MovLoader& load_mov = {},
                   std::vector<std::pair<int64_t, int64_t>> f_tiles = {}) {
    const int64_t K = stat.rows, P_total = stat.cols, F_total = mov.cols;
    if (mov.rows != K || out.rows != P_total || out.cols != F_total) throw std::logic_error("matmul_core: block shapes disagree");
    const int64_t es_c = static_cast<int64_t>(dtype_size(opt_.compute));
    const int64_t slice = cfg_.sbuf_partition_bytes / regions / 64 * 64;
    Sbuf sb{region * slice, region * slice + slice, name};
    const int64_t KT = ceil_div(K, cfg_.tensor_rows);
    const auto [tp, tf] = tile_shape();
    const int64_t nbuf = opt_.buffers > 0 ? opt_.buffers : auto_buffers(K, std::min(tp, P_total), std::min(tf, F_total));
    c_.stream_buffers.back() = std::max(c_.stream_buffers.back(), nbuf);
    const int64_t stat_buf = sb.take(nbuf * tp * es_c);
    const int64_t mov_blk = sb.take(KT * tf * es_c);
    const int64_t out_buf = sb.take(2 * tf * 4);
    int64_t bias_off = -1;
    Stored B{};
    if (!ep.bias.empty()) {
      const int64_t nb = ep.bias_on_partitions ? P_total : F_total;
      B = stored_bias(ep.bias, ep.bias_on_partitions, nb);
      bias_off = sb.take(ep.bias_on_partitions ? ceil_div(P_total, tp) * 4 : tf * 4);
    }
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    c_.psum_high_water = std::max(c_.psum_high_water, cfg_.psum_bank_bytes() * std::min<int64_t>(cfg_.psum_banks, 8));
    const DType ct = opt_.compute;
    const int32_t tr = static_cast<int32_t>(cfg_.tensor_rows);
    int64_t stat_count = 0, tile_count = 0;
    if (bias_off >= 0 && ep.bias_on_partitions) {
      // All bias tiles once: tile j holds bias[j*tp .. j*tp+tp) on its partitions.
      for (int64_t j = 0; j < ceil_div(P_total, tp); ++j) {
        const int64_t pn = std::min(tp, P_total - j * tp);
        em_.dma(on_chip(Space::sbuf, DType::f32, 0, static_cast<int32_t>(pn), bias_off + j * 4, {{1, 1}}),
                in_hbm(DType::f32, static_cast<int32_t>(pn), 1, B.offset + j * tp * 4, {{1, 1}}));
      }
    }
    if (f_tiles.empty())
      for (int64_t f0 = 0; f0 < F_total; f0 += tf) f_tiles.push_back({f0, std::min(tf, F_total - f0)});
    for (const auto& [f0, fn64] : f_tiles) {
      const int32_t fn = static_cast<int32_t>(fn64);
      if (fn64 > tf) throw std::logic_error("matmul_core: column tile wider than a PSUM bank");
      // Moving block: K rows (one k tile per partition group), columns f0..f0+fn.
      for (int64_t kt = 0; kt < KT; ++kt) {
        const int32_t kn = static_cast<int32_t>(std::min<int64_t>(tr, K - kt * tr));
        const AccessPattern dst = on_chip(Space::sbuf, ct, 0, kn, mov_blk + kt * tf * es_c, {{fn, 1}});
        if (load_mov) load_mov(f0, fn64, kt * tr, kn, dst);
        else em_.dma(dst, in_hbm(mov.dtype, kn, mov.stride, mov.at(kt * tr, f0), {{fn, 1}}), Emitter::DmaClass::bulk);
      }
      if (bias_off >= 0 && !ep.bias_on_partitions)
        em_.dma(on_chip(Space::sbuf, DType::f32, 0, static_cast<int32_t>(std::min(tp, P_total)), bias_off, {{fn, 1}}),
                in_hbm(DType::f32, static_cast<int32_t>(std::min(tp, P_total)), 0, B.offset + f0 * 4, {{fn, 1}}));
      for (int64_t p0 = 0; p0 < P_total; p0 += tp) {
        const int32_t pn = static_cast<int32_t>(std::min(tp, P_total - p0));
        const int64_t bank = tile_count % std::min<int64_t>(cfg_.psum_banks, 8);
        const AccessPattern ps = on_chip(Space::psum, DType::f32, 0, pn, bank * cfg_.psum_bank_bytes(), {{fn, 1}});
        for (int64_t kt = 0; kt < KT; ++kt) {
          const int32_t kn = static_cast<int32_t>(std::min<int64_t>(tr, K - kt * tr));
          // Stream the stationary tile through rotating buffers.
          const int64_t sbuf_off = stat_buf + (stat_count++ % nbuf) * tp * es_c;
          const AccessPattern st = on_chip(Space::sbuf, ct, 0, kn, sbuf_off, {{pn, 1}});
          em_.dma(st, in_hbm(stat.dtype, kn, stat.stride, stat.at(kt * tr, p0), {{pn, 1}}));
          matmul_step(ps, st, on_chip(Space::sbuf, ct, 0, kn, mov_blk + kt * tf * es_c, {{fn, 1}}), kt == 0, kt == KT - 1);
        }
        // Evacuate PSUM -> SBUF (scale, bias, activation), then SBUF -> HBM.
        const int64_t ob = out_buf + (tile_count % 2) * tf * 4;
        const AccessPattern out_sb = on_chip(Space::sbuf, out.dtype, 0, pn, ob, {{fn, 1}});
        AccessPattern bias;
        if (bias_off >= 0)
          bias = ep.bias_on_partitions ? on_chip(Space::sbuf, DType::f32, 0, pn, bias_off + (p0 / tp) * 4, {{1, 1}})
                                       : on_chip(Space::sbuf, DType::f32, 0, pn, bias_off, {{fn, 1}});
        epilogue(out_sb, ps, ep, bias);
        em_.dma(in_hbm(out.dtype, pn, out.stride, out.at(p0, f0), {{fn, 1}}), out_sb, Emitter::DmaClass::bulk);
        ++tile_count;
      }
    }
  }

  // out [P, F] = stat[K, P]^T @ mov[K, F] with one of the NKI matmul tutorial's loop nests (stat is
  // the tutorial's lhsT, mov its rhs, P its M, F its N). Loads go to the stream queues in program
  // order, stores to the bulk queues; each buffer is reused only after the instructions reading it
  // (the scheduler orders them by their SBUF footprints), so loads of the next tiles overlap the
  // matmuls of these wherever the loop nest leaves room:
  //  tiled        for m, n: for k: load stat tile and mov tile, matmul; evacuate, store
  //  hoisted      for m: load stat tiles for all k; for n: load mov tiles for all k; matmuls...
  //  blocked_mn   for each block of block_m stat tile columns: load them for all k; for each
  //               block of block_n mov tile columns: load them for all k; block_m x block_n tiles
  //  blocked_mnk  for each block of block_n x 512 columns: zero fp32 accumulators in SBUF for all
  //               of P; for each block of block_k k tiles: load the mov block as block_k DMAs of
  //               [128, block_n x 512]; for each block of block_m stat tiles: load it as block_k DMAs
  //               of [128, block_m x 128], matmul every tile pair into PSUM and add the PSUM tile to
  //               its accumulator (vector engine); finally evacuate the accumulators a row of tiles
  //               at a time and store each row with one DMA.
  void matmul_scheduled(const std::string& name, const Block& stat, const Block& mov, const Block& out, const Epilogue& ep) {
    const int64_t K = stat.rows, P = stat.cols, F = mov.cols;
    if (mov.rows != K || out.rows != P || out.cols != F) throw std::logic_error("matmul_scheduled: block shapes disagree");
    const MatmulSchedule sch = opt_.matmul_schedule;
    const DType ct = opt_.compute;
    const int64_t es = static_cast<int64_t>(dtype_size(ct));
    const int64_t TK = cfg_.tensor_rows;
    const auto [TM, TN] = tile_shape();
    const int64_t KT = ceil_div(K, TK), MT = ceil_div(P, TM), NT = ceil_div(F, TN);
    const int64_t bm = opt_.block_m > 0 ? opt_.block_m : (sch == MatmulSchedule::blocked_mnk ? 16 : 2);
    const int64_t bn = opt_.block_n > 0 ? opt_.block_n : 2;
    const int64_t bk = opt_.block_k > 0 ? opt_.block_k : 8;
    Sbuf sb{0, cfg_.sbuf_partition_bytes, name};
    sb.hint = "use smaller blocks (mapping.block_m / block_n / block_k) or tiles (mapping.tile_m / tile_n)";
    int64_t bias_off = -1;
    if (!ep.bias.empty()) {
      const Stored B = stored_bias(ep.bias, ep.bias_on_partitions, ep.bias_on_partitions ? P : F);
      // The whole bias once: a column per stationary tile, or the row broadcast to every partition.
      const int32_t pn = static_cast<int32_t>(std::min(TM, P));
      if (ep.bias_on_partitions) {
        bias_off = sb.take(MT * 4);
        for (int64_t j = 0; j < MT; ++j) {
          const int32_t pj = static_cast<int32_t>(std::min(TM, P - j * TM));
          em_.dma(on_chip(Space::sbuf, DType::f32, 0, pj, bias_off + j * 4, {{1, 1}}),
                  in_hbm(DType::f32, pj, 1, B.offset + j * TM * 4, {{1, 1}}));
        }
      } else {
        bias_off = sb.take(F * 4);
        em_.dma(on_chip(Space::sbuf, DType::f32, 0, pn, bias_off, {{static_cast<int32_t>(F), 1}}),
                in_hbm(DType::f32, pn, 0, B.offset, {{static_cast<int32_t>(F), 1}}));
      }
    }
    auto bias_ap = [&](int64_t m, int32_t pn, int64_t f0, int32_t fn) {
      if (bias_off < 0) return AccessPattern{};
      if (ep.bias_on_partitions) return on_chip(Space::sbuf, DType::f32, 0, pn, bias_off + m * 4, {{1, 1}});
      return on_chip(Space::sbuf, DType::f32, 0, pn, bias_off + f0 * 4, {{fn, 1}});
    };
    auto rows_of = [&](int64_t k) { return static_cast<int32_t>(std::min(TK, K - k * TK)); };
    auto cols = [](int64_t t, int64_t T, int64_t total) { return static_cast<int32_t>(std::min(T, total - t * T)); };
    // rows k*TK.. of src, columns c0..c0+cn, into SBUF at `off`.
    auto load = [&](int64_t off, const Block& src, int64_t k, int64_t c0, int32_t cn) {
      const int32_t kn = rows_of(k);
      em_.dma(on_chip(Space::sbuf, ct, 0, kn, off, {{cn, 1}}), in_hbm(src.dtype, kn, src.stride, src.at(k * TK, c0), {{cn, 1}}),
              Emitter::DmaClass::spread);
    };
    int64_t psum_next = 0;
    auto psum_tile = [&](int32_t pn, int32_t fn) {
      const int64_t bank = psum_next++ % std::min<int64_t>(cfg_.psum_banks, 8);
      return on_chip(Space::psum, DType::f32, 0, pn, bank * cfg_.psum_bank_bytes(), {{fn, 1}});
    };
    auto matmul = [&](const AccessPattern& ps, int64_t stat_off, int64_t mov_off, int64_t k, int32_t pn, int32_t fn, bool start, bool stop) {
      const int32_t kn = rows_of(k);
      matmul_step(ps, on_chip(Space::sbuf, ct, 0, kn, stat_off, {{pn, 1}}), on_chip(Space::sbuf, ct, 0, kn, mov_off, {{fn, 1}}), start, stop);
    };
    // A tile's epilogue (or accumulate) is emitted after the next tile's matmuls, so that it sits
    // in the bundles of those, when its PSUM tile is complete, instead of holding them up.
    std::function<void()> deferred;
    auto defer = [&](std::function<void()> f) {
      if (deferred) deferred();
      deferred = std::move(f);
    };
    int64_t out_count = 0;
    int64_t out_buf = -1;
    auto finish = [&](const AccessPattern& acc, int64_t m, int64_t f0, int32_t pn, int32_t fn) {
      const AccessPattern o = on_chip(Space::sbuf, out.dtype, 0, pn, out_buf + (out_count++ % 2) * TN * 4, {{fn, 1}});
      epilogue(o, acc, ep, bias_ap(m, pn, f0, fn));
      em_.dma(in_hbm(out.dtype, pn, out.stride, out.at(m * TM, f0), {{fn, 1}}), o, Emitter::DmaClass::spread_store);
    };
    // Sets of buffers for a group of tiles: two when they fit beside everything else, so the next
    // group's loads can start while this one computes.
    auto sets_of = [&](int64_t bytes, int64_t reserve) { return sb.next + 2 * bytes + reserve <= sb.limit ? 2 : 1; };
    // Blocked schedules run as steps. An operand with two buffer sets has step i+1's loads emitted
    // before step i's matmuls (they write the other set, last read by step i-1), so the scheduler
    // can start them while step i computes; with one set they must follow step i's reads.
    struct Step {
      std::function<void()> load_stat, load_mov, compute;
    };
    auto run_steps = [&](const std::vector<Step>& steps, int64_t s_sets, int64_t m_sets) {
      auto loads = [&](size_t i, bool early) {
        if (i >= steps.size()) return;
        if (steps[i].load_stat && (s_sets == 2) == early) steps[i].load_stat();
        if (steps[i].load_mov && (m_sets == 2) == early) steps[i].load_mov();
      };
      for (size_t i = 0; i < steps.size(); ++i) {
        if (i == 0) {
          loads(0, true);
          loads(0, false);
        }
        loads(i + 1, true);
        steps[i].compute();
        loads(i + 1, false);
      }
    };

    if (sch == MatmulSchedule::tiled) {
      const int64_t nbuf = opt_.buffers > 0 ? opt_.buffers : auto_buffers(K, std::min(TM, P), std::min(TN, F));
      c_.stream_buffers.back() = 2 * nbuf;
      const int64_t sbuf_ = sb.take(nbuf * TM * es), mbuf = sb.take(nbuf * TN * es);
      out_buf = sb.take(2 * TN * 4);
      int64_t slot = 0;
      for (int64_t m = 0; m < MT; ++m)
        for (int64_t n = 0; n < NT; ++n) {
          const int32_t pn = cols(m, TM, P), fn = cols(n, TN, F);
          const AccessPattern ps = psum_tile(pn, fn);
          for (int64_t k = 0; k < KT; ++k, ++slot) {
            const int64_t so = sbuf_ + (slot % nbuf) * TM * es, mo = mbuf + (slot % nbuf) * TN * es;
            load(so, stat, k, m * TM, pn);
            load(mo, mov, k, n * TN, fn);
            matmul(ps, so, mo, k, pn, fn, k == 0, k == KT - 1);
          }
          defer([=, &finish] { finish(ps, m, n * TN, pn, fn); });
        }
    } else if (sch == MatmulSchedule::hoisted || sch == MatmulSchedule::blocked_mn) {
      // hoisted is blocked_mn with 1x1 blocks. A step is one (stat block, mov block) pair.
      const int64_t BMt = sch == MatmulSchedule::hoisted ? 1 : bm, BNt = sch == MatmulSchedule::hoisted ? 1 : bn;
      const int64_t stat_bytes = BMt * KT * TM * es, mov_bytes = BNt * KT * TN * es;
      out_buf = sb.take(2 * TN * 4);
      const int64_t s_sets = sets_of(stat_bytes, mov_bytes);
      const int64_t stat_blk = sb.take(s_sets * stat_bytes);
      const int64_t m_sets = sets_of(mov_bytes, 0);
      const int64_t mov_blk = sb.take(m_sets * mov_bytes);
      c_.stream_buffers.back() = s_sets * BMt * KT + m_sets * BNt * KT;
      const int64_t MB = ceil_div(MT, BMt), NB = ceil_div(NT, BNt);
      // One mov set: mov tile (n, k) is read last by the block's last stat tile row, so the next
      // step's loads start once (BMt - 1) of the BMt rows of output tiles are computed.
      if (m_sets == 1 && NB > 1) set_serial_fraction(static_cast<double>(BMt - 1) / static_cast<double>(BMt));
      std::vector<Step> steps;
      for (int64_t mb = 0; mb < MB; ++mb)
        for (int64_t nb = 0; nb < NB; ++nb) {
          const int64_t so = stat_blk + (mb % s_sets) * stat_bytes;
          const int64_t mo = mov_blk + (static_cast<int64_t>(steps.size()) % m_sets) * mov_bytes;
          const int64_t m_lo = mb * BMt, m_hi = std::min(MT, (mb + 1) * BMt), n_lo = nb * BNt, n_hi = std::min(NT, (nb + 1) * BNt);
          Step st;
          if (nb == 0)
            st.load_stat = [=, &load, &cols] {
              for (int64_t m = m_lo; m < m_hi; ++m)
                for (int64_t k = 0; k < KT; ++k) load(so + ((m - m_lo) * KT + k) * TM * es, stat, k, m * TM, cols(m, TM, P));
            };
          st.load_mov = [=, &load, &cols] {
            for (int64_t n = n_lo; n < n_hi; ++n)
              for (int64_t k = 0; k < KT; ++k) load(mo + ((n - n_lo) * KT + k) * TN * es, mov, k, n * TN, cols(n, TN, F));
          };
          st.compute = [=, &psum_tile, &matmul, &defer, &finish, &cols] {
            for (int64_t m = m_lo; m < m_hi; ++m)
              for (int64_t n = n_lo; n < n_hi; ++n) {
                const int32_t pn = cols(m, TM, P), fn = cols(n, TN, F);
                const AccessPattern ps = psum_tile(pn, fn);
                for (int64_t k = 0; k < KT; ++k)
                  matmul(ps, so + ((m - m_lo) * KT + k) * TM * es, mo + ((n - n_lo) * KT + k) * TN * es, k, pn, fn, k == 0, k == KT - 1);
                defer([=, &finish] { finish(ps, m, n * TN, pn, fn); });
              }
          };
          steps.push_back(std::move(st));
        }
      run_steps(steps, s_sets, m_sets);
    } else {  // blocked_mnk
      const int64_t BM = bm * TM, BN = bn * TN;
      // Accumulators: every stationary tile row x the block's column tiles, in the compute dtype as
      // the tutorial has them (dtype=lhsT.dtype): PSUM sums each K block in fp32, the running sum
      // over K blocks rounds to the compute dtype once per block. Half the SBUF of fp32 leaves room
      // to double-buffer the operand blocks.
      const DType adt = ct;
      const int64_t aes = static_cast<int64_t>(dtype_size(adt)), oes = static_cast<int64_t>(dtype_size(out.dtype));
      const int64_t acc = sb.take(MT * BN * aes);
      out_buf = sb.take(2 * BN * oes);
      const int64_t m_bytes = bk * BN * es, s_bytes = bk * BM * es;
      const int64_t m_sets = sets_of(m_bytes, s_bytes);
      const int64_t mov_blk = sb.take(m_sets * m_bytes);
      const int64_t s_sets = sets_of(s_bytes, 0);
      const int64_t stat_blk0 = sb.take(s_sets * s_bytes);
      c_.stream_buffers.back() = (m_sets + s_sets) * bk;
      // One stat set: its tiles are read until the step's last column of output tiles.
      if (s_sets == 1) set_serial_fraction(static_cast<double>(bn - 1) / static_cast<double>(bn));
      const int64_t KB = ceil_div(KT, bk), NB = ceil_div(F, BN), MB = ceil_div(P, BM);
      // A step is one (N block, K block, M block): its stat block (and, first in a K block, the mov
      // block) loaded, its tile pairs multiplied and accumulated.
      std::vector<Step> steps;
      for (int64_t nb = 0; nb < NB; ++nb) {
        const int64_t f0 = nb * BN;
        const int32_t fnb = static_cast<int32_t>(std::min(BN, F - f0));
        for (int64_t kb = 0; kb < KB; ++kb) {
          const int64_t k_lo = kb * bk, k_hi = std::min(KT, (kb + 1) * bk);
          const int64_t mo = mov_blk + ((nb * KB + kb) % m_sets) * m_bytes;
          for (int64_t mb = 0; mb < MB; ++mb) {
            const int64_t so = stat_blk0 + (static_cast<int64_t>(steps.size()) % s_sets) * s_bytes;
            const int64_t p0 = mb * BM;
            const int32_t pnb = static_cast<int32_t>(std::min(BM, P - p0));
            Step st;
            if (mb == 0)
              st.load_mov = [=, &load] {
                for (int64_t k = k_lo; k < k_hi; ++k) load(mo + (k - k_lo) * BN * es, mov, k, f0, fnb);
              };
            st.load_stat = [=, &load] {
              for (int64_t k = k_lo; k < k_hi; ++k) load(so + (k - k_lo) * BM * es, stat, k, p0, pnb);
            };
            const bool first = kb == 0 && mb == 0, last = kb == KB - 1 && mb == MB - 1;
            st.compute = [=, &psum_tile, &matmul, &defer, &cols, &out_count, this] {
              if (first)  // zero this N block's accumulators
                for (int64_t m = 0; m < MT; ++m) {
                  Instr z;
                  z.op = Op::memset;
                  z.dst = on_chip(Space::sbuf, adt, 0, cols(m, TM, P), acc + m * BN * aes, {{fnb, 1}});
                  z.imm[0] = 0.0;
                  em_.emit(z, Lane::vector);
                }
              for (int64_t j = 0; j * TN < fnb; ++j)
                for (int64_t i = 0; i * TM < pnb; ++i) {
                  const int32_t pn = static_cast<int32_t>(std::min(TM, pnb - i * TM)), fn = static_cast<int32_t>(std::min(TN, fnb - j * TN));
                  const AccessPattern ps = psum_tile(pn, fn);
                  for (int64_t k = k_lo; k < k_hi; ++k)
                    matmul(ps, so + ((k - k_lo) * BM + i * TM) * es, mo + ((k - k_lo) * BN + j * TN) * es, k, pn, fn, k == k_lo, k == k_hi - 1);
                  const AccessPattern a = on_chip(Space::sbuf, adt, 0, pn, acc + ((mb * bm + i) * BN + j * TN) * aes, {{fn, 1}});
                  defer([=, this] { tensor_tensor(Alu::add, a, a, ps); });
                }
              if (!last) return;
              defer({});
              // A row of accumulators packed into one buffer, stored with one DMA.
              for (int64_t m = 0; m < MT; ++m) {
                const int32_t pn = cols(m, TM, P);
                const int64_t packed = out_buf + (out_count++ % 2) * BN * oes;
                for (int64_t j = 0; j * TN < fnb; ++j) {
                  const int32_t fn = static_cast<int32_t>(std::min(TN, fnb - j * TN));
                  epilogue(on_chip(Space::sbuf, out.dtype, 0, pn, packed + j * TN * oes, {{fn, 1}}),
                           on_chip(Space::sbuf, adt, 0, pn, acc + (m * BN + j * TN) * aes, {{fn, 1}}), ep, bias_ap(m, pn, f0 + j * TN, fn));
                }
                em_.dma(in_hbm(out.dtype, pn, out.stride, out.at(m * TM, f0), {{fnb, 1}}),
                        on_chip(Space::sbuf, out.dtype, 0, pn, packed, {{fnb, 1}}), Emitter::DmaClass::spread_store);
              }
            };
            steps.push_back(std::move(st));
          }
        }
      }
      run_steps(steps, s_sets, m_sets);
    }
    defer({});
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    c_.psum_high_water = std::max(c_.psum_high_water, cfg_.psum_bank_bytes() * std::min<int64_t>(cfg_.psum_banks, 8));
  }

  // The bias as fp32 [N] in HBM (per output column).
  Stored stored_bias(const std::string& v, bool, int64_t N) {
    auto it = stored_.find("bias:" + v);
    if (it != stored_.end()) return it->second;
    const auto& val = g_.value(v);
    if (!val.data) {  // a graph input (bias_value): fp32 in HBM already, a vector either way round
      const Stored s = stored(v);
      if (s.dtype != DType::f32) throw std::logic_error("a non-constant bias must be stored fp32");
      return stored_["bias:" + v] = Stored{s.offset, s.dtype, 1, N};
    }
    Tensor data = val.data->cast(DType::f32).reshaped({N});
    const int64_t off = hbm_alloc(v, DType::f32, {N});
    c_.hbm_init.push_back({v, data});
    return stored_["bias:" + v] = Stored{off, DType::f32, 1, N};
  }

  // Row kernels: the value as [R, C] rows (N layout), up to 128 rows per tile on the partitions, a
  // whole row along the free dimension. Softmax = exp(x - max) / sum (the sum from the exp's
  // accumulate, then a reciprocal broadcast along the row); LayerNorm = bn_stats/bn_aggr, rsqrt
  // (var + eps), (x - mean) * rstd * gamma + beta; a binary op with a constant row vector.
  void emit_rows(const Node& n) {
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(2);
    c_.pieces.push_back({1, 1});
    const std::string& xin_name = row_input(n);
    const Stored X = operand(xin_name, false);
    const Stored O = stored(n.outputs[0]);
    const int64_t R = X.rows, C = X.cols;
    const int32_t Ci = static_cast<int32_t>(C);
    Sbuf sb{0, cfg_.sbuf_partition_bytes, n.name};
    const int64_t xin = sb.take(2 * C * 4), work = sb.take(C * 4), yout = sb.take(2 * C * 4), small = sb.take(2 * 16 * 4);
    const int32_t P = static_cast<int32_t>(std::min<int64_t>(cfg_.partitions, R));
    // Constant row vectors (gamma, beta, or the broadcast operand), replicated on every partition.
    // A computed row vector is read in its own dtype (operand_dt).
    DType operand_dt = DType::f32;
    auto replicated = [&](const std::string& v) {
      Stored B{};
      if (g_.value(v).data) {
        B = stored_bias(v, false, C);
      } else {
        B = stored(v);
        operand_dt = B.dtype;
      }
      const int64_t off = sb.take(C * 4);
      em_.dma(on_chip(Space::sbuf, B.dtype, 0, P, off, {{Ci, 1}}), in_hbm(B.dtype, P, 0, B.offset, {{Ci, 1}}),
              Emitter::DmaClass::bulk);
      return off;
    };
    int64_t gamma = -1, beta = -1, operand = -1;
    Alu alu = Alu::add;
    double eps = 1e-5;
    if (n.op == "LayerNormalization") {
      eps = n.attrs.get_float("epsilon", 1e-5);
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) gamma = replicated(n.inputs[1]);
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) beta = replicated(n.inputs[2]);
    } else if (n.op != "Softmax" && n.op != "LogSoftmax") {
      binary_alu(n.op, alu);
      operand = replicated(xin_name == n.inputs[0] ? n.inputs[1] : n.inputs[0]);
    }
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    auto row = [&](int32_t parts, int64_t off, DType t = DType::f32) { return on_chip(Space::sbuf, t, 0, parts, off, {{Ci, 1}}); };
    auto col = [&](int32_t parts, int64_t off) { return on_chip(Space::sbuf, DType::f32, 0, parts, off, {{1, 1}}); };
    auto bcast = [&](int32_t parts, int64_t off) { return on_chip(Space::sbuf, DType::f32, 0, parts, off, {{Ci, 0}}); };
    auto emit = [&](Instr in, Lane lane) { em_.emit(in, lane); };
    int64_t t = 0;
    for (int64_t r0 = 0; r0 < R; r0 += P, ++t) {
      const int32_t pr = static_cast<int32_t>(std::min<int64_t>(P, R - r0));
      const int64_t xb = xin + (t % 2) * C * 4, yb = yout + (t % 2) * C * 4, sm = small + (t % 2) * 16 * 4;
      const AccessPattern x = row(pr, xb, X.dtype), y = row(pr, yb, O.dtype);
      em_.dma(x, in_hbm(X.dtype, pr, C, X.offset + r0 * C * static_cast<int64_t>(dtype_size(X.dtype)), {{Ci, 1}}));
      if (n.op == "Softmax" || n.op == "LogSoftmax") {
        // -max (the exp's bias), then exp(x - max) with its sum accumulated.
        Instr mx;
        mx.op = Op::tensor_reduce;
        mx.alu = Alu::max;
        mx.negate = true;
        mx.dst = col(pr, sm);
        mx.src0 = x;
        emit(mx, Lane::vector);
        Instr ex;
        ex.op = Op::activation;
        ex.func = Func::exp;
        ex.imm[0] = 1.0;
        ex.dst = row(pr, work);
        ex.src0 = x;
        ex.src1 = col(pr, sm);
        ex.aux = col(pr, sm + 4);  // sum of the exponentials
        emit(ex, Lane::scalar);
      }
      if (n.op == "LogSoftmax") {
        // x - max - ln(sum): the sum's log and one bias column.
        Instr ln;
        ln.op = Op::activation;
        ln.func = Func::log;
        ln.imm[0] = 1.0;
        ln.dst = col(pr, sm + 8);
        ln.src0 = col(pr, sm + 4);
        emit(ln, Lane::scalar);
        Instr bs;
        bs.op = Op::tensor_tensor;
        bs.alu = Alu::subtract;
        bs.dst = col(pr, sm + 12);  // -max - ln(sum)
        bs.src0 = col(pr, sm);
        bs.src1 = col(pr, sm + 8);
        emit(bs, Lane::vector);
        Instr o;
        o.op = Op::activation;
        o.func = Func::identity;
        o.imm[0] = 1.0;
        o.dst = y;
        o.src0 = x;
        o.src1 = col(pr, sm + 12);
        emit(o, Lane::scalar);
      } else if (n.op == "Softmax") {
        Instr rc;
        rc.op = Op::activation;
        rc.func = Func::reciprocal;
        rc.imm[0] = 1.0;
        rc.dst = col(pr, sm + 8);
        rc.src0 = col(pr, sm + 4);
        emit(rc, Lane::scalar);
        Instr mul;
        mul.op = Op::tensor_tensor;
        mul.alu = Alu::multiply;
        mul.dst = y;
        mul.src0 = row(pr, work);
        mul.src1 = bcast(pr, sm + 8);
        emit(mul, Lane::vector);
      } else if (n.op == "LayerNormalization") {
        Instr st;
        st.op = Op::bn_stats;
        st.dst = on_chip(Space::sbuf, DType::f32, 0, pr, sm, {{6, 1}});
        st.src0 = x;
        emit(st, Lane::vector);
        Instr ag;
        ag.op = Op::bn_aggr;
        ag.dst = on_chip(Space::sbuf, DType::f32, 0, pr, sm + 32, {{2, 1}});  // mean, var
        ag.src0 = on_chip(Space::sbuf, DType::f32, 0, pr, sm, {{6, 1}});
        emit(ag, Lane::vector);
        Instr rs;
        rs.op = Op::activation;
        rs.func = Func::rsqrt;
        rs.imm[0] = 1.0;
        rs.imm[1] = eps;
        rs.dst = col(pr, sm + 40);  // rstd
        rs.src0 = col(pr, sm + 36);
        emit(rs, Lane::scalar);
        Instr nm;
        nm.op = Op::tensor_scalar;
        nm.alu = Alu::multiply;
        nm.imm[0] = -1.0;
        nm.alu1 = Alu::bypass;
        nm.dst = col(pr, sm + 44);  // -mean
        nm.src0 = col(pr, sm + 32);
        emit(nm, Lane::vector);
        Instr xc;
        xc.op = Op::activation;
        xc.func = Func::identity;
        xc.imm[0] = 1.0;
        xc.dst = row(pr, work);
        xc.src0 = x;
        xc.src1 = col(pr, sm + 44);
        emit(xc, Lane::scalar);
        const bool last_is_norm = gamma < 0 && beta < 0;
        Instr sc;
        sc.op = Op::tensor_tensor;
        sc.alu = Alu::multiply;
        sc.dst = last_is_norm ? y : row(pr, work);
        sc.src0 = row(pr, work);
        sc.src1 = bcast(pr, sm + 40);
        emit(sc, Lane::vector);
        if (gamma >= 0) {
          Instr gm;
          gm.op = Op::tensor_tensor;
          gm.alu = Alu::multiply;
          gm.dst = beta < 0 ? y : row(pr, work);
          gm.src0 = row(pr, work);
          gm.src1 = row(pr, gamma);
          emit(gm, Lane::vector);
        }
        if (beta >= 0) {
          Instr bt;
          bt.op = Op::tensor_tensor;
          bt.alu = Alu::add;
          bt.dst = y;
          bt.src0 = row(pr, work);
          bt.src1 = row(pr, beta);
          emit(bt, Lane::vector);
        }
      } else {
        Instr op;
        op.op = Op::tensor_tensor;
        op.alu = alu;
        op.dst = y;
        op.src0 = x;
        op.src1 = row(pr, operand, operand_dt);
        emit(op, Lane::vector);
      }
      em_.dma(in_hbm(O.dtype, pr, C, O.offset + r0 * C * static_cast<int64_t>(dtype_size(O.dtype)), {{Ci, 1}}), y,
              Emitter::DmaClass::bulk);
    }
  }

  // Elementwise kernels: a unary function (scalar engine), a binary op or comparison of two tensors
  // (tensor_tensor) or of a tensor and a scalar constant (tensor_scalar, the constant an immediate),
  // or Where (select; a scalar constant read as a broadcast column). The tensors are viewed as
  // [P, F] with P the largest divisor of the element count up to 128, in chunks of 2048 columns.
  void emit_elementwise(const Node& n) {
    // Operands laid out unlike the output are read from a transposed copy.
    const std::string out = n.outputs[0];
    const bool out_t = transposed(view(out).first) != view(out).second;
    struct Operand {
      std::optional<double> c;  // a scalar constant
      Stored s{};
    };
    std::vector<Operand> ops;
    for (const auto& in : n.inputs) {
      Operand o;
      o.c = scalar_const(in);
      if (!o.c) o.s = operand(in, out_t);
      ops.push_back(o);
    }
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(2);
    c_.pieces.push_back({1, 1});
    const Stored O = stored(out);
    Func f = Func::identity;
    Alu a = Alu::add;
    const bool unary = unary_func(n.op, f) || n.op == "Cast", where = n.op == "Where";  // Cast: identity into the output's dtype
    const bool binary = binary_alu(n.op, a) || compare_alu(n.op, a) || n.op == "Pow";
    if (n.op == "Pow") a = Alu::pow;
    if (!unary && !binary && !where) unsupported(n, "op " + n.op);
    for (const auto& o : ops)
      if (!o.c && o.s.rows * o.s.cols != O.rows * O.cols && o.s.rows * o.s.cols != 1) unsupported(n, "a standalone broadcast is not compiled yet");
    auto bcast = [&](const Operand& o) { return !o.c && o.s.rows * o.s.cols == 1 && O.rows * O.cols > 1; };
    const int64_t total = O.rows * O.cols;
    int64_t P = std::min<int64_t>(cfg_.partitions, total);
    while (total % P) --P;
    const int64_t F_all = total / P;
    const int64_t chunk = std::min<int64_t>(F_all, 2048);
    const int32_t pp = static_cast<int32_t>(P);
    Sbuf sb{0, cfg_.sbuf_partition_bytes, n.name};
    std::vector<int64_t> buf(ops.size(), -1);
    for (size_t k = 0; k < ops.size(); ++k) buf[k] = ops[k].c || bcast(ops[k]) ? sb.take(4) : sb.take(2 * chunk * 4);
    const int64_t yout = sb.take(2 * chunk * 4);
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    if (where)  // the constants of a select, as columns read with stride 0
      for (size_t k = 1; k < ops.size(); ++k)
        if (ops[k].c) {
          Instr ms;
          ms.op = Op::memset;
          ms.imm[0] = *ops[k].c;
          ms.dst = on_chip(Space::sbuf, DType::f32, 0, pp, buf[k], {{1, 1}});
          em_.emit(ms, Lane::vector);
        }
    for (size_t k = 0; k < ops.size(); ++k)  // one-element operands: one value on every partition
      if (bcast(ops[k])) em_.dma(on_chip(Space::sbuf, ops[k].s.dtype, 0, pp, buf[k], {{1, 1}}), in_hbm(ops[k].s.dtype, pp, 0, ops[k].s.offset, {{1, 1}}));
    int64_t i = 0;
    for (int64_t f0 = 0; f0 < F_all; f0 += chunk, ++i) {
      const int32_t fi = static_cast<int32_t>(std::min(chunk, F_all - f0));
      auto hbm_of = [&](const Stored& st) {
        return in_hbm(st.dtype, pp, F_all, st.offset + f0 * static_cast<int64_t>(dtype_size(st.dtype)), {{fi, 1}});
      };
      std::vector<AccessPattern> x(ops.size());
      for (size_t k = 0; k < ops.size(); ++k) {
        if (ops[k].c || bcast(ops[k])) {
          x[k] = on_chip(Space::sbuf, ops[k].c ? DType::f32 : ops[k].s.dtype, 0, pp, buf[k], {{fi, 0}});
          continue;
        }
        x[k] = on_chip(Space::sbuf, ops[k].s.dtype, 0, pp, buf[k] + (i % 2) * chunk * 4, {{fi, 1}});
        em_.dma(x[k], hbm_of(ops[k].s), Emitter::DmaClass::spread);
      }
      const AccessPattern y = on_chip(Space::sbuf, O.dtype, 0, pp, yout + (i % 2) * chunk * 4, {{fi, 1}});
      Instr in;
      in.dst = y;
      if (unary) {
        in.op = Op::activation;
        in.func = f;
        in.imm[0] = 1.0;
        in.src0 = x[0];
        em_.emit(in, Lane::scalar);
      } else if (where) {
        in.op = Op::select;
        in.src0 = x[0];
        in.src1 = x[1];
        in.aux = x[2];
        em_.emit(in, Lane::vector);
      } else if (!ops[0].c && !ops[1].c) {
        in.op = Op::tensor_tensor;
        in.alu = a;
        in.src0 = x[0];
        in.src1 = x[1];
        em_.emit(in, Lane::vector);
      } else {
        // x op c, or c op x: commutative ops and comparisons swap; c - x = x * -1 + c; c / x =
        // reciprocal(x) * c.
        const bool c_first = ops[0].c.has_value();
        const double c = c_first ? *ops[0].c : *ops[1].c;
        in.op = Op::tensor_scalar;
        in.src0 = x[c_first ? 1 : 0];
        in.alu = c_first ? swapped(a) : a;
        in.imm[0] = c;
        in.alu1 = Alu::bypass;
        if (c_first && a == Alu::subtract) {
          in.alu = Alu::multiply;
          in.imm[0] = -1.0;
          in.alu1 = Alu::add;
          in.imm[1] = c;
        } else if (c_first && a == Alu::pow) {  // c ^ x = exp(x ln c), c > 0
          in.op = Op::activation;
          in.func = Func::exp;
          in.imm[0] = std::log(c);
          in.imm[1] = 0.0;
          in.alu = Alu::add;
          em_.emit(in, Lane::scalar);
          em_.dma(hbm_of(O), y, Emitter::DmaClass::spread_store);
          continue;
        } else if (c_first && a == Alu::divide) {
          Instr rc;
          rc.op = Op::activation;
          rc.func = Func::reciprocal;
          rc.imm[0] = 1.0;
          rc.dst = y;
          rc.src0 = x[1];
          em_.emit(rc, Lane::scalar);
          in.src0 = y;
          in.alu = Alu::multiply;
        }
        em_.emit(in, Lane::vector);
      }
      em_.dma(hbm_of(O), y, Emitter::DmaClass::spread_store);
    }
  }

  // ReduceSum / ReduceMean over all elements, the last axis, or all but the last: the reduced axis
  // lies along the free dimension (the input read in the layout that puts it there), tensor_reduce
  // per partition tile and free chunk, partial sums added; over all elements the per-partition sums
  // are then reduced across partitions (gpsimd partition_all_reduce). A mean scales at the end.
  void emit_reduce(const Node& n) {
    const Reduce k = *reduce_kind(n);
    const std::string& xin = n.inputs[0];
    const bool want_t = k == Reduce::over_leading ? true : k == Reduce::over_last ? false : transposed(view(xin).first) != view(xin).second;
    const Stored X = operand(xin, want_t);  // [partition dim, free dim]
    em_.begin_kernel(n.name);
    c_.stream_buffers.push_back(2);
    c_.pieces.push_back({1, 1});
    const Stored O = stored(n.outputs[0]);
    const double count = k == Reduce::all ? static_cast<double>(X.rows * X.cols) : static_cast<double>(X.cols);
    const double scale = n.op == "ReduceMean" ? 1.0 / count : 1.0;
    const int64_t chunk = std::min<int64_t>(X.cols, 2048);
    const int32_t P = static_cast<int32_t>(std::min<int64_t>(cfg_.partitions, X.rows));
    Sbuf sb{0, cfg_.sbuf_partition_bytes, n.name};
    const int64_t xbuf = sb.take(2 * chunk * 4), acc = sb.take(2 * 4), part = sb.take(2 * 4), total = sb.take(4), res = sb.take(2 * 4);
    c_.sbuf_high_water = std::max(c_.sbuf_high_water, sb.next);
    const int64_t xes = static_cast<int64_t>(dtype_size(X.dtype)), oes = static_cast<int64_t>(dtype_size(O.dtype));
    auto col = [&](int32_t parts, int64_t off, DType t = DType::f32) { return on_chip(Space::sbuf, t, 0, parts, off, {{1, 1}}); };
    auto add_into = [&](const AccessPattern& dst, const AccessPattern& src) {
      Instr ad;
      ad.op = Op::tensor_tensor;
      ad.alu = Alu::add;
      ad.dst = dst;
      ad.src0 = dst;
      ad.src1 = src;
      em_.emit(ad, Lane::vector);
    };
    auto finish = [&](int32_t parts, const AccessPattern& src, int64_t slot) {  // scale into the output dtype
      Instr sc;
      sc.op = Op::tensor_scalar;
      sc.alu = Alu::multiply;
      sc.imm[0] = scale;
      sc.alu1 = Alu::bypass;
      sc.src0 = src;
      sc.dst = col(parts, res + slot * 4, O.dtype);
      em_.emit(sc, Lane::vector);
      return sc.dst;
    };
    int64_t t = 0, c = 0;
    for (int64_t p0 = 0; p0 < X.rows; p0 += P, ++t) {
      const int32_t pr = static_cast<int32_t>(std::min<int64_t>(P, X.rows - p0));
      const AccessPattern a = col(pr, acc + (t % 2) * 4);
      for (int64_t f0 = 0; f0 < X.cols; f0 += chunk, ++c) {
        const int32_t fi = static_cast<int32_t>(std::min(chunk, X.cols - f0));
        const AccessPattern x = on_chip(Space::sbuf, X.dtype, 0, pr, xbuf + (c % 2) * chunk * 4, {{fi, 1}});
        em_.dma(x, in_hbm(X.dtype, pr, X.cols, X.offset + (p0 * X.cols + f0) * xes, {{fi, 1}}), Emitter::DmaClass::spread);
        Instr rd;
        rd.op = Op::tensor_reduce;
        rd.alu = Alu::add;
        rd.src0 = x;
        rd.dst = f0 == 0 ? a : col(pr, part + (c % 2) * 4);
        em_.emit(rd, Lane::vector);
        if (f0 > 0) add_into(a, rd.dst);
      }
      if (k == Reduce::all) {
        if (p0 == 0) {
          Instr ms;
          ms.op = Op::memset;
          ms.imm[0] = 0.0;
          ms.dst = col(P, total);
          em_.emit(ms, Lane::vector);
        }
        add_into(col(pr, total), a);
      } else {
        const AccessPattern r = finish(pr, a, t % 2);
        em_.dma(in_hbm(O.dtype, pr, 1, O.offset + p0 * oes, {{1, 1}}), r, Emitter::DmaClass::bulk);
      }
    }
    if (k == Reduce::all) {
      Instr ar;
      ar.op = Op::partition_all_reduce;
      ar.alu = Alu::add;
      ar.src0 = col(P, total);
      ar.dst = col(P, acc);
      em_.emit(ar, Lane::gpsimd);
      const AccessPattern r = finish(1, col(1, acc), 0);
      em_.dma(in_hbm(O.dtype, 1, 1, O.offset, {{1, 1}}), r, Emitter::DmaClass::bulk);
    }
  }

  const Graph& g_;
  const CoreConfig& cfg_;
  MappingOptions opt_;
  Compiled c_;
  Emitter em_;
  std::map<std::string, MatmulPlan> plans_;
  std::set<std::string> fused_;
  std::map<std::string, HeadView> heads_;  // 3-D values seen as per-head blocks of 2-D storage
  std::set<std::string> view_nodes_;       // Reshape/Transpose/scale nodes those views absorb
  std::set<std::string> batched_;          // batched (per-head) matmuls
  std::map<std::string, ConvPlan> convs_;
  std::set<std::string> pools_;
  std::map<std::string, std::string> pool_flatten_;  // pooling node -> the Flatten output it writes
  std::map<std::string, int64_t> cm_pad_;  // channel-major values and their zero border
  std::map<std::string, CmStore> cm_;
  std::map<std::string, std::string> alias_of_, transpose_of_;
  std::map<std::string, bool> layout_;
  std::map<std::string, std::string> tie_;  // storage of a next-state output -> the state it is stored in
  std::set<std::string> copies_;        // stored values that also need a transposed copy
  std::map<std::string, Stored> copy_;  // ... and where the copy is, once made
  std::map<std::string, Stored> stored_;
  int64_t hbm_next_ = 0;
};

}  // namespace

Compiled compile(const Graph& g, const CoreConfig& cfg, const MappingOptions& opt) {
  if (opt.in_place.empty()) {
    Compiler c(g, cfg, opt);
    return c.run();
  }
  // Training graphs: a Gemm whose C is computed (a bias cast to the compute dtype) becomes the
  // Gemm and an Add of that row vector (a row kernel): the matmul epilogue adds fp32 biases only.
  Graph t = g;
  const size_t n0 = t.nodes.size();
  for (size_t i = 0; i < n0; ++i) {
    Node& n = t.nodes[i];
    if (n.op != "Gemm" || n.inputs.size() < 3 || n.inputs[2].empty()) continue;
    const auto& c = t.value(n.inputs[2]);
    const bool graph_input = std::find(t.inputs.begin(), t.inputs.end(), n.inputs[2]) != t.inputs.end();
    if (c.data || (graph_input && c.dtype == DType::f32 && c.shape.size() == 1)) continue;  // as Compiler::bias_value fuses
    const std::string bias = n.inputs[2], out = n.outputs[0], mid = out + "#nobias";
    n.inputs.resize(2);
    n.outputs[0] = mid;
    t.values[mid] = graph::Value{mid, t.value(out).dtype, t.value(out).shape, false, std::nullopt, false};
    Node add;
    add.op = "Add";
    add.name = n.name + "/bias";
    add.inputs = {mid, bias};
    add.outputs = {out};
    t.nodes.push_back(std::move(add));
  }
  Compiler c(t, cfg, opt);
  return c.run();
}

}  // namespace tessera::neuroncore
