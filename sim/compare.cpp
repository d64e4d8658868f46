#include "sim/compare.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "sim/console.hpp"
#include "sim/jobs.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"

extern char** environ;

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  const json& v = j[key];
  if (!v.is_number()) return std::nullopt;  // null, or "inf"/"nan" written as strings
  const double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// A string member, or "" (reports given by hand may have anything).
std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::optional<double> rel_error_pct(std::optional<double> value, std::optional<double> base) {
  if (!value || !base || !(*base > 0)) return std::nullopt;
  return (*value - *base) / *base * 100.0;
}

void add_error(ErrorStat& st, double& sum, double err, const std::string& scenario, const std::string& kernel) {
  sum += std::fabs(err);
  if (st.count == 0 || std::fabs(err) > std::fabs(st.worst_pct)) {
    st.worst_pct = err;
    st.worst_scenario = scenario;
    st.worst_kernel = kernel;
  }
  ++st.count;
}

const char* status_word(CompareStatus s) {
  switch (s) {
    case CompareStatus::pass: return "ok";
    case CompareStatus::check_failed: return "FAIL";
    case CompareStatus::error: return "ERROR";
  }
  return "";
}

const char* status_key(CompareStatus s) {
  switch (s) {
    case CompareStatus::pass: return "pass";
    case CompareStatus::check_failed: return "check_failed";
    case CompareStatus::error: return "error";
  }
  return "";
}

json opt_json(std::optional<double> v) { return v ? json(*v) : json(); }

// ---- rows shared by the table and the Markdown output ---------------------------------------

struct Row {
  std::string scenario, kernel, predicted, simulated, error, published, pub_error, status;
  CompareStatus st = CompareStatus::pass;
  bool error_outside_band = false;
};

// A scenario shows its kernels; its totals (and the published reference) go on a "(total)" row,
// merged into the kernel row when the scenario is one kernel whose figures are the totals.
std::vector<Row> human_rows(const std::vector<CompareResult>& results) {
  std::vector<Row> rows;
  for (const auto& r : results) {
    const std::string status = r.status == CompareStatus::error
                                   ? std::string("ERROR: ") + r.detail
                                   : std::string(status_word(r.status)) + (r.detail.empty() ? "" : ": " + r.detail);
    auto total_row = [&](const std::string& kernel) {
      Row t{r.name, kernel, format_seconds(r.predicted_s), format_seconds(r.simulated_s), format_pct(r.error_pct()),
            (r.published_bound ? "<= " : "") + format_seconds(r.published_s), format_pct(r.published_error_pct()), status, r.status, false};
      const auto e = r.error_pct();
      t.error_outside_band = e && std::fabs(*e) > 10.0;
      return t;
    };
    const bool merge = r.kernels.size() == 1 && r.kernels[0].predicted_s == r.predicted_s &&
                       r.kernels[0].simulated_s == r.simulated_s;
    if (r.kernels.empty()) {
      rows.push_back(total_row("-"));
      continue;
    }
    if (merge) {
      rows.push_back(total_row(r.kernels[0].name));
      continue;
    }
    for (const auto& k : r.kernels) {
      Row kr{r.name, k.name, format_seconds(k.predicted_s), format_seconds(k.simulated_s), format_pct(k.error_pct()),
             "", "", "", r.status, false};
      const auto e = k.error_pct();
      kr.error_outside_band = e && std::fabs(*e) > 10.0;
      rows.push_back(kr);
    }
    rows.push_back(total_row("(total)"));
  }
  return rows;
}

const std::vector<std::string> kHeader = {"scenario", "kernel", "predicted", "simulated", "error",
                                          "published", "sim vs pub", "status"};
const std::vector<bool> kRightAlign = {false, false, true, true, true, true, true, false};

std::vector<std::string> cells(const Row& r) {
  return {r.scenario, r.kernel, r.predicted, r.simulated, r.error, r.published, r.pub_error, r.status};
}

// "NAME: MAPE 4.20% over 3 of 8 kernels, worst +9.1% (scenario, kernel k)"
std::string stat_line(const char* what, const ErrorStat& st, size_t of, const char* unit, bool kernel_names) {
  const std::string units = std::string(unit) + (of == 1 ? "" : "s");
  if (st.count == 0) return std::string(what) + ": none of " + std::to_string(of) + " " + units + " has both";
  const std::string worst =
      st.worst_scenario + (kernel_names && !st.worst_kernel.empty() ? ", kernel " + st.worst_kernel : "");
  return std::string(what) + ": MAPE " + printf_str("%.2f%%", st.mape_pct) + " over " + std::to_string(st.count) +
         " of " + std::to_string(of) + " " + units + ", worst " + format_pct(st.worst_pct) + " (" + worst + ")";
}

}  // namespace

