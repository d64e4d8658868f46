// The PE program of a layer (compile.hpp; docs/wafer-compiler.md "The kernel", "Convolutions"):
// its arrays and DSDs, the x tasks, the reduce with the chain-end post-ops (chain_end_program.cpp),
// the hand-off to its readers (im2col gathers for a conv) and, in weight streaming, its weight loads.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

using Dims = std::vector<std::pair<Num, int64_t>>;

// The im2col send of a conv's x values (docs/wafer-compiler.md "Convolutions"): `src` a 4-D DSD
// over one sample of the holder array (oh, ow, kh, then kw and the channels as one run), moved by
// `stride` elements per sample; each send is async and activates the task again for the next
// sample (r15 counts; `rt` is a scratch register of the receiving layer, free between its tasks),
// the last one without, so no task runs after the gather ends. `halt_after`: the sender takes no
// part in the layer (pipelined chain ends): the last send blocks and the PE halts.
void gather_program(ProgramTemplate& t, const std::string& task, int id, bool active, const std::string& src, const std::string& out, int64_t stride,
                    int64_t samples, int rt, Op mov, bool halt_after) {
  t.task(task, TaskKind::local, id, -1, -1, active, false, "one sample's im2col rows per send");
  t.op(Op::mul, {reg(rt), reg(15), imm(stride)});
  t.op(Op::dsd_off, {src, reg(rt)});
  t.op(Op::add, {reg(15), reg(15), imm(1)});
  t.op(Op::sub, {reg(rt), reg(15), imm(samples)});
  t.op(Op::bz, {reg(rt), task + "_z"});
  t.op_async(mov, {out, src}, task);
  t.op(Op::ret, {});
  t.label(task + "_z");
  t.op(Op::mov, {reg(15), imm(0)});
  if (halt_after) {
    t.op(mov, {out, src});
    t.op(Op::halt, {});
  } else {
    t.op_async(mov, {out, src});
    t.op(Op::ret, {});
  }
}

// The array holding kernel l's output where the next kernels read it.
std::string hold_array(const Compiled& c, size_t l) {
  static const char* const kName[] = {"y", "y16_", "att", "p", "xp"};  // by Hold
  return kName[static_cast<int>(hold_of(c.kernels[l], c.half()))] + std::to_string(l);
}

// The DSD kernel l's residual reads: its own `res<l>` over the held array, or, when the held
// feature map lies inside a zero border (the holder's reader is a padded Conv), the holder's
// interior walk `xpi<p>` (declared on the same chain-end PEs).
std::string res_dsd(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  const int64_t rs = c.kernels[static_cast<size_t>(k.residual)].src;
  return !k.res_host && rs >= 0 && c.kernels[static_cast<size_t>(rs)].xp_h ? "xpi" + std::to_string(rs) : "res" + std::to_string(l);
}

// The first of kernel l's three x-task registers (counter j, sample counter b, scratch): three per
// layer (r0..r14) for up to 5 layers; with more, every layer's x tasks share r0..r2 (a PE
// finishes a kernel's x tasks, the counters back at 0, before the next kernel's x values reach it).
int x_regs(const Compiled& c, size_t l) { return c.kernels.size() > 5 ? 0 : 3 * static_cast<int>(l); }

// The dims of the interior [samples, h, w, nb] of a bordered [samples, H, W, nb] array (w and the
// channels one run).
Dims interior_dims(int64_t samples, int64_t H, int64_t W, int64_t h, int64_t w, int64_t nb) {
  return {{samples, H * W * nb}, {h, W * nb}, {w * nb, 1}};
}

// The `live=` range of a scratch array (-1: live throughout).
struct Live {
  int32_t lo = -1, hi = -1;
};

