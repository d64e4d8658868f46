#pragma once
// Private to mapper/wafer (not part of the interface; compile.hpp is): what the wafer compiler's
// files share. One section per file; each function's comment is with its definition.
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mapper/wafer/compile.hpp"
#include "mapper/wafer/functions.hpp"

namespace tessera::wafer::detail {

using json = nlohmann::json;

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// functions.cpp and program_util.cpp: what the program builders share.
using Num = ProgramTemplate::Num;
inline Num P(const std::string& param) { return Num::of(param); }  // a parameter's value
Operand fnum(double v);  // a computed fp32 constant
// One step of a chain that sums `src` along a line of PEs (params `first`, `last`: the PE's place):
// the first sends src on `to`, the others add what arrives on `from`; the last PE keeps the sum in
// `last_dst` (the first of a one-PE chain copies src there unless it is src).
void chain_step(ProgramTemplate& t, const std::string& first, const std::string& last, const std::string& src, const std::string& to,
                const std::string& from, const std::string& last_dst);
// acc = the sum of the n elements `one` (a 1-element DSD) walks (dsd_off 0..n-1): a loop on r14/r15
// (labels lp, le).
void sum_elements(ProgramTemplate& t, const std::string& acc, const std::string& one, int64_t n);
// acc = the sum of the B rows (nb values each) that `row` (a row DSD moved by dsd_off) walks (r14,
// r15; labels <tag>l, <tag>d), and its cycles: a bias's or a LayerNorm parameter's gradient.
void sum_rows(ProgramTemplate& t, const std::string& acc, const std::string& row, int64_t B, int64_t nb, const std::string& tag);
int64_t sum_rows_cycles(int64_t B, int64_t nb, const WaferConfig& cfg);
// `bnz r, la; op1 a1; jmp lb; la: op2 a2; lb:` -- the first of a run sets, the others accumulate.
void first_sets(ProgramTemplate& t, Operand r, const std::string& la, const std::string& lb, Op op1, const std::vector<Arg>& a1, Op op2,
                const std::vector<Arg>& a2);

// compile.cpp: the most kernels that get their own tasks and colors (more run sequenced).
inline constexpr int64_t kOwnTaskKernels = 8;

// match_layers.cpp: graph -> dense layers. kOpsHint: what the compiler maps (the hint of its errors).
extern const char* const kOpsHint;
// The ops that are elementwise functions of one value (at the chain ends: elementwise.cpp) -- Add,
// Mul, Sub and Div when the other operand is a scalar constant.
extern const std::set<std::string> kUnary;
// `input2`: a second graph input (a decoder's memory, read only as cross-attention's keys and
// values), "" if none.
std::vector<DenseKernel> match_layers(const graph::Graph& g, std::string& input, std::string& output, std::string& input2);

// match_ops.cpp: single nodes' kernels for match_layers (`unsupported` throws the node's error).
using Unsupported = std::function<void(const std::string&)>;
bool split_sliced_projections(graph::Graph& g);
std::string slice_tag(int64_t lo, int64_t hi);  // "/cols<lo>_<hi>": a parameter's columns (param_slice)
// concat.cpp: a Concat of branches read by Convs or dense layers, the readers split per branch.
// (And the graph rewrites' helpers: a value name from `base` the graph does not use yet; the data
// of a constant value, or null.)
std::string fresh(const graph::Graph& g, const std::string& base);
const Tensor* constant_of(const graph::Graph& g, const std::string& v);
bool split_concat_readers(graph::Graph& g);
bool input_needs_identity(const graph::Graph& g);
bool identity_for_input(graph::Graph& g);  // a feature-map graph input read by several Convs: through an identity Conv
bool pools_need_identity(const graph::Graph& g);
bool channel_views(graph::Graph& g);
// channels_last.cpp: ConvNeXt's channels-last blocks on the feature map (Linears as 1 x 1 Convs), a
// LayerNorm over a pooled map's channels on its flattened features (an identity dense layer).
bool channels_last_blocks(graph::Graph& g);
bool has_channels_last(const graph::Graph& g);  // channels.cpp: Convs reading Slices and shuffles of channels, per source
bool dense_heads_as_convs(graph::Graph& g);  // a dense layer on a Flatten of a 1 x 1 map from a Concat: a 1 x 1 Conv
// Nodes listed after a node that reads them move to their earliest reader (Kahn's order by the
// least index among a node and everything that depends on it); a topological order stays as it is.
void order_by_first_reader(graph::Graph& g);
std::optional<graph::Graph> rewrite_branches(const graph::Graph& g0);  // the above on a copy (nullopt: nothing to do)
void append_kernel(std::vector<DenseKernel>& ks, DenseKernel& k, const graph::Graph& g, const graph::Node& n, const std::string& cur, const char* per);
void leading_swaps(const graph::Graph& g, std::map<std::string, std::string>& alias, std::map<std::string, bool>& swapped, std::set<size_t>& consumed);
bool identity_for_pools(graph::Graph& g, bool functions_only);  // a pool of a feature map other nodes read too: through an identity Conv
std::string concat_refusal(const graph::Graph& g, const graph::Node& concat);  // why a Concat does not map
DenseKernel conv_kernel(const graph::Node& n, const Shape& cs, const Tensor& w, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported);
// ... with the input dilated by (ish, isw) (zeros between its values); a ConvTranspose's kernel
// (match_norms.cpp) as that Conv's.
DenseKernel conv_kernel_in(const graph::Node& n, const Shape& cs, const Tensor& w, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported, int64_t ish,
                           int64_t isw);
DenseKernel conv_transpose_kernel(const graph::Node& n, const Shape& cs, const Tensor& w, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported);
void pool_into(DenseKernel& k, const graph::Node& n, const std::string& cur, const Shape& cs, const Unsupported& unsupported);
using ConstantOf = std::function<const Tensor*(const std::string&)>;
DenseKernel identity_kernel(const std::string& name, long src, int64_t rows, int64_t d, const std::string& in_value);
void dense_weights(DenseKernel& k, const Tensor& w, bool trans_b);
DenseKernel token_concat(const graph::Node& n, const graph::Graph& g, const std::string& cur, const ConstantOf& constant, std::vector<DenseKernel>& ks,
                         const Unsupported& unsupported);
int64_t one_token(const graph::Node& n, const Shape& cs, const ConstantOf& constant, const Shape& os, const Unsupported& unsupported);
void add_row_bias(DenseKernel& k, const Shape& cs, const Shape& ts, const Tensor& c, const Unsupported& unsupported);
std::vector<size_t> chain_order(const graph::Graph& g, const std::map<std::string, size_t>& producer, const std::map<std::string, std::vector<size_t>>& uses,
                                const std::string& input, const std::string& input2);
void layout_aliases(const graph::Graph& g, std::map<std::string, std::string>& alias, std::set<size_t>& consumed);
bool means_spatial(const graph::Node& n, const Shape& cs, const ConstantOf& constant);
void scale_features(DenseKernel& k, const std::vector<float>& sv);
void layernorm_into(std::vector<DenseKernel>& ks, const graph::Node& n, const std::string& cur, const Shape& cs, bool on_input, const ConstantOf& constant,
                    const Unsupported& unsupported, bool channels = false);

// training.cpp: a Conv's pool is the mean of its whole map (GlobalAveragePool: one window per sample).
inline bool global_pool(const DenseKernel& k) { return k.pkh && k.pavg && k.ph == 1 && k.pw == 1 && k.pkh == k.oh && k.pkw == k.ow && !k.pool_padded(); }

// recurrent.cpp: a stack of RNN, GRU or LSTM layers as one kernel per layer and step. A step's
// output row: S state slots of hb units (each layer's h, an LSTM's c after it), the next step's x
// (xs values, where the next kernel is layer 0's: the host's xt<l>), then G gate columns of hb.
struct RnnWeights {  // ONNX's W [G H, in], R [G H, H], Wb and Rb [G H] (the forward direction)
  int64_t in = 0;
  std::vector<float> W, R, Wb, Rb;
};
struct RnnStep {
  enum class Cell { rnn, gru, lstm };
  Cell cell = Cell::lstm;
  // Its layer, direction (0 forward, 1 backward of a bidirectional layer) and the step of the
  // sequence it takes (a reverse direction's first kernel takes the last).
  int64_t layer = 0, layers = 1, dir = 0, dirs = 1, t = 0, T = 1, H = 0, X = 0, B = 0;  // X: the stack input's features
  bool batch_major = true;  // the graph input is [batch, steps, X] (PyTorch's batch_first), else [steps, batch, X]
  int64_t x_time = -1;      // its rows carry x of this step for the next kernel (-1: none)
  std::shared_ptr<const RnnWeights> w;
  int64_t v() const { return layer * dirs + dir; }  // the state's index
  int64_t states() const { return (cell == Cell::lstm ? 2 : 1) * layers * dirs; }
  int64_t gates() const { return cell == Cell::rnn ? 1 : 4; }  // GRU: z, r, and h~'s x and h parts
  static int64_t onnx_gates(Cell c) { return c == Cell::lstm ? 4 : c == Cell::gru ? 3 : 1; }  // (ONNX's W and R rows per unit)
  int64_t h_slot(int64_t v) const { return v; }  // every h first (a bidirectional layer's two adjacent), then an LSTM's c
  int64_t c_slot(int64_t v) const { return layers * dirs + v; }
};
struct RnnLayout {
  int64_t hb = 0, xs = 0, S = 0, G = 0, nb = 0, kw = 0;  // kw: the row's part the next kernel reads
};
RnnLayout rnn_layout(const DenseKernel& k);
int64_t rnn_wide(RnnStep::Cell cell);  // the widest gate region a cell's functions take (gates)
struct RnnMatch {
  std::vector<DenseKernel> kernels;
  std::string value;  // the final state the rest of the graph reads (or its output)
  int64_t slot = 0, nslots = 1;  // ... its state slots (several: concatenated features, a bidirectional layer's h_n)
};
std::optional<RnnMatch> match_recurrent(const graph::Graph& g, const std::string& input, const std::function<std::string(const std::string&)>& canon,
                                        const std::function<bool(const std::string&)>& parity, std::set<size_t>& consumed);
void rnn_blocks(std::vector<DenseKernel>& ks, size_t l);  // after placement: K, N, blocks, W, bias
void rnn_pipelined(std::vector<DenseKernel>& ks, size_t l, int64_t b);  // pipelined: a step's rectangle (or its reader's), then rnn_blocks
int64_t col_window(const Compiled& c, size_t reader);      // the column a reader's rows start at in its recurrent holder (-1: whole rows)
std::string rnn_gate(size_t l, int64_t g, int64_t n);
std::string rnn_state(size_t l, int64_t s);
std::string rnn_tmp(size_t l, int i, int64_t n);
void rnn_dsds(const Compiled& c, size_t l, ProgramTemplate& t, const std::string& tmp_array);
void rnn_cell_ops(const Compiled& c, size_t l, ProgramTemplate& t);
int64_t rnn_cell_cycles(const DenseKernel& k, const WaferConfig& cfg);
int64_t rnn_pe_bytes(const DenseKernel& k);
void rnn_place_input(const Compiled& c, const std::vector<float>& v, std::vector<HostArray>& out);

// match_norms.cpp: a constant per feature (shape [..., N] with ones before the last axis for rows,
// [C, 1, 1] (or [1, C, 1, 1]; [C, 1] in 1-D) for a feature map of rank r); a node fused into the
// kernel before it, named in its op and node list (the kernel named by it, except the bias Add the
// canonical graph splits off a Gemm, "<gemm>/bias", which keeps the Gemm's name); a squeeze-
// excitation gate or gated unit (the running value times o2, of shape os) at the last kernel.
bool per_feature(const Tensor& c, int64_t N, bool fmap, size_t rank);
void absorb(DenseKernel& k, const graph::Node& n);
void gate_into(std::vector<DenseKernel>& ks, const std::vector<std::string>& kout, const std::string& o2, const Shape& os, const Shape& cs, bool flat,
               const Unsupported& unsupported);
// GroupNorm and InstanceNorm at a Conv's chain ends (DenseKernel::gn_size), ops
// of two values of one chain end (Unary keep / combine), constants per output feature.
// Node i (n, reading the feature map of shape cs) starts a GroupNorm: the InstanceNormalization
// node, the Reshape back (-1: none; n itself when it is an InstanceNormalization of the map) and G.
struct GroupNormAt {
  long in = -1, back = -1;
  int64_t groups = 0;
};
GroupNormAt groupnorm_at(const graph::Graph& g, const graph::Node& n, size_t i, const Shape& cs, const std::function<long(const std::string&, const char*)>& sole);
void groupnorm_into(DenseKernel& k, const graph::Graph& g, const graph::Node& n, const GroupNormAt& at, bool flat, const ConstantOf& constant, const Unsupported& unsupported);
// torchvision's LayerNorm2d as exported: node n a Transpose of the feature map (shape cs) to
// channels-last whose one consumer is a LayerNormalization over the last axis whose one consumer is
// the Transpose back. Returns the LayerNormalization and the Transpose back ({-1, -1}: not this).
std::pair<long, long> channel_norm_at(const graph::Graph& g, const graph::Node& n, const Shape& cs, const std::function<long(const std::string&, const char*)>& sole);
// A residual Add of o2 to the last kernel's output (its residual, res_out, res_preln), or unsupported.
void residual_into(std::vector<DenseKernel>& ks, const std::vector<std::string>& kout, const std::string& o2, const std::string& input2, bool flat,
                   const Unsupported& unsupported);
// Where the last kernel's next elementwise function goes: its list (0: acts, 1: acts_after -- after
// a residual --, 2: acts_post_ln -- after a LayerNorm) and that list.
std::pair<int, std::vector<Unary>*> functions_list(DenseKernel& k);
// The earlier value at place `at` of the functions list fns kept, op n combines it (first: it is
// n's first operand) with the running value.
void two_values_into(std::vector<Unary>& fns, size_t at, const graph::Node& n, bool first, const Unsupported& unsupported);
// Mul, Add, Sub or Div of the running value by a constant c per output feature.
Unary per_feature_unary(const graph::Node& n, const Tensor& c);
// A nearest Resize of the feature map cs to os: its whole factors {rows, columns}, or unsupported.
std::pair<int64_t, int64_t> upsample_of(const graph::Node& n, const Shape& cs, const Shape& os, const Unsupported& unsupported);

// match_attention.cpp.
// Multi-head attention (PyTorch's export for one sequence): Q, K, V rows [S, d] -> Reshape
// [S, H, dh] -> Transpose to [H, S, dh] (K: [H, dh, S]) -> MatMul(Q / c, K) -> Softmax -> MatMul(., V)
// -> Transpose [S, H, dh] -> Reshape [S, d]: one block, attached to the kernel computing V.
struct AttnBlock {
  std::string q, k, v, out;
  int64_t heads = 0, dh = 0;
  int64_t samples = 1;  // nn.MultiheadAttention's batch: Reshape [S, batch x H, dh] of [S, batch, d]
  bool seq_major = true;    // [S, batch] rows (the 3-D form); else [batch, S] (the 4-D form)
  std::vector<float> mask;  // an additive mask over the scores [S, S] (empty: none)
  std::vector<float> q_cos, q_sin, k_cos, k_sin;  // rotary embeddings of Q and K, [S, dh] each (empty: none)
  double scale = 1;
  bool done = false;
};
// match_layers' views of the graph: a value's constant data (nullptr: none); the one consumer of a
// value when it is an `op` node (-1: none or another).
using SoleConsumer = std::function<long(const std::string&, const char*)>;
// elementwise.cpp: the elementwise function(s) of one value a graph node computes (Relu, Tanh,
// Sigmoid, Clip, a Mul by a scalar constant, ...: Sub(c, x) is two); empty with `why` set when it is not one.
std::vector<Unary> unary_of(const graph::Node& n, const ConstantOf& constant, std::string& why);
// The graph's attention blocks (`producer`: each value's node); their nodes go into `consumed`.
std::vector<AttnBlock> match_attention(const graph::Graph& g, std::map<std::string, size_t>& producer, const ConstantOf& constant,
                                       const SoleConsumer& sole, std::set<size_t>& consumed);
// Rotary embeddings with a head split over g > 1 chain-end PEs (attention kernel k, its block
// chosen): Q's and K's output features reordered within each head so that every PE holds whole
// rotation pairs (DenseKernel::rotary_pair_feature; their weight columns and biases permuted; the
// order is invisible: only the scores read them). An error if another kernel reads Q or K, or a
// PE's part of a head is odd.
void pair_rotary_features(Compiled& c, const DenseKernel& k);
// Kernel k's rotary table [S, dh] as the chain-end PE of N block nbk keeps it: whole, or with a
// split head its pairs' columns [S, fb] in the PE's order.
std::vector<float> rotary_table(const DenseKernel& k, const std::vector<float>& table, int64_t nbk);

// The kernel whose output a residual Add adds (-1: the graph input); k.residual >= 0.
inline int64_t res_producer(const std::vector<DenseKernel>& ks, const DenseKernel& k) {
  return k.res_out || k.res_preln ? k.residual : ks[static_cast<size_t>(k.residual)].src;
}

// placement.cpp.
// The array a kernel's readers take its output from (layer_program names it, pe_bytes counts it):
// y as it is, its 16-bit copy, the attention's output, the pool's output, the next Conv's
// holder with the zero border, or the squeeze-excitation product.
enum class Hold { y, y16, att, p, xp, gt };
Hold hold_of(const DenseKernel& k, bool half);
int64_t pe_bytes(const DenseKernel& k, bool own_w, int64_t wbytes, std::array<int64_t, 3>* scratch = nullptr);
int64_t post_scratch_bytes(const DenseKernel& k);
bool scratch_reuse(const Compiled& c);
std::pair<int32_t, int32_t> scratch_phases(const Compiled& c, size_t l, int span, bool is_y = false);
void y_arena(Compiled& c);
int64_t streaming_data_bytes(const Compiled& c, int64_t wbytes);
void conv_weights(DenseKernel& k);
std::pair<int64_t, int64_t> place_pipelined(std::vector<DenseKernel>& ks, int64_t b);
void fuse_qkv(std::vector<DenseKernel>& ks);
void qkv_weights(DenseKernel& k, int64_t b);
void pass_through(std::vector<DenseKernel>& ks, size_t l, int64_t b);
void place_streaming(std::vector<DenseKernel>& ks, int64_t w, int64_t h);
// The training step's estimate (estimate_training.cpp), after the forward pass's: `fwd_end` is when
// each of the last kernel's chain ends holds its output.
void estimate_training(Compiled& c, const WaferConfig& cfg, const std::vector<int64_t>& fwd_end);
// Weight streaming's orientation of each kernel (k_on_columns): K along the columns for a reader of
// the graph input, else the other orientation than the kernel it reads.
std::vector<bool> streaming_orientations(const std::vector<DenseKernel>& ks);

// colors.cpp.
size_t first_of_orientation(const Compiled& c, size_t l);
// Sequenced: the kernel whose LayerNorm (split-head attention) chain colors and routes kernel l
// shares -- the first of its orientation with one (with the same group size); l itself when none.
size_t ln_chain_owner(const Compiled& c, size_t l);
size_t attn_chain_owner(const Compiled& c, size_t l);
size_t first_move(const Compiled& c, size_t l);
void allocate_colors(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt);

// routes.cpp: route regions and per-PE parameters.
inline constexpr DirSet kRamp = dir_bit(Dir::RAMP);
json route(int color, int64_t x, int64_t y, int64_t w, int64_t h, DirSet rx, DirSet tx);
void x_routes(const DenseKernel& k, bool from_ramp, json& routes);
void reduce_routes(const DenseKernel& k, json& routes);
void move_routes(const DenseKernel& k, json& routes);
// The queues of a residual move: the producer's output queue, the adder's input queue.
inline constexpr int kMoveOutQueue = 4, kMoveInQueue = 6;  // (4: no other async op uses microthread 4 without attention; LayerNorm's broadcast runs on 5, its row sums arrive in a blocking receive)
void handoff_routes(const DenseKernel& p, const DenseKernel& n, json& routes);
void weight_routes(const DenseKernel& k, json& routes);
bool runtime_block_lengths(bool training, const DenseKernel& k);
void layer_params(const DenseKernel& k, size_t l, bool ws, bool training, json& params);
int chain_queue(const Compiled& c, size_t l);
void ln_routes(const DenseKernel& k, json& routes);
void ln_params(const DenseKernel& k, size_t l, json& params);
void attn_routes(const DenseKernel& k, json& routes);
void attn_params(const DenseKernel& k, size_t l, json& params);

// chain_end_program.cpp: post-ops at a kernel's chain ends.
void softmax_program(ProgramTemplate& t, const DenseKernel& k, const std::string& L);
// (keep_xh, training: the normalised value before the scale, xhat, kept in lnx<l> for the backward pass)
void ln_program(const DenseKernel& k, size_t l, ProgramTemplate& t, bool keep_xh = false);
// One LayerNorm pass along kernel k's chain ends (the estimate): each position's row sums, the
// chain of B values to the edge's end, `at_end` cycles there, the broadcast back; T per position.
void ln_edge_pass(const DenseKernel& k, const WaferConfig& cfg, std::vector<int64_t>& T, int64_t at_end);
// GroupNorm at a Conv's chain ends (DenseKernel::gn_size; its arrays and DSDs: layer_program.cpp),
// and its DSD operations' cycles (the estimate).
void gn_program(const DenseKernel& k, size_t l, ProgramTemplate& t);
int64_t gn_cycles(const DenseKernel& k, const WaferConfig& cfg);
void row_post_cycles(const DenseKernel& k, const WaferConfig& cfg, std::vector<int64_t>& t_of, bool training = false);  // attention, LayerNorm: the estimate
void attention_program(const DenseKernel& k, size_t l, int rc, ProgramTemplate& t, bool keep_p = false);  // (keep_p, training: P per (sample, head) in aP<l>)

// layer_program.cpp: kernel l's arrays and DSDs (then its tasks, unless sequenced).
void layer_program(const Compiled& c, size_t l, ProgramTemplate& t);
// An array and an element offset in it: kernel l's y is y<l>, or its place in the sequencer's
// arena "Yar" (Compiled::y_off).
struct ArrayAt {
  std::string array;
  int64_t off = 0;
};
ArrayAt y_array(const Compiled& c, size_t l);
// A dense reader's walk over its holder (gx<reader>) where it does not take the rows as they are.
void rows_walk(const Compiled& c, size_t reader, ProgramTemplate& t);
int64_t rows_len(const Compiled& c, size_t reader);
// layer_tasks.cpp: the DSD over all of kernel q's output at its chain ends; what a dense reader's
// x values are sent from (gx<reader>, or the holder as it is).
std::string full_dsd(const Compiled& c, size_t q);
std::string rows_source(const Compiled& c, size_t reader);
ArrayAt hold_array(const Compiled& c, size_t l);  // where kernel l's readers take its output from
std::string res_dsd(const Compiled& c, size_t l);
struct ConvWalk {
  int64_t off = 0, H = 0, W = 0;  // the walk's start, the holder's height and width per sample
};
ConvWalk conv_walk(const Compiled& c, size_t reader);
int64_t move_reader(const Compiled& c, size_t l);
// Whether kernel l's output goes on: read by a kernel, or added (here or moved) as a later residual.
bool output_used(const Compiled& c, size_t l);
// Sequenced: the kernel whose chain ends hand kernel m's x values off -- m - 1 when m has the other
// orientation, else (a follower: the same orientation as m - 1, its input on the edge m - 1's came
// from) the kernel that handed m - 1's off, right after them.
size_t handoff_from(const Compiled& c, size_t m);
inline bool follower(const Compiled& c, size_t m) { return m >= 1 && c.kernels[m].k_on_columns == c.kernels[m - 1].k_on_columns; }
// The sequenced kernels that are followers, in order.
std::vector<int64_t> followers(const Compiled& c);
// Sequenced: the kernel whose weight buffer (one per orientation) kernel m's load takes -- the
// previous kernel of its orientation (m - 2 in an alternating chain; -1: none).
int64_t buffer_before(const Compiled& c, size_t m);
// Training: the next kernel of kernel m's orientation (-1: none) -- the one whose block the
// buffer holds when the backward pass reaches m.
int64_t buffer_after(const Compiled& c, size_t m);

// layer_tasks.cpp: the task bodies, kernel by kernel. TaskNames: the tasks a body activates --
// kernel l's own (onx<l>, ...) or the sequencer's shared ones.
struct TaskNames {
  std::string onx, red, out, gs, ld, ldb, ldc, ldd;
};
TaskNames task_names(const Compiled& c, size_t l);
// The kernel count the task ids of a program are laid out for (at least 5): every kernel's in
// weight streaming's one program; pipelined, a program per kernel, one.
int task_id_kernels(const Compiled& c);
int x_regs(const Compiled& c, size_t l);
void gather_ops(ProgramTemplate& t, const std::string& task, const std::string& label, const std::string& src, const std::string& out, int64_t stride,
                int64_t samples, int rt, Op mov, bool halt_after, const std::function<void()>& before_last = {}, const std::string& then = {});
void red_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn);
std::string out_first(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn);
void ld_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn);
void ldb_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn);
void ldc_body(const Compiled& c, size_t l, ProgramTemplate& t, const TaskNames& tn);
void input_sends(const Compiled& c, size_t l, ProgramTemplate& t, int id_send);
void x_product(const Compiled& c, ProgramTemplate& t, Operand rj, const std::string& yr, const std::string& wc, const std::string& tag);
void layer_tasks(const Compiled& c, size_t l, ProgramTemplate& t);

