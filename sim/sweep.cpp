#include "sim/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "sim/console.hpp"
#include "sim/jobs.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"
#include "sim/schema.hpp"

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxPoints = 10000;

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

}  // namespace

std::string sweep_status_text(const CompareResult& r) {
  switch (r.status) {
    case CompareStatus::pass: return "ok";
    case CompareStatus::check_failed: return "check failed" + (r.detail.empty() ? std::string() : ": " + r.detail);
    case CompareStatus::error: return "ERROR: " + r.detail;
  }
  return "";
}

std::string sweep_point_label(const std::vector<GridAxis>& axes, const std::vector<json>& values) {
  std::string s;
  for (size_t a = 0; a < axes.size(); ++a) s += (a ? ", " : "") + (axes[a].listed() ? grid_value_text(values[a]) : axes[a].key + "=" + grid_value_text(values[a]));
  return s;
}

namespace {

// A directory name for the point: its label, or (long labels) a prefix and a hash of it. The same
// grid values give the same directory, so a sweep run again reuses what is up to date.
std::string point_dir(const std::string& lab) {
  std::string s = safe_dir_name(lab);
  if (s.size() <= 120) return s;
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(string_hash(lab)));
  return s.substr(0, 100) + "-" + b;
}

}  // namespace

GridAxis parse_grid_arg(const std::string& arg, const std::string& where) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(where, "expected key.path=[v1,v2,...], got '" + arg + "'", "e.g. --grid target.params.hbm.bandwidth=[300GB/s,410GB/s]");
  GridAxis ax;
  ax.key = trim(arg.substr(0, eq));
  const std::string text = trim(arg.substr(eq + 1));
  const json j = json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_array()) {
    for (const auto& v : j) ax.values.push_back(v);
  } else if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    // Bare words: split at the commas outside quotes and brackets.
    std::string cur;
    int depth = 0;
    bool quoted = false;
    auto push = [&] {
      const std::string t = trim(cur);
      if (t.empty()) throw InputError(where, "an empty value in '" + text + "'", "give values separated by commas: [v1,v2,...]");
      const json v = json::parse(t, nullptr, false);
      ax.values.push_back(v.is_discarded() ? json(t) : v);
      cur.clear();
    };
    for (size_t i = 1; i + 1 < text.size(); ++i) {
      const char c = text[i];
      if (c == '"') quoted = !quoted;
      if (!quoted && (c == '[' || c == '{')) ++depth;
      if (!quoted && (c == ']' || c == '}')) --depth;
      if (c == ',' && depth == 0 && !quoted) push();
      else cur += c;
    }
    push();
  } else {
    throw InputError(where, "the values of " + ax.key + " are not a list: '" + text + "'", "write them in brackets: " + ax.key + "=[v1,v2,...]");
  }
  if (ax.values.empty()) throw InputError(where, "no values for " + ax.key, "give at least one value: " + ax.key + "=[v1,...]");
  for (size_t i = 0; i < ax.values.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (grid_value_text(ax.values[i]) == grid_value_text(ax.values[k]))
        throw InputError(where, ax.key + " lists " + grid_value_text(ax.values[i]) + " twice", "give each value once");
  return ax;
}

std::string grid_value_text(const json& v) {
  if (v.is_object()) {
    std::string t;
    for (const auto& [k, x] : v.items()) t += (t.empty() ? "" : ", ") + k + "=" + grid_value_text(x);
    return t;
  }
  return v.is_string() ? v.get<std::string>() : v.dump();
}

GridAxis parse_listed_points(const json& points, const std::string& where) {
  if (!points.is_array() || points.empty())
    throw InputError(where, "expected a non-empty list of points, each an object of key paths and values",
                     "e.g. [{\"run.steps\": 1, \"precision.compute\": \"bf16\"}, {\"run.steps\": 2, \"precision.compute\": \"fp32\"}]");
  GridAxis ax;
  ax.key = "points";
  for (size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    const std::string at = where + ": point " + std::to_string(i + 1);
    if (!p.is_object() || p.empty()) throw InputError(at, "a point is an object of key paths and values", "e.g. {\"run.steps\": 2}");
    std::vector<std::string> keys;
    for (const auto& [k, v] : p.items()) keys.push_back(k);
    if (i == 0) ax.keys = keys;
    std::vector<std::string> a = keys, b = ax.keys;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) throw InputError(at, "gives other keys than point 1", "give every point the same keys: " + [&] {
      std::string t;
      for (const auto& k : ax.keys) t += (t.empty() ? "" : ", ") + k;
      return t;
    }());
    json ordered = json::object();
    for (const auto& k : ax.keys) ordered[k] = p.at(k);
    for (const auto& q : ax.values)
      if (q == ordered) throw InputError(at, "repeats an earlier point", "give each point once");
    ax.values.push_back(ordered);
  }
  return ax;
}

