#pragma once
// Facts about the SystemC kernel this build links against (used by `tessera version`, and by the
// models' start-up).
#include <string>

namespace tessera::models {
std::string systemc_version();
// Silences SystemC's copyright banner; must run before the kernel is first touched.
void quiet_systemc_banner();
// Call after sc_start() returns. AddressSanitizer builds only (a no-op otherwise): SystemC's
// QuickThreads coroutines switch stacks behind ASan's back, which leaves ASan with no bounds for the
// main thread's stack, so the next C++ throw trips a false stack-buffer-overflow
// (google/sanitizers#189). This tells ASan the main stack's bounds again and clears the shadow of
// the dead frames below the caller.
void after_systemc();
}  // namespace tessera::models
