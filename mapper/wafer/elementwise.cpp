// Elementwise functions of one value at a kernel's chain ends (compile.hpp: Unary): the graph op
// read as a Unary (unary_of, for match_layers) and its PE operations (unary_ops), in place over y.
#include <algorithm>
#include <cmath>
#include <limits>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

using detail::fnum;
using Kind = Unary::Kind;

bool Unary::monotone() const {
  switch (kind) {
    case Kind::relu: case Kind::clip: case Kind::tanh: case Kind::sigmoid: case Kind::hard_sigmoid: case Kind::add: case Kind::softplus: case Kind::keep: return true;
    case Kind::leaky_relu: case Kind::elu: return a >= 0;
    case Kind::prelu: case Kind::mul_per: return std::all_of(per.begin(), per.end(), [](float s) { return s >= 0; });
    case Kind::add_per: return true;
    case Kind::mul: return a >= 0;
    default: return false;  // GELU, Swish, Mish, HardSwish, Abs, Neg dip or fall
  }
}

bool Unary::keeps_zero() const {
  switch (kind) {
    case Kind::sigmoid: return false;                       // 1/2
    case Kind::softplus: return false;                      // ln 2
    case Kind::hard_sigmoid: return b <= 0;                 // clamp(beta, 0, 1)
    case Kind::add: return a == 0;
    case Kind::add_per: return std::all_of(per.begin(), per.end(), [](float s) { return s == 0; });
    case Kind::clip: return !(a > 0) && !(b < 0);           // the bounds around 0
    // (combine: 0 op 0 is 0, a zero divisor gives 0 -- unary_ops)
    default: return true;                                   // Relu, Tanh, GELU, Swish, HardSwish, Abs, Neg, Mul, LeakyRelu, Elu
  }
}

int Unary::temporaries() const {
  switch (kind) {
    case Kind::leaky_relu: case Kind::hard_swish: case Kind::abs: case Kind::prelu: return 1;
    case Kind::elu: return 2;
    case Kind::tanh: case Kind::sigmoid: return 3;
    case Kind::swish: case Kind::gelu: case Kind::gelu_tanh: case Kind::softplus: case Kind::mish: return 4;
    case Kind::combine: return static_cast<Unary::Bin>(static_cast<int>(a)) == Unary::Bin::div ? 5 : 0;
    default: return 0;
  }
}

namespace {

void op3(ProgramTemplate& t, Op op, const std::string& d, const Arg& a, const Arg& b) { t.op(op, {d, a, b}); }

// Y = min(Y, hi) as -max(-Y, -hi) (the PEs have fmaxs, no fmins).
void min_ops(ProgramTemplate& t, const std::string& Y, double hi) {
  t.op(Op::fnegs, {Y, Y});
  op3(t, Op::fmaxs, Y, Y, fnum(-hi));
  t.op(Op::fnegs, {Y, Y});
}

// D = min(S, 0) as -max(-S, 0).
void min0_ops(ProgramTemplate& t, const std::string& D, const std::string& S) {
  t.op(Op::fnegs, {D, S});
  op3(t, Op::fmaxs, D, D, fimm(0.0));
  t.op(Op::fnegs, {D, D});
}

// T = exp(-|Y|) in (0, 1] (exp_ops), U a temporary.
void exp_neg_abs(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U) {
  t.op(Op::fnegs, {T, Y});
  op3(t, Op::fmaxs, T, T, Y);
  t.op(Op::fnegs, {T, T});
  exp_ops(t, T, U);
}

// Y = softplus(Y) = max(y, 0) + log1p(e), e = exp(-|y|) in (0, 1]: log1p(e) = 2 atanh(z) with
// z = e / (2 + e) in (0, 1/3] (a Newton reciprocal over [2, 3]) as 2 z (1 + z^2 / 3 + ... + z^14 / 15)
// (the next term is below 1.5e-9 of the sum): relative accuracy for y < 0 too, where it is e
// itself. T, U, V, W temporaries.
void softplus_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W) {
  exp_neg_abs(t, Y, T, U);                            // e
  op3(t, Op::fadds, U, T, fimm(2.0));
  recip_ops(t, V, U, W, 2.0, 3.0);
  op3(t, Op::fmuls, U, T, V);                         // z
  op3(t, Op::fmuls, V, U, U);                         // z^2
  t.op(Op::fmovs, {W, fnum(1.0 / 15)});
  for (int k = 13; k >= 1; k -= 2) {  // (fmacs scales by a scalar only)
    op3(t, Op::fmuls, W, W, V);
    op3(t, Op::fadds, W, W, fnum(1.0 / k));
  }
  op3(t, Op::fmuls, W, W, U);
  op3(t, Op::fmuls, W, W, fimm(2.0));                 // log1p(e)
  op3(t, Op::fmaxs, Y, Y, fimm(0.0));
  op3(t, Op::fadds, Y, Y, W);
}

