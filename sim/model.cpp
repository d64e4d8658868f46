#include "sim/model.hpp"

#include <algorithm>

#include "isa/npy.hpp"
#include "mapper/frontend/json_graph.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/passes.hpp"

namespace tessera::sim {

using json = nlohmann::json;

graph::Graph load_model(const Scenario& s) {
  const json& model = s.resolved.value("model", json());
  if (model.is_null())
    throw InputError("/model", "the scenario has no model", "add \"model\": {\"onnx\": \"path.onnx\"} or an inline \"graph\"");
  graph::Graph g = model.contains("onnx") ? frontend::load_onnx(model["onnx"].get<std::string>())
                                          : frontend::load_json_graph(model["graph"], "/model/graph", s.dir);
  passes::prepare(g);
  return g;
}


std::map<std::string, Tensor> load_inputs(const Scenario& s, const graph::Graph& g) {
  DiagnosticList d;
  std::map<std::string, Tensor> out;
  const json& inputs = s.resolved["inputs"];
  for (const auto& [name, spec] : inputs.items()) {
    const std::string where = "/inputs/" + schema::pointer_token(name);
    if (std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end()) {
      std::string hint = did_you_mean(name, g.inputs);
      std::string all;
      for (const auto& i : g.inputs) all += (all.empty() ? "" : ", ") + i;
      d.add(where, "the model has no input '" + name + "'", hint.empty() ? "model inputs: " + all : "did you mean '" + hint + "'?");
      continue;
    }
    const auto& v = g.value(name);
    if (spec.contains("file")) {
      Tensor t = read_npy(spec["file"].get<std::string>());
      if (t.shape() != v.shape) {
        d.add(where + "/file", "shape " + shape_str(t.shape()) + " does not match the model input's " + shape_str(v.shape));
        continue;
      }
      out[name] = std::move(t);
    } else {
      const json& r = spec["random"];
      out[name] = random_tensor(v.dtype, v.shape, r["seed"].get<uint64_t>(), r["dist"] == "normal", r["scale"].get<double>());
    }
  }
  for (const auto& i : g.inputs)
    if (!out.count(i) && !inputs.contains(i))
      d.add("/inputs", "model input '" + i + "' " + std::string(dtype_name(g.value(i).dtype)) + shape_str(g.value(i).shape) +
                           " has no value", "add /inputs/" + i + " with a \"file\" or \"random\"");
  d.throw_if_any();
  return out;
}

void check_expect_names(const Scenario& s, const graph::Graph& g) {
  DiagnosticList d;
  for (const auto& [name, spec] : s.resolved["expect"]["outputs"].items()) {
    if (std::find(g.outputs.begin(), g.outputs.end(), name) != g.outputs.end()) continue;
    std::string hint = did_you_mean(name, g.outputs);
    d.add("/expect/outputs/" + schema::pointer_token(name), "the model has no output '" + name + "'",
          hint.empty() ? "model outputs: " + (g.outputs.empty() ? std::string() : g.outputs.front()) : "did you mean '" + hint + "'?");
  }
  d.throw_if_any();
}

}  // namespace tessera::sim
