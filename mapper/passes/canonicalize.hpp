#pragma once
// The canonical graph (docs/canonical-graph.md): after import, every target
// lowers one graph whose ops are in one form, whatever opset and exporter options wrote the model.
//
//   normalize_opset   forms of opsets 7-16 rewritten to opset 17's (axes and split sizes as inputs,
//                     Softmax's 2-D coercion before opset 13 as Reshape + Softmax + Reshape, Clip,
//                     Pad and Slice attributes as inputs); the graph's opset becomes 17
//   simplify          Identity and inference Dropout removed; Flatten, Squeeze and Unsqueeze as
//                     Reshape to the inferred shape; Split as Slices; a Gather of constant
//                     consecutive indices as Slice (+ Reshape); variadic Sum/Mean/Max/Min as binary
//                     ops; Gemm as MatMul (Transpose for transA/transB, Mul for alpha, Add of C *
//                     beta); a Cast or Expand to what the value already is removed
//   unroll_recurrent  RNN, GRU and LSTM with a static sequence length as the ops of each step: one
//                     input projection, then per step H R^T and the gates (ONNX semantics)
//   fold_batchnorm    inference BatchNormalization folded into the convolution before it (constant
//                     weights), otherwise rewritten as Mul and Add of per-channel constants; kept
//                     when it trains (training_mode) or its statistics are not constants
//   fuse_decompositions  the exporters' decompositions recognised by what they compute: elementwise
//                     regions of one input are probed on the reference executor and replaced by
//                     Gelu (erf or tanh form), Swish (SiLU), HardSwish, Mish or Softplus when they
//                     compute it; LayerNorm and RMSNorm by their structure (ReduceMean over the
//                     last axes, the variance, eps, scale and bias as constants)
// Between passes, shapes are inferred, constants folded (Shape, Gather/Slice on shapes,
// ConstantOfShape, Range, Expand, Concat/Unsqueeze of constants, transposes of weights) and dead
// nodes removed. No pass changes what the graph computes: tests run the zoo through each pass and
// compare the reference executor's outputs before and after.
#include <string>
#include <vector>

#include "mapper/graph/graph.hpp"

namespace tessera::passes {

struct CanonicalPass {
  const char* name;
  const char* what;
  bool (*run)(graph::Graph&);  // returns whether it changed the graph
};
// The passes in the order canonicalize runs them.
const std::vector<CanonicalPass>& canonical_passes();

// prepare(g), then every pass (each followed by folding and dead-node removal). Returns the names of
// the passes that changed the graph. `unroll`: false keeps RNN, GRU and LSTM nodes as they are (the
// wafer compiler maps a stack of them as one kernel per layer and step: docs/wafer-compiler.md
// "Recurrent layers"); the other passes still run.
std::vector<std::string> canonicalize(graph::Graph& g, bool unroll = true);

bool normalize_opset(graph::Graph& g);
bool simplify(graph::Graph& g);
bool unroll_recurrent(graph::Graph& g);
bool fold_batchnorm(graph::Graph& g);
bool fuse_decompositions(graph::Graph& g);

// Ops the canonical graph may contain that ONNX opset 17 does not define (the reference executor
// runs them; docs/canonical-graph.md): RMSNormalization (ONNX opset 23's semantics), Swish
// (x * sigmoid(alpha x), ONNX opset 24), and Gelu's `approximate` attribute (opset 20).

}  // namespace tessera::passes
