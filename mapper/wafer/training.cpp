// Training (weight streaming; compile.hpp, docs/wafer-compiler.md "Training", docs/training.md): routes,
// parameters and the backward program of every layer, and the loss at the last layer's chain ends.
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// dy multicast: from each chain end back along its chain to every position (the chain end's own
// copy through its ramp), on color cb.
void dy_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const DirSet back = dir_bit(k.k_on_columns ? Dir::W : Dir::N), from = dir_bit(k.k_on_columns ? Dir::E : Dir::S);
  for (int64_t p = 0; p < len; ++p) {
    DirSet rx, tx;
    if (p == len - 1) rx = kRamp, tx = len > 1 ? back | kRamp : kRamp;
    else if (p > 0) rx = from, tx = back | kRamp;
    else rx = from, tx = kRamp;
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
  if (k.k_on_columns) routes.push_back(route(col, len - 1, 0, 1, k.h, kRamp, dir_bit(Dir::E)));
  else routes.push_back(route(col, 0, len - 1, k.w, 1, kRamp, dir_bit(Dir::S)));
}

// The loss chain along the last layer's chain ends (its N axis), towards S or E, colors cl0/cl1.
void loss_routes(const Compiled& c, json& routes) {
  const DenseKernel& k = c.kernels.back();
  const int64_t len = k.k_on_columns ? k.h : k.w;  // chain ends along the N axis
  const DirSet fwd = dir_bit(k.k_on_columns ? Dir::S : Dir::E), back = dir_bit(k.k_on_columns ? Dir::N : Dir::W);
  for (int64_t q = 0; q < len; ++q) {
    std::vector<std::pair<int, std::pair<DirSet, DirSet>>> at;
    if (q + 1 < len) at.push_back({q % 2 == 0 ? c.cl0 : c.cl1, {kRamp, fwd}});
    if (q > 0) at.push_back({(q - 1) % 2 == 0 ? c.cl0 : c.cl1, {back, kRamp}});
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
void loss_program(const Compiled& c, ProgramTemplate& t) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t n = k.B * k.nb;
  const double inv = 1.0 / static_cast<double>(k.B * k.N);
  t.comment("---- loss (mean squared error) at the chain ends of kernel " + L);
  t.if_("last" + L);
  t.data("tgt", Elem::f32, n, {}, -1, -1, "the target block, placed by the host each step");
  t.data("dd", Elem::f32, n);
  t.data("lacc", Elem::f32, 1);
  t.if_("llast");
  t.data("loss", Elem::f32, 1);
  t.mem1d("lossm", "loss");
  t.endif();
  t.mem1d("tgtm", "tgt");
  t.mem1d("ddm", "dd");
  t.mem1d("de", "dd", 0, 1);
  t.mem1d("laccm", "lacc");
  t.if_("llast", false);
  t.fabric("lto", DsdKind::fabout, Elem::f32, P("lcout"), 1, 1);
  t.endif();
  t.if_("lfirst", false);
  t.fabric("lfrom", DsdKind::fabin, Elem::f32, P("lcin"), 7, 1);
  t.endif();
  t.task("lossk", TaskKind::local, 60);
  t.op(Op::fsubs, {"ddm", "yall" + L, "tgtm"});
  t.op(Op::fmuls, {"dym" + L, "ddm", fnum(2.0 * inv)});
  t.op(Op::fmuls, {"ddm", "ddm", "ddm"});
  sum_elements(t, "laccm", "de", n);
  chain_step(t, "lfirst", "llast", "laccm", "lto", "lfrom", "laccm");
  t.if_("llast");
  t.op(Op::fmuls, {"lossm", "laccm", fnum(inv)});
  t.endif();
  t.op(Op::activate, {"bstart" + L});
  t.op(Op::ret, {});
  t.endif();
}

// Softmax cross-entropy at the last layer's chain end (every class on this PE; docs/wafer-compiler.md):
// per sample m = max z, e = exp(z - m), s = sum e, p = e / s; dy = (p - t) / B; the loss
// sum_c t (m + ln s - z) / B, ln s by Newton's iteration y += s exp(-y) - 1 from 2 (s - 1) / (s + 1).
void xent_program(const Compiled& c, ProgramTemplate& t) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t B = k.B, N = k.N, nb = k.nb;
  t.comment("---- loss (softmax cross-entropy) at the chain end of kernel " + L);
  t.if_("last" + L);
  t.data("tgt", Elem::f32, B * nb, {}, -1, -1, "the target block (one-hot or soft), placed by the host each step");
  t.data("xe", Elem::f32, B * N);
  t.data("xt", Elem::f32, B * N);
  for (const char* a : {"xm", "xs", "xr", "xu", "xy", "xv", "xw"}) t.data(a, Elem::f32, B);
  t.data("lacc", Elem::f32, 1);
  t.data("loss", Elem::f32, 1);
  for (const char* a : {"xe", "xt", "xm", "xs", "xr", "xu", "xy", "xv", "xw"}) t.mem1d(std::string(a) + "m", a);
  t.mem1d("laccm", "lacc");
  t.mem1d("lossm", "loss");
  t.mem1d("de", "xe", 0, 1);
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    t.mem1d("z" + C, "y" + L, cc, B, nb);
    t.mem1d("t" + C, "tgt", cc, B, nb);
    t.mem1d("g" + C, "dy" + L, cc, B, nb);
    t.mem1d("e" + C, "xe", cc, B, N);
  }
  t.task("lossk", TaskKind::local, 60);
  t.op(Op::fmovs, {"xmm", "z0"});
  for (int64_t cc = 1; cc < N; ++cc) t.op(Op::fmaxs, {"xmm", "xmm", "z" + std::to_string(cc)});
  for (int64_t cc = 0; cc < N; ++cc) t.op(Op::fsubs, {"e" + std::to_string(cc), "z" + std::to_string(cc), "xmm"});
  exp_ops(t, "xem", "xtm");
  t.op(Op::fmovs, {"xsm", "e0"});
  for (int64_t cc = 1; cc < N; ++cc) t.op(Op::fadds, {"xsm", "xsm", "e" + std::to_string(cc)});
  recip_ops(t, "xrm", "xsm", "xum", 1.0, static_cast<double>(N));
  // dy = (e r - t) / B (padding columns stay 0)
  t.op(Op::fmovs, {"dym" + L, fimm(0.0)});
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    t.op(Op::fmuls, {"g" + C, "e" + C, "xrm"});
    t.op(Op::fsubs, {"g" + C, "g" + C, "t" + C});
    t.op(Op::fmuls, {"g" + C, "g" + C, fnum(1.0 / static_cast<double>(B))});
  }
  // ln s: y0 = 2 (s - 1) / (s + 1), then y += s exp(-y) - 1, five times
  t.op(Op::fadds, {"xvm", "xsm", fimm(1.0)});
  recip_ops(t, "xym", "xvm", "xum", 2.0, static_cast<double>(N) + 1.0);
  t.op(Op::fadds, {"xvm", "xsm", fimm(-1.0)});
  t.op(Op::fmuls, {"xym", "xym", "xvm"});
  t.op(Op::fmuls, {"xym", "xym", fimm(2.0)});
  for (int i = 0; i < 5; ++i) {
    t.op(Op::fmuls, {"xwm", "xym", fimm(-1.0)});
    exp_ops(t, "xwm", "xvm");  // exp of a B-long vector: its own temporaries (xv as T)
    t.op(Op::fmuls, {"xwm", "xwm", "xsm"});
    t.op(Op::fadds, {"xym", "xym", "xwm"});
    t.op(Op::fadds, {"xym", "xym", fimm(-1.0)});
  }
  // per (b, c): t (m + ln s - z), summed
  t.op(Op::fadds, {"xym", "xym", "xmm"});
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    t.op(Op::fsubs, {"e" + C, "xym", "z" + C});
    t.op(Op::fmuls, {"e" + C, "e" + C, "t" + C});
  }
  sum_elements(t, "laccm", "de", B * N);
  t.op(Op::fmuls, {"lossm", "laccm", fnum(1.0 / static_cast<double>(B))});
  t.op(Op::activate, {"bstart" + L});
  t.op(Op::ret, {});
  t.endif();
}

