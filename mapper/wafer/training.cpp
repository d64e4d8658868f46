// Training (weight streaming; compile.hpp, docs/wafer-compiler.md "Training", docs/training.md): routes,
// parameters and the backward program of every layer, and the loss at the last layer's chain ends.
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// dy multicast: from each chain end back along its chain to every position (the chain end's own
// copy through its ramp), on color cb.
void dy_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const char* back = k.k_on_columns ? "W" : "N";
  const char* from = k.k_on_columns ? "E" : "S";
  for (int64_t p = 0; p < len; ++p) {
    std::string rx, tx;
    if (p == len - 1) rx = "[\"RAMP\"]", tx = len > 1 ? dirs({{true, back}, {true, "RAMP"}}) : "[\"RAMP\"]";
    else if (p > 0) rx = "[\"" + std::string(from) + "\"]", tx = dirs({{true, back}, {true, "RAMP"}});
    else rx = "[\"" + std::string(from) + "\"]", tx = "[\"RAMP\"]";
    if (k.k_on_columns) routes.push_back(route(k.cb, p, 0, 1, k.h, rx, tx));
    else routes.push_back(route(k.cb, 0, p, k.w, 1, rx, tx));
  }
}

// The chain's color at position p (the forward reduce's alternation).
int chain_color(const DenseKernel& k, int64_t p) { return p % 2 == 0 ? k.cr0 : k.cr1; }

// Weight gradients leave the chain end off the fabric's edge (E or S) into the gradient port, on
// the color the chain end would send on.
void grad_port_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const int col = chain_color(k, len - 1);
  if (k.k_on_columns) routes.push_back(route(col, len - 1, 0, 1, k.h, "[\"RAMP\"]", "[\"E\"]"));
  else routes.push_back(route(col, 0, len - 1, k.w, 1, "[\"RAMP\"]", "[\"S\"]"));
}

// The loss chain along the last layer's chain ends (its N axis), towards S or E, colors cl0/cl1.
void loss_routes(const Compiled& c, json& routes) {
  const DenseKernel& k = c.kernels.back();
  const int64_t len = k.k_on_columns ? k.h : k.w;  // chain ends along the N axis
  const char* fwd = k.k_on_columns ? "S" : "E";
  const char* back = k.k_on_columns ? "N" : "W";
  for (int64_t q = 0; q < len; ++q) {
    std::vector<std::pair<int, std::pair<std::string, std::string>>> at;
    if (q + 1 < len) at.push_back({q % 2 == 0 ? c.cl0 : c.cl1, {"[\"RAMP\"]", "[\"" + std::string(fwd) + "\"]"}});
    if (q > 0) at.push_back({(q - 1) % 2 == 0 ? c.cl0 : c.cl1, {"[\"" + std::string(back) + "\"]", "[\"RAMP\"]"}});
    for (const auto& [col, rt] : at) {
      if (k.k_on_columns) routes.push_back(route(col, k.w - 1, q, 1, 1, rt.first, rt.second));
      else routes.push_back(route(col, q, k.h - 1, 1, 1, rt.first, rt.second));
    }
  }
}

void train_params(const Compiled& c, json& params) {
  const DenseKernel& k = c.kernels.back();
  const std::string pn = k.k_on_columns ? "py" : "px", nl = k.k_on_columns ? "height" : "width";
  params["lfirst"] = pn + " == 0";
  params["llast"] = pn + " == " + nl + " - 1";
  const std::string d = "(" + std::to_string(c.cl1) + " - " + std::to_string(c.cl0) + ")";
  params["lcout"] = std::to_string(c.cl0) + " + (" + pn + " % 2) * " + d;
  params["lcin"] = std::to_string(c.cl0) + " + ((" + pn + " + 1) % 2) * " + d;
}

