// consumer SCENARIO OUT: runs a scenario through the installed tessera's C++ API (sim::Session),
// with a step closure, and prints what it saw.
#include <cstdio>
#include <map>
#include <string>

#include "isa/error.hpp"
#include "sim/session.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer SCENARIO OUT\n");
    return 2;
  }
  try {
    tessera::sim::RunOptions opt;
    opt.out_dir = argv[2];
    tessera::sim::Session s(argv[1], opt);
    int closures = 0;
    s.add_step_closure("count", {"step"}, [&](int64_t, const std::map<std::string, tessera::Tensor>&) { ++closures; });
    const int code = s.run();
    std::printf("consumer: %s ran with exit %d, %d step closure call(s)\n", s.scenario().name.c_str(), code, closures);
    return code;
  } catch (const tessera::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
