// Multi-step runs (session.hpp): the step schedule, step closures and per-step inputs.
#include "sim/session.hpp"

#include "sim/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "isa/error.hpp"
#include "isa/npy.hpp"
#include "sim/console.hpp"
#include "sim/report.hpp"
#include "sim/schema.hpp"

namespace tessera::sim {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// The schedule.

StepSchedule StepSchedule::make(int64_t steps, int64_t checkpoint_steps, int64_t activation_steps) {
  StepSchedule s;
  s.steps = steps;
  s.checkpoint_steps = checkpoint_steps;
  int64_t a = std::min(activation_steps, steps);
  if (a != activation_steps)
    s.warnings.push_back("run.activation_steps " + std::to_string(activation_steps) + " is more than run.steps; using " + std::to_string(a));
  if (checkpoint_steps > 0) {
    // gcd with every checkpoint step + 1: k, 2k, ... up to num_steps (none when k > num_steps), and
    // the last step + 1 = num_steps.
    int64_t g = std::gcd(a, steps);
    for (int64_t c = checkpoint_steps; c <= steps; c += checkpoint_steps) g = std::gcd(g, c);
    if (g != a)
      s.warnings.push_back("run.activation_steps " + std::to_string(a) + " reduced to " + std::to_string(g) +
                           " so that every checkpoint step is an activation step (gcd with checkpoint steps + 1)");
    a = g;
  }
  s.activation_steps = std::max<int64_t>(1, a);
  return s;
}

StepSchedule StepSchedule::from(const json& run) {
  return make(run["steps"].get<int64_t>(), run.value("checkpoint_steps", int64_t{0}), run.value("activation_steps", int64_t{1}));
}

bool StepSchedule::is_checkpoint(int64_t step) const {
  if (checkpoint_steps <= 0) return false;
  return (step + 1) % checkpoint_steps == 0 || step == steps - 1;
}

bool StepSchedule::is_activation(int64_t step) const { return (step + 1) % activation_steps == 0 || step == steps - 1; }

// ---------------------------------------------------------------------------------------------
// Closures.

namespace {

const char* kReduces[] = {"max", "min", "mean", "sum", "absmax", "finite"};

// "[reduce(]tensor[)] op number" or "finite(tensor)"; returns an error or "".
std::string parse_condition(const std::string& text, StepClosure& c) {
  std::string t;
  for (char ch : text)
    if (!std::isspace(static_cast<unsigned char>(ch))) t += ch;
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '/' || ch == ':'; };
  size_t i = 0;
  std::string first;
  while (i < t.size() && ident(t[i])) first += t[i++];
  if (first.empty()) return "a condition starts with a tensor name or a reduction";
  if (i < t.size() && t[i] == '(') {
    if (std::find(std::begin(kReduces), std::end(kReduces), first) == std::end(kReduces))
      return "unknown reduction '" + first + "' (max, min, mean, sum, absmax, finite)";
    c.reduce = first;
    ++i;
    while (i < t.size() && t[i] != ')') c.tensor += t[i++];
    if (i == t.size() || c.tensor.empty()) return "missing tensor or ')' after '" + first + "('";
    ++i;
  } else {
    c.tensor = first;
  }
  if (c.reduce == "finite") return i == t.size() ? "" : "finite(TENSOR) takes no comparison";
  static const char* ops[] = {"<=", ">=", "==", "!=", "<", ">"};
  for (const char* op : ops)
    if (t.compare(i, std::strlen(op), op) == 0) {
      c.op = op;
      i += std::strlen(op);
      break;
    }
  if (c.op.empty()) return "expected a comparison (< <= > >= == !=) after the tensor";
  try {
    size_t used = 0;
    c.value = std::stod(t.substr(i), &used);
    if (i + used != t.size()) return "unexpected text after the number";
  } catch (...) {
    return "expected a number after '" + c.op + "'";
  }
  return "";
}

std::string fmt_num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string summary(const Tensor& t) {
  const auto v = t.cast(DType::f64).to_f64();
  std::ostringstream o;
  o.precision(6);
  if (v.size() == 1) {
    o << v[0];
    return o.str();
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (double x : v) mn = std::min(mn, x), mx = std::max(mx, x), sum += x;
  o << shape_str(t.shape()) << " mean " << (v.empty() ? 0.0 : sum / static_cast<double>(v.size())) << " min " << mn << " max " << mx;
  return o.str();
}

}  // namespace

std::vector<StepClosure> parse_closures(const json& closures, const std::vector<std::string>& outputs, const std::map<std::string, int64_t>* sizes) {
  DiagnosticList d;
  std::vector<StepClosure> out;
  std::vector<std::string> names = outputs;
  names.push_back("step");
  auto check_name = [&](const std::string& n, const std::string& where) {
    if (std::find(names.begin(), names.end(), n) != names.end()) return true;
    const std::string hint = did_you_mean(n, names);
    std::string all;
    for (const auto& x : names) all += (all.empty() ? "" : ", ") + x;
    d.add(where, "'" + n + "' is not a graph output (closures see the outputs and \"step\")", hint.empty() ? "available: " + all : "did you mean '" + hint + "'?");
    return false;
  };
  for (size_t i = 0; i < closures.size(); ++i) {
    const json& j = closures[i];
    StepClosure c;
    c.where = "/step_closures/" + std::to_string(i);
    c.kind = j["kind"].get<std::string>();
    c.on_checkpoint = j["on"].get<std::string>() == "checkpoint";
    if (c.kind == "assert") {
      if (!j.contains("condition")) {
        d.add(c.where, "an assert closure needs a \"condition\"", "e.g. \"max(y) < 2.0\" or \"finite(y)\"");
        continue;
      }
      c.condition = j["condition"].get<std::string>();
      const std::string err = parse_condition(c.condition, c);
      if (!err.empty()) {
        d.add(c.where + "/condition", "'" + c.condition + "': " + err, "e.g. \"max(y) < 2.0\", \"loss <= 0.5\" (a one-value tensor) or \"finite(y)\"");
        continue;
      }
      if (!check_name(c.tensor, c.where + "/condition")) continue;
      const int64_t n = c.tensor == "step" ? 1 : sizes && sizes->count(c.tensor) ? sizes->at(c.tensor) : 1;
      if (c.reduce.empty() && n != 1) {
        d.add(c.where + "/condition", "'" + c.tensor + "' has " + std::to_string(n) + " values; compare a one-value tensor or a reduction",
              "e.g. \"max(" + c.tensor + ") " + c.op + " " + fmt_num(c.value) + "\"");
        continue;
      }
    } else {
      c.tensors = j.value("tensors", std::vector<std::string>{});
      if (c.tensors.empty()) {
        d.add(c.where + "/tensors", "a " + c.kind + " closure needs the tensors it " + (c.kind == "log" ? "prints" : "writes"), "e.g. [\"y\"]");
        continue;
      }
      bool ok = true;
      for (size_t k = 0; k < c.tensors.size(); ++k) ok = check_name(c.tensors[k], c.where + "/tensors/" + std::to_string(k)) && ok;
      if (!ok) continue;
    }
    c.name = j.value("name", c.kind + " " + (c.kind == "assert" ? c.condition : [&] {
                               std::string s;
                               for (const auto& t : c.tensors) s += (s.empty() ? "" : ",") + t;
                               return s;
                             }()));
    out.push_back(std::move(c));
  }
  for (const auto& c : cpp_step_closures()) {  // the C++ API's, after the scenario's
    bool ok = true;
    for (const auto& n : c.tensors) ok = check_name(n, c.where) && ok;
    if (ok) out.push_back(c);
  }
  d.throw_if_any();
  return out;
}

json run_closures(const std::vector<StepClosure>& closures, const StepSchedule& sched, int64_t step, const std::map<std::string, Tensor>& values,
                  const std::string& out_dir) {
  auto& con = Console::get();
  json recs = json::array();
  const bool act = sched.is_activation(step), ckpt = sched.is_checkpoint(step);
  auto value_of = [&](const std::string& n) -> Tensor {
    if (n == "step") return Tensor::from_f32({}, {static_cast<float>(step)});
    return values.at(n);
  };
  for (const auto& c : closures) {
    if (c.on_checkpoint ? !ckpt : !act) continue;  // skipped on this step
    json r = {{"closure", c.name}, {"kind", c.kind}, {"on", c.on_checkpoint ? "checkpoint" : "activation"}};
    if (c.kind == "callback") {
      std::map<std::string, Tensor> view;
      for (const auto& n : c.tensors) view[n] = value_of(n);
      c.fn(step, view);
    } else if (c.kind == "log") {
      json vals = json::object();
      std::string line = "step " + std::to_string(step) + ":";
      for (const auto& n : c.tensors) {
        const Tensor t = value_of(n);
        const std::string s = summary(t);
        vals[n] = t.numel() == 1 ? json(t.cast(DType::f64).to_f64()[0]) : json(s);
        line += " " + n + " " + s;
      }
      r["values"] = vals;
      con.out(line);
    } else if (c.kind == "dump") {
      json files = json::array();
      for (const auto& n : c.tensors) {
        const std::string rel = "steps/" + std::to_string(step) + "/" + safe_file_name(n) + ".npy";
        std::filesystem::create_directories(std::filesystem::path(out_dir) / "steps" / std::to_string(step));
        write_npy((std::filesystem::path(out_dir) / rel).string(), value_of(n));
        files.push_back(rel);
      }
      r["files"] = files;
    } else {
      const auto v = value_of(c.tensor).cast(DType::f64).to_f64();
      bool pass = true;
      double x = 0;
      if (c.reduce == "finite") {
        for (double e : v) pass = pass && std::isfinite(e);
      } else {
        if (c.reduce.empty()) {
          if (v.size() != 1)
            throw InputError(c.where + "/condition", "'" + c.tensor + "' has " + std::to_string(v.size()) + " values; compare a one-value tensor or a reduction",
                             "e.g. max(" + c.tensor + ") < 2.0");
          x = v[0];
        } else if (c.reduce == "max" || c.reduce == "absmax") {
          x = -INFINITY;
          for (double e : v) x = std::max(x, c.reduce == "max" ? e : std::fabs(e));
        } else if (c.reduce == "min") {
          x = INFINITY;
          for (double e : v) x = std::min(x, e);
        } else {
          for (double e : v) x += e;
          if (c.reduce == "mean" && !v.empty()) x /= static_cast<double>(v.size());
        }
        pass = c.op == "<" ? x < c.value : c.op == "<=" ? x <= c.value : c.op == ">" ? x > c.value : c.op == ">=" ? x >= c.value : c.op == "==" ? x == c.value : x != c.value;
        r["value"] = x;
      }
      r["pass"] = pass;
      if (!pass)
        throw CheckFailed("step " + std::to_string(step) + ": assert closure '" + c.condition + "' failed" +
                          (c.reduce == "finite" ? std::string(" (a value is not finite)") : " (value " + std::to_string(x) + ")") + " [" + c.where + "]");
    }
    recs.push_back(r);
  }
  return recs;
}

void finish_step(json& report, json rec, const std::vector<StepClosure>& closures, const StepSchedule& sched, int64_t step,
                 const std::map<std::string, Tensor>& values, const std::string& out_dir, double t_end_s, std::vector<StepMark>& marks) {
  try {
    rec["closures"] = run_closures(closures, sched, step, values, out_dir);
  } catch (const CheckFailed&) {
    report["steps"].push_back(rec);
    throw;
  }
  for (const auto& c : rec["closures"]) {
    StepMark m{t_end_s, "closure " + c["closure"].get<std::string>(), {}};
    if (c.contains("values"))
      for (const auto& [k, v] : c["values"].items())
        m.args.push_back(v.is_number() ? traces::Arg{k, v.get<double>()} : traces::Arg{k, v.is_string() ? v.get<std::string>() : v.dump()});
    if (c.contains("value")) m.args.push_back({"value", c["value"].get<double>()});
    marks.push_back(std::move(m));
  }
  report["steps"].push_back(std::move(rec));
}

std::map<std::string, int64_t> output_sizes(const graph::Graph& g) {
  std::map<std::string, int64_t> m;
  for (const auto& o : g.outputs) m[o] = g.has_value(o) && g.value(o).shape_known ? shape_numel(g.value(o).shape) : 1;
  m["loss"] = 1;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Per-step inputs.

StepInputs::StepInputs(const Scenario& s, const graph::Graph& g, int64_t steps, const std::vector<std::string>* only) {
  DiagnosticList d;
  const json& inputs = s.resolved["inputs"];
  const std::vector<std::string>& names = only ? *only : g.inputs;
  for (const auto& name : names) {
    const graph::Value& v = g.value(name);
    const std::string where = "/inputs/" + schema::pointer_token(name);
    if (!inputs.contains(name)) {
      d.add("/inputs", "model input '" + name + "' " + std::string(dtype_name(v.dtype)) + shape_str(v.shape) + " has no value",
            "add /inputs/" + name + " with a \"file\" or \"random\"");
      continue;
    }
    const json& spec = inputs[name];
    In in;
    in.dtype = v.dtype;
    in.shape = v.shape;
    if (spec.contains("file")) {
      Shape per = v.shape;
      per.insert(per.begin(), steps);
      try {
        in.data = read_input_file(spec, where, name, v.dtype, {v.shape, per});
      } catch (const InputError& e) {
        for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
        continue;
      }
      in.per_step = in.data.shape() != v.shape;
    } else {
      const json& r = spec["random"];
      in.random = true;
      in.seed = r["seed"].get<uint64_t>();
      in.normal = r["dist"] == "normal";
      in.scale = r["scale"].get<double>();
    }
    in_[name] = std::move(in);
  }
  for (const auto& [name, spec] : inputs.items())
    if (std::find(names.begin(), names.end(), name) == names.end())
      d.add("/inputs/" + schema::pointer_token(name), "the model has no input '" + name + "'", "model inputs: " + [&] {
        std::string all;
        for (const auto& i : names) all += (all.empty() ? "" : ", ") + i;
        return all;
      }());
  d.throw_if_any();
}

std::map<std::string, Tensor> StepInputs::at(int64_t step) const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, in] : in_) {
    if (in.random) {
      // Step 0 draws exactly what a one-step run draws (seed), later steps seed + step.
      out[name] = random_tensor(in.dtype, in.shape, in.seed + static_cast<uint64_t>(step), in.normal, in.scale);
    } else if (in.per_step) {
      const size_t per = static_cast<size_t>(in.data.nbytes()) / static_cast<size_t>(in.data.shape()[0]);
      Tensor t(in.data.dtype(), in.shape);
      std::memcpy(t.data(), in.data.data() + static_cast<size_t>(step) * per, per);
      out[name] = std::move(t);
    } else {
      out[name] = in.data;
    }
  }
  return out;
}

