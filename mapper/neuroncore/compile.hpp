#pragma once
// The NeuronCore compiler: canonical graph (mapper/passes/canonicalize.hpp) -> VLIW program, plus the
// analytical estimate. docs/neuroncore-compiler.md describes it; the pipeline, one folder per step:
//
//   storage (tensors.cpp)   every value gets an HBM tensor or is a view of one: Transpose, Slice,
//                           Reshape (where strides allow), Expand move no data; a graph input read
//                           only as a matmul's left operand is placed transposed by the host
//   lowering (lower.cpp)    op by op, one kernel family each (kernels/): matmul (any rank, broadcast
//                           batch dims, operands in any strides), convolution (1-D/2-D, any stride,
//                           dilation, pads, groups), pooling, elementwise with numpy broadcasting,
//                           reductions, softmax, normalisations, data movement (copies, concat, pad,
//                           gather); fusion of a scale, a bias, an activation and a residual into a
//                           matmul's or convolution's evacuation is an optimisation on top. A kernel
//                           that cannot be planned returns a Status whose reason names the node
//   emission (emit.cpp)     instructions built directly (isa/neuroncore Instr), packed into bundles by
//                           a list scheduler
//   estimate (estimate.cpp) the predicted time per kernel: the bundles replayed on the compiler's
//                           timing model of the core (with overlaps between kernels and queue waits)
//
// Activations live in HBM between kernels; each kernel streams its operands into SBUF through the
// DMA lanes, computes, and streams its result back.
#include <string>
#include <utility>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/isa.hpp"
#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"
#include "mapper/neuroncore/options.hpp"

namespace tessera::neuroncore {

// How a graph input or output sits in HBM: element idx of the value is at element
// offset + sum(idx[i] * strides[i]) of the HBM tensor (which has the dtype the host converts to).
struct IoBinding {
  std::string name;              // graph value
  std::string hbm;               // Program::hbm tensor
  int64_t offset = 0;            // elements
  std::vector<int64_t> strides;  // elements, one per dimension of the value's shape
};

struct KernelEstimate {
  std::string name, op;
  double seconds = 0;            // predicted
  double flops = 0, bytes = 0;   // moved between HBM and SBUF
  double tensor_utilisation = 0; // predicted tensor-engine busy fraction of the kernel time
  std::string bound;             // "compute" or "memory"
  // Predicted busy seconds per engine, for the compile report.
  double tensor_s = 0, vector_s = 0, scalar_s = 0, gpsimd_s = 0, dma_s = 0, hbm_s = 0;
  double own_dma_s = 0;          // dma_s without the prefetch queue's transfers (lower.cpp plans those; a kernel's own
                                 // remainder is on that queue too: counting it here made the plans worse, 115.8 -> 121.5 us)
};

struct Compiled {
  Program program;
  std::vector<IoBinding> inputs, outputs;
  std::vector<std::pair<std::string, Tensor>> hbm_init;  // constants to preload (HBM tensor name, data)
  std::vector<KernelEstimate> kernels;                   // one per Program::kernels entry
  std::vector<std::string> notes;                        // decisions worth telling the user (compile_report.txt)
  double predicted_s = 0;
  int64_t sbuf_high_water = 0;   // bytes per partition
  int64_t psum_high_water = 0;
  int64_t hbm_bytes = 0;
  int64_t attention_choices = 0;  // fused attention chains either kernel could take (MappingOptions::attention_kernel)
};

// Compiles a canonical graph (the caller runs passes::canonicalize). Throws InputError naming the
// node for an op or shape the compiler does not handle (with the reason), an invalid mapping
// option, or an SBUF overflow (kernel and bytes).
Compiled compile(const graph::Graph& g, const CoreConfig& cfg, const MappingOptions& opt);

// The compile_report.txt table.
std::string compile_report(const Compiled& c, const CoreConfig& cfg);

}  // namespace tessera::neuroncore
