#pragma once
// Scenario files (schema "tessera.scenario/1"): strict loading, command-line overrides, defaults,
// units and hardware parameters. docs/scenario.md describes every field.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/params.hpp"
#include "sim/schema.hpp"

namespace tessera::sim {

inline constexpr const char* kScenarioSchema = "tessera.scenario/1";

struct Scenario {
  std::string file;           // absolute path of the scenario file
  std::string dir;            // its directory (relative paths resolve against it)
  nlohmann::json resolved;    // the whole document: defaults filled, units in SI base units, paths absolute
  std::string name;
  std::string kind;           // "reference" | "neuroncore" | "wafer"
  std::string preset;         // "" for reference
  ParamSet params;            // hardware parameters (neuroncore, wafer)
  std::vector<std::string> warnings;
};

// Whether the run writes a trace (a trace section whose detail is not "none"), and whether it needs
// the machine's per-operation records for it (detail kernel, instruction or pe; the wafer's
// summary detail does not).
bool trace_wanted(const Scenario& s);
bool trace_records(const Scenario& s);

// The schema of tessera.scenario/1.
const schema::Node& scenario_schema();

// Loads, applies `sets` ("key.path=value", validated like the file) and validates. Every mistake
// in the file is reported at once through one InputError.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets = {});
// The same from an already parsed document (tests, and `tessera run report.json`).
Scenario load_scenario_json(nlohmann::json doc, const std::string& file, const std::vector<std::string>& sets = {});

// Parses JSON text; a syntax error names the file, line and column.
nlohmann::json parse_json_file(const std::string& path);

}  // namespace tessera::sim
