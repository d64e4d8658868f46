#include "isa/host_threads.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace tessera {

unsigned host_threads() {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  if (const char* e = std::getenv("TESSERA_HOST_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != e && *end == '\0' && v >= 1) return static_cast<unsigned>(std::min<long>(v, 1024));
  }
  return hw;
}

}  // namespace tessera
