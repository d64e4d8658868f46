// `tessera compare`: statistics and output formats over synthetic reports (no simulation).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/compare.hpp"
#include "sim/console.hpp"

using namespace tessera::sim;
using json = nlohmann::json;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size())) ++n;
  return n;
}

json kernel(const std::string& name, json predicted, json simulated) {
  return {{"name", name}, {"op", "MatMul"}, {"predicted_s", predicted}, {"simulated_s", simulated}};
}

json report(const std::string& name, json kernels, json predicted, json simulated, json published = nullptr,
            bool pass = true) {
  return {{"schema", "tessera.report/1"},
          {"scenario_file", "/s/" + name + ".json"},
          {"scenario", {{"name", name}}},
          {"target", {{"kind", "neuroncore"}, {"preset", "trn1"}}},
          {"latency",
           {{"predicted_s", predicted},
            {"simulated_s", simulated},
            {"published_s", published},
            {"published_source", published.is_null() ? json() : json("paper, table 2")}}},
          {"kernels", kernels},
          {"checks", pass ? json::array() : json::array({{{"check", "outputs"}, {"pass", false}, {"detail", "y: 3 elements outside"}}})},
          {"pass", pass}};
}

// Three scenarios: two kernels with errors +10% and -20%; one kernel at +5% with a published
// figure; a reference run without timing; plus an error row.
std::vector<CompareResult> sample() {
  std::vector<CompareResult> rs;
  rs.push_back(result_from_report(
      report("zeta", json::array({kernel("k1", 1.1e-6, 1e-6), kernel("k2", 1.6e-6, 2e-6)}), 2.7e-6, 3e-6), "/o/zeta/report.json"));
  rs.push_back(result_from_report(report("alpha", json::array({kernel("only", 2.1e-5, 2e-5)}), 2.1e-5, 2e-5, 1.6e-5, false),
                                  "/o/alpha/report.json"));
  rs.push_back(result_from_report(report("mid", json::array(), nullptr, nullptr), "/o/mid/report.json"));
  CompareResult err;
  err.name = "broken";
  err.scenario_file = "/s/broken.json";
  err.status = CompareStatus::error;
  err.detail = "model.onnx: not a valid ONNX model";
  rs.push_back(err);
  sort_results(rs);
  return rs;
}

}  // namespace

TEST_CASE("compare: a report becomes a result with its errors", "[compare]") {
  json r = report("s", json::array({kernel("a", 1.2e-6, 1e-6), kernel("b", nullptr, 1e-6), kernel("c", "nan", 1e-6)}),
                  nullptr, 3e-6, 2.5e-6);
  const CompareResult c = result_from_report(r, "/o/s/report.json");
  CHECK(c.name == "s");
  CHECK(c.target == "neuroncore/trn1");
  CHECK(c.status == CompareStatus::pass);
  REQUIRE(c.kernels.size() == 3);
  CHECK(*c.kernels[0].error_pct() == Approx(20.0));
  CHECK_FALSE(c.kernels[1].error_pct());  // no prediction
  CHECK_FALSE(c.kernels[2].predicted_s);  // non-finite written as a string
  CHECK_FALSE(c.error_pct());
  CHECK(*c.published_error_pct() == Approx(20.0));  // (3 - 2.5) / 2.5
  CHECK(c.published_source == "paper, table 2");
}

TEST_CASE("compare: MAPE and worst case", "[compare]") {
  const auto rs = sample();
  REQUIRE(rs.size() == 4);
  CHECK(rs[0].name == "alpha");  // sorted by name
  CHECK(rs[1].name == "broken");
  CHECK(rs[3].name == "zeta");
  const CompareSummary s = summarize(rs);
  CHECK(s.scenarios == 4);
  CHECK(s.kernels == 3);
  CHECK(s.passed == 2);
  CHECK(s.check_failed == 1);
  CHECK(s.errors == 1);
  // |+10| + |-20| + |+5| over 3 kernels.
  CHECK(s.predicted_vs_simulated.count == 3);
  CHECK(s.predicted_vs_simulated.mape_pct == Approx(35.0 / 3));
  CHECK(s.predicted_vs_simulated.worst_pct == Approx(-20.0));
  CHECK(s.predicted_vs_simulated.worst_scenario == "zeta");
  CHECK(s.predicted_vs_simulated.worst_kernel == "k2");
  // Only alpha has a published figure: (2e-5 - 1.6e-5) / 1.6e-5 = +25%.
  CHECK(s.simulated_vs_published.count == 1);
  CHECK(s.simulated_vs_published.mape_pct == Approx(25.0));
  CHECK(s.simulated_vs_published.worst_scenario == "alpha");
}

