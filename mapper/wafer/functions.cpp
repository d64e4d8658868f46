// PE instructions for the functions the PEs have no instruction for (compile.hpp): exp, reciprocal,
// tanh, GELU, 1 / sqrt; and fnum, the rounding of the compiler's computed constants.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

using detail::fnum;

// A computed constant as an fp32 immediate, rounded to 9 significant digits first (the form the
// compiler's programs have always printed it in, so their numbers did not change when they stopped
// being text).
Operand detail::fnum(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return fimm(std::strtod(b, nullptr));
}

namespace {
// A DSD op with a destination and two sources: `op d, a, b`.
void op3(ProgramTemplate& t, Op op, const std::string& d, const Arg& a, const Arg& b) { t.op(op, {d, a, b}); }
}  // namespace

// exp(X) in place for X <= 0 (the PEs have no exp): clamp at -80, t = X / 16, a degree-12 Taylor
// polynomial of exp(t) by Horner into T, squared four times (exp(X) = exp(X/16)^16). Relative error
// at most 5e-6 for X in [-20, 0] (measured 4.1e-6: fp32 rounding, multiplied by 16 through the
// squarings; tests/unit/test_wafer_fabric.cpp); below -20 the
// result stays under 1e-8 (it is added to a sum >= 1).
void exp_ops(ProgramTemplate& t, const std::string& X, const std::string& T) {
  op3(t, Op::fmaxs, X, X, fimm(-80.0));
  op3(t, Op::fmuls, X, X, fimm(0.0625));
  op3(t, Op::fmuls, T, X, fnum(1.0 / 12));
  op3(t, Op::fadds, T, T, fimm(1.0));
  for (int k = 11; k >= 1; --k) {
    op3(t, Op::fmuls, T, T, X);
    if (k > 1) op3(t, Op::fmuls, T, T, fnum(1.0 / k));
    op3(t, Op::fadds, T, T, fimm(1.0));
  }
  for (int k = 0; k < 4; ++k) op3(t, Op::fmuls, T, T, T);
  t.op(Op::fmovs, {X, T});
}

// R = 1 / S by Newton's iteration r = r (2 - s r) from r0 = 2 / (lo + hi), for S in [lo, hi]: the
// error (hi - lo) / (hi + lo) squares each time; 8 iterations.
int recip_iters(double lo, double hi) {
  // Newton's error squares each step from e0 = (hi - lo) / (hi + lo): enough steps for 1e-8, at least 8.
  const double e0 = (hi - lo) / (hi + lo);
  return e0 <= 0 ? 8 : std::max(8, static_cast<int>(std::ceil(std::log2(std::log(1e-8) / std::log(e0)))));
}

void recip_ops(ProgramTemplate& t, const std::string& R, const std::string& S, const std::string& U, double lo, double hi) {
  t.op(Op::fmovs, {R, fnum(2.0 / (lo + hi))});
  for (int i = 0; i < recip_iters(lo, hi); ++i) {
    op3(t, Op::fmuls, U, S, R);
    op3(t, Op::fmuls, U, U, fimm(-1.0));
    op3(t, Op::fadds, U, U, fimm(2.0));
    op3(t, Op::fmuls, R, R, U);
  }
}

// sign(Y) into V: Y 2^100 clamped to [-1, 1] as max(-max(-Y 2^100, -1), -1) (exact for
// |y| >= 2^-100; 0 for 0).
void sign_ops(ProgramTemplate& t, const std::string& V, const std::string& Y) {
  op3(t, Op::fmuls, V, Y, fimm(1.2676506e30));
  t.op(Op::fnegs, {V, V});
  op3(t, Op::fmaxs, V, V, fimm(-1.0));
  t.op(Op::fnegs, {V, V});
  op3(t, Op::fmaxs, V, V, fimm(-1.0));
}

