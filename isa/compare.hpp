#pragma once
// Comparing a computed tensor with an expected one.
#include <cstdint>
#include <span>

#include "isa/tensor.hpp"

namespace tessera {

struct Comparison {
  double max_abs_error = 0;  // max |a-e|
  double max_rel_error = 0;  // max |a-e| / |e| over elements with e != 0 (|a-e| where e == 0)
  uint64_t max_ulp = 0;      // max fp32 ULP distance
  int64_t worst_index = -1;  // element with the largest excess over the allclose bound
  int64_t mismatches = 0;    // elements outside atol + rtol*|e| (NaN vs non-NaN counts)
  bool shapes_match = true;
  bool pass = true;          // shapes match and mismatches == 0
};

// ULP distance between two fp32 values (0 for equal values, including +0/-0; max for NaN vs number).
uint64_t ulp_distance(float a, float b);

// numpy.allclose semantics: |a - e| <= atol + rtol * |e|; NaN equals NaN only in the same position.
Comparison compare(std::span<const float> actual, std::span<const float> expected, double rtol, double atol);
Comparison compare(const Tensor& actual, const Tensor& expected, double rtol, double atol);

}  // namespace tessera
