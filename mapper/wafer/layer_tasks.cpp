// The tasks of a layer's PE program (compile.hpp; docs/wafer-compiler.md "The kernel",
// "Convolutions", "Many kernels"): the x task, the reduce with the chain-end post-ops
// (chain_end_program.cpp), the hand-off to its readers (im2col gathers for a conv) and, in weight
// streaming, its weight loads. Each task's body is written once; the standard program gives every
// kernel its own tasks (layer_tasks), the sequencer (sequencer.cpp) runs the bodies of all kernels
// from shared tasks.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// The im2col send of a conv's x values (docs/wafer-compiler.md "Convolutions"): `src` a 4-D DSD
// over one sample of the holder array (oh, ow, kh, then kw and the channels as one run), moved by
// `stride` elements per sample; each send is async and activates `task` again for the next
// sample (r15 counts; `rt` is a scratch register of the receiving layer, free between its tasks),
// the last one without, so no task runs after the gather ends (or activating `then`, after
// `before_last`'s ops: the sequencer's next gather from the same PEs). `halt_after`: the sender
// takes no part in the layer (pipelined chain ends): the last send blocks and the PE halts.
void gather_ops(ProgramTemplate& t, const std::string& task, const std::string& label, const std::string& src, const std::string& out, int64_t stride,
                int64_t samples, int rt, Op mov, bool halt_after, const std::function<void()>& before_last, const std::string& then) {
  t.op(Op::mul, {reg(rt), reg(15), imm(stride)});
  t.op(Op::dsd_off, {src, reg(rt)});
  t.op(Op::add, {reg(15), reg(15), imm(1)});
  t.op(Op::sub, {reg(rt), reg(15), imm(samples)});
  t.op(Op::bz, {reg(rt), label});
  t.op_async(mov, {out, src}, task);
  t.op(Op::ret, {});
  t.label(label);
  t.op(Op::mov, {reg(15), imm(0)});
  if (halt_after) {
    t.op(mov, {out, src});
    t.op(Op::halt, {});
  } else {
    if (before_last) before_last();
    t.op_async(mov, {out, src}, then);
    t.op(Op::ret, {});
  }
}

// The first of kernel l's three x-task registers (counter j, sample counter b, scratch): three per
// layer (r0..r14) for up to 5 layers; with more, or sequenced (whose shared tasks keep r3..r10),
// every layer's x tasks share r0..r2 (a PE finishes a kernel's x tasks, the counters back at 0,
// before the next kernel's x values reach it).
int x_regs(const Compiled& c, size_t l) { return c.kernels.size() > 5 || c.sequenced ? 0 : 3 * static_cast<int>(l); }

int task_id_kernels(const Compiled& c) { return c.mode == MapMode::pipelined ? 5 : std::max<int>(5, static_cast<int>(c.kernels.size())); }

TaskNames task_names(const Compiled& c, size_t l) {
  if (c.sequenced) return {"onx", "red", "out", "gs", "ld", "ldb", "ldc", "ldd"};
  const std::string L = std::to_string(l);
  const std::vector<size_t>& rd = c.readers[l + 1];
  return {"onx" + L, "red" + L, "out" + L, rd.empty() ? "" : "gs" + std::to_string(rd[0]), "ld" + L, "ldb" + L, "ldc" + L, "ldd" + L};
}