void expm1_x16_ops(ProgramTemplate& t, const std::string& M, const std::string& X) {
  op3(t, Op::fmuls, M, X, fnum(1.0 / 12));
  op3(t, Op::fadds, M, M, fimm(1.0));
  for (int k = 11; k >= 2; --k) {
    op3(t, Op::fmuls, M, M, X);
    op3(t, Op::fmuls, M, M, fnum(1.0 / k));
    op3(t, Op::fadds, M, M, fimm(1.0));
  }
  op3(t, Op::fmuls, M, M, X);  // m = expm1(x)
  for (int k = 0; k < 4; ++k) {
    op3(t, Op::fadds, X, M, fimm(2.0));
    op3(t, Op::fmuls, M, M, X);  // expm1(2u) = m (m + 2)
  }
}

void tanh_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V) {
  t.op(Op::fnegs, {T, Y});
  op3(t, Op::fmaxs, T, T, Y);  // |y|
  sign_ops(t, V, Y);
  op3(t, Op::fmuls, T, T, fimm(-0.125));
  op3(t, Op::fmaxs, T, T, fimm(-2.5));  // t = -|y| / 8 (|y| <= 20)
  expm1_x16_ops(t, U, T);  // m = expm1(16 t) = expm1(-2|y|)
  op3(t, Op::fadds, T, U, fimm(2.0));
  op3(t, Op::fmuls, U, U, V);
  op3(t, Op::fmuls, U, U, fimm(-1.0));
  recip_ops(t, Y, T, V, 1.0, 2.0);
  op3(t, Op::fmuls, Y, Y, U);
}

void gelu_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W) {
  constexpr double p = 0.3275911, zmax = 6.0;  // Abramowitz and Stegun 7.1.26
  t.op(Op::fnegs, {T, Y});
  op3(t, Op::fmaxs, T, T, Y);
  op3(t, Op::fmuls, T, T, fnum(std::sqrt(0.5)));
  t.op(Op::fnegs, {T, T});
  op3(t, Op::fmaxs, T, T, fnum(-zmax));
  t.op(Op::fnegs, {T, T});                            // z = min(|y| / sqrt 2, 6)
  t.op(Op::fmacs, {U, fimm(1.0), T, fnum(p)});        // 1 + p z
  recip_ops(t, V, U, W, 1.0, 1.0 + p * zmax);          // t
  op3(t, Op::fmuls, U, V, fimm(1.061405429));
  for (double a : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) {
    op3(t, Op::fadds, U, U, fimm(a));
    op3(t, Op::fmuls, U, U, V);                          // t (a1 + t (a2 + ...))
  }
  op3(t, Op::fmuls, W, T, T);
  t.op(Op::fnegs, {W, W});
  exp_ops(t, W, V);                                    // exp(-z^2)
  op3(t, Op::fmuls, U, U, W);                            // 1 - erf(z)
  sign_ops(t, T, Y);                            // sign(y)
  t.op(Op::fnegs, {U, U});
  op3(t, Op::fadds, U, U, fimm(1.0));                    // erf(z)
  op3(t, Op::fmuls, U, U, T);
  op3(t, Op::fadds, U, U, fimm(1.0));
  op3(t, Op::fmuls, Y, Y, U);
  op3(t, Op::fmuls, Y, Y, fimm(0.5));
}

void rsqrt_ops(ProgramTemplate& t, const std::string& R, const std::string& V, const std::string& T) {
  t.op(Op::fmovs, {R, fimm(0.01)});
  for (int i = 0; i < kRsqrtIters; ++i) {
    op3(t, Op::fmuls, T, R, R);
    op3(t, Op::fmuls, T, T, V);
    t.op(Op::fmacs, {T, fimm(1.5), T, fimm(-0.5)});
    op3(t, Op::fmuls, R, R, T);
  }
}

