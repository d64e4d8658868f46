#pragma once
// Training runs (docs/training.md): the training-step graph of mapper/passes/autodiff runs every
// step on a machine that holds the state (weights, optimizer state) from step to step -- the
// reference executor, or the compiled program on the NeuronCore model (weights and optimizer state
// in HBM, updated in place by the core).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mapper/graph/graph.hpp"
#include "mapper/passes/autodiff.hpp"
#include "sim/run.hpp"
#include "sim/trace_neuroncore.hpp"

namespace tessera::sim {

// Where the training step runs.
class TrainMachine {
 public:
  virtual ~TrainMachine() = default;
  int64_t first_step = 0;  // the scenario's index of the first step run (after --resume: K + 1)
  // Puts the state (every TrainingGraph::state input) on the machine: before the first step, or a
  // checkpoint's on resume. Never called between steps.
  virtual void set_state(const std::map<std::string, Tensor>& state) = 0;
  // One step: the step's data inputs and "step"; returns the graph's outputs (loss, forward
  // outputs, learning_rate, ...) as the machine holds them. The state advances on the machine.
  virtual std::map<std::string, Tensor> step(const std::map<std::string, Tensor>& inputs) = 0;
  // The state as the machine holds it now (read from its memory).
  virtual std::map<std::string, Tensor> state() = 0;
  // One one-value state tensor (the loss scale), read alone.
  virtual double state_scalar(const std::string& name) { return state().at(name).cast(DType::f64).to_f64()[0]; }
  // Simulated seconds of the last step (0: no timing model).
  virtual double step_seconds() const { return 0; }
  // Machine figures for the report and console after the last step, and its trace (when the
  // scenario has /trace) with the step closures that ran as instants.
  virtual void finish(nlohmann::json& /*report*/, const std::vector<StepMark>& /*closures*/) {}
};

// The training step on the NeuronCore model (train_neuroncore.cpp): compiled once, the state in HBM.
std::unique_ptr<TrainMachine> make_neuroncore_trainer(const Scenario& s, const passes::TrainingGraph& tg, const RunOptions& opt);

// The training step on the wafer (train_wafer.cpp): the forward graph compiled with its backward
// pass in weight-streaming mode; weights in MemoryX, biases in PE SRAM.
std::unique_ptr<TrainMachine> make_wafer_trainer(const Scenario& s, const graph::Graph& forward, const passes::TrainingGraph& tg,
                                                 const passes::TrainingSpec& spec, const RunOptions& opt);

// `tessera run` of a scenario with /training (reference or neuroncore target).
int run_training(const Scenario& s, const RunOptions& opt, const graph::Graph& forward);
}  // namespace tessera::sim