// The live range of a scratch array of kernel l when its PEs reuse SRAM across kernels
// (scratch_reuse), else none (pe_bytes counts the same spans). span 0: the graph input's holder,
// whose sends end before kernel l + 1's x values exist; 1: dead once kernel l's chain ends have
// sent y on; 2: the array its reader takes x values from (read until that reader's x phase ends). Kernel l + span + 1's
// x values reach a PE only after then (a chain: kernel m's x come from m - 1's chain ends, whose
// reduce needs every x value of m - 1, all sent by m - 2's chain ends).
Live live(const Compiled& c, size_t l, int span) {
  if (!scratch_reuse(c)) return {};
  return {static_cast<int32_t>(l), static_cast<int32_t>(l) + span};
}

void data(ProgramTemplate& t, const std::string& name, Elem e, int64_t count, Live lv = {}, const std::string& note = {}) {
  t.data(name, e, count, {}, lv.lo, lv.hi, note);
}

// The DSD dims of a conv's im2col walk over one sample of its [ih, iw, cb] holder.
Dims im2col_dims(const DenseKernel& n) {
  const int64_t cb = n.cblk;
  return {{n.oh, n.sh * n.iw * cb}, {n.ow, n.sw * cb}, {n.khb, n.iw * cb}, {n.kw * cb, 1}};
}

}  // namespace

