// Training (weight streaming; compile.hpp, docs/wafer-compiler.md "Training", docs/training.md): routes,
// parameters and the backward program of every layer, the bias updates and MemoryX's loss-scaling
// verdict (the loss at the last layer's chain ends: loss.cpp; Adam's bias update: functions.cpp).
#include <algorithm>
#include <string>

#include "isa/error.hpp"
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

// Task ids of the backward pass (after the sequencer's, 0-10; lower ids go first): the dy
// wavelets of kernel l (a data task per kernel, on its own color), then the shared tasks.
namespace {
constexpr int kDyOutQueue = 4, kGradOutQueue = 5, kDyInQueue = 4;
int id_bdy(size_t l) { return 11 + static_cast<int>(l); }
int id_after(const Compiled& c, int i) { return 11 + static_cast<int>(c.kernels.size()) + i; }  // 0 bdone, 1 g2, 2 g3, 3 bstart, 4 lossk, 5 vdt
}  // namespace

int loss_task_id(const Compiled& c) { return id_after(c, 4); }

// The backward pass of kernel l on every PE: its arrays and DSDs, and its dy task. dy[b, i]
// arrives as wavelets (color cb, from the chain end): the weight gradient's column i += x[b, :]
// dy[b, i] (x as the forward pass saved it) and, from layer 1 on, the input gradient's row b +=
// W[:, i] dy[b, i] (W in its orientation's buffer: still there from the forward pass, or streamed
// again -- Compiled::reloads). After the last wavelet the shared tasks (backward_tasks) reduce the
// input gradient along the x lines (the previous layer's chains, so it ends at that layer's chain
// ends) and send the weight-gradient block along the chain (own block first, then the blocks from
// behind) to the gradient port. Both reuse the forward chains' colors, so their queues.
void backward_program(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), P0 = l ? std::to_string(l - 1) : "";
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const std::string wbuf = k.k_on_columns ? "Wa" : "Wb";
  // (the forward pass's x counters r0 and r1 are back at 0: the dy tasks count with them)
  const Operand rI = reg(0), rB = reg(1), rT = reg(kSeqScratch);
  t.comment("---- backward of kernel " + L + ": " + k.name);
  t.data("gW" + L, Elem::f32, kb * nb, {}, -1, -1, "the weight gradient block (as W's block)");
  const bool dx = has_input_grad(c, l);  // (the graph input's readers -- the first kernel, attention's Q, K and V -- need none)
  if (dx) t.data("dx" + L, Elem::f32, B * kb, {}, -1, -1, "the input gradient (partial over this PE's columns)");
  t.mem1d("gcol" + L, "gW" + L, 0, kb, nb);
  t.mem1d("xrow" + L, "Xsv", c.xs_off[l], kb);
  t.mem1d("gWm" + L, "gW" + L);
  const Elem ge = c.compute;  // the gradient leaves in the compute type (the training graph's dW is of it)
  if (c.half()) {
    t.data("gWh" + L, ge, kb * nb, {}, -1, -1, "the weight gradient in the compute type, as it is sent");
    t.mem1d("gWhm" + L, "gWh" + L);
    if (c.loss_scaling) t.mem1d("gWr0" + L, "gWh" + L, 0, nb);
  }
  if (dx) {
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
  col2im_arrays(c, l, t);  // (a Conv reading a Conv: its input gradient's col2im at the producer's chain ends)
  // The async sends run on the microthread of their output queue: the gradient's on 5, dy's on 4,
  // clear of the weight loads' 2 and 3 (a reload may be under way meanwhile).
  t.fabric("gto" + L, DsdKind::fabout, ge, P("cout" + L), kGradOutQueue, kb * nb);
  t.if_("pre" + L);
  t.fabric("gto2" + L, DsdKind::fabout, ge, P("cout" + L), kGradOutQueue, P("npre" + L));
  t.fabric("gfrom" + L, DsdKind::fabin, ge, P("cin" + L), chain_queue(c, l), P("npre" + L));
  t.endif();
  // Chain ends: dy, the bias gradient, the multicast.
  t.if_("last" + L);
  t.data("dy" + L, Elem::f32, B * nb);
  t.data("db" + L, Elem::f32, nb);
  if (k.activated() && l + 1 == c.kernels.size()) {  // one Relu or Tanh (compile refuses others); before the last kernel the mask overwrites y, which nothing reads after bstart
    t.data("mk" + L, Elem::f32, B * nb);
    t.mem1d("mkm" + L, "mk" + L);
  }
  t.mem1d("dym" + L, "dy" + L);
  t.mem1d("dyrow" + L, "dy" + L, 0, nb);
  norm_backward_arrays(c, l, t);  // (a LayerNorm: training_norm.cpp)
  attention_backward_arrays(c, l, t);  // (attention: training_attn.cpp)
  t.mem1d("dbm" + L, "db" + L);
  t.mem1d("biasm" + L, "bias" + L);
  if (c.half()) {  // mixed precision: dy leaves in the compute type (the products take 16-bit factors)
    t.data("dyh" + L, c.compute, B * nb, {}, -1, -1, "dy in the compute type, as it is sent");
    t.mem1d("dyhm" + L, "dyh" + L);
  }
  if (c.loss_scaling) {
    t.data("dbh" + L, c.compute, nb, {}, -1, -1, "db in the compute type, times 0: NaN where it is not finite");
    t.mem1d("dbhm" + L, "dbh" + L);
  }
  t.fabric("dyout" + L, DsdKind::fabout, c.compute, k.cb, kDyOutQueue, B * nb);
  pool_backward_arrays(c, l, t);  // (and a Flatten reader's order: training_conv.cpp)
  if (c.micro_batches > 1) {
    t.data("dba" + L, Elem::f32, nb, {}, -1, -1, "the bias gradient summed over the step's micro-batches");
    t.mem1d("dbam" + L, "dba" + L);
  }
  if (c.momentum != 0) {
    t.data("vb" + L, Elem::f32, nb, {}, -1, -1, "the bias velocity (momentum), kept from step to step");
    t.mem1d("vbm" + L, "vb" + L);
  }
  if (c.lr_scheduled) {  // the step's learning rate (placed each step) and a temporary
    t.data("lrs" + L, Elem::f32, 1, {}, -1, -1, "the step's learning rate, placed by the host each step");
    t.mem4d("lrb" + L, "lrs" + L, 0, {{nb, 0}});
    t.data("lrt" + L, Elem::f32, nb);
    t.mem1d("lrtm" + L, "lrt" + L);
  }
  if (c.adam) {  // Adam's moments (kept), the bias corrections (placed each step), temporaries
    t.data("am" + L, Elem::f32, nb, {}, -1, -1, "Adam's first moment of the bias, kept from step to step");
    t.data("av" + L, Elem::f32, nb, {}, -1, -1, "Adam's second moment of the bias, kept from step to step");
    t.data("abc" + L, Elem::f32, 2, {}, -1, -1, "1 / (1 - beta1^t), 1 / (1 - beta2^t): placed by the host each step");
    t.mem1d("amm" + L, "am" + L);
    t.mem1d("avm" + L, "av" + L);
    t.mem4d("abc1b" + L, "abc" + L, 0, {{nb, 0}});
    t.mem4d("abc2b" + L, "abc" + L, 1, {{nb, 0}});
    for (int i = 0; i < kAdamTemps; ++i) {
      t.data("ad" + L + "_" + std::to_string(i) + "a", Elem::f32, nb);
      t.mem1d("ad" + L + "_" + std::to_string(i), "ad" + L + "_" + std::to_string(i) + "a");
    }
  }
  t.endif();
  // Every PE: one task per dy wavelet (blocked until the kernel after it has sent its gradient and,
  // for a reload, its weights are in again).
  const bool last_layer = l + 1 == c.kernels.size();
  t.task("bdy" + L, TaskKind::data, id_bdy(l), k.cb, kDyInQueue, false, !last_layer, "wv = dy[b, i]");
  t.op(Op::mul, {rT, rB, imm(kb)});
  t.op(Op::dsd_off, {"xrow" + L, rT});
  t.op(Op::dsd_off, {"gcol" + L, rI});
  // (mixed precision: x, W and dy in the compute type, the products exact and summed in fp32 -- fmachs)
  if (c.half())
    first_sets(t, rB, "ga" + L, "gb" + L, Op::fmachs, {"gcol" + L, fimm(0.0), "xrow" + L, kWv}, Op::fmachs, {"gcol" + L, "gcol" + L, "xrow" + L, kWv});
  else
    first_sets(t, rB, "ga" + L, "gb" + L, Op::fmuls, {"gcol" + L, "xrow" + L, kWv}, Op::fmacs, {"gcol" + L, "gcol" + L, "xrow" + L, kWv});
  if (dx) {
    t.op(Op::dsd_off, {"dxrow" + L, rT});
    t.op(Op::dsd_off, {"wcolT" + L, rI});
    if (c.half())
      first_sets(t, rI, "da" + L, "dc" + L, Op::fmachs, {"dxrow" + L, fimm(0.0), "wcolT" + L, kWv}, Op::fmachs, {"dxrow" + L, "dxrow" + L, "wcolT" + L, kWv});
    else
      first_sets(t, rI, "da" + L, "dc" + L, Op::fmuls, {"dxrow" + L, "wcolT" + L, kWv}, Op::fmacs, {"dxrow" + L, "dxrow" + L, "wcolT" + L, kWv});
  }
  t.op(Op::add, {rI, rI, imm(1)});
  t.op(Op::sub, {rT, rI, imm(nb)});
  t.op(Op::bnz, {rT, "bx" + L});
  t.op(Op::mov, {rI, imm(0)});
  t.op(Op::add, {rB, rB, imm(1)});
  t.op(Op::sub, {rT, rB, imm(B)});
  t.op(Op::bnz, {rT, "bx" + L});
  t.op(Op::mov, {rB, imm(0)});
  t.op(Op::activate, {"bdone"});
  t.label("bx" + L);
  t.op(Op::ret, {});
}

