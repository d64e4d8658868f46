// Placement (compile.hpp; docs/wafer-compiler.md "Modes", "Convolutions", "Transformers, pipelined"):
// per-PE bytes, channel blocks and conv weights, the pipelined staircase and its rewrites (Q, K and V
// fused, residuals passed through), the weight-streaming rectangle.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// Bytes of data one PE of kernel `l` needs (pipelined: its own W block); `scratch`: how many of
// them are in arrays whose values live only while the kernel runs and its reader takes them, by
// span (layer_program's live=l..l+span when scratch_reuse holds): 0 the graph input's holder (its
// sends end before the next kernel's x values exist), 1 y and the post-ops' arrays, 2 the array
// the next kernel's x values are read from.
Hold hold_of(const DenseKernel& k, bool half) {
  return k.xp_h ? Hold::xp : half ? Hold::y16 : k.attn ? Hold::att : k.pkh ? Hold::p : k.gate_of >= 0 ? Hold::gt : Hold::y;
}

int64_t pe_bytes(const DenseKernel& k, bool own_w, int64_t wbytes, std::array<int64_t, 3>* scratch) {
  std::array<int64_t, 3> s{};
  const Hold hold = hold_of(k, wbytes == 2);
  s[hold == Hold::y ? 2 : 1] += k.B * k.nb * 4;                      // y
  s[1] += k.act_temporaries() * k.B * k.nb * 4;                                     // the elementwise functions' temporaries (chain end)
  if (k.pkh) s[hold == Hold::p ? 2 : 1] += k.rows_out() * k.nb * 4;  // the pooled output (chain end)
  if (k.gn_size) s[1] += (2 * k.nb + 6 * k.gn_groups()) * k.samples * 4;  // GroupNorm's sums and per-group values (chain end)
  if (hold == Hold::y16) s[2] += k.rows_out() * k.feat_nb() * 2;     // y (the attention's output) in the 16-bit format (chain end)
  if (k.gate_of >= 0) s[hold == Hold::gt ? 2 : 1] += k.gate_rows * k.nb * 4;  // the squeeze-excitation product (chain end)
  if (k.input_layer) s[0] += (k.spatial() ? k.xs_elems() : k.B * k.kb) * wbytes;  // xs (source)
  if (k.rnn) s[1] += rnn_pe_bytes(k);                                // a recurrent cell's temporaries, the next step's x (chain end)
  if (scratch) *scratch = s;
  int64_t b = s[0] + s[1] + s[2] + (own_w ? k.kb * k.nb * wbytes : 0);  // W
  b += (k.row_period ? k.row_period : 1) * k.nb * 4;                 // bias, with the row constants (chain end)
  if (k.softmax) b += (2 * k.B * k.N + (k.log_softmax ? 5 : 4) * k.B) * 4;  // softmax arrays (chain end)
  b += post_scratch_bytes(k);                                        // the post-ops' scratch (chain end)
  if (k.attn) b += k.rows_out() * k.feat_nb() * 4;                   // the attention's output, its query rows (chain end)
  if (k.reads_input2) b += k.B * k.kb * wbytes;                      // the second input's rows (cross-attention's K or V: at the holder's chain ends)
  if (k.res_host) b += k.B * k.nb * 4;                               // the graph input's block for the residual (chain end)
  if (k.layernorm) b += 3 * k.nb * 4;                                // LayerNorm's scale, bias and mask (chain end)
  for (const Unary& u : k.acts) b += u.per.empty() ? 0 : k.nb * 4;  // a value per feature: PRelu's slopes, a scale or shift (chain end)
  if (k.keeps_preln) b += k.B * k.nb * 4;                            // the value before the LayerNorm (chain end)
  if (k.res_mul && wbytes == 2) b += k.B * k.nb * 4;                // a gated unit's widened factor (chain end)
  if (!k.attn_mask.empty()) b += static_cast<int64_t>(k.attn_mask.size()) * 4;  // the attention's mask (chain end)
  if (!k.attn_q_cos.empty() || !k.attn_k_cos.empty())  // rotary embeddings: cos and sin tables [S, rot_width] (chain end)
    b += static_cast<int64_t>((k.attn_q_cos.empty() ? 0 : 2) + (k.attn_k_cos.empty() ? 0 : 2)) * k.attn_keys() * k.rot_width() * 4;
  if (k.pool_padded()) b += k.samples * k.pool_ih() * k.pool_iw() * k.nb * 4;  // y inside the pool's border (chain end)
  if (k.xp_h) b += k.samples * k.xp_h * k.xp_w * k.nb * wbytes;      // the next Conv's holder, with its zero border (chain end)
  return b + 16;
}

