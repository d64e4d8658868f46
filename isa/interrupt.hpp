#pragma once
// Interruption: SIGINT (Ctrl-C) and SIGTERM set a flag that every long loop polls (compile,
// reference executor, simulation slices, checks, writing); the loop throws Interrupted and the
// command exits 130 (SIGINT) or 143 (SIGTERM) after the same cleanup (no partial outputs). A second
// signal while the first is being handled exits at once (the run's temporary output directory is
// then removed by the next run that writes beside it).
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

struct Interrupted : std::runtime_error {
  explicit Interrupted(int signal);
  int signal;  // SIGINT or SIGTERM
};

namespace detail {
extern std::atomic<int> g_interrupt_signal;  // 0 until a signal arrives
}

// Installs the SIGINT and SIGTERM handlers (idempotent).
void install_interrupt_handlers();
// The signal that asked to stop (SIGINT, SIGTERM), or 0.
inline int interrupt_signal() { return detail::g_interrupt_signal.load(std::memory_order_relaxed); }
inline bool interrupt_requested() { return interrupt_signal() != 0; }
[[noreturn]] void throw_interrupted();
// Cheap enough for inner loops: one relaxed load.
inline void poll_interrupt() {
  if (interrupt_requested()) throw_interrupted();
}
// Milliseconds from the first signal to now (0 before one): how promptly a run stopped.
double ms_since_signal();
// The exit code for an interruption by `signal`: 128 + signal (130 SIGINT, 143 SIGTERM).
int interrupt_exit_code(int signal);

// A run announces its phases (load, compile, inputs, reference, elaborate, simulate, check, write)
// so that an interruption can say where it stopped; entering a phase polls (a signal that came
// during the last one stops the run there).
// Tests: TESSERA_INTERRUPT_AT=PHASE[:MS[:TERM]] makes the process send itself SIGINT (SIGTERM) MS
// milliseconds (default 0: at once) after entering the phase of that name; every phase entered is
// announced on stderr with TESSERA_INTERRUPT_AT set. Does nothing otherwise.
void enter_phase(const char* phase);
// The phase last entered ("" before the first), for messages.
const char* current_phase();
// Wall seconds spent in each phase so far (the current one up to now), in the order first entered:
// host.json's "phases".
std::vector<std::pair<std::string, double>> phase_times();

}  // namespace tessera
