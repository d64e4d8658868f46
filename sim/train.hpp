#pragma once
// Training runs (docs/training.md). This build trains on the reference target.
#include "mapper/graph/graph.hpp"
#include "sim/run.hpp"

namespace tessera::sim {
int run_reference_training(const Scenario& s, const RunOptions& opt, const graph::Graph& forward);
}
