// PE programs of the chain-end post-ops that span a row of outputs (compile.hpp;
// docs/wafer-compiler.md "What it maps", "Transformers"): Softmax, LayerNorm and multi-head attention.
#include <algorithm>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// Softmax over the N outputs of each sample at the (single) chain end: m = max, e = exp(z - m)
// (exp_ops), s = sum e (in [1, N]), y = e / s (recip_ops). kSoftmaxOps(N) operations.
void softmax_program(ProgramTemplate& t, const DenseKernel& k, const std::string& L) {
  const int64_t N = k.N;
  auto z = [&](int64_t c) { return "sz" + L + "_" + std::to_string(c); };
  auto e = [&](int64_t c) { return "sx" + L + "_" + std::to_string(c); };
  t.op(Op::fmovs, {"sm" + L, z(0)});
  for (int64_t cc = 1; cc < N; ++cc) t.op(Op::fmaxs, {"sm" + L, "sm" + L, z(cc)});
  for (int64_t cc = 0; cc < N; ++cc) t.op(Op::fsubs, {e(cc), z(cc), "sm" + L});
  exp_ops(t, "sem" + L, "stm" + L);
  t.op(Op::fmovs, {"ss" + L, e(0)});
  for (int64_t cc = 1; cc < N; ++cc) t.op(Op::fadds, {"ss" + L, "ss" + L, e(cc)});
  if (k.log_softmax) {
    // LogSoftmax: z - (max + ln s), ln s for s in [1, N] by Newton's iteration y += s exp(-y) - 1
    // from 2 (s - 1) / (s + 1), five times (loss.cpp's, accurate for N <= 16).
    const std::string s = "ss" + L, y = "sr" + L, v = "su" + L, w = "sw" + L;
    t.op(Op::fadds, {v, s, fimm(1.0)});
    recip_ops(t, y, v, w, 2.0, static_cast<double>(N) + 1.0);
    t.op(Op::fadds, {v, s, fimm(-1.0)});
    t.op(Op::fmuls, {y, y, v});
    t.op(Op::fmuls, {y, y, fimm(2.0)});
    for (int i = 0; i < 5; ++i) {
      t.op(Op::fmuls, {w, y, fimm(-1.0)});
      exp_ops(t, w, v);
      t.op(Op::fmuls, {w, w, s});
      t.op(Op::fadds, {y, y, w});
      t.op(Op::fadds, {y, y, fimm(-1.0)});
    }
    t.op(Op::fadds, {"sm" + L, "sm" + L, y});
    for (int64_t cc = 0; cc < N; ++cc) t.op(Op::fsubs, {z(cc), z(cc), "sm" + L});
    return;
  }
  recip_ops(t, "sr" + L, "ss" + L, "su" + L, 1.0, static_cast<double>(N));
  for (int64_t cc = 0; cc < N; ++cc) t.op(Op::fmuls, {z(cc), e(cc), "sr" + L});
}

