#pragma once
// What every kernel family (mapper/neuroncore/kernels/) works with: the graph, the machine, the
// options, the storage of values, the instruction stream, and small instruction builders.
#include <optional>
#include <string>

#include "mapper/neuroncore/emit.hpp"
#include "mapper/neuroncore/tensors.hpp"

namespace tessera::neuroncore {

// A kernel that cannot be planned says why (Timeloop's EvalStatus); the driver turns it into the
// user's error naming the node.
struct Status {
  bool ok = true;
  std::string reason, hint;
  static Status fail(std::string reason, std::string hint = {}) { return {false, std::move(reason), std::move(hint)}; }
};

// A bump allocator over SBUF bytes [next, limit) of every partition, for one kernel.
struct Sbuf {
  int64_t next = 0;
  int64_t limit = 0;
  std::string kernel;
  int64_t base = 0;
  std::string hint = "use a smaller tile (mapping.tile_n / tile_m) or fewer buffers (mapping.buffers)";
  int64_t take(int64_t bytes);
  bool fits(int64_t bytes) const { return next + (bytes + 63) / 64 * 64 <= limit; }
};

// What a matmul or convolution applies to its fp32 accumulator before storing it:
// y = func(acc * scale + bias) + residual, or func(acc * scale + bias + residual) when the residual
// comes first (ResNet's Add then Relu).
struct Epilogue {
  double scale = 1.0;
  std::optional<TensorRef> bias;      // broadcast to the output's shape (stride 0 where it repeats)
  std::string bias_value;             // the graph value the bias is (its data when constant)
  Func func = Func::identity;
  std::optional<TensorRef> residual;  // the output's shape
  bool residual_first = false;
  std::string out;                    // the value written (the last fused node's output)
  // The values a matmul reads in place of its inputs, when a scalar scale of an input moved into
  // `scale` ((c A) @ B = c (A @ B)); empty: the node's own input.
  std::string operand[2];
  // A LayerNormalization over the last axis of the result, fused (lower.cpp plan_epilogue): the
  // matmul keeps a row tile's whole result in SBUF and normalises it there before storing `out`
  // (the LayerNorm's output). `in` is the value the LayerNorm read (its input in the graph).
  struct Norm {
    const graph::Node* node = nullptr;
    std::string in;
    std::optional<TensorRef> scale, bias;
    double eps = 1e-5;
  };
  std::optional<Norm> norm;
};

class Ctx {
 public:
  Ctx(const graph::Graph& graph, const CoreConfig& config, const MappingOptions& options, Compiled& compiled, Emitter& emitter, Storage& storage)
      : g(graph), cfg(config), opt(options), c(compiled), em(emitter), st(storage) {}

  const graph::Graph& g;
  const CoreConfig& cfg;
  const MappingOptions& opt;
  Compiled& c;
  Emitter& em;
  Storage& st;

  // Starts a kernel: the instructions emitted from here on are its (the estimate and the kernel table).
  void begin(const std::string& name);
  // SBUF bytes per partition at the top kept for prefetched weights (kernels allocate below them),
  // and where each MatMul's prefetched right operand is (lower.cpp "prefetch"): [KT][N] per
  // partition from this offset, K-tile k's row at offset + k * N * es.
  int64_t sbuf_reserved = 0;
  std::map<std::string, int64_t> prefetched;
  Sbuf sbuf(const std::string& kernel, int64_t lo = 0, int64_t hi = -1) const;
  void used(const Sbuf& s) { c.sbuf_high_water = std::max(c.sbuf_high_water, s.next); }
  int64_t banks() const { return std::min<int64_t>(cfg.psum_banks, 8); }
  // A PSUM tile [parts, free] fp32 in bank i (mod the banks).
  AccessPattern psum(int64_t i, int32_t parts, int32_t free) const;
  void used_psum() { c.psum_high_water = std::max(c.psum_high_water, cfg.psum_bank_bytes() * banks()); }
  // The free size of a matmul output tile in PSUM: mapping.tile_n, or `fixed` (a schedule's own
  // tile, 0: none), or as wide as a bank and the moving array allow (at most 512). A tile the user
  // or the schedule asks for that a bank cannot hold (fp32 sums) throws InputError naming the
  // kernel, the bytes and the parameters.
  int64_t tile_free(const std::string& kernel, int64_t fixed = 0) const;

