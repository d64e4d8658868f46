// The loss at the last layer's chain ends (training, weight streaming; docs/wafer-compiler.md
// "Training"): the loss chain's routes and parameters, the MSE and softmax cross-entropy programs
// with their gradients (scaled by the loss scale with dynamic loss scaling).
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// The loss chain along the last layer's chain ends (its N axis), towards S or E, colors cl0/cl1.
bool loss_on_ln_chain(const Compiled& c) { return c.training && c.kernels.back().layernorm; }

void loss_routes(const Compiled& c, json& routes) {
  if (loss_on_ln_chain(c)) return;  // (the LayerNorm's edge chain, routed already)
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

// Dynamic loss scaling: the loss scale S at the loss PEs (placed by the host each step, from
// MemoryX's state) and dy *= S over the chain end's n values, in fp32 (fs2h rounds the product
// to the compute type when dy is sent: a product too large for it becomes infinite there).
namespace {
void scale_arrays(const Compiled& c, ProgramTemplate& t, int64_t n) {
  if (!c.loss_scaling) return;
  t.data("lsc", Elem::f32, 1, {}, -1, -1, "the loss scale, placed by the host each step");
  t.mem4d("lscb", "lsc", 0, {{n, 0}}, "S for every value of dy");
}
void scale_dy(const Compiled& c, ProgramTemplate& t, const std::string& L) {
  if (c.loss_scaling) t.op(Op::fmuls, {"dym" + L, "dym" + L, "lscb"});
}
}  // namespace

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
  const double inv = 1.0 / static_cast<double>(k.B * k.N * c.micro_batches);  // (the whole batch's mean)
  t.comment("---- loss (mean squared error) at the chain ends of kernel " + L);
  t.if_("last" + L);
  t.data("tgt", Elem::f32, n, {}, -1, -1, "the target block, placed by the host each step");
  t.data("dd", Elem::f32, n);
  t.data("lacc", Elem::f32, 1);
  scale_arrays(c, t, n);
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
  t.fabric("lfrom", DsdKind::fabin, Elem::f32, P("lcin"), loss_on_ln_chain(c) ? 4 : 7, 1);  // (on the LayerNorm's chain colors: its queue)
  t.endif();
  t.task("lossk", TaskKind::local, loss_task_id(c));
  t.op(Op::fsubs, {"ddm", "yall" + L, "tgtm"});
  t.op(Op::fmuls, {"dym" + L, "ddm", fnum(2.0 * inv)});
  scale_dy(c, t, L);
  t.op(Op::fmuls, {"ddm", "ddm", "ddm"});
  sum_elements(t, "laccm", "de", n);
  chain_step(t, "lfirst", "llast", "laccm", "lto", "lfrom", "laccm");
  t.if_("llast");
  t.op(Op::fmuls, {"lossm", "laccm", fnum(inv)});
  t.endif();
  t.op(Op::activate, {"bstart"});
  t.op(Op::ret, {});
  t.endif();
}

// Softmax cross-entropy at the last layer's first chain end (every class on this PE, in one block;
// the other chain ends hold padding and send dy = 0; docs/wafer-compiler.md):
// per sample m = max z, e = exp(z - m), s = sum e, p = e / s; dy = (p - t) / B; the loss
// sum_c t (m + ln s - z) / B, ln s by Newton's iteration y += s exp(-y) - 1 from 2 (s - 1) / (s + 1).
void xent_program(const Compiled& c, ProgramTemplate& t) {
  const size_t l = c.kernels.size() - 1;
  const DenseKernel& k = c.kernels.back();
  const std::string L = std::to_string(l);
  const int64_t B = k.B, N = k.N, nb = k.nb;
  const ArrayAt ya = y_array(c, l);
  t.comment("---- loss (softmax cross-entropy) at the first chain end of kernel " + L);
  t.if_("last" + L);
  t.if_("lfirst", false);  // (a padding block's chain end: dy 0)
  t.task("lossk", TaskKind::local, loss_task_id(c));
  t.op(Op::fmovs, {"dym" + L, fimm(0.0)});
  t.op(Op::activate, {"bstart"});
  t.op(Op::ret, {});
  t.else_();
  t.data("tgt", Elem::f32, B * nb, {}, -1, -1, "the target block (one-hot or soft), placed by the host each step");
  t.data("xe", Elem::f32, B * N);
  t.data("xt", Elem::f32, B * N);
  for (const char* a : {"xm", "xs", "xr", "xu", "xy", "xv", "xw"}) t.data(a, Elem::f32, B);
  t.data("lacc", Elem::f32, 1);
  t.data("loss", Elem::f32, 1);
  scale_arrays(c, t, B * nb);
  for (const char* a : {"xe", "xt", "xm", "xs", "xr", "xu", "xy", "xv", "xw"}) t.mem1d(std::string(a) + "m", a);
  t.mem1d("laccm", "lacc");
  t.mem1d("lossm", "loss");
  t.mem1d("de", "xe", 0, 1);
  for (int64_t cc = 0; cc < N; ++cc) {
    const std::string C = std::to_string(cc);
    t.mem1d("z" + C, ya.array, ya.off + cc, B, nb);
    t.mem1d("t" + C, "tgt", cc, B, nb);
    t.mem1d("g" + C, "dy" + L, cc, B, nb);
    t.mem1d("e" + C, "xe", cc, B, N);
  }
  t.task("lossk", TaskKind::local, loss_task_id(c));
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
    t.op(Op::fmuls, {"g" + C, "g" + C, fnum(1.0 / static_cast<double>(B * c.micro_batches))});  // (the whole batch's)
  }
  scale_dy(c, t, L);
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
  t.op(Op::fmuls, {"lossm", "laccm", fnum(1.0 / static_cast<double>(B * c.micro_batches))});
  t.op(Op::activate, {"bstart"});
  t.op(Op::ret, {});
  t.endif();
  t.endif();
}

}  // namespace tessera::wafer::detail