// The chain-end post-ops' scratch of kernel k, used inside its reduce only: LayerNorm's per-row sums
// and squares (lns, lnc, lnr, lnt, lnq), the attention's scores and per-row temporaries (asc, atm,
// ato, am, as, ar, au) and the rotation's temporary (rtm). Sequenced, every kernel's lives in its own
// phase (layer_program's live=), so the kernels share those bytes; pe_bytes counts them too.
int64_t post_scratch_bytes(const DenseKernel& k) {
  int64_t b = 0;
  if (k.layernorm) b += (k.B * k.nb + 4 * k.B) * 4;
  if (k.attn) b += (2 * k.attn_rows() * k.attn_keys() + k.attn_rows() * std::min(k.dh, k.feat_nb()) + 4 * k.attn_rows()) * 4;
  if (k.attn && (!k.attn_q_cos.empty() || !k.attn_k_cos.empty())) b += k.B * k.feat_nb() * 4;
  return b;
}

// Weight streaming, inference, a chain (each kernel reads the one before it, once; residuals
// allowed, not attention or LayerNorm): every PE runs the kernels one after another, so a kernel's scratch
// arrays (pe_bytes) can take the bytes of those two kernels back (layer_program's live= ranges; the
// assembler places them).
bool scratch_reuse(const Compiled& c) {
  if (c.mode != MapMode::weight_streaming || c.training) return false;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (((k.src != static_cast<int64_t>(l) - 1 || c.readers[l + 1].size() > 1) && !c.sequenced) || k.attn || k.layernorm || k.res_host || k.qkv) return false;
  }
  return true;
}

// The phases a scratch array of kernel l is live in: l through l + span (layer_program's live=).
// The array a later kernel's residual adds -- kernel l's output holder (span 2), or the graph
// input's (span 0, kernel 0) -- lives on to that kernel's phase: its reduce reads it at the chain
// ends before any x value of the kernel after it reaches them; a moved one to the phase after.
std::pair<int32_t, int32_t> scratch_phases(const Compiled& c, size_t l, int span, bool is_y) {
  int32_t hi = static_cast<int32_t>(l) + span;
  if (span == 2)  // a later reader (sequenced branches) takes it in its own phase, as kernel l + 1 does in l + 1
    for (const size_t m : c.readers[l + 1]) hi = std::max(hi, static_cast<int32_t>(m) + 1);
  if (is_y)  // y before the pool, which a later squeeze-excitation gate multiplies in its reduce
    for (size_t m = l + 1; m < c.kernels.size(); ++m)
      if (c.kernels[m].gate_of == static_cast<int64_t>(l)) hi = std::max(hi, static_cast<int32_t>(m));
  if (span == 0 && l == 0)  // the graph input's holder: its later readers' sends (sequenced followers) read it in their phases
    for (const size_t m : c.readers[0]) hi = std::max(hi, static_cast<int32_t>(m));
  if (span == 0 || span == 2)
    for (size_t m = l + 1; m < c.kernels.size(); ++m) {
      const DenseKernel& k = c.kernels[m];
      if (k.residual < 0 || k.res_host) continue;
      const int64_t held = res_producer(c.kernels, k);  // -1: the graph input
      // (A moved residual is sent while its producer's PEs may already take kernel m + 1's x
      // values: the array lives one phase more.)
      if (span == 2 ? held == static_cast<int64_t>(l) : held < 0 && l == 0) hi = std::max(hi, static_cast<int32_t>(m) + (k.res_move ? 1 : 0));
    }
  return {static_cast<int32_t>(l), hi};
}

