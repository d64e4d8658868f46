// The PE program of a layer (compile.hpp; docs/wafer-compiler.md "The kernel", "Convolutions"):
// its arrays and DSDs -- W blocks, y (or its place in the sequencer's arena), the chain-end post-ops'
// arrays, the fabric DSDs of its x, reduce, hand-off, residual move and weight stream; its tasks
// are in layer_tasks.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

using Dims = std::vector<std::pair<Num, int64_t>>;

// The dims of the interior [samples, h, w, nb] of a bordered [samples, H, W, nb] array (w and the
// channels one run); rows sh and columns sw apart (a ConvTranspose's input: zeros between them).
Dims interior_dims(int64_t samples, int64_t H, int64_t W, int64_t h, int64_t w, int64_t nb, int64_t sh = 1, int64_t sw = 1) {
  if (sw > 1) return {{samples, H * W * nb}, {h, sh * W * nb}, {w, sw * nb}, {nb, 1}};
  return {{samples, H * W * nb}, {h, sh * W * nb}, {w * nb, 1}};
}

// The `live=` range of a scratch array (-1: live throughout).
struct Live {
  int32_t lo = -1, hi = -1;
};

// The live range of a scratch array of kernel l (scratch_phases) when its PEs reuse SRAM across
// kernels (scratch_reuse), else none (pe_bytes counts the same spans).
Live live(const Compiled& c, size_t l, int span, bool is_y = false) {
  if (!scratch_reuse(c)) return {};
  const auto [lo, hi] = scratch_phases(c, l, span, is_y);
  return {lo, hi};
}

void data(ProgramTemplate& t, const std::string& name, Elem e, int64_t count, Live lv = {}, const std::string& note = {}) {
  t.data(name, e, count, {}, lv.lo, lv.hi, note);
}

// The DSD dims of a conv's im2col walk over one sample of its [H, W, cb] holder.
Dims im2col_dims(const DenseKernel& n, int64_t W) {
  const int64_t cb = n.cblk;
  return {{n.oh, n.sh * W * cb}, {n.ow, n.sw * cb}, {n.khb, W * cb}, {n.kw * cb, 1}};
}

}  // namespace

// Where conv kernel `reader` walks its producer's holder: the holder's [H, W] per sample (the
// reader's padded input, or the producer's bordered holder when another reader is padded) and the
// element offset of the walk's start (inside the border for a reader with smaller pads).
ConvWalk conv_walk(const Compiled& c, size_t reader) {
  const DenseKernel& n = c.kernels[reader];
  if (n.src < 0 || !c.kernels[static_cast<size_t>(n.src)].xp_h) return {0, n.ih, n.iw};
  const DenseKernel& p = c.kernels[static_cast<size_t>(n.src)];
  return {((p.xp_t - n.pad_t) * p.xp_w + (p.xp_l - n.pad_l)) * n.cblk, p.xp_h, p.xp_w};
}

// The DSD kernel l's residual reads: its own `res<l>` over the held array, or, when the held
// feature map lies inside a zero border (the holder's reader is a padded Conv), the holder's
// interior walk `xpi<p>` (declared on the same chain-end PEs).
std::string res_dsd(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  if (k.res_move) return "mvin" + std::to_string(l);  // as it arrives along the diagonal
  const int64_t rs = res_producer(c.kernels, k);
  return !k.res_host && rs >= 0 && c.kernels[static_cast<size_t>(rs)].xp_h ? "xpi" + std::to_string(rs) : "res" + std::to_string(l);
}

// The kernel whose residual kernel l's output moves to along the diagonal (-1: none).
int64_t move_reader(const Compiled& c, size_t l) {
  for (size_t m = l + 1; m < c.kernels.size(); ++m)
    if (c.kernels[m].res_move && res_producer(c.kernels, c.kernels[m]) == static_cast<int64_t>(l)) return static_cast<int64_t>(m);
  return -1;
}

bool output_used(const Compiled& c, size_t l) {
  if (!c.readers[l + 1].empty()) return true;
  for (size_t m = l + 1; m < c.kernels.size(); ++m)
    if (c.kernels[m].residual >= 0 && res_producer(c.kernels, c.kernels[m]) == static_cast<int64_t>(l)) return true;
  return false;
}

