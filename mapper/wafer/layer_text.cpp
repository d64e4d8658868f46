// PE program text of a layer (compile.hpp; docs/wafer-compiler.md "The kernel", "Convolutions"):
// its arrays and DSDs, the x tasks, the reduce with the chain-end post-ops (chain_end_text.cpp), the
// hand-off to its readers (im2col gathers for a conv) and, in weight streaming, its weight loads.
#include <algorithm>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

// The im2col send of a conv's x values (docs/wafer-compiler.md "Convolutions"): `src` a 4-D DSD
// over one sample of the holder array (oh, ow, kh, then kw and the channels as one run), moved by
// `stride` elements per sample; each send is async and activates the task again for the next
// sample (r15 counts; `rt` is a scratch register of the receiving layer, free between its tasks),
// the last one without, so no task runs after the gather ends. `halt_after`: the sender takes no
// part in the layer (pipelined chain ends): the last send blocks and the PE halts.
void gather_text(std::ostringstream& o, const std::string& task, int id, bool active, const std::string& src, const std::string& out, int64_t stride,
                 int64_t samples, int rt, const std::string& mov, bool halt_after) {
  o << ".task " << task << " local id=" << id << (active ? " active" : "") << "   # one sample's im2col rows per send\n";
  o << "  mul r" << rt << ", r15, " << stride << "\n  dsd_off " << src << ", r" << rt << "\n  add r15, r15, 1\n  sub r" << rt << ", r15, " << samples << "\n  bz r"
    << rt << ", " << task << "_z\n";
  o << "  " << mov << " " << out << ", " << src << " async activate=" << task << "\n  ret\n";
  o << task << "_z:\n  mov r15, 0\n  " << mov << " " << out << ", " << src << (halt_after ? "\n  halt\n" : " async\n  ret\n");
}

// The array holding kernel l's output where the next kernels read it.
std::string hold_array(const Compiled& c, size_t l) {
  static const char* const kName[] = {"y", "y16_", "att", "p", "xp"};  // by Hold
  return kName[static_cast<int>(hold_of(c.kernels[l], c.half()))] + std::to_string(l);
}

// The first of kernel l's three x-task registers (counter j, sample counter b, scratch): three per
// layer (r0..r14) for up to 5 layers; with more, every layer's x tasks share r0..r2 (a PE
// finishes a kernel's x tasks, the counters back at 0, before the next kernel's x values reach it).
int x_regs(const Compiled& c, size_t l) { return c.kernels.size() > 5 ? 0 : 3 * static_cast<int>(l); }

// The dims of the interior [samples, h, w, nb] of a bordered [samples, H, W, nb] array (w and the
// channels one run).
std::string interior_dims(int64_t samples, int64_t H, int64_t W, int64_t h, int64_t w, int64_t nb) {
  return std::to_string(samples) + ":" + std::to_string(H * W * nb) + "," + std::to_string(h) + ":" + std::to_string(W * nb) + "," + std::to_string(w * nb) + ":1";
}

// ` live=l..l+span` for a scratch array of kernel l when its PEs reuse SRAM across kernels
// (scratch_reuse), else "" (pe_bytes counts the same spans). span 0: the graph input's holder,
// whose sends end before kernel l + 1's x values exist; 1: dead once kernel l's chain ends have
// sent y on; 2: the array its reader takes x values from (read until that reader's x phase ends). Kernel l + span + 1's
// x values reach a PE only after then (a chain: kernel m's x come from m - 1's chain ends, whose
// reduce needs every x value of m - 1, all sent by m - 2's chain ends).
std::string live(const Compiled& c, size_t l, int span) {
  return scratch_reuse(c) ? " live=" + std::to_string(l) + ".." + std::to_string(l + static_cast<size_t>(span)) : "";
}