// ---- results ----------------------------------------------------------------------------------

std::string printf_str(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_number(std::optional<double> v) { return v ? printf_str("%.9g", *v) : ""; }

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::optional<double> CompareKernel::error_pct() const { return rel_error_pct(predicted_s, simulated_s); }
std::optional<double> CompareResult::error_pct() const { return rel_error_pct(predicted_s, simulated_s); }
std::optional<double> CompareResult::published_error_pct() const { return rel_error_pct(simulated_s, published_s); }

CompareResult result_from_report(const json& report, const std::string& report_file) {
  CompareResult r;
  r.report_file = report_file;
  const json none = json::object();
  auto member = [&](const json& j, const char* key) -> const json& {
    return j.is_object() && j.contains(key) ? j[key] : none;
  };
  r.name = str(member(report, "scenario"), "name");
  r.scenario_file = str(report, "scenario_file");
  if (r.name.empty()) r.name = fs::path(r.scenario_file.empty() ? report_file : r.scenario_file).stem().string();
  const json& target = member(report, "target");
  r.target = str(target, "kind");
  if (!str(target, "preset").empty()) r.target += "/" + str(target, "preset");
  const json& lat = member(report, "latency");
  r.predicted_s = number(lat, "predicted_s");
  r.simulated_s = number(lat, "simulated_s");
  r.published_s = number(lat, "published_s");
  r.published_source = str(lat, "published_source");
  r.published_bound = lat.is_object() && lat.value("published_is_upper_bound", false);
  const json& kernels = member(report, "kernels");
  for (const auto& k : kernels.is_array() ? kernels : json::array()) {
    CompareKernel ck;
    ck.name = str(k, "name");
    if (ck.name.empty()) ck.name = "?";
    ck.op = str(k, "op");
    ck.predicted_s = number(k, "predicted_s");
    ck.simulated_s = number(k, "simulated_s");
    r.kernels.push_back(ck);
  }
  const json& pass = member(report, "pass");
  if (pass.is_boolean() && !pass.get<bool>()) {
    r.status = CompareStatus::check_failed;
    const json& checks = member(report, "checks");
    for (const auto& c : checks.is_array() ? checks : json::array())
      if (!str(c, "detail").empty()) {
        r.detail = str(c, "detail");
        break;
      }
  }
  return r;
}

void sort_results(std::vector<CompareResult>& results) {
  std::stable_sort(results.begin(), results.end(), [](const CompareResult& a, const CompareResult& b) {
    return std::tie(a.name, a.scenario_file, a.report_file) < std::tie(b.name, b.scenario_file, b.report_file);
  });
}

CompareSummary summarize(const std::vector<CompareResult>& results) {
  CompareSummary s;
  double ksum = 0, psum = 0, tsum = 0;
  for (const auto& r : results) {
    ++s.scenarios;
    s.kernels += r.kernels.size();
    if (r.status == CompareStatus::pass) ++s.passed;
    if (r.status == CompareStatus::check_failed) ++s.check_failed;
    if (r.status == CompareStatus::error) ++s.errors;
    for (const auto& k : r.kernels)
      if (const auto e = k.error_pct()) add_error(s.predicted_vs_simulated, ksum, *e, r.name, k.name);
    if (const auto e = r.published_error_pct()) {
      if (!r.published_bound) {
        add_error(s.simulated_vs_published, psum, *e, r.name, "");
      } else {
        ++s.bounds;
        if (*e <= 0) ++s.within_bounds;
        if (s.worst_bound.empty() || *e > s.worst_bound_pct) {
          s.worst_bound = r.name;
          s.worst_bound_pct = *e;
        }
      }
    }
    if (const auto e = r.error_pct()) add_error(s.predicted_vs_simulated_totals, tsum, *e, r.name, "");
  }
  if (s.predicted_vs_simulated_totals.count)
    s.predicted_vs_simulated_totals.mape_pct = tsum / static_cast<double>(s.predicted_vs_simulated_totals.count);
  if (s.predicted_vs_simulated.count) s.predicted_vs_simulated.mape_pct = ksum / static_cast<double>(s.predicted_vs_simulated.count);
  if (s.simulated_vs_published.count) s.simulated_vs_published.mape_pct = psum / static_cast<double>(s.simulated_vs_published.count);
  return s;
}

// ---- formats ----------------------------------------------------------------------------------

std::string format_seconds(std::optional<double> s) {
  if (!s) return "-";
  const double v = *s, a = std::fabs(v);
  if (a == 0) return "0 s";
  static const struct { double scale; const char* unit; } units[] = {
      {1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}, {1e-12, "ps"}};
  for (const auto& u : units) {
    if (a >= u.scale * 0.99995 || u.scale == 1e-12) {
      const double x = v / u.scale, ax = std::fabs(x);
      const char* f = ax >= 999.95 ? "%.0f %s" : ax >= 99.995 ? "%.1f %s" : ax >= 9.9995 ? "%.2f %s" : "%.3f %s";
      char b[64];
      std::snprintf(b, sizeof b, f, x, u.unit);
      return b;
    }
  }
  return printf_str("%.4g s", v);
}

std::string format_pct(std::optional<double> pct) { return pct ? printf_str("%+.1f%%", *pct) : "-"; }

std::string summary_lines(const CompareSummary& s) {
  std::string o;
  // Scenario totals and kernels on lines of their own: an estimate can be right in total and wrong
  // kernel by kernel.
  o += stat_line("predicted vs simulated, scenario totals", s.predicted_vs_simulated_totals, s.scenarios, "scenario", false) + "\n";
  if (s.predicted_vs_simulated.count == 0)
    o += "predicted vs simulated, kernels: no kernel has both a prediction and a simulation (" + std::to_string(s.kernels) +
         " kernel" + (s.kernels == 1 ? "" : "s") + ")\n";
  else
    o += stat_line("predicted vs simulated, kernels", s.predicted_vs_simulated, s.kernels, "kernel", true) + "\n";
  o += stat_line("simulated vs published", s.simulated_vs_published, s.scenarios, "scenario", false) + "\n";
  if (s.bounds) {
    char b[64];
    std::snprintf(b, sizeof b, "%+.1f%%", s.worst_bound_pct);
    o += "published upper bounds: simulated within " + std::to_string(s.within_bounds) + " of " + std::to_string(s.bounds) +
         (s.within_bounds < s.bounds ? std::string(", furthest above: ") + b + " (" + s.worst_bound + ")" : std::string()) + "\n";
  }
  o += std::to_string(s.scenarios) + " scenario" + (s.scenarios == 1 ? "" : "s") + ": " + std::to_string(s.passed) +
       " ok, " + std::to_string(s.check_failed) + " check failed, " + std::to_string(s.errors) + " could not run\n";
  return o;
}

std::string format_table(const std::vector<CompareResult>& results, const CompareSummary& s, bool color) {
  const auto rows = human_rows(results);
  std::vector<size_t> w(kHeader.size());
  for (size_t c = 0; c < kHeader.size(); ++c) w[c] = kHeader[c].size();
  for (const auto& r : rows) {
    const auto cs = cells(r);
    for (size_t c = 0; c + 1 < cs.size(); ++c) w[c] = std::max(w[c], cs[c].size());  // status: last, unpadded
  }
  auto paint = [&](const std::string& text, const char* code) {
    return color && !text.empty() ? std::string("\033[") + code + "m" + text + "\033[0m" : text;
  };
  auto line = [&](const std::vector<std::string>& cs, const Row* r) {
    std::string o;
    for (size_t c = 0; c < cs.size(); ++c) {
      std::string cell = cs[c];
      if (c + 1 < cs.size()) {
        const std::string pad(w[c] - cell.size(), ' ');
        cell = kRightAlign[c] ? pad + cell : cell + pad;
      }
      if (r && c == 7) cell = paint(cell, r->st == CompareStatus::pass ? "32" : "31");
      if (r && c == 4 && r->error_outside_band) cell = paint(cell, "33");
      o += (c ? "  " : "") + cell;
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o + "\n";
  };
  std::string header = line(kHeader, nullptr);
  header.pop_back();  // the newline
  std::string o = paint(header, "1") + "\n";
  for (const auto& r : rows) o += line(cells(r), &r);
  o += "\n" + summary_lines(s);
  return o;
}

std::string format_markdown(const std::vector<CompareResult>& results, const CompareSummary& s) {
  auto md = [](std::string t) {
    std::string o;
    for (char c : t) o += c == '|' ? std::string("\\|") : std::string(1, c == '\n' ? ' ' : c);
    return o;
  };
  std::string o = "|";
  for (const auto& h : kHeader) o += " " + h + " |";
  o += "\n|";
  for (size_t c = 0; c < kHeader.size(); ++c) o += kRightAlign[c] ? " ---: |" : " --- |";
  o += "\n";
  for (const auto& r : human_rows(results)) {
    o += "|";
    for (const auto& c : cells(r)) o += " " + md(c) + " |";
    o += "\n";
  }
  o += "\n";
  std::istringstream lines(summary_lines(s));
  for (std::string l; std::getline(lines, l);) o += "- " + md(l) + "\n";
  return o;
}

std::string format_csv(const std::vector<CompareResult>& results) {
  std::string o =
      "scenario,kernel,row,op,target,predicted_s,simulated_s,error_pct,published_s,published_error_pct,"
      "published_source,status,detail\n";
  auto row = [&](const CompareResult& r, const std::string& kernel, const char* kind, const std::string& op,
                 std::optional<double> p, std::optional<double> sim, std::optional<double> err, bool total) {
    o += csv_field(r.name) + "," + csv_field(kernel) + "," + kind + "," + csv_field(op) + "," + csv_field(r.target) +
         "," + csv_number(p) + "," + csv_number(sim) + "," + csv_number(err) + "," +
         (total ? csv_number(r.published_s) : "") + "," + (total ? csv_number(r.published_error_pct()) : "") + "," +
         (total ? csv_field(r.published_source) : "") + "," + status_key(r.status) + "," + csv_field(r.detail) + "\n";
  };
  for (const auto& r : results) {
    for (const auto& k : r.kernels) row(r, k.name, "kernel", k.op, k.predicted_s, k.simulated_s, k.error_pct(), false);
    row(r, "", "total", "", r.predicted_s, r.simulated_s, r.error_pct(), true);
  }
  return o;
}

json format_json(const std::vector<CompareResult>& results, const CompareSummary& s) {
  json scen = json::array();
  for (const auto& r : results) {
    json ks = json::array();
    for (const auto& k : r.kernels)
      ks.push_back({{"name", k.name},
                    {"op", k.op},
                    {"predicted_s", opt_json(k.predicted_s)},
                    {"simulated_s", opt_json(k.simulated_s)},
                    {"error_pct", opt_json(k.error_pct())}});
    json j = {{"name", r.name},
              {"scenario_file", r.scenario_file},
              {"report", r.report_file.empty() ? json() : json(r.report_file)},
              {"target", r.target},
              {"origin", r.origin},
              {"status", status_key(r.status)},
              {"predicted_s", opt_json(r.predicted_s)},
              {"simulated_s", opt_json(r.simulated_s)},
              {"error_pct", opt_json(r.error_pct())},
              {"published_s", opt_json(r.published_s)},
              {"published_source", r.published_source.empty() ? json() : json(r.published_source)},
              {"published_error_pct", opt_json(r.published_error_pct())},
              {"kernels", ks}};
    if (!r.detail.empty()) j["detail"] = r.detail;
    if (r.published_bound) j["published_is_upper_bound"] = true;
    scen.push_back(j);
  }
  auto stat = [](const ErrorStat& st, bool kernel) {
    if (st.count == 0) return json({{"count", 0}, {"mape_pct", nullptr}, {"worst", nullptr}});
    json worst = {{"scenario", st.worst_scenario}, {"error_pct", st.worst_pct}};
    if (kernel) worst["kernel"] = st.worst_kernel;
    return json({{"count", st.count}, {"mape_pct", st.mape_pct}, {"worst", worst}});
  };
  json out = {{"schema", kCompareSchema},
          {"scenarios", scen},
          {"summary",
           {{"scenarios", s.scenarios},
            {"kernels", s.kernels},
            {"passed", s.passed},
            {"check_failed", s.check_failed},
            {"errors", s.errors},
            {"predicted_vs_simulated", stat(s.predicted_vs_simulated, true)},
            {"predicted_vs_simulated_totals", stat(s.predicted_vs_simulated_totals, false)},
            {"simulated_vs_published", stat(s.simulated_vs_published, false)}}}};
  if (s.bounds) {
    out["summary"]["published_upper_bounds"] = {{"count", s.bounds}, {"within", s.within_bounds},
                                                {"furthest_above", s.within_bounds < s.bounds ? json({{"scenario", s.worst_bound}, {"error_pct", s.worst_bound_pct}}) : json()}};
  }
  return out;
}

// ---- plot -------------------------------------------------------------------------------------

std::string plot_svg(const std::vector<CompareResult>& results, size_t* points) {
  struct Pt {
    double x, y, err;
    std::string label;
    size_t series;  // index into `series` (a scenario)
  };
  // One colour per scenario (a qualitative palette, repeated past ten scenarios); kernels are
  // circles, the scenario's total a diamond of the same colour.
  static const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                         "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
  std::vector<std::string> series;
  std::vector<Pt> pts, totals;
  for (const auto& r : results) {
    const size_t si = series.size();
    bool any = false;
    for (const auto& k : r.kernels)
      if (k.predicted_s && k.simulated_s && *k.predicted_s > 0 && *k.simulated_s > 0) {
        pts.push_back({*k.simulated_s, *k.predicted_s, *k.error_pct(),
                       r.name + "/" + k.name + ": predicted " + format_seconds(k.predicted_s) + ", simulated " +
                           format_seconds(k.simulated_s) + ", error " + format_pct(k.error_pct()),
                       si});
        any = true;
      }
    if (r.predicted_s && r.simulated_s && *r.predicted_s > 0 && *r.simulated_s > 0) {
      totals.push_back({*r.simulated_s, *r.predicted_s, *r.error_pct(),
                        r.name + " (total): predicted " + format_seconds(r.predicted_s) + ", simulated " +
                            format_seconds(r.simulated_s) + ", error " + format_pct(r.error_pct()),
                        si});
      any = true;
    }
    if (any) series.push_back(r.name);
  }
  auto colour = [&](size_t si) { return kPalette[si % (sizeof(kPalette) / sizeof(kPalette[0]))]; };
  if (points) *points = pts.size();
  std::vector<Pt> all = pts;
  all.insert(all.end(), totals.begin(), totals.end());

  // Same decades on both axes, so that y = x is the diagonal.
  int lo = -7, hi = -3;
  if (!all.empty()) {
    double mn = all[0].x, mx = all[0].x;
    for (const auto& p : all) mn = std::min({mn, p.x, p.y}), mx = std::max({mx, p.x, p.y});
    lo = static_cast<int>(std::floor(std::log10(mn) - 0.02));
    hi = static_cast<int>(std::ceil(std::log10(mx) + 0.02));
    if (hi <= lo) hi = lo + 1;
  }
  // The scenarios' legend is a column right of the plot (at most kLegend rows, then "+N more").
  const size_t kLegend = 24;
  const double L = 100, T = 60, S = 480, W = L + S + (series.empty() ? 40 : 240), H = T + S + 70;
  auto X = [&](double v) { return L + (std::log10(v) - lo) / (hi - lo) * S; };
  auto Y = [&](double v) { return T + S - (std::log10(v) - lo) / (hi - lo) * S; };
  auto f = [](double v) { return printf_str("%.2f", v); };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<title>tessera compare: predicted vs simulated latency</title>\n"
    << "<defs><clipPath id=\"plot\"><rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << S << "\" height=\"" << S
    << "\"/></clipPath></defs>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << L + S / 2 << "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
    << "predicted vs simulated latency</text>\n";
  {
    const CompareSummary s = summarize(results);
    std::string sub = std::to_string(pts.size()) + " kernel" + (pts.size() == 1 ? "" : "s") + ", " +
                      std::to_string(totals.size()) + " scenario total" + (totals.size() == 1 ? "" : "s");
    if (s.predicted_vs_simulated.count)
      sub += ", kernels' MAPE " + printf_str("%.2f%%", s.predicted_vs_simulated.mape_pct) + " (worst " +
             format_pct(s.predicted_vs_simulated.worst_pct) + ")";
    if (s.predicted_vs_simulated_totals.count)
      sub += ", totals' " + printf_str("%.2f%%", s.predicted_vs_simulated_totals.mape_pct);
    o << "<text x=\"" << L + S / 2 << "\" y=\"44\" text-anchor=\"middle\" fill=\"#555\">" << xml_escape(sub)
      << "</text>\n";
  }
  // Grid, ticks and labels.
  o << "<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
  for (int d = lo; d <= hi; ++d) {
    const double v = std::pow(10.0, d);
    o << "<line x1=\"" << f(X(v)) << "\" y1=\"" << T << "\" x2=\"" << f(X(v)) << "\" y2=\"" << T + S << "\"/>"
      << "<line x1=\"" << L << "\" y1=\"" << f(Y(v)) << "\" x2=\"" << L + S << "\" y2=\"" << f(Y(v)) << "\"/>\n";
  }
  o << "</g>\n<g stroke=\"#333\" stroke-width=\"1\">\n";
  for (int d = lo; d <= hi; ++d)
    for (int m = 1; m <= 9 && (d < hi || m == 1); ++m) {
      const double v = m * std::pow(10.0, d);
      const double len = m == 1 ? 6 : 3;
      o << "<line x1=\"" << f(X(v)) << "\" y1=\"" << T + S << "\" x2=\"" << f(X(v)) << "\" y2=\"" << f(T + S + len)
        << "\"/><line x1=\"" << L << "\" y1=\"" << f(Y(v)) << "\" x2=\"" << f(L - len) << "\" y2=\"" << f(Y(v))
        << "\"/>\n";
    }
  o << "</g>\n<g fill=\"#333\">\n";
  for (int d = lo; d <= hi; ++d) {
    const double v = std::pow(10.0, d);
    o << "<text x=\"" << f(X(v)) << "\" y=\"" << T + S + 22 << "\" text-anchor=\"middle\">10<tspan dy=\"-6\" "
      << "font-size=\"9\">" << d << "</tspan></text>\n"
      << "<text x=\"" << L - 10 << "\" y=\"" << f(Y(v) + 4) << "\" text-anchor=\"end\">10<tspan dy=\"-6\" "
      << "font-size=\"9\">" << d << "</tspan></text>\n";
  }
  if (hi - lo <= 2)  // few decades: label 2x and 5x too
    for (int d = lo; d < hi; ++d)
      for (int m : {2, 5}) {
        const double v = m * std::pow(10.0, d);
        o << "<text x=\"" << f(X(v)) << "\" y=\"" << T + S + 22 << "\" text-anchor=\"middle\" font-size=\"10\">" << m
          << "\xC3\x97" "10<tspan dy=\"-5\" font-size=\"8\">" << d << "</tspan></text>\n"
          << "<text x=\"" << L - 10 << "\" y=\"" << f(Y(v) + 4) << "\" text-anchor=\"end\" font-size=\"10\">" << m
          << "\xC3\x97" "10<tspan dy=\"-5\" font-size=\"8\">" << d << "</tspan></text>\n";
      }
  o << "</g>\n"
    << "<text x=\"" << L + S / 2 << "\" y=\"" << T + S + 50 << "\" text-anchor=\"middle\" font-size=\"13\">"
    << "simulated (s)</text>\n"
    << "<text x=\"" << 30 << "\" y=\"" << T + S / 2 << "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 "
    << 30 << " " << T + S / 2 << ")\">predicted (s)</text>\n"
    << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << S << "\" height=\"" << S
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  // y = x and the +-10% band, clipped to the plot.
  const double a = std::pow(10.0, lo), b = std::pow(10.0, hi);
  auto diag = [&](double k, const char* cls, const char* extra) {
    o << "<line class=\"" << cls << "\" x1=\"" << f(X(a)) << "\" y1=\"" << f(Y(a * k)) << "\" x2=\"" << f(X(b))
      << "\" y2=\"" << f(Y(b * k)) << "\" " << extra << "/>\n";
  };
  o << "<g clip-path=\"url(#plot)\">\n";
  diag(1.0, "identity", "stroke=\"#333\" stroke-width=\"1.5\"");
  diag(1.1, "band", "stroke=\"#888\" stroke-width=\"1\" stroke-dasharray=\"6 4\"");
  diag(0.9, "band", "stroke=\"#888\" stroke-width=\"1\" stroke-dasharray=\"6 4\"");
  // Kernels outside +-10% get a red ring.
  for (const auto& p : pts) {
    const bool out = std::fabs(p.err) > 10.0;
    o << "<circle class=\"point\" cx=\"" << f(X(p.x)) << "\" cy=\"" << f(Y(p.y)) << "\" r=\"4.5\" fill=\""
      << colour(p.series) << "\" fill-opacity=\"0.8\" stroke=\"" << (out ? "#d62728" : "white") << "\" stroke-width=\""
      << (out ? "2" : "0.8") << "\"><title>" << xml_escape(p.label) << "</title></circle>\n";
  }
  for (const auto& p : totals) {
    const double cx = X(p.x), cy = Y(p.y), r = 7;
    o << "<path class=\"total\" d=\"M " << f(cx) << " " << f(cy - r) << " L " << f(cx + r) << " " << f(cy) << " L " << f(cx)
      << " " << f(cy + r) << " L " << f(cx - r) << " " << f(cy) << " Z\" fill=\"" << colour(p.series)
      << "\" fill-opacity=\"0.9\" stroke=\"#111\" stroke-width=\"1.2\"><title>" << xml_escape(p.label) << "</title></path>\n";
  }
  o << "</g>\n";
  // The scenarios, in the order of the table.
  if (!series.empty()) {
    const double sx = L + S + 24, sy = T + 4;
    o << "<g class=\"scenarios\" font-size=\"11\">\n<text x=\"" << sx << "\" y=\"" << sy << "\" font-weight=\"bold\">scenarios</text>\n";
    for (size_t i = 0; i < series.size() && i < kLegend; ++i) {
      const double y = sy + 18 * (i + 1);
      std::string name = series[i];
      if (name.size() > 30) name = name.substr(0, 29) + "\xE2\x80\xA6";
      o << "<rect x=\"" << sx << "\" y=\"" << y - 9 << "\" width=\"10\" height=\"10\" fill=\"" << colour(i) << "\"/><text x=\""
        << sx + 16 << "\" y=\"" << y << "\">" << xml_escape(name) << "</text>\n";
    }
    if (series.size() > kLegend)
      o << "<text x=\"" << sx << "\" y=\"" << sy + 18 * (kLegend + 1) << "\" fill=\"#555\">+" << series.size() - kLegend
        << " more (colours repeat)</text>\n";
    o << "</g>\n";
  }
  // Legend (the marker is a path, so that <circle> counts the kernels).
  const double lx = L + 14, ly = T + 18;
  o << "<g font-size=\"11\">\n"
    << "<rect x=\"" << lx - 6 << "\" y=\"" << ly - 12 << "\" width=\"190\" height=\"80\" fill=\"white\" "
    << "fill-opacity=\"0.9\" stroke=\"#ccc\"/>\n"
    << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 24 << "\" y2=\"" << ly
    << "\" stroke=\"#333\" stroke-width=\"1.5\"/><text x=\"" << lx + 32 << "\" y=\"" << ly + 4
    << "\">predicted = simulated</text>\n"
    << "<line x1=\"" << lx << "\" y1=\"" << ly + 18 << "\" x2=\"" << lx + 24 << "\" y2=\"" << ly + 18
    << "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/><text x=\"" << lx + 32 << "\" y=\"" << ly + 22
    << "\">\xC2\xB1" "10%</text>\n"
    << "<path d=\"M " << lx + 2.5 << " " << ly + 36 << " a 4.5 4.5 0 1 0 9 0 a 4.5 4.5 0 1 0 -9 0\" fill=\"#1f77b4\"/>"
    << "<path d=\"M " << lx + 14.5 << " " << ly + 36 << " a 4.5 4.5 0 1 0 9 0 a 4.5 4.5 0 1 0 -9 0\" fill=\"#1f77b4\" "
    << "stroke=\"#d62728\" stroke-width=\"2\"/>"
    << "<text x=\"" << lx + 32 << "\" y=\"" << ly + 40 << "\">kernel (ring: outside \xC2\xB1" "10%)</text>\n"
    << "<path d=\"M " << lx + 12 << " " << ly + 47 << " l 7 7 l -7 7 l -7 -7 Z\" fill=\"#1f77b4\" stroke=\"#111\"/>"
    << "<text x=\"" << lx + 32 << "\" y=\"" << ly + 58 << "\">scenario total</text>\n</g>\n";
  if (pts.empty())
    o << "<text class=\"note\" x=\"" << L + S / 2 << "\" y=\"" << T + S / 2 << "\" text-anchor=\"middle\" "
      << "font-size=\"14\" fill=\"#a00\" stroke=\"white\" stroke-width=\"5\" paint-order=\"stroke\">no kernel has both a prediction and a simulation</text>\n";
  o << "</svg>\n";
  return o.str();
}

// ---- the verb ---------------------------------------------------------------------------------

namespace {

// Directories under a given DIR that compare does not search.
bool skipped_dir(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.empty() || n[0] == '.' || n == "build" || n == "out" || n == "tests";
}

std::string schema_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return "";
  json j = json::parse(f, nullptr, false);
  return j.is_discarded() ? std::string() : str(j, "schema");
}

}  // namespace

int run_compare(const CompareOptions& opt) {
  auto& con = Console::get();
  if (opt.inputs.empty())
    throw InputError("command line", "compare needs scenarios, reports or directories",
                     "e.g. tessera compare scenarios/");
  if (opt.jobs < 1) throw InputError("--jobs", "must be at least 1");
  static const std::vector<std::string> formats = {"table", "csv", "json", "markdown"};
  if (std::find(formats.begin(), formats.end(), opt.format) == formats.end()) {
    const std::string hint = did_you_mean(opt.format, formats);
    throw InputError("--format", "'" + opt.format + "' is not a format of compare",
                     hint.empty() ? "use table, csv, json or markdown" : "did you mean '" + hint + "'?");
  }
  install_interrupt_handlers();

  // 1. Collect scenario and report files (sorted, without duplicates).
  std::set<std::string> scenario_files, report_files;
  for (const auto& in : opt.inputs) {
    std::error_code ec;
    const fs::path p(in);
    if (fs::is_directory(p, ec)) {
      size_t found = 0;
      fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
      if (ec) throw InputError(in, "cannot read directory: " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) break;
        if (it->is_directory(ec)) {
          if (skipped_dir(it->path())) it.disable_recursion_pending();
          continue;
        }
        if (it->path().extension() != ".json" || !it->is_regular_file(ec)) continue;
        const std::string sch = schema_of(it->path());
        if (sch == kScenarioSchema) scenario_files.insert(abs_path(it->path())), ++found;
        else if (sch == kReportSchema) report_files.insert(abs_path(it->path())), ++found;
        else con.detail("compare: skipping " + it->path().string() + " (not a scenario or a report)");
      }
      if (!found) con.warn(in + ": no scenario or report files found");
    } else if (fs::is_regular_file(p, ec)) {
      const json j = parse_json_file(in);  // a syntax error names the file, line and column
      const std::string sch = str(j, "schema");
      if (sch == kReportSchema) report_files.insert(abs_path(p));
      else if (sch == kScenarioSchema) scenario_files.insert(abs_path(p));
      else
        throw InputError(in, "neither a scenario (" + std::string(kScenarioSchema) + ") nor a report (" +
                                 kReportSchema + ")",
                         "give scenario files, report.json files or directories");
    } else {
      throw InputError(in, "no such file or directory");
    }
  }
  if (scenario_files.empty() && report_files.empty())
    throw InputError("command line", "no scenarios or reports to compare");

  std::vector<CompareResult> results;
  // 2. Reports given directly (unless their scenario is also given: it is run or reused instead).
  for (const auto& rf : report_files) {
    json r = parse_json_file(rf);
    CompareResult cr = result_from_report(r, rf);
    if (!cr.scenario_file.empty() && scenario_files.count(cr.scenario_file)) {
      con.detail("compare: " + rf + " is the report of a scenario also given; using the scenario");
      continue;
    }
    cr.origin = "report";
    results.push_back(cr);
  }

  // 3. Scenarios: load (to name their output directory), reuse an up-to-date report or queue a run.
  const fs::path out_root = opt.out_dir.empty() ? fs::path("out") / "compare" : fs::path(opt.out_dir);
  std::vector<std::string> sets = opt.sets;
  if (opt.no_numerics) sets.push_back("run.numerics=false");
  std::vector<Job> queue;
  std::map<std::string, int> dir_uses;
  for (const auto& sf : scenario_files) {
    Scenario s;
    try {
      s = load_scenario(sf, sets);
    } catch (const InputError& e) {
      const auto& d = e.diagnostics();
      std::string name = fs::path(sf).stem().string();
      try {
        const json raw = parse_json_file(sf);
        if (!str(raw, "name").empty()) name = str(raw, "name");
      } catch (const std::exception&) {
      }
      results.push_back(error_row(name, sf, d.empty() ? e.what() : d[0].str()));
      continue;
    }
    std::string dn = safe_dir_name(s.name);
    if (const int n = dir_uses[dn]++; n > 0) dn += "-" + std::to_string(n + 1);  // two scenarios, one name
    Job job = job_for(s, s.file.empty() ? sf : s.file, s.name, out_root.string(), dn, opt.sets);
    if (!opt.rerun) {
      std::string why_not;
      if (auto r = reusable_report(job, opt.exe, why_not)) {
        CompareResult cr = result_from_report(*r, (fs::path(job.dir) / "report.json").string());
        cr.origin = "reused";
        con.info("compare: " + s.name + ": reusing " + cr.report_file + " (up to date; --rerun runs it again)");
        results.push_back(cr);
        continue;
      }
      if (!why_not.empty()) con.detail("compare: " + s.name + ": running again: " + why_not);
    }
    queue.push_back(std::move(job));
  }

  // 4. Run the queue, --jobs child processes at once: `tessera run SCENARIO --out DIR --quiet`
  // (spread over the MPI ranks under mpirun: sim/jobs.hpp).
  if (!queue.empty())
    con.info("compare: running " + std::to_string(queue.size()) + " scenario" + (queue.size() == 1 ? "" : "s") +
             " (--jobs " + std::to_string(opt.jobs) + ")");
  std::vector<CompareResult> ran = run_jobs(queue, {opt.jobs, opt.no_numerics, opt.exe, "compare"});
  if (rank() != 0) return 0;  // another MPI rank: rank 0 prints
  for (auto& r : ran) results.push_back(std::move(r));

  // 5. Output.
  sort_results(results);
  const CompareSummary sum = summarize(results);
  if (opt.format == "table") std::cout << format_table(results, sum, con.color_stdout());
  else if (opt.format == "markdown") std::cout << format_markdown(results, sum);
  else if (opt.format == "csv") {
    std::cout << format_csv(results);
    std::istringstream lines(summary_lines(sum));
    for (std::string l; std::getline(lines, l);) con.info(l);
  } else std::cout << format_json(results, sum).dump(2) << "\n";
  std::cout.flush();

  if (!opt.plot_file.empty()) {
    size_t n = 0;
    const std::string svg = plot_svg(results, &n);
    write_file_atomic(opt.plot_file, svg);
    if (n == 0) con.warn("--plot: no kernel has both a prediction and a simulation; " + opt.plot_file + " has no points");
    con.info("plot: " + opt.plot_file + " (" + std::to_string(n) + " kernel" + (n == 1 ? "" : "s") + ")");
  }
  return sum.check_failed || sum.errors ? 1 : 0;
}

}  // namespace tessera::sim
