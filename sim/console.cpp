#include "sim/console.hpp"

#include <unistd.h>

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

void Console::out(const std::string& line) const {
  if (verbosity_ != Verbosity::quiet) std::cout << line << '\n';
}
void Console::result(const std::string& line) const { std::cout << line << '\n'; }
void Console::info(const std::string& line) const {
  if (verbosity_ != Verbosity::quiet) std::cerr << line << '\n';
}
void Console::detail(const std::string& line) const {
  if (verbosity_ == Verbosity::verbose) std::cerr << line << '\n';
}
void Console::warn(const std::string& line) const {
  std::cerr << (color_err_ ? "\033[33mwarning:\033[0m " : "warning: ") << line << '\n';
}
void Console::error(const std::string& line) const {
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

std::string count_of(int64_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string format_num(double v, const char* format) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

}  // namespace tessera::sim
