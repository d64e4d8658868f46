#pragma once
// The engines behind `tessera run`, one per target kind (registered in run.cpp's dispatch).
#include "sim/run.hpp"

namespace tessera::sim {
int run_reference(const Scenario& s, const RunOptions& opt);
int run_neuroncore(const Scenario& s, const RunOptions& opt);
int run_wafer(const Scenario& s, const RunOptions& opt);
}  // namespace tessera::sim