TEST_CASE("compare: nothing to compare gives no statistics", "[compare]") {
  std::vector<CompareResult> rs = {result_from_report(report("r", json::array(), nullptr, nullptr), "")};
  const CompareSummary s = summarize(rs);
  CHECK(s.predicted_vs_simulated.count == 0);
  CHECK(s.simulated_vs_published.count == 0);
  const std::string t = format_table(rs, s);
  CHECK(t.find("no kernel has both a prediction and a simulation") != std::string::npos);
  const json j = format_json(rs, s);
  CHECK(j["summary"]["predicted_vs_simulated"]["mape_pct"].is_null());
}

TEST_CASE("compare: human forms of seconds and percentages", "[compare]") {
  CHECK(format_seconds(11.7034e-6) == "11.70 us");
  CHECK(format_seconds(1.416e-6) == "1.416 us");
  CHECK(format_seconds(183e-9) == "183.0 ns");
  CHECK(format_seconds(0.943e-3) == "943.0 us");
  CHECK(format_seconds(2.5) == "2.500 s");
  CHECK(format_seconds(std::nullopt) == "-");
  CHECK(format_pct(-4.5) == "-4.5%");
  CHECK(format_pct(24.04) == "+24.0%");
  CHECK(format_pct(std::nullopt) == "-");
}

TEST_CASE("compare: the table has a row per kernel and a total row", "[compare]") {
  const auto rs = sample();
  const std::string t = format_table(rs, summarize(rs));
  INFO(t);
  // alpha is one kernel whose figures are the totals: one merged row with the published figure.
  CHECK(t.find("alpha     only      21.00 us   20.00 us   +5.0%   16.00 us      +25.0%  FAIL: y: 3 elements outside\n") !=
        std::string::npos);
  CHECK(t.find("broken    -                -          -       -          -           -  ERROR: model.onnx: not a valid ONNX model\n") !=
        std::string::npos);
  CHECK(t.find("zeta      k1        1.100 us   1.000 us  +10.0%\n") != std::string::npos);
  CHECK(t.find("zeta      (total)   2.700 us   3.000 us  -10.0%          -           -  ok\n") != std::string::npos);
  CHECK(t.find("predicted vs simulated, kernels: MAPE 11.67% over 3 of 3 kernels, worst -20.0% (zeta, kernel k2)") !=
        std::string::npos);
  // The scenario totals on a line of their own: alpha +5%, zeta -10%.
  CHECK(t.find("predicted vs simulated, scenario totals: MAPE 7.50% over 2 of 4 scenarios, worst -10.0% (zeta)\n") != std::string::npos);
  CHECK(t.find("simulated vs published: MAPE 25.00% over 1 of 4 scenarios, worst +25.0% (alpha)") != std::string::npos);
  CHECK(t.find("4 scenarios: 2 ok, 1 check failed, 1 could not run") != std::string::npos);
  CHECK(t.find("\033[") == std::string::npos);  // no colour unless asked
}

TEST_CASE("compare: csv has a row per kernel and a total row per scenario", "[compare]") {
  const auto rs = sample();
  const std::string c = format_csv(rs);
  INFO(c);
  CHECK(c.rfind("scenario,kernel,row,op,target,predicted_s,simulated_s,error_pct,published_s,published_error_pct,"
                "published_source,status,detail\n",
                0) == 0);
  CHECK(count_of(c, "\n") == 1 + 3 + 4);  // header, 3 kernels, 4 totals
  CHECK(c.find("alpha,,total,,neuroncore/trn1,2.1e-05,2e-05,5,1.6e-05,25,\"paper, table 2\",check_failed,y: 3 elements outside\n") !=
        std::string::npos);
  CHECK(c.find("zeta,k2,kernel,MatMul,neuroncore/trn1,1.6e-06,2e-06,-20,,,,pass,\n") != std::string::npos);
  CHECK(c.find("broken,,total,,,,,,,,,error,model.onnx: not a valid ONNX model\n") != std::string::npos);
}

TEST_CASE("compare: json keeps every figure and the summary", "[compare]") {
  const auto rs = sample();
  const json j = format_json(rs, summarize(rs));
  CHECK(j["schema"] == "tessera.compare/1");
  REQUIRE(j["scenarios"].size() == 4);
  CHECK(j["scenarios"][0]["name"] == "alpha");
  CHECK(j["scenarios"][0]["status"] == "check_failed");
  CHECK(j["scenarios"][0]["published_error_pct"].get<double>() == Approx(25.0));
  CHECK(j["scenarios"][1]["status"] == "error");
  CHECK(j["scenarios"][1]["report"].is_null());
  CHECK(j["scenarios"][3]["kernels"][1]["error_pct"].get<double>() == Approx(-20.0));
  CHECK(j["scenarios"][2]["kernels"].empty());
  CHECK(j["summary"]["predicted_vs_simulated"]["count"] == 3);
  CHECK(j["summary"]["predicted_vs_simulated"]["worst"]["kernel"] == "k2");
  CHECK(j["summary"]["simulated_vs_published"]["mape_pct"].get<double>() == Approx(25.0));
  CHECK(j["summary"]["predicted_vs_simulated_totals"]["count"] == 2);
  CHECK(j["summary"]["predicted_vs_simulated_totals"]["mape_pct"].get<double>() == Approx(7.5));
  CHECK(j["summary"]["errors"] == 1);
}