// Y = mish(Y) = y tanh(softplus(y)), with e = exp(-|y|) and m = [y > 0] (1/2 at 0, where both forms
// agree): tanh(softplus(y)) = (1 + 2e) / (1 + 2e + 2e^2) for y >= 0 and e (2 + e) / (2 + 2e + e^2)
// below -- with s = e^2 and w = m (1 - s), N = s + 2e + w over D = 2 + 2e + s - w in [1, 5] (a Newton
// reciprocal): no cancellation on either side. T, U, V, W temporaries.
void mish_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V, const std::string& W) {
  exp_neg_abs(t, Y, T, U);                            // e
  sign_ops(t, U, Y);
  t.op(Op::fmacs, {U, fimm(0.5), U, fimm(0.5)});      // m
  op3(t, Op::fmuls, V, T, T);                         // s
  t.op(Op::fmacs, {W, fimm(1.0), V, fimm(-1.0)});     // 1 - s
  op3(t, Op::fmuls, W, W, U);                         // w
  t.op(Op::fmacs, {U, V, T, fimm(2.0)});              // s + 2e
  op3(t, Op::fadds, V, U, fimm(2.0));
  op3(t, Op::fsubs, V, V, W);                         // D
  op3(t, Op::fadds, U, U, W);                         // N
  recip_ops(t, T, V, W, 1.0, 5.0);
  op3(t, Op::fmuls, U, U, T);
  op3(t, Op::fmuls, Y, Y, U);
}

}  // namespace

void sigmoid_ops(ProgramTemplate& t, const std::string& Y, const std::string& T, const std::string& U, const std::string& V) {
  t.op(Op::fnegs, {T, Y});
  op3(t, Op::fmaxs, T, T, Y);
  t.op(Op::fnegs, {T, T});                            // -|y|
  sign_ops(t, U, Y);
  t.op(Op::fmacs, {U, fimm(0.5), U, fimm(0.5)});      // m: 1 for y > 0, 0 for y < 0 (1/2 at 0)
  exp_ops(t, T, Y);                                   // E = exp(-|y|)
  t.op(Op::fmacs, {Y, fimm(1.0), T, fimm(-1.0)});     // 1 - E
  op3(t, Op::fmuls, U, U, Y);
  op3(t, Op::fadds, U, U, T);                         // E + m (1 - E)
  op3(t, Op::fadds, Y, T, fimm(1.0));                 // 1 + E in [1, 2]
  recip_ops(t, V, Y, T, 1.0, 2.0);
  op3(t, Op::fmuls, Y, V, U);
}

