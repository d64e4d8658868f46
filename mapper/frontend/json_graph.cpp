#include "mapper/frontend/json_graph.hpp"

#include <nlohmann/json.hpp>

#include "isa/error.hpp"
#include "isa/npy.hpp"
#include "mapper/reference/kernels.hpp"

namespace tessera::frontend {

using json = nlohmann::json;

namespace {

graph::AttrValue attr_from_json(const json& v, const std::string& where) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    bool ints = true, nums = true, strs = true;
    for (const auto& e : v) {
      ints = ints && (e.is_number_integer() || e.is_number_unsigned());
      nums = nums && e.is_number();
      strs = strs && e.is_string();
    }
    if (ints) return v.get<std::vector<int64_t>>();
    if (nums) return v.get<std::vector<double>>();
    if (strs) return v.get<std::vector<std::string>>();
  }
  throw InputError(where, "an attribute is an integer, a number, a string, or a list of one of those",
                   "write e.g. \"axis\": 1 or \"perm\": [0, 2, 1]");
}

Shape shape_of(const json& j) { return j.get<std::vector<int64_t>>(); }

}  // namespace

graph::Graph load_json_graph(const json& j, const std::string& ptr, const std::string&) {
  graph::Graph g;
  g.source = "inline graph " + ptr;
  g.opset = j.value("opset", 17);
  DiagnosticList d;
  for (const auto& [name, spec] : j["inputs"].items()) {
    graph::Value v;
    v.name = name;
    v.dtype = *parse_dtype(spec.value("dtype", std::string("fp32")));
    v.shape = shape_of(spec["shape"]);
    v.shape_known = true;
    g.values[name] = v;
    g.inputs.push_back(name);
  }
  const json inits = j.value("initializers", json::object());
  for (const auto& [name, spec] : inits.items()) {
    const std::string where = ptr + "/initializers/" + name;
    graph::Value v;
    v.name = name;
    v.is_initializer = true;
    const DType dt = *parse_dtype(spec.value("dtype", std::string("fp32")));
    if (spec.contains("file")) {
      Tensor t = read_npy(spec["file"].get<std::string>());
      if (spec.contains("shape") && t.shape() != shape_of(spec["shape"]))
        d.add(where + "/shape", "the file holds " + shape_str(t.shape()) + ", not " + shape_str(shape_of(spec["shape"])));
      v.data = t.dtype() == dt ? t : t.cast(dt);
    } else if (spec.contains("values")) {
      const Shape s = spec.contains("shape") ? shape_of(spec["shape"]) : Shape{static_cast<int64_t>(spec["values"].size())};
      std::vector<double> vals = spec["values"].get<std::vector<double>>();
      if (static_cast<int64_t>(vals.size()) != shape_numel(s)) {
        d.add(where + "/values", std::to_string(vals.size()) + " values for shape " + shape_str(s) + " (needs " +
                                     std::to_string(shape_numel(s)) + ")");
        continue;
      }
      Tensor t(DType::f64, s);
      std::copy(vals.begin(), vals.end(), t.as<double>().begin());
      v.data = t.cast(dt);
    } else {
      if (!spec.contains("shape")) {
        d.add(where + "/shape", "a random initializer needs a shape");
        continue;
      }
      const json& r = spec["random"];
      v.data = random_tensor(dt, shape_of(spec["shape"]), r["seed"].get<uint64_t>(), r["dist"] == "normal",
                             r["scale"].get<double>());
    }
    v.dtype = v.data->dtype();
    v.shape = v.data->shape();
    v.shape_known = true;
    g.values[name] = std::move(v);
  }
  size_t idx = 0;
  for (const auto& nj : j["nodes"]) {
    const std::string where = ptr + "/nodes/" + std::to_string(idx);
    graph::Node n;
    n.op = nj["op"].get<std::string>();
    n.name = nj.value("name", n.op + "_" + std::to_string(idx));
    ++idx;
    if (!reference::supports_op(n.op)) {
      d.add(where + "/op", "op '" + n.op + "' is not supported", "see docs/ops.md for the supported set");
      continue;
    }
    n.inputs = nj["inputs"].get<std::vector<std::string>>();
    n.outputs = nj["outputs"].get<std::vector<std::string>>();
    const json attrs = nj.value("attrs", json::object());
    for (const auto& [k, v] : attrs.items()) {
      try {
        n.attrs.set(k, attr_from_json(v, where + "/attrs/" + k));
      } catch (const InputError& e) {
        for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
      }
    }
    for (const auto& o : n.outputs)
      if (!o.empty() && !g.values.count(o)) g.values[o] = graph::Value{o, DType::f32, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(n));
  }
  g.outputs = j["outputs"].get<std::vector<std::string>>();
  d.throw_if_any();
  graph::verify(g);
  return g;
}

}  // namespace tessera::frontend
