// Training on the wafer (docs/training.md, docs/wafer-compiler.md "Training"): the forward graph is
// compiled once in weight-streaming mode with its backward pass (mapper/wafer, MappingOptions::
// training); the fabric, MemoryX and SwarmX are elaborated once. Every step the host places the
// step's x and target in the PEs that take them, SwarmX streams each layer's weights from MemoryX
// (and again, for the backward pass, those no longer in a PE buffer: Compiled::reloads), the fabric
// runs forward and backward, each layer's weight gradient leaves through its orientation's edge
// port, and SwarmX hands it to MemoryX, which applies the optimizer (SGD, momentum, Adam) to its fp32 master weights. Biases live and are
// updated in the chain-end PEs' SRAM. The state is written once (initial values or a checkpoint's)
// and read back from MemoryX and the PEs only for checkpoints and at the end.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "isa/fileio.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/numeric.hpp"
#include "isa/wafer/asm.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/wafer/compile.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"
#include "models/wafer/weight_stream.hpp"
#include "sim/console.hpp"
#include "sim/report.hpp"
#include "sim/run_wafer.hpp"
#include "sim/train.hpp"
#include "sim/trace_wafer.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {

class WaferTrainer : public TrainMachine {
 public:
  WaferTrainer(const Scenario& s, const graph::Graph& forward, const passes::TrainingGraph& tg, const passes::TrainingSpec& spec, const RunOptions& opt)
      : tg_(tg), cfg_(wafer::WaferConfig::from(s.params)), target_(spec.target), lr_(spec.learning_rate) {
    auto& con = Console::get();
    const char* hint = "training on the wafer takes mse or softmax cross-entropy, sgd, momentum or adam (with or without weight decay and a learning-rate schedule), fp32 or mixed 16-bit; run other set-ups on target.kind neuroncore or reference";

    if (spec.optimizer != "sgd" && spec.optimizer != "momentum" && spec.optimizer != "adam")
      throw InputError("/training/optimizer", "MemoryX applies SGD, momentum or Adam", hint);
    momentum_ = spec.optimizer == "momentum" ? spec.momentum : 0.0;
    adam_ = spec.optimizer == "adam";
    beta1_ = spec.beta1, beta2_ = spec.beta2;
    spec_ = spec;
    if (spec.compute != DType::f32 && spec.compute != DType::f16 && spec.compute != DType::bf16 && spec.compute != DType::cbf16)
      throw InputError("/precision/compute", "training on the wafer runs in fp32, or mixed precision in fp16, bf16 or cbf16", hint);
    const json& m = s.resolved["mapping"];
    if (m["mode"].get<std::string>() == "pipelined")  // auto means weight streaming here
      throw InputError("/mapping/mode", "training on the wafer runs in weight_streaming mode (the weights and their updates live in MemoryX)",
                       "set mapping.mode to weight_streaming or auto");
    wafer::MappingOptions mo;
    mo.mode = wafer::MapMode::weight_streaming;
    mo.training = true;
    mo.learning_rate = spec.learning_rate;
    mo.loss = spec.loss;
    mo.momentum = momentum_;
    mo.weight_decay = spec.weight_decay;
    mo.loss_scaling = spec.loss_scaling;
    mo.adam = adam_, mo.beta1 = spec.beta1, mo.beta2 = spec.beta2, mo.eps = spec.eps;
    mo.lr_scheduled = spec.schedule != "constant";
    scaling_ = spec.loss_scaling;
    scale_ = static_cast<float>(spec.init_scale);
    growth_ = static_cast<float>(spec.growth);
    backoff_ = static_cast<float>(spec.backoff);
    interval_ = spec.interval;
    mo.compute = spec.compute == DType::f16 ? wafer::Elem::f16 : spec.compute == DType::bf16 ? wafer::Elem::bf16 : spec.compute == DType::cbf16 ? wafer::Elem::cbf16 : wafer::Elem::f32;
    wafer_rect_option(m, mo);
    const auto c0 = std::chrono::steady_clock::now();
    enter_phase("compile");
    // Micro-batches (gradient accumulation; docs/training.md): the program for mb samples runs
    // B / mb times a step -- `mapping.micro_batch` a divisor of the batch, or auto: the whole batch
    // when it fits, else the largest divisor that does.
    const int64_t B = forward.inputs.empty() || forward.value(forward.inputs[0]).shape.empty() ? 1 : forward.value(forward.inputs[0]).shape[0];
    auto compile_for = [&](int64_t b) {
      graph::Graph g = forward;
      if (b != B) passes::with_batch(g, b);
      mo.micro_batches = B / b;
      return wafer::compile(g, cfg_, mo);
    };
    int64_t mb = B;
    if (m["micro_batch"].is_number()) {
      mb = m["micro_batch"].get<int64_t>();
      if (mb < 1 || B % mb != 0)
        throw InputError("/mapping/micro_batch", std::to_string(mb) + " does not divide the batch of " + std::to_string(B), "give a divisor of the batch, or \"auto\"");
      cp_ = compile_for(mb);
    } else {
      mb = fit_micro_batch(B, [&](int64_t b) { cp_ = compile_for(b); });
      if (mb != B)
        con.detail("mapping.micro_batch auto: the batch of " + std::to_string(B) + " does not fit a PE's SRAM at once; " + std::to_string(B / mb) + " micro-batches of " + std::to_string(mb) +
                   ", their gradients summed");
    }
    runs_ = B / mb;
    const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    for (const auto& k : cp_.kernels) {
      for (const auto& v : {k.w_value, k.b_value})
        if (!v.empty() && !tg.initial.count(param_of(v))) throw std::logic_error("wafer training: '" + v + "' is not a trained parameter");
      for (const auto& v : {k.ln_gamma_value, k.ln_beta_value})  // (a LayerNorm's scale or shift that is a constant, not a parameter: it would be trained)
        if (!v.empty() && !tg.initial.count(param_of(v)))
          throw InputError("kernel '" + k.name + "'", "its LayerNorm's scale or shift ('" + v + "') is not a parameter of the model (a constant, or computed), which the wafer would train", "train it on target.kind neuroncore or reference");
    }
    {  // A fused projection's slices (param_slice) must cover their parameter's columns exactly once: the state is put together from them.
      std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> cols;
      for (const auto& k : cp_.kernels)
        for (const auto& v : {k.w_value, k.b_value})
          if (const auto sl = wafer::param_slice(v)) cols[sl->param].push_back({sl->lo, sl->hi});
      for (auto& [param, r] : cols) {
        std::sort(r.begin(), r.end());
        r.erase(std::unique(r.begin(), r.end()), r.end());  // (a weight and its bias: the same columns)
        int64_t at = 0;
        for (const auto& [lo, hi] : r) at = lo == at ? hi : -1;
        if (at != tg.initial.at(param).shape().back())
          throw InputError("parameter '" + param + "'", "its slices (" + std::to_string(r.size()) + " Slice nodes of its projection) do not cover its columns exactly once, which training on the wafer needs",
                           "train it on target.kind neuroncore or reference");
      }
    }
    if (tg.state.size() != tg.params.size() * (adam_ ? 3 : momentum_ != 0 ? 2 : 1) + (scaling_ ? (adam_ ? 3 : 2) : 0))
      throw std::logic_error("wafer training: unexpected optimizer state");
    con.out(con.bold("compiled") + " " + std::to_string(cp_.kernels.size()) + " layer(s) with their backward pass on " + std::to_string(cp_.fabric_width) + " x " +
            std::to_string(cp_.fabric_height) + " PEs, weights streamed from MemoryX, gradients to MemoryX" +
            (runs_ > 1 ? ", " + std::to_string(runs_) + " micro-batches of " + std::to_string(mb) + " a step" : std::string()) + " (" + format_num(compile_s * 1e3, "%.1f") + " ms)");
    con.out(con.bold("predicted") + " " + format_num(predicted_step() * 1e6, "%.3f") + " us per training step (" +
            (runs_ > 1 ? std::to_string(runs_) + " runs: " + std::to_string(runs_ - 1) + " of " + format_num(cp_.train_est.skip_s * 1e6, "%.3f") + " us, the last " + format_num(cp_.predicted_s * 1e6, "%.3f") + " us; each " : std::string()) + "forward to cycle " +
            std::to_string(cp_.train_est.forward) + ", loss to " + std::to_string(cp_.train_est.loss) + ", backward to " + std::to_string(cp_.train_est.backward) +
            ", MemoryX updates done at " + format_num(cp_.train_est.update_end_s * 1e6, "%.3f") + " us)");
    L_ = load_compiled_wafer(cp_, cfg_);
    wafer::Fabric::check_host_memory(L_, cfg_, compiled_fabric_options(s, cfg_).host_memory_budget);
    if (trace_wanted(s)) check_wafer_trace_pes(s.resolved["trace"], L_);
    if (opt.check_only) {
      note_checked(opt, "compiled " + std::to_string(cp_.kernels.size()) + " layer(s), predicted " + format_num(predicted_step() * 1e6, "%.3f") +
                            " us per training step");
      return;  // nothing elaborated: run_training returns before a step
    }
    const std::filesystem::path out(opt.out_dir);
    write_file_atomic((out / "compile_report.txt").string(), wafer::compile_report(cp_, cfg_));
    write_compiled_wafer(cp_, opt);
    models::set_fs_resolution();
    if (trace_wanted(s)) trace_cfg_ = s.resolved["trace"];
    out_dir_ = opt.out_dir;
    name_ = s.name;
    scenario_ = &s;  // run.faults are armed for the first step
    threads_requested_ = s.resolved["run"]["threads"];
    heartbeat_ = std::make_unique<Heartbeat>("simulating", cp_.predicted_s, "hops");  // per step
    fab_ = std::make_unique<wafer::Fabric>("wafer", cfg_, compiled_fabric_options(s, cfg_, heartbeat_.get(), &L_));
    fab_->load(L_);  // the fabric keeps pointers into the layout: it lives as long as the trainer
    // The compiled constants (a LayerNorm's padding mask, its initial scale and shift -- which the
    // state then overwrites -- ...), once.
    for (const auto& a : cp_.constants) fab_->write_array(a.x, a.y, a.array, a.values);
    mx_ = std::make_unique<wafer::MemoryX>("memoryx", cfg_);
    sx_ = std::make_unique<wafer::SwarmX>("swarmx", cfg_);
    sx_->socket.bind(mx_->socket);
    if (adam_) mx_->set_adam(spec.learning_rate, spec.beta1, spec.beta2, spec.eps, spec.weight_decay);
    else mx_->set_sgd(spec.learning_rate, momentum_, spec.weight_decay);
    if (cp_.verdict()) {
      // MemoryX's verdict: once every gradient wavelet has left the fabric, MemoryX takes them
      // (the updates as below, g / S or nothing) and sends each PE of the east column and south row
      // 1 / S, or 0 when a gradient was not finite (the chain ends then update their biases or not).
      // With micro-batches: 1 after the step's last run (its gradients complete the sums and the
      // update applies them), 0 before it, sent as the gradients have left.
      wafer::Fabric::PortReply r;
      int64_t count = 0;
      for (const auto& k : cp_.kernels) {
        count += k.lanes * k.lane_len;
        if (std::find(r.from.begin(), r.from.end(), k.grad_port) == r.from.end()) r.from.push_back(k.grad_port);
      }
      r.count = count;
      r.to = "verdict";
      r.fn = [this](int64_t rel) {
        grads_out_ = rel;
        grads_done_ = take_gradients();
        const models::ClockDomain& ck = fab_->clock();
        const sc_core::sc_time from = scaling_ ? grads_done_ : sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(c_start_ + rel)));
        const sc_core::sc_time at = from + sc_core::sc_time(cfg_.swarmx_latency, sc_core::SC_SEC);  // back through SwarmX
        const int64_t ready = ck.cycle_at_or_after(static_cast<models::Femtos>(at.value())) - c_start_;
        const uint32_t v = scaling_ ? (finite_ ? float_bits(1.0f / scale_) : 0u) : last_run_ ? float_bits(1.0f) : 0u;
        return std::vector<std::pair<std::vector<uint32_t>, int64_t>>(static_cast<size_t>(fab_->port_lanes("verdict")), {{v}, ready});
      };
      fab_->set_port_reply(std::move(r));
    }
    install_interrupt_handlers();
  }

  // A kernel's value as a training-graph parameter: itself, or the parameter a fused projection's
  // slice was cut from (wafer::param_slice; prefixed state names keep their prefix).
  static std::string param_of(const std::string& v) {
    const auto s = wafer::param_slice(v);
    return s ? s->param : v;
  }
  // The kernel's value from the state: the tensor, or its slice's columns of the parameter's.
  static Tensor state_of(const std::map<std::string, Tensor>& state, const std::string& v) {
    const auto s = wafer::param_slice(v);
    if (!s) return state.at(v);
    const Tensor& p = state.at(s->param);
    const auto pv = p.to_f32();
    const int64_t N = p.shape().back(), rows = static_cast<int64_t>(pv.size()) / N, n = s->hi - s->lo;
    std::vector<float> o(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) o[static_cast<size_t>(r * n + j)] = pv[static_cast<size_t>(r * N + s->lo + j)];
    Shape sh = p.shape();
    sh.back() = n;
    return Tensor::from_f32(sh, std::move(o));
  }
  // The slices in `st` put back into their parameters' columns (the parameter's shape from the
  // initial state; each slice's entry removed).
  void merge_slices(std::map<std::string, Tensor>& st) const {
    std::map<std::string, std::vector<float>> whole;
    for (auto it = st.begin(); it != st.end();) {
      const auto s = wafer::param_slice(it->first);
      if (!s) {
        ++it;
        continue;
      }
      const std::string base = s->param;
      const Tensor& init = tg_.initial.at(unprefixed(base));
      auto& w = whole[base];
      if (w.empty()) w.assign(static_cast<size_t>(init.numel()), 0.0f);
      const auto v = it->second.to_f32();
      const int64_t N = init.shape().back(), n = s->hi - s->lo, rows = static_cast<int64_t>(v.size()) / n;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) w[static_cast<size_t>(r * N + s->lo + j)] = v[static_cast<size_t>(r * n + j)];
      it = st.erase(it);
    }
    for (auto& [base, w] : whole) st[base] = Tensor::from_f32(tg_.initial.at(unprefixed(base)).shape(), std::move(w));
  }
  // A state name without its optimizer prefix (momentum:, adam_m:, adam_v:).
  static std::string unprefixed(std::string v) {
    for (const char* pre : {"momentum:", "adam_m:", "adam_v:"})
      if (v.rfind(pre, 0) == 0) return v.substr(std::string(pre).size());
    return v;
  }
  // A kernel value's shape as a parameter (a slice: its columns).
  Shape shape_of(const std::string& v) const {
    const auto s = wafer::param_slice(v);
    if (!s) return tg_.initial.at(unprefixed(v)).shape();
    Shape sh = tg_.initial.at(unprefixed(s->param)).shape();
    sh.back() = s->hi - s->lo;
    return sh;
  }

  void set_state(const std::map<std::string, Tensor>& state) override {
    if (scaling_) {
      scale_ = state.at("loss_scale").to_f32().at(0);
      count_ = state.at("loss_scale_count").to_f32().at(0);
      if (adam_) updates_ = state.at("adam_updates").to_f32().at(0);
    }
    for (auto& k : cp_.kernels) {
      k.W = kn_of(k, state_of(state, k.w_value));
      if (mx_->has(k.mx_tensor)) throw std::logic_error("wafer training: the state is put into MemoryX once");
      mx_->add_tensor(k.mx_tensor, cp_.memoryx_layout(k));
      const std::string l = std::to_string(&k - cp_.kernels.data());
      if (momentum_ != 0) {  // the weights' velocity in MemoryX, in the weights' order
        wafer::DenseKernel kv = k;
        kv.W = kn_of(k, state_of(state, "momentum:" + k.w_value));
        mx_->set_velocity(k.mx_tensor, cp_.memoryx_layout(kv));
      }
      if (adam_) {  // the weights' moments in MemoryX, in the weights' order
        wafer::DenseKernel kv = k;
        kv.W = kn_of(k, state_of(state, "adam_m:" + k.w_value));
        mx_->set_velocity(k.mx_tensor, cp_.memoryx_layout(kv));
        kv.W = kn_of(k, state_of(state, "adam_v:" + k.w_value));
        mx_->set_second_moment(k.mx_tensor, cp_.memoryx_layout(kv));
      }
      auto to_chain_ends = [&](const std::string& value, const std::string& array) {
        std::vector<float> b(static_cast<size_t>(k.N), 0.0f);
        if (!value.empty()) b = state_of(state, value).to_f32();
        for_chain_ends(k, [&](int64_t x, int64_t y, int64_t i) {
          std::vector<float> v(static_cast<size_t>(k.nb), 0.0f);
          for (int64_t n = 0; n < k.nb && i * k.nb + n < k.N; ++n) v[static_cast<size_t>(n)] = b[static_cast<size_t>(i * k.nb + n)];
          fab_->write_array(x, y, array, v);
        });
      };
      to_chain_ends(k.b_value, "bias" + l);
      if (k.layernorm) {  // a LayerNorm's scale and shift (no shift: its zeros)
        to_chain_ends(k.ln_gamma_value, "lng" + l);
        to_chain_ends(k.ln_beta_value, "lnb" + l);
      }
      if (momentum_ != 0) to_chain_ends(k.b_value.empty() ? "" : "momentum:" + k.b_value, "vb" + l);
      if (adam_) {
        to_chain_ends(k.b_value.empty() ? "" : "adam_m:" + k.b_value, "am" + l);
        to_chain_ends(k.b_value.empty() ? "" : "adam_v:" + k.b_value, "av" + l);
      }
    }
  }

  std::map<std::string, Tensor> step(const std::map<std::string, Tensor>& in) override {
    if (steps_ == 0) faults_ = arm_wafer_faults(*scenario_, *fab_, fault_what_);
    if (scaling_)  // MemoryX's loss scale, at the loss PEs
      for_chain_ends(cp_.kernels.back(), [&](int64_t x, int64_t y, int64_t) { fab_->write_array(x, y, "lsc", std::vector<float>{scale_}); });
    if (spec_.schedule != "constant") {
      // The step's learning rate (the schedule as the training graph computes it from the step, in
      // its fp32 operations): MemoryX's, and at the chain ends for the biases.
      lr_ = scheduled_rate(in.at("step").to_f32().at(0));
      mx_->set_learning_rate(lr_);
      for (const auto& k : cp_.kernels)
        for_chain_ends(k, [&](int64_t x, int64_t y, int64_t) { fab_->write_array(x, y, "lrs" + std::to_string(&k - cp_.kernels.data()), std::vector<float>{lr_}); });
    }
    if (adam_) {
      // Adam's update number t (1-based: the step, or with loss scaling the updates made + 1, which a
      // skipped step does not advance): MemoryX's, and the bias corrections 1 / (1 - b^t) it gives
      // the chain ends with the step's data (b^t as the graph's Pow: in double, rounded to fp32).
      const float t = scaling_ ? updates_ + 1.0f : in.at("step").to_f32().at(0);
      mx_->set_adam_step(static_cast<int64_t>(t));
      auto inv_bc = [&](double b) {
        const float bf = static_cast<float>(b);
        const float bc = 1.0f - static_cast<float>(std::pow(static_cast<double>(bf), static_cast<double>(t)));
        return 1.0f / bc;
      };
      const std::vector<float> abc = {inv_bc(beta1_), inv_bc(beta2_)};
      for (const auto& k : cp_.kernels)
        for_chain_ends(k, [&](int64_t x, int64_t y, int64_t) { fab_->write_array(x, y, "abc" + std::to_string(&k - cp_.kernels.data()), abc); });
    }
    // The step's runs: one, or one per micro-batch, each with its samples of x and the target
    // (MemoryX sums the runs' weight gradients and the chain ends their bias gradients; the last
    // run's verdict applies the sums). The loss is the runs' losses added (each of the whole batch's
    // mean), the forward output their outputs in sample order.
    const sc_core::sc_time t_step = sc_core::sc_time_stamp();
    const models::ClockDomain& ck = fab_->clock();
    const double t_step0 = t_step.to_seconds() - (steps_ ? first_start_s_ : (first_start_s_ = t_step.to_seconds()));
    const double cyc = 1.0 / cfg_.clock_hz;
    float loss = 0;
    std::vector<Tensor> outs;
    for (int64_t r = 0; r < runs_; ++r) {
      const Tensor& x = in.at(cp_.input);
      const Tensor& tg = in.at(target_);
      for (const auto& a : cp_.place_input(runs_ > 1 ? batch_part(x, r, runs_) : x)) fab_->write_array(a.x, a.y, a.array, a.values);
      for (const auto& a : cp_.place_target(runs_ > 1 ? batch_part(tg, r, runs_) : tg)) fab_->write_array(a.x, a.y, a.array, a.values);
      last_run_ = r + 1 == runs_;
      if (runs_ > 1) mx_->set_accumulate(!last_run_);
      const sc_core::sc_time t_start = sc_core::sc_time_stamp();
      const int64_t c_start = ck.cycle_at_or_after(static_cast<models::Femtos>(t_start.value()));
      c_start_ = c_start;
      stream_compiled_weights(cp_, *fab_, *mx_, *sx_, t_start);
      fab_->start();
      sc_core::sc_start();
      tessera::models::after_systemc();
      host_note("threads", {{"requested", threads_requested_}, {"used", fab_->threads_used()}, {"ranks", fab_->ranks_used()}});
      poll_interrupt();
      const bool faulted = steps_ == 0 && !faults_.empty();  // (armed for the first step: any of its runs)
      if (faulted && (fab_->error() || r + 1 == runs_)) {
        report_wafer_faults(faults_, fault_what_, *fab_);
        fab_->clear_faults();
      }
      if (fab_->error()) {
        const std::string where = "compiled training layout, step " + std::to_string(first_step + steps_) + (runs_ > 1 ? ", micro-batch " + std::to_string(r) : std::string());
        if (faulted) throw InputError(where, *fab_->error(), "the faults injected by run.faults stopped the run");
        throw std::runtime_error(where + ": " + *fab_->error());
      }
      if (!fab_->finished()) throw std::runtime_error("the fabric did not finish a training step (SystemC ran out of events)");
      const wafer::FabricStats& st = fab_->stats();
      sc_core::sc_time t_end = sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(c_start + st.cycles)));
      // (with a verdict MemoryX took the gradients during the run, before it)
      t_end = std::max(t_end, cp_.verdict() ? grads_done_ : take_gradients());
      // Advance simulated time to the last update, so the next run starts after it.
      if (t_end > sc_core::sc_time_stamp()) {
        sc_core::sc_start(t_end - sc_core::sc_time_stamp());
        tessera::models::after_systemc();
      }
      fabric_cycles_ += st.cycles;
      loss = loss + fab_->read_array(cp_.loss_x, cp_.loss_y, "loss").at(0);
      outs.push_back(cp_.gather_output([&](int64_t px, int64_t py, const std::string& a) { return fab_->read_array(px, py, a); }));
      {  // the run's phases: forward until the last chain end has its output, the loss until the loss
         // PE has it, the backward pass until the fabric is done, then the MemoryX update
        const double t0 = t_step0 + (t_start - t_step).to_seconds(), t1 = t_step0 + (t_end - t_step).to_seconds();
        const auto& kl = cp_.kernels.back();
        int64_t fwd = 0;
        for_chain_ends(kl, [&](int64_t px, int64_t py, int64_t) { fwd = std::max(fwd, fab_->task_end(px, py, "red")); });
        const int64_t lossc = std::max(fwd, fab_->task_end(cp_.loss_x, cp_.loss_y, "lossk"));
        if (runs_ > 1) spans_.push_back({"micro-batch " + std::to_string(r), t0, t1});
        phases_.push_back({"forward", t0, t0 + static_cast<double>(fwd) * cyc});
        phases_.push_back({"loss", t0 + static_cast<double>(fwd) * cyc, t0 + static_cast<double>(lossc) * cyc});
        // (with a verdict the fabric runs on to it: the update phase is MemoryX's and the chain
        // ends' bias updates after it)
        const int64_t bwd = cp_.verdict() ? grads_out_ : st.cycles;
        phases_.push_back({"backward", t0 + static_cast<double>(lossc) * cyc, t0 + static_cast<double>(bwd) * cyc});
        phases_.push_back({"weight update (MemoryX)", t0 + static_cast<double>(bwd) * cyc, t1});
        last_step_t0_ = t0;
        const auto& e = cp_.train_est;  // the estimate's phases, at the last run's place
        pred_ = {{"forward", t0, t0 + static_cast<double>(e.forward) * cyc},
                 {"loss", t0 + static_cast<double>(e.forward) * cyc, t0 + static_cast<double>(e.loss) * cyc},
                 {"backward", t0 + static_cast<double>(e.loss) * cyc, t0 + static_cast<double>(e.backward) * cyc},
                 {"weight update (MemoryX)", t0 + static_cast<double>(e.backward) * cyc, t0 + cp_.predicted_s}};
      }
    }
    bool skipped = false;
    if (scaling_) {  // GradScaler's rules, on MemoryX's scale (fp32, as the reference graph)
      skipped = !finite_;
      if (finite_) {
        if (adam_) updates_ = updates_ + 1.0f;
        const float grown = count_ + 1.0f;
        if (grown < static_cast<float>(interval_)) {
          count_ = grown;
        } else {
          scale_ = scale_ * growth_;
          count_ = 0;
        }
      } else {
        scale_ = scale_ * backoff_;
        count_ = 0;
      }
    }
    last_s_ = (sc_core::sc_time_stamp() - t_step).to_seconds();
    total_s_ += last_s_;
    spans_.push_back({"step " + std::to_string(first_step + steps_), t_step0, t_step0 + last_s_});
    ++steps_;
    std::map<std::string, Tensor> out;
    out[cp_.output] = runs_ > 1 ? batch_concat(outs) : outs[0];
    out["loss"] = Tensor::from_f32({}, {loss});
    // The step's rate MemoryX and the chain ends applied.
    out["learning_rate"] = Tensor::from_f32({}, {lr_});
    if (scaling_) out["skipped"] = Tensor::from_f32({}, {skipped ? 1.0f : 0.0f});
    return out;
  }

  std::map<std::string, Tensor> state() override {
    std::map<std::string, Tensor> st;
    if (scaling_) {  // MemoryX's loss-scaling state
      st["loss_scale"] = Tensor::from_f32({}, {scale_});
      st["loss_scale_count"] = Tensor::from_f32({}, {count_});
      if (adam_) st["adam_updates"] = Tensor::from_f32({}, {updates_});
    }
    for (const auto& k : cp_.kernels) {
      const Shape ws = shape_of(k.w_value);
      auto as_param = [&](const std::vector<float>& w) {  // [K, N] -> the parameter's shape
        if (k.spatial()) return Tensor::from_f32(ws, wafer::conv_tensor(k, w));
        std::vector<float> g(w.size());
        for (int64_t a = 0; a < k.K; ++a)
          for (int64_t b = 0; b < k.N; ++b) (k.w_trans ? g[static_cast<size_t>(b * k.K + a)] : g[static_cast<size_t>(a * k.N + b)]) = w[static_cast<size_t>(a * k.N + b)];
        return Tensor::from_f32(ws, std::move(g));
      };
      st[k.w_value] = as_param(cp_.from_memoryx_layout(k, mx_->values(k.mx_tensor)));
      const std::string l = std::to_string(&k - cp_.kernels.data());
      if (momentum_ != 0) st["momentum:" + k.w_value] = as_param(cp_.from_memoryx_layout(k, mx_->velocity(k.mx_tensor)));
      if (adam_) {
        st["adam_m:" + k.w_value] = as_param(cp_.from_memoryx_layout(k, mx_->velocity(k.mx_tensor)));
        st["adam_v:" + k.w_value] = as_param(cp_.from_memoryx_layout(k, mx_->second_moment(k.mx_tensor)));
      }
      auto from_chain_ends = [&](const std::string& value, const std::string& array) {
        std::vector<float> b(static_cast<size_t>(k.N), 0.0f);
        for_chain_ends(k, [&](int64_t x, int64_t y, int64_t i) {
          const auto v = fab_->read_array(x, y, array);
          for (int64_t n = 0; n < k.nb && i * k.nb + n < k.N; ++n) b[static_cast<size_t>(i * k.nb + n)] = v[static_cast<size_t>(n)];
        });
        st[value] = Tensor::from_f32(shape_of(value), std::move(b));
      };
      if (!k.b_value.empty()) {
        from_chain_ends(k.b_value, "bias" + l);
        if (momentum_ != 0) from_chain_ends("momentum:" + k.b_value, "vb" + l);
        if (adam_) {
          from_chain_ends("adam_m:" + k.b_value, "am" + l);
          from_chain_ends("adam_v:" + k.b_value, "av" + l);
        }
      }
      if (k.layernorm) {  // (SGD only: no optimizer state)
        from_chain_ends(k.ln_gamma_value, "lng" + l);
        if (!k.ln_beta_value.empty()) from_chain_ends(k.ln_beta_value, "lnb" + l);
      }
    }
    merge_slices(st);
    return st;
  }

  double state_scalar(const std::string& name) override {
    if (scaling_ && name == "loss_scale") return scale_;
    return TrainMachine::state_scalar(name);
  }

  double step_seconds() const override { return last_s_; }

  void finish(json& report, const std::vector<StepMark>& closures) override {
    auto& con = Console::get();
    heartbeat_->finish();
    if (trace_cfg_.is_object()) {
      // Step slices and closures on the host track, the phases of every step as the "kernels"
      // process, MemoryX/SwarmX transfers (weight streams out, gradients in) and the last step's PE detail.
      con.out(write_trace_file(trace_cfg_,
                               build_wafer_trace(trace_cfg_, L_, *fab_, name_, mx_.get(), sx_.get(), first_start_s_, pred_, phases_, spans_, closures, last_step_t0_),
                               out_dir_));
      report["trace"] = {{"file", trace_cfg_["file"]}};
    }
    write_wafer_heatmap(*scenario_, *fab_, name_ + " (training, " + scenario_->preset + ", last step)", out_dir_, report);
    json layers = json::array();
    for (const auto& k : cp_.kernels)
      layers.push_back({{"name", k.name}, {"rect", {k.w, k.h}}, {"block", {k.kb, k.nb}}, {"weights_port", k.port}, {"gradient_port", k.grad_port}});
    if (!faults_.empty()) report["faults"] = faults_;
    report["compile"] = {{"mode", "weight_streaming"}, {"training", true}, {"layers", layers}, {"fabric", {cp_.fabric_width, cp_.fabric_height}},
                         {"colors_used", cp_.colors_used}, {"sram_high_water_bytes", cp_.sram_high_water}};
    const double per_step = total_s_ / static_cast<double>(std::max<int64_t>(1, steps_));
    const double err = per_step > 0 ? (predicted_step() - per_step) / per_step * 100 : 0.0;
    report["latency"]["predicted_s"] = predicted_step();
    if (runs_ > 1) report["latency"]["micro_batches"] = {{"count", runs_}, {"predicted_s_each", cp_.train_est.skip_s}, {"predicted_s_last", cp_.predicted_s}};
    report["latency"]["error_pct"] = err;
    report["latency"]["predicted_phases_cycles"] = {{"forward", cp_.train_est.forward}, {"loss", cp_.train_est.loss}, {"backward", cp_.train_est.backward}};
    report["latency"]["predicted_update_end_s"] = cp_.train_est.update_end_s;
    report["weight_streaming"] = {{"memoryx", {{"bytes_read", mx_->stats().bytes_read}, {"bytes_written", mx_->stats().bytes_written}, {"updates", mx_->stats().updates}}},
                                  {"swarmx", {{"bytes_broadcast", sx_->stats().bytes_broadcast}, {"bytes_reduced", sx_->stats().bytes_reduced}}}};
    report["stats"] = {{"fabric_cycles", fabric_cycles_}, {"steps", steps_}};
    con.out(con.bold("training step") + " " + format_num(predicted_step() * 1e6, "%.3f") + " us predicted, " + format_num(per_step * 1e6, "%.3f") + " us simulated (" +
            format_num(err, "%+.1f") + "%; fabric " +
            format_num(static_cast<double>(fabric_cycles_) / static_cast<double>(std::max<int64_t>(1, steps_)), "%.0f") + " cycles per step, " + (scaling_ ? "MemoryX's update and verdict inside it" : runs_ > 1 ? "each micro-batch's gradient sum and verdict inside it" : "then the MemoryX update") + "); MemoryX read " +
            std::to_string(mx_->stats().bytes_read) + " B, SwarmX reduced " + std::to_string(sx_->stats().bytes_reduced) + " B of gradients");
  }

 private:
  // The learning rate of step t (1-based) under the schedule, in the training graph's fp32
  // operations (passes::make_training_graph): lr gamma^(t-1), lr gamma^floor((t-1)/step_size), or
  // lr (t / warmup_steps while t < warmup_steps).
  float scheduled_rate(float t) const {
    const float lr = static_cast<float>(spec_.learning_rate), g = static_cast<float>(spec_.gamma);
    auto pw = [&](float e) { return static_cast<float>(std::pow(static_cast<double>(g), static_cast<double>(e))); };
    if (spec_.schedule == "exponential") return lr * pw(t - 1.0f);
    if (spec_.schedule == "step") {
      const float q = (t - 1.0f) / static_cast<float>(spec_.step_size);
      return lr * pw(static_cast<float>(static_cast<int64_t>(q)));
    }
    if (spec_.schedule == "warmup") {
      const float w = static_cast<float>(spec_.warmup_steps);
      return lr * (t < w ? t / w : 1.0f);
    }
    return lr;
  }
  // Each layer's weight gradient, last layer first: the lanes of its port (in the compute type),
  // through SwarmX into MemoryX's update window (the optimizer on the fp32 masters). A port (one per
  // orientation) carries its kernels' blocks one kernel after another on each lane, in that order.
  // With loss scaling MemoryX first checks that every value is finite (finite_) and applies g / S,
  // or takes them without an update. Returns when the last update is done.
  sc_core::sc_time take_gradients() {
    const models::ClockDomain& ck = fab_->clock();
    const size_t n = cp_.kernels.size();
    std::map<std::string, int64_t> expect, taken;
    for (const auto& k : cp_.kernels) expect[k.grad_port] += k.lane_len;
    std::vector<std::vector<std::vector<float>>> lanes(n);
    std::vector<int64_t> last(n, 0);
    // (with loss scaling the check is the graph's: every g / S finite, and their sums -- per
    // tensor, then added in fp32 -- too)
    bool finite = true;
    float total = 0;
    for (size_t li = n; li-- > 0;) {
      double sum = 0;
      const auto& k = cp_.kernels[li];
      const int64_t at = taken[k.grad_port];
      for (int64_t lane = 0; lane < k.lanes; ++lane) {
        const auto& o = fab_->port_output(k.grad_port, lane);
        if (static_cast<int64_t>(o.size()) != expect[k.grad_port])
          throw std::runtime_error("training step: gradient port '" + k.grad_port + "' lane " + std::to_string(lane) + " collected " + std::to_string(o.size()) +
                                   " wavelets, expected " + std::to_string(expect[k.grad_port]));
        std::vector<float> v(static_cast<size_t>(k.lane_len));
        for (int64_t i = 0; i < k.lane_len; ++i) {
          const uint32_t bits = o[static_cast<size_t>(at + i)].first;
          v[static_cast<size_t>(i)] = cp_.half() ? wafer::decode_elem(bits, cp_.compute) : bits_float(bits);
          const float q = scaling_ ? v[static_cast<size_t>(i)] / scale_ : v[static_cast<size_t>(i)];
          finite = finite && std::isfinite(q);
          sum += q;
        }
        if (k.lane_len) last[li] = std::max(last[li], o[static_cast<size_t>(at + k.lane_len - 1)].second);
        lanes[li].push_back(std::move(v));
      }
      taken[k.grad_port] = at + k.lane_len;
      total = total + static_cast<float>(sum);
    }
    finite_ = finite && std::isfinite(total);
    if (scaling_) mx_->set_gradient_scale(scale_, finite);
    sc_core::sc_time done = sc_core::SC_ZERO_TIME;
    for (size_t li = n; li-- > 0;) {
      const auto& k = cp_.kernels[li];
      const sc_core::sc_time t0 = sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(c_start_ + last[li])));
      done = std::max(done, sx_->reduce_update(mx_->address(k.mx_tensor), {cp_.gradient_layout(k, lanes[li])}, t0));
    }
    return done;
  }
  // The graph's weight value as [K, N].
  static std::vector<float> kn_of(const wafer::DenseKernel& k, const Tensor& w) {
    const auto v = w.to_f32();
    if (k.spatial()) return wafer::conv_matrix(k, v);  // a Conv's weights as its im2col matrix
    std::vector<float> o(static_cast<size_t>(k.K * k.N));
    for (int64_t a = 0; a < k.K; ++a)
      for (int64_t b = 0; b < k.N; ++b) o[static_cast<size_t>(a * k.N + b)] = k.w_trans ? v[static_cast<size_t>(b * k.K + a)] : v[static_cast<size_t>(a * k.N + b)];
    return o;
  }
  template <class F>
  static void for_chain_ends(const wafer::DenseKernel& k, F f) {
    for (int64_t i = 0; i < k.nblocks(); ++i) f(k.x0 + (k.k_on_columns ? k.w - 1 : i), k.y0 + (k.k_on_columns ? i : k.h - 1), i);
  }
  const passes::TrainingGraph& tg_;
  wafer::WaferConfig cfg_;
  std::string target_;  // the graph input holding the targets
  float lr_;  // the last step's rate
  passes::TrainingSpec spec_;
  wafer::Compiled cp_;
  wafer::LoadedLayout L_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<wafer::Fabric> fab_;
  std::unique_ptr<wafer::MemoryX> mx_;
  std::unique_ptr<wafer::SwarmX> sx_;
  double momentum_ = 0;
  // Dynamic loss scaling (MemoryX's state: the scale and the finite steps in a row, fp32 as the
  // reference graph keeps them); the last step's verdict and when its gradients left and were done.
  bool scaling_ = false, finite_ = true;
  int64_t runs_ = 1;        // micro-batches a step
  bool last_run_ = true;    // the run under way is the step's last (the verdict's 1)
  // (the runs before the last skip the bias updates: their verdict is 0)
  double predicted_step() const { return cp_.train_est.skip_s * static_cast<double>(runs_ - 1) + cp_.predicted_s; }
  float scale_ = 1, count_ = 0, growth_ = 2, backoff_ = 0.5f;
  // Adam: its update count with loss scaling (MemoryX's state; else the step), the betas.
  bool adam_ = false;
  float updates_ = 0;
  double beta1_ = 0.9, beta2_ = 0.999;
  int64_t interval_ = 2000, c_start_ = 0, grads_out_ = 0;
  sc_core::sc_time grads_done_;
  const Scenario* scenario_ = nullptr;
  json threads_requested_ = 1;  // run.threads (host.json)
  json faults_ = json::array();
  std::vector<std::string> fault_what_;
  double last_s_ = 0, total_s_ = 0, first_start_s_ = 0, last_step_t0_ = 0;
  json trace_cfg_;
  std::string out_dir_, name_;
  std::vector<PredictedKernel> spans_, phases_, pred_;
  int64_t fabric_cycles_ = 0, steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainMachine> make_wafer_trainer(const Scenario& s, const graph::Graph& forward, const passes::TrainingGraph& tg, const passes::TrainingSpec& spec,
                                                 const RunOptions& opt) {
  return std::make_unique<WaferTrainer>(s, forward, tg, spec, opt);
}

}  // namespace tessera::sim
