#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sim/scenario.hpp"

using namespace tessera;
using namespace tessera::sim;
using json = nlohmann::json;

namespace {
json base() {
  return json::parse(R"({"schema": "tessera.scenario/1", "name": "t",
                         "target": {"kind": "neuroncore", "preset": "trn1"}})");
}
std::vector<Diagnostic> errors_of(json doc, std::vector<std::string> sets = {}) {
  try {
    load_scenario_json(std::move(doc), "", sets);
  } catch (const InputError& e) {
    return e.diagnostics();
  }
  return {};
}
}  // namespace

TEST_CASE("scenario: defaults are filled and units normalised", "[scenario]") {
  json doc = base();
  doc["target"]["params"] = {{"hbm.bandwidth", "300GB/s"}};
  doc["expect"] = {{"reference_latency", {{"value", "0.943ms"}, {"source", "BENCH"}}}};
  Scenario s = load_scenario_json(doc, "");
  CHECK(s.kind == "neuroncore");
  CHECK(s.preset == "trn1");
  CHECK(s.params.num("hbm.bandwidth") == Approx(300e9));
  CHECK(s.resolved["run"]["steps"] == 1);
  CHECK(s.resolved["precision"]["compute"] == "fp32");
  CHECK(s.resolved["expect"]["reference_latency"]["value"].get<double>() == Approx(0.943e-3));
  CHECK(s.resolved["target"]["params"]["hbm.bandwidth"].get<double>() == Approx(300e9));
  // The resolved document validates again to itself (a report reproduces its run).
  Scenario again = load_scenario_json(s.resolved, "");
  CHECK(again.resolved == s.resolved);
}

TEST_CASE("scenario: a misspelled key names its pointer and suggests the right one", "[scenario]") {
  json doc = base();
  doc["run"] = {{"stpes", 2}};
  auto e = errors_of(doc);
  REQUIRE(e.size() == 1);
  CHECK(e[0].where == "/run/stpes");
  CHECK(e[0].hint.find("'steps'") != std::string::npos);
}

TEST_CASE("scenario: every mistake in a file is reported at once", "[scenario]") {
  json doc = base();
  doc["targte"] = 1;                               // unknown key
  doc["run"] = {{"steps", 0}};                     // out of range
  doc["precision"] = {{"compute", "bf61"}};        // not in the enumeration
  doc["target"]["params"] = {{"tensor.clock", "2 KiB"}};  // wrong unit kind
  auto e = errors_of(doc);
  REQUIRE(e.size() == 4);
  std::vector<std::string> where;
  for (auto& d : e) where.push_back(d.where);
  CHECK(std::find(where.begin(), where.end(), "/targte") != where.end());
  CHECK(std::find(where.begin(), where.end(), "/run/steps") != where.end());
  CHECK(std::find(where.begin(), where.end(), "/precision/compute") != where.end());
  CHECK(std::find(where.begin(), where.end(), "/target/params/tensor.clock") != where.end());
}

TEST_CASE("scenario: wrong types name the expected type and the value", "[scenario]") {
  json doc = base();
  doc["run"] = {{"steps", "many"}};
  auto e = errors_of(doc);
  REQUIRE(e.size() == 1);
  CHECK(e[0].message.find("integer") != std::string::npos);
  CHECK(e[0].message.find("\"many\"") != std::string::npos);
}

TEST_CASE("scenario: presets must belong to the target kind", "[scenario]") {
  json doc = base();
  doc["target"]["preset"] = "wse2";
  auto e = errors_of(doc);
  REQUIRE(e.size() == 1);
  CHECK(e[0].where == "/target/preset");
  CHECK(e[0].hint.find("wafer preset") != std::string::npos);
}

TEST_CASE("scenario: --set overrides are validated like the file", "[scenario]") {
  Scenario s = load_scenario_json(base(), "", {"run.steps=3", "target.params.hbm.bandwidth=1.2TB/s"});
  CHECK(s.resolved["run"]["steps"] == 3);
  CHECK(s.params.num("hbm.bandwidth") == Approx(1.2e12));
  auto e = errors_of(base(), {"run.stesp=3"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].hint.find("steps") != std::string::npos);
  e = errors_of(base(), {"run.steps=-1"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].where.find("(from --set)") != std::string::npos);
}

TEST_CASE("scenario: model needs onnx, graph or program, and schema is required", "[scenario]") {
  json doc = base();
  doc["model"] = json::object();
  auto e = errors_of(doc);
  REQUIRE(e.size() == 1);
  CHECK(e[0].message.find("needs one of: onnx, graph, program, layout") != std::string::npos);
  json noschema = base();
  noschema.erase("schema");
  e = errors_of(noschema);
  REQUIRE(e.size() == 1);
  CHECK(e[0].where == "/schema");
}

TEST_CASE("scenario: missing input files are reported with their resolved path", "[scenario]") {
  json doc = base();
  doc["inputs"] = {{"x", {{"file", "no/such/file.npy"}}}};
  auto e = errors_of(doc);
  REQUIRE(e.size() == 1);
  CHECK(e[0].where == "/inputs/x/file");
  CHECK(e[0].message.find("no/such/file.npy") != std::string::npos);
}