// LayerNorm at kernel l's chain ends (in `red`, after bias, activation and residual): row sums
// summed along the edge, the mean broadcast back and subtracted; the squared deviations' sums
// likewise, 1 / sqrt(var + eps) by kRsqrtIters Newton steps from 0.01 at the edge's end, broadcast
// back; then the scale and bias.
void ln_program(const DenseKernel& k, size_t l, ProgramTemplate& t, bool keep_xh) {
  const std::string L = std::to_string(l);
  const int64_t nb = k.nb;
  const std::string sm = "lnsm" + L, y = "yall" + L;
  auto sums = [&](const std::string& col) {
    t.op(Op::fmovs, {sm, col + L + "_0"});
    for (int64_t n = 1; n < nb; ++n) t.op(Op::fadds, {sm, sm, col + L + "_" + std::to_string(n)});
    chain_step(t, "lnfirst" + L, "lnlast" + L, sm, "lnto" + L, "lnfr" + L, sm);
  };
  const Operand invn = fnum(1.0 / static_cast<double>(k.N));
  if (k.ln_premask()) t.op(Op::fmuls, {y, y, "lnkb" + L}, "padded features back to 0 (a function before the LayerNorm with f(0) != 0)");
  if (!k.rms) {  // (RMSNorm: no mean; padded features are 0 already)
    sums("lyc");
    t.if_("lnlast" + L);
    t.op(Op::fmuls, {"lncm" + L, sm, invn});
    t.op_async(Op::fmovs, {"lnbo" + L, "lncm" + L});
    t.endif();
    t.op(Op::fmovs, {"lnrm" + L, "lnbi" + L});
    t.op(Op::fsubs, {y, y, "lnrb" + L});
    if (k.ln_padded()) t.op(Op::fmuls, {y, y, "lnkb" + L}, "padded features stay 0");
  }
  t.op(Op::fmuls, {"lnqm" + L, y, y});
  sums("lqc");
  t.if_("lnlast" + L);
  t.op(Op::fmuls, {"lntm" + L, sm, invn});
  t.op(Op::fadds, {"lntm" + L, "lntm" + L, fnum(k.ln_eps)});
  rsqrt_ops(t, "lncm" + L, "lntm" + L, sm);
  t.op_async(Op::fmovs, {"lnbo" + L, "lncm" + L});
  t.endif();
  t.op(Op::fmovs, {"lnrm" + L, "lnbi" + L});
  t.op(Op::fmuls, {y, y, "lnrb" + L});
  if (keep_xh) t.op(Op::fmovs, {"lnxm" + L, y}, "xhat, for the backward pass");
  t.op(Op::fmuls, {y, y, "lngb" + L});
  if (!k.rms) t.op(Op::fadds, {y, y, "lnbb" + L});
}

// GroupNorm at kernel l's chain ends, right after the bias: y is [S samples, P positions, nb
// channels], ng = nb / gs groups of gs channels. Per sample and channel the sum over the positions
// (P ops over S nb: gy<l>_<p> walks position p of every sample), per group the sum of its channels
// (gs ops over S ng: gsg<l>_<i> walks channel i of every group), times 1 / (P gs): the mean, taken
// from every value (one 4-D walk, the mean broadcast over positions and channels by zero strides);
// the squares' sums likewise (a product per position into gt<l>), + eps, 1 / sqrt by wide_ops (fp32's
// range), and the product.
void gn_program(const DenseKernel& k, size_t l, ProgramTemplate& t) {
  const std::string L = std::to_string(l);
  const int64_t P = k.B / k.samples, gs = k.gn_size;
  const std::string sum = "gsum" + L, mu = "gmu" + L, sq = "gt" + L;
  auto row = [&](int64_t p) { return "gy" + L + "_" + std::to_string(p); };
  auto group_sums = [&] {
    t.op(Op::fmovs, {mu, "gsg" + L + "_0"});
    for (int64_t i = 1; i < gs; ++i) t.op(Op::fadds, {mu, mu, "gsg" + L + "_" + std::to_string(i)});
  };
  t.op(Op::fmovs, {sum, row(0)});
  for (int64_t p = 1; p < P; ++p) t.op(Op::fadds, {sum, sum, row(p)});
  group_sums();
  const Operand inv = fnum(1.0 / static_cast<double>(P * gs));
  t.op(Op::fmuls, {mu, mu, inv});
  t.op(Op::fsubs, {"gyw" + L, "gyw" + L, "gmb" + L}, "the group's mean from every value");
  t.op(Op::fmuls, {sum, row(0), row(0)});
  for (int64_t p = 1; p < P; ++p) {
    t.op(Op::fmuls, {sq, row(p), row(p)});
    t.op(Op::fadds, {sum, sum, sq});
  }
  group_sums();
  t.op(Op::fmacs, {mu, fnum(k.gn_eps), mu, inv}, "the variance + eps");
  wide_ops(t, true, "grs" + L, mu, "gwx" + L, "gwf" + L, "gwm" + L, "gwt" + L);
  t.op(Op::fmuls, {"gyw" + L, "gyw" + L, "grb" + L}, "times 1 / sqrt(var + eps)");
}