// The height and width of kernel l's output feature map (after its pool; a gate's: the gated map's).
std::pair<int64_t, int64_t> out_hw(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  if (k.gate_of >= 0) return {c.kernels[static_cast<size_t>(k.gate_of)].oh, c.kernels[static_cast<size_t>(k.gate_of)].ow};
  return k.pkh ? std::pair{k.ph, k.pw} : std::pair{k.oh, k.ow};
}

size_t handoff_from(const Compiled& c, size_t m) { return follower(c, m) ? handoff_from(c, m - 1) : m - 1; }

std::vector<int64_t> followers(const Compiled& c) {
  std::vector<int64_t> f;
  for (size_t m = 1; m < c.kernels.size(); ++m)
    if (follower(c, m)) f.push_back(static_cast<int64_t>(m));
  return f;
}

int64_t buffer_before(const Compiled& c, size_t m) {
  int64_t p = static_cast<int64_t>(m) - 1;
  while (p >= 0 && c.kernels[static_cast<size_t>(p)].k_on_columns != c.kernels[m].k_on_columns) --p;
  return p;
}

int64_t buffer_after(const Compiled& c, size_t m) {
  for (size_t p = m + 1; p < c.kernels.size(); ++p)
    if (c.kernels[p].k_on_columns == c.kernels[m].k_on_columns) return static_cast<int64_t>(p);
  return -1;
}

ArrayAt y_array(const Compiled& c, size_t l) {
  if (c.sequenced) return {"Yar", c.y_off[l]};
  return {"y" + std::to_string(l), 0};
}

// The array holding kernel l's output where the next kernels read it.
ArrayAt hold_array(const Compiled& c, size_t l) {
  static const char* const kName[] = {"y", "y16_", "att", "p", "xp", "gt"};  // by Hold
  const Hold hd = hold_of(c.kernels[l], c.half());
  if (hd == Hold::y) return y_array(c, l);
  return {kName[static_cast<int>(hd)] + std::to_string(l), 0};
}

// A dense reader's walk over its holder where it does not take the rows as they are (gx<reader>):
// one token of every sample (row sel_row of every sel_period), or a tokens holder with its constant
// rows' places (zero).
void rows_walk(const Compiled& c, size_t reader, ProgramTemplate& t) {
  const DenseKernel& n = c.kernels[reader];
  if (n.reads_input2) return;  // (its rows are the second input's, xg<reader>, as they are)
  const DenseKernel& sk = c.kernels[static_cast<size_t>(n.src)];
  const ArrayAt hold = hold_array(c, static_cast<size_t>(n.src));
  const std::string H = std::to_string(reader);
  if (n.xread == DenseKernel::XRead::flatten)  // [sample, P, nb] read channel-major: the Flatten's order
    t.mem4d("gx" + H, hold.array, hold.off, {{n.samples, n.P * sk.nb}, {sk.nb, 1}, {n.P, sk.nb}});
  else if (const int64_t co = col_window(c, reader); co >= 0) t.mem4d("gx" + H, hold.array, hold.off + co, {{n.B, sk.feat_nb()}, {n.kb, 1}});
  else if (n.sel_period) t.mem4d("gx" + H, hold.array, hold.off + n.sel_row * sk.feat_nb(), {{n.B, n.sel_period * sk.feat_nb()}, {sk.feat_nb(), 1}});
  else if (sk.tokens) t.mem1d("gx" + H, hold.array, hold.off, n.B * sk.feat_nb());
}

// The x values a dense reader takes from its holder per send: its rows (one token of each sample,
// or the tokens holder with its constant rows), else the producer's output as it is.
int64_t rows_len(const Compiled& c, size_t reader) {
  const DenseKernel& n = c.kernels[reader];
  if (n.reads_input2 || col_window(c, reader) >= 0) return n.B * n.kb;  // (the second input's rows, xg<reader>; a recurrent state's columns)
  const DenseKernel& sk = c.kernels[static_cast<size_t>(n.src)];
  return n.sel_period || sk.tokens ? n.B * sk.feat_nb() : sk.rows_out() * sk.feat_nb();
}

