// Elementwise math beyond arithmetic: trigonometric and hyperbolic functions, rounding, Sign,
// IsInf/IsNaN, the variadic Min/Max/Sum/Mean, Mod, BitShift, the logical ops and the inclusive
// comparisons. Floats compute in fp64 and are written back in their own dtype.
#include <cmath>
#include <limits>

#include "mapper/reference/elementwise.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

template <double (*F)(double)>
std::vector<Tensor> op_unary(const OpCall& c) {
  return unary_float(c, F);
}

// Named wrappers: the address of a standard library function is not portable.
double f_cos(double x) { return std::cos(x); }
double f_sin(double x) { return std::sin(x); }
double f_tan(double x) { return std::tan(x); }
double f_acos(double x) { return std::acos(x); }
double f_asin(double x) { return std::asin(x); }
double f_atan(double x) { return std::atan(x); }
double f_cosh(double x) { return std::cosh(x); }
double f_sinh(double x) { return std::sinh(x); }
double f_acosh(double x) { return std::acosh(x); }
double f_asinh(double x) { return std::asinh(x); }
double f_atanh(double x) { return std::atanh(x); }
double f_floor(double x) { return std::floor(x); }
double f_ceil(double x) { return std::ceil(x); }
double f_round(double x) { return std::nearbyint(x); }  // default rounding mode: to nearest even

std::vector<Tensor> op_sign(const OpCall& c) {
  return unary_any(
      c, [](double x) { return std::isnan(x) ? x : static_cast<double>((x > 0) - (x < 0)); },
      [](int64_t x) { return static_cast<int64_t>((x > 0) - (x < 0)); });
}

std::vector<Tensor> float_predicate(const OpCall& c, bool (*pred)(double, bool, bool)) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const bool neg = attrs(c).get_int("detect_negative", 1) != 0, pos = attrs(c).get_int("detect_positive", 1) != 0;
  const auto v = x.to_f64();
  Tensor r(DType::boolean, x.shape());
  auto rv = r.as<bool>();
  for (size_t i = 0; i < v.size(); ++i) rv[i] = pred(v[i], neg, pos);
  return {std::move(r)};
}

std::vector<Tensor> op_is_inf(const OpCall& c) {
  return float_predicate(c, [](double x, bool neg, bool pos) { return std::isinf(x) && (x > 0 ? pos : neg); });
}
std::vector<Tensor> op_is_nan(const OpCall& c) {
  return float_predicate(c, [](double x, bool, bool) { return std::isnan(x); });
}

// ---- variadic Min / Max / Sum / Mean ------------------------------------------------------------

enum class Fold { min, max, sum, mean };

std::vector<Tensor> variadic(const OpCall& c, Fold kind) {
  if (c.inputs.empty()) fail(c, "needs at least one input");
  const Tensor& first = in(c, 0);
  Shape out = first.shape();
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    require_same_dtype(c, first, in(c, i));
    out = broadcast_shapes(c, out, in(c, i).shape());
  }
  const bool fl = is_float(first.dtype());
  if (!fl && (kind == Fold::mean || first.dtype() == DType::boolean))
    fail(c, "input has dtype " + std::string(dtype_name(first.dtype())) + "; this op needs " +
                (kind == Fold::mean ? "a float tensor" : "a numeric tensor"));
  const size_t n = static_cast<size_t>(shape_numel(out));
  if (fl) {
    std::vector<double> acc;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const auto map = broadcast_map(in(c, i).shape(), out);
      const auto v = in(c, i).to_f64();
      if (i == 0) {
        acc.resize(n);
        for (size_t k = 0; k < n; ++k) acc[k] = v[static_cast<size_t>(map[k])];
        continue;
      }
      for (size_t k = 0; k < n; ++k) {
        const double e = v[static_cast<size_t>(map[k])];
        double& a = acc[k];
        if (kind == Fold::sum || kind == Fold::mean)
          a += e;
        else if (std::isnan(e) || std::isnan(a))
          a = std::numeric_limits<double>::quiet_NaN();  // numpy propagates NaN
        else
          a = kind == Fold::min ? std::min(a, e) : std::max(a, e);
      }
    }
    if (kind == Fold::mean)
      for (double& a : acc) a /= static_cast<double>(c.inputs.size());
    return {from_f64(first.dtype(), out, acc)};
  }
  std::vector<int64_t> acc;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const auto map = broadcast_map(in(c, i).shape(), out);
    const auto v = in(c, i).to_i64();
    if (i == 0) {
      acc.resize(n);
      for (size_t k = 0; k < n; ++k) acc[k] = v[static_cast<size_t>(map[k])];
      continue;
    }
    for (size_t k = 0; k < n; ++k) {
      const int64_t e = v[static_cast<size_t>(map[k])];
      acc[k] = kind == Fold::sum ? wrap_add(acc[k], e) : kind == Fold::min ? std::min(acc[k], e) : std::max(acc[k], e);
    }
  }
  return {from_i64_as(first.dtype(), out, acc)};
}

