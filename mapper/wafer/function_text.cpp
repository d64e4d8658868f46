// PE instruction text for the functions the PEs have no instruction for (compile.hpp): exp,
// reciprocal, tanh, GELU, 1 / sqrt, and fnum, the float literals of all generated text.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

using detail::fnum;

// A float literal for PE text: 9 significant digits, ".0" added when it would read as an integer.
std::string detail::fnum(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  std::string s = b;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// exp(X) in place for X <= 0 (the PEs have no exp): clamp at -80, t = X / 16, a degree-12 Taylor
// polynomial of exp(t) by Horner into T, squared four times (exp(X) = exp(X/16)^16). Relative error
// at most 5e-6 for X in [-20, 0] (measured 4.1e-6: fp32 rounding, multiplied by 16 through the
// squarings; tests/unit/test_wafer_fabric.cpp); below -20 the
// result stays under 1e-8 (it is added to a sum >= 1).
void exp_text(std::ostringstream& o, const std::string& X, const std::string& T) {
  o << "  fmaxs " << X << ", " << X << ", -80.0\n  fmuls " << X << ", " << X << ", 0.0625\n";
  o << "  fmuls " << T << ", " << X << ", " << fnum(1.0 / 12) << "\n  fadds " << T << ", " << T << ", 1.0\n";
  for (int k = 11; k >= 1; --k) {
    o << "  fmuls " << T << ", " << T << ", " << X << "\n";
    if (k > 1) o << "  fmuls " << T << ", " << T << ", " << fnum(1.0 / k) << "\n";
    o << "  fadds " << T << ", " << T << ", 1.0\n";
  }
  for (int k = 0; k < 4; ++k) o << "  fmuls " << T << ", " << T << ", " << T << "\n";
  o << "  fmovs " << X << ", " << T << "\n";
}

// R = 1 / S by Newton's iteration r = r (2 - s r) from r0 = 2 / (lo + hi), for S in [lo, hi]: the
// error (hi - lo) / (hi + lo) squares each time; 8 iterations.
int recip_iters(double lo, double hi) {
  // Newton's error squares each step from e0 = (hi - lo) / (hi + lo): enough steps for 1e-8, at least 8.
  const double e0 = (hi - lo) / (hi + lo);
  return e0 <= 0 ? 8 : std::max(8, static_cast<int>(std::ceil(std::log2(std::log(1e-8) / std::log(e0)))));
}

void recip_text(std::ostringstream& o, const std::string& R, const std::string& S, const std::string& U, double lo, double hi) {
  o << "  fmovs " << R << ", " << fnum(2.0 / (lo + hi)) << "\n";
  for (int i = 0; i < recip_iters(lo, hi); ++i)
    o << "  fmuls " << U << ", " << S << ", " << R << "\n  fmuls " << U << ", " << U << ", -1.0\n  fadds " << U << ", " << U << ", 2.0\n  fmuls " << R << ", " << R
      << ", " << U << "\n";
}

void tanh_text(std::ostringstream& o, const std::string& Y, const std::string& T, const std::string& U, const std::string& V) {
  o << "  fnegs " << T << ", " << Y << "\n  fmaxs " << T << ", " << T << ", " << Y << "\n";  // |y|
  o << "  fmuls " << V << ", " << Y << ", 1.2676506e30\n  fnegs " << V << ", " << V << "\n  fmaxs " << V << ", " << V << ", -1.0\n  fnegs " << V << ", " << V
    << "\n  fmaxs " << V << ", " << V << ", -1.0\n";  // sign(y)
  o << "  fmuls " << T << ", " << T << ", -0.125\n  fmaxs " << T << ", " << T << ", -2.5\n";  // t = -|y| / 8 (|y| <= 20)
  o << "  fmuls " << U << ", " << T << ", " << fnum(1.0 / 12) << "\n  fadds " << U << ", " << U << ", 1.0\n";
  for (int k = 11; k >= 2; --k)
    o << "  fmuls " << U << ", " << U << ", " << T << "\n  fmuls " << U << ", " << U << ", " << fnum(1.0 / k) << "\n  fadds " << U << ", " << U << ", 1.0\n";
  o << "  fmuls " << U << ", " << U << ", " << T << "\n";  // m = expm1(t)
  for (int k = 0; k < 4; ++k) o << "  fadds " << T << ", " << U << ", 2.0\n  fmuls " << U << ", " << U << ", " << T << "\n";  // m = expm1(-2|y|)
  o << "  fadds " << T << ", " << U << ", 2.0\n  fmuls " << U << ", " << U << ", " << V << "\n  fmuls " << U << ", " << U << ", -1.0\n";
  recip_text(o, Y, T, V, 1.0, 2.0);
  o << "  fmuls " << Y << ", " << Y << ", " << U << "\n";
}

void gelu_text(std::ostringstream& o, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W) {
  constexpr double p = 0.3275911, zmax = 6.0;  // Abramowitz and Stegun 7.1.26
  o << "  fnegs " << T << ", " << Y << "\n  fmaxs " << T << ", " << T << ", " << Y << "\n  fmuls " << T << ", " << T << ", " << fnum(std::sqrt(0.5)) << "\n";
  o << "  fnegs " << T << ", " << T << "\n  fmaxs " << T << ", " << T << ", " << fnum(-zmax) << "\n  fnegs " << T << ", " << T << "\n";  // z = min(|y| / sqrt 2, 6)
  o << "  fmacs " << U << ", 1.0, " << T << ", " << fnum(p) << "\n";                                                                 // 1 + p z
  recip_text(o, V, U, W, 1.0, 1.0 + p * zmax);                                                                                      // t
  o << "  fmuls " << U << ", " << V << ", 1.061405429\n";
  for (const char* a : {"-1.453152027", "1.421413741", "-0.284496736", "0.254829592"})
    o << "  fadds " << U << ", " << U << ", " << a << "\n  fmuls " << U << ", " << U << ", " << V << "\n";                         // t (a1 + t (a2 + ...))
  o << "  fmuls " << W << ", " << T << ", " << T << "\n  fnegs " << W << ", " << W << "\n";
  exp_text(o, W, V);                                                                                                                 // exp(-z^2)
  o << "  fmuls " << U << ", " << U << ", " << W << "\n";                                                                             // 1 - erf(z)
  o << "  fmuls " << T << ", " << Y << ", 1.2676506e30\n  fmaxs " << T << ", " << T << ", -1.0\n  fnegs " << T << ", " << T << "\n  fmaxs " << T << ", "
    << T << ", -1.0\n  fnegs " << T << ", " << T << "\n";                                                                          // sign(y)
  o << "  fnegs " << U << ", " << U << "\n  fadds " << U << ", " << U << ", 1.0\n";                                                // erf(z)
  o << "  fmuls " << U << ", " << U << ", " << T << "\n  fadds " << U << ", " << U << ", 1.0\n  fmuls " << Y << ", " << Y << ", " << U << "\n  fmuls " << Y
    << ", " << Y << ", 0.5\n";
}

void rsqrt_text(std::ostringstream& o, const std::string& R, const std::string& V, const std::string& T) {
  o << "  fmovs " << R << ", 0.01\n";
  for (int i = 0; i < kRsqrtIters; ++i)
    o << "  fmuls " << T << ", " << R << ", " << R << "\n  fmuls " << T << ", " << T << ", " << V << "\n  fmacs " << T << ", 1.5, " << T << ", -0.5\n  fmuls " << R << ", "
      << R << ", " << T << "\n";
}

}  // namespace tessera::wafer
