#pragma once
// `tessera sweep SCENARIO --grid key.path=[v1,v2,...]...`: a parameter sweep over one scenario. The
// points are the cartesian product of the grid's values (the scenario's `sweep.grid`, then --grid
// options, which replace a key the file gives); each point is the scenario with those --set
// overrides, validated before anything runs, and runs as `tessera run` in a child process (--jobs
// at once; spread over the ranks under mpirun). Results: the compare table with the point's
// values as columns (table, csv, json, markdown), a plot of simulated latency over the grid
// (--plot: a line for one parameter, heatmaps for two or more) and predicted against simulated
// per point (--scatter). docs/sweep.md.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/compare.hpp"

namespace tessera::sim {

inline constexpr const char* kSweepSchema = "tessera.sweep/1";

struct SweepOptions {
  std::string scenario;
  std::vector<std::string> grid;  // "key.path=[v1,v2,...]" as given
  std::string points;             // --points: a JSON array of {key path: value} objects (a listed set)
  std::string out_dir;            // default out/sweep/<scenario name>
  int jobs = 1;
  std::string format = "table";   // table | csv | json | markdown
  std::string plot_file;          // simulated latency over the grid (SVG)
  std::string scatter_file;       // predicted vs simulated per point (SVG)
  bool rerun = false;
  bool no_numerics = false;
  std::vector<std::string> sets;  // --set, applied to every point before the grid's values
  std::string exe = "/proc/self/exe";
};

// One axis of the grid: a --set key path and its values, or (listed) a set of points each giving
// several keys at once (values are objects key path -> value; `keys` their keys, in order).
struct GridAxis {
  std::string key;                    // a --set key path ("points" for a listed set)
  std::vector<nlohmann::json> values;
  std::vector<std::string> keys;      // a listed set's keys; empty for a plain axis
  bool listed() const { return !keys.empty(); }
};

// A listed set from JSON (an array of objects, each giving the same keys). Throws InputError
// naming `where`.
GridAxis parse_listed_points(const nlohmann::json& points, const std::string& where);

// "key.path=[v1,v2,...]": JSON values, or bare words taken as strings ([300GB/s,410GB/s]).
// Throws InputError naming `where`.
GridAxis parse_grid_arg(const std::string& arg, const std::string& where);

// The --set text of a value (a string as it is, anything else as JSON; a listed point's object as
// "key=value, key=value").
std::string grid_value_text(const nlohmann::json& v);

// One point's results with its values (one per axis).
struct SweepPoint {
  std::vector<nlohmann::json> values;
  CompareResult result;
};

// "key=value, key=value" for a point (a listed point's fields as they are), and its status as the
// table shows it ("ok", "check failed: ...", "ERROR: ...").
std::string sweep_point_label(const std::vector<GridAxis>& axes, const std::vector<nlohmann::json>& values);
std::string sweep_status_text(const CompareResult& r);

std::string format_sweep_table(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points, bool markdown);
std::string format_sweep_csv(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points);
nlohmann::json format_sweep_json(const std::string& scenario, const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points);
// Simulated (and predicted) latency over the grid: one axis a line chart, more a heatmap per value
// combination of the axes after the first two.
std::string plot_sweep_svg(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points);

// The verb: exit 0 when every point ran and passed its checks, 1 otherwise; InputError for bad
// arguments or a point that does not validate (nothing runs then).
int run_sweep(const SweepOptions& opt);

}  // namespace tessera::sim
