// Window functions (opset 17): HannWindow, HammingWindow, BlackmanWindow -- periodic (length N,
// denominator N) or symmetric (denominator N - 1), computed in fp64 and written in the dtype the
// output_datatype attribute names (float by default).
#include <cmath>
#include <numbers>

#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// Cosine-sum window a0 - a1 cos(2 pi n / D) + a2 cos(4 pi n / D).
std::vector<Tensor> window(const OpCall& c, double a0, double a1, double a2) {
  const int64_t n = int_scalar(c, in(c, 0), "size");
  if (n < 0 || n > 1000000000) fail(c, "size " + std::to_string(n) + " is outside [0, 1e9]");
  const int64_t code = attrs(c).get_int("output_datatype", 1);
  const auto dt = frontend::dtype_from_onnx(static_cast<int>(code));
  if (!dt || *dt == DType::boolean)
    fail(c, "attribute 'output_datatype' = " + std::to_string(code) + " is not a numeric type tessera supports");
  const bool periodic = attrs(c).get_int("periodic", 1) != 0;
  const double denom = static_cast<double>(periodic ? n : n - 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = denom > 0 ? 2 * std::numbers::pi * static_cast<double>(i) / denom : 0.0;
    v[static_cast<size_t>(i)] = a0 - a1 * std::cos(t) + a2 * std::cos(2 * t);
  }
  return {to_dtype(*dt, {n}, v)};
}

std::vector<Tensor> op_hann(const OpCall& c) { return window(c, 0.5, 0.5, 0.0); }
std::vector<Tensor> op_hamming(const OpCall& c) { return window(c, 25.0 / 46.0, 21.0 / 46.0, 0.0); }
std::vector<Tensor> op_blackman(const OpCall& c) { return window(c, 0.42, 0.5, 0.08); }

}  // namespace

std::vector<OpEntry> signal_ops() {
  return {{"HannWindow", op_hann}, {"HammingWindow", op_hamming}, {"BlackmanWindow", op_blackman}};
}

}  // namespace tessera::reference
