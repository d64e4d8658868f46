#pragma once
// Checking machine outputs against expected values (files or the reference executor).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/compare.hpp"
#include "isa/tensor.hpp"

namespace tessera::sim {

struct Tolerance {
  double rtol, atol;
};
// Default tolerance for outputs computed in `compute` precision (scenario /precision/compute)
// against an fp32 reference: fp32 1e-4/1e-5; bf16, fp16, cbf16 2e-2/1e-2 (8-11 mantissa bits plus
// fp32 accumulation); fp8 1.5e-1/5e-2.
Tolerance default_tolerance(const std::string& compute);

struct OutputCheck {
  std::string name;
  std::string file;          // saved .npy, relative to the output directory ("" if not saved)
  bool checked = false;
  std::string against;       // "file" or "reference"
  Comparison cmp;
  Tolerance tol{0, 0};
};

// Compares `actual` with `expected`, applying expect.max_rel_error when given; appends a failure
// description to `failures` when the check fails.
OutputCheck check_output(const std::string& name, const Tensor& actual, const Tensor& expected, Tolerance tol,
                         const std::string& against, const nlohmann::json& expect, std::vector<std::string>& failures);

// One machine output checked against its expected file (expect.outputs.NAME.file, at that entry's
// tolerance) and against `reference` when given (at the entry's tolerance when there is an entry --
// the scenario's tolerance for the output, whoever computed the expected values -- else `ref_tol`,
// the precision's default): a record per check in report["outputs"] (with `file`, the saved .npy),
// failures into `failures` and all_pass; returns the console text of the checks ("  vs file: max abs
// err ... PASS", or "  (no expected values)").
std::string check_machine_output(const std::string& name, const Tensor& out, const std::string& file, const Tensor* reference, Tolerance ref_tol,
                                 const nlohmann::json& expect, nlohmann::json& report, bool& all_pass, std::vector<std::string>& failures);

// expect.latency_error_pct (when the scenario gives it) against the predicted-vs-simulated error
// `err_pct`: a check record in report["checks"]; on failure all_pass turns false and a line joins
// `failures`.
void check_latency_error(const nlohmann::json& expect, double err_pct, nlohmann::json& report, bool& all_pass,
                         std::vector<std::string>& failures);

}  // namespace tessera::sim
