#pragma once
// The NeuronCore parameters of a preset with its defaults, for tests and benchmarks that build
// programs without a scenario.
#include "isa/neuroncore/cost_table.hpp"
#include "isa/params.hpp"

namespace tessera::neuroncore {

inline CoreConfig preset_config(const char* preset = "trn1") {
  DiagnosticList d;
  const TargetDesc* t = target_of_preset(preset);
  return CoreConfig::from(ParamSet::resolve(*t, *t->find_preset(preset), {}, d));
}

}  // namespace tessera::neuroncore
