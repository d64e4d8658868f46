#include "sim/conformance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "isa/compare.hpp"
#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "mapper/reference/kernels.hpp"
#include "sim/console.hpp"

namespace tessera::sim {

namespace fs = std::filesystem;

namespace {

enum class Status { pass, fail, error, unsupported_op };

struct Row {
  std::string name;
  Status status;
  double max_abs = 0;
  std::string reason;
};

const char* status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "FAIL";
    case Status::error: return "ERROR";
    case Status::unsupported_op: return "unsupported";
  }
  return "?";
}

std::map<std::string, std::string> read_reasons(const std::string& path) {
  std::map<std::string, std::string> r;
  if (path.empty()) return r;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(':');
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    r[name] = colon == std::string::npos ? "" : line.substr(colon + 1);
  }
  return r;
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path());
  // input_10 after input_9
  std::sort(v.begin(), v.end(), [](const fs::path& a, const fs::path& b) {
    const auto na = a.filename().string(), nb = b.filename().string();
    return na.size() != nb.size() ? na.size() < nb.size() : na < nb;
  });
  return v;
}

// The ops a model uses that the reference executor does not support ("" when all are supported).
std::string unsupported_ops(const std::string& model_path) {
  std::set<std::string> missing;
  for (const auto& op : frontend::model_op_types(model_path))
    if (!reference::supports_op(op)) missing.insert(op);
  std::string r;
  for (const auto& op : missing) r += (r.empty() ? "ops outside the supported set: " : ", ") + op;
  return r;
}

// Like a static-shape compiler, the runner specialises the model to the test's integer inputs
// (axes, shapes, indices) and to every input that decides an output's shape (Resize's scales,
// Range's bounds, NonZero's input, ...): they become constants before the graph passes run.
graph::Graph specialise(const graph::Graph& g0, std::map<std::string, Tensor>& inputs) {
  graph::Graph g = g0;
  std::set<std::string> decides_shape;
  for (const auto& n : g.nodes)
    for (size_t k : passes::shape_inputs(n.op, g.opset))
      if (k < n.inputs.size()) decides_shape.insert(n.inputs[k]);
  std::vector<std::string> runtime;
  for (const auto& name : g.inputs) {
    auto it = inputs.find(name);
    const bool integer = it != inputs.end() && !is_float(it->second.dtype()) && it->second.dtype() != DType::boolean;
    if (it != inputs.end() && (integer || decides_shape.count(name))) {
      auto& v = g.value(name);
      v.data = it->second;
      v.shape = it->second.shape();
      v.shape_known = true;
      inputs.erase(it);
    } else {
      runtime.push_back(name);
    }
  }
  g.inputs = runtime;
  return g;
}

Row run_one(const fs::path& dir, double rtol, double atol) {
  Row row{dir.filename().string(), Status::pass, 0, {}};
  const std::string model = (dir / "model.onnx").string();
  if (const std::string u = unsupported_ops(model); !u.empty()) {
    row.status = Status::unsupported_op;
    row.reason = u;
    return row;
  }
  try {
    const graph::Graph loaded = frontend::load_onnx(model);
    for (const auto& set : sorted_files(dir, "test_data_set_")) {
      std::map<std::string, Tensor> inputs;
      const auto in_files = sorted_files(set, "input_");
      for (size_t i = 0; i < in_files.size(); ++i) {
        std::string name;
        Tensor t = frontend::load_tensor_pb(in_files[i].string(), &name);
        if (name.empty() && i < loaded.inputs.size()) name = loaded.inputs[i];
        inputs[name] = std::move(t);
      }
      graph::Graph g = specialise(loaded, inputs);
      passes::prepare(g);
      auto outs = reference::execute(g, inputs);
      const auto out_files = sorted_files(set, "output_");
      for (size_t i = 0; i < out_files.size() && i < g.outputs.size(); ++i) {
        std::string name;
        Tensor want = frontend::load_tensor_pb(out_files[i].string(), &name);
        if (name.empty()) name = g.outputs[i];
        auto it = outs.find(name);
        if (it == outs.end()) {
          row.status = Status::fail;
          row.reason = "no output named '" + name + "'";
          return row;
        }
        if (it->second.dtype() != want.dtype()) {
          row.status = Status::fail;
          row.reason = "output '" + name + "' dtype " + std::string(dtype_name(it->second.dtype())) + ", expected " +
                       std::string(dtype_name(want.dtype()));
          return row;
        }
        Comparison c = compare(it->second, want, rtol, atol);
        if (std::isfinite(c.max_abs_error)) row.max_abs = std::max(row.max_abs, c.max_abs_error);
        if (!c.pass) {
          row.status = Status::fail;
          row.max_abs = c.max_abs_error;
          row.reason = c.shapes_match ? "output '" + name + "': " + std::to_string(c.mismatches) + " mismatches"
                                      : "output '" + name + "': shape " + shape_str(it->second.shape()) + ", expected " +
                                            shape_str(want.shape());
          return row;
        }
      }
    }
  } catch (const InputError& e) {
    row.status = Status::error;
    row.reason = e.diagnostics().empty() ? e.what() : e.diagnostics().front().str();
  } catch (const std::exception& e) {
    row.status = Status::error;
    row.reason = std::string("internal: ") + e.what();
  }
  return row;
}

}  // namespace