  // Instruction builders.
  void tensor_tensor(Alu alu, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b);
  // dst = (src alu0 imm0) alu1 imm1
  void tensor_scalar(const AccessPattern& dst, const AccessPattern& src, Alu alu0, double imm0, Alu alu1 = Alu::bypass, double imm1 = 0);
  // The same with both operands per partition ([P,1] SBUF values): (src alu0 op0[p]) alu1 op1[p].
  void tensor_scalar(const AccessPattern& dst, const AccessPattern& src, Alu alu0, const AccessPattern& op0, Alu alu1, const AccessPattern& op1);
  // A LayerNorm's statistics of `row` ([P, F] SBUF) into 64 bytes per partition at `small`: the
  // bn_stats records at small, mean and variance at small + 32 and + 36, rstd = 1/sqrt(var + eps)
  // at small + 40.
  void row_stats(const AccessPattern& row, int64_t small, double eps);
  // The two halves of row_stats, for a row whose columns come in chunks: bn_stats of one chunk
  // (at most 512 columns, bn_stats' limit [ISA]) into its 6-element record at `record`, then
  // bn_aggr over `chunks` consecutive records and rsqrt into small + 32, + 36, + 40 as above.
  void chunk_stats(const AccessPattern& chunk, int64_t record);
  void aggregate_stats(int32_t parts, int64_t records, int64_t chunks, int64_t small, double eps);
  void tensor_scalar_with(const AccessPattern& dst, const AccessPattern& src, Alu alu0, const AccessPattern& op0, double imm0, Alu alu1,
                          const AccessPattern& op1, double imm1);
  // dst = func(src * scale + bias); bias a [P, 1] column when given, else `imm_bias`; aux gets the row sums.
  void activation(const AccessPattern& dst, const AccessPattern& src, Func func, double scale = 1.0, const AccessPattern& bias = {},
                  double imm_bias = 0.0, const AccessPattern& aux = {});
  void copy(const AccessPattern& dst, const AccessPattern& src);
  void memset(const AccessPattern& dst, double value);
  void reduce(const AccessPattern& dst, const AccessPattern& src, Alu alu, bool negate = false);
  void matmul_step(const AccessPattern& ps, const AccessPattern& stat, const AccessPattern& mov, bool start, bool stop);
  void transpose(const AccessPattern& psum_dst, const AccessPattern& src);
  // `count` dense elements (dtype dt) at SBUF offset `off` of partition 0 copied onto every partition
  // at the same offset by the tensor engine: ones[1, P]^T x row, exact (one product by 1.0 into a
  // cleared accumulator), through PSUM banks 0 and 1 in chunks of a bank; `ones` is SBUF room for P
  // elements of dt. Instead of a stride-0 DMA of P copies, which holds in-order DMA queues for the
  // time of all of them (BERT's [768] fp32 biases and LayerNorm scales: 393 KB each).
  void replicate_row(DType dt, int64_t off, int64_t count, int64_t ones);
};

// Rows of at least this many bytes are replicated over the partitions by the tensor engine
// (Ctx::replicate_row); shorter ones by a stride-0 DMA, which is faster for them (measured over the
// shipped scenarios: the training MLPs' rows of 16-64 B up to 2.5% faster by DMA, rows of 128 B and
// more 0.5-13.5% faster by the tensor engine).
constexpr int64_t kReplicateRowBytes = 128;

int64_t ceil_div(int64_t a, int64_t b);

// Unary ops the scalar engine computes as func(in * scale + bias).
bool unary_func(const std::string& op, const graph::Node& n, Func& f);

}  // namespace tessera::neuroncore
