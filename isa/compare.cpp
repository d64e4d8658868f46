#include "isa/compare.hpp"

#include "isa/interrupt.hpp"

#include <cmath>
#include <limits>

#include "isa/numeric.hpp"

namespace tessera {

uint64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : UINT64_MAX;
  // Map the sign-magnitude bit patterns onto a monotonic integer line.
  auto ordered = [](float x) -> int64_t {
    const uint32_t u = float_bits(x);
    return (u & 0x80000000u) ? -static_cast<int64_t>(u & 0x7fffffffu) : static_cast<int64_t>(u);
  };
  const int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

Comparison compare(std::span<const float> a, std::span<const float> e, double rtol, double atol) {
  Comparison c;
  if (a.size() != e.size()) {
    c.shapes_match = false;
    c.pass = false;
    return c;
  }
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < a.size(); ++i) {
    if ((i & 0xfffff) == 0) poll_interrupt();
    const double av = a[i], ev = e[i];
    const bool an = std::isnan(av), en = std::isnan(ev);
    if (an || en) {
      if (an != en) {
        ++c.mismatches;
        c.max_abs_error = std::numeric_limits<double>::infinity();
        c.max_rel_error = std::numeric_limits<double>::infinity();
        c.max_ulp = UINT64_MAX;
        worst_excess = std::numeric_limits<double>::infinity();
        c.worst_index = static_cast<int64_t>(i);
      }
      continue;
    }
    const double err = (av == ev) ? 0.0 : std::fabs(av - ev);  // inf == inf is no error
    const double rel = ev != 0 ? err / std::fabs(ev) : err;
    c.max_abs_error = std::max(c.max_abs_error, err);
    c.max_rel_error = std::max(c.max_rel_error, rel);
    c.max_ulp = std::max(c.max_ulp, ulp_distance(a[i], e[i]));
    const double bound = atol + rtol * std::fabs(ev);
    // As numpy.isclose: an infinity is close only to the same infinity (rtol * inf would make
    // every finite value close to inf, and 0 * inf would make inf not close to itself).
    const bool inf_case = std::isinf(av) || std::isinf(ev);
    const bool close = inf_case ? av == ev : err <= bound;
    const double excess = inf_case ? (close ? -std::numeric_limits<double>::infinity()
                                            : std::numeric_limits<double>::infinity())
                                   : err - bound;
    if (!close) ++c.mismatches;
    if (excess > worst_excess) {
      worst_excess = excess;
      c.worst_index = static_cast<int64_t>(i);
    }
  }
  c.pass = c.mismatches == 0;
  return c;
}

Comparison compare(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    Comparison c;
    c.shapes_match = false;
    c.pass = false;
    return c;
  }
  const auto a = actual.to_f32();
  const auto e = expected.to_f32();
  return compare(std::span<const float>(a), std::span<const float>(e), rtol, atol);
}

}  // namespace tessera
