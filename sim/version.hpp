#pragma once
#include <string>

namespace tessera::sim {
std::string version_string();   // "0.1.0"
// The git commit tessera was built from (12 hex digits, "-dirty" with uncommitted changes to
// tracked files, "unknown" outside a checkout).
std::string version_commit();
std::string version_report();   // several lines: tessera, commit, build, SystemC and the libraries
// scenarios/quickstart.json of this source tree (TESSERA_HOME, else the build's source directory).
std::string default_scenario_path();
}  // namespace tessera::sim