// The PE program of kernel l (its arrays, DSDs and tasks), names suffixed with l.
void layer_program(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  const std::vector<size_t>& rd = c.readers[l + 1];  // the kernels reading this one's output
  const bool has_next = !rd.empty();
  const bool final_layer = ws ? l + 1 == c.kernels.size() : true;
  const std::string L = std::to_string(l);
  const std::string wbuf = ws ? (l % 2 ? "Wb" : "Wa") : "W" + L;
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  // Three registers per layer (r0..r14 for up to 5 layers): layers that share PEs (weight
  // streaming) never share a counter. With more layers all share r0..r2: a PE finishes a kernel's
  // x tasks (the counters back at 0) before the next kernel's x values reach it.
  const int nk5 = std::max<int>(5, static_cast<int>(c.kernels.size()));
  const int rj = x_regs(c, l), rb = rj + 1, rt = rj + 2;
  // Task ids are priorities (the lowest runnable id goes first): weight loads (4 per layer, ids
  // 0-19 for 5 layers) before x tasks (20-24) so a load is never starved by a busy layer, then the
  // reduce (25-29), the hand-off (30-34) and the input's send (35); with n > 5 layers the same
  // order with bases 4n, 5n, 6n, 7n.
  const int li = static_cast<int>(l);
  const int id_ld = 4 * li, id_onx = 4 * nk5 + li, id_red = 5 * nk5 + li, id_out = 6 * nk5 + li, id_send = 7 * nk5;
  const int qw = c.weight_queue(l);
  // fp16 compute: W blocks and x values in fp16, products exact in fp32 (fmachs), partial sums,
  // bias and activation in fp32; the chain end converts y to fp16 before sending it on.
  const bool h = c.half();
  const Elem we = c.compute;
  const Op mov = h ? Op::fmovh : Op::fmovs;
  const Elem f32 = Elem::f32;
  t.comment("---- kernel " + L + ": " + k.name + " (" + k.op + "), X[" + std::to_string(B) + "," + std::to_string(k.K) + "] x W[" + std::to_string(k.K) + "," +
            std::to_string(k.N) + "], block " + std::to_string(kb) + " x " + std::to_string(nb) + (k.k_on_columns ? ", K along columns" : ", K along rows"));
  if (!ws) data(t, wbuf, we, kb * nb, {}, "W block, column j = the weights of x_j");
  data(t, "y" + L, f32, B * nb, live(c, l, hold_of(k, h) == Hold::y ? 2 : 1));
  if (c.training) {
    data(t, "xsave" + L, f32, B * kb, {}, "the x values this PE took (the weight gradient needs them)");
    t.mem1d("xsv" + L, "xsave" + L, 0, 1);
  }
  const DenseKernel* nk = has_next ? &c.kernels[rd[0]] : nullptr;
  const std::string N1 = has_next ? std::to_string(rd[0]) : "";
  const int64_t rows = k.rows_out();
  if (k.input_layer) {
    t.if_("src" + L);
    data(t, "xs" + L, we, k.spatial() ? k.xs_elems() : B * kb, live(c, l, 0), k.spatial() ? "[sample, h, w, channel] with the zero border" : "");
    t.endif();
  }
  t.if_("last" + L);
  data(t, "bias" + L, f32, nb);
  if (k.pkh) data(t, "p" + L, f32, rows * nb, live(c, l, hold_of(k, h) == Hold::p ? 2 : 1), "the pool's output [sample, ph, pw, channel]");
  if (h && has_next && !k.xp_h) data(t, "y16_" + L, we, rows * nb, live(c, l, 2), "y in the 16-bit format, as the next layer takes it");
  if (k.xp_h) data(t, "xp" + L, h ? we : f32, k.samples * k.xp_h * k.xp_w * nb, {}, "the next Conv's input [sample, h, w, channel] inside its zero border");
  if (k.pool_padded())
    t.data("yp" + L, f32, k.samples * k.pool_ih() * k.pool_iw() * nb, k.pavg ? 0.0f : -INFINITY, -1, -1, "y inside the pool's border");
  t.endif();
  t.mem1d("wcol" + L, wbuf, 0, nb);
  t.mem1d("yrow" + L, "y" + L, 0, nb);
  t.mem1d("yall" + L, "y" + L);
  if (k.input_layer && k.spatial()) {
    t.if_("src" + L);
    t.mem4d("xsm" + L, "xs" + L, P("xoff" + L), im2col_dims(k));
    t.fabric("xout" + L, DsdKind::fabout, we, k.cx, 0, k.oh * k.ow * kb);
    t.endif();
  } else if (k.input_layer) {
    t.if_("src" + L);
    t.mem1d("xsm" + L, "xs" + L);
    t.fabric("xout" + L, DsdKind::fabout, we, k.cx, 0, B * kb);
    for (size_t j = 1; j < c.readers[0].size(); ++j)  // the graph input's other readers
      t.fabric("xout" + L + "_" + std::to_string(j), DsdKind::fabout, we, c.kernels[c.readers[0][j]].cx, 0, B * kb);
    t.endif();
  }
  t.if_("first" + L, false);
  t.fabric("from" + L, DsdKind::fabin, f32, P("cin" + L), chain_queue(c, l), B * nb);
  t.endif();
  t.if_("last" + L, false);
  t.fabric("to" + L, DsdKind::fabout, f32, P("cout" + L), 2, B * nb);
  t.endif();
  t.if_("last" + L);
  t.mem4d("bm" + L, "bias" + L, 0, {{B, 0}, {nb, 1}}, "the bias again for every sample");
  for (int i = 0; i < k.act_temporaries(); ++i) {  // the elementwise functions' temporaries (act<l>_0 ...)
    data(t, "act" + L + "_" + std::to_string(i) + "_a", f32, B * nb, live(c, l, 1));
    t.mem1d("act" + L + "_" + std::to_string(i), "act" + L + "_" + std::to_string(i) + "_a");
  }
  if (k.residual >= 0) {  // the residual: the input of kernel r, held here in the same blocks
    const size_t r = static_cast<size_t>(k.residual);
    const int64_t rs = c.kernels[r].src;
    if (k.res_host) data(t, "xr" + L, f32, B * nb, {}, "the graph input's block, placed by the host");
    if (res_dsd(c, l) == "res" + L) t.mem1d("res" + L, k.res_host ? "xr" + L : rs < 0 ? "xs0" : hold_array(c, static_cast<size_t>(rs)), 0, B * nb);
  }
  if (k.layernorm) {
    for (const char* n : {"lns", "lnc", "lnr"}) data(t, n + L, f32, B);
    data(t, "lnq" + L, f32, B * nb);
    data(t, "lng" + L, f32, nb);
    data(t, "lnb" + L, f32, nb);
    for (const char* n : {"lns", "lnc", "lnr", "lnq"}) t.mem1d(n + std::string("m") + L, n + L);
    t.mem4d("lnrb" + L, "lnr" + L, 0, {{B, 1}, {nb, 0}});
    t.mem4d("lngb" + L, "lng" + L, 0, {{B, 0}, {nb, 1}});
    t.mem4d("lnbb" + L, "lnb" + L, 0, {{B, 0}, {nb, 1}});
    if ((k.k_on_columns ? k.h : k.w) * nb > k.N) {
      data(t, "lnk" + L, f32, nb, {}, "1 for real features, 0 for padding");
      t.mem4d("lnkb" + L, "lnk" + L, 0, {{B, 0}, {nb, 1}});
    }
    for (int64_t n = 0; n < nb; ++n) {
      t.mem1d("lyc" + L + "_" + std::to_string(n), "y" + L, n, B, nb);
      t.mem1d("lqc" + L + "_" + std::to_string(n), "lnq" + L, n, B, nb);
    }
    t.if_("lnlast" + L, false);
    t.fabric("lnto" + L, DsdKind::fabout, f32, P("lncout" + L), 2, B);
    t.endif();
    t.if_("lnfirst" + L, false);
    t.fabric("lnfr" + L, DsdKind::fabin, f32, P("lncin" + L), 4, B);
    t.endif();
    t.if_("lnlast" + L);
    t.fabric("lnbo" + L, DsdKind::fabout, f32, k.cnb, 5, B);
    data(t, "lnt" + L, f32, B);
    t.mem1d("lntm" + L, "lnt" + L);
    t.endif();
    t.fabric("lnbi" + L, DsdKind::fabin, f32, k.cnb, 5, B);
  }
  if (k.attn) {  // attention: scores [S, S] and their work array, the output [S, fb], per-row temporaries
    // S keys; Sq query rows per block (all S when the scores fit); dh here: the head's features on this PE.
    // Fused (pipelined): Q, K and V in y's rows at offsets 0, fb, 2 fb; else the Q and K kernels' y arrays.
    const int64_t fb = k.feat_nb(), S = B, Sq = k.attn_rows(), g = k.attn_group(), dh = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
    const std::string Q = std::to_string(k.attn_q), K = std::to_string(k.attn_k);
    const int64_t qoff = 0, koff = k.qkv ? fb : 0, voff = k.qkv ? 2 * fb : 0;
    data(t, "att" + L, f32, S * fb, {}, "the attention's output: what the next kernels read");
    data(t, "asc" + L, f32, Sq * S);
    data(t, "atm" + L, f32, Sq * S);
    data(t, "ato" + L, f32, Sq * dh);
    if (g > 1) {
      t.if_("aglast" + L, false);
      t.fabric("aton" + L, DsdKind::fabout, f32, P("agcout" + L), 2, Sq * S);
      t.endif();
      t.if_("agfirst" + L, false);
      t.fabric("afr" + L, DsdKind::fabin, f32, P("agcin" + L), 6, Sq * S);
      t.endif();
      t.if_("aglast" + L);
      t.fabric("abo" + L, DsdKind::fabout, f32, k.cab, 4, Sq * S);
      t.endif();
      t.fabric("abi" + L, DsdKind::fabin, f32, k.cab, 7, Sq * S);
    }
    for (const char* n : {"am", "as", "ar", "au"}) {
      data(t, n + L, f32, Sq);
      t.mem1d(n + std::string("m") + L, n + L);
    }
    t.mem1d("aall" + L, "att" + L);
    t.mem1d("ascm" + L, "asc" + L);
    t.mem1d("atmm" + L, "atm" + L);
    t.mem1d("atom" + L, "ato" + L);
    t.mem4d("amb" + L, "am" + L, 0, {{Sq, 1}, {S, 0}});
    t.mem4d("arb" + L, "ar" + L, 0, {{Sq, 1}, {S, 0}});
    for (int64_t s = 0; s < S; ++s) {
      t.mem1d("acol" + L + "_" + std::to_string(s), "asc" + L, s, Sq, S);
      t.mem4d("ap" + L + "_" + std::to_string(s), (g > 1 ? "atm" : "asc") + L, s, {{Sq, S}, {dh, 0}});
    }
    for (int64_t hh = 0; hh < hp; ++hh) {
      const std::string H = L + "_" + std::to_string(hh);
      for (int64_t j = 0; j < dh; ++j) {
        t.mem4d("aq" + H + "_" + std::to_string(j), "y" + Q, qoff + hh * dh + j, {{Sq, nb}, {S, 0}});
        t.mem4d("ak" + H + "_" + std::to_string(j), "y" + K, koff + hh * dh + j, {{Sq, 0}, {S, nb}});
      }
      for (int64_t s = 0; s < S; ++s) t.mem4d("av" + H + "_" + std::to_string(s), "y" + L, s * nb + voff + hh * dh, {{Sq, 0}, {dh, 1}});
      t.mem4d("ao" + H, "att" + L, hh * dh, {{Sq, fb}, {dh, 1}});
    }
  }
  if (k.softmax) {  // per class c: the logits' column (stride nb) and the exponentials' (stride N)
    data(t, "se" + L, f32, B * k.N);
    data(t, "st" + L, f32, B * k.N);
    for (const char* n : {"sm", "ss", "sr", "su"}) {
      data(t, n + L + "_a", f32, B);
      t.mem1d(n + L, n + L + "_a");
    }
    t.mem1d("sem" + L, "se" + L);
    t.mem1d("stm" + L, "st" + L);
    for (int64_t cc = 0; cc < k.N; ++cc) {
      t.mem1d("sz" + L + "_" + std::to_string(cc), "y" + L, cc, B, nb);
      t.mem1d("sx" + L + "_" + std::to_string(cc), "se" + L, cc, B, k.N);
    }
  }
  if (k.pkh) {  // the pool's windows over y (or its bordered copy): one 4-D walk per window offset
    const int64_t ph_in = k.pool_ih(), pw_in = k.pool_iw();
    const std::string yin = (k.pool_padded() ? "yp" : "y") + L;
    t.mem1d("pall" + L, "p" + L);
    if (k.pool_padded()) t.mem4d("ypi" + L, "yp" + L, (k.ppt * pw_in + k.ppl) * nb, interior_dims(k.samples, ph_in, pw_in, k.oh, k.ow, nb));
    for (int64_t a = 0; a < k.pkh; ++a)
      for (int64_t b = 0; b < k.pkw; ++b)
        t.mem4d("pw" + L + "_" + std::to_string(a * k.pkw + b), yin, (a * pw_in + b) * nb,
                {{k.samples, ph_in * pw_in * nb}, {k.ph, k.psh * pw_in * nb}, {k.pw, k.psw * nb}, {nb, 1}});
  }
  // The array the next layer's x values are read from, and how.
  const std::string hold = hold_array(c, l);
  if (has_next) {
    const int64_t len = nk->spatial() ? nk->oh * nk->ow * nk->kb : rows * k.feat_nb();
    t.fabric("yout" + L, DsdKind::fabout, we, nk->cx, 1, len);
    for (size_t j = 1; j < rd.size(); ++j) t.fabric("yout" + L + "_" + std::to_string(j), DsdKind::fabout, we, c.kernels[rd[j]].cx, 1, len);
    if (nk->xread == DenseKernel::XRead::flatten)  // [sample, P, nb] read channel-major: the Flatten's order
      t.mem4d("gx" + N1, hold, 0, {{nk->samples, nk->P * nb}, {nb, 1}, {nk->P, nb}});
    if (nk->spatial()) t.mem4d("gx" + N1, hold, 0, im2col_dims(*nk));
  }
  if (has_next && h && !k.xp_h) t.mem1d("y16m" + L, "y16_" + L);
  if (k.xp_h)  // where the chain end writes y: the holder's interior
    t.mem4d("xpi" + L, "xp" + L, (nk->pad_t * k.xp_w + nk->pad_l) * nb, interior_dims(k.samples, k.xp_h, k.xp_w, nk->ih_raw, nk->iw_raw, nb));
  t.endif();
  if (ws) {
    // Inference: the lengths of the blocks before and after this PE's are set at run time from
    // px / py (dsd_len), so a big rectangle does not need a program instance per PE; training
    // keeps them as parameters (its gradient gather uses them too).
    const bool rt_len = runtime_block_lengths(c.training, k);
    // The other PEs' blocks before ("pre") or after ("post") this PE's: received into `junk`.
    auto skip = [&](const std::string& side) {
      if (!rt_len) {
        t.if_(side + L);
        t.fabric("w" + side + L, DsdKind::fabin, we, k.cw, qw, P("n" + side + L));
        t.mem4d("j" + side + L, "junk", 0, {{P(side + L), 0}, {kb, 0}, {nb, 0}});
      } else {
        t.if_((side == "pre" ? "first" : "last") + L, false);
        t.fabric("w" + side + L, DsdKind::fabin, we, k.cw, qw, 1);
        t.mem1d("j" + side + L, "junk", 0, 1, 0);
      }
      t.endif();
    };
    skip("pre");
    t.fabric("wkeep" + L, DsdKind::fabin, we, k.cw, qw, kb * nb);
    t.mem1d("wbuf" + L, wbuf, 0, kb * nb);
    skip("post");
  }
  // Tasks.
  if (k.input_layer && k.spatial()) {
    t.if_("src" + L);
    gather_program(t, "send" + L, id_send, true, "xsm" + L, "xout" + L, k.ih * k.iw * k.cblk, k.samples, rt, mov, false);
    t.endif();
  } else if (k.input_layer) {
    const size_t nr = c.readers[0].size();  // one send per reader of the graph input, one after another
    auto send = [&](size_t j) { return "send" + L + (j ? "_" + std::to_string(j) : ""); };
    auto xout = [&](size_t j) { return "xout" + L + (j ? "_" + std::to_string(j) : ""); };
    t.if_("src" + L);
    for (size_t j = 0; j < nr; ++j) {
      t.task(send(j), TaskKind::local, j ? c.extra_send_id[0] + static_cast<int>(j) - 1 : id_send, -1, -1, j == 0);
      t.op_async(mov, {xout(j), "xsm" + L}, j + 1 < nr ? send(j + 1) : "");
      t.op(Op::ret, {});
    }
    t.endif();
  }
  t.task("onx" + L, TaskKind::data, id_onx, k.cx, 0, false, ws, "one x value: y[b, :] += W[:, j] * x");
  if (c.training) {
    t.op(Op::mul, {reg(rt), reg(rb), imm(kb)});
    t.op(Op::add, {reg(rt), reg(rt), reg(rj)});
    t.op(Op::dsd_off, {"xsv" + L, reg(rt)});
    t.op(Op::fmovs, {"xsv" + L, kWv});
  }
  t.op(Op::mul, {reg(rt), reg(rj), imm(nb)});
  t.op(Op::dsd_off, {"wcol" + L, reg(rt)});
  t.op(Op::mul, {reg(rt), reg(rb), imm(nb)});
  t.op(Op::dsd_off, {"yrow" + L, reg(rt)});
  // The first column of a sample sets y (so y needs no clearing between steps), the others add.
  const std::string yr = "yrow" + L, wc = "wcol" + L;
  if (h) first_sets(t, reg(rj), "a" + L, "c" + L, Op::fmachs, {yr, fimm(0.0), wc, kWv}, Op::fmachs, {yr, yr, wc, kWv});
  else first_sets(t, reg(rj), "a" + L, "c" + L, Op::fmuls, {yr, wc, kWv}, Op::fmacs, {yr, yr, wc, kWv});
  t.op(Op::add, {reg(rj), reg(rj), imm(1)});
  t.op(Op::sub, {reg(rt), reg(rj), imm(kb)});
  t.op(Op::bnz, {reg(rt), "x" + L});
  t.op(Op::mov, {reg(rj), imm(0)});
  t.op(Op::add, {reg(rb), reg(rb), imm(1)});
  t.op(Op::sub, {reg(rt), reg(rb), imm(B)});
  t.op(Op::bnz, {reg(rt), "x" + L});
  t.op(Op::mov, {reg(rb), imm(0)});
  t.op(Op::activate, {"red" + L});
  if (ws && l + 2 < c.kernels.size()) t.op(Op::unblock, {"ld" + std::to_string(l + 2)}, "the buffer is free for the layer after next");
  t.label("x" + L);
  t.op(Op::ret, {});
  t.task("red" + L, TaskKind::local, id_red, -1, -1, false, false, "partial sums along the chain; bias and activation at its end");
  const std::string y = "yall" + L;
  chain_step(t, "first" + L, "last" + L, y, "to" + L, "from" + L, y);
  t.if_("last" + L);
  t.op(Op::fadds, {y, y, "bm" + L});
  const bool act_some = k.act_split();  // pass-through blocks take none
  if (act_some) t.if_("act" + L);
  std::vector<std::string> tmp;
  for (int i = 0; i < k.act_temporaries(); ++i) tmp.push_back("act" + L + "_" + std::to_string(i));
  for (const Unary& u : k.acts) unary_ops(t, u, y, tmp);
  if (act_some) t.endif();
  if (k.attn) attention_program(k, l, rj, t);
  if (k.softmax) softmax_program(t, k, L);
  if (k.residual >= 0) t.op(h && !k.res_host ? Op::faddhs : Op::fadds, {y, y, res_dsd(c, l)});  // 16-bit compute: the held value is 16-bit
  for (const Unary& u : k.acts_after) unary_ops(t, u, y, tmp);
  if (k.layernorm) ln_program(k, l, (k.k_on_columns ? k.h : k.w) * nb > k.N, t);
  if (k.pkh) {  // the pool: the first window's values, then the max with (the sum of) every other window
    if (k.pool_padded()) t.op(Op::fmovs, {"ypi" + L, y}, "y inside the border");
    t.op(Op::fmovs, {"pall" + L, "pw" + L + "_0"});
    for (int64_t i = 1; i < k.pkh * k.pkw; ++i) t.op(k.pavg ? Op::fadds : Op::fmaxs, {"pall" + L, "pall" + L, "pw" + L + "_" + std::to_string(i)});
    if (k.pavg) t.op(Op::fmuls, {"pall" + L, "pall" + L, fnum(1.0 / static_cast<double>(k.pkh * k.pkw))}, "the mean");
  }
  const Op end_op = final_layer ? Op::halt : Op::ret;
  if (has_next) {
    t.op(Op::activate, {"out" + L});
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
  if (has_next) {  // y is complete at the chain end: send it on as the next layer's x
    const std::string full = k.attn ? "aall" + L : k.pkh ? "pall" + L : y;
    t.if_("last" + L);
    t.task("out" + L, TaskKind::local, id_out);
    if (k.xp_h) t.op(h ? Op::fs2h : Op::fmovs, {"xpi" + L, full}, "into the next Conv's bordered input");
    else if (h) t.op(Op::fs2h, {"y16m" + L, full});
    if (nk->spatial()) {
      t.op(Op::activate, {"gs" + N1});
      t.op(Op::ret, {});
      gather_program(t, "gs" + N1, id_send + static_cast<int>(rd[0]), false, "gx" + N1, "yout" + L, nk->ih * nk->iw * nk->cblk, nk->samples, x_regs(c, rd[0]) + 2,
                     mov, !ws);
    } else {
      const std::string src = nk->xread == DenseKernel::XRead::flatten ? "gx" + N1 : h ? "y16m" + L : full;
      auto out = [&](size_t j) { return "out" + L + (j ? "_" + std::to_string(j) : ""); };
      auto yout = [&](size_t j) { return "yout" + L + (j ? "_" + std::to_string(j) : ""); };
      if (ws) {
        t.op_async(mov, {yout(0), src}, rd.size() > 1 ? out(1) : "");
        t.op(Op::ret, {});
      } else {
        t.op(mov, {yout(0), src});
        t.op(Op::halt, {});
      }
      for (size_t j = 1; j < rd.size(); ++j) {  // the other readers, one after another
        t.task(out(j), TaskKind::local, c.extra_send_id[l + 1] + static_cast<int>(j) - 1);
        t.op_async(mov, {yout(j), src}, j + 1 < rd.size() ? out(j + 1) : "");
        t.op(Op::ret, {});
      }
    }
    t.endif();
  }
  if (ws) {
    // Loads run one layer after another (a PE's ramp takes one wavelet per cycle: two streams at
    // once would halve both); layer l loads once layer l-1's block is in (activated by ldd{l-1})
    // and, from layer 2 on, once layer l-2 is done with the buffer (unblocked by onx{l-2}).
    t.task("ld" + L, TaskKind::local, id_ld, -1, -1, l == 0, l >= 2, "take this PE's block from the line's weight stream");
    const Operand pos = k.k_on_columns ? kPx : kPy, r = reg(rt);
    const int64_t bs = kb * nb, kl1 = (k.k_on_columns ? k.w : k.h) - 1;
    const bool rt_len = runtime_block_lengths(c.training, k);
    // has_pre / has_post: a block before (after) this PE's in the stream.
    auto cond = [&](bool pre) {
      if (!rt_len) t.if_((pre ? "pre" : "post") + L);
      else t.if_((pre ? "first" : "last") + L, false);
    };
    cond(true);
    if (rt_len) {
      t.op(Op::mul, {r, pos, imm(bs)});
      t.op(Op::dsd_len, {"wpre" + L, r});
      t.op(Op::dsd_len, {"jpre" + L, r});
    }
    t.op_async(mov, {"jpre" + L, "wpre" + L}, "ldb" + L);
    t.else_();
    t.op_async(mov, {"wbuf" + L, "wkeep" + L}, "ldc" + L);
    t.endif();
    t.op(Op::ret, {});
    t.task("ldb" + L, TaskKind::local, id_ld + 1);
    t.op_async(mov, {"wbuf" + L, "wkeep" + L}, "ldc" + L);
    t.op(Op::ret, {});
    t.task("ldc" + L, TaskKind::local, id_ld + 2);
    cond(false);
    if (rt_len) {
      t.op(Op::sub, {r, imm(kl1), pos});
      t.op(Op::mul, {r, r, imm(bs)});
      t.op(Op::dsd_len, {"wpost" + L, r});
      t.op(Op::dsd_len, {"jpost" + L, r});
    }
    t.op_async(mov, {"jpost" + L, "wpost" + L}, "ldd" + L);
    t.else_();
    t.op(Op::activate, {"ldd" + L});
    t.endif();
    t.op(Op::ret, {});
    t.task("ldd" + L, TaskKind::local, id_ld + 3, -1, -1, false, false, "the block is in place (its end is the layer's weights-ready cycle)");
    t.op(Op::unblock, {"onx" + L});
    if (l + 1 < c.kernels.size()) t.op(Op::activate, {"ld" + std::to_string(l + 1)});
    t.op(Op::ret, {});
  }
}

}  // namespace tessera::wafer::detail
