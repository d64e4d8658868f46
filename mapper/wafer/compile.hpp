#pragma once
// The wafer compiler: graph IR -> a wafer layout (PE programs built as ProgramTemplates,
// isa/wafer/builder.hpp, and routes), host placement of inputs and resident constants, MemoryX weight streams, and the
// analytical estimate (mapper/wafer/estimate). Semantics and choices: docs/wafer-compiler.md (its
// "Layout" lists the files of mapper/wafer; internal.hpp is what they share).
//
// Kernel library (this build): dense layers -- Gemm, or MatMul by a constant [K, N] weight, with an
// optional bias Add -- and convolutions (GEMMs over im2col rows gathered on the fabric), with
// their chain-end post-ops: elementwise functions (Unary), MaxPool, a final Softmax, residual Adds, LayerNorm
// and multi-head attention (pipelined: Q, K and V fused into one kernel, a residual of the graph
// input placed by the host, one over two layers passed through; docs/wafer-compiler.md). A layer is a GEMM of
// X [B, K] by W [K, N] on a rectangle of PEs, the 2-D mesh GEMV
// algorithm of Cerebras' SDK example (gemv-checkerboard; the micro kernel scenarios/wafer/micro/
// gemv.pe): W is split into kb x nb blocks, one per PE; the contraction dimension K runs along one
// axis of the rectangle and N along the other. x values are multicast along the K axis' lines (each
// fires a data task: y[b, :] += W[:, j] * x[b, j], one fmacs over nb elements), and the partial y
// are summed along the other axis by a pipelined chain (fadds from the previous PE straight into
// the next one's fabric queue). The PEs at the chain's end add the bias, run the post-ops and send
// y on as the readers' x. A reader takes the other orientation, so a layer's output already lies
// along the axis the next layer multicasts -- no transpose is needed between layers.
//
// Modes: `pipelined` places every layer on its own rectangle, each next to its producer (a
// staircase: east, south, east, ...), weights resident in PE SRAM, layers overlapping as
// activations stream through. `weight_streaming` runs every layer on one rectangle at the fabric's
// north-west corner; activations stay in PE SRAM, and each layer's weights stream from MemoryX
// through SwarmX into an edge port (rows from the west for one orientation, columns from the north
// for the other), multicast along the lines; every PE keeps its own block and lets the rest pass.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/tensor.hpp"
#include "isa/wafer/builder.hpp"
#include "isa/wafer/isa.hpp"
#include "mapper/graph/graph.hpp"
#include "mapper/wafer/param_slice.hpp"

