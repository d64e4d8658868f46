#include "models/common/systemc_env.hpp"

#include <cstdlib>
#include <systemc>

namespace tessera::models {

std::string systemc_version() { return sc_core::sc_version(); }

void quiet_systemc_banner() { setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1); }

}  // namespace tessera::models