// Weight streaming: the data bytes of the busiest PE (every kernel's arrays as if one PE held them
// all, without the W buffers): the kept arrays summed, the scratch ones (scratch_reuse) the most
// that are live in one phase -- kernel l's from phase l through l + span. (A bound: the
// assembler's first fit may leave gaps; its validation names a PE whose data does not fit.)
int64_t streaming_data_bytes(const Compiled& c, int64_t wbytes) {
  const bool reuse = scratch_reuse(c);
  const size_t n = c.kernels.size();
  int64_t kept = 16;
  std::vector<int64_t> phase(n + 2, 0);
  for (size_t l = 0; l < n; ++l) {
    std::array<int64_t, 3> s{};
    const DenseKernel& k = c.kernels[l];
    int64_t all = pe_bytes(k, false, wbytes, &s);
    if (c.sequenced && !c.training) {  // the post-ops' scratch: in kernel l's phase only (training: throughout, layer_program)
      all -= post_scratch_bytes(k);
      phase[l] += post_scratch_bytes(k);
    }
    if (!reuse) {
      kept += all - (c.sequenced ? k.B * k.nb * 4 : 0);
      continue;
    }
    kept += all - s[0] - s[1] - s[2];
    if (c.sequenced) s[hold_of(k, wbytes == 2) == Hold::y ? 2 : 1] -= k.B * k.nb * 4;  // y: in the arena
    for (int span = 0; span < 3; ++span) {
      const auto [lo, hi] = scratch_phases(c, l, span);
      if (static_cast<size_t>(hi) >= phase.size()) phase.resize(static_cast<size_t>(hi) + 1, 0);
      for (int32_t t = lo; t <= hi; ++t) phase[static_cast<size_t>(t)] += s[static_cast<size_t>(span)];
    }
    if (!c.sequenced) {  // y kept on for a squeeze-excitation gate (sequenced: in the arena)
      const int yspan = hold_of(k, wbytes == 2) == Hold::y ? 2 : 1;
      const int32_t hi = scratch_phases(c, l, yspan).second, ghi = scratch_phases(c, l, yspan, true).second;
      if (static_cast<size_t>(ghi) >= phase.size()) phase.resize(static_cast<size_t>(ghi) + 1, 0);
      for (int32_t t = hi + 1; t <= ghi; ++t) phase[static_cast<size_t>(t)] += k.B * k.nb * 4;
    }
  }
  return kept + *std::max_element(phase.begin(), phase.end()) + (c.sequenced ? c.y_arena * 4 : 0);
}

// The sequencer's arena of the kernels' y (Compiled::y_off): each kernel's y at the lowest offset
// clear of every y live in a phase with it (scratch_phases; all of them live throughout when the
// PEs do not reuse scratch SRAM), as the assembler places arrays.
void y_arena(Compiled& c) {
  const bool reuse = scratch_reuse(c);
  const size_t n = c.kernels.size();
  std::vector<std::pair<int32_t, int32_t>> ph(n);
  c.y_off.assign(n, 0);
  c.y_arena = 0;
  for (size_t l = 0; l < n; ++l) {
    const DenseKernel& k = c.kernels[l];
    ph[l] = reuse ? scratch_phases(c, l, hold_of(k, c.half()) == Hold::y ? 2 : 1, true) : std::pair<int32_t, int32_t>{0, static_cast<int32_t>(n)};
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t m = 0; m < l; ++m)
      if (ph[m].first <= ph[l].second && ph[l].first <= ph[m].second) busy.emplace_back(c.y_off[m], c.y_off[m] + c.kernels[m].B * c.kernels[m].nb);
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + k.B * k.nb <= lo) break;
      at = std::max(at, hi);
    }
    c.y_off[l] = at;
    c.y_arena = std::max(c.y_arena, at + k.B * k.nb);
  }
}

namespace {

// Convolutions and Flatten consumers read whole channel blocks from the PE that holds them: the
// producer's nb channels, so kb = cb kh kw (conv) or cb P (flatten) and the K blocks line up with
// the producer's N blocks. The first Conv reads the graph input, which the host places: cb
// channels per source, and its kernel rows split over the lines left (`lines` along K; pipelined:
// about `per_line` K values per line) -- every source of a channel block holds the block's image,
// each line starts its walk at its own kernel row, so an input with few channels still spreads
// its K over many lines.
void channel_blocks(std::vector<DenseKernel>& ks, size_t l, int64_t input_cb, int64_t lines, int64_t per_line) {
  DenseKernel& k = ks[l];
  if (k.xread == DenseKernel::XRead::rows) return;
  k.cblk = k.src < 0 ? input_cb : ks[static_cast<size_t>(k.src)].nb;
  k.khb = k.kh;
  if (l == 0 && k.spatial()) {
    const int64_t spare = std::max<int64_t>(1, lines / cdiv(k.cin, k.cblk));
    k.khb = lines > 0 ? cdiv(k.kh, std::min(k.kh, spare)) : std::clamp<int64_t>(per_line / (k.cblk * k.kw), 1, k.kh);
  }
  k.kb = k.cblk * (k.spatial() ? k.khb * k.kw : k.P);
}

}  // namespace

