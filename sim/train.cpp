// Training runs (docs/training.md): the training-step graph of mapper/passes/autodiff runs every
// step on a TrainMachine (the reference executor, or the NeuronCore model with the state in HBM);
// weights and optimizer state carry over from step to step on the machine; checkpoints and
// --resume; the loss per step against an expected file and, on a simulated machine, the losses and
// final state against the reference executor run on the same inputs.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "isa/compare.hpp"
#include "isa/fileio.hpp"
#include "isa/npy.hpp"
#include "mapper/passes/autodiff.hpp"
#include "mapper/reference/executor.hpp"
#include "sim/check.hpp"
#include "sim/console.hpp"
#include "sim/outdir.hpp"
#include "sim/model.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/session.hpp"
#include "sim/train.hpp"

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

passes::TrainingSpec spec_of(const json& t, const std::string& compute) {
  passes::TrainingSpec sp;
  if (compute == "fp16") sp.compute = DType::f16;
  else if (compute == "bf16") sp.compute = DType::bf16;
  else if (compute == "cbf16") sp.compute = DType::cbf16;
  else if (compute != "fp32")
    throw InputError("/precision/compute", "training takes fp32, or fp16/bf16/cbf16 (mixed precision on fp32 master weights); not '" + compute + "'");
  if (t.contains("loss_scaling")) {
    const json& l = t["loss_scaling"];
    sp.loss_scaling = true;
    sp.init_scale = l["init_scale"].get<double>();
    sp.growth = l["growth"].get<double>();
    sp.backoff = l["backoff"].get<double>();
    sp.interval = l["interval"].get<int64_t>();
  }
  sp.loss = t["loss"].get<std::string>();
  if (t.contains("output")) sp.output = t["output"].get<std::string>();
  sp.target = t["target"].get<std::string>();
  const json& o = t["optimizer"];
  sp.optimizer = o["kind"].get<std::string>();
  sp.learning_rate = o["learning_rate"].get<double>();
  sp.momentum = o["momentum"].get<double>();
  sp.beta1 = o["beta1"].get<double>();
  sp.beta2 = o["beta2"].get<double>();
  sp.eps = o["eps"].get<double>();
  sp.weight_decay = o["weight_decay"].get<double>();
  const json& sc = o["schedule"];
  sp.schedule = sc["kind"].get<std::string>();
  sp.gamma = sc["gamma"].get<double>();
  sp.step_size = sc["step_size"].get<int64_t>();
  sp.warmup_steps = sc["warmup_steps"].get<int64_t>();
  return sp;
}

// A checkpoint: OUT/checkpoints/step_K/NAME.npy per state tensor and manifest.json (written last,
// atomically: a directory without a manifest is not a checkpoint).
void write_checkpoint(const std::string& out_dir, int64_t step, const std::map<std::string, Tensor>& state, const std::vector<std::string>& order) {
  const fs::path dir = fs::path(out_dir) / "checkpoints" / ("step_" + std::to_string(step));
  fs::create_directories(dir);
  fs::remove(dir / "manifest.json");  // an older run's: until the new one is written this is no checkpoint
  json m = {{"schema", "tessera.checkpoint/1"}, {"step", step}, {"tensors", json::object()}};
  for (const auto& name : order) {
    const std::string file = safe_file_name(name) + ".npy";
    write_npy((dir / file).string(), state.at(name));
    m["tensors"][name] = file;
  }
  write_file_atomic((dir / "manifest.json").string(), m.dump(2) + "\n");
}

// The reference executor as the machine: the state held on the host between steps.
class ReferenceTrainer : public TrainMachine {
 public:
  explicit ReferenceTrainer(const passes::TrainingGraph& tg) : tg_(tg) {}
  void set_state(const std::map<std::string, Tensor>& state) override { state_ = state; }
  std::map<std::string, Tensor> step(const std::map<std::string, Tensor>& inputs) override {
    std::map<std::string, Tensor> in = inputs;
    for (const auto& [k, v] : state_) in[k] = v;
    auto out = reference::execute(tg_.g, in);
    for (const auto& [st, nx] : tg_.state) state_[st] = out.at(nx);
    return out;
  }
  std::map<std::string, Tensor> state() override { return state_; }

 private:
  const passes::TrainingGraph& tg_;
  std::map<std::string, Tensor> state_;
};

}  // namespace

