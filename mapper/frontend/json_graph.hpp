#pragma once
// The inline graph of a scenario (/model/graph), already validated against the scenario schema
// (sim/scenario_schema.cpp: unknown keys, types and file paths are checked there).
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "mapper/graph/graph.hpp"

namespace tessera::frontend {

// `pointer` is the JSON pointer of the graph object, for errors; file paths are absolute.
graph::Graph load_json_graph(const nlohmann::json& g, const std::string& pointer, const std::string& base_dir);

}  // namespace tessera::frontend