// A conv's W [cin kh kw, N] in the order its lines take x values: K block j holds channels
// j cb .. j cb + cb - 1, within it (kh, kw, channel) -- the holder's [h, w, c] order, so that kw and
// the channels are one contiguous run of the gathered send. K becomes kblocks kb (zero rows pad).
void conv_weights(DenseKernel& k) {
  if (!k.spatial()) return;
  k.K = k.kblocks() * k.kb;
  k.W = conv_matrix(k, k.Wconv);
}

}  // namespace tessera::wafer::detail

namespace tessera::wafer {

// The im2col matrix [K, N] of conv weights [N, cin, kh, kw] (K = kblocks x kb: line j takes channel
// block j / nkh and kernel rows from (j % nkh) khb; rows past kh or cin stay 0), and back.
namespace {
template <class F>
void conv_rows(const DenseKernel& k, F f) {  // f(row of the matrix, index of [n = 0, ci, a, b] in the tensor)
  const int64_t kblocks = k.kblocks(), nkh = k.kh_blocks();
  for (int64_t j = 0; j < kblocks; ++j)
    for (int64_t a = (j % nkh) * k.khb; a < std::min(k.kh, (j % nkh + 1) * k.khb); ++a)
      for (int64_t b = 0; b < k.kw; ++b)
        for (int64_t c = 0; c < k.cblk && j / nkh * k.cblk + c < k.cin; ++c) {
          const int64_t row = j * k.kb + ((a - (j % nkh) * k.khb) * k.kw + b) * k.cblk + c, ci = j / nkh * k.cblk + c;
          f(row, (ci * k.kh + a) * k.kw + b);
        }
}
}  // namespace

std::vector<float> conv_matrix(const DenseKernel& k, const std::vector<float>& wconv) {
  std::vector<float> w(static_cast<size_t>(k.kblocks() * k.kb * k.N), 0.0f);
  const int64_t per_n = k.cin * k.kh * k.kw;
  conv_rows(k, [&](int64_t row, int64_t t) {
    for (int64_t n = 0; n < k.N; ++n) w[static_cast<size_t>(row * k.N + n)] = wconv[static_cast<size_t>(n * per_n + t)];
  });
  return w;
}

std::vector<float> conv_tensor(const DenseKernel& k, const std::vector<float>& kn) {
  const int64_t per_n = k.cin * k.kh * k.kw;
  std::vector<float> w(static_cast<size_t>(k.N * per_n), 0.0f);
  conv_rows(k, [&](int64_t row, int64_t t) {
    for (int64_t n = 0; n < k.N; ++n) w[static_cast<size_t>(n * per_n + t)] = kn[static_cast<size_t>(row * k.N + n)];
  });
  return w;
}

}  // namespace tessera::wafer

namespace tessera::wafer::detail {

// Places the kernels of a pipelined mapping with one block edge b: a staircase, each layer next
// to its producer. Returns the extent (width, height) used.
std::pair<int64_t, int64_t> place_pipelined(std::vector<DenseKernel>& ks, int64_t b) {
  int64_t x = 0, y = 0, W = 0, H = 0;
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& k = ks[l];
    k.kb = b;
    k.nb = k.qkv ? 3 * b : b;  // fused Q, K, V: fb = b features of each per chain end
    channel_blocks(ks, l, std::min(b, k.cin), 0, b);
    k.k_on_columns = l % 2 == 0;
    k.x_flow = k.k_on_columns ? Dir::S : Dir::E;
    k.w = k.k_on_columns ? k.kblocks() : k.nblocks();
    k.h = k.k_on_columns ? k.nblocks() : k.kblocks();
    if (k.rnn || k.rnn_slot >= 0) rnn_pipelined(ks, l, b);  // (a recurrent step: its slots of about b units per chain end)
    if (l > 0) {
      const DenseKernel& p = ks[l - 1];
      if (p.k_on_columns) {  // p's outputs leave its east column: this layer to the east, same rows
        x = p.x0 + p.w;
        y = p.y0;
      } else {  // p's outputs leave its south row: this layer below, same columns
        x = p.x0;
        y = p.y0 + p.h;
      }
    }
    k.x0 = x;
    k.y0 = y;
    W = std::max(W, x + k.w);
    H = std::max(H, y + k.h);
  }
  return {W, H};
}