std::vector<Tensor> op_min(const OpCall& c) { return variadic(c, Fold::min); }
std::vector<Tensor> op_max(const OpCall& c) { return variadic(c, Fold::max); }
std::vector<Tensor> op_sum(const OpCall& c) { return variadic(c, Fold::sum); }
std::vector<Tensor> op_mean(const OpCall& c) { return variadic(c, Fold::mean); }

// ---- Mod, BitShift --------------------------------------------------------------------------

std::vector<Tensor> op_mod(const OpCall& c) {
  const bool fmod = attrs(c).get_int("fmod", 0) != 0;
  if (is_float(in(c, 0).dtype()) && !fmod)
    fail(c, "attribute 'fmod' = 0 is not allowed for float inputs", "set fmod = 1 (C fmod) for floats");
  // Division by zero gives 0, as numpy does for integers (with a warning); never trap.
  if (fmod)
    return binary_arith(
        c, [](double a, double b) { return std::fmod(a, b); },
        [](int64_t a, int64_t b) { return b == 0 || b == -1 ? int64_t{0} : a % b; });
  return binary_arith(
      c, [](double a, double b) { return std::fmod(a, b); },  // unreachable for floats (checked above)
      [](int64_t a, int64_t b) {
        if (b == 0 || b == -1) return int64_t{0};
        const int64_t r = a % b;
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;  // the sign of the divisor, like Python's %
      });
}

std::vector<Tensor> op_bit_shift(const OpCall& c) {
  const std::string dir = attrs(c).get_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    fail(c, "attribute 'direction' = '" + dir + "' is not supported", "use \"LEFT\" or \"RIGHT\"");
  if (in(c, 0).dtype() != DType::u8)
    fail(c, "input has dtype " + std::string(dtype_name(in(c, 0).dtype())) + "; BitShift needs unsigned integers",
         "uint8 is the only unsigned integer dtype tessera has");
  const bool left = dir == "LEFT";
  return binary_arith(
      c, [](double a, double) { return a; },
      [left](int64_t a, int64_t b) {
        if (b < 0 || b >= 8) return int64_t{0};
        return left ? (a << b) & 0xff : a >> b;
      });
}

// ---- logical ------------------------------------------------------------------------------

template <class F>
std::vector<Tensor> logical(const OpCall& c, F f) {
  for (size_t i = 0; i < 2; ++i)
    if (in(c, i).dtype() != DType::boolean)
      fail(c, "input " + std::to_string(i) + " has dtype " + std::string(dtype_name(in(c, i).dtype())) +
                  ", expected bool");
  return compare(c, [f](int64_t a, int64_t b) { return f(a != 0, b != 0); });
}

std::vector<Tensor> op_and(const OpCall& c) {
  return logical(c, [](bool a, bool b) { return a && b; });
}
std::vector<Tensor> op_or(const OpCall& c) {
  return logical(c, [](bool a, bool b) { return a || b; });
}
std::vector<Tensor> op_xor(const OpCall& c) {
  return logical(c, [](bool a, bool b) { return a != b; });
}
std::vector<Tensor> op_not(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.dtype() != DType::boolean) fail(c, "input has dtype " + std::string(dtype_name(x.dtype())) + ", expected bool");
  Tensor r(DType::boolean, x.shape());
  const auto xv = x.as<bool>();
  auto rv = r.as<bool>();
  for (size_t i = 0; i < xv.size(); ++i) rv[i] = !xv[i];
  return {std::move(r)};
}

std::vector<Tensor> op_greater_or_equal(const OpCall& c) {
  return compare(c, [](auto a, auto b) { return a >= b; });
}
std::vector<Tensor> op_less_or_equal(const OpCall& c) {
  return compare(c, [](auto a, auto b) { return a <= b; });
}

}  // namespace

std::vector<OpEntry> math_ops() {
  return {
      {"Cos", op_unary<f_cos>},
      {"Sin", op_unary<f_sin>},
      {"Tan", op_unary<f_tan>},
      {"Acos", op_unary<f_acos>},
      {"Asin", op_unary<f_asin>},
      {"Atan", op_unary<f_atan>},
      {"Cosh", op_unary<f_cosh>},
      {"Sinh", op_unary<f_sinh>},
      {"Acosh", op_unary<f_acosh>},
      {"Asinh", op_unary<f_asinh>},
      {"Atanh", op_unary<f_atanh>},
      {"Floor", op_unary<f_floor>},
      {"Ceil", op_unary<f_ceil>},
      {"Round", op_unary<f_round>},
      {"Sign", op_sign},
      {"IsInf", op_is_inf},
      {"IsNaN", op_is_nan},
      {"Min", op_min},
      {"Max", op_max},
      {"Sum", op_sum},
      {"Mean", op_mean},
      {"Mod", op_mod},
      {"BitShift", op_bit_shift},
      {"And", op_and},
      {"Or", op_or},
      {"Xor", op_xor},
      {"Not", op_not},
      {"GreaterOrEqual", op_greater_or_equal},
      {"LessOrEqual", op_less_or_equal},
  };
}

}  // namespace tessera::reference
