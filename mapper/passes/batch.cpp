// with_batch (passes.hpp): the graph for fewer samples, for micro-batching on the wafer
// (docs/wafer-compiler.md "Micro-batches").
#include <map>
#include <set>
#include <string>

#include "isa/error.hpp"
#include "mapper/passes/passes.hpp"

namespace tessera::passes {

void with_batch(graph::Graph& g, int64_t b) {
  if (g.inputs.empty()) throw InputError(g.source, "a graph without inputs has no batch to split");
  const int64_t B = g.value(g.inputs[0]).shape.empty() ? 0 : g.value(g.inputs[0]).shape[0];
  const std::string why = "micro-batches of " + std::to_string(b) + " samples";
  const char* hint = "set mapping.micro_batch to the whole batch, or export the model with the batch along the first dimension of every input and output";
  for (const auto& name : g.inputs) {
    const auto& s = g.value(name).shape;
    if (s.empty() || s[0] != B) throw InputError(g.source, why + ": input '" + name + "' is " + shape_str(s) + ", not [" + std::to_string(B) + ", ...] like '" + g.inputs[0] + "'", hint);
  }
  if (B < 1 || b < 1 || B % b != 0) throw InputError(g.source, why + ": the batch of " + std::to_string(B) + " does not split into them", hint);
  if (b == B) return;
  std::map<std::string, Shape> before;
  for (const auto& [n, v] : g.values) before[n] = v.shape;
  // A Reshape to a constant shape that starts with the batch, of a value that starts with it
  // (x.view(x.size(0), ...) exported with fixed shapes folds the size into the constant), gets
  // the micro-batch there.
  for (auto& n : g.nodes) {
    if (n.op != "Reshape" || n.inputs.size() < 2 || n.inputs[1].empty()) continue;
    const graph::Value& sv = g.value(n.inputs[1]);
    if (!sv.data || sv.data->numel() == 0 || before[n.inputs[0]].empty() || before[n.inputs[0]][0] != B) continue;
    std::vector<int64_t> dims = sv.data->to_i64();
    if (dims[0] != B) continue;
    dims[0] = b;
    std::string name = n.inputs[1] + "_mb";
    while (g.has_value(name)) name += "_";
    graph::Value v = sv;
    v.name = name;
    v.is_initializer = false;
    v.data = Tensor::from_i64(sv.data->shape(), dims);
    g.values[name] = std::move(v);
    n.inputs[1] = name;
  }
  // A constant [B, ...] whose B slices are equal, beside an input of the batch's (an Expand over
  // the batch folded with fixed shapes: ViT's class token torch.onnx.export writes as
  // ConstantOfShape/Where/Expand into a Concat), gets the micro-batch's first b slices.
  // (Only as an operand of a Concat or a broadcasting elementwise op of the same rank: a weight
  // whose first dimension happens to equal the batch is not one.)
  static const std::set<std::string> kAlong = {"Concat", "Add", "Sub", "Mul", "Div", "Where"};
  for (auto& n : g.nodes)
    for (auto& in : n.inputs) {
      if (in.empty() || !g.has_value(in) || !kAlong.count(n.op)) continue;
      const graph::Value& cv = g.value(in);
      if (!cv.data || cv.data->dtype() != DType::f32 || cv.shape.size() < 2 || cv.shape[0] != B || cv.data->numel() == 0) continue;
      bool beside = false;
      for (const auto& o : n.inputs)
        beside = beside || (o != in && !o.empty() && before[o].size() == cv.shape.size() && before[o][0] == B && !g.value(o).data);
      if (!beside) continue;
      const std::vector<float> all = cv.data->to_f32();
      const size_t per = all.size() / static_cast<size_t>(B);
      bool same = true;
      for (size_t i = per; same && i < all.size(); ++i) same = all[i] == all[i % per];
      if (!same) continue;
      Shape s = cv.shape;
      s[0] = b;
      std::string name = in + "_mb";
      while (g.has_value(name)) name += "_";
      graph::Value v = cv;
      v.name = name;
      v.is_initializer = false;
      v.shape = s;
      v.data = Tensor::from_f32(s, std::vector<float>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(per * static_cast<size_t>(b))));
      g.values[name] = std::move(v);
      in = name;
    }
  for (const auto& name : g.inputs) g.value(name).shape[0] = b;
  try {
    infer_and_fold(g);
  } catch (const InputError& e) {
    const Diagnostic& d = e.diagnostics().front();
    throw InputError(g.source, why + ": " + d.where + ": " + d.message + " (the graph's shapes fix its batch of " + std::to_string(B) + ")", hint);
  }
  for (const auto& name : g.outputs) {
    const auto& s = g.value(name).shape;
    if (s.empty() || s[0] != b || before[name].empty() || before[name][0] != B)
      throw InputError(g.source, why + ": output '" + name + "' is " + shape_str(before[name]) + " for the batch and " + shape_str(s) + " for a micro-batch, not the samples along its first dimension", hint);
  }
}

}  // namespace tessera::passes
