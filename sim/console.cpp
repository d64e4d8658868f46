#include "sim/console.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace tessera::sim {

Console& Console::get() {
  static Console c;
  return c;
}

Console::Console() {
  const bool no_color = std::getenv("NO_COLOR") != nullptr;
  color_out_ = !no_color && ::isatty(STDOUT_FILENO);
  color_err_ = !no_color && ::isatty(STDERR_FILENO);
}

namespace {
bool g_heartbeat_drawn = false;  // a Heartbeat line is on the terminal: cleared before other output
void clear_heartbeat() {
  if (!g_heartbeat_drawn) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  g_heartbeat_drawn = false;
}
}  // namespace

void Console::out(const std::string& line) const {
  clear_heartbeat();
  if (verbosity_ != Verbosity::quiet) std::cout << line << '\n';
}
void Console::result(const std::string& line) const {
  clear_heartbeat();
  std::cout << line << '\n';
}
void Console::info(const std::string& line) const {
  clear_heartbeat();
  if (verbosity_ != Verbosity::quiet) std::cerr << line << '\n';
}
void Console::detail(const std::string& line) const {
  clear_heartbeat();
  if (verbosity_ == Verbosity::verbose) std::cerr << line << '\n';
}
void Console::warn(const std::string& line) const {
  clear_heartbeat();
  std::cerr << (color_err_ ? "\033[33mwarning:\033[0m " : "warning: ") << line << '\n';
}
void Console::error(const std::string& line) const {
  clear_heartbeat();
  std::cerr << (color_err_ ? "\033[31merror:\033[0m " : "error: ") << line << '\n';
}
std::string Console::green(const std::string& s) const { return color_out_ ? "\033[32m" + s + "\033[0m" : s; }
std::string Console::red(const std::string& s) const { return color_out_ ? "\033[31m" + s + "\033[0m" : s; }
std::string Console::bold(const std::string& s) const { return color_out_ ? "\033[1m" + s + "\033[0m" : s; }

Progress::Progress(std::string label, double total)
    : label_(std::move(label)),
      total_(total),
      active_(::isatty(STDERR_FILENO) && Console::get().verbosity() != Verbosity::quiet) {}

Progress::~Progress() { finish(); }

void Progress::update(double done) {
  if (!active_ || total_ <= 0) return;
  const int pct = static_cast<int>(100.0 * done / total_);
  if (pct == last_pct_) return;
  last_pct_ = pct;
  std::fprintf(stderr, "\r%s %3d%%", label_.c_str(), pct > 100 ? 100 : pct);
  std::fflush(stderr);
}

void Progress::finish() {
  if (!active_) return;
  if (last_pct_ >= 0) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  active_ = false;
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// TESSERA_HEARTBEAT_S (tests): seconds before the first line and between lines when not on a
// terminal, instead of 2 and 10.
double heartbeat_env(double dflt) {
  const char* e = std::getenv("TESSERA_HEARTBEAT_S");
  return e && *e ? std::atof(e) : dflt;
}
}  // namespace

Heartbeat::Heartbeat(std::string label, double predicted_s, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      predicted_s_(predicted_s),
      active_(Console::get().verbosity() != Verbosity::quiet),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_ns_(steady_ns()),
      next_ns_(start_ns_ + static_cast<int64_t>(heartbeat_env(2.0) * 1e9)) {}

Heartbeat::~Heartbeat() { finish(); }

std::string Heartbeat::line(const std::string& label, double simulated_s, double predicted_s, double wall_s, double work_per_s,
                            const std::string& unit) {
  std::string l = label + ": " + format_num(simulated_s * 1e6, "%.4g") + " us simulated";
  const double share = predicted_s > 0 ? simulated_s / predicted_s : 0;
  if (predicted_s > 0) l += " (" + format_num(100 * share, "%.0f") + "% of the predicted " + format_num(predicted_s * 1e6, "%.4g") + " us)";
  if (!unit.empty() && work_per_s > 0) l += ", " + format_num(work_per_s / 1e6, "%.3g") + " M " + unit + "/s";
  auto secs = [](double v) { return format_num(v, v < 10 ? "%.1f" : "%.0f") + " s"; };
  l += ", " + secs(wall_s);
  if (share > 0.01 && share < 1) l += ", ETA " + secs(wall_s * (1 - share) / share);
  else if (share >= 1) l += ", past the prediction";
  return l;
}

void Heartbeat::tick(double simulated_s, int64_t work) {
  if (!active_) return;
  const int64_t now = steady_ns();
  if (now < next_ns_) return;
  const double dt = last_ns_ ? static_cast<double>(now - last_ns_) / 1e9 : static_cast<double>(now - start_ns_) / 1e9;
  if (dt > 0) rate_ = static_cast<double>(work - last_work_) / dt;
  last_ns_ = now;
  last_work_ = work;
  const std::string l = line(label_, simulated_s, predicted_s_, static_cast<double>(now - start_ns_) / 1e9, rate_, unit_);
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", l.c_str());
    drawn_ = g_heartbeat_drawn = true;
    next_ns_ = now + 500'000'000;
  } else {
    std::fprintf(stderr, "progress: %s\n", l.c_str());
    next_ns_ = now + static_cast<int64_t>(heartbeat_env(10.0) * 1e9);
  }
  std::fflush(stderr);
}

void Heartbeat::finish() {
  if (drawn_) clear_heartbeat();
  drawn_ = false;
  active_ = false;
}

std::string count_of(int64_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string format_num(double v, const char* format) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

}  // namespace tessera::sim
