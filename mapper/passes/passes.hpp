#pragma once
// Graph passes. None changes what the graph computes.
//   infer_and_fold: one pass in topological order. A node whose inputs are all constants is
//     executed by the reference executor and replaced by its results (constant folding, which
//     removes the Shape/Gather/Slice/Concat/Reshape chains PyTorch emits for static shapes); Shape
//     of a value with a known shape folds too. Every other node gets its outputs' dtype and shape.
//   remove_dead: drops nodes no graph output depends on (Boost breadth-first search on the
//     reversed graph) and values nobody uses.
//   prepare: verify, infer_and_fold, remove_dead, verify.
#include <string>
#include <vector>

#include "mapper/graph/graph.hpp"

namespace tessera::passes {

void infer_and_fold(graph::Graph& g);
// Which inputs of `op` decide its outputs' shapes (Reshape's shape, Tile's repeats, Resize's scales
// and sizes, NonZero's input, ...). infer_and_fold refuses a node whose such input is not a constant.
std::vector<size_t> shape_inputs(const std::string& op, int opset);
void remove_dead(graph::Graph& g);
// `host_bytes` (0: no limit): infer_and_fold learns the shapes of ops without a shape rule by
// running them on zeros of their input shapes; a node whose zeros would take more host memory than
// this is refused (InputError naming the node and run.host_memory) instead of allocated. Every value
// shape must count its elements in int64.
void prepare(graph::Graph& g, int64_t host_bytes = 0);
// The same graph for `b` samples: every input's first dimension (the batch, the same in each) and
// the Reshape targets that start with it (x.view(B, ...) exported with fixed shapes) set to b, the
// shapes inferred again. Every output must have the samples along its first dimension. For the
// wafer's micro-batches; an InputError says why a graph does not split.
void with_batch(graph::Graph& g, int64_t b);

// The canonical graph the compilers lower (canonicalize, its passes): mapper/passes/canonicalize.hpp.

}  // namespace tessera::passes