// Pipelined attention (docs/wafer-compiler.md "Transformers, pipelined"): the Q, K and V kernels
// of every attention block become one kernel -- V's, with DenseKernel::qkv -- so that a chain end
// computes all three for its features; the Q and K kernels go and the others' indices follow.
void fuse_qkv(std::vector<DenseKernel>& ks) {
  // Refusals name /mapping/mode, so that `auto` streams such a model instead.
  const char* hint = "pipelined mode fuses an attention's Q, K and V projections into one kernel; use \"mapping\": {\"mode\": \"weight_streaming\"} for other shapes";
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& v = ks[l];
    if (!v.attn || v.qkv || v.reads_input2) continue;  // (cross-attention: K and V read another input)
    const size_t qi = static_cast<size_t>(v.attn_q), ki = static_cast<size_t>(v.attn_k);
    for (const size_t pi : {qi, ki}) {
      const DenseKernel& p = ks[pi];
      if (p.src != v.src || p.K != v.K || p.N != v.N || p.B != v.B || p.xread != DenseKernel::XRead::rows || v.xread != DenseKernel::XRead::rows || p.activated() ||
          p.softmax || p.residual >= 0 || p.layernorm || p.attn || p.pkh)
        throw InputError("/mapping/mode", "kernel '" + p.name + "': the attention's Q and K (and V, kernel '" + v.name + "') must be dense layers of the same input and size with only a bias", hint);
      for (size_t m = 0; m < ks.size(); ++m)
        if (m != l && ks[m].src == static_cast<int64_t>(pi))
          throw InputError("/mapping/mode", "kernel '" + ks[m].name + "' reads the attention's " + std::string(pi == qi ? "Q" : "K") + " projection ('" + p.name + "'), which pipelined mode fuses into kernel '" + v.name + "'", hint);
    }
    v.qkv = true;
    v.attn_d = v.N;
    v.Wq = ks[qi].W, v.Wk = ks[ki].W, v.bq = ks[qi].bias, v.bk = ks[ki].bias;
    std::vector<std::string> nodes = ks[qi].nodes;
    nodes.insert(nodes.end(), ks[ki].nodes.begin(), ks[ki].nodes.end());
    nodes.insert(nodes.end(), v.nodes.begin(), v.nodes.end());
    v.nodes = nodes;
    v.op = "QKV(" + ks[qi].op + ")+Attention";
    // Renumber: the removed kernels' readers (a residual of their input) read the fused one.
    auto gone = [&](int64_t i) { return static_cast<int64_t>(i > static_cast<int64_t>(qi)) + static_cast<int64_t>(i > static_cast<int64_t>(ki)); };
    const int64_t fused = static_cast<int64_t>(l) - gone(static_cast<int64_t>(l));
    for (auto& k : ks)
      for (int64_t* ref : {&k.src, &k.residual, &k.attn_q, &k.attn_k})  // (later blocks' Q and K are other kernels)
        if (*ref >= 0) *ref = *ref == static_cast<int64_t>(qi) || *ref == static_cast<int64_t>(ki) ? fused : *ref - gone(*ref);
    ks.erase(ks.begin() + static_cast<std::ptrdiff_t>(std::max(qi, ki)));
    ks.erase(ks.begin() + static_cast<std::ptrdiff_t>(std::min(qi, ki)));
    l = static_cast<size_t>(fused);  // on after it (earlier blocks are fused already)
  }
}