// sequencer.cpp: the shared tasks of a sequenced program (Compiled::sequenced), after every
// kernel's declarations.
void sequenced_tasks(const Compiled& c, ProgramTemplate& t);
int dispatch_depth(size_t n);
// Binary search on register r over the sorted `keys` (scratch r2): emit(key) writes one case's
// code, which ends in ret, halt or a jump.
void dispatch(ProgramTemplate& t, int r, const std::vector<int64_t>& keys, const std::string& tag, const std::function<void(int64_t)>& emit);
// Registers of a sequenced program that training.cpp shares: the scratch register (free between
// tasks), the kernels whose backward pass (r13: bdone) and whose gradient send (r11: g3) has ended
// on this PE, counted from the last kernel. (r11 is the followers' register in inference;
// training has none.)
inline constexpr int kSeqScratch = 2, kRegLoaded = 9, kRegGdone = 11, kRegBdone = 13;
// Sequenced inference: the attention's query-block registers (r12-r14: training's, unused in inference).
inline constexpr int kSeqAttnRegs = 12;
inline constexpr int kRegFollow = 11;  // sequenced: the follower whose x values the chain ends send next (gsf)  // (r9: the loads done, kernels then reloads)

// training.cpp.
void dy_routes(const DenseKernel& k, json& routes);
int chain_color(const DenseKernel& k, int64_t p);
void grad_port_routes(const DenseKernel& k, json& routes);
void loss_routes(const Compiled& c, json& routes);
// The loss chain runs on the last kernel's LayerNorm edge chain (its colors and routes) when it has one.
bool loss_on_ln_chain(const Compiled& c);
void train_params(const Compiled& c, json& params);
void loss_program(const Compiled& c, ProgramTemplate& t);
void xent_program(const Compiled& c, ProgramTemplate& t);
void backward_program(const Compiled& c, size_t l, ProgramTemplate& t);
void backward_tasks(const Compiled& c, double lr, ProgramTemplate& t);
int loss_task_id(const Compiled& c);
void check_training(const Compiled& c, const MappingOptions& opt);
// training_conv.cpp: a trained Conv's pool backward and, for a Conv reading a Conv (l - 1), the
// col2im of its input gradient at the producer's chain ends.
bool conv_reads_conv(const Compiled& c, size_t l);
void pool_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t);
void pool_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t);
int64_t pool_backward_cycles(const DenseKernel& k, const WaferConfig& cfg);
void col2im_arrays(const Compiled& c, size_t l, ProgramTemplate& t);
void col2im_ops(const Compiled& c, size_t l, ProgramTemplate& t);
int64_t col2im_cycles(const Compiled& c, size_t l, const WaferConfig& cfg);
int64_t col2im_bytes(const Compiled& c, size_t l);
void check_conv_training(const Compiled& c, size_t l, const char* hint);
// training_norm.cpp: at a kernel's chain ends, a LayerNorm's backward pass and a residual's kept
// gradient (norm_backward_*), the scale's and shift's updates, the estimate's cycles (T per
// chain-end position, advanced).
void norm_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t);
void norm_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t);
// training_attn.cpp: self-attention's backward pass at the V kernel's chain ends.
bool has_input_grad(const Compiled& c, size_t l);   // kernel l computes an input gradient (it reads a kernel's output)
bool attn_input_kernel(const Compiled& c, size_t l);  // kernel l is an attention's Q or K
void check_attention_training(const Compiled& c, size_t l, const char* hint);
void check_attention_placed(const Compiled& c, size_t l);
void attention_keep_arrays(const Compiled& c, size_t l, ProgramTemplate& t);
void attention_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t);
void attention_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t);
int64_t attention_backward_cycles(const Compiled& c, size_t l, const WaferConfig& cfg);
int64_t attention_training_bytes(const Compiled& c, size_t l);
int64_t residual_producer(const Compiled& c, size_t l);  // the kernel whose output kernel l's residual adds (-1: none, or the graph input)
int64_t residual_reader(const Compiled& c, size_t p);    // the kernel whose residual adds kernel p's output (-1: none)
void residual_grad_ops(const Compiled& c, size_t p, ProgramTemplate& t);
void ln_update_ops(const Compiled& c, size_t l, double lr, ProgramTemplate& t);
void ln_sum_take_ops(const Compiled& c, size_t l, ProgramTemplate& t);
int64_t ln_verdict_cycles(const Compiled& c, size_t l, const WaferConfig& cfg);
void ln_backward_cycles(const Compiled& c, size_t l, const WaferConfig& cfg, std::vector<int64_t>& T);
// The bias update at kernel l's chain ends (training.cpp: weight decay, SGD, momentum or Adam) and
// its DSD cycles, from the same generator.
void bias_update_ops(const Compiled& c, size_t l, double lr, ProgramTemplate& t);
int64_t bias_update_cycles(const Compiled& c, size_t l, const WaferConfig& cfg);
// Adam's bias update at kernel L's chain ends (functions.cpp).
inline constexpr int kAdamTemps = 8;
void adam_bias_ops(ProgramTemplate& t, double b1, double b2, double eps, double lr, const std::string& L, bool lr_placed = false);
void training_layout(Compiled& c, const MappingOptions& opt, json& routes, json& params, json& ports, ProgramTemplate& t);

// rectangles.cpp: the kernels' rectangles and the fabric's size in pipelined mode (a block), in
// weight streaming (one rectangle; its x and saved-x arenas, the ports, the reloads).
void place_pipelined_rect(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt);
void place_streaming_rect(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt);

}  // namespace tessera::wafer::detail
