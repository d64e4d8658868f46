#include "sim/check.hpp"
#include "sim/report.hpp"
#include "sim/console.hpp"
#include "isa/npy.hpp"

#include <cstdio>

namespace tessera::sim {

namespace {
std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}
}  // namespace

Tolerance default_tolerance(const std::string& compute) {
  if (compute == "fp32") return {1e-4, 1e-5};
  if (compute == "fp8_e4m3" || compute == "fp8_e5m2") return {1.5e-1, 5e-2};
  return {2e-2, 1e-2};
}

OutputCheck check_output(const std::string& name, const Tensor& actual, const Tensor& expected, Tolerance tol,
                         const std::string& against, const nlohmann::json& expect, std::vector<std::string>& failures) {
  OutputCheck oc;
  oc.name = name;
  oc.checked = true;
  oc.against = against;
  oc.tol = tol;
  oc.cmp = compare(actual, expected, tol.rtol, tol.atol);
  if (!oc.cmp.shapes_match) {
    failures.push_back(name + ": shape " + shape_str(actual.shape()) + " differs from the " + against + "'s " +
                       shape_str(expected.shape()));
  } else if (!oc.cmp.pass) {
    failures.push_back(name + ": " + std::to_string(oc.cmp.mismatches) + " elements outside rtol " + fmt(tol.rtol) +
                       " atol " + fmt(tol.atol) + " against the " + against + " (max abs error " +
                       fmt(oc.cmp.max_abs_error) + ", max rel error " + fmt(oc.cmp.max_rel_error) + ")");
  } else if (expect.contains("max_rel_error") && oc.cmp.max_rel_error > expect["max_rel_error"].get<double>()) {
    oc.cmp.pass = false;
    failures.push_back(name + ": max relative error " + fmt(oc.cmp.max_rel_error) + " against the " + against +
                       " exceeds expect.max_rel_error " + fmt(expect["max_rel_error"].get<double>()));
  }
  return oc;
}

std::string check_machine_output(const std::string& name, const Tensor& out, const std::string& file, const Tensor* reference, Tolerance ref_tol,
                                 const nlohmann::json& expect, nlohmann::json& report, bool& all_pass, std::vector<std::string>& failures) {
  const auto& con = Console::get();
  std::vector<OutputCheck> checks;
  if (expect["outputs"].contains(name)) {
    const nlohmann::json& e = expect["outputs"][name];
    const Tolerance tol{e["rtol"].get<double>(), e["atol"].get<double>()};
    if (e.contains("file")) checks.push_back(check_output(name, out, read_npy(e["file"].get<std::string>()), tol, "file", expect, failures));
    ref_tol = tol;  // the scenario's tolerance for this output, against PyTorch's values or the reference executor's alike
  }
  if (reference) checks.push_back(check_output(name, out, *reference, ref_tol, "reference", expect, failures));
  std::string line;
  for (const auto& c : checks) {
    nlohmann::json r = output_record(name, file, &c.cmp, c.tol.rtol, c.tol.atol);
    r["against"] = c.against;
    report["outputs"].push_back(r);
    all_pass = all_pass && c.cmp.pass;
    line += "  vs " + c.against + ": max abs err " + format_num(c.cmp.max_abs_error, "%.3g") + " max rel err " + format_num(c.cmp.max_rel_error, "%.3g") + " " +
            (c.cmp.pass ? con.green("PASS") : con.red("FAIL"));
  }
  if (checks.empty()) {
    report["outputs"].push_back(output_record(name, file, nullptr, 0, 0));
    line += "  (no expected values)";
  }
  return line;
}

void check_latency_error(const nlohmann::json& expect, double err_pct, nlohmann::json& report, bool& all_pass,
                         std::vector<std::string>& failures) {
  if (!expect.contains("latency_error_pct")) return;
  const double lim = expect["latency_error_pct"].get<double>();
  const bool ok = std::abs(err_pct) <= lim;
  report["checks"].push_back({{"check", "latency_error_pct"}, {"pass", ok}, {"value", err_pct}, {"limit", lim}});
  if (ok) return;
  all_pass = false;
  char b[160];
  std::snprintf(b, sizeof b, "predicted vs simulated latency error %+.1f%% exceeds expect.latency_error_pct %.4g", err_pct, lim);
  failures.push_back(b);
}

}  // namespace tessera::sim
