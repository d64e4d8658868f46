#pragma once
// Per-node cost figures for `tessera graph` and the estimators.
//
// FLOP convention (docs/graph.md): a multiply-add is 2 FLOPs. MatMul/Gemm 2*M*K*N per batch (+M*N
// for Gemm's C); Conv 2*out*(Cin/group*kernel) (+out with bias); ConvTranspose 2*in*(Cout/group*
// kernel); elementwise ops and activations 1 per output element; Softmax/LogSoftmax 5 per element
// (max, subtract, exp, sum, divide); LayerNormalization 8 per element; BatchNormalization 2 per
// element; Reduce* and pooling 1 per input element read; data movement (Reshape, Transpose, Concat,
// Gather, Slice, Cast, ...) 0.
#include <cstdint>
#include <ostream>
#include <string>

#include "mapper/graph/graph.hpp"

namespace tessera::graph {

int64_t node_flops(const Graph& g, const Node& n);
// Bytes of weight constants (initializers and what folding derived from them) read by the node.
int64_t node_param_bytes(const Graph& g, const Node& n);

struct GraphTotals {
  int64_t flops = 0;
  int64_t param_bytes = 0;
  int64_t params = 0;  // elements
};
GraphTotals totals(const Graph& g);  // saturating: a count past int64 is kCountMax (isa/checked.hpp)
// A count for people: the number, or ">9.2e18" for one that saturated.
std::string count_str(int64_t v);

// The `tessera graph` table.
void print_graph(std::ostream& os, const Graph& g);

}  // namespace tessera::graph
