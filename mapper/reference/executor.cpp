#include "mapper/reference/executor.hpp"

#include <algorithm>

#include "isa/error.hpp"
#include "mapper/reference/kernels.hpp"

namespace tessera::reference {

std::map<std::string, Tensor> execute(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                                      const std::function<void(size_t, size_t)>& on_node) {
  std::map<std::string, Tensor> env;
  for (const auto& name : g.inputs) {
    auto it = inputs.find(name);
    const auto& decl = g.value(name);
    if (it == inputs.end())
      throw InputError("input '" + name + "'", "no value given for graph input '" + name + "' " + shape_str(decl.shape),
                       "add it under /inputs in the scenario");
    if (it->second.shape() != decl.shape)
      throw InputError("input '" + name + "'", "shape " + shape_str(it->second.shape()) + " does not match the model's " +
                                                   shape_str(decl.shape));
    env[name] = it->second.dtype() == decl.dtype ? it->second : it->second.cast(decl.dtype);
  }
  // Last use of each value, so intermediates are freed as soon as possible.
  const auto order = g.topo_order();
  std::map<std::string, size_t> last_use;
  for (size_t k = 0; k < order.size(); ++k)
    for (const auto& i : g.nodes[order[k]].inputs) last_use[i] = k;
  for (const auto& o : g.outputs) last_use[o] = SIZE_MAX;

  auto lookup = [&](const std::string& name) -> const Tensor* {
    auto it = env.find(name);
    if (it != env.end()) return &it->second;
    const auto& v = g.value(name);
    if (v.data) return &*v.data;
    throw std::logic_error("execute: value '" + name + "' not computed");
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& n = g.nodes[order[k]];
    OpCall call{n.op, n.name, g.opset, &n.attrs, {}, n.outputs.size()};
    for (const auto& i : n.inputs) call.inputs.push_back(i.empty() ? nullptr : lookup(i));
    auto outs = run_op(call);
    for (size_t j = 0; j < n.outputs.size() && j < outs.size(); ++j)
      if (!n.outputs[j].empty()) env[n.outputs[j]] = std::move(outs[j]);
    for (const auto& i : n.inputs) {
      auto lu = last_use.find(i);
      if (lu != last_use.end() && lu->second == k) env.erase(i);
    }
    if (on_node) on_node(k + 1, order.size());
  }
  std::map<std::string, Tensor> result;
  for (const auto& o : g.outputs) result[o] = *lookup(o);
  return result;
}

double peak_bytes(const graph::Graph& g) {
  auto bytes = [&](const std::string& name) -> double {
    if (name.empty()) return 0.0;
    const auto& v = g.value(name);
    if (v.data) return 0.0;  // a constant: already held by the graph
    double n = static_cast<double>(dtype_size(v.dtype));
    for (int64_t d : v.shape) n *= static_cast<double>(d);
    return n;
  };
  auto elements = [&](const std::string& name) -> double {
    if (name.empty()) return 0.0;
    double n = 1.0;
    for (int64_t d : g.value(name).shape) n *= static_cast<double>(d);
    return n;
  };
  const auto order = g.topo_order();
  std::map<std::string, size_t> last_use;
  for (size_t k = 0; k < order.size(); ++k)
    for (const auto& i : g.nodes[order[k]].inputs) last_use[i] = k;
  for (const auto& o : g.outputs) last_use[o] = SIZE_MAX;
  double live = 0.0, peak = 0.0;
  for (const auto& i : g.inputs) live += bytes(i);
  peak = live;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& n = g.nodes[order[k]];
    double out = 0.0, work = 0.0;
    for (const auto& o : n.outputs) out += bytes(o);
    if (n.op == "MatMul" || n.op == "Gemm" || n.op == "Conv" || n.op == "ConvTranspose") {
      for (const auto& i : n.inputs) work += 8.0 * elements(i);
      for (const auto& o : n.outputs) work += 8.0 * elements(o);
    }
    peak = std::max(peak, live + out + work);
    live += out;
    for (const auto& i : n.inputs) {
      auto lu = last_use.find(i);
      if (lu != last_use.end() && lu->second == k) {
        live -= bytes(i);
        last_use.erase(lu);  // an input named twice is freed once
      }
    }
  }
  return peak;
}

}  // namespace tessera::reference