namespace {
bool g_stop = false;
}
void request_stop() { g_stop = true; }
bool stop_requested() { return g_stop; }
void reset_stop_request() { g_stop = false; }
void warn_if_stop_ignored(int64_t steps) {
  if (g_stop)
    Console::get().warn("a step closure asked the run to stop: only training runs stop early; this run ran all " + std::to_string(steps) +
                        " steps (docs/python.md)");
}

std::vector<StepClosure>& cpp_step_closures() {
  static std::vector<StepClosure> v;
  return v;
}

Session::Session(const std::string& scenario, RunOptions opt, const std::vector<std::string>& sets) : s_(load_scenario(scenario, sets)), opt_(std::move(opt)) {
  if (opt_.out_dir.empty()) opt_.out_dir = (std::filesystem::path("out") / s_.name).string();
}

Session::Session(Scenario scenario, RunOptions opt) : s_(std::move(scenario)), opt_(std::move(opt)) {
  if (opt_.out_dir.empty()) opt_.out_dir = (std::filesystem::path("out") / s_.name).string();
}

void Session::add_step_closure(std::string name, std::vector<std::string> tensors, StepClosureFn fn, bool on_checkpoint) {
  StepClosure c;
  c.kind = "callback";
  c.name = std::move(name);
  c.tensors = std::move(tensors);
  c.fn = std::move(fn);
  c.on_checkpoint = on_checkpoint;
  c.where = "C++ step closure '" + c.name + "'";
  closures_.push_back(std::move(c));
}

int Session::run() {
  struct Scope {  // the registry holds this run's closures while it runs (a run inside a closure restores the outer's)
    std::vector<StepClosure> outer;
    explicit Scope(const std::vector<StepClosure>& c) : outer(std::move(cpp_step_closures())) { cpp_step_closures() = c; }
    ~Scope() { cpp_step_closures() = std::move(outer); }
  } scope(closures_);
  try {
    return run_scenario(s_, opt_);
  } catch (const CheckFailed& e) {
    Console::get().error(e.what());
    return 1;
  }
}

}  // namespace tessera::sim
