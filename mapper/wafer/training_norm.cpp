// A LayerNorm's backward pass at a kernel's chain ends (not RMSNorm's: check_training refuses it),
// and a residual's gradient (training.cpp; docs/wafer-compiler.md "Training"). The forward pass kept xhat (lnx<l>: the normalised value
// before the scale) and 1 / sqrt(var + eps) per row (lnr<l>). With dy the gradient of the
// LayerNorm's output, per chain end (its block of nb features, B rows):
//   dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy     (local: each feature's own)
//   dxhat  = dy gamma
//   m1     = mean over features of dxhat, m2 = mean over features of dxhat xhat   (along the chain
//            ends: each position's row sums, the edge chain to its last position, 1 / N there, the
//            broadcast back -- the forward pass's colors and DSDs, twice; RMSNorm has no m1)
//   dz     = rstd (dxhat - m1 - xhat m2)
// then the scale and shift are updated in place (SGD, with weight decay or a schedule as the bias).
// Padded features have xhat 0 (masked in the forward pass), gamma 0 and dy 0: they add nothing.
// A residual (kernel l adds the output of kernel p, held on the same PEs in the same blocks): the
// gradient of the sum, dz, is kept at bstart (drs<l>) and added to p's output gradient when the
// reduce of p + 1's input gradient has ended there.
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

// One pass along the edge: sums over the features of the columns `col`<n> (B rows each), chained
// to the last position, times 1 / N there, broadcast back into `into` (B values per position).
void edge_mean(const DenseKernel& k, const std::string& L, ProgramTemplate& t, const std::string& col, const std::string& into) {
  const std::string sm = "lnsm" + L;
  t.op(Op::fmovs, {sm, col + "_0"});
  for (int64_t n = 1; n < k.nb; ++n) t.op(Op::fadds, {sm, sm, col + "_" + std::to_string(n)});
  chain_step(t, "lnfirst" + L, "lnlast" + L, sm, "lnto" + L, "lnfr" + L, sm);
  t.if_("lnlast" + L);
  t.op(Op::fmuls, {"lncm" + L, sm, fnum(1.0 / static_cast<double>(k.N))});
  t.op_async(Op::fmovs, {"lnbo" + L, "lncm" + L});
  t.endif();
  t.op(Op::fmovs, {into, "lnbi" + L});
}

}  // namespace

int64_t residual_producer(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  return k.residual >= 0 ? c.kernels[static_cast<size_t>(k.residual)].src : -1;
}

int64_t residual_reader(const Compiled& c, size_t p) {
  for (size_t l = p + 1; l < c.kernels.size(); ++l)
    if (residual_producer(c, l) == static_cast<int64_t>(p)) return static_cast<int64_t>(l);
  return -1;
}

void norm_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (residual_producer(c, l) >= 0) {
    t.data("drs" + std::to_string(l), Elem::f32, k.B * k.nb, {}, -1, -1, "the residual's gradient, for its producer's output");
    t.mem1d("drsm" + std::to_string(l), "drs" + std::to_string(l));
  }
  if (!k.layernorm) return;
  const std::string L = std::to_string(l);
  const int64_t B = k.B, nb = k.nb;
  for (const char* a : {"lnm1", "lnm2"}) {  // the per-row means of dxhat and dxhat xhat, broadcast over the block's features
    t.data(a + L, Elem::f32, B);
    t.mem1d(a + std::string("m") + L, a + L);
    t.mem4d(a + std::string("b") + L, a + L, 0, {{B, 1}, {nb, 0}});
  }
  t.data("lndg" + L, Elem::f32, nb, {}, -1, -1, "the LayerNorm scale's gradient");
  t.mem1d("lndgm" + L, "lndg" + L);
  t.data("lndb" + L, Elem::f32, nb, {}, -1, -1, "the LayerNorm bias's gradient");
  t.mem1d("lndbm" + L, "lndb" + L);
  if (c.micro_batches > 1)
    for (const char* a : {"lnga", "lnba"}) {  // the gradients summed over the step's micro-batches
      t.data(a + L, Elem::f32, nb, {}, -1, -1, "a LayerNorm gradient summed over the step's micro-batches");
      t.mem1d(a + std::string("m") + L, a + L);
    }
  t.mem1d("lnqr" + L, "lnq" + L, 0, nb);  // a row of lnq (dy xhat)
  for (int64_t n = 0; n < nb; ++n) t.mem1d("lbd" + L + "_" + std::to_string(n), "dy" + L, n, B, nb);  // dy's columns
}