TEST_CASE("compare: markdown is a pipe table with the summary as a list", "[compare]") {
  auto rs = sample();
  rs[3].kernels[0].name = "a|b";  // a pipe inside a cell is escaped
  const std::string m = format_markdown(rs, summarize(rs));
  INFO(m);
  CHECK(m.rfind("| scenario | kernel | predicted | simulated | error | published | sim vs pub | status |\n"
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
                0) == 0);
  CHECK(m.find("| alpha | only | 21.00 us | 20.00 us | +5.0% | 16.00 us | +25.0% | FAIL: y: 3 elements outside |") !=
        std::string::npos);
  CHECK(m.find("| zeta | a\\|b | 1.100 us |") != std::string::npos);
  CHECK(m.find("- predicted vs simulated, kernels: MAPE 11.67%") != std::string::npos);
  CHECK(m.find("- predicted vs simulated, scenario totals: MAPE 7.50%") != std::string::npos);
}

TEST_CASE("compare: the plot has one circle per kernel, a diamond per scenario total, colours per scenario and the band lines", "[compare]") {
  const auto rs = sample();
  size_t n = 0;
  const std::string svg = plot_svg(rs, &n);
  CHECK(n == 3);
  CHECK(count_of(svg, "<circle") == 3);
  // Totals: alpha 21 vs 20 us, zeta 2.7 vs 3 us (mid has none).
  CHECK(count_of(svg, "class=\"total\"") == 2);
  CHECK(svg.find("<title>zeta (total): predicted 2.700 us, simulated 3.000 us, error -10.0%</title>") != std::string::npos);
  CHECK(svg.find("3 kernels, 2 scenario totals") != std::string::npos);
  // alpha sorts first: the first colour; zeta's kernels and total the second; zeta/k2 (-20%) ringed red.
  CHECK(count_of(svg, "fill=\"#1f77b4\" fill-opacity") == 2);  // alpha's kernel and total
  CHECK(count_of(svg, "fill=\"#ff7f0e\" fill-opacity") == 3);  // zeta's two kernels and total
  CHECK(count_of(svg, "stroke=\"#d62728\" stroke-width=\"2\"><title>zeta/k2") == 1);
  CHECK(svg.find(">alpha</text>") != std::string::npos);
  CHECK(svg.find(">zeta</text>") != std::string::npos);
  CHECK(svg.find(">mid</text>") == std::string::npos);
  CHECK(count_of(svg, "class=\"identity\"") == 1);
  CHECK(count_of(svg, "class=\"band\"") == 2);
  CHECK(count_of(svg, "stroke-dasharray") >= 2);
  CHECK(svg.find("<title>zeta/k2: predicted 1.600 us, simulated 2.000 us, error -20.0%</title>") != std::string::npos);
  CHECK(svg.find("simulated (s)") != std::string::npos);
  CHECK(svg.find("predicted (s)") != std::string::npos);
  CHECK(svg.find("no kernel has both") == std::string::npos);
  // Self-contained: no external references, scripts or fonts.
  CHECK(svg.find("<script") == std::string::npos);
  CHECK(svg.find("href") == std::string::npos);
  CHECK(svg.find("@import") == std::string::npos);
}

TEST_CASE("compare: a plot without points says so", "[compare]") {
  std::vector<CompareResult> rs = {
      result_from_report(report("r", json::array({kernel("k", nullptr, 1e-6)}), nullptr, 1e-6), "")};
  size_t n = 7;
  const std::string svg = plot_svg(rs, &n);
  CHECK(n == 0);
  CHECK(count_of(svg, "<circle") == 0);
  CHECK(svg.find("no kernel has both a prediction and a simulation") != std::string::npos);
  CHECK(count_of(svg, "class=\"band\"") == 2);
}

// The heartbeat's line: simulated time, share of the prediction, work rate, wall time and the ETA
// from the share (what is left at the rate so far).
TEST_CASE("console: the heartbeat line says share, rate and ETA", "[console]") {
  using tessera::sim::Heartbeat;
  CHECK(Heartbeat::line("simulating", 25e-6, 100e-6, 3.0, 5e6, "hops") ==
        "simulating: 25 us simulated (25% of the predicted 100 us), 5 M hops/s, 3.0 s, ETA 9.0 s");
  CHECK(Heartbeat::line("simulating", 25e-6, 0, 12.0, 0, "") == "simulating: 25 us simulated, 12 s");
  CHECK(Heartbeat::line("simulating", 150e-6, 100e-6, 30.0, 0, "") ==
        "simulating: 150 us simulated (150% of the predicted 100 us), 30 s, past the prediction");
}