// The fused kernel's W [K, 3 b nblocks] and bias for block edge b: chain-end block j holds Q's
// features j b .. j b + b - 1, then K's, then V's (zero beyond d).
void qkv_weights(DenseKernel& k, int64_t b) {
  const int64_t d = k.attn_d, nblk = cdiv(d, b), Np = 3 * b * nblk;
  // k.W and k.bias hold V's projection until then (each candidate block starts from them).
  k.nflops = 3 * d;
  std::vector<float> W(static_cast<size_t>(k.K * Np), 0.0f), bias(static_cast<size_t>(Np), 0.0f);
  const std::vector<float>* Ws[3] = {&k.Wq, &k.Wk, &k.W};
  const std::vector<float>* bs[3] = {&k.bq, &k.bk, &k.bias};
  for (int64_t j = 0; j < nblk; ++j)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t i = 0; i < b && j * b + i < d; ++i) {
        const int64_t col = j * 3 * b + part * b + i, f = j * b + i;
        for (int64_t r = 0; r < k.K; ++r) W[static_cast<size_t>(r * Np + col)] = (*Ws[part])[static_cast<size_t>(r * d + f)];
        bias[static_cast<size_t>(col)] = (*bs[part])[static_cast<size_t>(f)];
      }
  k.W = std::move(W);
  k.bias = std::move(bias);
  k.N = Np;
}

// A residual over two pipelined layers (kernel l adds the input of kernel r = its producer, which
// reads another kernel's output): the input passes through r as identity columns after r's own
// (padded to whole blocks of b; no activation on them) and l adds it as identity rows of its W --
// x 1 and zeros, exact -- so it reaches l's chain ends without a route of its own.
void pass_through(std::vector<DenseKernel>& ks, size_t l, int64_t b) {
  DenseKernel& k2 = ks[l];
  DenseKernel& k1 = ks[static_cast<size_t>(k2.residual)];
  const int64_t d = k1.K, N1 = k1.N, Np = cdiv(N1, b) * b, N1p = Np + d;
  std::vector<float> W1(static_cast<size_t>(k1.K * N1p), 0.0f), b1(static_cast<size_t>(N1p), 0.0f);
  for (int64_t r = 0; r < k1.K; ++r) {
    for (int64_t n = 0; n < N1; ++n) W1[static_cast<size_t>(r * N1p + n)] = k1.W[static_cast<size_t>(r * N1 + n)];
    W1[static_cast<size_t>(r * N1p + Np + r)] = 1.0f;
  }
  for (int64_t n = 0; n < N1; ++n) b1[static_cast<size_t>(n)] = k1.bias[static_cast<size_t>(n)];
  k1.W = std::move(W1);
  k1.bias = std::move(b1);
  k1.nflops = N1;
  k1.N = N1p;
  k1.act_blocks = Np / b;
  const int64_t K2 = k2.K, K2p = Np + d, N2 = k2.N;
  std::vector<float> W2(static_cast<size_t>(K2p * N2), 0.0f);
  for (int64_t r = 0; r < K2; ++r)
    for (int64_t n = 0; n < N2; ++n) W2[static_cast<size_t>(r * N2 + n)] = k2.W[static_cast<size_t>(r * N2 + n)];
  for (int64_t r = 0; r < d; ++r) W2[static_cast<size_t>((Np + r) * N2 + r)] = 1.0f;
  k2.W = std::move(W2);
  k2.K = K2p;
  k2.residual = -1;
}

// Weight streaming: every layer on the rectangle [0, w) x [0, h), K on columns for even layers.
// The orientation follows the data: the graph input sits on the south row (K along the columns), a
// kernel's outputs on its chain ends -- the east column or the south row.
std::vector<bool> streaming_orientations(const std::vector<DenseKernel>& ks) {
  std::vector<bool> on_cols(ks.size());
  for (size_t l = 0; l < ks.size(); ++l) on_cols[l] = ks[l].src < 0 || !on_cols[static_cast<size_t>(ks[l].src)];
  return on_cols;
}

void place_streaming(std::vector<DenseKernel>& ks, int64_t w, int64_t h) {
  const std::vector<bool> on_cols = streaming_orientations(ks);
  for (size_t l = 0; l < ks.size(); ++l) {
    DenseKernel& k = ks[l];
    k.k_on_columns = on_cols[l];
    k.x_flow = k.k_on_columns ? Dir::N : Dir::W;  // from the previous layer's outputs: the south row / east column
    k.x0 = k.y0 = 0;
    k.w = w;
    k.h = h;
    k.kb = cdiv(k.K, k.k_on_columns ? w : h);
    k.nb = cdiv(k.N, k.k_on_columns ? h : w);
    channel_blocks(ks, l, cdiv(k.cin, k.k_on_columns ? w : h), k.k_on_columns ? w : h, 0);
    rnn_blocks(ks, l);  // (a recurrent step's slots per chain-end PE: its blocks and weights)
  }
}

}  // namespace tessera::wafer::detail
