#include "isa/interrupt.hpp"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace tessera {

namespace detail {
std::atomic<int> g_interrupt_signal{0};
}

namespace {

std::atomic<int64_t> g_signal_ns{0};

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (detail::g_interrupt_signal.compare_exchange_strong(expected, sig)) {
    g_signal_ns.store(now_ns());
    return;
  }
  // A second signal: the first is still being handled (or a loop does not poll); stop now.
  static const char msg[] = "tessera: stopped at once (second signal)\n";
  const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)n;
  ::_exit(128 + sig);
}

}  // namespace

Interrupted::Interrupted(int sig) : std::runtime_error(sig == SIGTERM ? "terminated (SIGTERM)" : "interrupted (SIGINT)"), signal(sig) {}

void install_interrupt_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

double ms_since_signal() {
  const int64_t t = g_signal_ns.load();
  return t ? static_cast<double>(now_ns() - t) / 1e6 : 0.0;
}

void throw_interrupted() { throw Interrupted(interrupt_signal()); }

int interrupt_exit_code(int signal) { return 128 + (signal ? signal : SIGINT); }

namespace {
std::atomic<const char*> g_phase{""};
}

const char* current_phase() { return g_phase.load(std::memory_order_relaxed); }

namespace {
std::vector<std::pair<std::string, double>> g_phase_times;
int64_t g_phase_ns = 0;
void close_phase(std::vector<std::pair<std::string, double>>& times, int64_t now) {
  const char* cur = g_phase.load(std::memory_order_relaxed);
  if (!*cur) return;
  const double s = static_cast<double>(now - g_phase_ns) / 1e9;
  for (auto& [name, t] : times)
    if (name == cur) {
      t += s;
      return;
    }
  times.emplace_back(cur, s);
}
}  // namespace

std::vector<std::pair<std::string, double>> phase_times() {
  auto times = g_phase_times;
  close_phase(times, now_ns());
  return times;
}

void enter_phase(const char* phase) {
  poll_interrupt();  // a signal that came during the last phase stops the run there
  const int64_t now = now_ns();
  close_phase(g_phase_times, now);
  g_phase_ns = now;
  g_phase.store(phase, std::memory_order_relaxed);
  static const char* at = std::getenv("TESSERA_INTERRUPT_AT");
  if (!at || !*at) return;
  const std::string spec = at;
  const auto colon = spec.find(':');
  const std::string want = spec.substr(0, colon);
  std::string line = std::string("tessera: phase ") + phase + "\n";
  if (want != phase) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    (void)n;
    return;
  }
  // Once per process: a phase entered again (the inputs, read again after compiling) must not send
  // a second signal -- that is the "stop at once" signal, and the first one's orderly stop would
  // then race it (cli.sigint_mid_phase failed so under load).
  static bool sent = false;
  if (sent) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    (void)n;
    return;
  }
  sent = true;
  const int ms = colon == std::string::npos ? 0 : std::atoi(spec.c_str() + colon + 1);
  const int sig = spec.size() > 5 && spec.compare(spec.size() - 5, 5, ":TERM") == 0 ? SIGTERM : SIGINT;
  line = std::string("tessera: phase ") + phase + ": sending " + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + " in " + std::to_string(ms) +
         " ms (TESSERA_INTERRUPT_AT)\n";
  const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;
  if (ms <= 0) {  // now, on this thread: delivered before kill() returns, so the phase sees it first
    ::kill(::getpid(), sig);
    return;
  }
  std::thread([ms, sig] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ::kill(::getpid(), sig);
  }).detach();
}

}  // namespace tessera
