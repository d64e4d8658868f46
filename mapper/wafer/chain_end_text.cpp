// PE program text of the chain-end post-ops that span a row of outputs (compile.hpp;
// docs/wafer-compiler.md "What it maps", "Transformers"): Softmax, LayerNorm and multi-head attention.
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// Softmax over the N outputs of each sample at the (single) chain end: m = max, e = exp(z - m)
// (exp_text), s = sum e (in [1, N]), y = e / s (recip_text). kSoftmaxOps(N) operations.
void softmax_text(std::ostringstream& o, const DenseKernel& k, const std::string& L) {
  const int64_t N = k.N;
  const std::string z = "sz" + L + "_", e = "sx" + L + "_";
  o << "  fmovs sm" << L << ", " << z << "0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fmaxs sm" << L << ", sm" << L << ", " << z << cc << "\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs " << e << cc << ", " << z << cc << ", sm" << L << "\n";
  exp_text(o, "sem" + L, "stm" + L);
  o << "  fmovs ss" << L << ", " << e << "0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fadds ss" << L << ", ss" << L << ", " << e << cc << "\n";
  recip_text(o, "sr" + L, "ss" + L, "su" + L, 1.0, static_cast<double>(N));
  for (int64_t cc = 0; cc < N; ++cc) o << "  fmuls " << z << cc << ", " << e << cc << ", sr" << L << "\n";
}

// LayerNorm at kernel l's chain ends (in `red`, after bias, activation and residual): row sums
// summed along the edge, the mean broadcast back and subtracted; the squared deviations' sums
// likewise, 1 / sqrt(var + eps) by kRsqrtIters Newton steps from 0.01 at the edge's end, broadcast
// back; then the scale and bias.
void ln_text(const DenseKernel& k, size_t l, bool padded, std::ostringstream& o) {
  const std::string L = std::to_string(l);
  const int64_t nb = k.nb;
  auto sums = [&](const std::string& col) {
    o << "  fmovs lnsm" << L << ", " << col << L << "_0\n";
    for (int64_t n = 1; n < nb; ++n) o << "  fadds lnsm" << L << ", lnsm" << L << ", " << col << L << "_" << n << "\n";
    o << ".if $lnfirst" << L << "\n.if !$lnlast" << L << "\n  fmovs lnto" << L << ", lnsm" << L << "\n.endif\n.else\n.if $lnlast" << L << "\n  fadds lnsm" << L
      << ", lnsm" << L << ", lnfr" << L << "\n.else\n  fadds lnto" << L << ", lnsm" << L << ", lnfr" << L << "\n.endif\n.endif\n";
  };
  const std::string invn = fnum(1.0 / static_cast<double>(k.N));
  sums("lyc");
  o << ".if $lnlast" << L << "\n  fmuls lncm" << L << ", lnsm" << L << ", " << invn << "\n  fmovs lnbo" << L << ", lncm" << L << " async\n.endif\n";
  o << "  fmovs lnrm" << L << ", lnbi" << L << "\n  fsubs yall" << L << ", yall" << L << ", lnrb" << L << "\n";
  if (padded) o << "  fmuls yall" << L << ", yall" << L << ", lnkb" << L << "   # padded features stay 0\n";
  o << "  fmuls lnqm" << L << ", yall" << L << ", yall" << L << "\n";
  sums("lqc");
  o << ".if $lnlast" << L << "\n  fmuls lntm" << L << ", lnsm" << L << ", " << invn << "\n  fadds lntm" << L << ", lntm" << L << ", " << fnum(k.ln_eps) << "\n";
  rsqrt_text(o, "lncm" + L, "lntm" + L, "lnsm" + L);
  o << "  fmovs lnbo" << L << ", lncm" << L << " async\n.endif\n";
  o << "  fmovs lnrm" << L << ", lnbi" << L << "\n  fmuls yall" << L << ", yall" << L << ", lnrb" << L << "\n  fmuls yall" << L << ", yall" << L << ", lngb" << L
    << "\n  fadds yall" << L << ", yall" << L << ", lnbb" << L << "\n";
}

