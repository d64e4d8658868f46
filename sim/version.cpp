#include "sim/version.hpp"

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/common/systemc_env.hpp"

namespace tessera::sim {

std::string version_string() { return TESSERA_VERSION; }

std::string version_report() {
  std::string r = "tessera " + version_string() + "\n";
  r += "  build: " TESSERA_BUILD_TYPE ", " __VERSION__ ", C++" + std::to_string(__cplusplus / 100 % 100) + "\n";
  r += "  SystemC: " + models::systemc_version() + "\n";
  r += "  nlohmann/json: " + std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
       std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." + std::to_string(NLOHMANN_JSON_VERSION_PATCH) + "\n";
  return r;
}

std::string default_scenario_path() {
  namespace fs = std::filesystem;
  if (const char* home = std::getenv("TESSERA_HOME")) return (fs::path(home) / "scenarios/quickstart.json").string();
  return (fs::path(TESSERA_SOURCE_DIR) / "scenarios/quickstart.json").string();
}

}  // namespace tessera::sim
