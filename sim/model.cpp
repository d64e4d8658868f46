#include "sim/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "isa/interrupt.hpp"
#include "isa/npy.hpp"
#include "mapper/frontend/json_graph.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"

namespace tessera::sim {

using json = nlohmann::json;

graph::Graph load_model(const Scenario& s) {
  const json& model = s.resolved.value("model", json());
  if (model.is_null())
    throw InputError("/model", "the scenario has no model", "add \"model\": {\"onnx\": \"path.onnx\"} or an inline \"graph\"");
  enter_phase("load");
  graph::Graph g = model.contains("onnx") ? frontend::load_onnx(model["onnx"].get<std::string>())
                                          : frontend::load_json_graph(model["graph"], "/model/graph", s.dir);
  passes::prepare(g, static_cast<int64_t>(s.resolved["run"]["host_memory"].get<double>()));
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
      try {
        out[name] = read_input_file(spec, where, name, v.dtype, {v.shape});
      } catch (const InputError& e) {
        for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
      }
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

namespace {

// NumPy's name of a dtype (messages show the line that converts).
std::string numpy_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::i16: return "int16";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool_";
    default: return "float32";  // bf16, cbf16, fp8: NumPy has none; tessera takes fp32 and rounds
  }
}

std::string gib(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

double shape_bytes(const Shape& s, DType t) {
  double n = static_cast<double>(dtype_size(t));
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

}  // namespace

bool file_dtype_fits(DType file, DType want) {
  if (file == want) return true;
  const bool numpy_lacks = want == DType::bf16 || want == DType::cbf16 || want == DType::f8e4m3 || want == DType::f8e5m2;
  return numpy_lacks && file == DType::f32;
}

NpyInfo npy_info_at(const std::string& path, const std::string& where) {
  try {
    return read_npy_info(path);
  } catch (const InputError& e) {
    const Diagnostic& d = e.diagnostics().at(0);
    throw InputError(where, d.where + ": " + d.message, d.hint);
  }
}

NpyInfo check_input_file(const json& spec, const std::string& where, const std::string& input, DType want, const std::vector<Shape>& shapes) {
  const std::string path = spec["file"].get<std::string>();
  const NpyInfo info = npy_info_at(path, where + "/file");
  const bool cast = spec.value("cast", false);
  if (!cast && !file_dtype_fits(info.dtype, want)) {
    const std::string file = std::filesystem::path(path).filename().string();
    throw InputError(where + "/file",
                     file + " holds " + std::string(dtype_name(info.dtype)) + " (numpy " + numpy_name(info.dtype) + ") but the model input '" + input +
                         "' is " + std::string(dtype_name(want)) + "; tessera does not convert silently",
                     "convert it: np.save('" + file + "', np.load('" + file + "').astype(np." + numpy_name(want) +
                         ")), or set \"cast\": true under " + where + " to convert as it loads");
  }
  // (shapes[1], when given, is the per-step form [steps, ...]: a longer leading axis is accepted too,
  // its first run.steps entries used)
  const bool longer = shapes.size() > 1 && info.shape.size() == shapes[1].size() && !info.shape.empty() && info.shape[0] > shapes[1][0] &&
                      std::equal(info.shape.begin() + 1, info.shape.end(), shapes[1].begin() + 1);
  if (!longer && std::find(shapes.begin(), shapes.end(), info.shape) == shapes.end()) {
    std::string want_s;
    for (size_t i = 0; i < shapes.size(); ++i) want_s += (i ? (i + 1 == shapes.size() ? " or " : ", ") : "") + shape_str(shapes[i]);
    throw InputError(where + "/file", "shape " + shape_str(info.shape) + " does not match the model input's " + want_s,
                     shapes.size() > 1 ? "give the input's shape (the same every step) or a leading axis of run.steps (or more: the first run.steps are used)" : "");
  }
  return info;
}

Tensor read_input_file(const json& spec, const std::string& where, const std::string& input, DType want, const std::vector<Shape>& shapes) {
  check_input_file(spec, where, input, want, shapes);
  try {
    return read_npy(spec["file"].get<std::string>());
  } catch (const InputError& e) {
    const Diagnostic& d = e.diagnostics().at(0);
    throw InputError(where + "/file", d.where + ": " + d.message, d.hint);
  }
}

double HostMemory::total() const {
  double t = 0;
  for (const auto& [what, b] : parts) t += b;
  return t;
}

void HostMemory::check(const Scenario& s) const {
  const double budget = s.resolved["run"]["host_memory"].get<double>();
  if (total() <= budget) return;
  std::string detail;
  for (const auto& [what, b] : parts)
    if (b >= 1024.0 * 1024) detail += (detail.empty() ? "" : ", ") + what + " " + gib(b);
  throw InputError("/run/host_memory", "the run needs about " + gib(total()) + " of host memory (" + detail + "); the budget is " + gib(budget),
                   "raise run.host_memory (e.g. --set run.host_memory=" + std::to_string(static_cast<int64_t>(std::ceil(total() / (1024.0 * 1024 * 1024)))) +
                       "GiB) if this machine has it, or run a smaller model, batch or fabric");
}

HostMemory precheck_graph_data(const Scenario& s, const graph::Graph& g, int64_t steps, bool reference, const std::vector<std::string>* only) {
  enter_phase("inputs");
  DiagnosticList d;
  HostMemory mem;
  double in_bytes = 0;
  const json& inputs = s.resolved["inputs"];
  const std::vector<std::string>& names = only ? *only : g.inputs;
  for (const auto& name : names) {
    poll_interrupt();
    if (!inputs.contains(name) || !g.has_value(name)) continue;  // StepInputs reports what is missing
    const graph::Value& v = g.value(name);
    const json& spec = inputs[name];
    const std::string where = "/inputs/" + schema::pointer_token(name);
    if (spec.contains("file")) {
      Shape per = v.shape;
      per.insert(per.begin(), steps);
      try {
        const NpyInfo info = check_input_file(spec, where, name, v.dtype, {v.shape, per});
        in_bytes += shape_bytes(info.shape, info.dtype);
      } catch (const InputError& e) {
        for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
      }
    } else {
      in_bytes += shape_bytes(v.shape, v.dtype);
    }
  }
  for (const auto& [name, e] : s.resolved["expect"]["outputs"].items()) {
    if (!e.contains("file") || !g.has_value(name)) continue;
    const std::string where = "/expect/outputs/" + schema::pointer_token(name) + "/file";
    try {
      const NpyInfo info = read_npy_info(e["file"].get<std::string>());
      const graph::Value& v = g.value(name);
      if (v.shape_known && info.shape != v.shape)
        d.add(where, "shape " + shape_str(info.shape) + " does not match the model output's " + shape_str(v.shape),
              "give the expected values of the output as the model computes it");
      in_bytes += shape_bytes(info.shape, info.dtype);
    } catch (const InputError& err) {
      const Diagnostic& di = err.diagnostics().at(0);
      d.add(where, di.where + ": " + di.message, di.hint);
    }
  }
  d.throw_if_any();
  // Indices given as input files, checked against the data they index (a run would stop in the
  // reference executor, after compiling; validate would not see them at all).
  for (const auto& n : g.nodes) {
    if (n.op != "Gather" || n.inputs.size() < 2) continue;
    const std::string& ind = n.inputs[1];
    if (std::find(names.begin(), names.end(), ind) == names.end() || !inputs.contains(ind) || !inputs[ind].contains("file")) continue;
    const graph::Value& data = g.value(n.inputs[0]);
    if (!data.shape_known || data.shape.empty()) continue;
    int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.shape.size());
    if (axis < 0 || axis >= static_cast<int64_t>(data.shape.size())) continue;
    const int64_t dim = data.shape[static_cast<size_t>(axis)];
    const Tensor t = read_npy(inputs[ind]["file"].get<std::string>());
    if (is_float(t.dtype()) || t.dtype() == DType::boolean) continue;  // the dtype check names it
    for (int64_t k : t.to_i64())
      if (k < -dim || k >= dim) {
        d.add("/inputs/" + schema::pointer_token(ind) + "/file",
              g.where(n) + ": index " + std::to_string(k) + " is out of range for axis " + std::to_string(axis) + " of data " + shape_str(data.shape),
              "indices of this axis are in [" + std::to_string(-dim) + ", " + std::to_string(dim) + ")");
        break;
      }
  }
  d.throw_if_any();
  mem.parts.push_back({"inputs and expected values", in_bytes});
  if (reference) mem.parts.push_back({"reference executor", reference::peak_bytes(g)});
  mem.check(s);
  return mem;
}

}  // namespace tessera::sim