// The reduce: partial sums along the chain; at its end bias, elementwise functions, attention,
// Softmax, residual, LayerNorm and pool, then the hand-off (`out`) or the end of the program.
void red_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  // (sequenced: every kernel but the last hands the next one's x values off, read or not)
  const bool has_next = c.sequenced ? l + 1 < c.kernels.size() : !c.readers[l + 1].empty();
  const bool final_layer = ws ? l + 1 == c.kernels.size() : true;
  const std::string L = std::to_string(l);
  const bool h = c.half();
  const std::string y = "yall" + L;
  chain_step(t, "first" + L, "last" + L, y, "to" + L, "from" + L, y);
  t.if_("last" + L);
  t.op(Op::fadds, {y, y, "bm" + L});
  if (k.rnn) rnn_cell_ops(c, l, t);
  if (k.gn_size) gn_program(k, l, t);
  const bool act_some = k.act_split();  // pass-through blocks take none
  if (act_some) t.if_("act" + L);
  std::vector<std::string> tmp;
  for (int i = 0; i < k.act_temporaries(); ++i) tmp.push_back("act" + L + "_" + std::to_string(i));
  for (size_t j = 0; j < k.acts.size(); ++j) unary_ops(t, k.acts[j], y, tmp, "prs" + L + "_" + std::to_string(j) + "b");
  if (act_some) t.endif();
  if (k.gate_of >= 0) t.op(Op::fmuls, {"gall" + L, "gy" + L, "gg" + L}, "squeeze-excitation: the feature map times the gate");
  // (sequenced: r12-r14, which inference's shared tasks leave free -- the x tasks' r0-r2 may be
  // counting the next kernel's x values meanwhile)
  if (k.attn) attention_program(k, l, c.sequenced ? kSeqAttnRegs : x_regs(c, l), t, c.training);
  if (k.softmax) softmax_program(t, k, L);
  if (k.residual >= 0 && k.res_mul) {  // a gated unit: times the other kernel's output (16-bit compute: widened first)
    if (h) t.op(Op::fh2s, {"rmul" + L, res_dsd(c, l)});
    t.op(Op::fmuls, {y, y, h ? "rmul" + L : res_dsd(c, l)});
  } else if (k.residual >= 0) {
    t.op(h && !k.res_host && !k.res_preln ? Op::faddhs : Op::fadds, {y, y, res_dsd(c, l)});  // 16-bit compute: the held value is 16-bit (the pre-LayerNorm copy fp32)
  }
  for (const Unary& u : k.acts_after) unary_ops(t, u, y, tmp);
  if (k.keeps_preln) t.op(Op::fmovs, {"yhm" + L, y}, "the value before the LayerNorm: a later residual adds it");
  if (k.layernorm) ln_program(k, l, t, c.training);
  for (const Unary& u : k.acts_post_ln) unary_ops(t, u, y, tmp);
  if (k.ln_postmask()) t.op(Op::fmuls, {y, y, "lnkb" + L}, "padded features back to 0 (f(0) != 0)");
  if (k.pkh) {  // the pool: the first window's values, then the max with (the sum of) every other window
    if (k.pool_padded()) t.op(Op::fmovs, {"ypi" + L, y}, "y inside the border");
    t.op(Op::fmovs, {"pall" + L, "pw" + L + "_0"});
    for (int64_t i = 1; i < k.pkh * k.pkw; ++i) t.op(k.pavg ? Op::fadds : Op::fmaxs, {"pall" + L, "pall" + L, "pw" + L + "_" + std::to_string(i)});
    if (k.pavg) t.op(Op::fmuls, {"pall" + L, "pall" + L, fnum(1.0 / static_cast<double>(k.pkh * k.pkw))}, "the mean");
  }
  const Op end_op = final_layer ? Op::halt : Op::ret;
  if (!has_next && h && output_used(c, l) && !k.xp_h) t.op(Op::fs2h, {"y16m" + L, y}, "the 16-bit copy a later gated unit or residual takes (no hand-off writes it)");
  if (has_next) {
    t.op(Op::activate, {tn.out});
    t.op(Op::ret, {});
    t.else_();
    t.op(end_op, {});
  }
  t.endif();
  if (!has_next && c.training) {  // the loss, then the backward pass
    t.if_("last" + L);
    t.op(Op::activate, {"lossk"});
    t.endif();
    t.op(Op::ret, {});
  } else if (!has_next) {
    t.op(end_op, {});
  }
}

// The DSD over all of kernel q's output at its chain ends (the attention's, the pool's, the gated
// map's, or y).
std::string full_dsd(const Compiled& c, size_t q) {
  const DenseKernel& qk = c.kernels[q];
  return (qk.attn ? "aall" : qk.pkh ? "pall" : qk.gate_of >= 0 ? "gall" : "yall") + std::to_string(q);
}

// What a dense reader's x values are sent from: a walk over its holder (a Flatten's channel-major
// order, one token of each sample, a tokens holder: gx<reader>), or the holder as it is.
std::string rows_source(const Compiled& c, size_t reader) {
  const DenseKernel& nk = c.kernels[reader];
  if (nk.reads_input2) return "xgm" + std::to_string(reader);  // the second input's rows, placed by the host beside the holder
  const size_t s = static_cast<size_t>(nk.src);
  if (nk.xread == DenseKernel::XRead::flatten || nk.sel_period || c.kernels[s].tokens || col_window(c, reader) >= 0) return "gx" + std::to_string(reader);
  return c.half() ? "y16m" + std::to_string(s) : full_dsd(c, s);
}

