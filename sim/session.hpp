#pragma once
// Multi-step runs: the step schedule of Cerebras' executor, per-step inputs and step closures
// (semantics: shared/reference/wafer.md "Step closures and executor semantics"; docs/session.md).
//
// The program is compiled once and the elaborated machine runs every step; after each step the
// engine fetches the graph outputs from the simulated machine's memory and hands them to the
// closures. Closures run on activation steps only (checkpoint closures on checkpoint steps); their
// host time does not advance simulated time.
#include <cstdint>
#include <map>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"
#include "sim/trace_neuroncore.hpp"

namespace tessera::sim {

// run.steps, run.checkpoint_steps, run.activation_steps as cerebras.pytorch's DataExecutor reads
// them: checkpoint_steps = k > 0 checkpoints 0-indexed steps k-1, 2k-1, ... and the last step (0:
// none); activation_steps (default 1) is capped at the number of steps and reduced to its gcd with
// every checkpoint step + 1 (a warning says so); a step is an activation step when
// (step + 1) % activation_steps == 0 or it is the last.
struct StepSchedule {
  int64_t steps = 1, checkpoint_steps = 0, activation_steps = 1;
  std::vector<std::string> warnings;
  static StepSchedule make(int64_t steps, int64_t checkpoint_steps, int64_t activation_steps);
  static StepSchedule from(const nlohmann::json& run);
  bool is_checkpoint(int64_t step) const;
  bool is_activation(int64_t step) const;
};

// A step closure written in C++ (Session::add_step_closure): called at the end of each step it
// runs on with the step index and a read-only view of the tensors it named (graph outputs or
// "step"), as the machine holds them. It runs on the host: simulated time does not advance.
using StepClosureFn = std::function<void(int64_t step, const std::map<std::string, Tensor>& tensors)>;

// One step closure of the scenario (/step_closures/N), or of the C++ API.
struct StepClosure {
  std::string kind;                  // log, dump, assert, callback (C++)
  StepClosureFn fn;                  // callback
  std::string name;                  // label (default: kind and tensors / the condition)
  std::vector<std::string> tensors;  // log, dump: graph outputs, or "step"
  std::string condition;             // assert
  bool on_checkpoint = false;        // checkpoint closure (else: activation steps)
  std::string where;                 // "/step_closures/N"
  // assert, parsed: [reduce(]tensor[)] op number, or finite(tensor)
  std::string reduce, tensor, op;
  double value = 0;
};

// Parses and checks /step_closures against the graph's outputs (every mistake at once, with
// JSON pointers).
// `sizes` (optional): elements per output, so that an assert without a reduction on a many-valued
// tensor is reported here rather than after a step has run.
std::vector<StepClosure> parse_closures(const nlohmann::json& closures, const std::vector<std::string>& outputs,
                                        const std::map<std::string, int64_t>* sizes = nullptr);
// C++ step closures (Session::add_step_closure) that parse_closures appends to the scenario's
// (with their names checked against the outputs like the scenario's); empty outside a Session run.
std::vector<StepClosure>& cpp_step_closures();

// A step closure (C++ or Python) may ask a training run to stop after the current step: the run
// finishes that step, checks what ran (losses against the reference executor and expect.losses,
// the final state) and writes its report with training.stopped_after_step. Other runs go on to
// their last step and say so. Reset at the start of every run.
void request_stop();
bool stop_requested();
void reset_stop_request();
// After the step loop of a run that does not stop early: a warning when a closure asked it to.
void warn_if_stop_ignored(int64_t steps);

// The C++ API of a run: the scenario loaded like `tessera run` does, plus step closures in C++,
// e.g.
//   sim::Session s("scenarios/neuroncore/train/train_mlp_sgd.json", {.out_dir = "out/x"});
//   s.add_step_closure("loss curve", {"loss"}, [&](int64_t step, const auto& t) { curve.push_back(t.at("loss")); });
//   int code = s.run();  // 0 ok, 1 a check failed; bad input throws InputError
// Closures run on activation steps (on_checkpoint: on checkpoint steps), as the scenario's do.
class Session {
 public:
  Session(const std::string& scenario, RunOptions opt, const std::vector<std::string>& sets = {});
  Session(Scenario scenario, RunOptions opt);  // an already loaded scenario (load_scenario_json)
  void add_step_closure(std::string name, std::vector<std::string> tensors, StepClosureFn fn, bool on_checkpoint = false);
  int run();
  const Scenario& scenario() const { return s_; }

 private:
  Scenario s_;
  RunOptions opt_;
  std::vector<StepClosure> closures_;
};

// Elements of each graph output (for parse_closures).
std::map<std::string, int64_t> output_sizes(const graph::Graph& g);

// What the closures of `step` did (their records for the report); the console gets the logs.
// Throws CheckFailed naming the step and closure when an assert fails. `dump` writes
// DIR/steps/<step>/<tensor>.npy atomically.
nlohmann::json run_closures(const std::vector<StepClosure>& closures, const StepSchedule& sched, int64_t step,
                            const std::map<std::string, Tensor>& values, const std::string& out_dir);

// The end of one step: runs its closures (run_closures), appends `rec` with their records to
// report["steps"] and adds an instant per closure that ran, at `t_end_s`, to `marks` (the trace's
// steps track). A failed assert throws CheckFailed: the run stops with exit 1 and writes no report.
void finish_step(nlohmann::json& report, nlohmann::json rec, const std::vector<StepClosure>& closures, const StepSchedule& sched, int64_t step,
                 const std::map<std::string, Tensor>& values, const std::string& out_dir, double t_end_s, std::vector<StepMark>& marks);

// Per-step inputs: a .npy whose shape is [steps, ...the input's shape] gives step k its slice k; one
// of the input's own shape is the same every step; `random` inputs draw step k with seed + k.
class StepInputs {
 public:
  // `only` (optional): the graph inputs the scenario gives (others -- a training step's weights and
  // state -- come from elsewhere).
  StepInputs(const Scenario& s, const graph::Graph& g, int64_t steps, const std::vector<std::string>* only = nullptr);
  std::map<std::string, Tensor> at(int64_t step) const;

 private:
  struct In {
    Tensor data;
    bool per_step = false;     // data is [steps, ...]
    bool random = false;
    uint64_t seed = 0;
    bool normal = true;
    double scale = 1;
    DType dtype = DType::f32;
    Shape shape;
  };
  std::map<std::string, In> in_;
};

}  // namespace tessera::sim
