#pragma once
#include <string>

namespace tessera::sim {
std::string version_string();   // "0.1.0"
std::string version_report();   // several lines: tessera, SystemC, compiler, build type
// scenarios/quickstart.json of this source tree (TESSERA_HOME, else the build's source directory).
std::string default_scenario_path();
}  // namespace tessera::sim