// Queues: an async op runs on the microthread of its queue number, and weight loads keep input
// queues 2 and 3's microthreads busy for long stretches, so the broadcasts that other PEs wait for
// in a blocking receive (LayerNorm's on output queue 5, attention's on 4) use other numbers; the
// chains' blocking sends use output queue 2 (blocking ops need no microthread).
// Multi-head attention at the chain end of the kernel computing V (rows S = B), for each of the nb /
// dh heads in the PE's block: scores[s, t] = sum_j Q[s, j] K[t, j] (per j one product of two
// broadcast walks, S x S), times the scale; softmax over t (row max, exp_text, row sum, recip_text
// over [1, S]); out[s, j] = sum_t P[s, t] V[t, j] (per t one product of broadcast walks, S x dh).
void attention_text(const DenseKernel& k, size_t l, int rc, std::ostringstream& o) {
  const std::string L = std::to_string(l);
  const int64_t fb = k.feat_nb(), S = k.B, Sq = k.attn_rows(), nq = S / Sq, g = k.attn_group(), w = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
  // Query blocks of Sq rows, one after another (the kernel's x-task registers): the
  // scores of a block are Sq x S.
  // The kernel's own x-task registers: its counter (0 between its x tasks) counts the blocks, its
  // scratch holds the offset; the counter is back at 0 at the end.
  // Fused Q, K, V (rows of nb = 3 fb): the output's rows (fb) move by a different offset, kept in
  // the kernel's sample counter (0 between its x tasks, set back to 0 at the end).
  const std::string rq = "r" + std::to_string(rc), ro = "r" + std::to_string(rc + 2), rv = fb != k.nb ? "r" + std::to_string(rc + 1) : ro;
  if (nq > 1) {
    o << "  mov " << rq << ", 0\nablk" << L << ":\n  mul " << ro << ", " << rq << ", " << Sq * k.nb << "\n";
    if (rv != ro) o << "  mul " << rv << ", " << rq << ", " << Sq * fb << "\n";
  }
  for (int64_t hh = 0; hh < hp; ++hh) {
    const std::string H = L + "_" + std::to_string(hh);
    if (nq > 1) {
      for (int64_t j = 0; j < w; ++j) o << "  dsd_off aq" << H << "_" << j << ", " << ro << "\n";
      o << "  dsd_off ao" << H << ", " << rv << "\n";
    }
    o << "  fmuls ascm" << L << ", aq" << H << "_0, ak" << H << "_0\n";
    for (int64_t j = 1; j < w; ++j) o << "  fmuls atmm" << L << ", aq" << H << "_" << j << ", ak" << H << "_" << j << "\n  fadds ascm" << L << ", ascm" << L << ", atmm" << L << "\n";
    if (g > 1)  // the head's partial scores summed along its group, to the group's last PE
      o << ".if $agfirst" << L << "\n.if !$aglast" << L << "\n  fmovs aton" << L << ", ascm" << L << "\n.endif\n.else\n.if $aglast" << L << "\n  fadds ascm" << L << ", ascm" << L
        << ", afr" << L << "\n.else\n  fadds aton" << L << ", ascm" << L << ", afr" << L << "\n.endif\n.endif\n.if $aglast" << L << "\n";
    o << "  fmuls ascm" << L << ", ascm" << L << ", " << fnum(k.attn_scale) << "\n";
    o << "  fmovs amm" << L << ", acol" << L << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fmaxs amm" << L << ", amm" << L << ", acol" << L << "_" << t << "\n";
    o << "  fsubs ascm" << L << ", ascm" << L << ", amb" << L << "\n";
    exp_text(o, "ascm" + L, "atmm" + L);
    o << "  fmovs asm" << L << ", acol" << L << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fadds asm" << L << ", asm" << L << ", acol" << L << "_" << t << "\n";
    recip_text(o, "arm" + L, "asm" + L, "aum" + L, 1.0, static_cast<double>(S));
    o << "  fmuls ascm" << L << ", ascm" << L << ", arb" << L << "\n";
    if (g > 1)  // P back to the group (the last PE's own copy through its ramp) into atm
      o << "  fmovs abo" << L << ", ascm" << L << " async\n.endif\n  fmovs atmm" << L << ", abi" << L << "\n";
    o << "  fmuls ao" << H << ", ap" << L << "_0, av" << H << "_0\n";
    for (int64_t t = 1; t < S; ++t) o << "  fmuls atom" << L << ", ap" << L << "_" << t << ", av" << H << "_" << t << "\n  fadds ao" << H << ", ao" << H << ", atom" << L << "\n";
  }
  if (nq > 1) o << "  add " << rq << ", " << rq << ", 1\n  sub " << ro << ", " << rq << ", " << nq << "\n  bnz " << ro << ", ablk" << L << "\n  mov " << rq << ", 0\n"
                << (rv != ro ? "  mov " + rv + ", 0\n" : "");
}

}  // namespace tessera::wafer::detail