// The hand-off at the chain ends (inside `last<l>`): y into the next Conv's bordered input or its
// 16-bit copy (when read or moved), then the gather (a conv reader) or one send of the block to the
// first reader -- sequenced: to kernel l + 1, from the holder of the kernel it reads (this one, or
// an earlier one whose chain ends are these PEs). Returns the array the sends
// read.
std::string out_first(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  const std::vector<size_t>& rd = c.readers[l + 1];
  const size_t hn = c.sequenced ? l + 1 : rd[0];
  const DenseKernel& nk = c.kernels[hn];
  const std::string L = std::to_string(l);
  const bool h = c.half();
  const Op mov = h ? Op::fmovh : Op::fmovs;
  const std::string full = full_dsd(c, l);
  if (output_used(c, l)) {
    if (k.xp_h) {
      t.op(h ? Op::fs2h : Op::fmovs, {"xpi" + L, full}, "into the next Conv's bordered input");
      for (int64_t r = 1; r < k.xp_rh * k.xp_rw; ++r) t.op(h ? Op::fs2h : Op::fmovs, {"xpi" + L + "_" + std::to_string(r), full}, "a nearest Resize's copy");
    } else if (h) {
      t.op(Op::fs2h, {"y16m" + L, full});
    }
  }
  if (move_reader(c, l) >= 0)  // a later residual's input, along the diagonal (it waits on the route until added)
    t.op_async(mov, {"mvout" + L, k.xp_h ? "xpi" + L : h ? "y16m" + L : full});
  if (c.sequenced && follower(c, hn)) {  // kernel l + 1's x values come from other chain ends
    t.op(Op::ret, {});
    return {};
  }
  if (nk.spatial()) {
    t.op(Op::activate, {tn.gs});
    t.op(Op::ret, {});
    return {};
  }
  const std::string src = rows_source(c, hn);
  if (c.sequenced && hn + 1 < c.kernels.size() && follower(c, hn + 1)) {  // then the followers' (gsf, r11 the follower)
    t.op(Op::mov, {reg(kRegFollow), imm(static_cast<int64_t>(hn) + 1)});
    t.op_async(mov, {"yout" + L, src}, "gsf");
    t.op(Op::ret, {});
  } else if (ws) {
    t.op_async(mov, {"yout" + L, src}, rd.size() > 1 ? "out" + L + "_1" : "");
    t.op(Op::ret, {});
  } else {
    t.op(mov, {"yout" + L, src});
    t.op(Op::halt, {});
  }
  return src;
}

// The weight loads of kernel l (weight streaming), one body per step: `ld` takes the blocks
// before this PE's into `junk` (or its own block at once), `ldb` its own block, `ldc` the blocks
// after it, `ldd` marks the block in place.
namespace {

// The blocks before (pre) or after this PE's into `junk`, then `then_task`; a PE with none does
// `otherwise`. Their number is set at run time from the PE's position (inference) or is a parameter.
void skip_blocks(const Compiled& c, size_t l, ProgramTemplate& t, bool pre, const std::string& then_task, const std::function<void()>& otherwise) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l), side = pre ? "pre" : "post";
  const Operand pos = k.k_on_columns ? kPx : kPy, r = reg(x_regs(c, l) + 2);
  const bool rt_len = runtime_block_lengths(c.training, k);
  if (!rt_len) t.if_(side + L);
  else t.if_((pre ? "first" : "last") + L, false);
  if (rt_len) {
    if (pre) {
      t.op(Op::mul, {r, pos, imm(k.kb * k.nb)});
    } else {
      t.op(Op::sub, {r, imm((k.k_on_columns ? k.w : k.h) - 1), pos});
      t.op(Op::mul, {r, r, imm(k.kb * k.nb)});
    }
    t.op(Op::dsd_len, {"w" + side + L, r});
    t.op(Op::dsd_len, {"j" + side + L, r});
  }
  t.op_async(c.half() ? Op::fmovh : Op::fmovs, {"j" + side + L, "w" + side + L}, then_task);
  t.else_();
  otherwise();
  t.endif();
  t.op(Op::ret, {});
}

}  // namespace

void ld_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn) {
  const std::string L = std::to_string(l);
  skip_blocks(c, l, t, true, tn.ldb, [&] { t.op_async(c.half() ? Op::fmovh : Op::fmovs, {"wbuf" + L, "wkeep" + L}, tn.ldc); });
}