std::string format_sweep_table(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points, bool markdown) {
  std::vector<std::string> head = {"point"};
  for (const auto& a : axes)
    if (a.listed()) head.insert(head.end(), a.keys.begin(), a.keys.end());
    else head.push_back(a.key);
  bool published = false;
  for (const auto& p : points) published = published || p.result.published_s.has_value();
  for (const char* h : {"predicted", "simulated", "error"}) head.push_back(h);
  if (published) head.insert(head.end(), {"published", "sim vs pub"});
  head.push_back("status");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    std::vector<std::string> r = {std::to_string(i + 1)};
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].listed())
        for (const auto& k : axes[a].keys) r.push_back(grid_value_text(p.values[a].at(k)));
      else
        r.push_back(grid_value_text(p.values[a]));
    r.push_back(format_seconds(p.result.predicted_s));
    r.push_back(format_seconds(p.result.simulated_s));
    r.push_back(format_pct(p.result.error_pct()));
    if (published) {
      r.push_back(format_seconds(p.result.published_s));
      r.push_back(format_pct(p.result.published_error_pct()));
    }
    r.push_back(sweep_status_text(p.result));
    rows.push_back(std::move(r));
  }
  std::ostringstream o;
  if (markdown) {
    auto line = [&](const std::vector<std::string>& c) {
      o << "|";
      for (const auto& x : c) o << " " << x << " |";
      o << "\n";
    };
    line(head);
    o << "|";
    for (size_t i = 0; i < head.size(); ++i) o << " --- |";
    o << "\n";
    for (const auto& r : rows) line(r);
    return o.str();
  }
  std::vector<size_t> w(head.size(), 0);
  for (size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c + 1 < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& c) {
    std::string s;
    for (size_t k = 0; k < c.size(); ++k) {
      std::string x = c[k];
      if (k + 1 < c.size()) x.resize(std::max(w[k], x.size()), ' ');
      s += (k ? "  " : "") + x;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    o << s << "\n";
  };
  line(head);
  for (const auto& r : rows) line(r);
  return o.str();
}

std::string format_sweep_csv(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points) {
  std::ostringstream o;
  o << "point";
  for (const auto& a : axes)
    if (a.listed())
      for (const auto& k : a.keys) o << "," << csv_field(k);
    else
      o << "," << csv_field(a.key);
  o << ",scenario,target,status,predicted_s,simulated_s,error_pct,published_s,published_error_pct,report\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto& r = p.result;
    o << i + 1;
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].listed())
        for (const auto& k : axes[a].keys) o << "," << csv_field(grid_value_text(p.values[a].at(k)));
      else
        o << "," << csv_field(grid_value_text(p.values[a]));
    const char* st = r.status == CompareStatus::pass ? "ok" : r.status == CompareStatus::check_failed ? "check_failed" : "error";
    o << "," << csv_field(r.name) << "," << csv_field(r.target) << "," << st << "," << csv_number(r.predicted_s) << "," << csv_number(r.simulated_s) << ","
      << csv_number(r.error_pct()) << "," << csv_number(r.published_s) << "," << csv_number(r.published_error_pct()) << "," << csv_field(r.report_file)
      << "\n";
  }
  return o.str();
}

