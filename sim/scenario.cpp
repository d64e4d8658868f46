#include "sim/scenario.hpp"

#include <cstdio>
#include <filesystem>

#include "isa/fileio.hpp"

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Turn the byte offset into line:column.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string msg = e.what();
    const auto pos = msg.find("syntax error");
    if (pos != std::string::npos) msg = msg.substr(pos);
    throw InputError(path + ":" + std::to_string(line) + ":" + std::to_string(col), "invalid JSON: " + msg,
                     "fix the JSON syntax");
  } catch (const json::out_of_range& e) {  // a number beyond double's range, e.g. 1e400
    throw InputError(path, std::string("invalid JSON: ") + e.what(), "numbers must fit in a double");
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

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets) {
  json doc = parse_json_file(path);
  // A report.json carries its fully resolved scenario: run it again as it was.
  if (doc.is_object() && doc.contains("schema") && doc["schema"] == "tessera.report/1" && doc.contains("scenario")) {
    const json scenario = doc["scenario"];
    const json& file = doc.contains("scenario_file") ? doc["scenario_file"] : json();
    return load_scenario_json(scenario, file.is_string() ? file.get<std::string>() : path, sets);
  }
  return load_scenario_json(std::move(doc), path, sets);
}

}  // namespace tessera::sim
