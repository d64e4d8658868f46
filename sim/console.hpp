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

// The heartbeat of a long simulation (runs past ~2 s of wall time), on stderr: simulated time, the
// share of the predicted latency reached, the model's work rate (e.g. wavelet hops per second) and
// an ETA from that share. On a terminal one line redrawn about twice a second, otherwise a line
// "progress: ..." every ~10 s (logs, CI); nothing when quiet. tick() is cheap: the caller may call
// it every few thousand events; it reads the clock and prints only when a line is due.
class Heartbeat {
 public:
  // predicted_s: the compiler's estimate (0: none, no share or ETA); unit: what work counts ("hops").
  Heartbeat(std::string label, double predicted_s, std::string unit = "");
  ~Heartbeat();
  void tick(double simulated_s, int64_t work = 0);
  void finish();  // clears the terminal line
  // The line for given figures (tick, and tests).
  static std::string line(const std::string& label, double simulated_s, double predicted_s, double wall_s, double work_per_s,
                          const std::string& unit);

 private:
  std::string label_, unit_;
  double predicted_s_;
  bool active_, tty_;
  int64_t start_ns_, next_ns_, last_ns_ = 0, last_work_ = 0;
  double rate_ = 0;
  bool drawn_ = false;
};

}  // namespace tessera::sim