// The PE program of kernel l, names suffixed with l: its arrays and DSDs here, then its tasks
// (layer_tasks.cpp) -- unless the program is sequenced (sequencer.cpp runs every kernel's bodies).
void layer_program(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const bool ws = c.mode == MapMode::weight_streaming;
  const std::vector<size_t>& rd = c.readers[l + 1];  // the kernels reading this one's output
  const bool has_next = !rd.empty();
  const std::string L = std::to_string(l);
  const std::string wbuf = !ws ? "W" + L : c.sequenced ? (k.k_on_columns ? "Wa" : "Wb") : l % 2 ? "Wb" : "Wa";  // (sequenced: by orientation, as the x tasks' wcolA/B)
  const int64_t B = k.B, kb = k.kb, nb = k.nb;
  const int qw = c.weight_queue(l);
  // fp16 compute: W blocks and x values in fp16, products exact in fp32 (fmachs), partial sums,
  // bias and activation in fp32; the chain end converts y to fp16 before sending it on.
  const bool h = c.half();
  const Elem we = c.compute;
  const Elem f32 = Elem::f32;
  const ArrayAt ya = y_array(c, l);
  // The post-ops' scratch (post_scratch_bytes): sequenced, live in this kernel's phase only.
  // (training: live throughout -- the backward pass reads a LayerNorm's rstd and reuses its temporaries)
  const Live post = c.sequenced && !c.training ? Live{static_cast<int32_t>(l), static_cast<int32_t>(l)} : Live{};
  t.comment("---- kernel " + L + ": " + k.name + " (" + k.op + "), X[" + std::to_string(B) + "," + std::to_string(k.K) + "] x W[" + std::to_string(k.K) + "," +
            std::to_string(k.N) + "], block " + std::to_string(kb) + " x " + std::to_string(nb) + (k.k_on_columns ? ", K along columns" : ", K along rows"));
  if (!ws) data(t, wbuf, we, kb * nb, {}, "W block, column j = the weights of x_j");
  if (!c.sequenced) data(t, "y" + L, f32, B * nb, live(c, l, hold_of(k, h) == Hold::y ? 2 : 1, true));
  const int64_t rows = k.rows_out();
  if (k.input_layer) {
    t.if_("src" + L);
    data(t, "xs" + L, we, k.spatial() ? k.xs_elems() : B * kb, live(c, l, 0), k.spatial() ? "[sample, h, w, channel] with the zero border" : "");
    t.endif();
  }
  t.if_("last" + L);
  data(t, "bias" + L, f32, (k.row_period ? k.row_period : 1) * nb, {}, k.row_period ? "the bias plus the row constants [rows per sample, nb]" : "");
  if (k.pkh) data(t, "p" + L, f32, rows * nb, live(c, l, hold_of(k, h) == Hold::p ? 2 : 1), "the pool's output [sample, ph, pw, channel]");
  const bool held = output_used(c, l);  // its output goes on (read, or added to a later residual)
  if (h && held && !k.xp_h) data(t, "y16_" + L, we, rows * k.feat_nb(), live(c, l, 2), "y (the attention's output) in the 16-bit format, as the next layer takes it");
  if (k.xp_h) data(t, "xp" + L, h ? we : f32, k.samples * k.xp_h * k.xp_w * nb, {}, "the next Conv's input [sample, h, w, channel] inside its zero border");
  if (k.gate_of >= 0) data(t, "gt" + L, f32, k.gate_rows * nb, live(c, l, hold_of(k, h) == Hold::gt ? 2 : 1), "the gated feature map [sample, h, w, channel]");
  if (k.pool_padded())
    t.data("yp" + L, f32, k.samples * k.pool_ih() * k.pool_iw() * nb, k.pavg ? 0.0f : -INFINITY, -1, -1, "y inside the pool's border");
  t.endif();
  if (!c.sequenced) t.mem1d("wcol" + L, wbuf, 0, nb);
  if (!c.sequenced) t.mem1d("yrow" + L, "y" + L, 0, nb);
  t.mem1d("yall" + L, ya.array, ya.off, B * nb);
  if (k.input_layer && k.spatial()) {
    t.if_("src" + L);
    t.mem4d("xsm" + L, "xs" + L, P("xoff" + L), im2col_dims(k, k.iw));
    t.fabric("xout" + L, DsdKind::fabout, we, k.cx, 0, k.oh * k.ow * kb);
    t.endif();
  } else if (k.input_layer) {
    t.if_("src" + L);
    t.mem1d("xsm" + L, "xs" + L);
    t.fabric("xout" + L, DsdKind::fabout, we, k.cx, 0, B * kb);
    for (size_t j = 1; !c.sequenced && j < c.readers[0].size(); ++j)  // the graph input's other readers (sequenced: one color, xout again)
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
  if (k.row_period) t.mem4d("bm" + L, "bias" + L, 0, {{B / k.row_period, 0}, {k.row_period * nb, 1}}, "the bias and row constants again for every sample");
  else t.mem4d("bm" + L, "bias" + L, 0, {{B, 0}, {nb, 1}}, "the bias again for every sample");
  for (size_t j = 0; j < k.acts.size(); ++j)  // a PRelu's slopes, a per-feature scale or shift (placed by the host), again for every row
    if (!k.acts[j].per.empty()) {
      const std::string A = "prs" + L + "_" + std::to_string(j);
      data(t, A, f32, nb);
      t.mem4d(A + "b", A, 0, {{B, 0}, {nb, 1}});
    }
  for (int i = 0; i < k.act_temporaries(); ++i) {  // the elementwise functions' temporaries (act<l>_0 ...)
    data(t, "act" + L + "_" + std::to_string(i) + "_a", f32, B * nb, live(c, l, 1));
    t.mem1d("act" + L + "_" + std::to_string(i), "act" + L + "_" + std::to_string(i) + "_a");
  }
  if (k.rnn) {  // a recurrent cell: its temporaries, the next step's x (placed by the host), the regions of y
    const int64_t tw = k.B * rnn_wide(k.rnn->cell) * rnn_layout(k).hb;
    for (int i = 0; i < 3; ++i) data(t, "rta" + L + "_" + std::to_string(i), f32, tw, live(c, l, 1));
    if (k.rnn->x_time >= 0) data(t, "xt" + L, f32, k.B * rnn_layout(k).xs, {}, "the next kernel's x [B, xs] (placed by the host)");
    rnn_dsds(c, l, t, "rta" + L + "_");
  }
  if (k.residual >= 0) {  // the residual: the input (or output) of kernel r, held here in the same blocks
    const int64_t rs = res_producer(c.kernels, k);
    if (k.res_host) data(t, "xr" + L, f32, B * nb, {}, "the graph input's block, placed by the host");
    if (k.res_move) t.fabric("mvin" + L, DsdKind::fabin, h ? we : f32, k.cm, kMoveInQueue, B * nb);
    else if (res_dsd(c, l) == "res" + L) {
      const ArrayAt at = k.res_host ? ArrayAt{"xr" + L} : k.res_preln ? ArrayAt{"yh" + std::to_string(rs)} : rs < 0 ? ArrayAt{"xs0"} : hold_array(c, static_cast<size_t>(rs));
      t.mem1d("res" + L, at.array, at.off, B * nb);
    }
  }
  if (k.gate_of >= 0) {  // squeeze-excitation: kernel g's y (before its pool) times this kernel's gate, per sample and channel
    const ArrayAt gy = y_array(c, static_cast<size_t>(k.gate_of));
    t.mem1d("gall" + L, "gt" + L);
    t.mem1d("gy" + L, gy.array, gy.off, k.gate_rows * nb);
    t.mem4d("gg" + L, ya.array, ya.off, {{k.samples, nb}, {k.gate_rows / k.samples, 0}, {nb, 1}}, "the gate again for every position");
  }
  if (k.res_mul && c.half()) {
    data(t, "rmul" + L + "_a", f32, B * nb, live(c, l, 1), "the gate's other factor, widened to fp32");
    t.mem1d("rmul" + L, "rmul" + L + "_a");
  }
  if (k.keeps_preln) {
    data(t, "yh" + L, f32, B * nb, {}, "the value before the LayerNorm (a later residual adds it)");
    t.mem1d("yhm" + L, "yh" + L);
  }
  if (k.layernorm) {
    for (const char* n : {"lns", "lnc", "lnr"}) data(t, n + L, f32, B, post);
    data(t, "lnq" + L, f32, B * nb, post);
    data(t, "lng" + L, f32, nb);
    data(t, "lnb" + L, f32, nb);
    if (c.training) {  // xhat for the backward pass; the scale and bias as vectors (their updates)
      data(t, "lnx" + L, f32, B * nb, {}, "xhat: the normalised value before the scale (the backward pass)");
      t.mem1d("lnxm" + L, "lnx" + L);
      t.mem1d("lngm" + L, "lng" + L);
      t.mem1d("lnbm" + L, "lnb" + L);
    }
    for (const char* n : {"lns", "lnc", "lnr", "lnq"}) t.mem1d(n + std::string("m") + L, n + L);
    t.mem4d("lnrb" + L, "lnr" + L, 0, {{B, 1}, {nb, 0}});
    t.mem4d("lngb" + L, "lng" + L, 0, {{B, 0}, {nb, 1}});
    t.mem4d("lnbb" + L, "lnb" + L, 0, {{B, 0}, {nb, 1}});
    if (k.ln_padded()) {
      data(t, "lnk" + L, f32, nb, {}, "1 for real features, 0 for padding");
      t.mem4d("lnkb" + L, "lnk" + L, 0, {{B, 0}, {nb, 1}});
    }
    for (int64_t n = 0; n < nb; ++n) {
      t.mem1d("lyc" + L + "_" + std::to_string(n), ya.array, ya.off + n, B, nb);
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
    data(t, "lnt" + L, f32, B, post);
    t.mem1d("lntm" + L, "lnt" + L);
    t.endif();
    // (training: the broadcast arrives in queue 6 -- in the backward pass the other orientation's
    // gradient blocks are relayed through these PEs on queue 5)
    t.fabric("lnbi" + L, DsdKind::fabin, f32, k.cnb, c.training ? 6 : 5, B);
  }
  if (k.attn) {  // attention: scores [S, S] and their work array, the output [S, fb], per-row temporaries
    // S keys; Sq query rows per block (all S when the scores fit); dh here: the head's features on this PE.
    // Fused (pipelined): Q, K and V in y's rows at offsets 0, fb, 2 fb; else the Q and K kernels' y arrays.
    // A batch (attn_samples > 1): S keys per sample; each (sample, head) pair walks its sample's rows.
    const int64_t fb = k.feat_nb(), S = k.attn_keys(), Sq = k.attn_rows(), g = k.attn_group(), dh = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
    const int64_t rs = k.attn_rstep();
    // (Q's and K's y: their own arrays, or their places in the sequencer's arena)
    const ArrayAt qy = y_array(c, static_cast<size_t>(k.attn_q)), ky = y_array(c, static_cast<size_t>(k.attn_k));
    const int64_t qoff = qy.off, koff = ky.off + (k.qkv ? fb : 0), voff = k.qkv ? 2 * fb : 0;
    data(t, "att" + L, f32, k.rows_out() * fb, {}, "the attention's output (the query rows): what the next kernels read");
    data(t, "asc" + L, f32, Sq * S, post);
    data(t, "atm" + L, f32, Sq * S, post);
    data(t, "ato" + L, f32, Sq * dh, post);
    if (!k.attn_q_cos.empty() || !k.attn_k_cos.empty()) {
      // Rotary embeddings (attention_program): Q's and K's rows x fb walks, their heads' halves, the
      // cos and sin tables broadcast over the samples and heads (rows in the attention's order).
      // A head split over PEs: the PE's fb features are its part of the head's pairs (rot_width),
      // rotated as one unit with its own tables [S, fb].
      const int64_t rw = k.rot_width(), hd = rw / 2, hps = fb / rw;
      const Dims per_row = k.attn_contig || k.attn_samples == 1 ? Dims{{k.attn_samples, 0}, {S, rw}, {hps, 0}} : Dims{{S, rw}, {k.attn_samples, 0}, {hps, 0}};
      auto table = [&](const std::string& name, const std::string& arr, int64_t off, int64_t len) {
        Dims d = per_row;
        d.push_back({len, 1});
        t.mem4d(name, arr, off, d);
      };
      data(t, "rtm" + L, f32, B * fb, post, "the rotation's temporary [rows, features]");
      t.mem1d("rtmf" + L, "rtm" + L);
      t.mem4d("rtma" + L, "rtm" + L, 0, {{B, fb}, {hps, rw}, {hd, 1}});
      t.mem4d("rtmb" + L, "rtm" + L, hd, {{B, fb}, {hps, rw}, {hd, 1}});
      for (const bool isq : {true, false}) {
        if ((isq ? k.attn_q_cos : k.attn_k_cos).empty()) continue;
        const std::string X = isq ? "q" : "k", arr = (isq ? qy : ky).array;
        const int64_t off = isq ? qoff : koff;
        data(t, "rc" + X + L, f32, S * rw, {}, "the rotary cos table [S, dh] (a split head: [S, fb], the PE's pairs)");
        data(t, "rs" + X + L, f32, S * rw, {}, "the rotary sin table [S, dh] (a split head: [S, fb], the PE's pairs)");
        t.mem4d("r" + X + "f" + L, arr, off, {{B, nb}, {fb, 1}});
        t.mem4d("r" + X + "a" + L, arr, off, {{B, nb}, {hps, rw}, {hd, 1}});
        t.mem4d("r" + X + "b" + L, arr, off + hd, {{B, nb}, {hps, rw}, {hd, 1}});
        table("rc" + X + "f" + L, "rc" + X + L, 0, rw);
        table("rs" + X + "a" + L, "rs" + X + L, 0, hd);
        table("rs" + X + "b" + L, "rs" + X + L, hd, hd);
      }
    }
    if (!k.attn_mask.empty()) {  // the additive mask, placed by the host; a query block's rows at run time
      data(t, "amask" + L, f32, S * S, {}, "the scores' additive mask [S, S] (a causal one: -inf above the diagonal)");
      t.mem1d("amk" + L, "amask" + L, 0, Sq * S);
    }
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
      data(t, n + L, f32, Sq, post);
      t.mem1d(n + std::string("m") + L, n + L);
    }
    t.mem1d("aall" + L, "att" + L);
    if (c.training) attention_keep_arrays(c, l, t);
    t.mem1d("ascm" + L, "asc" + L);
    t.mem1d("atmm" + L, "atm" + L);
    t.mem1d("atom" + L, "ato" + L);
    t.mem4d("amb" + L, "am" + L, 0, {{Sq, 1}, {S, 0}});
    t.mem4d("arb" + L, "ar" + L, 0, {{Sq, 1}, {S, 0}});
    for (int64_t s = 0; s < S; ++s) {
      t.mem1d("acol" + L + "_" + std::to_string(s), "asc" + L, s, Sq, S);
      t.mem4d("ap" + L + "_" + std::to_string(s), (g > 1 ? "atm" : "asc") + L, s, {{Sq, S}, {dh, 0}});
    }
    for (int64_t hb = 0; hb < k.attn_samples * hp; ++hb) {  // (sample, head) pairs
      const int64_t hh = hb % hp, r0 = k.attn_row0(hb / hp), q0 = k.attn_qrow0(hb / hp);  // (keys', queries' first rows)
      const std::string H = L + "_" + std::to_string(hb);
      for (int64_t j = 0; j < dh; ++j) {
        t.mem4d("aq" + H + "_" + std::to_string(j), qy.array, qoff + q0 * nb + hh * dh + j, {{Sq, rs * nb}, {S, 0}});
        t.mem4d("ak" + H + "_" + std::to_string(j), ky.array, koff + r0 * nb + hh * dh + j, {{Sq, 0}, {S, rs * nb}});
      }
      for (int64_t s = 0; s < S; ++s)
        t.mem4d("av" + H + "_" + std::to_string(s), ya.array, ya.off + (r0 + s * rs) * nb + voff + hh * dh, {{Sq, 0}, {dh, 1}});
      t.mem4d("ao" + H, "att" + L, q0 * fb + hh * dh, {{Sq, rs * fb}, {dh, 1}});
    }
  }
  if (k.softmax) {  // per class c: the logits' column (stride nb) and the exponentials' (stride N)
    data(t, "se" + L, f32, B * k.N);
    data(t, "st" + L, f32, B * k.N);
    for (const char* n : {"sm", "ss", "sr", "su", "sw"}) {
      if (std::string(n) == "sw" && !k.log_softmax) continue;  // (LogSoftmax's Newton temporary)
      data(t, n + L + "_a", f32, B);
      t.mem1d(n + L, n + L + "_a");
    }
    t.mem1d("sem" + L, "se" + L);
    t.mem1d("stm" + L, "st" + L);
    for (int64_t cc = 0; cc < k.N; ++cc) {
      t.mem1d("sz" + L + "_" + std::to_string(cc), ya.array, ya.off + cc, B, nb);
      t.mem1d("sx" + L + "_" + std::to_string(cc), "se" + L, cc, B, k.N);
    }
  }
  if (k.gn_size) {  // GroupNorm (gn_program): per-channel and per-group sums, the broadcasts back
    const int64_t S = k.samples, P = B / S, gs = k.gn_size, ng = k.gn_groups();
    data(t, "gsum" + L + "_a", f32, S * nb, live(c, l, 1));
    t.mem1d("gsum" + L, "gsum" + L + "_a");
    data(t, "gt" + L + "_a", f32, S * nb, live(c, l, 1));
    t.mem1d("gt" + L, "gt" + L + "_a");
    for (const char* a : {"gmu", "grs", "gwx", "gwf", "gwm", "gwt"}) {
      data(t, a + L + "_a", f32, S * ng, live(c, l, 1));
      t.mem1d(a + L, a + L + "_a");
    }
    for (int64_t p = 0; p < P; ++p) t.mem4d("gy" + L + "_" + std::to_string(p), ya.array, ya.off + p * nb, {{S, P * nb}, {nb, 1}});
    for (int64_t i = 0; i < gs; ++i) t.mem4d("gsg" + L + "_" + std::to_string(i), "gsum" + L + "_a", i, {{S, nb}, {ng, gs}});
    t.mem4d("gyw" + L, ya.array, ya.off, {{S, P * nb}, {P, nb}, {ng, gs}, {gs, 1}});
    t.mem4d("gmb" + L, "gmu" + L + "_a", 0, {{S, ng}, {P, 0}, {ng, 1}, {gs, 0}});
    t.mem4d("grb" + L, "grs" + L + "_a", 0, {{S, ng}, {P, 0}, {ng, 1}, {gs, 0}});
  }
  if (k.pkh) {  // the pool's windows over y (or its bordered copy): one 4-D walk per window offset
    const int64_t ph_in = k.pool_ih(), pw_in = k.pool_iw();
    const ArrayAt yin = k.pool_padded() ? ArrayAt{"yp" + L} : ya;
    t.mem1d("pall" + L, "p" + L);
    if (k.pool_padded()) t.mem4d("ypi" + L, "yp" + L, (k.ppt * pw_in + k.ppl) * nb, interior_dims(k.samples, ph_in, pw_in, k.oh, k.ow, nb));
    for (int64_t a = 0; a < k.pkh; ++a)
      for (int64_t b = 0; b < k.pkw; ++b)
        t.mem4d("pw" + L + "_" + std::to_string(a * k.pkw + b), yin.array, yin.off + (a * pw_in + b) * nb,
                {{k.samples, ph_in * pw_in * nb}, {k.ph, k.psh * pw_in * nb}, {k.pw, k.psw * nb}, {nb, 1}});
  }
  // The hand-off: the x values of the reader (sequenced: of kernel l + 1, read from the holder of
  // the kernel it reads -- this one's, or an earlier one whose chain ends are these PEs).
  const size_t hn = c.sequenced ? (l + 1 < c.kernels.size() && !follower(c, l + 1) ? l + 1 : c.kernels.size()) : has_next ? rd[0] : c.kernels.size();
  if (hn < c.kernels.size()) {
    const DenseKernel& n = c.kernels[hn];
    const ArrayAt hold = hold_array(c, static_cast<size_t>(n.src));
    const std::string H = std::to_string(hn);
    t.fabric("yout" + L, DsdKind::fabout, we, n.cx, 1, n.spatial() ? n.oh * n.ow * n.kb : rows_len(c, hn));
    if (!n.spatial()) rows_walk(c, hn, t);
    for (size_t j = 1; !c.sequenced && j < rd.size(); ++j) {  // the other readers (each its own walk)
      t.fabric("yout" + L + "_" + std::to_string(j), DsdKind::fabout, we, c.kernels[rd[j]].cx, 1, rows_len(c, rd[j]));
      rows_walk(c, rd[j], t);
    }
    if (n.spatial()) {
      const ConvWalk cw = conv_walk(c, hn);
      t.mem4d("gx" + H, hold.array, hold.off + cw.off, im2col_dims(n, cw.W));
    }
  }
  // Followers (sequenced): the next kernels of the reader's orientation, whose x values these chain
  // ends send right after the reader's (xo<f>, gx<f>).
  for (size_t f = hn + 1; c.sequenced && hn < c.kernels.size() && f < c.kernels.size() && follower(c, f); ++f) {
    const DenseKernel& n = c.kernels[f];
    const ArrayAt hold = hold_array(c, static_cast<size_t>(n.src));
    if (n.reads_input2) {  // cross-attention's K or V: the second input's rows, placed here by the host (place_input2)
      data(t, "xg" + std::to_string(f), we, n.B * n.kb, {}, "the second graph input's rows [B, kb] (cross-attention's keys and values)");
      t.mem1d("xgm" + std::to_string(f), "xg" + std::to_string(f));
    }
    if (!n.spatial()) {  // a dense layer reading the same holder (rows_source)
      t.fabric("xo" + std::to_string(f), DsdKind::fabout, we, n.cx, 1, rows_len(c, f));
      rows_walk(c, f, t);
      continue;
    }
    const ConvWalk cw = conv_walk(c, f);
    t.fabric("xo" + std::to_string(f), DsdKind::fabout, we, n.cx, 1, n.oh * n.ow * n.kb);
    t.mem4d("gx" + std::to_string(f), hold.array, hold.off + cw.off, im2col_dims(n, cw.W));
  }
  if (held && h && !k.xp_h) t.mem1d("y16m" + L, "y16_" + L);
  if (k.xp_h) {  // where the chain end writes y: the holder's interior (tokens: the positions' rows after the leading constant rows)
    const auto [ih, iw] = k.tokens ? std::pair<int64_t, int64_t>{k.rows_out() / k.samples, 1} : out_hw(c, l);
    t.mem4d("xpi" + L, "xp" + L, (k.xp_t * k.xp_w + k.xp_l) * nb, interior_dims(k.samples, k.xp_h, k.xp_w, ih, iw, nb, k.xp_sh * k.xp_rh, k.xp_sw * k.xp_rw));
    for (int64_t r = 1; r < k.xp_rh * k.xp_rw; ++r)  // a nearest Resize's other copies: each value again at (a, b) within its rh x rw cell
      t.mem4d("xpi" + L + "_" + std::to_string(r), "xp" + L, ((k.xp_t + r / k.xp_rw) * k.xp_w + k.xp_l + r % k.xp_rw) * nb,
              interior_dims(k.samples, k.xp_h, k.xp_w, ih, iw, nb, k.xp_rh, k.xp_rw));
  }
  if (const int64_t m = move_reader(c, l); m >= 0)  // the held output, sent along the diagonal to kernel m's chain ends
    t.fabric("mvout" + L, DsdKind::fabout, h ? we : f32, c.kernels[static_cast<size_t>(m)].cm, kMoveOutQueue, rows * k.feat_nb());
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
  if (!c.sequenced) layer_tasks(c, l, t);
}

}  // namespace tessera::wafer::detail