// The backward pass's shared tasks, kernel by kernel from the last (each dispatches on a counter:
// r13 the kernels whose dy tasks have ended on this PE, r11 those whose gradient block has left):
//   bstart  dy complete at kernel l's chain ends: the activation's derivative, the bias gradient
//           and update, the multicast;
//   bdone   all of dy seen: the input gradient's reduce (synchronous; its end starts the previous
//           kernel's bstart), then the weight-gradient block out (g2: the blocks from behind);
//   g3      the block has left: the previous kernel's dy task may go on (once its weights are in
//           again, for a reload), or, after kernel 0, the PE halts.
// The bias update from db at kernel l's chain ends (weight decay, then SGD, momentum or Adam, in the
// reference graph's order; nothing for a layer without a bias): in bstart, or with loss scaling in
// the verdict task, after db / S.
void bias_update_ops(const Compiled& c, size_t l, double lr, ProgramTemplate& t) {
  if (c.kernels[l].b_value.empty()) return;  // (a layer without a bias: its zero bias stays)
  const std::string L = std::to_string(l);
  if (c.weight_decay != 0) t.op(Op::fmacs, {"dbm" + L, "dbm" + L, "biasm" + L, fnum(c.weight_decay)});  // db + b wd (torch's weight_decay)
  if (c.adam) {
    adam_bias_ops(t, c.beta1, c.beta2, c.eps, lr, L, c.lr_scheduled);
    return;
  }
  if (c.momentum != 0) {  // v = mu v + db; b -= lr v (torch's SGD with momentum)
    t.op(Op::fmuls, {"vbm" + L, "vbm" + L, fnum(c.momentum)});
    t.op(Op::fadds, {"vbm" + L, "vbm" + L, "dbm" + L});
  }
  const std::string g = (c.momentum != 0 ? "vbm" : "dbm") + L;
  if (c.lr_scheduled) {  // b - g lr, lr the step's (placed): the graph's Mul and Sub
    t.op(Op::fmuls, {"lrtm" + L, g, "lrb" + L});
    t.op(Op::fsubs, {"biasm" + L, "biasm" + L, "lrtm" + L});
  } else {
    t.op(Op::fmacs, {"biasm" + L, "biasm" + L, g, fnum(-lr)});
  }
}

