#pragma once
// The parameter a fused projection's slice was cut from (split_projections.cpp).
#include <cstdint>
#include <optional>
#include <string>

namespace tessera::wafer {

// A constant the compiler cut from a parameter's columns (a fused projection's Q, K and V: the
// kernels' weights and biases "<param>/cols<lo>_<hi>", split_projections.cpp): the parameter and the
// columns (of a [K, N] weight, or of a bias); none for any other value. Training maps the slices'
// state to and from the parameter.
struct ParamSlice {
  std::string param;
  int64_t lo = 0, hi = 0;
};
std::optional<ParamSlice> param_slice(const std::string& value);

}  // namespace tessera::wafer
