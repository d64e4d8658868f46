#pragma once
// Saturating int64 arithmetic for element, byte and FLOP counts: a count that would overflow
// sticks at kCountMax instead of wrapping to a wrong (possibly small or negative) figure.
#include <cstdint>
#include <limits>

namespace tessera {

inline constexpr int64_t kCountMax = std::numeric_limits<int64_t>::max();

inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (a < 0 && b < 0 ? std::numeric_limits<int64_t>::min() : kCountMax) : r;
}
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? ((a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min() : kCountMax) : r;
}

}  // namespace tessera