// The DSD dims of a conv's im2col walk over one sample of its [ih, iw, cb] holder.
std::string im2col_dims(const DenseKernel& n) {
  const int64_t cb = n.cblk;
  return std::to_string(n.oh) + ":" + std::to_string(n.sh * n.iw * cb) + "," + std::to_string(n.ow) + ":" + std::to_string(n.sw * cb) + "," +
         std::to_string(n.khb) + ":" + std::to_string(n.iw * cb) + "," + std::to_string(n.kw * cb) + ":1";
}

}  // namespace

// PE program text of kernel l (its `.data`, `.dsd` and tasks), names suffixed with l.
void layer_text(const Compiled& c, size_t l, std::ostringstream& o) {
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
  const std::string we(elem_name(c.compute));
  const std::string mov = h ? "fmovh" : "fmovs";
  o << "# ---- kernel " << l << ": " << k.name << " (" << k.op << "), X[" << B << "," << k.K << "] x W[" << k.K << "," << k.N << "], block "
    << kb << " x " << nb << (k.k_on_columns ? ", K along columns" : ", K along rows") << "\n";
  if (!ws) o << ".data " << wbuf << " " << we << " " << kb * nb << "   # W block, column j = the weights of x_j\n";
  o << ".data y" << L << " f32 " << B * nb << live(c, l, hold_of(k, h) == Hold::y ? 2 : 1) << "\n";
  if (c.training) o << ".data xsave" << L << " f32 " << B * kb << "   # the x values this PE took (the weight gradient needs them)\n.dsd xsv" << L << " mem1d xsave" << L << " len=1\n";
  const DenseKernel* nk = has_next ? &c.kernels[rd[0]] : nullptr;
  const std::string N1 = has_next ? std::to_string(rd[0]) : "";
  const int64_t rows = k.rows_out();
  if (k.input_layer)
    o << ".if $src" << L << "\n.data xs" << L << " " << we << " " << (k.spatial() ? k.xs_elems() : B * kb) << live(c, l, 0)
      << (k.spatial() ? "   # [sample, h, w, channel] with the zero border" : "") << "\n.endif\n";
  o << ".if $last" << L << "\n.data bias" << L << " f32 " << nb << "\n";
  if (k.pkh) o << ".data p" << L << " f32 " << rows * nb << live(c, l, hold_of(k, h) == Hold::p ? 2 : 1) << "   # the pool's output [sample, ph, pw, channel]\n";
  if (h && has_next && !k.xp_h) o << ".data y16_" << L << " " << we << " " << rows * nb << live(c, l, 2) << "   # y in the 16-bit format, as the next layer takes it\n";
  if (k.xp_h) o << ".data xp" << L << " " << (h ? we : "f32") << " " << k.samples * k.xp_h * k.xp_w * nb << "   # the next Conv's input [sample, h, w, channel] inside its zero border\n";
  if (k.pool_padded())
    o << ".data yp" << L << " f32 " << k.samples * k.pool_ih() * k.pool_iw() * nb << " fill=" << (k.pavg ? "0" : "-inf") << "   # y inside the pool's border\n";
  o << ".endif\n";
  o << ".dsd wcol" << L << " mem1d " << wbuf << " len=" << nb << "\n";
  o << ".dsd yrow" << L << " mem1d y" << L << " len=" << nb << "\n";
  o << ".dsd yall" << L << " mem1d y" << L << "\n";
  if (k.input_layer && k.spatial())
    o << ".if $src" << L << "\n.dsd xsm" << L << " mem4d xs" << L << " off=$xoff" << L << " dims=" << im2col_dims(k) << "\n.dsd xout" << L << " fabout " << we << " color=" << k.cx
      << " queue=0 len=" << k.oh * k.ow * kb << "\n.endif\n";
  else if (k.input_layer) {
    o << ".if $src" << L << "\n.dsd xsm" << L << " mem1d xs" << L << "\n.dsd xout" << L << " fabout " << we << " color=" << k.cx << " queue=0 len=" << B * kb << "\n";
    for (size_t j = 1; j < c.readers[0].size(); ++j)  // the graph input's other readers
      o << ".dsd xout" << L << "_" << j << " fabout " << we << " color=" << c.kernels[c.readers[0][j]].cx << " queue=0 len=" << B * kb << "\n";
    o << ".endif\n";
  }
  o << ".if !$first" << L << "\n.dsd from" << L << " fabin f32 color=$cin" << L << " queue=" << chain_queue(c, l) << " len=" << B * nb << "\n.endif\n";
  o << ".if !$last" << L << "\n.dsd to" << L << " fabout f32 color=$cout" << L << " queue=2 len=" << B * nb << "\n.endif\n";
  o << ".if $last" << L << "\n.dsd bm" << L << " mem4d bias" << L << " dims=" << B << ":0," << nb << ":1   # the bias again for every sample\n";
  if (k.tanh)  // the activation's temporaries
    for (const char* t : {"ta", "tb", "tc"}) o << ".data " << t << L << "_a f32 " << B * nb << live(c, l, 1) << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
  if (k.gelu)
    for (const char* t : {"ga", "gb", "gc", "gd"}) o << ".data " << t << L << "_a f32 " << B * nb << live(c, l, 1) << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
  if (k.residual >= 0) {  // the residual: the input of kernel r, held here in the same blocks
    const size_t r = static_cast<size_t>(k.residual);
    const int64_t rs = c.kernels[r].src;
    if (k.res_host) o << ".data xr" << L << " f32 " << B * nb << "   # the graph input's block, placed by the host\n";
    o << ".dsd res" << L << " mem1d " << (k.res_host ? "xr" + L : rs < 0 ? "xs0" : hold_array(c, static_cast<size_t>(rs))) << " len=" << B * nb << "\n";
  }
  if (k.layernorm) {
    o << ".data lns" << L << " f32 " << B << "\n.data lnc" << L << " f32 " << B << "\n.data lnr" << L << " f32 " << B << "\n.data lnq" << L << " f32 " << B * nb << "\n";
    o << ".data lng" << L << " f32 " << nb << "\n.data lnb" << L << " f32 " << nb << "\n";
    for (const char* t : {"lns", "lnc", "lnr", "lnq"}) o << ".dsd " << t << "m" << L << " mem1d " << t << L << "\n";
    o << ".dsd lnrb" << L << " mem4d lnr" << L << " dims=" << B << ":1," << nb << ":0\n";
    o << ".dsd lngb" << L << " mem4d lng" << L << " dims=" << B << ":0," << nb << ":1\n.dsd lnbb" << L << " mem4d lnb" << L << " dims=" << B << ":0," << nb << ":1\n";
    if ((k.k_on_columns ? k.h : k.w) * nb > k.N)
      o << ".data lnk" << L << " f32 " << nb << "   # 1 for real features, 0 for padding\n.dsd lnkb" << L << " mem4d lnk" << L << " dims=" << B << ":0," << nb << ":1\n";
    for (int64_t n = 0; n < nb; ++n)
      o << ".dsd lyc" << L << "_" << n << " mem1d y" << L << " off=" << n << " len=" << B << " stride=" << nb << "\n.dsd lqc" << L << "_" << n << " mem1d lnq" << L
        << " off=" << n << " len=" << B << " stride=" << nb << "\n";
    o << ".if !$lnlast" << L << "\n.dsd lnto" << L << " fabout f32 color=$lncout" << L << " queue=2 len=" << B << "\n.endif\n";
    o << ".if !$lnfirst" << L << "\n.dsd lnfr" << L << " fabin f32 color=$lncin" << L << " queue=4 len=" << B << "\n.endif\n";
    o << ".if $lnlast" << L << "\n.dsd lnbo" << L << " fabout f32 color=" << k.cnb << " queue=5 len=" << B << "\n.data lnt" << L << " f32 " << B << "\n.dsd lntm" << L
      << " mem1d lnt" << L << "\n.endif\n";
    o << ".dsd lnbi" << L << " fabin f32 color=" << k.cnb << " queue=5 len=" << B << "\n";
  }
  if (k.attn) {  // attention: scores [S, S] and their work array, the output [S, fb], per-row temporaries
    // S keys; Sq query rows per block (all S when the scores fit); dh here: the head's features on this PE.
    // Fused (pipelined): Q, K and V in y's rows at offsets 0, fb, 2 fb; else the Q and K kernels' y arrays.
    const int64_t fb = k.feat_nb(), S = B, Sq = k.attn_rows(), g = k.attn_group(), dh = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
    const std::string Q = std::to_string(k.attn_q), K = std::to_string(k.attn_k);
    const int64_t qoff = 0, koff = k.qkv ? fb : 0, voff = k.qkv ? 2 * fb : 0;
    o << ".data att" << L << " f32 " << S * fb << "   # the attention's output: what the next kernels read\n.data asc" << L << " f32 " << Sq * S << "\n.data atm" << L << " f32 "
      << Sq * S << "\n.data ato" << L << " f32 " << Sq * dh << "\n";
    if (g > 1) {
      o << ".if !$aglast" << L << "\n.dsd aton" << L << " fabout f32 color=$agcout" << L << " queue=2 len=" << Sq * S << "\n.endif\n";
      o << ".if !$agfirst" << L << "\n.dsd afr" << L << " fabin f32 color=$agcin" << L << " queue=6 len=" << Sq * S << "\n.endif\n";
      o << ".if $aglast" << L << "\n.dsd abo" << L << " fabout f32 color=" << k.cab << " queue=4 len=" << Sq * S << "\n.endif\n";
      o << ".dsd abi" << L << " fabin f32 color=" << k.cab << " queue=7 len=" << Sq * S << "\n";
    }
    for (const char* t : {"am", "as", "ar", "au"}) o << ".data " << t << L << " f32 " << Sq << "\n.dsd " << t << "m" << L << " mem1d " << t << L << "\n";
    o << ".dsd aall" << L << " mem1d att" << L << "\n.dsd ascm" << L << " mem1d asc" << L << "\n.dsd atmm" << L << " mem1d atm" << L << "\n.dsd atom" << L << " mem1d ato" << L << "\n";
    o << ".dsd amb" << L << " mem4d am" << L << " dims=" << Sq << ":1," << S << ":0\n.dsd arb" << L << " mem4d ar" << L << " dims=" << Sq << ":1," << S << ":0\n";
    for (int64_t t = 0; t < S; ++t)
        o << ".dsd acol" << L << "_" << t << " mem1d asc" << L << " off=" << t << " len=" << Sq << " stride=" << S << "\n.dsd ap" << L << "_" << t << " mem4d "
          << (g > 1 ? "atm" : "asc") << L << " off=" << t << " dims=" << Sq << ":" << S << "," << dh << ":0\n";
    for (int64_t hh = 0; hh < hp; ++hh) {
      for (int64_t j = 0; j < dh; ++j)
        o << ".dsd aq" << L << "_" << hh << "_" << j << " mem4d y" << Q << " off=" << qoff + hh * dh + j << " dims=" << Sq << ":" << nb << "," << S << ":0\n.dsd ak" << L << "_" << hh
          << "_" << j << " mem4d y" << K << " off=" << koff + hh * dh + j << " dims=" << Sq << ":0," << S << ":" << nb << "\n";
      for (int64_t t = 0; t < S; ++t)
        o << ".dsd av" << L << "_" << hh << "_" << t << " mem4d y" << L << " off=" << t * nb + voff + hh * dh << " dims=" << Sq << ":0," << dh << ":1\n";
      o << ".dsd ao" << L << "_" << hh << " mem4d att" << L << " off=" << hh * dh << " dims=" << Sq << ":" << fb << "," << dh << ":1\n";
    }
  }
  if (k.softmax) {  // per class c: the logits' column (stride nb) and the exponentials' (stride N)
    o << ".data se" << L << " f32 " << B * k.N << "\n.data st" << L << " f32 " << B * k.N << "\n";
    for (const char* t : {"sm", "ss", "sr", "su"}) o << ".data " << t << L << "_a f32 " << B << "\n.dsd " << t << L << " mem1d " << t << L << "_a\n";
    o << ".dsd sem" << L << " mem1d se" << L << "\n.dsd stm" << L << " mem1d st" << L << "\n";
    for (int64_t cc = 0; cc < k.N; ++cc)
      o << ".dsd sz" << L << "_" << cc << " mem1d y" << L << " off=" << cc << " len=" << B << " stride=" << nb << "\n.dsd sx" << L << "_" << cc << " mem1d se" << L
        << " off=" << cc << " len=" << B << " stride=" << k.N << "\n";
  }
  if (k.pkh) {  // the pool's windows over y (or its bordered copy): one 4-D walk per window offset
    const int64_t ph_in = k.pool_ih(), pw_in = k.pool_iw();
    const std::string yin = (k.pool_padded() ? "yp" : "y") + L;
    o << ".dsd pall" << L << " mem1d p" << L << "\n";
    if (k.pool_padded()) o << ".dsd ypi" << L << " mem4d yp" << L << " off=" << (k.ppt * pw_in + k.ppl) * nb << " dims=" << interior_dims(k.samples, ph_in, pw_in, k.oh, k.ow, nb) << "\n";
    for (int64_t a = 0; a < k.pkh; ++a)
      for (int64_t b = 0; b < k.pkw; ++b)
        o << ".dsd pw" << L << "_" << a * k.pkw + b << " mem4d " << yin << " off=" << (a * pw_in + b) * nb << " dims=" << k.samples << ":" << ph_in * pw_in * nb << ","
          << k.ph << ":" << k.psh * pw_in * nb << "," << k.pw << ":" << k.psw * nb << "," << nb << ":1\n";
  }
  // The array the next layer's x values are read from, and how.
  const std::string hold = hold_array(c, l);
  if (has_next) {
    const int64_t len = nk->spatial() ? nk->oh * nk->ow * nk->kb : rows * k.feat_nb();
    o << ".dsd yout" << L << " fabout " << we << " color=" << nk->cx << " queue=1 len=" << len << "\n";
    for (size_t j = 1; j < rd.size(); ++j) o << ".dsd yout" << L << "_" << j << " fabout " << we << " color=" << c.kernels[rd[j]].cx << " queue=1 len=" << len << "\n";
    if (nk->xread == DenseKernel::XRead::flatten)  // [sample, P, nb] read channel-major: the Flatten's order
      o << ".dsd gx" << N1 << " mem4d " << hold << " dims=" << nk->samples << ":" << nk->P * nb << "," << nb << ":1," << nk->P << ":" << nb << "\n";
    if (nk->spatial()) o << ".dsd gx" << N1 << " mem4d " << hold << " dims=" << im2col_dims(*nk) << "\n";
  }
  if (has_next && h && !k.xp_h) o << ".dsd y16m" << L << " mem1d y16_" << L << "\n";
  if (k.xp_h)  // where the chain end writes y: the holder's interior
    o << ".dsd xpi" << L << " mem4d xp" << L << " off=" << (nk->pad_t * k.xp_w + nk->pad_l) * nb << " dims=" << interior_dims(k.samples, k.xp_h, k.xp_w, nk->ih_raw, nk->iw_raw, nb)
      << "\n";
  o << ".endif\n";
  if (ws) {
    // Inference: the lengths of the blocks before and after this PE's are set at run time from
    // px / py (dsd_len), so a big rectangle does not need a program instance per PE; training
    // keeps them as parameters (its gradient gather uses them too).
    const bool rt_len = runtime_block_lengths(c.training, k);
    if (!rt_len) {
      o << ".if $pre" << L << "\n.dsd wpre" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=$npre" << L << "\n";
      o << ".dsd jpre" << L << " mem4d junk dims=$pre" << L << ":0," << kb << ":0," << nb << ":0\n.endif\n";
    } else {
      o << ".if !$first" << L << "\n.dsd wpre" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=1\n.dsd jpre" << L << " mem1d junk len=1 stride=0\n.endif\n";
    }
    o << ".dsd wkeep" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=" << kb * nb << "\n";
    o << ".dsd wbuf" << L << " mem1d " << wbuf << " len=" << kb * nb << "\n";
    if (!rt_len) {
      o << ".if $post" << L << "\n.dsd wpost" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=$npost" << L << "\n";
      o << ".dsd jpost" << L << " mem4d junk dims=$post" << L << ":0," << kb << ":0," << nb << ":0\n.endif\n";
    } else {
      o << ".if !$last" << L << "\n.dsd wpost" << L << " fabin " << we << " color=" << k.cw << " queue=" << qw << " len=1\n.dsd jpost" << L << " mem1d junk len=1 stride=0\n.endif\n";
    }
  }
  // Tasks.
  if (k.input_layer && k.spatial()) {
    o << ".if $src" << L << "\n";
    gather_text(o, "send" + L, id_send, true, "xsm" + L, "xout" + L, k.ih * k.iw * k.cblk, k.samples, rt, mov, false);
    o << ".endif\n";
  } else if (k.input_layer) {
    const size_t nr = c.readers[0].size();  // one send per reader of the graph input, one after another
    o << ".if $src" << L << "\n.task send" << L << " local id=" << id_send << " active\n  " << mov << " xout" << L << ", xsm" << L << " async"
      << (nr > 1 ? " activate=send" + L + "_1" : "") << "\n  ret\n";
    for (size_t j = 1; j < nr; ++j)
      o << ".task send" << L << "_" << j << " local id=" << c.extra_send_id[0] + static_cast<int>(j) - 1 << "\n  " << mov << " xout" << L << "_" << j << ", xsm" << L
        << " async" << (j + 1 < nr ? " activate=send" + L + "_" + std::to_string(j + 1) : "") << "\n  ret\n";
    o << ".endif\n";
  }
  o << ".task onx" << L << " data id=" << id_onx << " color=" << k.cx << " queue=0" << (ws ? " blocked" : "")
    << "   # one x value: y[b, :] += W[:, j] * x\n";
  if (c.training)
    o << "  mul r" << rt << ", r" << rb << ", " << kb << "\n  add r" << rt << ", r" << rt << ", r" << rj << "\n  dsd_off xsv" << L << ", r" << rt << "\n  fmovs xsv" << L << ", wv\n";
  o << "  mul r" << rt << ", r" << rj << ", " << nb << "\n  dsd_off wcol" << L << ", r" << rt << "\n";
  o << "  mul r" << rt << ", r" << rb << ", " << nb << "\n  dsd_off yrow" << L << ", r" << rt << "\n";
  // The first column of a sample sets y (so y needs no clearing between steps), the others add.
  if (h) {
    o << "  bnz r" << rj << ", a" << L << "\n  fmachs yrow" << L << ", 0.0, wcol" << L << ", wv\n  jmp c" << L << "\na" << L << ":\n";
    o << "  fmachs yrow" << L << ", yrow" << L << ", wcol" << L << ", wv\nc" << L << ":\n";
  } else {
    o << "  bnz r" << rj << ", a" << L << "\n  fmuls yrow" << L << ", wcol" << L << ", wv\n  jmp c" << L << "\na" << L << ":\n";
    o << "  fmacs yrow" << L << ", yrow" << L << ", wcol" << L << ", wv\nc" << L << ":\n";
  }
  o << "  add r" << rj << ", r" << rj << ", 1\n  sub r" << rt << ", r" << rj << ", " << kb << "\n  bnz r" << rt << ", x" << L << "\n";
  o << "  mov r" << rj << ", 0\n  add r" << rb << ", r" << rb << ", 1\n  sub r" << rt << ", r" << rb << ", " << B << "\n  bnz r" << rt << ", x" << L
    << "\n";
  o << "  mov r" << rb << ", 0\n  activate red" << L << "\n";
  if (ws && l + 2 < c.kernels.size()) o << "  unblock ld" << l + 2 << "   # the buffer is free for the layer after next\n";
  o << "x" << L << ":\n  ret\n";
  o << ".task red" << L << " local id=" << id_red << "   # partial sums along the chain; bias and activation at its end\n";
  o << ".if !$first" << L << "\n.if $last" << L << "\n  fadds yall" << L << ", yall" << L << ", from" << L << "\n.else\n  fadds to" << L << ", yall" << L
    << ", from" << L << "\n.endif\n.else\n.if !$last" << L << "\n  fmovs to" << L << ", yall" << L << "\n.endif\n.endif\n";
  o << ".if $last" << L << "\n  fadds yall" << L << ", yall" << L << ", bm" << L << "\n";
  const bool act_some = k.act_split();  // pass-through blocks take none
  if (act_some) o << ".if $act" << L << "\n";
  if (k.relu) o << "  fmaxs yall" << L << ", yall" << L << ", 0.0\n";
  if (k.tanh) tanh_text(o, "yall" + L, "ta" + L, "tb" + L, "tc" + L);
  if (k.gelu) gelu_text(o, "yall" + L, "ga" + L, "gb" + L, "gc" + L, "gd" + L);
  if (act_some) o << ".endif\n";
  if (k.attn) attention_text(k, l, rj, o);
  if (k.softmax) softmax_text(o, k, L);
  if (k.residual >= 0) o << "  fadds yall" << L << ", yall" << L << ", res" << L << "\n";
  if (k.layernorm) ln_text(k, l, (k.k_on_columns ? k.h : k.w) * nb > k.N, o);
  if (k.pkh) {  // the pool: the first window's values, then the max with (the sum of) every other window
    if (k.pool_padded()) o << "  fmovs ypi" << L << ", yall" << L << "   # y inside the border\n";
    o << "  fmovs pall" << L << ", pw" << L << "_0\n";
    for (int64_t i = 1; i < k.pkh * k.pkw; ++i) o << "  " << (k.pavg ? "fadds" : "fmaxs") << " pall" << L << ", pall" << L << ", pw" << L << "_" << i << "\n";
    if (k.pavg) o << "  fmuls pall" << L << ", pall" << L << ", " << fnum(1.0 / static_cast<double>(k.pkh * k.pkw)) << "   # the mean\n";
  }
  if (has_next) o << "  activate out" << L << "\n  ret\n.else\n  " << (final_layer ? "halt" : "ret") << "\n";
  o << ".endif\n";
  if (!has_next && c.training) o << ".if $last" << L << "\n  activate lossk\n.endif\n  ret\n";  // the loss, then the backward pass
  else if (!has_next) o << "  " << (final_layer ? "halt" : "ret") << "\n";
  if (has_next) {  // y is complete at the chain end: send it on as the next layer's x
    const std::string full = k.attn ? "aall" + L : k.pkh ? "pall" + L : "yall" + L;
    o << ".if $last" << L << "\n.task out" << L << " local id=" << id_out << "\n";
    if (k.xp_h) o << "  " << (h ? "fs2h" : "fmovs") << " xpi" << L << ", " << full << "   # into the next Conv's bordered input\n";
    else if (h) o << "  fs2h y16m" << L << ", " << full << "\n";
    if (nk->spatial()) {
      o << "  activate gs" << N1 << "\n  ret\n";
      gather_text(o, "gs" + N1, id_send + static_cast<int>(rd[0]), false, "gx" + N1, "yout" + L, nk->ih * nk->iw * nk->cblk, nk->samples, x_regs(c, rd[0]) + 2,
                  mov, !ws);
    } else {
      const std::string src = nk->xread == DenseKernel::XRead::flatten ? "gx" + N1 : h ? "y16m" + L : full;
      o << "  " << mov << " yout" << L << ", " << src << (ws ? " async" + (rd.size() > 1 ? " activate=out" + L + "_1" : std::string()) + "\n  ret" : "\n  halt") << "\n";
      for (size_t j = 1; j < rd.size(); ++j)  // the other readers, one after another
        o << ".task out" << L << "_" << j << " local id=" << c.extra_send_id[l + 1] + static_cast<int>(j) - 1 << "\n  " << mov << " yout" << L << "_" << j << ", " << src
          << " async" << (j + 1 < rd.size() ? " activate=out" + L + "_" + std::to_string(j + 1) : "") << "\n  ret\n";
    }
    o << ".endif\n";
  }
  if (ws) {
    // Loads run one layer after another (a PE's ramp takes one wavelet per cycle: two streams at
    // once would halve both); layer l loads once layer l-1's block is in (activated by ldd{l-1})
    // and, from layer 2 on, once layer l-2 is done with the buffer (unblocked by onx{l-2}).
    o << ".task ld" << L << " local id=" << id_ld << (l == 0 ? " active" : "") << (l >= 2 ? " blocked" : "")
      << "   # take this PE's block from the line's weight stream\n";
    const std::string pos = k.k_on_columns ? "px" : "py", bs = std::to_string(kb * nb), r = "r" + std::to_string(rt);
    const int64_t kl1 = (k.k_on_columns ? k.w : k.h) - 1;
    const bool rt_len = runtime_block_lengths(c.training, k);
    const std::string pre_len = !rt_len ? "" : "  mul " + r + ", " + pos + ", " + bs + "\n  dsd_len wpre" + L + ", " + r + "\n  dsd_len jpre" + L + ", " + r + "\n";
    const std::string post_len =
        !rt_len ? "" : "  sub " + r + ", " + std::to_string(kl1) + ", " + pos + "\n  mul " + r + ", " + r + ", " + bs + "\n  dsd_len wpost" + L + ", " + r + "\n  dsd_len jpost" + L + ", " + r + "\n";
    const std::string has_pre = !rt_len ? "$pre" + L : "!$first" + L, has_post = !rt_len ? "$post" + L : "!$last" + L;
    o << ".if " << has_pre << "\n" << pre_len << "  " << mov << " jpre" << L << ", wpre" << L << " async activate=ldb" << L << "\n.else\n  " << mov << " wbuf" << L << ", wkeep" << L
      << " async activate=ldc" << L << "\n.endif\n  ret\n";
    o << ".task ldb" << L << " local id=" << id_ld + 1 << "\n  " << mov << " wbuf" << L << ", wkeep" << L << " async activate=ldc" << L << "\n  ret\n";
    o << ".task ldc" << L << " local id=" << id_ld + 2 << "\n.if " << has_post << "\n" << post_len << "  " << mov << " jpost" << L << ", wpost" << L << " async activate=ldd"
      << L << "\n.else\n  activate ldd" << L << "\n.endif\n  ret\n";
    o << ".task ldd" << L << " local id=" << id_ld + 3 << "   # the block is in place (its end is the layer's weights-ready cycle)\n  unblock onx" << L
      << "\n" << (l + 1 < c.kernels.size() ? "  activate ld" + std::to_string(l + 1) + "\n" : "") << "  ret\n";
  }
}

}  // namespace tessera::wafer::detail