void ldb_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn) {
  const std::string L = std::to_string(l);
  t.op_async(c.half() ? Op::fmovh : Op::fmovs, {"wbuf" + L, "wkeep" + L}, tn.ldc);
  t.op(Op::ret, {});
}

void ldc_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn) {
  skip_blocks(c, l, t, false, tn.ldd, [&] { t.op(Op::activate, {tn.ldd}); });
}

// Kernel l's own tasks (the standard program; the sequencer's are in sequencer.cpp).
void layer_tasks(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  const std::vector<size_t>& rd = c.readers[l + 1];  // the kernels reading this one's output
  const bool has_next = !rd.empty();
  const std::string L = std::to_string(l);
  const TaskNames tn = task_names(c, l);
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const int nk5 = task_id_kernels(c);
  const int rj = x_regs(c, l), rb = rj + 1, rt = rj + 2;
  // Task ids are priorities (the lowest runnable id goes first): weight loads (4 per layer, ids
  // 0-19 for 5 layers) before x tasks (20-24) so a load is never starved by a busy layer, then the
  // reduce (25-29), the hand-off (30-34) and the input's send (35); with n > 5 layers the same
  // order with bases 4n, 5n, 6n, 7n. Pipelined, each kernel's program is its own: the ids of one
  // layer (li 0), the gather 36.
  const bool own = c.mode == MapMode::pipelined;
  const int li = own ? 0 : static_cast<int>(l);
  const int id_ld = 4 * li, id_onx = 4 * nk5 + li, id_red = 5 * nk5 + li, id_out = 6 * nk5 + li, id_send = 7 * nk5;
  const bool h = c.half();
  const Op mov = h ? Op::fmovh : Op::fmovs;
  if (k.input_layer) input_sends(c, l, t, id_send);
  t.task(tn.onx, TaskKind::data, id_onx, k.cx, 0, false, ws, "one x value: y[b, :] += W[:, j] * x");
  t.op(Op::mul, {reg(rt), reg(rj), imm(nb)});
  t.op(Op::dsd_off, {"wcol" + L, reg(rt)});
  t.op(Op::mul, {reg(rt), reg(rb), imm(nb)});
  t.op(Op::dsd_off, {"yrow" + L, reg(rt)});
  // The first column of a sample sets y (so y needs no clearing between steps), the others add.
  x_product(c, t, reg(rj), "yrow" + L, "wcol" + L, L);
  t.op(Op::add, {reg(rj), reg(rj), imm(1)});
  t.op(Op::sub, {reg(rt), reg(rj), imm(kb)});
  t.op(Op::bnz, {reg(rt), "x" + L});
  t.op(Op::mov, {reg(rj), imm(0)});
  t.op(Op::add, {reg(rb), reg(rb), imm(1)});
  t.op(Op::sub, {reg(rt), reg(rb), imm(B)});
  t.op(Op::bnz, {reg(rt), "x" + L});
  t.op(Op::mov, {reg(rb), imm(0)});
  t.op(Op::activate, {tn.red});
  if (ws && l + 2 < c.kernels.size()) t.op(Op::unblock, {"ld" + std::to_string(l + 2)}, "the buffer is free for the layer after next");
  t.label("x" + L);
  t.op(Op::ret, {});
  t.task(tn.red, TaskKind::local, id_red, -1, -1, false, false, "partial sums along the chain; bias and activation at its end");
  red_body(c, l, t, tn);
  if (has_next) {  // y is complete at the chain end: send it on as the next layer's x
    const DenseKernel& nk = c.kernels[rd[0]];
    t.if_("last" + L);
    t.task(tn.out, TaskKind::local, id_out);
    const std::string src = out_first(c, l, t, tn);
    if (nk.spatial()) {
      t.task(tn.gs, TaskKind::local, id_send + (own ? 1 : static_cast<int>(rd[0])), -1, -1, false, false, "one sample's im2col rows per send");
      const ConvWalk cw = conv_walk(c, rd[0]);
      gather_ops(t, tn.gs, tn.gs + "_z", "gx" + std::to_string(rd[0]), "yout" + L, cw.H * cw.W * nk.cblk, nk.samples, x_regs(c, rd[0]) + 2, mov, !ws);
    }
    for (size_t j = 1; j < rd.size(); ++j) {  // the other readers, one after another
      const std::string out = "out" + L + "_" + std::to_string(j), yout = "yout" + L + "_" + std::to_string(j);
      t.task(out, TaskKind::local, c.extra_send_id[l + 1] + static_cast<int>(j) - 1);
      t.op_async(mov, {yout, rows_source(c, rd[j])}, j + 1 < rd.size() ? "out" + L + "_" + std::to_string(j + 1) : "");
      t.op(Op::ret, {});
    }
    t.endif();
  }
  if (ws) {
    // Loads run one layer after another (a PE's ramp takes one wavelet per cycle: two streams at
    // once would halve both); layer l loads once layer l-1's block is in (activated by ldd{l-1})
    // and, from layer 2 on, once layer l-2 is done with the buffer (unblocked by onx{l-2}).
    t.task(tn.ld, TaskKind::local, id_ld, -1, -1, l == 0, l >= 2, "take this PE's block from the line's weight stream");
    ld_body(c, l, t, tn);
    t.task(tn.ldb, TaskKind::local, id_ld + 1);
    ldb_body(c, l, t, tn);
    t.task(tn.ldc, TaskKind::local, id_ld + 2);
    ldc_body(c, l, t, tn);
    t.task(tn.ldd, TaskKind::local, id_ld + 3, -1, -1, false, false, "the block is in place (its end is the layer's weights-ready cycle)");
    t.op(Op::unblock, {tn.onx});
    if (l + 1 < c.kernels.size()) t.op(Op::activate, {"ld" + std::to_string(l + 1)});
    t.op(Op::ret, {});
  }
}