int64_t bias_update_cycles(const Compiled& c, size_t l, const WaferConfig& cfg) {
  ProgramTemplate t;
  bias_update_ops(c, l, 0.01, t);
  return t.dsd_cycles(c.kernels[l].nb, cfg);
}

void backward_tasks(const Compiled& c, double lr, ProgramTemplate& t) {
  const size_t n = c.kernels.size();
  std::vector<int64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = static_cast<int64_t>(i);  // key i: kernel n - 1 - i
  auto layer = [&](int64_t key) { return n - 1 - static_cast<size_t>(key); };
  auto bias_update = [&](size_t l) { bias_update_ops(c, l, lr, t); };
  t.comment("---- the backward pass (r13 kernels whose dy tasks have ended here, r11 whose gradient has left; from the last kernel)");

  t.task("bstart", TaskKind::local, id_after(c, 3), -1, -1, false, false, "dy complete at kernel n - 1 - r13's chain ends: mask, bias update, multicast");
  dispatch(t, kRegBdone, keys, "bs", [&](int64_t key) {
    const size_t l = layer(key);
    const DenseKernel& k = c.kernels[l];
    const std::string L = std::to_string(l);
    const int64_t B = k.B, nb = k.nb;
    t.if_("last" + L);
    const std::string dy = "dym" + L, y = "yall" + L, mk = l + 1 < n ? y : "mkm" + L;  // (the last kernel's y is the forward output the host reads)
    attention_backward_ops(c, l, t);  // (attention: dV, dQ, dK from dO)
    norm_backward_ops(c, l, t);  // (a LayerNorm: dy of its input; a residual's gradient kept)
    pool_backward_ops(c, l, t);  // (a Conv's pool: training_conv.cpp)
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
    sum_rows(t, "dbm" + L, "dyrow" + L, B, nb, "b" + L);  // db = the sum of dy's rows
    // (with loss scaling or micro-batches: the verdict task, vdt; Adam's long update after the multicast has started)
    if (c.micro_batches > 1 && !k.b_value.empty()) t.op(Op::fadds, {"dbam" + L, "dbam" + L, "dbm" + L});
    if (!c.verdict() && !c.adam) bias_update(l);
    if (!c.verdict()) ln_update_ops(c, l, lr, t);  // (the LayerNorm's scale and shift: SGD)
    if (c.half()) {
      t.op(Op::fs2h, {"dyhm" + L, dy});
      t.op_async(Op::fmovh, {"dyout" + L, "dyhm" + L});
    } else {
      t.op_async(Op::fmovs, {"dyout" + L, dy});
    }
    if (!c.verdict() && c.adam) bias_update(l);
    t.endif();
    t.op(Op::ret, {});
  });

  t.task("bdone", TaskKind::local, id_after(c, 0), -1, -1, false, false, "kernel n - 1 - r13's dy tasks are done here");
  dispatch(t, kRegBdone, keys, "bd", [&](int64_t key) {
    const size_t l = layer(key);
    const std::string L = std::to_string(l), P0 = l ? std::to_string(l - 1) : "";
    t.op(Op::add, {reg(kRegBdone), reg(kRegBdone), imm(1)});
    if (!c.reloads.empty()) t.op(Op::unblock, {"ld"}, "a reload waiting for this kernel's buffer goes on");
    if (has_input_grad(c, l)) {
      const bool col2im = conv_reads_conv(c, l);
      chain_step(t, "first" + P0, "last" + P0, "dxm" + L, "dxto" + L, "dxfrom" + L, col2im ? "dxm" + L : (c.kernels[l - 1].spatial() ? "dyT" : c.kernels[l - 1].attn ? "datm" : "dym") + P0);
      t.if_("last" + P0);
      if (col2im) col2im_ops(c, l, t);
      residual_grad_ops(c, l - 1, t);
      t.op(Op::activate, {"bstart"});
      t.endif();
    }
    if (c.half()) {  // the gradient in the compute type (with loss scaling, db's finiteness folded in)
      t.op(Op::fs2h, {"gWhm" + L, "gWm" + L});
      if (c.loss_scaling && !c.kernels[l].b_value.empty()) {  // (no bias: no gradient to check)
        t.if_("last" + L);
        t.op(Op::fs2h, {"dbhm" + L, "dbm" + L});
        t.op(Op::fmulh, {"dbhm" + L, "dbhm" + L, fimm(0.0)});
        t.op(Op::faddh, {"gWr0" + L, "gWr0" + L, "dbhm" + L});
        t.endif();
      }
      t.op_async(Op::fmovh, {"gto" + L, "gWhm" + L}, "g2");
    } else {
      t.op_async(Op::fmovs, {"gto" + L, "gWm" + L}, "g2");
    }
    t.op(Op::ret, {});
  });

  t.task("g2", TaskKind::local, id_after(c, 1), -1, -1, false, false, "kernel n - 1 - r11's block has left: the blocks from behind");
  dispatch(t, kRegGdone, keys, "gb", [&](int64_t key) {
    const std::string L = std::to_string(layer(key));
    t.if_("pre" + L);
    t.op_async(c.half() ? Op::fmovh : Op::fmovs, {"gto2" + L, "gfrom" + L}, "g3");
    t.else_();
    t.op(Op::activate, {"g3"});
    t.endif();
    t.op(Op::ret, {});
  });

  t.task("g3", TaskKind::local, id_after(c, 2), -1, -1, false, false, "kernel n - 1 - r11's gradient blocks have left");
  dispatch(t, kRegGdone, keys, "gc", [&](int64_t key) {
    const size_t l = layer(key);
    if (l == 0) {
      if (c.verdict()) {  // the PEs the verdict reaches wait for it
        t.if_("vrecv");
        t.op(Op::unblock, {"vdt"});
        t.op(Op::ret, {});
        t.else_();
        t.op(Op::halt, {});
        t.endif();
      } else {
        t.op(Op::halt, {});
      }
      return;
    }
    t.op(Op::add, {reg(kRegGdone), reg(kRegGdone), imm(1)});
    const auto it = std::find(c.reloads.begin(), c.reloads.end(), static_cast<int64_t>(l - 1));
    const std::string P0 = std::to_string(l - 1);
    if (!has_input_grad(c, l)) {  // (attention's K or V: the kernel before's dy is ready -- the attention's backward made it --
      t.if_("last" + P0);         // and every PE of this chain has ended its dy tasks: the gradient blocks have left)
      t.op(Op::activate, {"bstart"});
      t.endif();
    }
    if (it != c.reloads.end()) {  // (else its load's end unblocks it)
      const int64_t loaded = static_cast<int64_t>(n) + (it - c.reloads.begin()) + 1;  // r9 once the reload is in
      t.op(Op::sub, {reg(kSeqScratch), reg(kRegLoaded), imm(loaded)});
      t.op(Op::blz, {reg(kSeqScratch), "gw" + P0});
    }
    t.op(Op::unblock, {"bdy" + P0});
    t.label("gw" + P0);
    t.op(Op::ret, {});
  });

  if (!c.verdict()) return;
  // MemoryX's verdict (one wavelet per PE of the east column and the south row, after layer 0's
  // gradient has left): with loss scaling 1 / S when every gradient was finite -- db / S, then the
  // bias update --, 0 when one was not: the step is skipped, the biases and their velocities keep
  // their values. With micro-batches 1 after the step's last run -- db is the sum of the runs',
  // which starts again from 0 --, 0 before it: nothing to update yet.
  t.if_("vrecv");
  t.task("vdt", TaskKind::data, id_after(c, 5), c.cv, kDyInQueue, false, true, "wv = 1 / S, or 0: the step is skipped");
  t.op(Op::bz, {kWv, "vskip"});
  for (size_t l = 0; l < n; ++l) {
    const std::string L = std::to_string(l);
    const bool has_b = !c.kernels[l].b_value.empty(), has_ln = c.kernels[l].layernorm;
    if (!has_b && !has_ln) continue;
    t.if_("last" + L);
    if (has_b) {
      if (c.micro_batches > 1) {
        t.op(Op::fmovs, {"dbm" + L, "dbam" + L});
        t.op(Op::fmovs, {"dbam" + L, fimm(0.0)});
      }
      if (c.loss_scaling) t.op(Op::fmuls, {"dbm" + L, "dbm" + L, kWv});
      bias_update(l);
    }
    if (has_ln) {  // (micro-batches: the LayerNorm's gradients summed over the runs; training_norm.cpp)
      ln_sum_take_ops(c, l, t);
      ln_update_ops(c, l, lr, t);
    }
    t.endif();
  }
  t.label("vskip");
  t.op(Op::halt, {});
  t.endif();
}

