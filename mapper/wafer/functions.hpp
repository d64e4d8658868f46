#pragma once
// mapper/wafer/functions.cpp (and elementwise.cpp's unary_ops): PE instruction sequences for the
// functions the PEs have no instruction for. Split from compile.hpp, which declares Unary.
#include <string>
#include <vector>

#include "mapper/wafer/compile.hpp"

namespace tessera::wafer {

// PE instructions (a ProgramTemplate's, isa/wafer/builder.hpp) for functions the PEs have no
// instruction for, as the softmax, its cross-entropy, Tanh, GELU and LayerNorm use them
// (tests/unit/test_wafer_fabric.cpp checks their accuracy on a PE). Operands are DSD names.
// exp_ops: X = exp(X) in place for X <= 0, T a temporary DSD of X's length (clamp at -80, X / 16,
// degree-12 Taylor polynomial, squared four times); recip_ops: R = 1 / S for S in [lo, hi] by
// Newton iterations from 2 / (lo + hi), U a temporary.
void exp_ops(ProgramTemplate& t, const std::string& X, const std::string& T);
void recip_ops(ProgramTemplate& t, const std::string& R, const std::string& S, const std::string& U, double lo, double hi);
// V = sign(Y) (Y 2^100 clamped to [-1, 1]: exact for |y| >= 2^-100, 0 for 0).
void sign_ops(ProgramTemplate& t, const std::string& V, const std::string& Y);
// recip_ops' Newton steps over [lo, hi] (at least 8; 11 over [1, 128]) and its operation count.
int recip_iters(double lo, double hi);
inline int recip_op_count(double lo, double hi) { return 1 + 4 * recip_iters(lo, hi); }
// Y = tanh(Y) in place, T, U, V temporaries of Y's length: m = expm1(-2|y|) by a degree-12 Taylor
// polynomial of expm1(-|y| / 8) (|y| clamped at 20) doubled four times (expm1(2t) = m (m + 2):
// relative accuracy kept near 0, where 1 - exp would cancel), tanh(|y|) = -m / (2 + m) (recip_ops
// over [1, 2]), times sign(y) (y 2^100 clamped to [-1, 1]).
void tanh_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V);
// M = expm1(16 X) for X in [-2.5, 0] (tanh's and Elu's): a degree-12 Taylor polynomial of expm1(X),
// doubled four times by expm1(2u) = m (m + 2) -- relative accuracy near 0, where exp - 1 would
// cancel. X is overwritten (the doublings' temporary).
void expm1_x16_ops(ProgramTemplate& t, const std::string& M, const std::string& X);
inline constexpr int kExpOps = 41, kRecipOps = 33;
// Y = gelu(Y) = Y Phi(Y) (erf form) in place, T, U, V, W temporaries of Y's length: erf(|y| / sqrt 2)
// by Abramowitz and Stegun 7.1.26 (|error| <= 1.5e-7; the argument clamped at 6) with t = 1 / (1 + p z)
// (recip_ops over [1, 1 + 6 p]) and exp(-z^2) (exp_ops), signed by sign(y).
void gelu_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W);
// Y = f(Y) in place for the elementwise function u, tmp[0 .. u.temporaries()) temporaries of Y's
// length (elementwise.cpp; accuracy on a PE: tests/unit/test_wafer_fabric.cpp); and the number of
// DSD operations that emits.
// `per`: the DSD of a per-feature operand over Y's rows (prelu's slopes), "" for the others.
void unary_ops(ProgramTemplate& t, const Unary& u, const std::string& Y, const std::vector<std::string>& tmp, const std::string& per = "");
// Its DSD operations' cycles over `len` elements (each op at its width: fmacs, which the affine
// functions use, is not SIMD; the others run at simd.fp32).
int64_t unary_cycles(const Unary& u, int64_t len, const WaferConfig& cfg);
// Y = sigmoid(Y) = 1 / (1 + exp(-Y)) in place, T, U, V temporaries: E = exp(-|y|) (exp_ops), the
// reciprocal R of 1 + E (recip_ops over [1, 2]), R (E + m (1 - E)) with m = 1 for y > 0, 0 for
// y < 0: relative accuracy on both sides (no 1 - sigma cancellation) for y >= -20, exp_ops'
// 1e-8 below.
void sigmoid_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V);
// Newton iterations of the LayerNorm's 1 / sqrt(var + eps) from 0.01: converges for var + eps in
// [1e-5, 3e4) (docs/wafer-compiler.md "Transformers"; tests/unit/test_wafer_fabric.cpp).
inline constexpr int kRsqrtIters = 32;
// R = 1 / sqrt(V) by kRsqrtIters steps r = r (1.5 - 0.5 V r^2) from 0.01, T a temporary.
void rsqrt_ops(ProgramTemplate& t, const std::string& R, const std::string& V, const std::string& T);
// Over fp32's range: R = 1 / sqrt(V) (`rsqrt` true; V <= 2^-120 taken as 2^-120, so 0 gives a finite
// R) or R = 1 / V (V > 0), V kept. A copy X of V is scaled into [1/4, 4) by binary steps -- for
// e = 64, 32, ..., 2 the mask m = [X < 2^-e] (then [X >= 2^e]), built from a difference times
// 2^100 clamped to [0, 1], multiplies X by 1 + m (2^e - 1) (or 2^-e) and the result's factor F by
// the matching power of two, all exact -- then Newton's iteration from 0.7 (rsqrt) or 0.4 (1 / X),
// times F. X, F, M, T temporaries of V's length. Accuracy on a PE: tests/unit/test_wafer_fabric.cpp.
void wide_ops(ProgramTemplate& t, bool rsqrt, const std::string& R, const std::string& V, const std::string& X, const std::string& F,
              const std::string& M, const std::string& T);

}  // namespace tessera::wafer
