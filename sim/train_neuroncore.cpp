// Training on the NeuronCore model (docs/training.md): the training-step graph is compiled once
// with its state (weights, optimizer state) updated in place in HBM; the core is elaborated once
// and runs the program every step. The host writes only the step's data (x, target, step) before a
// step and reads the outputs after it; the state is written once (initial values or a checkpoint)
// and read back only for checkpoints and at the end.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "isa/fileio.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/validate.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "models/common/clock.hpp"
#include "sim/console.hpp"
#include "sim/run_neuroncore.hpp"
#include "sim/train.hpp"

namespace tessera::sim {

using json = nlohmann::json;
using namespace tessera::neuroncore;

namespace {

class NeuronCoreTrainer : public TrainMachine {
 public:
  NeuronCoreTrainer(const Scenario& s, const passes::TrainingGraph& tg, const RunOptions& opt) : tg_(tg), cfg_(CoreConfig::from(s.params)) {
    auto& con = Console::get();
    if (!s.resolved["run"]["numerics"].get<bool>())
      throw InputError("/run/numerics", "training needs values (the loss, the updated weights); run.numerics is false", "remove --no-numerics");
    MappingOptions mo = nc_mapping_options(s);
    mo.in_place = tg.state;
    graph::Graph cg = tg.g;
    passes::canonicalize(cg);
    const auto c0 = std::chrono::steady_clock::now();
    enter_phase("compile");
    compiled_ = compile(cg, cfg_, mo);
    compile_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    try {
      validate(compiled_.program, cfg_);
    } catch (const InputError& e) {
      throw std::runtime_error(std::string("the compiler produced an invalid program: ") + e.what());
    }
    const Program& prog = compiled_.program;
    con.out(con.bold("predicted") + " " + format_num(compiled_.predicted_s * 1e6, "%.3f") + " us per training step (compiled " +
            count_of(static_cast<int64_t>(prog.kernels.size()), "kernel") + ", " + std::to_string(prog.instrs.size()) + " instructions in " +
            std::to_string(prog.bundles.size()) + " bundles, " + format_num(compile_s_ * 1e3, "%.1f") + " ms)");
    if (opt.check_only) {
      note_checked(opt, "compiled " + count_of(static_cast<int64_t>(prog.kernels.size()), "kernel") + ", predicted " + format_num(compiled_.predicted_s * 1e6, "%.3f") +
                            " us per training step");
      return;  // nothing elaborated: run_training returns before a step
    }
    write_file_atomic((std::filesystem::path(opt.out_dir) / "compile_report.txt").string(), compile_report(compiled_, cfg_));
    if (opt.emit_program) write_file_atomic((std::filesystem::path(opt.out_dir) / "program.s").string(), disassemble(prog));
    for (const auto& [in, nx] : tg.state) state_names_.insert(in);
    if (trace_wanted(s)) trace_cfg_ = s.resolved["trace"];
    out_dir_ = opt.out_dir;

    models::set_fs_resolution();
    CoreOptions copt;
    copt.numerics = true;
    copt.max_time = static_cast<models::Femtos>(s.resolved["run"]["max_time"].get<double>() * 1e15);
    core_ = std::make_unique<NeuronCore>("core", cfg_, copt);
    for (const auto& [name, data] : compiled_.hbm_init) {
      const HbmTensor* t = prog.find_hbm(name);
      core_->memory().hbm_write(t->offset, data.data(), data.nbytes());
    }
    install_interrupt_handlers();
  }

  void set_state(const std::map<std::string, Tensor>& state) override {
    for (const auto& b : compiled_.inputs)
      if (state_names_.count(b.name)) nc_write_value(*core_, hbm(b), state.at(b.name), b);
  }

  std::map<std::string, Tensor> step(const std::map<std::string, Tensor>& inputs) override {
    for (const auto& b : compiled_.inputs)
      if (!state_names_.count(b.name)) nc_write_value(*core_, hbm(b), inputs.at(b.name), b);
    core_->load(compiled_.program);
    run_systemc_sliced(compiled_.predicted_s);
    if (!core_->finished()) throw std::runtime_error("the NeuronCore did not finish a training step (SystemC ran out of events)");
    if (core_->error()) throw std::runtime_error("training step " + std::to_string(steps_) + ": " + *core_->error());
    const CoreStats st = core_->stats();
    last_s_ = static_cast<double>(st.end_time - core_->start_time()) / 1e15;
    if (steps_++ == 0) {
      first_ = st;
      origin_ = core_->start_time();
    }
    const double t0 = static_cast<double>(core_->start_time() - origin_) / 1e15;
    spans_.push_back({"step " + std::to_string(first_step + steps_ - 1), t0, t0 + last_s_});
    add_phases(t0);
    total_s_ += last_s_;
    std::map<std::string, Tensor> out;
    for (const auto& b : compiled_.outputs)
      if (!b.name.starts_with("next:")) out[b.name] = nc_read_value(*core_, hbm(b), b, tg_.g.value(b.name).shape);
    return out;
  }

  std::map<std::string, Tensor> state() override {
    std::map<std::string, Tensor> st;
    for (const auto& b : compiled_.inputs)
      if (state_names_.count(b.name)) st[b.name] = nc_read_value(*core_, hbm(b), b, tg_.g.value(b.name).shape).cast(tg_.initial.at(b.name).dtype());
    return st;
  }