// The backward pass of kernel l on every PE. dy[b, i] arrives as wavelets (color cb, from the
// chain end): the weight gradient's column i += x[b, :] dy[b, i] (x as saved in the forward pass)
// and, from layer 1 on, the input gradient's row b += W[:, i] dy[b, i]. After the last wavelet the
// input gradient is reduced along the x lines (the previous layer's chains, so it ends at that
// layer's chain ends) and the weight-gradient block goes out along the chain (own block first, then
// the blocks from behind) to the gradient port. Both reuse the forward chains' colors, so they use
// the same queues (a color arrives in one input queue of a PE).
void backward_program(const Compiled& c, size_t l, double lr, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), P0 = l ? std::to_string(l - 1) : "";
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const std::string wbuf = l % 2 ? "Wb" : "Wa";
  const int rI = 6 + 3 * static_cast<int>(l), rB = rI + 1, rT = rI + 2;
  const int li = static_cast<int>(l);
  t.comment("---- backward of kernel " + L + ": " + k.name);
  t.data("gW" + L, Elem::f32, kb * nb, {}, -1, -1, "the weight gradient block (as W's block)");
  if (l) t.data("dx" + L, Elem::f32, B * kb, {}, -1, -1, "the input gradient (partial over this PE's columns)");
  t.mem1d("gcol" + L, "gW" + L, 0, kb, nb);
  t.mem1d("xrow" + L, "xsave" + L, 0, kb);
  t.mem1d("gWm" + L, "gW" + L);
  if (l) {
    t.mem1d("wcolT" + L, wbuf, 0, kb, nb);
    t.mem1d("dxrow" + L, "dx" + L, 0, kb);
    t.mem1d("dxm" + L, "dx" + L);
    t.if_("first" + P0, false);
    t.fabric("dxfrom" + L, DsdKind::fabin, Elem::f32, P("cin" + P0), chain_queue(c, l - 1), B * kb);
    t.endif();
    t.if_("last" + P0, false);
    t.fabric("dxto" + L, DsdKind::fabout, Elem::f32, P("cout" + P0), 2, B * kb);
    t.endif();
  }
  t.fabric("gto" + L, DsdKind::fabout, Elem::f32, P("cout" + L), 2, kb * nb);
  t.if_("pre" + L);
  t.fabric("gto2" + L, DsdKind::fabout, Elem::f32, P("cout" + L), 2, P("npre" + L));
  t.fabric("gfrom" + L, DsdKind::fabin, Elem::f32, P("cin" + L), chain_queue(c, l), P("npre" + L));
  t.endif();
  // Chain ends: dy, the bias update, the multicast.
  t.if_("last" + L);
  t.data("dy" + L, Elem::f32, B * nb);
  t.data("db" + L, Elem::f32, nb);
  if (k.activated()) {  // one Relu or Tanh (compile refuses others)
    t.data("mk" + L, Elem::f32, B * nb);
    t.mem1d("mkm" + L, "mk" + L);
  }
  t.mem1d("dym" + L, "dy" + L);
  t.mem1d("dyrow" + L, "dy" + L, 0, nb);
  t.mem1d("dbm" + L, "db" + L);
  t.mem1d("biasm" + L, "bias" + L);
  t.fabric("dyout" + L, DsdKind::fabout, Elem::f32, k.cb, 3, B * nb);
  if (c.momentum != 0) {
    t.data("vb" + L, Elem::f32, nb, {}, -1, -1, "the bias velocity (momentum), kept from step to step");
    t.mem1d("vbm" + L, "vb" + L);
  }
  t.task("bstart" + L, TaskKind::local, 56 + li, -1, -1, false, false, "dy complete: ReLU mask, bias update, multicast");
  const std::string mk = "mkm" + L, dy = "dym" + L, y = "yall" + L;
  if (k.act_is(Unary::Kind::relu)) {  // the ReLU's derivative [y > 0] as -max(-y 2^100, -1): 1 for y >= 2^-100, 0 for y = 0 (y = relu(z) >= 0)
    t.op(Op::fmuls, {mk, y, fimm(-1.2676506e30)});
    t.op(Op::fmaxs, {mk, mk, fimm(-1.0)});
    t.op(Op::fnegs, {mk, mk});
    t.op(Op::fmuls, {dy, dy, mk});
  }
  if (k.act_is(Unary::Kind::tanh)) {  // the derivative 1 - y^2
    t.op(Op::fmuls, {mk, y, y});
    t.op(Op::fmuls, {mk, mk, fimm(-1.0)});
    t.op(Op::fadds, {mk, mk, fimm(1.0)});
    t.op(Op::fmuls, {dy, dy, mk});
  }
  // db = the sum of dy's rows
  t.op(Op::dsd_off, {"dyrow" + L, imm(0)});
  t.op(Op::fmovs, {"dbm" + L, "dyrow" + L});
  t.op(Op::mov, {reg(14), imm(1)});
  t.label("bl" + L);
  t.op(Op::sub, {reg(15), reg(14), imm(B)});
  t.op(Op::bz, {reg(15), "bd" + L});
  t.op(Op::mul, {reg(15), reg(14), imm(nb)});
  t.op(Op::dsd_off, {"dyrow" + L, reg(15)});
  t.op(Op::fadds, {"dbm" + L, "dbm" + L, "dyrow" + L});
  t.op(Op::add, {reg(14), reg(14), imm(1)});
  t.op(Op::jmp, {"bl" + L});
  t.label("bd" + L);
  if (c.momentum != 0) {  // v = mu v + db; b -= lr v (torch's SGD with momentum)
    t.op(Op::fmuls, {"vbm" + L, "vbm" + L, fnum(c.momentum)});
    t.op(Op::fadds, {"vbm" + L, "vbm" + L, "dbm" + L});
    t.op(Op::fmacs, {"biasm" + L, "biasm" + L, "vbm" + L, fnum(-lr)});
  } else {
    t.op(Op::fmacs, {"biasm" + L, "biasm" + L, "dbm" + L, fnum(-lr)});
  }
  t.op_async(Op::fmovs, {"dyout" + L, dy});
  t.op(Op::ret, {});
  t.endif();
  // Every PE: one task per dy wavelet.
  const bool last_layer = l + 1 == c.kernels.size();
  t.task("bdy" + L, TaskKind::data, 40 + li, k.cb, 4, false, !last_layer, "wv = dy[b, i]");
  t.op(Op::mul, {reg(rT), reg(rB), imm(kb)});
  t.op(Op::dsd_off, {"xrow" + L, reg(rT)});
  t.op(Op::dsd_off, {"gcol" + L, reg(rI)});
  first_sets(t, reg(rB), "ga" + L, "gb" + L, Op::fmuls, {"gcol" + L, "xrow" + L, kWv}, Op::fmacs, {"gcol" + L, "gcol" + L, "xrow" + L, kWv});
  if (l) {
    t.op(Op::dsd_off, {"dxrow" + L, reg(rT)});
    t.op(Op::dsd_off, {"wcolT" + L, reg(rI)});
    first_sets(t, reg(rI), "da" + L, "dc" + L, Op::fmuls, {"dxrow" + L, "wcolT" + L, kWv}, Op::fmacs, {"dxrow" + L, "dxrow" + L, "wcolT" + L, kWv});
  }
  t.op(Op::add, {reg(rI), reg(rI), imm(1)});
  t.op(Op::sub, {reg(rT), reg(rI), imm(nb)});
  t.op(Op::bnz, {reg(rT), "bx" + L});
  t.op(Op::mov, {reg(rI), imm(0)});
  t.op(Op::add, {reg(rB), reg(rB), imm(1)});
  t.op(Op::sub, {reg(rT), reg(rB), imm(B)});
  t.op(Op::bnz, {reg(rT), "bx" + L});
  t.op(Op::mov, {reg(rB), imm(0)});
  t.op(Op::activate, {"bdone" + L});
  t.label("bx" + L);
  t.op(Op::ret, {});
  // All of dy seen: the input gradient's reduce (synchronous), then the weight gradient out.
  t.task("bdone" + L, TaskKind::local, 44 + li);
  if (l) {
    chain_step(t, "first" + P0, "last" + P0, "dxm" + L, "dxto" + L, "dxfrom" + L, "dym" + P0);
    t.if_("last" + P0);
    t.op(Op::activate, {"bstart" + P0});
    t.endif();
  }
  t.op_async(Op::fmovs, {"gto" + L, "gWm" + L}, "g2" + L);
  t.op(Op::ret, {});
  t.task("g2" + L, TaskKind::local, 48 + li);
  t.if_("pre" + L);
  t.op_async(Op::fmovs, {"gto2" + L, "gfrom" + L}, "g3" + L);
  t.else_();
  t.op(Op::activate, {"g3" + L});
  t.endif();
  t.op(Op::ret, {});
  t.task("g3" + L, TaskKind::local, 52 + li, -1, -1, false, false, "the gradient block has left");
  if (l) {
    t.op(Op::unblock, {"bdy" + P0});
    t.op(Op::ret, {});
  } else {
    t.op(Op::halt, {});
  }
}

}  // namespace tessera::wafer::detail