// The loss at the last layer's chain ends (after its forward `red`): d = y - t, dy = 2 d / (B N),
// the sum of d^2 over the PE's block, summed along the chain ends; the last one scales it by
// 1 / (B N) into `loss`. Then the layer's backward starts (bstart).
void loss_text(const Compiled& c, std::ostringstream& o) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t n = k.B * k.nb;
  const double inv = 1.0 / static_cast<double>(k.B * k.N);
  o << "# ---- loss (mean squared error) at the chain ends of kernel " << l << "\n";
  o << ".if $last" << L << "\n.data tgt f32 " << n << "   # the target block, placed by the host each step\n.data dd f32 " << n << "\n.data lacc f32 1\n";
  o << ".if $llast\n.data loss f32 1\n.dsd lossm mem1d loss\n.endif\n";
  o << ".dsd tgtm mem1d tgt\n.dsd ddm mem1d dd\n.dsd de mem1d dd len=1\n.dsd laccm mem1d lacc\n";
  o << ".if !$llast\n.dsd lto fabout f32 color=$lcout queue=1 len=1\n.endif\n";
  o << ".if !$lfirst\n.dsd lfrom fabin f32 color=$lcin queue=7 len=1\n.endif\n";
  o << ".task lossk local id=60\n  fsubs ddm, yall" << L << ", tgtm\n  fmuls dym" << L << ", ddm, " << fnum(2.0 * inv) << "\n  fmuls ddm, ddm, ddm\n";
  o << "  dsd_off de, 0\n  fmovs laccm, de\n  mov r14, 1\nlp:\n  sub r15, r14, " << n << "\n  bz r15, le\n  dsd_off de, r14\n  fadds laccm, laccm, de\n  add r14, r14, 1\n  jmp lp\nle:\n";
  o << ".if $lfirst\n.if !$llast\n  fmovs lto, laccm\n.endif\n.else\n.if $llast\n  fadds laccm, laccm, lfrom\n.else\n  fadds lto, laccm, lfrom\n.endif\n.endif\n";
  o << ".if $llast\n  fmuls lossm, laccm, " << fnum(inv) << "\n.endif\n  activate bstart" << L << "\n  ret\n.endif\n";
}