int run_conformance(const ConformanceOptions& opt) {
  if (!fs::is_directory(opt.dir))
    throw InputError(opt.dir, "not a directory", "give a directory of ONNX backend tests, e.g. /usr/share/libonnx-testdata/data/node");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(opt.dir))
    if (fs::is_regular_file(e.path() / "model.onnx")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  const auto exclusions = read_reasons(opt.exclusions_file);
  const auto must_pass = read_reasons(opt.pass_list_file);
  auto& con = Console::get();
  Progress progress("conformance", static_cast<double>(dirs.size()));
  std::vector<Row> rows;
  for (size_t i = 0; i < dirs.size(); ++i) {
    rows.push_back(run_one(dirs[i], opt.rtol, opt.atol));
    progress.update(static_cast<double>(i + 1));
  }
  progress.finish();
  int passed = 0, failed = 0, errors = 0, unsupported = 0, excluded = 0;
  std::vector<std::string> problems;
  std::string pass_list;
  for (const auto& r : rows) {
    switch (r.status) {
      case Status::pass: ++passed; pass_list += r.name + "\n"; break;
      case Status::fail: ++failed; break;
      case Status::error: ++errors; break;
      case Status::unsupported_op: ++unsupported; break;
    }
    const bool bad = r.status == Status::fail || r.status == Status::error;
    if (bad && exclusions.count(r.name)) ++excluded;
    else if (bad) problems.push_back(r.name + ": " + status_name(r.status) + " " + r.reason);
    if (must_pass.count(r.name) && r.status != Status::pass)
      problems.push_back(r.name + ": on the pass list but " + status_name(r.status) + " " + r.reason);
  }
  if (opt.format == "table") {
    for (const auto& r : rows) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%-12s %10.3g  ", status_name(r.status), r.max_abs);
      std::string extra = r.reason;
      if ((r.status == Status::fail || r.status == Status::error) && exclusions.count(r.name))
        extra += " [excluded:" + exclusions.at(r.name) + "]";
      con.result(r.name + std::string(r.name.size() < 52 ? 52 - r.name.size() : 1, ' ') + buf + extra);
    }
  }
  if (!opt.write_pass_list.empty()) write_file_atomic(opt.write_pass_list, pass_list);
  con.result("\n" + opt.dir + ": " + std::to_string(rows.size()) + " tests: " + std::to_string(passed) + " passed, " +
             std::to_string(failed) + " failed, " + std::to_string(errors) + " errors (" + std::to_string(excluded) +
             " of those excluded with a reason), " + std::to_string(unsupported) + " use ops outside the supported set");
  for (const auto& p : problems) con.error(p);
  return problems.empty() ? 0 : 1;
}

}  // namespace tessera::sim
