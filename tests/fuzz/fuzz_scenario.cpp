// libFuzzer target: the scenario loader (sim/scenario.hpp) on the input as a scenario file's text.
// The file is written into the sandbox, so its relative paths resolve to the sandbox's few small
// files (tests/fuzz/sandbox.hpp).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "isa/error.hpp"
#include "sim/scenario.hpp"
#include "tests/fuzz/sandbox.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = (std::filesystem::path(tessera::fuzz::sandbox_dir()) / "scenario.json").string();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    tessera::sim::load_scenario(path);
  } catch (const tessera::InputError&) {
    // Bad input, reported as such: fine. Any other exception escapes and is a crash.
  }
  return 0;
}