// Softmax cross-entropy at the last layer's chain end (every class on this PE; docs/wafer-compiler.md):
// per sample m = max z, e = exp(z - m), s = sum e, p = e / s; dy = (p - t) / B; the loss
// sum_c t (m + ln s - z) / B, ln s by Newton's iteration y += s exp(-y) - 1 from 2 (s - 1) / (s + 1).
void xent_text(const Compiled& c, std::ostringstream& o) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t B = k.B, N = k.N, nb = k.nb;
  o << "# ---- loss (softmax cross-entropy) at the chain end of kernel " << l << "\n";
  o << ".if $last" << L << "\n.data tgt f32 " << B * nb << "   # the target block (one-hot or soft), placed by the host each step\n";
  o << ".data xe f32 " << B * N << "\n.data xt f32 " << B * N << "\n.data xm f32 " << B << "\n.data xs f32 " << B << "\n.data xr f32 " << B << "\n.data xu f32 " << B
    << "\n.data xy f32 " << B << "\n.data xv f32 " << B << "\n.data xw f32 " << B << "\n.data lacc f32 1\n.data loss f32 1\n";
  o << ".dsd xem mem1d xe\n.dsd xtm mem1d xt\n.dsd xmm mem1d xm\n.dsd xsm mem1d xs\n.dsd xrm mem1d xr\n.dsd xum mem1d xu\n.dsd xym mem1d xy\n.dsd xvm mem1d xv\n.dsd xwm mem1d xw\n";
  o << ".dsd laccm mem1d lacc\n.dsd lossm mem1d loss\n.dsd de mem1d xe len=1\n";
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    o << ".dsd z" << C << " mem1d y" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd t" << C << " mem1d tgt off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd g" << C << " mem1d dy" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n";
    o << ".dsd e" << C << " mem1d xe off=" << cc << " len=" << B << " stride=" << N << "\n";
  }
  o << ".task lossk local id=60\n";
  o << "  fmovs xmm, z0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fmaxs xmm, xmm, z" << cc << "\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs e" << cc << ", z" << cc << ", xmm\n";
  exp_text(o, "xem", "xtm");
  o << "  fmovs xsm, e0\n";
  for (int64_t cc = 1; cc < N; ++cc) o << "  fadds xsm, xsm, e" << cc << "\n";
  recip_text(o, "xrm", "xsm", "xum", 1.0, static_cast<double>(N));
  // dy = (e r - t) / B (padding columns stay 0)
  o << "  fmovs dym" << L << ", 0.0\n";
  for (int64_t cc = 0; cc < N; ++cc)
    o << "  fmuls g" << cc << ", e" << cc << ", xrm\n  fsubs g" << cc << ", g" << cc << ", t" << cc << "\n  fmuls g" << cc << ", g" << cc << ", " << fnum(1.0 / static_cast<double>(B)) << "\n";
  // ln s: y0 = 2 (s - 1) / (s + 1), then y += s exp(-y) - 1, five times
  o << "  fadds xvm, xsm, 1.0\n";
  recip_text(o, "xym", "xvm", "xum", 2.0, static_cast<double>(N) + 1.0);
  o << "  fadds xvm, xsm, -1.0\n  fmuls xym, xym, xvm\n  fmuls xym, xym, 2.0\n";
  for (int i = 0; i < 5; ++i) {
    o << "  fmuls xwm, xym, -1.0\n";
    // exp of a B-long vector: its own temporaries (xv as T)
    exp_text(o, "xwm", "xvm");
    o << "  fmuls xwm, xwm, xsm\n  fadds xym, xym, xwm\n  fadds xym, xym, -1.0\n";
  }
  // per (b, c): t (m + ln s - z), summed
  o << "  fadds xym, xym, xmm\n";
  for (int64_t cc = 0; cc < N; ++cc) o << "  fsubs e" << cc << ", xym, z" << cc << "\n  fmuls e" << cc << ", e" << cc << ", t" << cc << "\n";
  o << "  dsd_off de, 0\n  fmovs laccm, de\n  mov r14, 1\nlp:\n  sub r15, r14, " << B * N << "\n  bz r15, le\n  dsd_off de, r14\n  fadds laccm, laccm, de\n  add r14, r14, 1\n  jmp lp\nle:\n";
  o << "  fmuls lossm, laccm, " << fnum(1.0 / static_cast<double>(B)) << "\n  activate bstart" << L << "\n  ret\n.endif\n";
}

