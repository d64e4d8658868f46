#pragma once
// Errors carry where (a JSON pointer, an ONNX node, a PE coordinate, an instruction index) and a
// hint saying what to do. The CLI maps each kind to an exit code:
//   InputError -> 2 (bad input or usage), CheckFailed -> 1, anything else -> 3 (internal).
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

struct Diagnostic {
  std::string where;    // e.g. "/target/params/hbm.bandwidth", "node 'fc1' (Gemm)", "bundle 12 lane dma0"
  std::string message;  // what is wrong
  std::string hint;     // what to do (may be empty)

  std::string str() const;
};

// Bad input: a scenario, a model, a program or a command line that cannot be used as given.
class InputError : public std::runtime_error {
 public:
  explicit InputError(std::vector<Diagnostic> diags);
  InputError(std::string where, std::string message, std::string hint = {});
  const std::vector<Diagnostic>& diagnostics() const { return diags_; }

 private:
  std::vector<Diagnostic> diags_;
};

// A run that completed but whose checks (numerics, latency expectations, asserts) failed.
class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collects diagnostics so that every mistake in an input is reported at once.
class DiagnosticList {
 public:
  void add(std::string where, std::string message, std::string hint = {}) {
    diags_.push_back({std::move(where), std::move(message), std::move(hint)});
  }
  bool empty() const { return diags_.empty(); }
  size_t size() const { return diags_.size(); }
  const std::vector<Diagnostic>& items() const { return diags_; }
  void append(const DiagnosticList& other) {
    diags_.insert(diags_.end(), other.diags_.begin(), other.diags_.end());
  }
  // Throws InputError with all collected diagnostics, if any.
  void throw_if_any() const;

 private:
  std::vector<Diagnostic> diags_;
};

// Levenshtein-based suggestion among candidates; empty if nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tessera
