// Recurrent layers: RNN, GRU and LSTM (ONNX opsets 7-14): forward, reverse and bidirectional,
// optional biases, initial states, per-batch sequence lengths, LSTM peepholes and input_forget,
// GRU linear_before_reset, cell clipping, the activation functions of the spec, and layout 1
// (batch first). Every step computes in fp64; outputs are written in X's dtype.
#include <algorithm>
#include <cmath>

#include "mapper/reference/elementwise.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

enum class Cell { rnn, gru, lstm };

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  double operator()(double x) const {
    if (name == "Sigmoid") return sigmoid(x);
    if (name == "Tanh") return std::tanh(x);
    if (name == "Relu") return std::max(x, 0.0);
    if (name == "Affine") return alpha * x + beta;
    if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
    if (name == "ThresholdedRelu") return x > alpha ? x : 0.0;
    if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
    if (name == "HardSigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
    if (name == "Elu") return x >= 0 ? x : alpha * std::expm1(x);
    if (name == "Softsign") return x / (1 + std::fabs(x));
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));  // Softplus
  }
};

// The activations of every direction, with their alpha/beta consumed in order by the functions
// that take them (defaults as in the corresponding ONNX operators).
std::vector<Activation> activations(const OpCall& c, const std::vector<std::string>& defaults, int64_t dirs) {
  auto names = attrs(c).get_strings("activations", {});
  const size_t per = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() == per && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  if (names.size() != per * static_cast<size_t>(dirs))
    fail(c, "attribute 'activations' has " + std::to_string(names.size()) + " names; expected " +
                std::to_string(per * static_cast<size_t>(dirs)) + " (" + std::to_string(per) + " per direction)");
  const auto alphas = attrs(c).get_floats("activation_alpha", {});
  const auto betas = attrs(c).get_floats("activation_beta", {});
  size_t ia = 0, ib = 0;
  std::vector<Activation> r;
  for (const auto& n : names) {
    Activation a{n};
    const bool takes_alpha = n == "Affine" || n == "LeakyRelu" || n == "ThresholdedRelu" || n == "ScaledTanh" ||
                             n == "HardSigmoid" || n == "Elu";
    const bool takes_beta = n == "Affine" || n == "ScaledTanh" || n == "HardSigmoid";
    const double def_alpha = n == "LeakyRelu" ? 0.01 : n == "HardSigmoid" ? 0.2 : 1.0;
    const double def_beta = n == "HardSigmoid" ? 0.5 : 0.0;
    if (!takes_alpha && !takes_beta && n != "Sigmoid" && n != "Tanh" && n != "Relu" && n != "Softsign" &&
        n != "Softplus")
      fail(c, "activation '" + n + "' is not supported",
           "use Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign or "
           "Softplus");
    a.alpha = takes_alpha ? (ia < alphas.size() ? alphas[ia++] : def_alpha) : 0;
    a.beta = takes_beta ? (ib < betas.size() ? betas[ib++] : def_beta) : 0;
    r.push_back(a);
  }
  return r;
}