// What training on the wafer maps (else an error naming the kernel or the JSON pointer): a chain
// of dense layers with one bias and at most one Relu or Tanh each, weight streaming, fp32 or mixed
// 16-bit, MSE or softmax cross-entropy.
void check_training(const Compiled& c, const MappingOptions& opt) {
  const char* hint = "training on the wafer maps chains of dense layers (Gemm/MatMul, bias, ReLU or Tanh) with weight streaming in fp32 or mixed fp16/bf16/cbf16, MSE or softmax cross-entropy (docs/wafer-compiler.md); run it on target.kind neuroncore or reference";
  if (opt.mode != MapMode::weight_streaming) throw InputError("/mapping/mode", "training on the wafer runs in weight_streaming mode (weights and their updates in MemoryX)", "set mapping.mode to weight_streaming");
  for (const auto& k : c.kernels) {
    const size_t l = static_cast<size_t>(&k - c.kernels.data());
    const std::string where = "kernel '" + k.name + "'";
    if (k.rnn) throw InputError(where, "recurrent layers are not trained on the wafer in this build", hint);
    if (k.b_value == "*") throw InputError(where, "two biases (Gemm's C and an Add) are not trained on the wafer", hint);
    if (k.w_value.empty())
      throw InputError(where, "a kernel the compiler added (an identity layer for a LayerNorm or pool of the graph input) has no weights to train: such a model is not trained on the wafer in this build", hint);
    if (k.gn_size || (k.spatial() && k.layernorm))
      throw InputError(where, "a GroupNorm, InstanceNorm or LayerNorm over a Conv's channels is not trained on the wafer in this build", hint);
    if (!k.w_derived.empty()) throw InputError(where, k.w_derived + ", which are then not the model's to train on the wafer", hint);
    // A Conv trains as the first kernel or reading a Conv (its input gradient by col2im), with a
    // max pool of non-overlapping windows, or a global average pool, after its function, read by a
    // Conv or by a Flatten into a dense layer.
    if (k.spatial()) check_conv_training(c, l, hint);
    if (k.spatial() && k.pkh && !global_pool(k) && (k.pavg || k.pool_padded() || k.psh != k.pkh || k.psw != k.pkw))
      throw InputError(where, "a pool after a trained Conv must be a max pool of non-overlapping windows (stride = window, no padding) or a global average pool in this build", hint);
    if (k.spatial() && (!k.acts_after.empty() || k.gate_of >= 0))
      throw InputError(where, "functions after a trained Conv's pool or a squeeze-excitation gate are not trained on the wafer in this build", hint);
    if (k.xread == DenseKernel::XRead::flatten && !(l > 0 && c.kernels[l - 1].spatial()))
      throw InputError(where, "a Flatten into a trained dense layer is mapped after a Conv only in this build", hint);
    if (l + 1 < c.kernels.size() && k.spatial() && c.kernels[l + 1].xread != DenseKernel::XRead::flatten && !c.kernels[l + 1].spatial())
      throw InputError(where, "a trained Conv is read by a Conv or by a Flatten into a dense layer in this build", hint);
    if (k.tokens || k.row_period || k.sel_period)
      throw InputError(where, "tokens (a Conv's positions as rows, constant rows, a Slice of one token) are not trained on the wafer in this build", hint);
    if (k.attn) check_attention_training(c, l, hint);
    else if (k.src != static_cast<int64_t>(l) - 1 && !(k.src < 0 && attn_input_kernel(c, l)))
      throw InputError(where, "attention and branching graphs (a layer reading other than the layer before it) are not trained on the wafer in this build", hint);
  }
  if (opt.loss != "mse" && opt.loss != "softmax_cross_entropy") throw InputError("/training/loss", "the wafer computes mse or softmax_cross_entropy", hint);
  if (opt.loss_scaling && opt.micro_batches > 1)
    throw InputError("/mapping/micro_batch", "micro-batches (gradient accumulation) with dynamic loss scaling are not trained on the wafer in this build",
                     "give the whole batch (mapping.micro_batch), or leave training.loss_scaling out");
  if (opt.loss_scaling && !c.half())
    throw InputError("/training/loss_scaling", "loss scaling on the wafer is for 16-bit compute (fp32 gradients do not overflow)", "set precision.compute to fp16, bf16 or cbf16, or leave training.loss_scaling out");
  for (const auto& k : c.kernels) {
    const size_t l = static_cast<size_t>(&k - c.kernels.data());
    const std::string where = "kernel '" + k.name + "'";
    if ((k.activated() && !k.act_is(Unary::Kind::relu) && !k.act_is(Unary::Kind::tanh)) || !k.acts_after.empty())
      throw InputError(where, "activations other than one Relu or Tanh are not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    // A residual adds the input of kernel `residual`, on the same PEs: the graph input (no gradient
    // needed) or an earlier kernel's output (its gradient there gets this one's: residual_grad).
    if (k.residual >= 0 && (k.res_mul || k.res_out || k.res_preln || k.res_move || k.res_host))
      throw InputError(where, "residuals other than a sum of the graph input or an earlier kernel's output on the same PEs (a gate, a shortcut's output, a pre-norm value, one moved across the edges) are not trained on the wafer in this build",
                       "train it on target.kind neuroncore or reference");
    if (k.keeps_preln)
      throw InputError(where, "a pre-norm residual (the value before a LayerNorm) is not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    if (k.residual >= 0 && residual_producer(c, l) >= 0 && c.kernels[static_cast<size_t>(residual_producer(c, l))].attn)
      throw InputError(where, "a residual of an attention's output is not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    if (k.residual >= 0 && (k.spatial() || (residual_producer(c, l) >= 0 && c.kernels[static_cast<size_t>(residual_producer(c, l))].spatial())))
      throw InputError(where, "a residual of convolutions is not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    if (k.residual >= 0 && k.activated())
      throw InputError(where, "a function before a trained residual is not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    if (!k.layernorm) continue;
    if (k.rms)
      throw InputError(where, "an RMSNorm is not trained on the wafer in this build (LayerNorm is)", "train it on target.kind neuroncore or reference");
    if (k.activated() || !k.acts_post_ln.empty() || k.ln_premask() || k.ln_postmask())
      throw InputError(where, "functions around a trained LayerNorm are not trained on the wafer in this build", "train it on target.kind neuroncore or reference");
    if (opt.momentum != 0 || opt.adam || opt.loss_scaling)
      throw InputError(opt.adam || opt.momentum != 0 ? "/training/optimizer" : "/training/loss_scaling",
                       "kernel '" + k.name + "': a LayerNorm's scale and shift are trained on the wafer with SGD (weight decay, schedules and micro-batches too), without loss scaling, in this build",
                       "use sgd, or train it on target.kind neuroncore or reference");
  }
}

// Dynamic loss scaling: MemoryX's verdict enters at the east edge, one lane per row, to the east
// column's PEs; the south row's lane goes on west along the row. Every PE of the east column and
// the south row (`vrecv`: where the chain ends of either orientation lie) takes one wavelet.
void verdict_layout(const Compiled& c, json& routes, json& params, json& ports) {
  const int64_t w = c.kernels.back().w, h = c.kernels.back().h;
  const DirSet E = dir_bit(Dir::E), W = dir_bit(Dir::W);
  if (h > 1) routes.push_back(route(c.cv, w - 1, 0, 1, h - 1, E, kRamp));
  routes.push_back(route(c.cv, w - 1, h - 1, 1, 1, E, w > 1 ? W | kRamp : kRamp));
  if (w > 2) routes.push_back(route(c.cv, 1, h - 1, w - 2, 1, E, W | kRamp));
  if (w > 1) routes.push_back(route(c.cv, 0, h - 1, 1, 1, E, kRamp));
  params["vrecv"] = "(px == width - 1) + (py == height - 1)";
  ports.push_back({{"name", "verdict"}, {"dir", "in"}, {"side", "E"}, {"x", w - 1}, {"y", 0}, {"length", h}, {"color", c.cv}, {"type", "f32"}});
}

// The training parts of the weight-streaming layout: per kernel its dy routes and backward arrays
// and task, one gradient port per orientation (the chain colors are the orientation's: its lanes
// carry the kernels' blocks one kernel after another, last kernel first), the shared backward
// tasks, the loss chain and program.
void training_layout(Compiled& c, const MappingOptions& opt, json& routes, json& params, json& ports, ProgramTemplate& t) {
  for (const auto& k : c.kernels)
    if (k.spatial() && k.kblocks() * k.kb != k.cin * k.kh * k.kw)  // (the padded rows' gradients would move their zero weights)
      throw InputError("/mapping/wafer_rect", "kernel '" + k.name + "': the Conv's " + std::to_string(k.cin * k.kh * k.kw) + " weights per output channel split into " +
                                                  std::to_string(k.kblocks()) + " blocks of " + std::to_string(k.kb) + " with padding, which training does not map",
                       "give a rectangle whose K axis divides the Conv's channels x kernel rows (e.g. 1 PE)");
  for (size_t l = 0; l < c.kernels.size(); ++l) check_attention_placed(c, l);
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    DenseKernel& k = c.kernels[l];
    dy_routes(k, routes);
    backward_program(c, l, t);
    k.grad_port = k.k_on_columns ? "grads_e" : "grads_s";
    if (first_of_orientation(c, l) != l) continue;
    grad_port_routes(k, routes);
    const int64_t len = k.k_on_columns ? k.w : k.h;
    ports.push_back({{"name", k.grad_port}, {"dir", "out"}, {"side", k.k_on_columns ? "E" : "S"}, {"x", k.k_on_columns ? k.w - 1 : 0},
                     {"y", k.k_on_columns ? 0 : k.h - 1}, {"length", k.lanes}, {"color", chain_color(k, len - 1)}, {"type", std::string(elem_name(c.compute))}});  // (mixed precision: the compute type)
  }
  backward_tasks(c, opt.learning_rate, t);
  loss_routes(c, routes);
  train_params(c, params);
  if (c.verdict()) verdict_layout(c, routes, params, ports);
  if (opt.loss == "softmax_cross_entropy") xent_program(c, t);
  else loss_program(c, t);
  // (the loss: summed along the chain ends into the last one; cross-entropy's on the first)
  const bool first = opt.loss == "softmax_cross_entropy";
  c.loss_x = first && !c.kernels.back().k_on_columns ? 0 : c.fabric_width - 1;
  c.loss_y = first && c.kernels.back().k_on_columns ? 0 : c.fabric_height - 1;
}

}  // namespace tessera::wafer::detail