void wide_ops(ProgramTemplate& t, bool rsqrt, const std::string& R, const std::string& V, const std::string& X, const std::string& F,
              const std::string& M, const std::string& T) {
  op3(t, Op::fmaxs, X, V, fnum(std::ldexp(1.0, -120)));
  t.op(Op::fmovs, {F, fimm(1.0)});
  // M = [d > 0] for d = M: d 2^100 clamped to [0, 1] (exact unless 0 < d < 2^-100: no such gap here)
  auto mask = [&] {
    op3(t, Op::fmuls, M, M, fimm(1.2676506e30));
    op3(t, Op::fmaxs, M, M, fimm(0.0));
    t.op(Op::fnegs, {M, M});
    op3(t, Op::fmaxs, M, M, fimm(-1.0));
    t.op(Op::fnegs, {M, M});
  };
  for (const bool small : {true, false})
    for (int e = 64; e >= 2; e /= 2) {
      const double c = std::ldexp(1.0, small ? -e : e);
      // M = [X < c] from d = c - X (c = 2^-e: scale up by 2^e; c = 2^e: M = 0 scales down by 2^-e)
      t.op(Op::fmacs, {M, fnum(c), X, fimm(-1.0)});
      mask();
      // the factors 1 + m (2^e - 1), or 2^-e + m (1 - 2^-e): powers of two, exact
      const int fe = rsqrt ? e / 2 : e;  // 1 / sqrt(X 2^e) = 1 / sqrt(X) 2^(-e/2); 1 / (X 2^e) = 2^-e / X
      auto factor = [&](int p) {
        if (small) t.op(Op::fmacs, {T, fimm(1.0), M, fnum(std::ldexp(1.0, p) - 1.0)});
        else t.op(Op::fmacs, {T, fnum(std::ldexp(1.0, -p)), M, fnum(1.0 - std::ldexp(1.0, -p))});
      };
      factor(e);
      op3(t, Op::fmuls, X, X, T);
      factor(fe);
      op3(t, Op::fmuls, F, F, T);
    }
  t.op(Op::fmovs, {R, fimm(rsqrt ? 0.7 : 0.4)});
  for (int i = 0; i < 12; ++i) {
    if (rsqrt) {  // r (1.5 - 0.5 x r^2)
      op3(t, Op::fmuls, T, R, R);
      op3(t, Op::fmuls, T, T, X);
      t.op(Op::fmacs, {T, fimm(1.5), T, fimm(-0.5)});
      op3(t, Op::fmuls, R, R, T);
    } else {  // r (2 - x r)
      op3(t, Op::fmuls, T, X, R);
      t.op(Op::fmacs, {T, fimm(2.0), T, fimm(-1.0)});
      op3(t, Op::fmuls, R, R, T);
    }
  }
  op3(t, Op::fmuls, R, R, F);
}

}  // namespace tessera::wafer

