#pragma once
// Facts about the SystemC kernel this build links against (used by `tessera version`, and by the
// models' start-up).
#include <string>

namespace tessera::models {
std::string systemc_version();
// Silences SystemC's copyright banner; must run before the kernel is first touched.
void quiet_systemc_banner();
}  // namespace tessera::models
