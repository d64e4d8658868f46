#pragma once
// The compiler's estimate (mapper/neuroncore/estimate.cpp): predicted time per kernel from the
// scheduled program, the cost table (isa/neuroncore/cost_table.hpp) and a bandwidth model, without
// the simulator.
//
// The bundles are replayed in order on the compiler's timing model of the core (in-order units,
// operands ready by exact footprint overlap, the hand-off gap on a result, DMA queues and engines
// at the cost table's transfer cost, HBM bandwidth shared), so each kernel's predicted end takes
// in the overlap with its neighbours and the waits in queues; a kernel's time runs from the
// previous kernel's end to its own, as the simulated kernel table measures it. Per kernel the
// engines' busy times give the compile report's breakdown, utilisation and bound.
#include "mapper/neuroncore/compile.hpp"
#include "mapper/neuroncore/emit.hpp"

namespace tessera::neuroncore {
void estimate_kernels(Compiled& c, const CoreConfig& cfg);
}