int run_training(const Scenario& s, const RunOptions& opt, const graph::Graph& g) {
  auto& con = Console::get();
  const auto t0 = std::chrono::steady_clock::now();
  const passes::TrainingSpec spec = spec_of(s.resolved["training"], s.resolved["precision"]["compute"].get<std::string>());
  const passes::TrainingGraph tg = passes::make_training_graph(g, spec);
  const StepSchedule sched = StepSchedule::from(s.resolved["run"]);
  for (const auto& w : sched.warnings) con.warn(w);
  std::vector<std::string> outs = g.outputs;
  outs.push_back("loss");
  const auto out_sizes = output_sizes(g);
  const std::vector<StepClosure> closures = parse_closures(s.resolved["step_closures"], outs, &out_sizes);
  std::vector<std::string> given = g.inputs;
  given.push_back(spec.target);
  HostMemory mem = precheck_graph_data(s, tg.g, sched.steps, true, &given);
  const StepInputs step_inputs(s, tg.g, sched.steps, &given);
  std::vector<std::string> order;
  for (const auto& [in, nx] : tg.state) order.push_back(in);

  // The state: the model's initial weights and zeroed optimizer state, or a checkpoint's.
  std::map<std::string, Tensor> state = tg.initial;
  int64_t first = 0;
  if (!opt.resume.empty()) {
    const fs::path dir(opt.resume);
    json m;
    try {
      m = json::parse(read_file((dir / "manifest.json").string()));
    } catch (const json::exception& e) {
      throw InputError(opt.resume + "/manifest.json", std::string("not a checkpoint manifest: ") + e.what(), "give a directory written by a training run");
    }
    if (!m.is_object() || m.value("schema", "") != "tessera.checkpoint/1" || !m.contains("step") || !m["step"].is_number_integer() ||
        m["step"].get<int64_t>() < 0 || !m.contains("tensors") || !m["tensors"].is_object())
      throw InputError(opt.resume + "/manifest.json", "not a tessera.checkpoint/1 manifest (schema, a step >= 0 and tensors)",
                       "give a directory written by a training run");
    for (const auto& name : order) {
      if (!m["tensors"].contains(name))
        throw InputError(opt.resume + "/manifest.json", "the checkpoint has no '" + name + "'", "resume with the scenario that wrote it");
      if (!m["tensors"][name].is_string()) throw InputError(opt.resume + "/manifest.json", "tensor '" + name + "' is not a file name");
      Tensor t = read_npy((dir / m["tensors"][name].get<std::string>()).string());
      if (t.shape() != state.at(name).shape() || t.dtype() != state.at(name).dtype())
        throw InputError(opt.resume, "'" + name + "' is " + std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ", the model's is " +
                                         std::string(dtype_name(state.at(name).dtype())) + shape_str(state.at(name).shape()));
      state[name] = std::move(t);
    }
    first = m["step"].get<int64_t>() + 1;
    if (first >= sched.steps) throw InputError(opt.resume, "the checkpoint is of step " + std::to_string(first - 1) + "; run.steps is " + std::to_string(sched.steps));
    con.info("resuming after step " + std::to_string(first - 1) + " from " + opt.resume);
  }

  // The machine; on a simulated one the reference executor runs the same steps beside it (the
  // independent check of its numerics).
  std::unique_ptr<TrainMachine> machine, ref;
  if (s.kind == "neuroncore" || s.kind == "wafer") {
    machine = s.kind == "wafer" ? make_wafer_trainer(s, g, tg, spec, opt) : make_neuroncore_trainer(s, tg, opt);
    ref = std::make_unique<ReferenceTrainer>(tg);
    ref->set_state(state);
  } else {
    machine = std::make_unique<ReferenceTrainer>(tg);
  }
  if (opt.check_only) {
    note_checked(opt, "training graph " + std::to_string(tg.g.nodes.size()) + " nodes, inputs, host memory " +
                          format_num(mem.total() / (1024.0 * 1024), "%.1f") + " MiB");
    return 0;
  }
  enter_phase("simulate");
  machine->set_state(state);
  machine->first_step = first;

  json report = new_report(s);
  report["training"] = {{"parameters", tg.params}, {"state", order}, {"loss", spec.loss}, {"optimizer", spec.optimizer}, {"first_step", first}};
  std::vector<double> losses, ref_losses;
  int64_t skipped_steps = 0;
  std::map<std::string, Tensor> outputs;
  std::vector<StepMark> marks;
  double t_sim = 0;
  for (int64_t step = first; step < sched.steps; ++step) {
    poll_interrupt();
    std::map<std::string, Tensor> in = step_inputs.at(step);
    in["step"] = Tensor::from_f32({}, {static_cast<float>(step + 1)}).cast(tg.g.value("step").dtype);
    const double scale_before = spec.loss_scaling ? machine->state_scalar("loss_scale") : 0.0;
    outputs = machine->step(in);
    const double loss = outputs.at("loss").cast(DType::f64).to_f64()[0];
    losses.push_back(loss);
    json rec = {{"step", step}, {"loss", loss}, {"learning_rate", outputs.at("learning_rate").cast(DType::f64).to_f64()[0]},
                {"activation", sched.is_activation(step)}, {"checkpoint", sched.is_checkpoint(step)}};
    if (ref) {
      const auto ro = ref->step(in);
      ref_losses.push_back(ro.at("loss").cast(DType::f64).to_f64()[0]);
      rec["reference_loss"] = ref_losses.back();
    }
    if (machine->step_seconds() > 0) {
      rec["simulated_s"] = machine->step_seconds();
      t_sim += machine->step_seconds();
    }
    if (spec.loss_scaling) {
      const bool skipped = outputs.at("skipped").cast(DType::f64).to_f64()[0] != 0;
      rec["loss_scale"] = scale_before;
      rec["next_loss_scale"] = machine->state_scalar("loss_scale");
      rec["skipped"] = skipped;
      if (skipped) {
        ++skipped_steps;
        con.info("step " + std::to_string(step) + ": gradients overflowed at loss scale " + format_num(rec["loss_scale"].get<double>(), "%.6g") + "; update skipped, scale -> " +
                 format_num(rec["next_loss_scale"].get<double>(), "%.6g"));
      }
    }
    if (sched.is_checkpoint(step)) {
      write_checkpoint(opt.out_dir, step, machine->state(), order);
      rec["checkpoint_dir"] = "checkpoints/step_" + std::to_string(step);
    }
    std::map<std::string, Tensor> values;
    for (const auto& o : outs) values[o] = outputs.at(o);
    finish_step(report, std::move(rec), closures, sched, step, values, opt.out_dir, t_sim, marks);
    if (stop_requested() && step + 1 < sched.steps) {
      report["training"]["stopped_after_step"] = step;
      con.info("a step closure stopped the run after step " + std::to_string(step) + " of " + std::to_string(sched.steps));
      break;
    }
  }
  state = machine->state();
  con.out("trained " + std::to_string(losses.size()) + " step(s) (" + spec.optimizer + ", " + spec.loss +
          (spec.compute != DType::f32 ? ", mixed " + std::string(dtype_name(spec.compute)) : std::string()) + "): loss " + format_num(losses.front(), "%.6g") + " -> " +
          format_num(losses.back(), "%.6g"));
  if (spec.loss_scaling) {
    const double final_scale = state.at("loss_scale").cast(DType::f64).to_f64()[0];
    report["training"]["skipped_steps"] = skipped_steps;
    report["training"]["final_loss_scale"] = final_scale;
    con.out("loss scaling: " + std::to_string(skipped_steps) + " step(s) skipped (gradient overflow), scale " + format_num(spec.init_scale, "%.6g") + " -> " + format_num(final_scale, "%.6g"));
  }

  // The final weights and the last step's outputs.
  enter_phase("check");
  bool all_pass = true;
  std::vector<std::string> failures;
  for (const auto& p : tg.params) write_npy((fs::path(opt.out_dir) / "params" / (safe_file_name(p) + ".npy")).string(), state.at(p));
  const json& expect = s.resolved["expect"];
  if (ref) {
    // The machine against the reference executor: every step's loss and the final state.
    const Tolerance tol = default_tolerance(s.resolved["precision"]["compute"].get<std::string>());
    const size_t n = losses.size();
    Tensor got = Tensor::from_f32({static_cast<int64_t>(n)}, std::vector<float>(losses.begin(), losses.end()));
    Tensor exp = Tensor::from_f32({static_cast<int64_t>(n)}, std::vector<float>(ref_losses.begin(), ref_losses.end()));
    const OutputCheck c = check_output("loss", got, exp, tol, "reference", json::object(), failures);
    json r = output_record("loss", "", &c.cmp, tol.rtol, tol.atol);
    r["against"] = "reference";
    report["outputs"].push_back(r);
    all_pass = all_pass && c.cmp.pass;
    con.out("  losses [" + std::to_string(n) + "] vs reference executor: max abs err " + format_num(c.cmp.max_abs_error, "%.3g") + " max rel err " +
            format_num(c.cmp.max_rel_error, "%.3g") + " " + (c.cmp.pass ? con.green("PASS") : con.red("FAIL")));
    const auto ref_state = ref->state();
    for (const auto& name : order) {
      const OutputCheck sc = check_output(name, state.at(name).cast(DType::f32), ref_state.at(name).cast(DType::f32), tol, "reference", json::object(), failures);
      json sr = output_record(name, "", &sc.cmp, tol.rtol, tol.atol);
      sr["against"] = "reference";
      sr["state"] = true;
      report["outputs"].push_back(sr);
      all_pass = all_pass && sc.cmp.pass;
      con.out("  " + name + " (final, from the machine) vs reference executor: max abs err " + format_num(sc.cmp.max_abs_error, "%.3g") + " max rel err " +
              format_num(sc.cmp.max_rel_error, "%.3g") + " " + (sc.cmp.pass ? con.green("PASS") : con.red("FAIL")));
    }
  }
  if (expect.contains("losses")) {
    const json& e = expect["losses"];
    Tensor want = read_npy(e["file"].get<std::string>());
    const auto wv = want.cast(DType::f64).to_f64();
    const size_t n = losses.size();
    if (static_cast<int64_t>(wv.size()) < first + static_cast<int64_t>(n))
      throw InputError("/expect/losses/file", "holds " + std::to_string(wv.size()) + " losses; the run has " + std::to_string(first + static_cast<int64_t>(n)) + " steps");
    Tensor got = Tensor::from_f32({static_cast<int64_t>(n)}, std::vector<float>(n));
    Tensor exp = got;
    for (size_t i = 0; i < n; ++i) {
      got.as<float>()[i] = static_cast<float>(losses[i]);
      exp.as<float>()[i] = static_cast<float>(wv[static_cast<size_t>(first) + i]);
    }
    const OutputCheck c = check_output("loss", got, exp, {e["rtol"].get<double>(), e["atol"].get<double>()}, "file", expect, failures);
    json r = output_record("loss", "", &c.cmp, c.tol.rtol, c.tol.atol);
    r["against"] = "file";
    report["outputs"].push_back(r);
    all_pass = all_pass && c.cmp.pass;
    con.out("  losses [" + std::to_string(n) + "] vs file: max abs err " + format_num(c.cmp.max_abs_error, "%.3g") + " max rel err " +
            format_num(c.cmp.max_rel_error, "%.3g") + " " + (c.cmp.pass ? con.green("PASS") : con.red("FAIL")));
  }
  for (const auto& name : g.outputs) {
    const std::string file = s.resolved["outputs"]["dir"].get<std::string>() + "/" + safe_file_name(name) + ".npy";
    if (s.resolved["outputs"]["save"].get<bool>()) write_npy((fs::path(opt.out_dir) / file).string(), outputs.at(name));
    report["outputs"].push_back(output_record(name, file, nullptr, 0, 0));
  }
  if (t_sim > 0) {
    // Per step, like the prediction (the compiled step); the whole run as simulated_total_s.
    report["latency"]["simulated_s"] = t_sim / static_cast<double>(losses.size());
    report["latency"]["simulated_total_s"] = t_sim;
  } else {
    report["latency"]["note"] = "the reference target has no timing model";
  }
  machine->finish(report, marks);
  if (report["latency"].value("error_pct", json()).is_number()) check_latency_error(expect, report["latency"]["error_pct"].get<double>(), report, all_pass, failures);
  for (const auto& f : failures) report["checks"].push_back({{"check", "losses"}, {"pass", false}, {"detail", f}});
  report["pass"] = all_pass;
  poll_interrupt();
  write_report(opt.out_dir, report, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  con.out("report: " + shown_path((fs::path(opt.out_dir) / "report.json").string()));
  if (!all_pass) {
    for (const auto& f : failures) con.error("check failed: " + f);
    return 1;
  }
  return 0;
}

}  // namespace tessera::sim
