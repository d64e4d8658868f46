#pragma once
// The compiler's analytical estimate (mapper/neuroncore/estimate): predicted time per kernel from
// the cost table (isa/neuroncore/cost_table.hpp) and a bandwidth model, without the simulator.
//
// Per kernel: each engine's busy time is the sum of its instructions' cost-table cycles over its
// clock; each DMA engine's time is its transfers at the engine bandwidth with the per-chunk
// overhead; HBM's time is the bytes at HBM bandwidth. Engines overlap (the program is
// multi-buffered), so the kernel takes the longest of these plus a prologue (its first
// transfer) and an epilogue (the last tile's evacuation and store), which cannot overlap.
#include "mapper/neuroncore/compile.hpp"
#include "mapper/neuroncore/emit.hpp"

namespace tessera::neuroncore {
void estimate_kernels(Compiled& c, const CoreConfig& cfg);
}
