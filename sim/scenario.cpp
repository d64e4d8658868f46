#include "sim/scenario.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "isa/fileio.hpp"

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// "line:column" of byte `byte` (1-based line and column) in `text`.
std::string line_col(const std::string& text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

}  // namespace

json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(path, "the file is empty", "a scenario is a JSON object; start from scenarios/quickstart.json");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    std::string msg = e.what();
    const auto pos = msg.find("syntax error");
    if (pos != std::string::npos) msg = msg.substr(pos);
    throw InputError(path + ":" + line_col(text, e.byte), "invalid JSON: " + msg, "fix the JSON syntax");
  } catch (const json::out_of_range& e) {
    // A number beyond a double (e.g. 1e400): nlohmann names the number, not where it is.
    const std::string msg = e.what();
    const auto q0 = msg.find('\''), q1 = msg.rfind('\'');
    const std::string number = q0 != std::string::npos && q1 > q0 ? msg.substr(q0 + 1, q1 - q0 - 1) : std::string();
    const size_t at = number.empty() ? std::string::npos : text.find(number);
    throw InputError(path + (at == std::string::npos ? std::string() : ":" + line_col(text, at + 1)),
                     "the number " + (number.empty() ? std::string("here") : number) + " is out of range (beyond a double, about 1.8e308)",
                     "write a finite number");
  }
}

namespace {

// "a.b.c=value": the value is JSON if it parses as JSON, otherwise a string ("410GB/s").
void apply_set(json& doc, const std::string& set, DiagnosticList& diags, std::vector<std::string>& pointers) {
  const auto eq = set.find('=');
  if (eq == std::string::npos || eq == 0) {
    diags.add("--set " + set, "expected key.path=value", "e.g. --set run.steps=4 or --set target.params.hbm.bandwidth=410GB/s");
    return;
  }
  const std::string dotted = set.substr(0, eq);
  const std::string text = set.substr(eq + 1);
  auto keys = schema::resolve_set_path(scenario_schema(), dotted, diags);
  if (!keys) return;
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  json* node = &doc;
  std::string pointer;
  for (size_t i = 0; i < keys->size(); ++i) {
    const auto& k = (*keys)[i];
    pointer += "/" + schema::pointer_token(k);
    if (node->is_null()) *node = json::object();
    if (!node->is_object()) {
      diags.add("--set " + dotted, "cannot set inside " + schema::describe(*node));
      return;
    }
    if (i + 1 == keys->size()) (*node)[k] = value;
    else node = &(*node)[k];
  }
  pointers.push_back(pointer);
}

std::string param_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_array()) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + param_text(v[i]);
    return s;
  }
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  return v.dump();
}

void resolve_target(Scenario& s, DiagnosticList& diags) {
  json& target = s.resolved["target"];
  // Validation has reported a kind, preset or params of the wrong type: nothing to resolve then.
  for (const char* key : {"kind", "preset"})
    if (target.contains(key) && !target[key].is_string()) return;
  if (target.contains("params") && !target["params"].is_object()) return;
  s.kind = target.value("kind", "");
  const json params = target.value("params", json::object());
  if (s.kind == "reference") {
    if (target.contains("preset"))
      diags.add("/target/preset", "the reference target has no presets", "remove /target/preset");
    for (const auto& [k, v] : params.items())
      diags.add("/target/params/" + schema::pointer_token(k), "the reference target has no hardware parameters",
                "remove it, or choose target.kind neuroncore or wafer");
    return;
  }
  const TargetDesc* t = find_target(s.kind);
  if (!t) return;  // the enumeration already reported it
  std::string preset = target.value("preset", t->presets.front().name);
  const Preset* p = t->find_preset(preset);
  if (!p) {
    std::vector<std::string> names;
    for (const auto& pr : t->presets) names.push_back(pr.name);
    std::string hint = did_you_mean(preset, names);
    if (const TargetDesc* other = target_of_preset(preset))
      hint = "'" + preset + "' is a " + other->kind + " preset; " + s.kind + " presets are: " + names[0] +
             (names.size() > 1 ? ", " + names[1] : "");
    else
      hint = hint.empty() ? "presets for " + s.kind + ": " + names[0] + (names.size() > 1 ? ", " + names[1] : "")
                          : "did you mean '" + hint + "'?";
    diags.add("/target/preset", "unknown " + s.kind + " preset '" + preset + "'", hint);
    return;
  }
  s.preset = preset;
  target["preset"] = preset;
  std::vector<ParamOverride> overrides;
  for (const auto& [k, v] : params.items())
    overrides.push_back({k, param_text(v), "/target/params/" + schema::pointer_token(k)});
  s.params = ParamSet::resolve(*t, *p, overrides, diags);
  // Record the parameters as resolved (SI base units) so the report reproduces the run.
  json resolved_params = json::object();
  for (const auto& r : s.params.all()) {
    if (r.origin != ParamOrigin::scenario) continue;
    if (r.decl->type == ParamType::int_list) resolved_params[r.decl->name] = r.value.list;
    else if (r.decl->type == ParamType::boolean) resolved_params[r.decl->name] = r.value.number != 0;
    else resolved_params[r.decl->name] = r.value.number;
  }
  target["params"] = resolved_params;
}

}  // namespace

