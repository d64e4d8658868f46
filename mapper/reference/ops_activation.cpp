// Activations beyond Relu/LeakyRelu/Sigmoid/Tanh/Gelu (ops_elementwise.cpp): HardSigmoid,
// HardSwish, Softplus, Softsign, Mish, Elu, Selu, Celu, ThresholdedRelu, PRelu, Shrink, and Dropout
// (deterministic: identity outside training, and in training with ratio 0).
#include <cmath>
#include <limits>

#include "mapper/reference/elementwise.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// log(1 + exp(x)) without overflow for large x.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

double float_attr(const OpCall& c, const char* name, double def) { return attrs(c).get_float(name, def); }

std::vector<Tensor> op_hard_sigmoid(const OpCall& c) {
  const double alpha = float_attr(c, "alpha", 0.2), beta = float_attr(c, "beta", 0.5);
  return unary_float(c, [=](double x) { return std::clamp(alpha * x + beta, 0.0, 1.0); });
}
std::vector<Tensor> op_hard_swish(const OpCall& c) {
  return unary_float(c, [](double x) { return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0); });
}
std::vector<Tensor> op_softplus(const OpCall& c) { return unary_float(c, softplus); }
std::vector<Tensor> op_softsign(const OpCall& c) {
  return unary_float(c, [](double x) { return x / (1.0 + std::fabs(x)); });
}
std::vector<Tensor> op_mish(const OpCall& c) {
  return unary_float(c, [](double x) { return x * std::tanh(softplus(x)); });
}
std::vector<Tensor> op_elu(const OpCall& c) {
  const double alpha = float_attr(c, "alpha", 1.0);
  return unary_float(c, [=](double x) { return x >= 0 ? x : alpha * std::expm1(x); });
}
std::vector<Tensor> op_selu(const OpCall& c) {
  // Defaults are the float32 constants of the spec.
  const double alpha = float_attr(c, "alpha", 1.67326319217681884765625);
  const double gamma = float_attr(c, "gamma", 1.05070102214813232421875);
  return unary_float(c, [=](double x) { return x > 0 ? gamma * x : gamma * alpha * std::expm1(x); });
}
std::vector<Tensor> op_celu(const OpCall& c) {
  const double alpha = float_attr(c, "alpha", 1.0);
  if (alpha == 0) fail(c, "attribute 'alpha' must not be 0");
  return unary_float(c, [=](double x) { return std::max(0.0, x) + std::min(0.0, alpha * std::expm1(x / alpha)); });
}
std::vector<Tensor> op_thresholded_relu(const OpCall& c) {
  const double alpha = float_attr(c, "alpha", 1.0);
  return unary_float(c, [=](double x) { return x > alpha ? x : 0.0; });
}

std::vector<Tensor> op_prelu(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& slope = in(c, 1);
  if (c.opset < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.numel() == x.shape()[1] && slope.numel() > 1) {
    // Before numpy broadcasting (opset 7), a slope of C values applies per channel (axis 1).
    Shape per_channel(static_cast<size_t>(x.rank() - 1), 1);
    per_channel[0] = slope.numel();
    const Tensor s = slope.reshaped(per_channel);
    OpCall c2 = c;
    c2.inputs = {&x, &s};
    return binary_arith(
        c2, [](double v, double k) { return v < 0 ? k * v : v; },
        [](int64_t v, int64_t k) { return v < 0 ? wrap_mul(k, v) : v; });
  }
  if (!broadcastable_to(slope.shape(), x.shape()))
    fail(c,
         "slope of shape " + shape_str(slope.shape()) + " does not broadcast to input X of shape " +
             shape_str(x.shape()),
         "PRelu broadcasts slope to X (numpy rules, X's shape unchanged)");
  return binary_arith(
      c, [](double v, double s) { return v < 0 ? s * v : v; },
      [](int64_t v, int64_t s) { return v < 0 ? wrap_mul(s, v) : v; });
}

std::vector<Tensor> op_shrink(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.dtype() == DType::boolean) fail(c, "input X has dtype bool; Shrink needs a numeric tensor");
  const double lambd = float_attr(c, "lambd", 0.5), bias = float_attr(c, "bias", 0.0);
  auto v = x.to_f64();
  for (double& e : v) e = e < -lambd ? e + bias : e > lambd ? e - bias : 0.0;
  return {to_dtype(x.dtype(), x.shape(), v)};
}

std::vector<Tensor> op_dropout(const OpCall& c) {
  const Tensor& x = in(c, 0);
  double ratio = float_attr(c, "ratio", 0.5);
  bool training = false;
  if (c.opset >= 12) {
    if (const Tensor* r = opt_in(c, 1)) ratio = f64_scalar(c, *r, "ratio");
    if (const Tensor* t = opt_in(c, 2)) training = f64_scalar(c, *t, "training_mode") != 0;
  }
  if (!(ratio >= 0 && ratio < 1)) fail(c, "ratio " + std::to_string(ratio) + " is outside [0, 1)");
  if (training && ratio > 0)
    fail(c, "training-mode Dropout with ratio " + std::to_string(ratio) + " draws a random mask",
         "the reference executor is deterministic: export the model in eval mode, or use ratio 0");
  std::vector<Tensor> out{x};
  if (c.num_outputs > 1) {
    // The mask keeps every element. Before opset 10 it has the input's dtype, later bool.
    const DType mt = c.opset < 10 ? x.dtype() : DType::boolean;
    out.push_back(Tensor::from_i64(x.shape(), std::vector<int64_t>(static_cast<size_t>(x.numel()), 1)).cast(mt));
  }
  return out;
}

}  // namespace

std::vector<OpEntry> activation_ops() {
  return {
      {"HardSigmoid", op_hard_sigmoid},
      {"HardSwish", op_hard_swish},
      {"Softplus", op_softplus},
      {"Softsign", op_softsign},
      {"Mish", op_mish},
      {"Elu", op_elu},
      {"Selu", op_selu},
      {"Celu", op_celu},
      {"ThresholdedRelu", op_thresholded_relu},
      {"PRelu", op_prelu},
      {"Shrink", op_shrink},
      {"Dropout", op_dropout},
  };
}

}  // namespace tessera::reference
