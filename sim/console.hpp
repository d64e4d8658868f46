#pragma once
// Console output: results to stdout, diagnostics to stderr, verbosity, colour and progress only
// on a terminal.
#include <cstdint>
#include <string>

namespace tessera::sim {

// A number through printf's `format` (figures on the console and in messages).
std::string format_num(double v, const char* format = "%.4g");
// "1 kernel", "3 kernels".
std::string count_of(int64_t n, const std::string& noun);

enum class Verbosity { quiet, normal, verbose };

class Console {
 public:
  static Console& get();
  void set_verbosity(Verbosity v) { verbosity_ = v; }
  Verbosity verbosity() const { return verbosity_; }

  void out(const std::string& line) const;      // results (stdout), unless quiet
  void result(const std::string& line) const;   // results that print even when quiet
  void info(const std::string& line) const;     // progress notes (stderr), unless quiet
  void detail(const std::string& line) const;   // only with --verbose (stderr)
  void warn(const std::string& line) const;     // always (stderr)
  void error(const std::string& line) const;    // always (stderr)

  bool color_stdout() const { return color_out_; }
  // ANSI colour helpers that do nothing when stdout is not a terminal.
  std::string green(const std::string& s) const;
  std::string red(const std::string& s) const;
  std::string bold(const std::string& s) const;

 private:
  Console();
  Verbosity verbosity_ = Verbosity::normal;
  bool color_out_ = false, color_err_ = false;
};

// A progress line on stderr, redrawn in place; shown only when stderr is a terminal and not quiet.
class Progress {
 public:
  Progress(std::string label, double total);
  ~Progress();
  void update(double done);
  void finish();

 private:
  std::string label_;
  double total_;
  bool active_;
  int last_pct_ = -1;
};

}  // namespace tessera::sim
