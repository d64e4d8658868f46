// Elementwise operators: binary arithmetic and comparisons with numpy broadcasting, unary math and
// activations, Clip and Where. Floats compute in fp64 and are written back in the input dtype;
// integer inputs compute in int64 (wrapping) and are written back in their own dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mapper/reference/elementwise.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) return 0;  // numpy yields 0 (with a warning); never trap
  if (b == -1) return wrap_sub(0, a);
  return a / b;  // truncates toward zero, like ONNX's reference (true division then cast)
}
int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? (e % 2 ? -1 : 1) : 0);
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r = wrap_mul(r, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return r;
}

std::vector<Tensor> op_add(const OpCall& c) {
  return binary_arith(c, [](double a, double b) { return a + b; }, wrap_add);
}
std::vector<Tensor> op_sub(const OpCall& c) {
  return binary_arith(c, [](double a, double b) { return a - b; }, wrap_sub);
}
std::vector<Tensor> op_mul(const OpCall& c) {
  return binary_arith(c, [](double a, double b) { return a * b; }, wrap_mul);
}
std::vector<Tensor> op_div(const OpCall& c) {
  return binary_arith(c, [](double a, double b) { return a / b; }, int_div);
}
std::vector<Tensor> op_pow(const OpCall& c) {
  // Base and exponent may have different types (T, T1); the output has the base's type.
  return binary_arith(c, [](double a, double b) { return std::pow(a, b); }, int_pow, /*same_dtype=*/false);
}

std::vector<Tensor> op_equal(const OpCall& c) {
  return compare(c, [](auto a, auto b) { return a == b; });
}
std::vector<Tensor> op_less(const OpCall& c) {
  return compare(c, [](auto a, auto b) { return a < b; });
}
std::vector<Tensor> op_greater(const OpCall& c) {
  return compare(c, [](auto a, auto b) { return a > b; });
}

std::vector<Tensor> op_sqrt(const OpCall& c) { return unary_float(c, [](double x) { return std::sqrt(x); }); }
std::vector<Tensor> op_exp(const OpCall& c) { return unary_float(c, [](double x) { return std::exp(x); }); }
std::vector<Tensor> op_log(const OpCall& c) { return unary_float(c, [](double x) { return std::log(x); }); }
std::vector<Tensor> op_erf(const OpCall& c) { return unary_float(c, [](double x) { return std::erf(x); }); }
std::vector<Tensor> op_reciprocal(const OpCall& c) {
  return unary_float(c, [](double x) { return 1.0 / x; });
}
std::vector<Tensor> op_sigmoid(const OpCall& c) { return unary_float(c, sigmoid); }
std::vector<Tensor> op_tanh(const OpCall& c) { return unary_float(c, [](double x) { return std::tanh(x); }); }
std::vector<Tensor> op_neg(const OpCall& c) {
  return unary_any(c, [](double x) { return -x; }, [](int64_t x) { return wrap_sub(0, x); });
}
std::vector<Tensor> op_abs(const OpCall& c) {
  return unary_any(c, [](double x) { return std::fabs(x); }, [](int64_t x) { return x < 0 ? wrap_sub(0, x) : x; });
}
std::vector<Tensor> op_relu(const OpCall& c) {
  return unary_any(c, [](double x) { return x > 0 ? x : 0.0; }, [](int64_t x) { return x > 0 ? x : int64_t{0}; });
}
std::vector<Tensor> op_leaky_relu(const OpCall& c) {
  const double alpha = attrs(c).get_float("alpha", 0.01);
  return unary_float(c, [alpha](double x) { return x >= 0 ? x : alpha * x; });
}
std::vector<Tensor> op_gelu(const OpCall& c) {
  const std::string approx = attrs(c).get_string("approximate", "none");
  if (approx == "none")
    return unary_float(c, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); });
  if (approx == "tanh")
    return unary_float(c, [](double x) {
      const double k = std::sqrt(2.0 / 3.14159265358979323846);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    });
  fail(c, "attribute 'approximate' = '" + approx + "' is not supported", "use \"none\" or \"tanh\"");
}

std::vector<Tensor> op_clip(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const bool fl = is_float(x.dtype());
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  int64_t ilo = std::numeric_limits<int64_t>::min(), ihi = std::numeric_limits<int64_t>::max();
  if (c.opset < 11) {
    lo = attrs(c).get_float("min", lo);
    hi = attrs(c).get_float("max", hi);
  } else {
    auto bound = [&](size_t i, double& f, int64_t& iv) {
      const Tensor* t = opt_in(c, i);
      if (!t) return;
      if (t->numel() != 1)
        fail(c, std::string(i == 1 ? "min" : "max") + " must be a scalar, got shape " + shape_str(t->shape()));
      if (t->dtype() != x.dtype())
        fail(c, std::string(i == 1 ? "min" : "max") + " has dtype " + std::string(dtype_name(t->dtype())) +
                    " but input has " + std::string(dtype_name(x.dtype())));
      if (fl) f = t->to_f64()[0];
      else iv = t->to_i64()[0];
    };
    bound(1, lo, ilo);
    bound(2, hi, ihi);
  }
  if (fl) {
    auto v = x.to_f64();
    for (double& e : v)
      if (!std::isnan(e)) e = std::min(std::max(e, lo), hi);
    return {from_f64(x.dtype(), x.shape(), v)};
  }
  auto v = x.to_i64();
  for (int64_t& e : v) e = std::min(std::max(e, ilo), ihi);
  return {from_i64_as(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_where(const OpCall& c) {
  const Tensor& cond = in(c, 0);
  const Tensor& x = in(c, 1);
  const Tensor& y = in(c, 2);
  if (cond.dtype() != DType::boolean)
    fail(c, "condition has dtype " + std::string(dtype_name(cond.dtype())) + ", expected bool");
  require_same_dtype(c, x, y);
  const Shape out = broadcast_shapes(c, broadcast_shapes(c, cond.shape(), x.shape()), y.shape());
  const auto mc = broadcast_map(cond.shape(), out);
  const auto mx = broadcast_map(x.shape(), out);
  const auto my = broadcast_map(y.shape(), out);
  Tensor r(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  const auto cv = cond.as<bool>();
  for (size_t i = 0; i < mc.size(); ++i) {
    const bool take_x = cv[static_cast<size_t>(mc[i])];
    const std::byte* src = take_x ? x.data() + static_cast<size_t>(mx[i]) * es : y.data() + static_cast<size_t>(my[i]) * es;
    std::memcpy(r.data() + i * es, src, es);
  }
  return {std::move(r)};
}

}  // namespace

std::vector<OpEntry> elementwise_ops() {
  return {
      {"Add", op_add},         {"Sub", op_sub},         {"Mul", op_mul},
      {"Div", op_div},         {"Pow", op_pow},         {"Equal", op_equal},
      {"Less", op_less},       {"Greater", op_greater}, {"Sqrt", op_sqrt},
      {"Exp", op_exp},         {"Log", op_log},         {"Erf", op_erf},
      {"Neg", op_neg},         {"Abs", op_abs},         {"Reciprocal", op_reciprocal},
      {"Relu", op_relu},       {"LeakyRelu", op_leaky_relu}, {"Sigmoid", op_sigmoid},
      {"Tanh", op_tanh},       {"Gelu", op_gelu},       {"Clip", op_clip},
      {"Where", op_where},
  };
}

}  // namespace tessera::reference