json format_sweep_json(const std::string& scenario, const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points) {
  std::vector<CompareResult> rs;
  for (const auto& p : points) rs.push_back(p.result);
  const json cmp = format_json(rs, summarize(rs));
  json j;
  j["schema"] = kSweepSchema;
  j["scenario_file"] = scenario;
  j["grid"] = json::array();
  for (const auto& a : axes)
    if (a.listed()) j["grid"].push_back({{"points", a.values}});
    else j["grid"].push_back({{"key", a.key}, {"values", a.values}});
  j["points"] = json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    json p;
    p["point"] = i + 1;
    p["params"] = json::object();
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].listed())
        for (const auto& k : axes[a].keys) p["params"][k] = points[i].values[a].at(k);
      else
        p["params"][axes[a].key] = points[i].values[a];
    p["result"] = cmp["scenarios"][i];
    j["points"].push_back(p);
  }
  j["summary"] = cmp["summary"];
  return j;
}

int run_sweep(const SweepOptions& opt) {
  auto& con = Console::get();
  if (opt.scenario.empty()) throw InputError("command line", "sweep needs a scenario", "e.g. tessera sweep scenarios/quickstart.json --grid run.batch=[1,2]");
  if (opt.jobs < 1) throw InputError("--jobs", "must be at least 1");
  static const std::vector<std::string> formats = {"table", "csv", "json", "markdown"};
  if (std::find(formats.begin(), formats.end(), opt.format) == formats.end())
    throw InputError("--format", "'" + opt.format + "' is not a format of sweep", "use table, csv, json or markdown");
  install_interrupt_handlers();

  // 1. The grid: the scenario's sweep.grid, then --grid (a key given again replaces the file's).
  const Scenario base = load_scenario(opt.scenario, opt.sets);
  std::vector<GridAxis> axes;
  if (base.resolved.contains("sweep") && base.resolved["sweep"].contains("grid")) {
    // In the file's order (the resolved scenario's objects are sorted by key).
    std::ifstream f(opt.scenario, std::ios::binary);
    const auto raw = nlohmann::ordered_json::parse(f, nullptr, false);
    std::vector<std::string> keys;
    if (!raw.is_discarded() && raw.contains("sweep") && raw["sweep"].contains("grid") && raw["sweep"]["grid"].is_object())
      for (const auto& [k, v] : raw["sweep"]["grid"].items()) keys.push_back(k);
    for (const auto& [k, v] : base.resolved["sweep"]["grid"].items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (const auto& k : keys) {
      const std::string where = opt.scenario + ": /sweep/grid/" + schema::pointer_token(k);
      GridAxis a;
      a.key = k;
      for (const auto& x : base.resolved["sweep"]["grid"][k]) {
        for (const auto& y : a.values)
          if (grid_value_text(y) == grid_value_text(x)) throw InputError(where, "lists " + grid_value_text(x) + " twice", "give each value once");
        a.values.push_back(x);
      }
      if (a.values.empty()) throw InputError(where, "no values", "give at least one value");
      axes.push_back(std::move(a));
    }
  }
  // A listed set (the file's sweep.points, or --points instead): its own axis, before the grid's.
  {
    std::optional<GridAxis> listed;
    if (!opt.points.empty()) {
      const json pj = json::parse(opt.points, nullptr, false);
      if (pj.is_discarded()) throw InputError("--points", "not JSON: " + opt.points, "give a JSON list of objects, e.g. '[{\"run.steps\": 1}, {\"run.steps\": 2}]'");
      listed = parse_listed_points(pj, "--points");
    } else if (base.resolved.contains("sweep") && base.resolved["sweep"].contains("points")) {
      // (in the file's key order)
      std::ifstream f(opt.scenario, std::ios::binary);
      const auto raw = nlohmann::ordered_json::parse(f, nullptr, false);
      json pts = base.resolved["sweep"]["points"];
      if (!raw.is_discarded() && raw.contains("sweep") && raw["sweep"].contains("points") && raw["sweep"]["points"].is_array() &&
          !raw["sweep"]["points"].empty() && raw["sweep"]["points"][0].is_object()) {
        std::vector<std::string> order;
        for (const auto& [k, v] : raw["sweep"]["points"][0].items()) order.push_back(k);
        listed = parse_listed_points(pts, opt.scenario + ": /sweep/points");
        if (order.size() == listed->keys.size()) listed->keys = order;
      } else {
        listed = parse_listed_points(pts, opt.scenario + ": /sweep/points");
      }
    }
    if (listed) {
      for (const auto& a : axes)
        if (std::find(listed->keys.begin(), listed->keys.end(), a.key) != listed->keys.end())
          throw InputError("/sweep", a.key + " is both in the listed points and in the grid", "give it in one of them");
      axes.insert(axes.begin(), std::move(*listed));
    }
  }
  std::vector<std::string> given;
  for (const auto& g : opt.grid) {
    GridAxis a = parse_grid_arg(g, "--grid " + g);
    if (std::find(given.begin(), given.end(), a.key) != given.end())
      throw InputError("--grid " + g, a.key + " is given twice", "give each key once, with all its values: " + a.key + "=[v1,v2,...]");
    given.push_back(a.key);
    for (const auto& x : axes)
      if (x.listed() && std::find(x.keys.begin(), x.keys.end(), a.key) != x.keys.end())
        throw InputError("--grid " + g, a.key + " is also given by the listed points", "give it in one of them");
    auto it = std::find_if(axes.begin(), axes.end(), [&](const GridAxis& x) { return !x.listed() && x.key == a.key; });
    if (it != axes.end()) *it = std::move(a);
    else axes.push_back(std::move(a));
  }
  if (axes.empty())
    throw InputError("command line", "no grid to sweep", "give --grid key.path=[v1,v2,...] or --points '[{...}, ...]' (or a sweep section in the scenario)");
  size_t count = 1;
  for (const auto& a : axes) {
    count *= a.values.size();
    if (count > kMaxPoints)
      throw InputError("--grid", "the grid has more than " + std::to_string(kMaxPoints) + " points", "sweep fewer values, or split the sweep");
  }

  // 2. The points, each validated like --set before anything runs (every mistake at once).
  const fs::path out_root = opt.out_dir.empty() ? fs::path("out") / "sweep" / safe_dir_name(base.name) : fs::path(opt.out_dir);
  std::vector<std::string> base_sets = opt.sets;
  if (opt.no_numerics) base_sets.push_back("run.numerics=false");
  std::vector<std::vector<json>> values(count);
  std::vector<Job> jobs(count);
  // (A mistake every point makes -- a key path that does not exist -- is reported once.)
  struct Mistake {
    Diagnostic d;
    std::string first;
    size_t points = 0;
  };
  std::vector<Mistake> mistakes;
  for (size_t i = 0; i < count; ++i) {
    size_t rest = i;
    values[i].resize(axes.size());
    for (size_t a = axes.size(); a-- > 0;) {
      values[i][a] = axes[a].values[rest % axes[a].values.size()];
      rest /= axes[a].values.size();
    }
    std::vector<std::string> point_sets;
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].listed())
        for (const auto& k : axes[a].keys) point_sets.push_back(k + "=" + grid_value_text(values[i][a].at(k)));
      else
        point_sets.push_back(axes[a].key + "=" + grid_value_text(values[i][a]));
    std::vector<std::string> sets = base_sets;
    sets.insert(sets.end(), point_sets.begin(), point_sets.end());
    const std::string lab = sweep_point_label(axes, values[i]);
    Scenario s;
    try {
      s = load_scenario(opt.scenario, sets);
    } catch (const InputError& e) {
      std::vector<Diagnostic> ds = e.diagnostics();
      if (ds.empty()) ds.push_back({"", e.what(), ""});
      for (const auto& d : ds) {
        auto it = std::find_if(mistakes.begin(), mistakes.end(), [&](const Mistake& m) { return m.d.where == d.where && m.d.message == d.message; });
        if (it == mistakes.end()) mistakes.push_back({d, "point " + std::to_string(i + 1) + " (" + lab + ")", 1});
        else ++it->points;
      }
      continue;
    }
    std::vector<std::string> job_sets = opt.sets;  // (run.numerics comes from --no-numerics on the command line)
    job_sets.insert(job_sets.end(), point_sets.begin(), point_sets.end());
    jobs[i] = job_for(s, s.file.empty() ? abs_path(opt.scenario) : s.file, s.name + " [" + lab + "]", out_root.string(),
                      point_dir(lab), std::move(job_sets));
  }
  // Points whose directories coincide (values that differ only in characters a directory name
  // cannot hold) would overwrite each other's runs.
  for (size_t i = 0; i < count && mistakes.empty(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (!jobs[i].dir.empty() && jobs[i].dir == jobs[k].dir)
        throw InputError("--grid", "points " + std::to_string(k + 1) + " (" + sweep_point_label(axes, values[k]) + ") and " + std::to_string(i + 1) + " (" +
                                       sweep_point_label(axes, values[i]) + ") would share the output directory " + jobs[i].dir,
                         "give values that differ in letters, digits, '.', '-' or '_'");
  DiagnosticList diags;
  for (const auto& m : mistakes)
    diags.add((m.points == count && count > 1 ? "every point" : m.points > 1 ? m.first + " and " + std::to_string(m.points - 1) + " more" : m.first) +
                  (m.d.where.empty() ? "" : ": " + m.d.where),
              m.d.message, m.d.hint);
  diags.throw_if_any();

  // 3. Reuse what is up to date, run the rest (child processes; MPI ranks under mpirun).
  std::vector<SweepPoint> points(count);
  std::vector<Job> queue;
  std::vector<size_t> queued;
  for (size_t i = 0; i < count; ++i) {
    points[i].values = values[i];
    if (!opt.rerun) {
      std::string why_not;
      if (auto r = reusable_report(jobs[i], opt.exe, why_not)) {
        points[i].result = result_from_report(*r, (fs::path(jobs[i].dir) / "report.json").string());
        points[i].result.origin = "reused";
        points[i].result.name = jobs[i].name;
        con.detail("sweep: " + jobs[i].name + ": reusing " + points[i].result.report_file);
        continue;
      }
      if (!why_not.empty()) con.detail("sweep: " + jobs[i].name + ": running again: " + why_not);
    }
    queue.push_back(jobs[i]);
    queued.push_back(i);
  }
  size_t params = 0;
  for (const auto& a : axes) params += a.listed() ? a.keys.size() : 1;
  con.info("sweep: " + std::to_string(count) + " point" + (count == 1 ? "" : "s") + " over " + std::to_string(params) + " parameter" +
           (params == 1 ? "" : "s") + ": " + std::to_string(queue.size()) + " to run, " + std::to_string(count - queue.size()) +
           " reused (--jobs " + std::to_string(opt.jobs) + (distributed() ? ", " + std::to_string(ranks()) + " MPI ranks" : std::string()) + ")");
  std::vector<CompareResult> ran = run_jobs(queue, {opt.jobs, opt.no_numerics, opt.exe, "sweep"});
  if (rank() != 0) return 0;  // another MPI rank: rank 0 prints
  for (size_t k = 0; k < queued.size(); ++k) {
    points[queued[k]].result = std::move(ran[k]);
    points[queued[k]].result.name = jobs[queued[k]].name;
  }

  // 4. Output.
  std::vector<CompareResult> rs;
  for (const auto& p : points) rs.push_back(p.result);
  const CompareSummary sum = summarize(rs);
  if (opt.format == "table" || opt.format == "markdown") {
    std::cout << format_sweep_table(axes, points, opt.format == "markdown");
    std::cout << (opt.format == "markdown" ? "\n" : "") << summary_lines(sum);
  } else if (opt.format == "csv") {
    std::cout << format_sweep_csv(axes, points);
    std::istringstream lines(summary_lines(sum));
    for (std::string l; std::getline(lines, l);) con.info(l);
  } else {
    std::cout << format_sweep_json(base.file.empty() ? abs_path(opt.scenario) : base.file, axes, points).dump(2) << "\n";
  }
  std::cout.flush();
  if (!opt.plot_file.empty()) {
    write_file_atomic(opt.plot_file, plot_sweep_svg(axes, points));
    con.info("plot: " + opt.plot_file);
  }
  if (!opt.scatter_file.empty()) {
    size_t n = 0;
    write_file_atomic(opt.scatter_file, plot_svg(rs, &n));
    con.info("scatter: " + opt.scatter_file + " (" + std::to_string(n) + " kernel" + (n == 1 ? "" : "s") + ")");
  }
  return sum.check_failed || sum.errors ? 1 : 0;
}

}  // namespace tessera::sim
