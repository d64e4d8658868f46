// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12-13), with reductions
// none/sum/mean, class weights and ignore_index, over inputs [N, C] or [N, C, d1, ..., dk]. The
// mean with weights divides by the sum of the weights of the targets counted (the spec's rule);
// computed in fp64 and written in the input dtype.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// input [N, C, D...] (log-probabilities), target [N, D...] -> loss per element or reduced.
Tensor nll(const OpCall& c, const Tensor& input, const std::vector<double>& logp, const Tensor& target) {
  if (input.rank() < 2) fail(c, "input of shape " + shape_str(input.shape()) + " needs rank >= 2 (N, C, ...)");
  require_index(c, target, "target");
  Shape want = input.shape();
  want.erase(want.begin() + 1);
  if (target.shape() != want)
    fail(c, "target of shape " + shape_str(target.shape()) + " does not match input " + shape_str(input.shape()) +
                " (expected " + shape_str(want) + ")");
  const int64_t N = input.shape()[0], C = input.shape()[1], D = dims_product(input.shape(), 2, input.rank());
  const Tensor* weight = opt_in(c, 2);
  std::vector<double> w;
  if (weight) {
    if (weight->rank() != 1 || weight->numel() != C)
      fail(c, "weight of shape " + shape_str(weight->shape()) + " must be [C] = [" + std::to_string(C) + "]");
    w = weight->to_f64();
  }
  const std::string red = attrs(c).get_string("reduction", "mean");
  if (red != "none" && red != "sum" && red != "mean")
    fail(c, "attribute 'reduction' = '" + red + "' is not supported", "use none, sum or mean");
  const bool has_ignore = attrs(c).has("ignore_index");
  const int64_t ignore = attrs(c).get_int("ignore_index", 0);
  const auto t = target.to_i64();
  std::vector<double> loss(t.size());
  double total = 0, weight_sum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(n * D + d);
      const int64_t k = t[i];
      if (has_ignore && k == ignore) {
        loss[i] = 0;
        continue;
      }
      if (k < 0 || k >= C)
        fail(c, "target " + std::to_string(k) + " is outside the " + std::to_string(C) + " classes",
             has_ignore ? "" : "mark padding targets with ignore_index");
      const double wk = w.empty() ? 1.0 : w[static_cast<size_t>(k)];
      loss[i] = -logp[static_cast<size_t>((n * C + k) * D + d)] * wk;
      total += loss[i];
      weight_sum += wk;
    }
  if (red == "none") return from_f64(input.dtype(), target.shape(), loss);
  if (red == "sum") return from_f64(input.dtype(), {}, {total});
  // mean: over all elements without weights or ignore_index, else over the counted weights
  const double denom = w.empty() && !has_ignore ? static_cast<double>(loss.size()) : weight_sum;
  return from_f64(input.dtype(), {}, {total / denom});
}

std::vector<Tensor> op_nll_loss(const OpCall& c) {
  const Tensor& input = in(c, 0);
  require_float(c, input, "input");
  return {nll(c, input, input.to_f64(), in(c, 1))};
}

std::vector<Tensor> op_softmax_cross_entropy(const OpCall& c) {
  const Tensor& scores = in(c, 0);
  require_float(c, scores, "scores");
  if (scores.rank() < 2) fail(c, "scores of shape " + shape_str(scores.shape()) + " needs rank >= 2 (N, C, ...)");
  const int64_t N = scores.shape()[0], C = scores.shape()[1], D = dims_product(scores.shape(), 2, scores.rank());
  auto lp = scores.to_f64();
  for (int64_t n = 0; n < N; ++n)  // log_softmax over the class axis
    for (int64_t d = 0; d < D; ++d) {
      double* base = lp.data() + n * C * D + d;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < C; ++k) mx = std::max(mx, base[k * D]);
      double sum = 0;
      for (int64_t k = 0; k < C; ++k) sum += std::exp(base[k * D] - mx);
      const double lse = mx + std::log(sum);
      for (int64_t k = 0; k < C; ++k) base[k * D] -= lse;
    }
  std::vector<Tensor> out{nll(c, scores, lp, in(c, 1))};
  if (c.num_outputs > 1) out.push_back(from_f64(scores.dtype(), scores.shape(), lp));
  return out;
}

}  // namespace

std::vector<OpEntry> loss_ops() {
  return {{"NegativeLogLikelihoodLoss", op_nll_loss}, {"SoftmaxCrossEntropyLoss", op_softmax_cross_entropy}};
}

}  // namespace tessera::reference
