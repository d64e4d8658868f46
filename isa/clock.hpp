#pragma once
// Clock domains on a femtosecond timeline. Cycle k of a clock at f Hz starts at floor(k * 1e15 / f)
// fs, so every domain's edges are exact to 1 fs however its period divides (2.8 GHz has a period of
// 357142.857 fs). Here in isa/ so that the models and the compiler's estimate keep the same edges;
// the SystemC time resolution is set to 1 fs to match (models/common/clock.hpp set_fs_resolution()).
#include <cstdint>

namespace tessera {

using Femtos = int64_t;
__extension__ typedef __int128 Int128;  // exact products of cycles and 1e15
inline constexpr Femtos kFsPerSecond = 1'000'000'000'000'000;

class ClockDomain {
 public:
  ClockDomain() = default;
  explicit ClockDomain(double hz) : hz_(static_cast<int64_t>(hz + 0.5)) {}
  int64_t hz() const { return hz_; }
  // Start time of cycle k.
  Femtos time_of(int64_t cycle) const {
    return static_cast<Femtos>((static_cast<Int128>(cycle) * kFsPerSecond) / hz_);
  }
  // The first cycle whose start is at or after t.
  int64_t cycle_at_or_after(Femtos t) const {
    const Int128 num = static_cast<Int128>(t) * hz_;
    int64_t k = static_cast<int64_t>(num / kFsPerSecond);
    while (time_of(k) < t) ++k;
    return k;
  }
  // The cycle containing t (its start is at or before t).
  int64_t cycle_at(Femtos t) const {
    int64_t k = cycle_at_or_after(t);
    while (k > 0 && time_of(k) > t) --k;
    return k;
  }
  double period_s() const { return 1.0 / static_cast<double>(hz_); }

 private:
  int64_t hz_ = 1'000'000'000;
};

}  // namespace tessera
