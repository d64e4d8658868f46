#pragma once
// report.json (schema tessera.report/1, docs/report.md) and the human summary.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/compare.hpp"
#include "sim/scenario.hpp"

namespace tessera::sim {

inline constexpr const char* kReportSchema = "tessera.report/1";

// The skeleton every run fills: schema, resolved scenario, target, empty latency/kernels/outputs.
nlohmann::json new_report(const Scenario& s);

// One output's check record.
nlohmann::json output_record(const std::string& name, const std::string& file, const Comparison* c, double rtol,
                             double atol);

// A host measurement of this run for host.json (e.g. "reference_cache": "hit"), beside the
// host_extra of write_report.
void host_note(const std::string& key, nlohmann::json value);
// The resolved scenario as report.json records it: without the host's settings (run.threads), so
// a report is the same however it was run.
nlohmann::json report_scenario(nlohmann::json resolved);

// Writes report.json atomically. Host measurements (wall time, peak RSS) go to host.json so that
// report.json is byte-identical for the same scenario and seed.
void write_report(const std::string& out_dir, const nlohmann::json& report, double wall_s,
                  const nlohmann::json& host_extra = nlohmann::json::object());

// report["latency"]: when the scenario gives a published latency, the simulated one's difference
// from it (simulated_vs_published_pct), also printed.
void compare_published(nlohmann::json& report, double simulated_s);

// The end of a machine run: the failed checks into report["checks"], report["pass"], report.json
// (and host.json: the run's wall time `wall_s`, `host_extra`) written and named on the console, the
// failures printed; returns the exit code (0, or 1 when a check failed).
int finish_run(const std::string& out_dir, nlohmann::json& report, bool all_pass, const std::vector<std::string>& failures, double wall_s,
               const nlohmann::json& host_extra = nlohmann::json::object());

// A tensor name as a file name: characters other than letters, digits, '-', '_' and '.' become '_'
// (ONNX names such as "/self_attn/Add_output_0" must not create directories).
std::string safe_file_name(const std::string& name);

// Peak resident set size of this process, in bytes (from /proc/self/status).
long long peak_rss_bytes();

}  // namespace tessera::sim
