#pragma once
// Hardware-rule checks of a NeuronCore program (docs/neuroncore-asm.md, "Hardware rules checked"):
// lane placement, partition ranges and start alignment, SBUF/PSUM/HBM bounds, tensor-engine
// shapes, operand spaces and shapes, DMA endpoints, queues, registers, semaphores and branch
// targets. Static checks only: dynamic offsets are checked for their static part, and nothing
// about ordering or timing (the model's business).
#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/isa.hpp"

namespace tessera::neuroncore {

// Throws InputError with every violation, each a diagnostic with
// where = "bundle N lane L (FILE:LINE)" and a message naming the rule; returns if there is none.
void validate(const Program& p, const CoreConfig& c);

}  // namespace tessera::neuroncore
