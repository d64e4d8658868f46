#pragma once
#include <ostream>
#include <string>

#include "isa/params.hpp"

namespace tessera::sim {
// `tessera params`: the targets and their presets.
void print_targets(std::ostream& os);
// `tessera params TARGET|PRESET`: one row per parameter. Throws InputError for an unknown name.
void print_params(std::ostream& os, const std::string& target_or_preset);
// The parameters `tessera params NAME` lists: a target's declared defaults (its first preset's
// values) or a preset's; InputError for an unknown name.
ParamSet params_of(const std::string& target_or_preset);
}  // namespace tessera::sim
