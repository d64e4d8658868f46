#include "sim/report.hpp"

#include "isa/interrupt.hpp"
#include "sim/console.hpp"
#include "sim/outdir.hpp"
#include "sim/version.hpp"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "isa/fileio.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {
// JSON has no inf/NaN: write them as strings.
json number_or_string(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
}  // namespace

json report_scenario(json resolved) {
  // How many host threads ran it is the host's business (host.json): the report is the same.
  if (resolved.contains("run") && resolved["run"].is_object()) resolved["run"].erase("threads");
  return resolved;
}

json new_report(const Scenario& s) {
  json r;
  r["schema"] = kReportSchema;
  r["tessera"] = {{"version", version_string()}, {"commit", version_commit()}};
  r["scenario_file"] = s.file;
  r["scenario"] = report_scenario(s.resolved);
  json target = {{"kind", s.kind}};
  if (!s.preset.empty()) target["preset"] = s.preset;
  r["target"] = target;
  const json& ref = s.resolved["expect"].value("reference_latency", json());
  r["latency"] = {{"predicted_s", nullptr},
                  {"simulated_s", nullptr},
                  {"error_pct", nullptr},
                  {"published_s", ref.is_null() ? json() : ref["value"]},
                  {"published_source", ref.is_null() ? json() : ref["source"]}};
  if (!ref.is_null() && ref.value("upper_bound", false)) r["latency"]["published_is_upper_bound"] = true;
  r["kernels"] = json::array();
  r["outputs"] = json::array();
  r["steps"] = json::array();
  r["stats"] = json::object();
  r["checks"] = json::array();
  r["host"] = {{"file", "host.json"}};
  return r;
}

json output_record(const std::string& name, const std::string& file, const Comparison* c, double rtol, double atol) {
  json o = {{"name", name}, {"file", file}};
  if (!c) {
    o["checked"] = false;
    return o;
  }
  o["checked"] = true;
  o["shapes_match"] = c->shapes_match;
  o["max_abs_error"] = number_or_string(c->max_abs_error);
  o["max_rel_error"] = number_or_string(c->max_rel_error);
  o["max_ulp"] = c->max_ulp == UINT64_MAX ? json("inf") : json(c->max_ulp);
  o["mismatches"] = c->mismatches;
  o["worst_index"] = c->worst_index;
  o["tolerance"] = {{"rtol", rtol}, {"atol", atol}};
  o["pass"] = c->pass;
  return o;
}

std::string safe_file_name(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return s.empty() ? "output" : s;
}

long long peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

namespace {
json& host_notes() {
  static json notes = json::object();
  return notes;
}
}  // namespace

void host_note(const std::string& key, json value) { host_notes()[key] = std::move(value); }

void write_report(const std::string& out_dir, const json& report, double wall_s, const json& host_extra) {
  const std::string dir = out_dir.empty() ? "." : out_dir;
  json host = {{"wall_s", wall_s}, {"peak_rss_bytes", peak_rss_bytes()}};
  host.update(host_extra);
  host.update(host_notes());
  // Wall seconds per phase (load, compile, reference, elaborate, simulate, check: the check phase
  // includes writing the outputs and the trace, up to this file).
  json phases = json::object();
  for (const auto& [name, s] : phase_times()) phases[name] = s;
  host["phases"] = phases;
  write_file_atomic(dir + "/host.json", host.dump(2) + "\n");
  write_file_atomic(dir + "/report.json", report.dump(2) + "\n");
}

void compare_published(nlohmann::json& report, double simulated_s) {
  const nlohmann::json& pub = report["latency"]["published_s"];
  if (pub.is_null()) return;
  const double pv = pub.get<double>();
  const double pct = (simulated_s - pv) / pv * 100.0;
  report["latency"]["simulated_vs_published_pct"] = pct;
  const std::string src = report["latency"]["published_source"].get<std::string>();
  if (report["latency"].value("published_is_upper_bound", false)) {
    Console::get().out("published upper bound " + format_num(pv * 1e6, "%.4f") + " us (" + src + "): simulated is " +
                       (simulated_s <= pv ? "within it (" : "above it (") + format_num(pct, "%+.1f") + "%)");
    return;
  }
  Console::get().out("published " + format_num(pv * 1e6, "%.4f") + " us (" + src + "): simulated is " + format_num(pct, "%+.1f") + "%");
}

int finish_run(const std::string& out_dir, nlohmann::json& report, bool all_pass, const std::vector<std::string>& failures, double wall_s,
               const nlohmann::json& host_extra) {
  auto& con = Console::get();
  for (const auto& f : failures) report["checks"].push_back({{"check", "outputs"}, {"pass", false}, {"detail", f}});
  report["pass"] = all_pass;
  write_report(out_dir, report, wall_s, host_extra);
  con.out("report: " + shown_path((std::filesystem::path(out_dir) / "report.json").string()));
  if (all_pass) return 0;
  for (const auto& f : failures) con.error("check failed: " + f);
  return 1;
}

}  // namespace tessera::sim
