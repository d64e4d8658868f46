#include "models/common/systemc_env.hpp"

#include <pthread.h>

#include <cstdlib>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#include <systemc>

namespace tessera::models {

std::string systemc_version() { return sc_core::sc_version(); }

void quiet_systemc_banner() { setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1); }

#if defined(__SANITIZE_ADDRESS__)
void after_systemc() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* bottom = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &bottom, &size);
  pthread_attr_destroy(&attr);
  // A "switch" from the main stack to itself: ASan takes its bounds from the switch.
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, bottom, size);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
  char here;
  const char* lo = static_cast<const char*>(bottom);
  const size_t dead = static_cast<size_t>(&here - lo) > 4096 ? static_cast<size_t>(&here - lo) - 4096 : 0;
  __asan_unpoison_memory_region(bottom, dead);
}
#else
void after_systemc() {}
#endif

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