// The graph input's sends at kernel l's sources (an input layer): a conv's im2col gather, or one
// send per reader of the graph input, one after another.
void input_sends(const Compiled& c, size_t l, ProgramTemplate& t, int id_send) {
  const DenseKernel& k = c.kernels[l];
  const std::string L = std::to_string(l);
  const Op mov = c.half() ? Op::fmovh : Op::fmovs;
  t.if_("src" + L);
  if (k.spatial()) {
    const std::string send = "send" + L;
    t.task(send, TaskKind::local, id_send, -1, -1, true, false, "one sample's im2col rows per send");
    gather_ops(t, send, send + "_z", "xsm" + L, "xout" + L, k.ih * k.iw * k.cblk, k.samples, x_regs(c, l) + 2, mov, false);
  } else if (c.sequenced && c.readers[0].size() > 1) {
    // Sequenced, the graph input read by a run of followers (Q, K and V of the first layer): one
    // send per reader, one after another on the orientation's x color (r15 counts).
    const std::string send = "send" + L;
    t.task(send, TaskKind::local, id_send, -1, -1, true, false, "the graph input's block, once per reader");
    gather_ops(t, send, send + "_z", "xsm" + L, "xout" + L, 0, static_cast<int64_t>(c.readers[0].size()), kSeqScratch, mov, false);
  } else {
    const size_t nr = c.readers[0].size();
    auto send = [&](size_t j) { return "send" + L + (j ? "_" + std::to_string(j) : ""); };
    auto xout = [&](size_t j) { return "xout" + L + (j ? "_" + std::to_string(j) : ""); };
    for (size_t j = 0; j < nr; ++j) {
      t.task(send(j), TaskKind::local, j ? c.extra_send_id[0] + static_cast<int>(j) - 1 : id_send, -1, -1, j == 0);
      t.op_async(mov, {xout(j), "xsm" + L}, j + 1 < nr ? send(j + 1) : "");
      t.op(Op::ret, {});
    }
  }
  t.endif();
}

// y[b, :] (+)= W[:, j] * x: the first column of a sample (`rj` zero) sets y, so y needs no clearing
// between steps; fp16 compute multiplies 16-bit values exactly into fp32 (fmachs).
void x_product(const Compiled& c, ProgramTemplate& t, Operand rj, const std::string& yr, const std::string& wc, const std::string& tag) {
  if (c.half()) first_sets(t, rj, "a" + tag, "c" + tag, Op::fmachs, {yr, fimm(0.0), wc, kWv}, Op::fmachs, {yr, yr, wc, kWv});
  else first_sets(t, rj, "a" + tag, "c" + tag, Op::fmuls, {yr, wc, kWv}, Op::fmacs, {yr, yr, wc, kWv});
}

}  // namespace tessera::wafer::detail