// The backward pass of kernel l on every PE. dy[b, i] arrives as wavelets (color cb, from the
// chain end): the weight gradient's column i += x[b, :] dy[b, i] (x as saved in the forward pass)
// and, from layer 1 on, the input gradient's row b += W[:, i] dy[b, i]. After the last wavelet the
// input gradient is reduced along the x lines (the previous layer's chains, so it ends at that
// layer's chain ends) and the weight-gradient block goes out along the chain (own block first, then
// the blocks from behind) to the gradient port. Both reuse the forward chains' colors, so they use
// the same queues (a color arrives in one input queue of a PE).
void backward_text(const Compiled& c, size_t l, double lr, std::ostringstream& o) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), P = l ? std::to_string(l - 1) : "";
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const std::string wbuf = l % 2 ? "Wb" : "Wa";
  const int rI = 6 + 3 * static_cast<int>(l), rB = rI + 1, rT = rI + 2;
  const int li = static_cast<int>(l);
  o << "# ---- backward of kernel " << l << ": " << k.name << "\n";
  o << ".data gW" << L << " f32 " << kb * nb << "   # the weight gradient block (as W's block)\n";
  if (l) o << ".data dx" << L << " f32 " << B * kb << "   # the input gradient (partial over this PE's columns)\n";
  o << ".dsd gcol" << L << " mem1d gW" << L << " len=" << kb << " stride=" << nb << "\n.dsd xrow" << L << " mem1d xsave" << L << " len=" << kb << "\n";
  o << ".dsd gWm" << L << " mem1d gW" << L << "\n";
  if (l) {
    o << ".dsd wcolT" << L << " mem1d " << wbuf << " len=" << kb << " stride=" << nb << "\n.dsd dxrow" << L << " mem1d dx" << L << " len=" << kb << "\n";
    o << ".dsd dxm" << L << " mem1d dx" << L << "\n";
    o << ".if !$first" << P << "\n.dsd dxfrom" << L << " fabin f32 color=$cin" << P << " queue=" << chain_queue(c, l - 1) << " len=" << B * kb << "\n.endif\n";
    o << ".if !$last" << P << "\n.dsd dxto" << L << " fabout f32 color=$cout" << P << " queue=2 len=" << B * kb << "\n.endif\n";
  }
  o << ".dsd gto" << L << " fabout f32 color=$cout" << L << " queue=2 len=" << kb * nb << "\n";
  o << ".if $pre" << L << "\n.dsd gto2" << L << " fabout f32 color=$cout" << L << " queue=2 len=$npre" << L << "\n.dsd gfrom" << L << " fabin f32 color=$cin" << L
    << " queue=" << chain_queue(c, l) << " len=$npre" << L << "\n.endif\n";
  // Chain ends: dy, the bias update, the multicast.
  o << ".if $last" << L << "\n.data dy" << L << " f32 " << B * nb << "\n.data db" << L << " f32 " << nb << "\n";
  if (k.relu || k.tanh) o << ".data mk" << L << " f32 " << B * nb << "\n.dsd mkm" << L << " mem1d mk" << L << "\n";
  o << ".dsd dym" << L << " mem1d dy" << L << "\n.dsd dyrow" << L << " mem1d dy" << L << " len=" << nb << "\n.dsd dbm" << L << " mem1d db" << L << "\n";
  o << ".dsd biasm" << L << " mem1d bias" << L << "\n.dsd dyout" << L << " fabout f32 color=" << k.cb << " queue=3 len=" << B * nb << "\n";
  if (c.momentum != 0) o << ".data vb" << L << " f32 " << nb << "   # the bias velocity (momentum), kept from step to step\n.dsd vbm" << L << " mem1d vb" << L << "\n";
  o << ".task bstart" << L << " local id=" << 56 + li << "   # dy complete: ReLU mask, bias update, multicast\n";
  if (k.relu)  // the ReLU's derivative [y > 0] as -max(-y 2^100, -1): 1 for y >= 2^-100, 0 for y = 0 (y = relu(z) >= 0)
    o << "  fmuls mkm" << L << ", yall" << L << ", -1.2676506e30\n  fmaxs mkm" << L << ", mkm" << L << ", -1.0\n  fnegs mkm" << L << ", mkm" << L
      << "\n  fmuls dym" << L << ", dym" << L << ", mkm" << L << "\n";
  if (k.tanh)  // the derivative 1 - y^2
    o << "  fmuls mkm" << L << ", yall" << L << ", yall" << L << "\n  fmuls mkm" << L << ", mkm" << L << ", -1.0\n  fadds mkm" << L << ", mkm" << L
      << ", 1.0\n  fmuls dym" << L << ", dym" << L << ", mkm" << L << "\n";
  o << "  dsd_off dyrow" << L << ", 0\n  fmovs dbm" << L << ", dyrow" << L << "\n  mov r14, 1\nbl" << L << ":\n  sub r15, r14, " << B << "\n  bz r15, bd" << L
    << "\n  mul r15, r14, " << nb << "\n  dsd_off dyrow" << L << ", r15\n  fadds dbm" << L << ", dbm" << L << ", dyrow" << L << "\n  add r14, r14, 1\n  jmp bl" << L
    << "\nbd" << L << ":\n";
  if (c.momentum != 0)  // v = mu v + db; b -= lr v (torch's SGD with momentum)
    o << "  fmuls vbm" << L << ", vbm" << L << ", " << fnum(c.momentum) << "\n  fadds vbm" << L << ", vbm" << L << ", dbm" << L << "\n  fmacs biasm" << L << ", biasm" << L
      << ", vbm" << L << ", " << fnum(-lr) << "\n";
  else
    o << "  fmacs biasm" << L << ", biasm" << L << ", dbm" << L << ", " << fnum(-lr) << "\n";
  o << "  fmovs dyout" << L << ", dym" << L << " async\n  ret\n.endif\n";
  // Every PE: one task per dy wavelet.
  const bool last_layer = l + 1 == c.kernels.size();
  o << ".task bdy" << L << " data id=" << 40 + li << " color=" << k.cb << " queue=4" << (last_layer ? "" : " blocked") << "   # wv = dy[b, i]\n";
  o << "  mul r" << rT << ", r" << rB << ", " << kb << "\n  dsd_off xrow" << L << ", r" << rT << "\n  dsd_off gcol" << L << ", r" << rI << "\n";
  o << "  bnz r" << rB << ", ga" << L << "\n  fmuls gcol" << L << ", xrow" << L << ", wv\n  jmp gb" << L << "\nga" << L << ":\n  fmacs gcol" << L << ", gcol" << L
    << ", xrow" << L << ", wv\ngb" << L << ":\n";
  if (l) {
    o << "  dsd_off dxrow" << L << ", r" << rT << "\n  dsd_off wcolT" << L << ", r" << rI << "\n  bnz r" << rI << ", da" << L << "\n  fmuls dxrow" << L << ", wcolT" << L
      << ", wv\n  jmp dc" << L << "\nda" << L << ":\n  fmacs dxrow" << L << ", dxrow" << L << ", wcolT" << L << ", wv\ndc" << L << ":\n";
  }
  o << "  add r" << rI << ", r" << rI << ", 1\n  sub r" << rT << ", r" << rI << ", " << nb << "\n  bnz r" << rT << ", bx" << L << "\n  mov r" << rI << ", 0\n  add r" << rB
    << ", r" << rB << ", 1\n  sub r" << rT << ", r" << rB << ", " << B << "\n  bnz r" << rT << ", bx" << L << "\n  mov r" << rB << ", 0\n  activate bdone" << L << "\nbx" << L
    << ":\n  ret\n";
  // All of dy seen: the input gradient's reduce (synchronous), then the weight gradient out.
  o << ".task bdone" << L << " local id=" << 44 + li << "\n";
  if (l) {
    o << ".if $first" << P << "\n.if $last" << P << "\n  fmovs dym" << P << ", dxm" << L << "\n.else\n  fmovs dxto" << L << ", dxm" << L << "\n.endif\n.else\n.if $last" << P
      << "\n  fadds dym" << P << ", dxm" << L << ", dxfrom" << L << "\n.else\n  fadds dxto" << L << ", dxm" << L << ", dxfrom" << L << "\n.endif\n.endif\n";
    o << ".if $last" << P << "\n  activate bstart" << P << "\n.endif\n";
  }
  o << "  fmovs gto" << L << ", gWm" << L << " async activate=g2" << L << "\n  ret\n";
  o << ".task g2" << L << " local id=" << 48 + li << "\n.if $pre" << L << "\n  fmovs gto2" << L << ", gfrom" << L << " async activate=g3" << L << "\n.else\n  activate g3" << L
    << "\n.endif\n  ret\n";
  o << ".task g3" << L << " local id=" << 52 + li << "   # the gradient block has left\n";
  if (l) o << "  unblock bdy" << P << "\n  ret\n";
  else o << "  halt\n";
}

}  // namespace tessera::wafer::detail