// Y = kept op Y (first) or Y op kept, K the kept value, T[0..5) temporaries for a division: the
// divisor D's sign s (sign_ops) moves to the numerator, 1 / |D| by wide_ops (fp32's range: scaled
// into [1/4, 4) by powers of two, Newton's iteration), then the product. A zero divisor gives 0
// (s = 0), where ONNX's Div gives an infinity or NaN.
void combine_ops(ProgramTemplate& t, Unary::Bin bin, bool first, const std::string& Y, const std::string& K, const std::vector<std::string>& T) {
  const std::string &a = first ? K : Y, &b = first ? Y : K;
  switch (bin) {
    case Unary::Bin::add: op3(t, Op::fadds, Y, a, b); break;
    case Unary::Bin::sub: op3(t, Op::fsubs, Y, a, b); break;
    case Unary::Bin::mul: op3(t, Op::fmuls, Y, a, b); break;
    case Unary::Bin::div:
      sign_ops(t, T[0], b);
      op3(t, Op::fmuls, T[1], b, T[0]);
      op3(t, Op::fmuls, a, a, T[0]);  // (the numerator, Y or the kept value, is not read again)
      wide_ops(t, false, T[0], T[1], T[2], T[3], T[4], T[1]);
      op3(t, Op::fmuls, Y, a, T[0]);
      break;
  }
}

void unary_ops(ProgramTemplate& t, const Unary& u, const std::string& Y, const std::vector<std::string>& tmp, const std::string& per) {
  const bool two = u.kind == Kind::keep || u.kind == Kind::combine;  // (the kept value: the last temporary)
  if (static_cast<int>(tmp.size()) < u.temporaries() + (two ? 1 : 0))
    throw std::logic_error("unary_ops: " + u.op + " needs " + std::to_string(u.temporaries() + (two ? 1 : 0)) + " temporaries");
  switch (u.kind) {
    case Kind::keep: t.op(Op::fmovs, {tmp.back(), Y}); break;
    case Kind::mul_per: case Kind::add_per:
      if (per.empty()) throw std::logic_error("unary_ops: a per-feature " + u.op + " needs its values' DSD");
      op3(t, u.kind == Kind::mul_per ? Op::fmuls : Op::fadds, Y, Y, per);
      break;
    case Kind::combine: combine_ops(t, static_cast<Unary::Bin>(static_cast<int>(u.a)), u.b != 0, Y, tmp.back(), tmp); break;
    case Kind::relu: op3(t, Op::fmaxs, Y, Y, fimm(0.0)); break;
    case Kind::leaky_relu:  // max(y, a y) for a <= 1, min(y, a y) above
      op3(t, Op::fmuls, tmp[0], Y, fnum(u.a));
      if (u.a <= 1) {
        op3(t, Op::fmaxs, Y, Y, tmp[0]);
      } else {
        t.op(Op::fnegs, {Y, Y});
        t.op(Op::fnegs, {tmp[0], tmp[0]});
        op3(t, Op::fmaxs, Y, Y, tmp[0]);
        t.op(Op::fnegs, {Y, Y});
      }
      break;
    case Kind::clip:
      if (std::isfinite(u.a)) op3(t, Op::fmaxs, Y, Y, fnum(u.a));
      if (std::isfinite(u.b)) min_ops(t, Y, u.b);
      break;
    case Kind::tanh: tanh_ops(t, Y, tmp[0], tmp[1], tmp[2]); break;
    case Kind::sigmoid: sigmoid_ops(t, Y, tmp[0], tmp[1], tmp[2]); break;
    case Kind::hard_sigmoid:  // clamp(a y + b, 0, 1)
      t.op(Op::fmacs, {Y, fnum(u.b), Y, fnum(u.a)});
      op3(t, Op::fmaxs, Y, Y, fimm(0.0));
      min_ops(t, Y, 1.0);
      break;
    case Kind::hard_swish:  // y clamp(y / 6 + 1/2, 0, 1)
      t.op(Op::fmacs, {tmp[0], fimm(0.5), Y, fnum(1.0 / 6)});
      op3(t, Op::fmaxs, tmp[0], tmp[0], fimm(0.0));
      min_ops(t, tmp[0], 1.0);
      op3(t, Op::fmuls, Y, Y, tmp[0]);
      break;
    case Kind::swish:  // y sigmoid(a y)
      if (u.a == 1) t.op(Op::fmovs, {tmp[3], Y});
      else op3(t, Op::fmuls, tmp[3], Y, fnum(u.a));
      sigmoid_ops(t, tmp[3], tmp[0], tmp[1], tmp[2]);
      op3(t, Op::fmuls, Y, Y, tmp[3]);
      break;
    case Kind::gelu: gelu_ops(t, Y, tmp[0], tmp[1], tmp[2], tmp[3]); break;
    case Kind::gelu_tanh:  // y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3))) / 2
      op3(t, Op::fmuls, tmp[3], Y, Y);
      t.op(Op::fmacs, {tmp[3], fimm(1.0), tmp[3], fnum(0.044715)});
      op3(t, Op::fmuls, tmp[3], tmp[3], Y);
      op3(t, Op::fmuls, tmp[3], tmp[3], fnum(std::sqrt(2.0 / M_PI)));
      tanh_ops(t, tmp[3], tmp[0], tmp[1], tmp[2]);
      op3(t, Op::fadds, tmp[3], tmp[3], fimm(1.0));
      op3(t, Op::fmuls, Y, Y, tmp[3]);
      op3(t, Op::fmuls, Y, Y, fimm(0.5));
      break;
    case Kind::abs:  // max(y, -y)
      t.op(Op::fnegs, {tmp[0], Y});
      op3(t, Op::fmaxs, Y, Y, tmp[0]);
      break;
    case Kind::neg: t.op(Op::fnegs, {Y, Y}); break;
    case Kind::mul: op3(t, Op::fmuls, Y, Y, fnum(u.a)); break;
    case Kind::add: op3(t, Op::fadds, Y, Y, fnum(u.a)); break;
    case Kind::elu: {  // max(y, 0) + a expm1(min(y, 0)): expm1 relative near 0 (no exp - 1 cancellation)
      // expm1(t) for t = max(min(y, 0), -20) as expm1_x16_ops of t / 16 (|t / 16| <= 1.25: the
      // polynomial's remainder 3e-9); below -20 expm1 is -1 within 2.1e-9.
      const std::string &T = tmp[0], &U = tmp[1];
      min0_ops(t, T, Y);
      op3(t, Op::fmaxs, T, T, fimm(-20.0));
      op3(t, Op::fmuls, T, T, fimm(0.0625));
      expm1_x16_ops(t, U, T);
      if (u.a != 1) op3(t, Op::fmuls, U, U, fnum(u.a));
      op3(t, Op::fmaxs, Y, Y, fimm(0.0));
      op3(t, Op::fadds, Y, Y, U);
      break;
    }
    case Kind::softplus: softplus_ops(t, Y, tmp[0], tmp[1], tmp[2], tmp[3]); break;
    case Kind::mish: mish_ops(t, Y, tmp[0], tmp[1], tmp[2], tmp[3]); break;
    case Kind::prelu:  // max(y, 0) + slope min(y, 0), a slope per feature
      if (per.empty()) throw std::logic_error("unary_ops: PRelu needs its slopes' DSD");
      min0_ops(t, tmp[0], Y);
      op3(t, Op::fmuls, tmp[0], tmp[0], per);
      op3(t, Op::fmaxs, Y, Y, fimm(0.0));
      op3(t, Op::fadds, Y, Y, tmp[0]);
      break;
  }
}