std::vector<Tensor> recurrent(const OpCall& c, Cell cell) {
  const Tensor& X = in(c, 0);
  const Tensor& W = in(c, 1);
  const Tensor& R = in(c, 2);
  require_float(c, X, "input X");
  require_same_dtype(c, X, W);
  require_same_dtype(c, X, R);
  const int64_t G = cell == Cell::rnn ? 1 : cell == Cell::gru ? 3 : 4;  // gates
  const auto& at = attrs(c);
  const std::string direction = at.get_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    fail(c, "attribute 'direction' = '" + direction + "' is not supported", "use forward, reverse or bidirectional");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = c.opset >= 14 && at.get_int("layout", 0) != 0;
  if (X.rank() != 3) fail(c, "input X of shape " + shape_str(X.shape()) + " must be 3-D");
  const int64_t S = X.shape()[batch_first ? 1 : 0], B = X.shape()[batch_first ? 0 : 1], I = X.shape()[2];
  if (R.rank() != 3 || R.shape()[0] != dirs || R.shape()[1] != G * R.shape()[2])
    fail(c, "R of shape " + shape_str(R.shape()) + " does not fit " + std::to_string(dirs) + " direction(s) and " +
                std::to_string(G) + " gate(s)");
  const int64_t H = R.shape()[2];
  if (at.has("hidden_size") && at.get_int("hidden_size", H) != H)
    fail(c, "attribute 'hidden_size' = " + std::to_string(at.get_int("hidden_size", H)) + " does not match R " +
                shape_str(R.shape()));
  if (W.shape() != Shape{dirs, G * H, I})
    fail(c, "W of shape " + shape_str(W.shape()) + " does not match " + shape_str({dirs, G * H, I}));
  auto optional = [&](size_t i, const Shape& want, const char* what) {
    const Tensor* t = opt_in(c, i);
    if (!t) return std::vector<double>{};
    if (t->shape() != want)
      fail(c, std::string(what) + " of shape " + shape_str(t->shape()) + " does not match " + shape_str(want));
    return t->to_f64();
  };
  const auto bias = optional(3, {dirs, 2 * G * H}, "B");
  std::vector<int64_t> lens(static_cast<size_t>(B), S);
  if (const Tensor* sl = opt_in(c, 4)) {
    lens = int_values(c, *sl, "sequence_lens");
    if (static_cast<int64_t>(lens.size()) != B)
      fail(c, "sequence_lens has " + std::to_string(lens.size()) + " values for a batch of " + std::to_string(B));
    for (int64_t l : lens)
      if (l < 0 || l > S)
        fail(c, "sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(S) + "]");
  }
  const Shape state_shape = batch_first ? Shape{B, dirs, H} : Shape{dirs, B, H};
  const auto h0 = optional(5, state_shape, "initial_h");
  const auto c0 = cell == Cell::lstm ? optional(6, state_shape, "initial_c") : std::vector<double>{};
  const auto peep = cell == Cell::lstm ? optional(7, {dirs, 3 * H}, "P") : std::vector<double>{};
  const double clip = at.get_float("clip", 0.0);
  const bool input_forget = cell == Cell::lstm && at.get_int("input_forget", 0) != 0;
  const bool lbr = cell == Cell::gru && at.get_int("linear_before_reset", 0) != 0;
  const auto acts = activations(c,
                                cell == Cell::rnn   ? std::vector<std::string>{"Tanh"}
                                : cell == Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                    : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"},
                                dirs);
  const size_t per = acts.size() / static_cast<size_t>(dirs);
  const auto xv = X.to_f64(), wv = W.to_f64(), rv = R.to_f64();
  // Offsets in the batch-first or sequence-first layouts.
  auto x_at = [&](int64_t t, int64_t b) { return (batch_first ? b * S + t : t * B + b) * I; };
  auto state_at = [&](int64_t d, int64_t b) { return (batch_first ? b * dirs + d : d * B + b) * H; };
  auto y_at = [&](int64_t t, int64_t d, int64_t b) {
    return (batch_first ? (b * S + t) * dirs + d : (t * dirs + d) * B + b) * H;
  };
  std::vector<double> Y(static_cast<size_t>(S * dirs * B * H), 0.0), Yh(static_cast<size_t>(dirs * B * H)),
      Yc(Yh.size());
  auto clipped = [clip](double v) { return clip > 0 ? std::clamp(v, -clip, clip) : v; };
  std::vector<double> xw(static_cast<size_t>(G * H)), hr(static_cast<size_t>(G * H)), h(static_cast<size_t>(H)),
      cs(static_cast<size_t>(H)), rh(static_cast<size_t>(H)), cn(static_cast<size_t>(H)), zg(static_cast<size_t>(H)),
      rg(static_cast<size_t>(H));
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const double* Wd = wv.data() + d * G * H * I;
    const double* Rd = rv.data() + d * G * H * H;
    const Activation* act = acts.data() + static_cast<size_t>(d) * per;
    auto wb = [&](int64_t g) { return bias.empty() ? 0.0 : bias[static_cast<size_t>(d * 2 * G * H + g)]; };
    auto rb = [&](int64_t g) { return bias.empty() ? 0.0 : bias[static_cast<size_t>(d * 2 * G * H + G * H + g)]; };
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = h0.empty() ? 0.0 : h0[static_cast<size_t>(state_at(d, b) + j)];
        cs[static_cast<size_t>(j)] = c0.empty() ? 0.0 : c0[static_cast<size_t>(state_at(d, b) + j)];
      }
      const int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        const double* x = xv.data() + x_at(t, b);
        for (int64_t g = 0; g < G * H; ++g) {
          double a = wb(g), e = rb(g);
          for (int64_t i = 0; i < I; ++i) a += x[i] * Wd[g * I + i];
          for (int64_t j = 0; j < H; ++j) e += h[static_cast<size_t>(j)] * Rd[g * H + j];
          xw[static_cast<size_t>(g)] = a;
          hr[static_cast<size_t>(g)] = e;
        }
        auto gate = [&](int64_t k, int64_t j) {
          return xw[static_cast<size_t>(k * H + j)] + hr[static_cast<size_t>(k * H + j)];
        };
        for (int64_t j = 0; j < H; ++j) {
          const size_t u = static_cast<size_t>(j);
          if (cell == Cell::rnn) {
            rh[u] = act[0](clipped(gate(0, j)));
          } else if (cell == Cell::lstm) {  // gates i, o, f, c; peepholes i, o, f
            auto p = [&](int64_t k) { return peep.empty() ? 0.0 : peep[static_cast<size_t>(d * 3 * H + k * H + j)]; };
            const double ig = act[0](clipped(gate(0, j) + p(0) * cs[u]));
            const double fg = input_forget ? 1 - ig : act[0](clipped(gate(2, j) + p(2) * cs[u]));
            const double cand = act[1](clipped(gate(3, j)));
            cn[u] = fg * cs[u] + ig * cand;
            const double og = act[0](clipped(gate(1, j) + p(1) * cn[u]));
            rh[u] = og * act[2](cn[u]);
          } else {  // GRU gates z, r, h
            zg[u] = act[0](clipped(gate(0, j)));
            rg[u] = act[0](clipped(gate(1, j)));
          }
        }
        if (cell == Cell::gru)
          for (int64_t j = 0; j < H; ++j) {
            const size_t u = static_cast<size_t>(j);
            double pre = xw[static_cast<size_t>(2 * H + j)];
            if (lbr) {  // r * (h_prev R_h^T + Rb_h)
              pre += rg[u] * hr[static_cast<size_t>(2 * H + j)];
            } else {  // (r . h_prev) R_h^T + Rb_h
              pre += rb(2 * H + j);
              for (int64_t k = 0; k < H; ++k)
                pre += rg[static_cast<size_t>(k)] * h[static_cast<size_t>(k)] * Rd[(2 * H + j) * H + k];
            }
            rh[u] = (1 - zg[u]) * act[1](clipped(pre)) + zg[u] * h[u];
          }
        for (int64_t j = 0; j < H; ++j) {
          const size_t u = static_cast<size_t>(j);
          h[u] = rh[u];
          if (cell == Cell::lstm) cs[u] = cn[u];
          Y[static_cast<size_t>(y_at(t, d, b) + j)] = h[u];
        }
      }
      for (int64_t j = 0; j < H; ++j) {
        Yh[static_cast<size_t>(state_at(d, b) + j)] = h[static_cast<size_t>(j)];
        Yc[static_cast<size_t>(state_at(d, b) + j)] = cs[static_cast<size_t>(j)];
      }
    }
  }
  std::vector<Tensor> out;
  out.push_back(from_f64(X.dtype(), batch_first ? Shape{B, S, dirs, H} : Shape{S, dirs, B, H}, Y));
  if (c.num_outputs > 1) out.push_back(from_f64(X.dtype(), state_shape, Yh));
  if (c.num_outputs > 2 && cell == Cell::lstm) out.push_back(from_f64(X.dtype(), state_shape, Yc));
  return out;
}

std::vector<Tensor> op_rnn(const OpCall& c) { return recurrent(c, Cell::rnn); }
std::vector<Tensor> op_gru(const OpCall& c) { return recurrent(c, Cell::gru); }
std::vector<Tensor> op_lstm(const OpCall& c) { return recurrent(c, Cell::lstm); }

}  // namespace

std::vector<OpEntry> rnn_ops() { return {{"RNN", op_rnn}, {"GRU", op_gru}, {"LSTM", op_lstm}}; }

}  // namespace tessera::reference