int64_t gn_cycles(const DenseKernel& k, const WaferConfig& cfg) {
  const int64_t P = k.B / k.samples, gs = k.gn_size, S = k.samples, nb = k.nb, ng = k.gn_groups();
  auto d = [&](Op op, int64_t len, int64_t stride = 1) { return dsd_cycles(op, len, stride, cfg); };
  // (the group sums walk channels gs apart; the broadcasts' innermost stride is 0)
  const int64_t groups = d(Op::fmovs, S * ng, gs) + (gs - 1) * d(Op::fadds, S * ng, gs);
  ProgramTemplate w;
  wide_ops(w, true, "r", "v", "x", "f", "m", "t");
  return d(Op::fmovs, S * nb) + (P - 1) * d(Op::fadds, S * nb) + groups + d(Op::fmuls, S * ng) + d(Op::fsubs, k.B * nb, 0) +  // the mean
         d(Op::fmuls, S * nb) + (P - 1) * (d(Op::fmuls, S * nb) + d(Op::fadds, S * nb)) + groups + d(Op::fmacs, S * ng) +  // the variance
         w.dsd_cycles(S * ng, cfg) + d(Op::fmuls, k.B * nb, 0);
}

// Queues: an async op runs on the microthread of its queue number, and weight loads keep input
// queues 2 and 3's microthreads busy for long stretches, so the broadcasts that other PEs wait for
// in a blocking receive (LayerNorm's on output queue 5, attention's on 4) use other numbers; the
// chains' blocking sends use output queue 2 (blocking ops need no microthread).
// Multi-head attention at the chain end of the kernel computing V (S = attn_keys() rows per sample;
// attn_queries() query rows, in blocks of Sq: cross-attention's differ from the keys'),
// for each (sample, head) pair in the PE's block (rotary embeddings on Q and K first): scores[s, t]
// = sum_j Q[s, j] K[t, j] (per j one product of two broadcast walks, S x S), times the scale, plus
// the mask; softmax over t (row max, exp_ops, row sum, recip_ops
// over [1, S]); out[s, j] = sum_t P[s, t] V[t, j] (per t one product of broadcast walks, S x dh).
void attention_program(const DenseKernel& k, size_t l, int rc, ProgramTemplate& t, bool keep_p) {
  const std::string L = std::to_string(l);
  const int64_t fb = k.feat_nb(), S = k.attn_keys(), Sq = k.attn_rows(), nq = k.attn_queries() / Sq, g = k.attn_group(), w = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
  const int64_t rs = k.attn_rstep();  // (a batch: rows between a sample's consecutive rows)
  // Query blocks of Sq rows, one after another: the scores of a block are Sq x S. The kernel's own
  // x-task registers: its counter (0 between its x tasks) counts the blocks, its scratch holds the
  // offset; the counter is back at 0 at the end. Fused Q, K, V (rows of nb = 3 fb): the output's
  // rows (fb) move by a different offset, kept in the kernel's sample counter (0 between its x
  // tasks, set back to 0 at the end).
  const Operand rq = reg(rc), ro = reg(rc + 2), rv = fb != k.nb ? reg(rc + 1) : ro;
  const std::string sc = "ascm" + L, tm = "atmm" + L;
  if (nq > 1) {
    t.op(Op::mov, {rq, imm(0)});
    t.label("ablk" + L);
    if (!k.attn_mask.empty()) {  // the mask's rows of this query block
      t.op(Op::mul, {ro, rq, imm(Sq * S)});
      t.op(Op::dsd_off, {"amk" + L, ro});
    }
    t.op(Op::mul, {ro, rq, imm(Sq * rs * k.nb)});
    if (rv != ro) t.op(Op::mul, {rv, rq, imm(Sq * rs * fb)});
  }
  // Rotary embeddings, in place on Q and K: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]
  // per head -- the halves into rtm (the first negated), x times cos, plus rtm.
  for (const bool isq : {true, false}) {
    if ((isq ? k.attn_q_cos : k.attn_k_cos).empty()) continue;
    const std::string X = isq ? "q" : "k";
    t.op(Op::fmuls, {"rtma" + L, "r" + X + "b" + L, "rs" + X + "a" + L}, "rotary embeddings of " + std::string(isq ? "Q" : "K"));
    t.op(Op::fnegs, {"rtma" + L, "rtma" + L});
    t.op(Op::fmuls, {"rtmb" + L, "r" + X + "a" + L, "rs" + X + "b" + L});
    t.op(Op::fmuls, {"r" + X + "f" + L, "r" + X + "f" + L, "rc" + X + "f" + L});
    t.op(Op::fadds, {"r" + X + "f" + L, "r" + X + "f" + L, "rtmf" + L});
  }
  auto acol = [&](int64_t c) { return "acol" + L + "_" + std::to_string(c); };
  for (int64_t hb = 0; hb < k.attn_samples * hp; ++hb) {  // (sample, head) pairs
    const std::string H = L + "_" + std::to_string(hb);
    auto aq = [&](int64_t j) { return "aq" + H + "_" + std::to_string(j); };
    auto ak = [&](int64_t j) { return "ak" + H + "_" + std::to_string(j); };
    if (nq > 1) {
      for (int64_t j = 0; j < w; ++j) t.op(Op::dsd_off, {aq(j), ro});
      t.op(Op::dsd_off, {"ao" + H, rv});
    }
    t.op(Op::fmuls, {sc, aq(0), ak(0)});
    for (int64_t j = 1; j < w; ++j) {
      t.op(Op::fmuls, {tm, aq(j), ak(j)});
      t.op(Op::fadds, {sc, sc, tm});
    }
    if (g > 1) {  // the head's partial scores summed along its group, to the group's last PE
      chain_step(t, "agfirst" + L, "aglast" + L, sc, "aton" + L, "afr" + L, sc);
      t.if_("aglast" + L);
    }
    t.op(Op::fmuls, {sc, sc, fnum(k.attn_scale)});
    if (!k.attn_mask.empty()) t.op(Op::fadds, {sc, sc, "amk" + L}, "the mask (a causal one: -inf above the diagonal)");
    t.op(Op::fmovs, {"amm" + L, acol(0)});
    for (int64_t c = 1; c < S; ++c) t.op(Op::fmaxs, {"amm" + L, "amm" + L, acol(c)});
    t.op(Op::fsubs, {sc, sc, "amb" + L});
    exp_ops(t, sc, tm);
    t.op(Op::fmovs, {"asm" + L, acol(0)});
    for (int64_t c = 1; c < S; ++c) t.op(Op::fadds, {"asm" + L, "asm" + L, acol(c)});
    recip_ops(t, "arm" + L, "asm" + L, "aum" + L, 1.0, static_cast<double>(S));
    t.op(Op::fmuls, {sc, sc, "arb" + L});
    if (keep_p && g == 1) t.op(Op::fmovs, {"aPh" + H, sc}, "P, for the backward pass");
    if (g > 1) {  // P back to the group (the last PE's own copy through its ramp) into atm
      t.op_async(Op::fmovs, {"abo" + L, sc});
      t.endif();
      t.op(Op::fmovs, {tm, "abi" + L});
      if (keep_p) t.op(Op::fmovs, {"aPh" + H, tm}, "P, for the backward pass");
    }
    auto ap = [&](int64_t c) { return "ap" + L + "_" + std::to_string(c); };
    auto av = [&](int64_t c) { return "av" + H + "_" + std::to_string(c); };
    t.op(Op::fmuls, {"ao" + H, ap(0), av(0)});
    for (int64_t c = 1; c < S; ++c) {
      t.op(Op::fmuls, {"atom" + L, ap(c), av(c)});
      t.op(Op::fadds, {"ao" + H, "ao" + H, "atom" + L});
    }
  }
  if (nq > 1) {
    t.op(Op::add, {rq, rq, imm(1)});
    t.op(Op::sub, {ro, rq, imm(nq)});
    t.op(Op::bnz, {ro, "ablk" + L});
    t.op(Op::mov, {rq, imm(0)});
    if (rv != ro) t.op(Op::mov, {rv, imm(0)});
  }
}

