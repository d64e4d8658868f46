// Elementwise functions of one value at a kernel's chain ends (compile.hpp: Unary): the graph op
// read as a Unary (unary_of, for match_layers) and its PE operations (unary_ops), in place over y.
#include <cmath>
#include <limits>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

using detail::fnum;
using Kind = Unary::Kind;

bool Unary::monotone() const {
  switch (kind) {
    case Kind::relu: case Kind::clip: case Kind::tanh: case Kind::sigmoid: case Kind::hard_sigmoid: case Kind::add: return true;
    case Kind::leaky_relu: return a >= 0;
    case Kind::mul: return a >= 0;
    default: return false;  // GELU, Swish, HardSwish, Abs, Neg dip or fall
  }
}

bool Unary::keeps_zero() const {
  switch (kind) {
    case Kind::sigmoid: return false;                       // 1/2
    case Kind::hard_sigmoid: return b <= 0;                 // clamp(beta, 0, 1)
    case Kind::add: return a == 0;
    case Kind::clip: return !(a > 0) && !(b < 0);           // the bounds around 0
    default: return true;                                   // Relu, Tanh, GELU, Swish, HardSwish, Abs, Neg, Mul, LeakyRelu
  }
}

int Unary::temporaries() const {
  switch (kind) {
    case Kind::leaky_relu: case Kind::hard_swish: case Kind::abs: return 1;
    case Kind::tanh: case Kind::sigmoid: return 3;
    case Kind::swish: case Kind::gelu: case Kind::gelu_tanh: return 4;
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

void unary_ops(ProgramTemplate& t, const Unary& u, const std::string& Y, const std::vector<std::string>& tmp) {
  if (static_cast<int>(tmp.size()) < u.temporaries()) throw std::logic_error("unary_ops: " + u.op + " needs " + std::to_string(u.temporaries()) + " temporaries");
  switch (u.kind) {
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
  }
}

int64_t unary_cycles(const Unary& u, int64_t len, const WaferConfig& cfg) {
  ProgramTemplate t;
  unary_ops(t, u, "y", {"t0", "t1", "t2", "t3"});
  return t.dsd_cycles(len, cfg);
}

}  // namespace tessera::wafer

namespace tessera::wafer::detail {

std::vector<Unary> unary_of(const graph::Node& n, const ConstantOf& constant, std::string& why) {
  const double inf = std::numeric_limits<double>::infinity();
  auto one = [&](Kind k, double a = 0, double b = 0) { return std::vector<Unary>{Unary{k, a, b, n.op}}; };
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
    if (op == "Sub") return second ? one(Kind::add, -c) : std::vector<Unary>{Unary{Kind::neg, 0, 0, op}, Unary{Kind::add, c, 0, op}};
    if (second && c != 0) return one(Kind::mul, 1.0 / c);
    why = first ? "Div of a constant by a value (a reciprocal) is not mapped on the wafer" : "Div by zero";
    return {};
  }
  why = "op " + op + " is not an elementwise function the wafer maps";
  return {};
}

}  // namespace tessera::wafer::detail
