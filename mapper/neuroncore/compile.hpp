#pragma once
// The NeuronCore compiler: graph IR -> VLIW program, plus the analytical estimate.
//
// Activations live in HBM between kernels; each kernel streams its operands into SBUF through the
// DMA lanes (weights tile by tile, multi-buffered so transfers overlap compute), computes, and
// streams its result back. 2-D tensors are kept in one of two layouts: row-major as in the graph
// ("N"), or transposed ("T", the contraction dimension first) -- a matmul's operands must have the
// contraction dimension on the partitions, and a matmul can write its result either way, so the
// layout pass chooses per tensor what its consumers need and inserts transposes only where the
// choice cannot be made (constants are transposed at compile time, for free).
#include <map>
#include <string>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/isa.hpp"
#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"

namespace tessera::neuroncore {

// DMA queues the compiler uses: streamed tiles on queues [0, kStreamQueues), bulk transfers (operand
// blocks, stores) on the next kBulkQueues, so a long store never blocks a tile the tensor engine
// waits for (queues are in order).
inline constexpr int kStreamQueues = 12;
inline constexpr int kBulkQueues = 4;

// Loop nests for a matmul, after the NKI matmul tutorial's optimisation steps (nki_matmul_tiled_,
// _hoist_load_, _block_free_dimension_, _fully_optimized_). `automatic` is the compiler's own
// choice: the moving operand's column block resident, stationary tiles streamed.
enum class MatmulSchedule { automatic, tiled, hoisted, blocked_mn, blocked_mnk };

struct MappingOptions {
  DType compute = DType::bf16;   // matmul operand and activation dtype (accumulation is fp32)
  int64_t tile_m = 0;            // rows of a matmul output tile on the partitions (0: automatic)
  int64_t tile_n = 0;            // free size of a matmul output tile (0: automatic, <= 512)
  int64_t buffers = 0;           // buffers per streamed operand (0: automatic)
  MatmulSchedule matmul_schedule = MatmulSchedule::automatic;
  // Tiles per block (the tutorial's TILES_IN_BLOCK_M/N/K) for the blocked schedules; 0: the
  // tutorial's values (blocked_mn 2x2, blocked_mnk 16x2x8).
  int64_t block_m = 0, block_n = 0, block_k = 0;
  // State updated in place (training): (input S, output holding S's next value). The output is
  // stored where S is, so the next step reads it without a host round trip; the kernel writing it
  // runs after every kernel that reads S. Needs compute fp32 (S and its next value share a dtype).
  std::vector<std::pair<std::string, std::string>> in_place;
};

// How a graph input or output sits in HBM.
struct IoBinding {
  std::string name;              // graph value
  std::string hbm;               // Program::hbm tensor
  bool transposed = false;       // 2-D tensor stored as its transpose
  // 4-D [N, C, H, W] activations of convolutions are stored channel-major [C, N, H+2p, W+2p] with
  // a zero border of `pad` (convolution padding needs no bounds checks).
  bool channel_major = false;
  int64_t pad = 0;
};

struct KernelEstimate {
  std::string name, op;
  double seconds = 0;            // predicted
  double flops = 0, bytes = 0;   // moved between HBM and SBUF
  double tensor_utilisation = 0; // predicted tensor-engine busy fraction of the kernel time
  std::string bound;             // "compute" or "memory"
  // Predicted busy seconds per engine, for the compile report.
  double tensor_s = 0, vector_s = 0, scalar_s = 0, gpsimd_s = 0, dma_s = 0, hbm_s = 0;
};

struct Compiled {
  Program program;
  std::vector<IoBinding> inputs, outputs;
  std::vector<std::pair<std::string, Tensor>> hbm_init;  // constants to preload (HBM tensor name, data)
  std::vector<KernelEstimate> kernels;                   // one per Program::kernels entry
  std::vector<int64_t> stream_buffers;                   // per kernel: buffers of its streamed tiles (DMAs in flight)
  std::vector<std::pair<int64_t, int64_t>> pieces;        // per kernel: independent pieces (heads) and how many overlap
  // Per kernel: with a single-buffered operand, the fraction of a step's compute done before the
  // step's first buffer is released for the next step's loads (0: loads overlap compute fully).
  std::vector<double> serial_fraction;
  double predicted_s = 0;
  int64_t sbuf_high_water = 0;   // bytes per partition
  int64_t psum_high_water = 0;
  int64_t hbm_bytes = 0;
};

// Throws InputError naming the node for an op or shape the compiler does not handle, an invalid
// mapping option (with the reason), or an SBUF overflow (kernel and bytes).
Compiled compile(const graph::Graph& g, const CoreConfig& cfg, const MappingOptions& opt);

// The compile_report.txt table.
std::string compile_report(const Compiled& c, const CoreConfig& cfg);

}  // namespace tessera::neuroncore