namespace tessera::wafer {

enum class MapMode { pipelined, weight_streaming };

struct MappingOptions {
  MapMode mode = MapMode::pipelined;
  int64_t block = 0;             // kb = nb: the W block edge per PE (0: automatic)
  int64_t rect_width = 0;        // weight streaming: the rectangle (0: as large as useful within the fabric)
  int64_t rect_height = 0;
  int64_t reserved_colors = 0;   // colors the allocator may not use (0 .. reserved-1)
  // Weight streaming, the rectangle not given: the first factor its search grows the weights' need
  // by (1; a driver whose layout's arrays, packed, do not fit a PE retries with more).
  int64_t rect_grow0 = 1;
  // precision.compute: f32 (fmacs), or f16, bf16 or cbf16 -- weights and activations in that
  // 16-bit format, products and sums in fp32 (fmachs).
  Elem compute = Elem::f32;
  // Training (weight streaming, fp32, MSE or softmax cross-entropy, SGD with or without momentum;
  // docs/wafer-compiler.md "Training"): after the
  // forward pass the programs form the loss and its gradient at the last layer's chain ends, run
  // every layer's backward pass on the same rectangle (dy multicast back along the chains, weight
  // gradient blocks and input gradients on every PE, the input gradient reduced along the x lines
  // to the previous layer's chain ends, masked by its ReLU), update the biases in place at the
  // chain ends and send each layer's weight gradient out of an edge port for SwarmX and MemoryX.
  bool training = false;
  double learning_rate = 0;      // SGD, for the biases on the wafer (MemoryX updates the weights)
  double momentum = 0;           // SGD with momentum: the biases' velocities in PE SRAM (vb<l>)
  double weight_decay = 0;       // added to the gradient (torch.optim.SGD's), the biases' at the chain ends
  // Dynamic loss scaling (16-bit compute): dy scaled by the loss scale the host places at the loss
  // PEs (`lsc`); the biases wait for MemoryX's verdict on the gradients (port "verdict").
  bool loss_scaling = false;
  // Micro-batches (gradient accumulation): the program is compiled for one micro-batch and runs
  // this many times a step; the loss divides by the whole batch, MemoryX sums the weight gradients
  // of the runs and the chain ends the bias gradients (`dba<l>`), and the updates wait for the
  // last run, which MemoryX's verdict says (1; 0 before it).
  int64_t micro_batches = 1;
  // Adam (torch.optim.Adam's): MemoryX updates the weights; the chain ends the biases, with the
  // bias corrections 1 / (1 - b^t) the host places each step (`abc<l>`).
  bool adam = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // A learning-rate schedule: the chain ends take the step's rate from the host (`lrs<l>`) instead
  // of the constant learning_rate.
  bool lr_scheduled = false;
  std::string loss = "mse";      // mse | softmax_cross_entropy (all classes on one chain-end PE)
};

// An elementwise function of one value, applied at a kernel's chain ends after the bias, in the
// graph's order (docs/wafer-compiler.md "Elementwise functions"; elementwise.cpp builds its PE
// operations with unary_ops and costs them with unary_cycles).
struct Unary {
  // keep, combine: an op of two values of one chain end (x - tanh(x), x / (1 + |x|), x sigmoid(1.702 x)):
  // `keep` copies y into the kept array (the last of the kernel's temporaries), the functions after
  // it go on over y, and `combine` puts kept op y (or y op kept) back into y.
  // mul_per, add_per: y times (plus) a constant per output feature (`per`: a scale or shift per
  // channel after a GroupNorm or InstanceNorm, where it cannot fold into W or the bias).
  enum class Kind { relu, leaky_relu, clip, tanh, sigmoid, hard_sigmoid, hard_swish, swish, gelu, gelu_tanh, abs, neg, mul, add, elu, softplus, mish, prelu, keep, combine,
                    mul_per, add_per };
  enum class Bin { add, sub, mul, div };  // combine's op
  Kind kind = Kind::relu;
  // leaky_relu, swish, elu: alpha; clip: lo, hi (+-inf: no bound); hard_sigmoid: alpha, beta;
  // mul, add: the scalar constant; combine: a = its Bin, b = 1 when the kept value is the first
  // operand (kept - y, kept / y), 0 when y is.
  double a = 0, b = 0;
  std::string op;  // the graph op it came from ("Relu", "Clip", ...), for messages and the kernel's op
  std::vector<float> per;  // prelu, mul_per, add_per: a value per output feature (N; placed at the chain ends as prs<l>_<j>)
  bool monotone() const;  // non-decreasing: it commutes with a max (a MaxPool after it)
  bool keeps_zero() const;  // f(0) = 0: a padded feature (0) stays 0
  int temporaries() const;  // arrays of y's size its PE operations need (keep, combine: besides the kept one)
};

namespace detail {
struct RnnStep;  // internal.hpp: a recurrent layer's step (recurrent.cpp)
}

// One dense layer placed on the fabric.
struct DenseKernel {
  std::string name;                  // the graph node that produces its output
  std::string op;                    // "Gemm" or "MatMul(+Add)" ...
  std::vector<std::string> nodes;    // graph nodes it covers
  int64_t B = 0, K = 0, N = 0;       // X [B, K] x W [K, N]
  int64_t kb = 0, nb = 0;            // block per PE
  bool k_on_columns = true;          // K along the rectangle's x axis (else along y)
  Dir x_flow = Dir::S;               // direction x values travel along the K axis' lines
  int64_t x0 = 0, y0 = 0, w = 0, h = 0;  // the rectangle (fabric coordinates)
  // Elementwise functions after the bias, in order (Relu, Tanh, GELU, Sigmoid, Clip, ...); a
  // residual Add comes after them.
  std::vector<Unary> acts;
  std::vector<Unary> acts_after;     // those after the residual Add (ResNet's Relu after the sum)
  std::vector<Unary> acts_post_ln;   // those after the LayerNorm (Linear, LayerNorm, ReLU)
  bool activated() const { return !acts.empty(); }
  // The chain ends hold more features than N (the last blocks padded): a LayerNorm masks them.
  bool ln_padded() const { return (k_on_columns ? h : w) * nb > N; }
  // A LayerNorm's padded features may be nonzero after the functions before it, or after those
  // after it (f(0) != 0: Sigmoid, an Add, ...): masked back to 0.
  static bool all_keep_zero(const std::vector<Unary>& us) {
    for (const Unary& u : us)
      if (!u.keeps_zero()) return false;
    return true;
  }
  bool ln_premask() const { return layernorm && ln_padded() && !(all_keep_zero(acts) && all_keep_zero(acts_after)); }
  bool ln_postmask() const { return layernorm && ln_padded() && !all_keep_zero(acts_post_ln); }
  int act_temporaries() const {      // arrays of y's size the functions need (the most any one does; and the kept value last)
    int n = 0;
    bool kept = false;
    for (const auto* v : {&acts, &acts_after, &acts_post_ln})
      for (const Unary& u : *v) n = std::max(n, u.temporaries()), kept = kept || u.kind == Unary::Kind::keep;
    return n + (kept ? 1 : 0);
  }
  bool act_is(Unary::Kind kind) const { return acts.size() == 1 && acts[0].kind == kind; }
  bool softmax = false;              // a Softmax over the outputs after it (last layer; all N on one PE)
  bool log_softmax = false;          // ... a LogSoftmax: z - max - ln(sum exp(z - max)) (softmax set too)
  // A residual: after the activation, the chain ends add the input of kernel `residual`, which
  // lies on the same PEs in the same blocks (weight streaming: a kernel two orientations back; a
  // feature map read inside its zero border through the holder's interior walk).
  int64_t residual = -1;
  // The residual is the output of kernel `residual` rather than its input: an output no kernel
  // reads (ResNet's downsampling shortcut: Add(conv2, downsample) at the later of the two).
  bool res_out = false;
  // Or kernel `residual`'s value before its LayerNorm (a pre-norm block's x + f(LN(x))), which its
  // chain ends keep (array yh<r>) before they normalise (weight streaming); preln_value: that value.
  bool res_preln = false;
  std::string preln_value;
  bool keeps_preln = false;
  bool rms = false;
  bool res_mul = false;  // the residual multiplies (a gated unit: SwiGLU's silu(w1 x) * w3 x) instead of adding  // the LayerNorm is an RMSNorm: x / sqrt(mean(x^2) + eps) * scale (no mean, no bias)  // a later kernel's residual adds its value before its LayerNorm (yh<l>)
  // Pipelined: the residual is the graph input, which the host places on this kernel's chain ends
  // (array xr<l>) as it places it on the first kernel's sources.
  bool res_host = false;
  // Weight streaming: the residual's input lies on the other edge (the producer's chain ends have
  // the other orientation: an odd number of kernels in the branch, MobileNetV2's blocks): the
  // producer sends it along the diagonal route (docs/wafer-compiler.md "Residuals across the
  // edges") on color cm, and the chain ends add it as it arrives (fabin mvin<l>).
  bool res_move = false;
  int cm = -1;
  // Pipelined: the activation (Relu, Tanh, GELU) applies to the first act_blocks N blocks only
  // (-1: all); the rest are identity columns passing the kernel's input through to the next
  // kernel, whose identity rows add it (a residual over two pipelined layers).
  int64_t act_blocks = -1;
  bool act_split() const { return activated() && act_blocks >= 0 && act_blocks < nblocks(); }
  int64_t nflops = 0;                // N counted for FLOPs when it differs (fused, pass-through columns)
  // LayerNorm over each row's N outputs after that, along the chain ends (two passes: the mean,
  // then the variance, each summed along the edge and broadcast back; rsqrt by Newton).
  bool layernorm = false;
  std::vector<float> ln_gamma, ln_beta;
  std::string ln_gamma_value, ln_beta_value;  // the graph's scale and bias values (training: parameters; no bias: "")
  double ln_eps = 1e-5;
  // GroupNorm (an InstanceNormalization of [batch, groups, rest], between Reshapes; InstanceNorm:
  // groups of one channel) right after a Conv's bias: per sample and group the mean and variance
  // over the group's channels and every position, local to the chain end (its block of nb channels
  // holds whole groups); then the functions (its scale and shift are mul_per / add_per). gn_size:
  // channels per group (0: none).
  int64_t gn_size = 0;
  double gn_eps = 1e-5;
  int64_t gn_groups() const { return gn_size ? nb / gn_size : 0; }  // groups per chain-end PE
  int cn0 = -1, cn1 = -1, cnb = -1;  // LayerNorm: the edge chain's two colors, the broadcast back
  std::string in_value;              // the graph value it reads
  int64_t src = -1;                  // the kernel whose output it reads (-1: the graph input)
  // Multi-head attention at this kernel's chain ends (it computes V; kernels attn_q and attn_k
  // computed Q and K on the same PEs, in the same blocks): per head, scores, softmax over the keys
  // and the values' weighted sum, local to the PE (each PE's block holds whole heads). The output
  // replaces V as what the next kernels read (`att<l>`).
  bool attn = false;
  int64_t attn_q = -1, attn_k = -1, heads = 0, dh = 0;
  double attn_scale = 1;
  // A batch of attn_samples sequences of attn_keys() rows each: each sample attends within its
  // rows -- contiguous (attn_contig: nn.MultiheadAttention's [seq, batch] rows on the input's
  // physical [batch, seq] order, or the 4-D form's [batch, seq] rows in physical order) or
  // interleaved (row s x samples + b).
  int64_t attn_samples = 1;
  bool attn_contig = false;
  std::vector<float> attn_mask;  // added to the scaled scores [S, S] before the softmax (empty: none); array amask<l>
  // Rotary embeddings of Q and K (LLaMA's): q cos + rotate_half(q) sin per position, cos and sin of
  // [S, dh] each (empty: none); arrays rcq/rsq/rck/rsk<l>, applied in place before the scores.
  std::vector<float> attn_q_cos, attn_q_sin, attn_k_cos, attn_k_sin;
  // Cross-attention (a decoder's: keys and values from a second graph input, kernels attn_k and
  // this one reading it): the query rows, Q's B, when they differ from the keys' (0: the same).
  int64_t attn_qrows = 0;
  int64_t attn_keys() const { return B / attn_samples; }
  int64_t attn_queries() const { return (attn_qrows ? attn_qrows : B) / attn_samples; }  // per sample
  int64_t attn_row0(int64_t b) const { return attn_contig ? b * attn_keys() : b; }  // sample b's first row (keys, values)
  int64_t attn_qrow0(int64_t b) const { return attn_contig ? b * attn_queries() : b; }  // of the queries and the output
  int64_t attn_rstep() const { return attn_contig ? 1 : attn_samples; }           // rows between its consecutive rows
  // Heads split over chain-end PEs (nb < dh, dh a multiple of nb): g = dh / nb PEs per head sum
  // their partial scores along the edge (ca0/ca1) and the group's last PE, after the softmax,
  // broadcasts P back (cab). g = 1: whole heads per PE.
  int ca0 = -1, ca1 = -1, cab = -1;
  // Pipelined mode: Q, K and V fused into this one kernel (docs/wafer-compiler.md "Transformers,
  // pipelined"): W is [K, 3 d'] with each chain end's block of nb = 3 fb columns holding the fb
  // features of Q, then of K, then of V (d' = d padded to whole blocks), so the attention finds all
  // three on its PE; Wq, Wk, bq, bk keep the Q and K projections until the block is known.
  bool qkv = false;
  int64_t attn_d = 0;                // the attention's features (d)
  std::vector<float> Wq, Wk, bq, bk;
  // Features of the attention's output per chain-end PE and in all (nb and N unless fused).
  int64_t feat_nb() const { return qkv ? nb / 3 : nb; }
  int64_t feat_N() const { return qkv ? attn_d : N; }
  int64_t attn_group() const { return attn && feat_nb() < dh ? dh / feat_nb() : 1; }
  // Rotary embeddings rotate pairs of a head's features (j, j + dh / 2). The unit a chain-end PE
  // rotates: its whole heads (dh), or with a head split over g PEs its own fb features, which hold
  // whole pairs: Q's and K's features are reordered within each head so that the head's r-th PE
  // holds pairs r fb / 2 .. (r + 1) fb / 2 - 1, first halves then second halves
  // (rotary_pair_feature; the scores' sums over a head's features do not depend on their order).
  int64_t rot_width() const { return attn_group() > 1 ? feat_nb() : dh; }
  // The head feature held at position p (0 .. dh - 1) of a head split into parts of fb features.
  static int64_t rotary_pair_feature(int64_t p, int64_t fb, int64_t dh) {
    const int64_t r = p / fb, i = p % fb, half = fb / 2;
    return i < half ? r * half + i : dh / 2 + r * half + (i - half);
  }
  // Query rows per block: all Sq = attn_queries() rows of a sample when the Sq x S scores (S =
  // attn_keys()) take at most 1024 values (4 KB), else the largest divisor of Sq whose block does.
  int64_t attn_rows() const {
    const int64_t S = attn_keys(), Sq = attn_queries();
    int64_t q = Sq;
    while (q > 1 && (q * S > 1024 || Sq % q != 0)) --q;
    return q;
  }
  std::vector<float> W;              // [K, N] row-major (fp32 master values)
  std::vector<float> bias;           // [N] (zeros without a bias)
  std::string w_value, b_value;      // graph values of the weight and the bias ("" without one)
  // Why W is derived from w_value rather than its values ("" when it is): a constant scale per
  // output feature after the layer folded into its columns and the bias, a dilated Conv's kernel
  // spread out with zeros. Training refuses such a kernel (it trains w_value).
  std::string w_derived;
  bool w_trans = false;              // the weight value is [N, K] (Gemm transB)
  bool input_layer = false;          // its x comes from the graph input (held by its source PEs)
  // Its x rows are the second graph input (Compiled::input2: a decoder's memory), which the host
  // places at the chain ends that hold kernel src's output, beside it: a follower of the
  // cross-attention's Q kernel (the same src), sent after Q's x values (array xg<l>).
  bool reads_input2 = false;
  // How the x values are read from the array that holds the input (docs/wafer-compiler.md
  // "Convolutions"): `rows` -- [B, kb] as it is; `conv` -- im2col rows gathered by strided sends
  // from a [samples, ih, iw, cb] holder (one 4-D DSD per sample: oh, ow, kh, then kw and the cb
  // channels together; the K order within a block is (kh, kw, channel), W permuted to match);
  // `flatten` -- a Flatten's [samples, C * P] from a [samples, P, cb] holder (channel-major).
  enum class XRead { rows, conv, flatten };
  XRead xread = XRead::rows;
  int64_t samples = 0;               // the graph's batch (B = samples * oh * ow for a conv)
  int64_t kflops = 0;                // the contraction counted for FLOPs (K without padding)
  int64_t cin = 0, cblk = 0;           // conv / flatten: input channels, channels per holder PE
  int64_t groups = 1;                // conv: the model's groups (mapped as the dense Conv with zero blocks)
  int64_t ih = 1, iw = 1;            // conv: the holder's spatial dims per sample (with the zero border)
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, oh = 1, ow = 1;  // conv window, strides, output dims
  int64_t khb = 1;                   // conv: kernel rows per line (the first Conv splits them over lines; others take all)
  // conv: the zero border of the holder's [ih, iw] (top, left), which the host places for the graph
  // input and the producer's chain ends keep (they write y into the interior of `xp<producer>`).
  int64_t pad_t = 0, pad_l = 0;
  int64_t ih_raw = 1, iw_raw = 1;    // conv: the input's height and width without the border
  // conv: the input dilated -- a ConvTranspose's stride: ish - 1 (isw - 1) zeros between the input's
  // rows (columns) in the holder, which the producer's interior walk (or the host) leaves out.
  int64_t ish = 1, isw = 1;
  bool padded() const { return spatial() && (ih != ih_raw || iw != iw_raw); }
  // The producer of a padded Conv: its reader's holder dims ([samples, xp_h, xp_w, nb] with the
  // zero border; 0: its reader takes y as it is), the border's top and left (an unpadded second
  // reader walks the interior).
  int64_t xp_h = 0, xp_w = 0, xp_t = 0, xp_l = 0;
  int64_t xp_sh = 1, xp_sw = 1;      // ... and the reader's input dilation: y's rows and columns that far apart there
  // ... or a nearest Resize (Upsample) before the reader, by integer factors: each value written
  // xp_rh x xp_rw times (the walks xpi<l> and xpi<l>_<r>, r = 1 .. xp_rh xp_rw - 1).
  int64_t xp_rh = 1, xp_rw = 1;
  int64_t P = 1;                     // flatten: positions per channel
  // Tokens (a Vision Transformer's patch embedding): this Conv's output positions, as rows
  // [samples, positions, channels] (a Reshape and Transpose), with constant rows concatenated
  // (the class token) -- y goes into a holder of xp_h = lead + positions + trail rows per sample
  // (xp_w 1, xp_t the leading rows), whose other rows stay zero; the Identity kernel reading it adds
  // the constants as its row bias.
  bool tokens = false;
  // A constant added per row and feature with the bias: [row_period, N], broadcast over the
  // row_period-row groups of the B rows (the position embedding and the class token); 0: none.
  int64_t row_period = 0;
  std::vector<float> row_bias;
  // Rows read from the producer: row sel_row of every sel_period rows (a Slice of one token: the
  // class token into the head); 0: every row.
  int64_t sel_period = 0, sel_row = 0;
  // A recurrent layer's step, its cell at the chain ends (recurrent.cpp); a reader of one (or the last
  // one, as the graph output) takes state slot rnn_slot of its rows.
  std::shared_ptr<const detail::RnnStep> rnn;
  int64_t rnn_slot = -1, rnn_nslots = 1;                  // (several adjacent slots: their features concatenated)
  std::shared_ptr<const std::vector<float>> rnn_w0;      // such a reader's W as the graph has it (rnn_blocks lays it out per block)
  std::vector<float> Wconv;          // conv: the weight as ONNX has it, [N, cin kh kw] (W built once cb is known)
  // A MaxPool, AveragePool or GlobalAveragePool (a window of the whole map) after the activation,
  // at the chain ends: window, strides, output dims (pkh = 0: none); pavg: the mean, not the max.
  int64_t pkh = 0, pkw = 0, psh = 1, psw = 1, ph = 0, pw = 0;
  bool pavg = false;
  // The pool's pads (top, left, bottom, right): the windows walk a copy of y inside a border
  // (`yp<l>`: -inf for a max, zeros for a mean counting them).
  int64_t ppt = 0, ppl = 0, ppb = 0, ppr = 0;
  bool pool_padded() const { return ppt || ppl || ppb || ppr; }
  // Squeeze-excitation: this kernel's output (after its functions) is a per-channel gate
  // [samples, N] that multiplies the output of kernel gate_of before its pool -- a feature map of
  // gate_rows rows in the same blocks on the same chain ends (two kernels back: the same edge); the
  // product (array gt<l>) is what its readers take. prepool: the value before a kernel's pool (the
  // graph value a later gate multiplies).
  int64_t gate_of = -1, gate_rows = 0;
  std::string prepool;
  int64_t pool_ih() const { return oh + ppt + ppb; }
  int64_t pool_iw() const { return ow + ppl + ppr; }
  bool spatial() const { return xread == XRead::conv; }
  // Rows of the output the next kernel reads (after the pool), per block of nb channels.
  int64_t rows_out() const { return gate_rows ? gate_rows : pkh ? samples * ph * pw : attn && attn_qrows ? attn_qrows : B; }
  // Colors: x multicast, the two alternating reduce colors, weights (weight streaming only).
  int cx = -1, cr0 = -1, cr1 = -1, cw = -1;
  int cb = -1;                       // training: dy multicast back along the chains
  std::string grad_port;             // training: the edge port its weight gradient leaves by
  // Weight streaming: the MemoryX tensor and input port of its weights; lanes and values per lane.
  std::string mx_tensor, port;
  int64_t lanes = 0, lane_len = 0;
  // Estimate (cycles; mapper/wafer/estimate).
  struct Estimate {
    int64_t start = 0;               // x (and weights) ready at the first PE
    int64_t compute_end = 0;         // every PE's on-x tasks done
    int64_t end = 0;                 // y complete at the chain's end (before it is sent on)
    int64_t weights_ready = 0;       // weight streaming: the last PE holds its block
    int64_t compute = 0;             // per-PE task cycles (the fmacs work and its bookkeeping)
    int64_t transfer = 0;            // reduce chain, bias/activation and hand-off
    int64_t stream = 0;              // weight streaming: the weight stream through a lane
    double flops = 0, weight_bytes = 0;
  } est;
  // Per-axis helpers.
  int64_t kblocks() const { return spatial() ? (cin + cblk - 1) / cblk * ((kh + khb - 1) / khb) : (K + kb - 1) / kb; }
  int64_t kh_blocks() const { return (kh + khb - 1) / khb; }
  // The first Conv's source array: the samples' [ih, iw, cb] images, and rows the last kernel-row
  // block's walk may pass beyond them (their weights are zero) when khb does not divide kh.
  int64_t xs_elems() const { return (samples * ih + kh_blocks() * khb - kh) * iw * cblk; }
  int64_t nblocks() const { return (N + nb - 1) / nb; }
  int64_t pes() const { return w * h; }
};

// A constant written into one PE's array before the run (resident weights, bias).
struct HostArray {
  int64_t x = 0, y = 0;
  std::string array;
  std::vector<float> values;
};

struct Compiled {
  MapMode mode = MapMode::pipelined;
  Elem compute = Elem::f32;   // the weights' and activations' type (MappingOptions)
  bool half() const { return is_half(compute); }
  int64_t fabric_width = 0, fabric_height = 0;  // of the layout
  std::string layout_json;                      // tessera.wafer-layout/1
  std::map<std::string, ProgramTemplate> programs;  // program path in the layout -> program
  std::vector<DenseKernel> kernels;             // in execution order
  // Per holder p + 1 (p = -1: the graph input's sources, else kernel p's chain ends): the kernels
  // that read it, in order; the task id of the send to its second reader (the others follow).
  std::vector<std::vector<size_t>> readers;
  std::vector<int> extra_send_id;
  // Weight-streaming inference of more kernels than a PE has task ids and colors for one each
  // (docs/wafer-compiler.md "Many kernels"): shared tasks run every kernel's bodies in turn
  // (sequencer.cpp); the kernels' y arrays lie in one arena, kernel l's at element y_off[l].
  bool sequenced = false;
  std::vector<int64_t> y_off;
  int64_t y_arena = 0;
  // Training (always sequenced): the x values each kernel's PEs took, in one arena "Xsv" (kernel
  // l's at element xs_off[l]); the kernels whose weights stream again for the backward pass (every
  // one but the first whose block is no longer in its orientation's buffer), in backward order.
  std::vector<int64_t> xs_off;
  int64_t xs_arena = 0;
  std::vector<int64_t> reloads;
  std::vector<HostArray> constants;
  std::string input, output;                    // graph values
  Shape input_shape, output_shape;
  std::string input2;                           // a second graph input (cross-attention's keys and values), "" if none
  Shape input2_shape;
  int colors_used = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> color_streams;  // color -> streams using it (report)
  int64_t predicted_cycles = 0;
  double predicted_s = 0;
  // Training: the estimate of one step (predicted_s is the whole step: the fabric's forward,
  // loss and backward pass, and the MemoryX updates after it); its parts in cycles from the start.
  struct TrainEstimate {
    int64_t forward = 0, loss = 0, backward = 0;  // ends: last chain end's forward, last loss, fabric
    double update_end_s = 0;                       // the last MemoryX update done
    double skip_s = 0;                             // a run whose verdict is 0 (a micro-batch before the last): no bias updates
  } train_est;
  double clock_hz = 0;
  int64_t sram_high_water = 0;                  // bytes of data per PE, the largest
  int64_t rect_grow = 0;                        // weight streaming, the rectangle not given: the factor it grew by (0: given)
  // Training: the loss chain's colors; the PE (rect-relative) that ends up with the loss.
  bool training = false;
  std::string loss;                             // training: mse | softmax_cross_entropy
  double momentum = 0;                          // training: SGD momentum (0: plain SGD)
  double weight_decay = 0;                      // training: the biases' weight decay (MemoryX applies the weights')
  bool loss_scaling = false;                    // training: dynamic loss scaling (MappingOptions)
  int64_t micro_batches = 1;                    // training: runs per step (MappingOptions)
  bool verdict() const { return loss_scaling || micro_batches > 1; }  // training: the bias updates wait for MemoryX's verdict
  bool adam = false;                            // training: Adam (MappingOptions)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool lr_scheduled = false;                    // training: the step's rate placed per step (MappingOptions)
  int cv = -1;                                  // its verdict color (port "verdict": E side, one lane per row)
  int cl0 = -1, cl1 = -1;
  int64_t loss_x = 0, loss_y = 0;
  // The last layer's chain-end PEs and the target block each holds (array "tgt": [B, nb]).
  std::vector<HostArray> place_target(const Tensor& t) const;
  // A layer's weight gradient as MemoryX holds the weights (memoryx_layout order) from the lanes
  // of its gradient port (each lane: the blocks of its chain, the chain end's first).
  std::vector<float> gradient_layout(const DenseKernel& k, const std::vector<std::vector<float>>& lanes) const;
  // The inverse of memoryx_layout: [K, N] values from MemoryX order.
  std::vector<float> from_memoryx_layout(const DenseKernel& k, const std::vector<float>& mx) const;
  // Weight streaming: the input queue of kernel l's weight stream, one per orientation (the
  // kernels of an orientation share its weight color).
  int weight_queue(size_t l) const { return kernels[l].k_on_columns ? 2 : 3; }
  // Host-side placement (data movement only): the graph input's values as PE arrays; the output
  // gathered back from the PEs that hold it.
  std::vector<HostArray> place_input(const Tensor& x) const;
  // The second graph input's rows [B, K] (input2) at the chain ends that send them to the kernels
  // reading it (array xg<l> per reader, its K block), in the compute type.
  std::vector<HostArray> place_input2(const Tensor& x2) const;
  template <class Read>  // Read(x, y, array) -> std::vector<float>
  Tensor gather_output(Read read) const;
  template <class Read>
  Tensor gather_state(Read read) const;  // the graph output as a recurrent stack's final state (slot rnn_slot of the last step's rows)
  // Weight streaming: each kernel's weights in MemoryX order (stream position major, lanes
  // interleaved) and the inverse, for reading updated weights back.
  std::vector<float> memoryx_layout(const DenseKernel& k) const;
};

// A conv kernel's weights [N, cin, kh, kw] as its im2col matrix [K, N] (the rows its lines take;
// rows past kh or cin are 0), and back (training: MemoryX holds the matrix).
std::vector<float> conv_matrix(const DenseKernel& k, const std::vector<float>& wconv);
std::vector<float> conv_tensor(const DenseKernel& k, const std::vector<float>& kn);

// Weight streaming: a PE's data (the layers' activations at the batch given) does not fit its SRAM
// on any rectangle the search tries -- fewer samples at a time (micro-batches) may.
class DoesNotFit : public InputError {
 public:
  // larger: a larger rectangle than the one tried could help (false when the compiler grew it as far
  // as the fabric allows); half: the compute is 16-bit already; training: a training step.
  DoesNotFit(const std::string& where, const std::string& message, bool larger, bool half, bool training)
      : InputError(where, message, ways(larger, half, training, true)), larger(larger), half(half), training(training) {}
  // What may make it fit, as a hint: a larger rectangle (if one could help), 16-bit compute (if fp32),
  // micro-batches (unless `micro` is false: tried already; training: gradient accumulation), the
  // NeuronCore.
  static std::string ways(bool larger, bool half, bool training, bool micro) {
    std::string h;
    auto add = [&h](const std::string& w) { h += (h.empty() ? "" : ", or ") + w; };
    if (larger) add("give a larger rectangle (mapping.wafer_rect, or leave it out: the compiler then grows the rectangle as far as the fabric allows) or fabric (target.params fabric.width/height)");
    if (!half) add("compute in 16 bits (precision.compute fp16, bf16 or cbf16: half the bytes of every weight and value)");
    if (micro) add(training ? "train in micro-batches (mapping.micro_batch: gradient accumulation)" : "run micro-batches (mapping.micro_batch)");
    add("run the model on target.kind neuroncore");
    return h;
  }
  std::string ways(bool micro) const { return ways(larger, half, training, micro); }
  bool larger = false, half = false, training = false;
};

// Throws InputError naming the node for an op or shape this build does not map, the kernel and
// bytes when weights do not fit PE SRAM (suggesting weight streaming), DoesNotFit when a PE's
// data does not, or the conflicting kernels when the colors run out.
Compiled compile(const graph::Graph& g, const WaferConfig& cfg, const MappingOptions& opt);

// compile_report.txt: the estimate in the columns of Cerebras' compile report (samples/s, compute
// samples/s, transmission samples/s, active PEs, compute utilisation), overall and per kernel.
std::string compile_report(const Compiled& c, const WaferConfig& cfg);

// mapper/wafer/estimate.cpp: fills every kernel's `est` and the totals.
void estimate(Compiled& c, const WaferConfig& cfg);

}  // namespace tessera::wafer

#include "mapper/wafer/gather.hpp"  // (Compiled::gather_output, gather_state)