void norm_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), dy = "dym" + L, q = "lnqm" + L, xh = "lnxm" + L;
  if (!k.layernorm) {
    if (residual_producer(c, l) >= 0) t.op(Op::fmovs, {"drsm" + L, dy}, "the residual's gradient");
    return;
  }
  t.op(Op::fmuls, {q, dy, xh}, "LayerNorm backward: dy xhat");
  sum_rows(t, "lndgm" + L, "lnqr" + L, k.B, k.nb, "lg" + L);
  sum_rows(t, "lndbm" + L, "dyrow" + L, k.B, k.nb, "lb" + L);
  if (c.micro_batches > 1) {  // (the update waits for the step's last run: the verdict)
    t.op(Op::fadds, {"lngam" + L, "lngam" + L, "lndgm" + L});
    t.op(Op::fadds, {"lnbam" + L, "lnbam" + L, "lndbm" + L});
  }
  t.op(Op::fmuls, {dy, dy, "lngb" + L}, "dxhat = dy gamma");
  edge_mean(k, L, t, "lbd" + L, "lnm1m" + L);
  t.op(Op::fmuls, {q, dy, xh});
  edge_mean(k, L, t, "lqc" + L, "lnm2m" + L);
  t.op(Op::fmuls, {q, xh, "lnm2b" + L});
  t.op(Op::fsubs, {dy, dy, "lnm1b" + L});
  t.op(Op::fsubs, {dy, dy, q});
  t.op(Op::fmuls, {dy, dy, "lnrb" + L}, "dz = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))");
  if (k.ln_padded()) t.op(Op::fmuls, {dy, dy, "lnkb" + L}, "padded features' dz 0 (their -rstd m1 would move their zero weights)");
  if (residual_producer(c, l) >= 0) t.op(Op::fmovs, {"drsm" + L, dy}, "the residual's gradient");
}

// At kernel p's chain ends once its output gradient has arrived: a later residual's part added.
void residual_grad_ops(const Compiled& c, size_t p, ProgramTemplate& t) {
  const int64_t r = residual_reader(c, p);
  if (r >= 0) t.op(Op::fadds, {"dym" + std::to_string(p), "dym" + std::to_string(p), "drsm" + std::to_string(r)}, "plus the residual's gradient");
}

// Micro-batches, in the verdict task after the step's last run: the sums as the gradients, the sums
// back to 0.
void ln_sum_take_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  if (c.micro_batches <= 1) return;
  const std::string L = std::to_string(l);
  for (const bool gamma : {true, false}) {
    const std::string g = (gamma ? "lndgm" : "lndbm") + L, s = (gamma ? "lngam" : "lnbam") + L;
    t.op(Op::fmovs, {g, s});
    t.op(Op::fmovs, {s, fimm(0.0)});
  }
}

// The scale's and shift's updates (after the kernel's bias update): weight decay, then SGD at the
// constant or the step's learning rate, as the bias's.
void ln_update_ops(const Compiled& c, size_t l, double lr, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (!k.layernorm) return;
  const std::string L = std::to_string(l);
  for (const bool gamma : {true, false}) {
    if (!gamma && k.ln_beta_value.empty()) continue;  // (no bias: its zeros stay)
    const std::string g = (gamma ? "lndgm" : "lndbm") + L, p = (gamma ? "lngm" : "lnbm") + L;
    if (c.weight_decay != 0) t.op(Op::fmacs, {g, g, p, fnum(c.weight_decay)});
    if (c.lr_scheduled) {
      t.op(Op::fmuls, {"lrtm" + L, g, "lrb" + L});
      t.op(Op::fsubs, {p, p, "lrtm" + L});
    } else {
      t.op(Op::fmacs, {p, p, g, fnum(-lr)});
    }
  }
}

int64_t ln_verdict_cycles(const Compiled& c, size_t l, const WaferConfig& cfg) {
  if (!c.kernels[l].layernorm) return 0;
  ProgramTemplate u;
  ln_sum_take_ops(c, l, u);
  ln_update_ops(c, l, 0.01, u);
  return u.dsd_cycles(c.kernels[l].nb, cfg);
}

// The estimate: the local ops before and after the passes, the passes along the edge (ln_edge_pass)
// and the updates, per chain-end position (T: when each starts; advanced to its end).
void ln_backward_cycles(const Compiled& c, size_t l, const WaferConfig& cfg, std::vector<int64_t>& T) {
  const DenseKernel& k = c.kernels[l];
  const int64_t n = k.B * k.nb, B = k.B, nb = k.nb;
  auto d = [&](Op op, int64_t len) { return dsd_cycles(op, len, 1, cfg); };
  if (residual_producer(c, l) >= 0)
    for (auto& x : T) x += d(Op::fmovs, n);  // the residual's gradient kept
  if (!k.layernorm) return;
  const int64_t pre = d(Op::fmuls, n) + sum_rows_cycles(B, nb, cfg) * 2 + d(Op::fmuls, n) + (c.micro_batches > 1 ? 2 * d(Op::fadds, nb) : 0);
  for (auto& x : T) x += pre;
  ln_edge_pass(k, cfg, T, d(Op::fmuls, B));
  for (auto& x : T) x += d(Op::fmuls, n);
  ln_edge_pass(k, cfg, T, d(Op::fmuls, B));
  ProgramTemplate u;
  if (!c.verdict()) ln_update_ops(c, l, 0.01, u);  // (with micro-batches in the verdict task)
  const int64_t post = d(Op::fmuls, n) * (k.ln_padded() ? 3 : 2) + 2 * d(Op::fsubs, n) + u.dsd_cycles(nb, cfg);  // xhat m2, rstd (, the mask)
  for (auto& x : T) x += post;
}

}  // namespace tessera::wafer::detail
