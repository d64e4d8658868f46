#pragma once
// `tessera run`: from a loaded scenario to outputs, checks and report.json.
#include <stdexcept>
#include <string>

#include "sim/scenario.hpp"

namespace tessera::sim {

struct RunOptions {
  std::string out_dir;
  bool emit_program = false;  // NeuronCore: write the compiled program as program.s
  std::string resume;         // training: a checkpoint directory to continue from
};

// Thrown from long loops after SIGINT; nothing is written after it.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};
// Installs the SIGINT handler (idempotent); throw_if_interrupted() polls its flag.
void install_interrupt_handler();
void throw_if_interrupted();
bool interrupted();  // the flag itself (for models that poll it while they run)

// Returns the process exit code (0 ok, 1 a check failed); throws InputError for bad input.
int run_scenario(const Scenario& s, const RunOptions& opt);

}  // namespace tessera::sim
