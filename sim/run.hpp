#pragma once
// `tessera run`: from a loaded scenario to outputs, checks and report.json.
#include <stdexcept>
#include <string>
#include <vector>

#include "isa/interrupt.hpp"
#include "sim/scenario.hpp"

namespace tessera::sim {

struct RunOptions {
  std::string out_dir;
  bool emit_program = false;  // NeuronCore: write the compiled program as program.s
  std::string resume;         // training: a checkpoint directory to continue from
  // tessera validate: every check a run makes before it simulates (model, compile, inputs, memory),
  // then return 0 without elaborating or writing anything. `checked` (optional) gets a line per
  // thing checked, e.g. "compiled 3 kernels, predicted 9.73 us".
  bool check_only = false;
  std::vector<std::string>* checked = nullptr;
};

// Records what a check-only run checked (RunOptions::checked).
void note_checked(const RunOptions& opt, const std::string& what);


// Returns the process exit code (0 ok, 1 a check failed); throws InputError for bad input.
// Outputs go to opt.out_dir all or nothing (sim/outdir.hpp): a run that throws, is interrupted or
// exits 2 leaves it as it was.
int run_scenario(const Scenario& s, const RunOptions& opt);

}  // namespace tessera::sim
