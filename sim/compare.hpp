#pragma once
// `tessera compare SCENARIO|REPORT|DIR...`: runs the scenarios that have no up-to-date report (in
// child processes, one simulation per process), then tabulates per scenario and kernel the
// compiler's predicted latency, the simulated latency and the published reference, with the
// errors and their summary (mean absolute percentage error, worst case), and can plot predicted
// against simulated as an SVG scatter.
//
// Errors (docs/report.md): error_pct = (predicted - simulated) / simulated x 100 per kernel and per
// scenario total; published_error_pct = (simulated - published) / published x 100 per scenario.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::sim {

inline constexpr const char* kCompareSchema = "tessera.compare/1";

struct CompareOptions {
  std::vector<std::string> inputs;  // scenario files, report.json files, directories (recursive)
  std::string out_dir;              // runs go to OUT/<scenario name>/ (default out/compare)
  int jobs = 1;                     // child processes at once
  std::string format = "table";     // table | csv | json | markdown
  std::string plot_file;            // predicted-vs-simulated scatter (SVG); empty: none
  bool rerun = false;               // run even when an up-to-date report exists
  bool no_numerics = false;         // pass --no-numerics to the runs
  std::vector<std::string> sets;    // --set key.path=value, passed to every run
  std::string exe = "/proc/self/exe";  // the tessera binary the runs use
};

struct CompareKernel {
  std::string name, op;
  std::optional<double> predicted_s, simulated_s;
  std::optional<double> error_pct() const;  // (predicted - simulated) / simulated x 100
};

enum class CompareStatus { pass, check_failed, error };

// One scenario: from its report, or an error row when it could not run.
struct CompareResult {
  std::string name;           // scenario name
  std::string scenario_file;  // absolute path
  std::string report_file;    // empty for error rows
  std::string target;         // "neuroncore/trn1", "reference"
  std::string origin;         // "ran", "reused" (an up-to-date report), "report" (given as input), "" (error)
  CompareStatus status = CompareStatus::pass;
  std::string detail;         // why a check failed, or why it could not run
  std::vector<CompareKernel> kernels;
  std::optional<double> predicted_s, simulated_s, published_s;  // scenario totals
  std::string published_source;
  bool published_bound = false;  // the published figure is an upper bound (expect.reference_latency.upper_bound)

  std::optional<double> error_pct() const;            // predicted vs simulated total
  std::optional<double> published_error_pct() const;  // simulated vs published
};

// Reads a tessera.report/1 document. Null, missing and non-finite figures become std::nullopt.
CompareResult result_from_report(const nlohmann::json& report, const std::string& report_file);

// Mean absolute percentage error and the worst (largest magnitude, signed) case over the pairs
// that have both values; count 0 when there is none.
struct ErrorStat {
  size_t count = 0;
  double mape_pct = 0;
  double worst_pct = 0;
  std::string worst_scenario, worst_kernel;
};

struct CompareSummary {
  size_t scenarios = 0, kernels = 0, passed = 0, check_failed = 0, errors = 0;
  ErrorStat predicted_vs_simulated;         // per kernel
  ErrorStat predicted_vs_simulated_totals;  // per scenario total
  ErrorStat simulated_vs_published;  // per scenario total (published measurements only)
  size_t bounds = 0, within_bounds = 0;  // published upper bounds, and how many the simulation is within
  std::string worst_bound;               // the scenario furthest above its bound
  double worst_bound_pct = 0;
};

// Sorts by scenario name (then file) in place; kernels keep their report order.
void sort_results(std::vector<CompareResult>& results);
CompareSummary summarize(const std::vector<CompareResult>& results);

// The outputs. `color` adds ANSI colours to the table (only when stdout is a terminal).
std::string format_table(const std::vector<CompareResult>& results, const CompareSummary& s, bool color = false);
std::string format_markdown(const std::vector<CompareResult>& results, const CompareSummary& s);
// One row per kernel plus one "total" row per scenario (error rows: the total row only).
std::string format_csv(const std::vector<CompareResult>& results);
nlohmann::json format_json(const std::vector<CompareResult>& results, const CompareSummary& s);
// The summary as text lines (the table's footer; on stderr for csv).
std::string summary_lines(const CompareSummary& s);

// Log-log scatter of predicted (y) against simulated (x), one <circle> per kernel with both
// values, the y = x line and dashed +-10% lines. `points` receives the number of circles.
std::string plot_svg(const std::vector<CompareResult>& results, size_t* points = nullptr);

// Text helpers the compare and sweep outputs share: printf of one number, a csv field (quoted
// when it holds a comma, quote or line break), a csv number ("" for none, else %.9g), XML escaping.
std::string printf_str(const char* format, double v);
std::string csv_field(const std::string& s);
std::string csv_number(std::optional<double> v);
std::string xml_escape(const std::string& s);

// Human forms: "11.71 us", "+1.2%", "-".
std::string format_seconds(std::optional<double> s);
std::string format_pct(std::optional<double> pct);

// The verb: returns the exit code (0 every scenario ran and passed its checks, 1 a check failed or
// a scenario could not run); throws InputError for bad arguments, Interrupted after SIGINT.
int run_compare(const CompareOptions& opt);

}  // namespace tessera::sim
