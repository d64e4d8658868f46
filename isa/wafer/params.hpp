#pragma once
#include "isa/params.hpp"

namespace tessera::wafer {
// Declarations and presets (wse2, wse3).
const TargetDesc& target_desc();
}  // namespace tessera::wafer