int64_t unary_cycles(const Unary& u, int64_t len, const WaferConfig& cfg) {
  ProgramTemplate t;
  unary_ops(t, u, "y", {"t0", "t1", "t2", "t3", "t4", "t5"}, "s");
  return t.dsd_cycles(len, cfg);
}

}  // namespace tessera::wafer

namespace tessera::wafer::detail {

std::vector<Unary> unary_of(const graph::Node& n, const ConstantOf& constant, std::string& why) {
  const double inf = std::numeric_limits<double>::infinity();
  auto one = [&](Kind k, double a = 0, double b = 0) { return std::vector<Unary>{Unary{k, a, b, n.op, {}}}; };
  auto scalar = [&](size_t i, double* v) {
    const Tensor* c = i < n.inputs.size() ? constant(n.inputs[i]) : nullptr;
    if (!c || c->numel() != 1) return false;
    *v = c->to_f32()[0];
    return true;
  };
  const std::string& op = n.op;
  if (op == "Relu") return one(Kind::relu);
  if (op == "LeakyRelu") return one(Kind::leaky_relu, n.attrs.get_float("alpha", 0.01));
  if (op == "Tanh") return one(Kind::tanh);
  if (op == "Sigmoid") return one(Kind::sigmoid);
  if (op == "HardSigmoid") return one(Kind::hard_sigmoid, n.attrs.get_float("alpha", 0.2), n.attrs.get_float("beta", 0.5));
  if (op == "HardSwish") return one(Kind::hard_swish);
  if (op == "Swish") return one(Kind::swish, n.attrs.get_float("alpha", 1.0));
  if (op == "Abs") return one(Kind::abs);
  if (op == "Neg") return one(Kind::neg);
  if (op == "Gelu") return one(n.attrs.get_string("approximate", "none") == "tanh" ? Kind::gelu_tanh : Kind::gelu);
  // The exponential linear units: Elu(alpha); Selu(alpha, gamma) = gamma Elu(alpha); Celu(alpha) =
  // alpha Elu_1(y / alpha) (onnx.ai operators; the defaults are theirs).
  if (op == "Elu") return one(Kind::elu, n.attrs.get_float("alpha", 1.0));
  if (op == "Softplus") return one(Kind::softplus);
  if (op == "PRelu") {  // one slope (nn.PReLU()'s default): a LeakyRelu with it
    double slope = 0;
    if (scalar(1, &slope)) return one(Kind::leaky_relu, slope);
    const Tensor* c = n.inputs.size() > 1 ? constant(n.inputs[1]) : nullptr;
    if (!c) {
      why = "PRelu's slope must be a constant on the wafer";
      return {};
    }
    Unary u{Kind::prelu, 0, 0, op, {}};  // (match_layers checks the slopes are per output feature)
    u.per = c->to_f32();
    return {u};
  }
  if (op == "Mish") return one(Kind::mish);  // (the canonical graph's fusion of x * Tanh(Softplus(x)))
  if (op == "Selu")
    return {Unary{Kind::elu, n.attrs.get_float("alpha", 1.67326319217681884765625), 0, op, {}}, Unary{Kind::mul, n.attrs.get_float("gamma", 1.05070102214813232421875), 0, op, {}}};
  if (op == "Celu") {
    const double a = n.attrs.get_float("alpha", 1.0);
    if (a == 0) {
      why = "Celu with alpha 0 divides by zero";
      return {};
    }
    if (a == 1) return one(Kind::elu, 1.0);
    return {Unary{Kind::mul, 1.0 / a, 0, op, {}}, Unary{Kind::elu, 1.0, 0, op, {}}, Unary{Kind::mul, a, 0, op, {}}};
  }
  if (op == "Clip") {
    double lo = -inf, hi = inf;
    if ((n.inputs.size() > 1 && !n.inputs[1].empty() && !scalar(1, &lo)) || (n.inputs.size() > 2 && !n.inputs[2].empty() && !scalar(2, &hi))) {
      why = "Clip's bounds must be constant scalars on the wafer";
      return {};
    }
    return one(Kind::clip, lo, hi);
  }
  if (op == "Mul" || op == "Add" || op == "Sub" || op == "Div") {
    double c = 0;
    const bool second = scalar(1, &c), first = !second && scalar(0, &c);
    if (!second && !first) {
      why = op + " of two values, or by a constant of more than one element, is not an elementwise function of one value";
      return {};
    }
    if (op == "Mul") return one(Kind::mul, c);
    if (op == "Add") return one(Kind::add, c);
    if (op == "Sub") return second ? one(Kind::add, -c) : std::vector<Unary>{Unary{Kind::neg, 0, 0, op, {}}, Unary{Kind::add, c, 0, op, {}}};
    if (second && c != 0) return one(Kind::mul, 1.0 / c);
    why = first ? "Div of a constant by a value (a reciprocal) is not mapped on the wafer" : "Div by zero";
    return {};
  }
  why = "op " + op + " is not an elementwise function the wafer maps";
  return {};
}

}  // namespace tessera::wafer::detail
