// The wafer estimate's weight loads (estimate_loads.cpp): when each PE has a kernel's weight block,
// the load steps (ld, ldb, ldc, ldd) at each PE, and the spans of the reduce tasks those steps wait
// for. estimate.cpp drives it kernel by kernel (docs/wafer-compiler.md "The estimate").
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "mapper/wafer/compile.hpp"

namespace tessera::wafer::detail {

struct LoadStep {
  int64_t at, cost, load;  // ready cycle, cycles, the kernel whose load it is
  bool operator<(const LoadStep& o) const { return at < o.at; }
};
using LoadSteps = std::vector<std::vector<LoadStep>>;  // per PE, sorted by ready cycle

class LoadModel {
 public:
  LoadModel(Compiled& c, const WaferConfig& cfg);

  // Sequenced weight streaming (not training): the load steps are modelled.
  bool steps_modelled() const { return steps_; }
  // When a task that becomes ready at PE i at cycle t starts, past the reduce spans recorded so far.
  int64_t after_busy(size_t i, int64_t t) const;
  // A task at PE i waiting from `from` until `t` runs after every load step that becomes ready in
  // [from, t): t grows by each one's cost.
  int64_t steps_within(size_t i, int64_t from, int64_t t);
  // Kernel l's weight load: `wready` (per PE of its rectangle, its block in), the stream's window
  // (its first wavelet in, its last one at the far end) and, with `steps`, its steps at each PE.
  // It reads the load before it (`wprev`: kernel l - 1's wready), the x tasks' ends of the kernel
  // whose buffer it takes and the reduce spans recorded so far (`final`: of every kernel before l).
  void load(size_t l, const std::vector<int64_t>& wprev, bool final, LoadSteps* steps, std::vector<int64_t>& wready,
            std::pair<int64_t, int64_t>& window);
  // Kernel l's x tasks' ends (per PE) and reduce spans, once known.
  void record_compute_end(std::vector<int64_t> cend) { compute_end_of_.push_back(std::move(cend)); }
  // Kernel l's x tasks per PE -- {first start, end of the first run, start of the second, end}
  // (one run: the middle two equal the end) -- and their period; x_wait reads the last recorded
  // (the loads it models follow that kernel), so only the last is kept.
  void record_x(std::vector<std::array<int64_t, 4>> xs, int64_t per_x) { x_runs_ = std::move(xs), per_x_ = per_x; }
  // When a load step ready at PE i at cycle t starts, past the x task in progress there.
  int64_t x_wait(size_t i, int64_t t) const;
  void record_busy(std::vector<std::pair<int64_t, int64_t>> busy);
  // After kernel l's reduce spans: load l + 1, final (its steps kept), then provisionally each
  // later load whose buffer kernel l or an earlier one holds (at most 8). `wready` gets load l + 1's.
  void loads_after(size_t l, const std::vector<int64_t>& wready_l, std::vector<int64_t>& wready);
  const std::vector<int64_t>& compute_end(size_t l) const { return compute_end_of_[l]; }
  const std::vector<std::pair<int64_t, int64_t>>& busy(size_t l) const { return busy_of_[l]; }
  size_t busy_count() const { return busy_of_.size(); }
  LoadSteps* final_steps() { return steps_ ? &fin_ : nullptr; }

 private:
  Compiled& c_;
  const WaferConfig& cfg_;
  bool steps_;
  int64_t seq_ld_;
  std::vector<double> mx_before_;  // MemoryX serves the streams in kernel order: the bytes before each
  std::vector<std::vector<std::pair<int64_t, int64_t>>> busy_of_;  // per kernel: per PE, its reduce task's span
  std::vector<std::vector<int64_t>> busy_max_, compute_end_of_;   // per kernel: per PE
  std::vector<std::array<int64_t, 4>> x_runs_;  // the last kernel recorded: per PE, its x tasks' runs (record_x)
  int64_t per_x_ = 0;
  LoadSteps fin_, prov_;  // the loads' final steps, the provisional ones
  bool provisional_ = false;
  std::vector<std::pair<int64_t, int64_t>> delayed_;  // (load, cycles) within one steps_within
  int64_t cur_load_ = 0;
  void add(std::vector<LoadStep>& st, int64_t at, int64_t cost);
};

}  // namespace tessera::wafer::detail