void ln_edge_pass(const DenseKernel& k, const WaferConfig& cfg, std::vector<int64_t>& T, int64_t at_end) {
  const int64_t S = cfg.setup_cycles, hop = cfg.hop_latency, pass = 2 + hop, Ln = static_cast<int64_t>(T.size()), B = k.B, nb = k.nb;
  const int64_t local = dsd_cycles(Op::fmovs, B, nb, cfg) + (nb - 1) * dsd_cycles(Op::fadds, B, nb, cfg);
  int64_t lead = INT64_MIN;
  for (int64_t q = 0; q < Ln; ++q) lead = std::max(lead, T[static_cast<size_t>(q)] + local + S - q * pass);
  const int64_t chain = Ln == 1 ? T[0] + local : lead + (Ln - 1) * pass + B;
  const int64_t sent = chain + at_end + S + 1;  // the async broadcast's first wavelet leaves
  for (int64_t q = 0; q < Ln; ++q) {
    const int64_t own = T[static_cast<size_t>(q)] + local + (q + 1 < Ln ? S + B : 0);  // this position's part of the chain is out
    T[static_cast<size_t>(q)] = std::max(own, sent + (Ln - 1 - q) * hop + B + 2) + 1;
  }
}

// The estimate of the chain-end work that spans a row of outputs, after the bias, functions and
// residual (estimate.cpp): multi-head attention (attention_program), the copy a pre-norm block
// keeps, LayerNorm along the edge (ln_program) and the functions after it -- added to each chain-end
// position's time t_of.
void row_post_cycles(const DenseKernel& k, const WaferConfig& cfg, std::vector<int64_t>& t_of, bool training) {
  const int64_t S = cfg.setup_cycles, hop = cfg.hop_latency, pass = 2 + hop, Ln = static_cast<int64_t>(t_of.size()), n_el = k.B * k.nb;
  auto dsd = [&](int64_t len, Op o2 = Op::fadds, int64_t stride = 1) { return dsd_cycles(o2, len, stride, cfg); };
  if (k.attn) {
    // chain_end_program.cpp attention_program, per head (part) of each chain end's block: the scores (w
    // products of broadcast walks), with heads split over g PEs the group's chain of S x S
    // partial scores to its last PE (the reduce's formula), the softmax there, P broadcast back
    // hop by hop; then P V over the PE's w features.
    // Query blocks of Sq rows run one after another (a block's scores: Sq x S).
    // A batch: every (sample, head) pair of the PE in turn, over its sample's Sk keys.
    const int64_t fb = k.feat_nb(), Sk = k.attn_keys(), Sq = k.attn_rows(), nq = k.attn_queries() / Sq, SS = Sq * Sk, g = k.attn_group(), w = g > 1 ? fb : k.dh,
                  hp = (g > 1 ? 1 : fb / k.dh) * k.attn_samples;
    auto op = [&](int64_t len, int64_t stride) { return dsd(len, Op::fmuls, stride); };
    const int64_t scores = w * op(SS, k.nb) + (w - 1) * op(SS, 1) + (nq > 1 ? w + 1 : 0);
    const int64_t softmax = (k.attn_mask.empty() ? 0 : op(SS, 1)) + op(SS, 1) + Sk * op(Sq, Sk) + op(SS, 1) + kExpOps * op(SS, 1) + Sk * op(Sq, Sk) + recip_op_count(1.0, static_cast<double>(Sk)) * op(Sq, 1) + op(SS, 1);
    const int64_t pv = (2 * Sk - 1) * op(Sq * w, 1);
    for (const bool isq : {true, false})  // rotary embeddings: five ops over Q's (K's) rows x fb, two over halves, strided
      if (!(isq ? k.attn_q_cos : k.attn_k_cos).empty())
        for (auto& tq : t_of) tq += 3 * op(k.B * fb / 2, 2) + op(k.B * fb, 2) + op(k.B * fb, 1);
    if (g == 1) {
      if (training)  // (P kept for the backward pass)
        for (auto& tq : t_of) tq += nq * hp * op(SS, 1);
      for (auto& tq : t_of) tq += nq * (hp * (scores + softmax + pv) + (nq > 1 ? 4 + (fb != k.nb ? 1 : 0) + (k.attn_mask.empty() ? 0 : 2) : 0));
    } else {
      for (int64_t qb = 0; qb < nq * hp; ++qb) {
      if (training)  // (P kept for the backward pass, after its broadcast)
        for (auto& tq : t_of) tq += op(SS, 1);
      if (nq > 1 && qb % hp == 0)  // a query block's start: its offsets (and the mask's rows)
        for (auto& tq : t_of) tq += 4 + (fb != k.nb ? 1 : 0) + (k.attn_mask.empty() ? 0 : 2);
      for (int64_t g0 = 0; g0 < Ln; g0 += g) {
        const int64_t gl = std::min(Ln, g0 + g) - 1;  // the group's last position
        int64_t lead = INT64_MIN;
        for (int64_t q = g0; q <= gl; ++q) lead = std::max(lead, t_of[static_cast<size_t>(q)] + scores + S - (q - g0) * pass);
        const int64_t chain = gl == g0 ? t_of[static_cast<size_t>(g0)] + scores : lead + (gl - g0) * pass + SS;
        const int64_t sent = chain + softmax + S + 1;
        for (int64_t q = g0; q <= gl; ++q) {
          const int64_t own = t_of[static_cast<size_t>(q)] + scores + (q < gl ? S + SS : 0);
          t_of[static_cast<size_t>(q)] = std::max(own, sent + (gl - q) * hop + SS + 2) + 1 + pv;
        }
      }
      }
    }
  }
  if (k.keeps_preln)  // the copy of the value before the LayerNorm (fmovs over B nb)
    for (auto& tq : t_of) tq += dsd(k.B * k.nb, Op::fmovs);
  if (k.layernorm) {
    // LayerNorm along the chain ends (chain_end_program.cpp ln_program), twice: each position's row sums (nb
    // strided ops over B), the pipelined chain of B values to the edge's end (the reduce's
    // formula), its own ops there, then the broadcast back -- hop by hop, B wavelets -- which
    // each position takes before its next ops.
    const int64_t B = k.B;
    const bool padded = k.ln_padded();
    auto pass_ln = [&](std::vector<int64_t>& T, int64_t at_end) { ln_edge_pass(k, cfg, T, at_end); };
    if (k.ln_premask())
      for (auto& tq : t_of) tq += dsd(n_el);  // padded features back to 0 first
    if (!k.rms) {  // (RMSNorm: no mean pass)
      pass_ln(t_of, dsd(B));
      for (auto& tq : t_of) tq += dsd(n_el) * (padded ? 3 : 2);  // subtract the mean (mask), square
    } else {
      for (auto& tq : t_of) tq += dsd(n_el);  // square
    }
    pass_ln(t_of, 2 * dsd(B) + dsd(B, Op::fmovs) + kRsqrtIters * (3 * dsd(B, Op::fmuls) + dsd(B, Op::fmacs)));  // rsqrt_ops: 3 fmuls and an fmacs per step
    for (auto& tq : t_of) tq += (k.rms ? 2 : 3) * dsd(n_el) + (training ? dsd(n_el, Op::fmovs) : 0);  // times rstd, scale (, bias); training keeps xhat
  }
  for (const Unary& u : k.acts_post_ln)  // the functions after the LayerNorm
    for (auto& tq : t_of) tq += unary_cycles(u, n_el, cfg);
  if (k.ln_postmask())
    for (auto& tq : t_of) tq += dsd(n_el);  // (and its padded features back to 0)
}

}  // namespace tessera::wafer::detail
