#include "models/common/systemc_env.hpp"

#include <cstdlib>
#include <systemc>

namespace tessera::models {

std::string systemc_version() { return sc_core::sc_version(); }

void quiet_systemc_banner() { setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1); }

}  // namespace tessera::models

#include "models/common/clock.hpp"

namespace tessera::models {
void set_fs_resolution() {
  static bool done = false;
  if (done) return;
  done = true;
  sc_core::sc_set_time_resolution(1, sc_core::SC_FS);
}
}  // namespace tessera::models
