// tessera drives the SystemC kernel itself (build the model, sc_start, read results) from its own
// main(), so that one process can load a scenario, elaborate once and run many steps. Debian's
// libsystemc.so still references sc_main (from sc_elab_and_sim), so every executable links this
// object; it is never called.
#include <cstdio>

// Visible: libsystemc.so resolves it in the executable (the build hides everything else).
extern "C" __attribute__((visibility("default"))) int sc_main(int, char**) {
  std::fprintf(stderr, "tessera: sc_main is not an entry point\n");
  return 3;
}
