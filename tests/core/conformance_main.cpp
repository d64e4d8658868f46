// `tessera onnx-conformance` without the simulator: the ONNX backend tests on the reference
// executor, built in the core-only configuration (preset asan-quick) so CI runs them under ASan
// and UBSan. Usage: tessera_core_conformance DIR [--exclusions FILE] [--pass-list FILE]
#include <exception>
#include <iostream>
#include <string>

#include "isa/error.hpp"
#include "sim/conformance.hpp"

int main(int argc, char** argv) {
  tessera::sim::ConformanceOptions c;
  c.format = "summary";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--exclusions" && has_value) c.exclusions_file = argv[++i];
    else if (a == "--pass-list" && has_value) c.pass_list_file = argv[++i];
    else if (c.dir.empty() && a.rfind("--", 0) != 0) c.dir = a;
    else {
      std::cerr << "usage: tessera_core_conformance DIR [--exclusions FILE] [--pass-list FILE]\n";
      return 2;
    }
  }
  if (c.dir.empty()) {
    std::cerr << "usage: tessera_core_conformance DIR [--exclusions FILE] [--pass-list FILE]\n";
    return 2;
  }
  try {
    return tessera::sim::run_conformance(c);
  } catch (const tessera::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
}