bool trace_wanted(const Scenario& s) { return s.resolved.contains("trace") && s.resolved["trace"].value("detail", std::string()) != "none"; }
bool trace_records(const Scenario& s) { return trace_wanted(s) && s.resolved["trace"].value("detail", std::string()) != "summary"; }

Scenario load_scenario_json(json doc, const std::string& file, const std::vector<std::string>& sets) {
  Scenario s;
  s.file = file.empty() ? std::string() : fs::absolute(file).lexically_normal().string();
  s.dir = file.empty() ? fs::current_path().string() : fs::path(s.file).parent_path().string();
  DiagnosticList diags;
  std::vector<std::string> set_pointers;
  if (!doc.is_object()) {
    diags.add("<root>", "a scenario is a JSON object, got " + schema::describe(doc),
              std::string("start from scenarios/quickstart.json; the file needs \"schema\": \"") + kScenarioSchema + "\"");
    diags.throw_if_any();
  }
  for (const auto& set : sets) apply_set(doc, set, diags, set_pointers);
  // Wafer runs write a trace unless told not to (trace.detail "none"): at the summary detail,
  // which costs the fabric a few counters per task and wavelet (docs/wafer-model.md).
  if (!doc.contains("trace") && doc.contains("target") && doc["target"].is_object() && doc["target"].value("kind", json()) == "wafer")
    doc["trace"] = {{"detail", "summary"}};
  schema::Context ctx{s.dir};
  s.resolved = schema::validate(scenario_schema(), doc, "", ctx, diags);
  if (s.resolved.is_object() && !s.resolved.contains("name") && !file.empty())
    s.resolved["name"] = fs::path(file).stem().string();
  if (s.resolved.is_object() && s.resolved.contains("target") && s.resolved["target"].is_object())
    resolve_target(s, diags);
  // A name of the wrong type is already reported.
  const bool has_name = s.resolved.is_object() && s.resolved.contains("name") && s.resolved["name"].is_string();
  s.name = has_name ? s.resolved["name"].get<std::string>() : "scenario";
  if (!diags.empty()) {
    // Say which mistakes came from the command line.
    std::vector<Diagnostic> items = diags.items();
    for (auto& d : items)
      for (const auto& p : set_pointers)
        if (d.where == p || d.where.rfind(p + "/", 0) == 0) d.where += " (from --set)";
    throw InputError(items);
  }
  return s;
}

namespace {

// Scenarios in `dir` whose /model/layout names `file` (for the message about a layout given as a
// scenario).
std::vector<std::string> scenarios_naming(const fs::path& dir, const fs::path& file) {
  std::vector<std::string> r;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".json" || it->path() == file) continue;
    const json d = json::parse(read_file(it->path().string()), nullptr, false);
    if (!d.is_object() || !d.contains("model") || !d["model"].is_object()) continue;
    const json& m = d["model"];
    if (m.contains("layout") && m["layout"].is_string() && fs::path(m["layout"].get<std::string>()).filename() == file.filename())
      r.push_back(it->path().filename().string());
  }
  std::sort(r.begin(), r.end());
  return r;
}

// A path that is not a scenario file: a directory, or another tessera file.
void refuse_non_scenario(const std::string& path, const json* doc) {
  if (!doc) {
    std::vector<std::string> found;
    std::error_code ec;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") found.push_back(it->path().filename().string());
    std::sort(found.begin(), found.end());
    std::string hint = "give a scenario file";
    if (!found.empty()) {
      hint += ", e.g. " + (fs::path(path) / found.front()).string();
      if (found.size() > 1) hint += " (" + std::to_string(found.size()) + " .json files there)";
    }
    throw InputError(path, "is a directory, not a scenario file", hint + "; `tessera compare DIR` runs every scenario in a directory");
  }
  const std::string schema = doc->is_object() && doc->contains("schema") && (*doc)["schema"].is_string() ? (*doc)["schema"].get<std::string>() : "";
  if (schema == "tessera.wafer-layout/1") {
    const auto users = scenarios_naming(fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path(), fs::path(path));
    throw InputError(path, "this is a wafer layout file (tessera.wafer-layout/1), not a scenario",
                     users.empty() ? std::string("run a scenario that names it in /model/layout (docs/wafer-asm.md)")
                                   : "run the scenario that names it: " + (fs::path(path).parent_path() / users.front()).string());
  }
  if (schema == "tessera.checkpoint/1")
    throw InputError(path, "this is a training checkpoint manifest, not a scenario", "continue the run with tessera run SCENARIO --resume " +
                                                                                          fs::path(path).parent_path().string());
  if (schema.rfind("tessera.compare/", 0) == 0)
    throw InputError(path, "this is the output of tessera compare, not a scenario", "give a scenario file");
}

}  // namespace

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) refuse_non_scenario(path, nullptr);
  json doc = parse_json_file(path);
  refuse_non_scenario(path, &doc);
  // A report.json carries its fully resolved scenario: run it again as it was.
  if (doc.is_object() && doc.contains("schema") && doc["schema"] == "tessera.report/1" && doc.contains("scenario")) {
    const json scenario = doc["scenario"];
    const json& file = doc.contains("scenario_file") ? doc["scenario_file"] : json();
    return load_scenario_json(scenario, file.is_string() ? file.get<std::string>() : path, sets);
  }
  return load_scenario_json(std::move(doc), path, sets);
}

}  // namespace tessera::sim