  double state_scalar(const std::string& name) override {
    for (const auto& b : compiled_.inputs)
      if (b.name == name) return nc_read_value(*core_, hbm(b), b, tg_.g.value(b.name).shape).cast(DType::f64).to_f64()[0];
    throw std::logic_error("no state tensor '" + name + "'");
  }

  double step_seconds() const override { return last_s_; }

  void finish(json& report, const std::vector<StepMark>& closures) override {
    auto& con = Console::get();
    const double per_step = steps_ ? total_s_ / static_cast<double>(steps_) : 0.0;
    const double err = per_step > 0 ? (compiled_.predicted_s - per_step) / per_step * 100 : 0.0;
    report["latency"]["predicted_s"] = compiled_.predicted_s;
    report["latency"]["error_pct"] = err;
    report["compile"] = {{"kernels", compiled_.kernels.size()},
                         {"instructions", compiled_.program.instrs.size()},
                         {"bundles", compiled_.program.bundles.size()},
                         {"sbuf_high_water_bytes_per_partition", compiled_.sbuf_high_water},
                         {"hbm_bytes", compiled_.hbm_bytes},
                         {"in_place_state", tg_.state.size()}};
    report["stats"] = {{"bundles_per_step", first_.bundles}, {"hbm_read_bytes_first_step", first_.hbm_read_bytes}, {"hbm_write_bytes_first_step", first_.hbm_write_bytes}};
    nc_kernel_table(compiled_, compiled_.program, *core_, report);  // the last step's
    char line[200];
    std::snprintf(line, sizeof line, "%s %.3f us per step predicted, %.3f us simulated (%+.1f%%), %.3f us for %lld step(s)",
                  con.bold("training step").c_str(), compiled_.predicted_s * 1e6, per_step * 1e6, err, total_s_ * 1e6, static_cast<long long>(steps_));
    con.out(line);
    if (trace_cfg_.is_object()) {
      std::vector<PredictedKernel> predicted;
      double t = 0;
      for (const auto& k : compiled_.kernels) {
        predicted.push_back({k.name, t, t + k.seconds});
        t += k.seconds;
      }
      con.out(write_neuroncore_trace(trace_cfg_, compiled_.program, *core_, predicted, out_dir_, spans_, closures, static_cast<int64_t>(origin_), phases_));
      report["trace"] = {{"file", trace_cfg_["file"]}};
    }
  }

 private:
  const HbmTensor& hbm(const IoBinding& b) const { return *compiled_.program.find_hbm(b.hbm); }

  // The step's phases (forward, loss, backward, optimizer) as spans of its kernels: a kernel runs
  // from the previous kernel's end to its own last instruction's; a transposed copy belongs to
  // the phase of the kernel it is made for (the next one); consecutive kernels of a phase merge.
  void add_phases(double t0) {
    const Program& prog = compiled_.program;
    const size_t nk = prog.kernels.size();
    if (kernel_phase_.empty()) {
      kernel_phase_.resize(nk);
      std::string next = "optimizer";
      // A kernel named after a node canonicalization made (fused "X+layernorm", split "X/1")
      // belongs to the phase of the node it came from: its name cut back at '+' or '/'.
      auto phase_of = [&](std::string name) -> const std::string* {
        for (;;) {
          if (auto it = tg_.phase_of.find(name); it != tg_.phase_of.end()) return &it->second;
          const size_t cut = name.find_last_of("+/");
          if (cut == std::string::npos || cut == 0) return nullptr;
          name.resize(cut);
        }
      };
      for (size_t k = nk; k-- > 0;) {
        if (const std::string* p = phase_of(prog.kernels[k])) next = *p;
        kernel_phase_[k] = next;
      }
    }
    std::vector<models::Femtos> end(nk, core_->start_time());
    for (const auto& r : core_->records()) {
      const int16_t k = prog.instrs[static_cast<size_t>(r.instr)].kernel;
      if (k >= 0) end[static_cast<size_t>(k)] = std::max(end[static_cast<size_t>(k)], r.end);
    }
    models::Femtos prev = core_->start_time();
    for (size_t k = 0; k < nk; ++k) {
      end[k] = std::max(end[k], prev);
      const double a = t0 + static_cast<double>(prev - core_->start_time()) / 1e15, b = t0 + static_cast<double>(end[k] - core_->start_time()) / 1e15;
      if (!phases_.empty() && phases_.back().name == kernel_phase_[k] && phases_.back().end_s == a) phases_.back().end_s = b;
      else phases_.push_back({kernel_phase_[k], a, b});
      prev = end[k];
    }
  }

  const passes::TrainingGraph& tg_;
  CoreConfig cfg_;
  Compiled compiled_;
  double compile_s_ = 0;
  std::set<std::string> state_names_;
  std::unique_ptr<NeuronCore> core_;
  CoreStats first_{};
  json trace_cfg_;
  std::string out_dir_;
  models::Femtos origin_ = 0;
  std::vector<PredictedKernel> spans_;   // the steps on the host track
  std::vector<PredictedKernel> phases_;  // ... and their phases
  std::vector<std::string> kernel_phase_;
  double last_s_ = 0, total_s_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainMachine> make_neuroncore_trainer(const Scenario& s, const passes::TrainingGraph& tg, const RunOptions& opt) {
  return std::make_unique<NeuronCoreTrainer>(s, tg, opt);
}

}  // namespace tessera::sim
