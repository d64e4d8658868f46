#pragma once
#include "isa/params.hpp"

namespace tessera::neuroncore {
// Declarations and presets (trn1 = NeuronCore-v2, trn2 = NeuronCore-v3).
const TargetDesc& target_desc();
}  // namespace tessera::neuroncore