namespace tessera::wafer::detail {

// Adam's bias update at a chain end of kernel L (db the gradient, after weight decay), in the
// reference graph's order: m = m b1 + g (1 - b1); v = v b2 + g^2 (1 - b2); mhat = m / bc1 and
// vhat = v / bc2 (times the placed 1 / bc); b -= mhat lr / (sqrt(vhat) + eps), the square root as
// vhat rsqrt(vhat) (the wide-range rsqrt, wide_ops) and the division by Newton's reciprocal.
void adam_bias_ops(ProgramTemplate& t, double b1, double b2, double eps, double lr, const std::string& L, bool lr_placed) {
  auto T = [&](int i) { return "ad" + L + "_" + std::to_string(i); };
  const std::string db = "dbm" + L, m = "amm" + L, v = "avm" + L;
  t.op(Op::fmuls, {T(0), db, fnum(1 - b1)});
  t.op(Op::fmuls, {m, m, fnum(b1)});
  t.op(Op::fadds, {m, m, T(0)});
  t.op(Op::fmuls, {T(0), db, db});
  t.op(Op::fmuls, {T(0), T(0), fnum(1 - b2)});
  t.op(Op::fmuls, {v, v, fnum(b2)});
  t.op(Op::fadds, {v, v, T(0)});
  t.op(Op::fmuls, {T(1), m, "abc1b" + L});  // mhat
  t.op(Op::fmuls, {T(2), v, "abc2b" + L});  // vhat
  wide_ops(t, true, T(3), T(2), T(4), T(5), T(6), T(7));  // r = 1 / sqrt(vhat)
  t.op(Op::fmuls, {T(2), T(2), T(3)});                     // s = vhat r = sqrt(vhat) (0 for 0)
  t.op(Op::fadds, {T(2), T(2), fnum(eps)});                // d = s + eps
  // 1 / d by Newton from 0.75 / max(s, eps) = 0.75 min(r, 1 / eps): d times it is in [0.75, 1.5],
  // so the error 1 - d q starts within 0.5 and squares each step (6 steps: below fp32's rounding)
  t.op(Op::fnegs, {T(0), T(3)});
  t.op(Op::fmaxs, {T(0), T(0), fnum(-1.0 / eps)});
  t.op(Op::fmuls, {T(0), T(0), fimm(-0.75)});
  for (int i = 0; i < 6; ++i) {
    t.op(Op::fmuls, {T(4), T(2), T(0)});
    t.op(Op::fmacs, {T(4), fimm(2.0), T(4), fimm(-1.0)});
    t.op(Op::fmuls, {T(0), T(0), T(4)});
  }
  if (lr_placed) t.op(Op::fmuls, {T(1), T(1), "lrb" + L});  // (a schedule: the step's rate)
  else t.op(Op::fmuls, {T(1), T(1), fnum(lr)});
  t.op(Op::fmuls, {T(1), T(1), T(0)});
  t.op(Op::fsubs, {"biasm" + L, "biasm" + L, T(1)});
}

void chain_step(ProgramTemplate& t, const std::string& first, const std::string& last, const std::string& src, const std::string& to,
                const std::string& from, const std::string& last_dst) {
  t.if_(first);
  t.if_(last);
  if (last_dst != src) t.op(Op::fmovs, {last_dst, src});
  t.else_();
  t.op(Op::fmovs, {to, src});
  t.endif();
  t.else_();
  t.if_(last);
  t.op(Op::fadds, {last_dst, src, from});
  t.else_();
  t.op(Op::fadds, {to, src, from});
  t.endif();
  t.endif();
}

void sum_rows(ProgramTemplate& t, const std::string& acc, const std::string& row, int64_t B, int64_t nb, const std::string& tag) {
  t.op(Op::dsd_off, {row, imm(0)});
  t.op(Op::fmovs, {acc, row});
  t.op(Op::mov, {reg(14), imm(1)});
  t.label(tag + "l");
  t.op(Op::sub, {reg(15), reg(14), imm(B)});
  t.op(Op::bz, {reg(15), tag + "d"});
  t.op(Op::mul, {reg(15), reg(14), imm(nb)});
  t.op(Op::dsd_off, {row, reg(15)});
  t.op(Op::fadds, {acc, acc, row});
  t.op(Op::add, {reg(14), reg(14), imm(1)});
  t.op(Op::jmp, {tag + "l"});
  t.label(tag + "d");
}

int64_t sum_rows_cycles(int64_t B, int64_t nb, const WaferConfig& cfg) {
  const int64_t row = dsd_cycles(Op::fadds, nb, 1, cfg);
  return 1 + row + 1 + (B - 1) * (6 + row) + 2;
}

void sum_elements(ProgramTemplate& t, const std::string& acc, const std::string& one, int64_t n) {
  t.op(Op::dsd_off, {one, imm(0)});
  t.op(Op::fmovs, {acc, one});
  t.op(Op::mov, {reg(14), imm(1)});
  t.label("lp");
  t.op(Op::sub, {reg(15), reg(14), imm(n)});
  t.op(Op::bz, {reg(15), "le"});
  t.op(Op::dsd_off, {one, reg(14)});
  t.op(Op::fadds, {acc, acc, one});
  t.op(Op::add, {reg(14), reg(14), imm(1)});
  t.op(Op::jmp, {"lp"});
  t.label("le");
}

void first_sets(ProgramTemplate& t, Operand r, const std::string& la, const std::string& lb, Op op1, const std::vector<Arg>& a1, Op op2,
                const std::vector<Arg>& a2) {
  t.op(Op::bnz, {r, la});
  t.op(op1, a1);
  t.op(Op::jmp, {lb});
  t.label(la);
  t.op(op2, a2);
  t.label(lb);
}

}  // namespace tessera::wafer::detail
