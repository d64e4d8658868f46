// `tessera run` on target.kind = "wafer" with a model (ONNX or inline graph): mapper/wafer compiles
// it (pipelined or weight streaming), the fabric model runs the compiled layout with real
// numerics, outputs are checked against the reference executor, and each kernel's predicted and
// simulated cycles are reported (docs/wafer-compiler.md).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <systemc>

#include "isa/fileio.hpp"
#include "isa/host_threads.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/npy.hpp"
#include "isa/numeric.hpp"
#include "isa/wafer/asm.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "mapper/wafer/compile.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"
#include "models/wafer/weight_stream.hpp"
#include "sim/fabric_ranks.hpp"
#include "sim/check.hpp"
#include "sim/console.hpp"
#include "sim/reference_cache.hpp"
#include "sim/model.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/run_wafer.hpp"
#include "sim/session.hpp"
#include "sim/trace_neuroncore.hpp"
#include "sim/trace_wafer.hpp"

namespace tessera::sim {

using json = nlohmann::json;

// Micro-batch i of n of a tensor with the samples along its first dimension, and back.
Tensor batch_part(const Tensor& x, int64_t i, int64_t n) {
  Shape sh = x.shape();
  const size_t bytes = x.nbytes() / static_cast<size_t>(n);
  sh[0] /= n;
  Tensor t(x.dtype(), sh);
  std::memcpy(t.data(), x.data() + static_cast<size_t>(i) * bytes, bytes);
  return t;
}
Tensor batch_concat(const std::vector<Tensor>& parts) {
  Shape sh = parts[0].shape();
  sh[0] *= static_cast<int64_t>(parts.size());
  Tensor t(parts[0].dtype(), sh);
  size_t at = 0;
  for (const auto& p : parts) std::memcpy(t.data() + at, p.data(), p.nbytes()), at += p.nbytes();
  return t;
}

int64_t fit_micro_batch(int64_t B, const std::function<void(int64_t)>& compile) {
  try {
    compile(B);
    return B;
  } catch (const wafer::DoesNotFit& whole) {
    for (int64_t b = B - 1; b >= 1; --b) {
      if (B % b != 0) continue;
      try {
        compile(b);
        return b;
      } catch (const wafer::DoesNotFit& e) {
        if (b == 1)
          throw InputError("/mapping/mode", e.diagnostics()[0].message + ", with one sample at a time (mapping.micro_batch 1; the whole batch of " + std::to_string(B) + " needs more)",
                           e.ways(false));
      } catch (const InputError& e) {  // (micro-batches the model cannot take: the whole batch's error, and why)
        throw InputError("/mapping/micro_batch", whole.diagnostics()[0].message + "; and the batch does not split into micro-batches: " + e.diagnostics()[0].message,
                         whole.ways(false));
      }
    }
    throw InputError("/mapping/mode", whole.diagnostics()[0].message, whole.ways(false));  // (a batch of one sample: nothing smaller to try)
  }
}

namespace {

// Where each kernel's predicted time starts, as the kernel table counts it: the latest predicted
// output of the kernels before it (0 for the first). A kernel's time is its own output minus
// that -- negative when it ends before one listed earlier (kernels overlap on one rectangle).
std::vector<int64_t> predicted_starts(const wafer::Compiled& cp) {
  std::vector<int64_t> st(cp.kernels.size(), 0);
  for (size_t l = 1; l < st.size(); ++l) st[l] = std::max(st[l - 1], cp.kernels[l - 1].est.end);
  return st;
}

}  // namespace

int wafer_threads(const Scenario& s) {
  const nlohmann::json& t = s.resolved["run"]["threads"];
  return t.is_number_integer() ? t.get<int>() : static_cast<int>(std::min(256u, host_threads()));
}

wafer::Elem wafer_compute(const Scenario& s) {
  const std::string compute = s.resolved["precision"]["compute"].get<std::string>();
  if (compute == "fp32") return wafer::Elem::f32;
  if (compute == "fp16") return wafer::Elem::f16;
  if (compute == "bf16") return wafer::Elem::bf16;
  if (compute == "cbf16") return wafer::Elem::cbf16;
  throw InputError("/precision/compute", "the wafer compiler maps fp32 (fmacs) and 16-bit compute in fp16, bf16 or cbf16 (16-bit weights and activations, fp32 sums: fmachs) in this build; '" +
                                             compute + "' is not mapped yet",
                   "set precision.compute to fp32, fp16, bf16 or cbf16, or run the model on target.kind neuroncore");
}

void wafer_rect_option(const json& m, wafer::MappingOptions& mo) {
  if (!m.contains("wafer_rect")) return;
  const auto r = m["wafer_rect"].get<std::vector<int64_t>>();
  if (r.size() != 2) throw InputError("/mapping/wafer_rect", "a rectangle is [width, height] in PEs");
  mo.rect_width = r[0];
  mo.rect_height = r[1];
}

wafer::FabricOptions compiled_fabric_options(const Scenario& s, const wafer::WaferConfig& cfg, Heartbeat* hb, const wafer::LoadedLayout* L) {
  wafer::FabricOptions fo;
  if (hb) fo.progress = [hb, hz = cfg.clock_hz](int64_t cycle, int64_t hops) { hb->tick(static_cast<double>(cycle) / hz, hops); };
  fo.max_cycles = static_cast<int64_t>(s.resolved["run"]["max_time"].get<double>() * cfg.clock_hz);
  fo.record = trace_records(s);
  if (fo.record && L) fo.record_only = wafer_trace_pes(s.resolved["trace"], *L);
  fo.summary = trace_wanted(s);
  fo.threads = wafer_threads(s);
  fo.stop = [] { return interrupt_requested(); };  // SIGINT stops a long fabric run (tessera exits 130, nothing written)
  fo.task_ends = true;
  fo.task_logs = {"red", "ldd"};  // the sequencer's shared tasks: their n-th end on a PE is kernel n's
  // The compiled programs never write what a memory-only op reads while it runs, so those ops may
  // compute at issue -- unless faults are armed: a bit flipped mid-op must be seen element by element.
  fo.eager_memory_ops = s.resolved["run"]["faults"].empty();
  fo.host_memory_budget = static_cast<int64_t>(s.resolved["run"]["host_memory"].get<double>());
  fo.comm = fabric_comm();  // under mpirun: a stripe of rows per rank
  return fo;
}

void write_compiled_wafer(const wafer::Compiled& cp, const RunOptions& opt) {
  if (!opt.emit_program) return;
  const std::filesystem::path out(opt.out_dir);
  std::filesystem::create_directories(out / "compiled");
  write_file_atomic((out / "layout.json").string(), cp.layout_json);
  for (const auto& [file, t] : cp.programs) write_file_atomic((out / file).string(), t.text());
}

wafer::LoadedLayout load_compiled_wafer(const wafer::Compiled& cp, const wafer::WaferConfig& cfg) {
  try {
    return wafer::load_layout_text(cp.layout_json, "compiled layout", "", cfg, nullptr, &cp.programs);
  } catch (const InputError& e) {
    throw std::runtime_error(std::string("the wafer compiler produced an invalid layout: ") + e.what());
  }
}

namespace {
// Whether a compiled layout failed to load because a PE's arrays, as the program builder packs them
// (first fit by live range, in declaration order), need more SRAM than it has -- the compiler's
// rectangle search counts the phases' largest sum, which the packing can exceed by its holes.
std::optional<std::string> sram_overflow(const InputError& e) {
  for (const auto& d : e.diagnostics())
    if (d.message.rfind("data needs ", 0) == 0) return d.message;
  return std::nullopt;
}
}  // namespace

void stream_compiled_weights(const wafer::Compiled& cp, wafer::Fabric& fab, wafer::MemoryX& mx, wafer::SwarmX& sx, const sc_core::sc_time& t_start) {
  const models::ClockDomain& ck = fab.clock();
  const int64_t c_start = ck.cycle_at_or_after(static_cast<models::Femtos>(t_start.value()));
  // Kernels sharing a port (weight streaming, one per orientation) queue their streams on its
  // lanes in layer order, then (training) the backward pass's reloads in theirs.
  std::map<std::pair<std::string, int64_t>, std::pair<std::vector<uint32_t>, std::vector<int64_t>>> lanes_of;
  std::vector<const wafer::DenseKernel*> order;
  for (const auto& k : cp.kernels) order.push_back(&k);
  for (const int64_t l : cp.reloads) order.push_back(&cp.kernels[static_cast<size_t>(l)]);
  for (const wafer::DenseKernel* kp : order) {  // from the step's start (MemoryX serves them one after another)
    const wafer::DenseKernel& k = *kp;
    const wafer::SwarmX::Stream st = sx.broadcast(mx.address(k.mx_tensor), mx.count(k.mx_tensor), t_start);
    for (int64_t lane = 0; lane < k.lanes; ++lane) {
      std::vector<uint32_t> pl(static_cast<size_t>(k.lane_len));
      std::vector<int64_t> ready(static_cast<size_t>(k.lane_len));
      for (int64_t t = 0; t < k.lane_len; ++t) {
        const size_t i = static_cast<size_t>(t * k.lanes + lane);
        // MemoryX holds fp32 masters; a 16-bit mapping takes them rounded to its format at the port.
        pl[static_cast<size_t>(t)] = wafer::encode_elem(st.values[i], cp.compute);
        ready[static_cast<size_t>(t)] = ck.cycle_at_or_after(static_cast<models::Femtos>(st.ready[i].value())) - c_start;
      }
      auto& [all, rdy] = lanes_of[{k.port, lane}];
      all.insert(all.end(), pl.begin(), pl.end());
      rdy.insert(rdy.end(), ready.begin(), ready.end());
    }
  }
  for (auto& [pl, v] : lanes_of) {
    // Ready cycles must not decrease along a lane (SwarmX hands bursts out in order).
    for (size_t t = 1; t < v.second.size(); ++t) v.second[t] = std::max(v.second[t], v.second[t - 1]);
    fab.set_port_stream(pl.first, pl.second, std::move(v.first), std::move(v.second));
  }
}

int run_wafer_graph(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto wall0 = std::chrono::steady_clock::now();
  const wafer::WaferConfig cfg = wafer::WaferConfig::from(s.params);
  const std::string compute = s.resolved["precision"]["compute"].get<std::string>();
  const wafer::Elem compute_elem = wafer_compute(s);
  if (!s.resolved["run"]["numerics"].get<bool>()) con.warn("/run/numerics: the wafer model always computes values");

  graph::Graph g = load_model(s);
  check_expect_names(s, g);
  const StepSchedule sched = StepSchedule::from(s.resolved["run"]);
  const auto out_sizes = output_sizes(g);
  const std::vector<StepClosure> closures = parse_closures(s.resolved["step_closures"], g.outputs, &out_sizes);
  HostMemory mem = precheck_graph_data(s, g, sched.steps, true);
  const StepInputs step_inputs(s, g, sched.steps);
  for (const auto& w : sched.warnings) con.warn(w);
  std::map<std::string, Tensor> inputs = step_inputs.at(0);

  // Compile.
  const json& m = s.resolved["mapping"];
  wafer::MappingOptions mo;
  mo.compute = compute_elem;
  const std::string mode = m["mode"].get<std::string>();
  if (m.contains("wafer_block")) mo.block = m["wafer_block"].get<int64_t>();
  wafer_rect_option(m, mo);
  const auto c0 = std::chrono::steady_clock::now();
  enter_phase("compile");
  // The compiler lowers the canonical graph (mapper/passes/canonicalize.hpp); the reference keeps
  // running the graph as exported.
  // Micro-batches (weight streaming, docs/wafer-compiler.md "Micro-batches"): the program is
  // compiled for `mb` samples and runs B / mb times a step, each run streaming the weights again.
  const int64_t B = g.inputs.empty() || g.value(g.inputs[0]).shape.empty() ? 1 : g.value(g.inputs[0]).shape[0];
  const json& mbj = m["micro_batch"];
  bool warned = false;
  // (A recurrent layer reading the input as it is takes it as [steps, batch, features]: its first
  // axis, which micro-batches would split, is the sequence.)
  bool seq_first = false;
  for (const auto& n : g.nodes) seq_first = seq_first || ((n.op == "RNN" || n.op == "GRU" || n.op == "LSTM") && !g.inputs.empty() && !n.inputs.empty() && n.inputs[0] == g.inputs[0]);
  auto compile_for = [&](int64_t b) {
    graph::Graph cg = g;
    if (b != B && seq_first)
      throw InputError("/mapping/micro_batch", "micro-batches of " + std::to_string(b) + ": they split the input's first axis, which for this model is the sequence (a recurrent layer reads the input as [steps, batch, features]), not the batch",
                       "keep the input whole (mapping.micro_batch " + std::to_string(B) + ", its first dimension), or export the model with batch_first=True (the batch first: micro-batches then split it)");
    if (b != B) passes::with_batch(cg, b);
    passes::canonicalize(cg, false);  // (recurrent layers kept whole: one kernel per layer and step)
    if (mode == "weight_streaming" || (b != B && mode == "auto")) {  // (micro-batches stream the weights)
      mo.mode = wafer::MapMode::weight_streaming;
      return wafer::compile(cg, cfg, mo);
    }
    mo.mode = wafer::MapMode::pipelined;
    try {
      return wafer::compile(cg, cfg, mo);
    } catch (const wafer::DoesNotFit&) {
      throw;
    } catch (const InputError& e) {
      // auto: weights that do not fit on the wafer stream instead.
      if (mode != "auto" || e.diagnostics().empty() || e.diagnostics()[0].where != "/mapping/mode") throw;
      if (!warned) con.warn("mapping.mode auto: " + e.diagnostics()[0].message + "; using weight streaming");
      warned = true;
      mo.mode = wafer::MapMode::weight_streaming;
      return wafer::compile(cg, cfg, mo);
    }
  };
  int64_t mb = B;
  wafer::Compiled cp;
  if (mbj.is_number()) {
    mb = mbj.get<int64_t>();
    if (B % mb != 0)
      throw InputError("/mapping/micro_batch", std::to_string(mb) + " does not divide the batch of " + std::to_string(B), "give a divisor of the batch, or \"auto\"");
    if (mb != B && mode == "pipelined")
      throw InputError("/mapping/micro_batch", "micro-batches run in weight streaming mode (each streams the weights again), not pipelined",
                       "set mapping.mode to weight_streaming or auto, or micro_batch to the whole batch (" + std::to_string(B) + ")");
    cp = compile_for(mb);
  } else {
    mb = fit_micro_batch(B, [&](int64_t b) { cp = compile_for(b); });
    if (mb != B)
      con.detail("mapping.micro_batch auto: the batch of " + std::to_string(B) + " does not fit a PE's SRAM at once; " + std::to_string(B / mb) +
                 " micro-batches of " + std::to_string(mb));
  }
  // The layout, loaded (its programs instantiated and checked); the rectangle the compiler chose
  // grown (twice the growth each way, within the fabric) while a PE's packed arrays do not fit
  // (docs/wafer-compiler.md "Weight streaming").
  std::optional<wafer::LoadedLayout> loaded;
  while (!loaded) {
    try {
      loaded = wafer::load_layout_text(cp.layout_json, "compiled layout", "", cfg, nullptr, &cp.programs);
    } catch (const InputError& e) {
      const std::optional<std::string> over = sram_overflow(e);
      const bool can_grow = cp.mode == wafer::MapMode::weight_streaming && cp.rect_grow > 0 &&
                            (cp.fabric_width < cfg.fabric_width || cp.fabric_height < cfg.fabric_height);
      if (!over || !can_grow) throw std::runtime_error(std::string("the wafer compiler produced an invalid layout: ") + e.what());
      con.detail("mapping.wafer_rect: the " + std::to_string(cp.fabric_width) + " x " + std::to_string(cp.fabric_height) + " rectangle's packed arrays do not fit (" + *over +
                 "); a larger one");
      mo.rect_grow0 = cp.rect_grow * 2;
      cp = compile_for(mb);
    }
  }
  const int64_t nmb = B / mb;
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  const bool ws = cp.mode == wafer::MapMode::weight_streaming;
  int64_t pes = 0;
  for (const auto& k : cp.kernels) pes = ws ? std::max(pes, k.pes()) : pes + k.pes();
  const double pred_s = cp.predicted_s * static_cast<double>(nmb);  // a step: every micro-batch
  con.out(con.bold("predicted") + " " + format_num(pred_s * 1e6, "%.3f") + " us (" +
          (nmb > 1 ? std::to_string(nmb) + " micro-batches of " + std::to_string(mb) + (mb == 1 ? " sample, " : " samples, ") + format_num(cp.predicted_s * 1e6, "%.3f") + " us each; " : std::string()) +
          std::to_string(cp.predicted_cycles) + " cycles; compiled " + std::to_string(cp.kernels.size()) + " kernel(s), " + (ws ? "weight streaming" : "pipelined") + ", " + std::to_string(pes) + " PEs in " +
          std::to_string(cp.fabric_width) + " x " + std::to_string(cp.fabric_height) + ", " + format_num(compile_s * 1e3, "%.1f") + " ms)");
  const wafer::LoadedLayout L = std::move(*loaded);
  {
    const wafer::FabricOptions fo = compiled_fabric_options(s, cfg);
    mem.parts.push_back({"wafer fabric", static_cast<double>(wafer::Fabric::check_host_memory(L, cfg, fo.host_memory_budget))});
    if (trace_wanted(s)) check_wafer_trace_pes(s.resolved["trace"], L);
    mem.check(s);
  }
  if (opt.check_only) {
    // --verbose: each kernel's prediction, as run's kernel table counts it (from the previous
    // kernel's output to this one's), without simulating.
    const std::vector<int64_t> from = predicted_starts(cp);
    for (size_t l = 0; l < cp.kernels.size(); ++l) {
      const auto& k = cp.kernels[l];
      const int64_t c = k.est.end - from[l];
      con.detail("kernel " + std::to_string(l) + " " + k.name + " (" + k.op + "): predicted " + format_num(static_cast<double>(c) / cfg.clock_hz * 1e6, "%.3f") + " us, " +
                 std::to_string(c) + " cycles" + (ws ? ", weights ready at cycle " + std::to_string(k.est.weights_ready) : std::string()));
    }
    if (!s.resolved["run"]["faults"].empty()) {  // faults name PEs, arrays and routes: armed on the loaded fabric (not run)
      models::set_fs_resolution();
      wafer::FabricOptions fo = compiled_fabric_options(s, cfg);
      fo.comm.reset();  // (checked, not run: no ranks)
      wafer::Fabric fab("wafer", cfg, fo);
      fab.load(L);
      std::vector<std::string> what;
      arm_wafer_faults(s, fab, what);
    }
    note_checked(opt, "compiled " + std::to_string(cp.kernels.size()) + " kernel(s), " + (ws ? "weight streaming" : "pipelined") + ", " +
                          std::to_string(pes) + " PEs, predicted " + format_num(pred_s * 1e6, "%.3f") + " us" +
                          (nmb > 1 ? " (" + std::to_string(nmb) + " micro-batches of " + std::to_string(mb) + ")" : std::string()));
    note_checked(opt, "inputs, host memory " + format_num(mem.total() / (1024.0 * 1024), "%.1f") + " MiB");
    return 0;
  }
  const std::filesystem::path out(opt.out_dir);
  write_file_atomic((out / "compile_report.txt").string(), wafer::compile_report(cp, cfg));
  write_compiled_wafer(cp, opt);

  // Elaborate the fabric (and MemoryX / SwarmX), place constants and inputs, stream weights.
  enter_phase("elaborate");
  models::set_fs_resolution();
  Heartbeat heartbeat("simulating", cp.predicted_s, "hops");  // the prediction is per run (a micro-batch)
  wafer::Fabric fab("wafer", cfg, compiled_fabric_options(s, cfg, &heartbeat, &L));
  fab.load(L);
  wafer::MemoryX mx("memoryx", cfg);
  wafer::SwarmX sx("swarmx", cfg);
  sx.socket.bind(mx.socket);
  for (const auto& a : cp.constants) fab.write_array(a.x, a.y, a.array, a.values);
  // Every layer's weights go to MemoryX in the order its lines consume them (weight streaming).
  if (ws)
    for (const auto& k : cp.kernels) mx.add_tensor(k.mx_tensor, cp.memoryx_layout(k));
  // One step: the step's input into the PEs that hold it; SwarmX streams every layer's weights in
  // layer order from the step's start (MemoryX serves them one after another); the fabric runs.
  // With micro-batches, each run takes its samples of the step's input.
  sc_core::sc_time t_start = sc_core::sc_time_stamp();
  auto start_step = [&](const std::map<std::string, Tensor>& in, int64_t part) {
    const Tensor& x = in.at(cp.input);
    for (const auto& a : cp.place_input(nmb > 1 ? batch_part(x, part, nmb) : x)) fab.write_array(a.x, a.y, a.array, a.values);
    if (!cp.input2.empty()) {  // a decoder's memory: beside the holder its cross-attention's K and V read
      const Tensor& x2 = in.at(cp.input2);
      for (const auto& a : cp.place_input2(nmb > 1 ? batch_part(x2, part, nmb) : x2)) fab.write_array(a.x, a.y, a.array, a.values);
    }
    t_start = sc_core::sc_time_stamp();
    if (ws) stream_compiled_weights(cp, fab, mx, sx, t_start);
  };
  // Faults are armed for the first step only.
  std::vector<std::string> fault_what;
  json faults = arm_wafer_faults(s, fab, fault_what);
  start_step(inputs, 0);
  fab.start();
  install_interrupt_handlers();
  enter_phase("simulate");
  sc_core::sc_start();
  tessera::models::after_systemc();
  poll_interrupt();
  report_wafer_faults(faults, fault_what, fab);
  fab.clear_faults();
  if (fab.error()) {  // not thrown: see run_neuroncore.cpp
    con.error(Diagnostic{"compiled layout", *fab.error(), "a compiler bug unless faults were injected: report it with the scenario"}.str());
    return 2;
  }
  if (!fab.finished()) throw std::runtime_error("the fabric did not finish (SystemC ran out of events)");
  host_note("threads", {{"requested", s.resolved["run"]["threads"]}, {"used", fab.threads_used()}, {"ranks", fab.ranks_used()}});
  const wafer::FabricStats st = fab.stats();  // the first run's (the kernel table is the first run's; the latency the first step's)
  json report = new_report(s);
  const json& expect = s.resolved["expect"];
  std::vector<std::string> failures;
  bool all_pass = true;

  // Kernels: a kernel's output is complete when its chain ends' `red` task ends; kernel times are
  // from the previous kernel's output to its own (they partition the run, like the estimate's).
  con.out(std::string("\n") + "kernel                        predicted      simulated    error     PEs  weights ready  weight wait");
  std::vector<PredictedKernel> pred_spans, sim_spans;
  const std::vector<int64_t> pred_from = predicted_starts(cp);
  int64_t prev_sim = 0;
  json layers = json::array();
  // (Sequenced: the shared tasks' l-th ends on a PE are kernel l's.)
  auto end_of = [&](int64_t x, int64_t y, const char* task, size_t l) {
    if (!cp.sequenced) return fab.task_end(x, y, task + std::to_string(l));
    const std::vector<int64_t>& log = fab.task_end_log(x, y, task);
    return l < log.size() ? log[l] : int64_t{-1};
  };
  for (size_t l = 0; l < cp.kernels.size(); ++l) {
    const auto& k = cp.kernels[l];
    int64_t end = 0, wready = -1;
    for (int64_t i = 0; i < (k.k_on_columns ? k.h : k.w); ++i) {  // every chain end (padding lines too)
      const int64_t px = k.k_on_columns ? k.w - 1 : i, py = k.k_on_columns ? i : k.h - 1;
      end = std::max(end, end_of(k.x0 + px, k.y0 + py, "red", l));
    }
    if (ws)
      for (int64_t y = 0; y < k.h; ++y)
        for (int64_t x = 0; x < k.w; ++x) wready = std::max(wready, end_of(k.x0 + x, k.y0 + y, "ldd", l));
    // Waiting for weights: how long after the previous layer's output (the run's start for the
    // first) the last PE of this layer got its weight block.
    const int64_t wait = ws ? std::max<int64_t>(0, wready - prev_sim) : 0;
    const int64_t prev_pred = pred_from[l];
    const int64_t simk = end - prev_sim, predk = k.est.end - prev_pred;
    const double e = simk > 0 ? (static_cast<double>(predk) - static_cast<double>(simk)) / static_cast<double>(simk) * 100 : 0.0;
    report["kernels"].push_back({{"name", k.name},
                                 {"op", k.op},
                                 {"predicted_cycles", predk},
                                 {"simulated_cycles", simk},
                                 {"clock_hz", cfg.clock_hz},
                                 {"predicted_s", static_cast<double>(predk) / cfg.clock_hz},
                                 {"simulated_s", static_cast<double>(simk) / cfg.clock_hz},
                                 {"error_pct", e},
                                 {"flops", k.est.flops},
                                 {"bytes", k.est.weight_bytes},
                                 {"pes", k.pes()},
                                 {"utilisation", simk > 0 ? k.est.flops / 2 / (static_cast<double>(k.pes()) * static_cast<double>(simk)) : 0.0},
                                 {"rect", {k.x0, k.y0, k.w, k.h}},
                                 {"block", {k.kb, k.nb}},
                                 {"simulated_end_cycle", end},
                                 {"predicted_end_cycle", k.est.end}});
    if (ws) {
      report["kernels"].back()["weights_ready_cycle"] = wready;
      report["kernels"].back()["predicted_weights_ready_cycle"] = k.est.weights_ready;
      report["kernels"].back()["weight_wait_cycles"] = wait;
      layers.push_back({{"layer", l}, {"kernel", k.name}, {"weights_ready_cycle", wready}, {"output_ready_cycle", end}, {"weight_wait_cycles", wait},
                        {"memoryx_tensor", k.mx_tensor}, {"port", k.port}, {"bytes", k.lanes * k.lane_len * 4}});
    }
    char line[240];
    std::snprintf(line, sizeof line, "%-28.28s %9.3f us %11.3f us %+7.1f%% %7lld %14s %12s", k.name.c_str(), static_cast<double>(predk) / cfg.clock_hz * 1e6,
                  static_cast<double>(simk) / cfg.clock_hz * 1e6, e, static_cast<long long>(k.pes()), ws ? std::to_string(wready).c_str() : "-",
                  ws ? std::to_string(wait).c_str() : "-");
    con.out(line);
    // (A kernel that ends before the one listed before it -- kernels overlap on one rectangle --
    // shows as an empty slice on the trace's kernel tracks, which must nest; the table keeps the
    // negative difference.)
    pred_spans.push_back({k.name, static_cast<double>(prev_pred) / cfg.clock_hz, static_cast<double>(std::max(prev_pred, k.est.end)) / cfg.clock_hz});
    sim_spans.push_back({k.name, static_cast<double>(prev_sim) / cfg.clock_hz, static_cast<double>(std::max(prev_sim, end)) / cfg.clock_hz});
    prev_sim = std::max(prev_sim, end);
  }
  // The step's other micro-batches (the kernel table above is the first one's).
  auto read_y = [&] { return cp.gather_output([&](int64_t x, int64_t yy, const std::string& a) { return fab.read_array(x, yy, a); }); };
  std::vector<PredictedKernel> step_spans;
  std::vector<Tensor> parts{read_y()};
  std::vector<int64_t> run_cycles{st.cycles};
  auto run_parts = [&](int64_t step, int64_t from) {
    for (int64_t i = from; i < nmb; ++i) {
      if (i > 0 || step > 0) {
        start_step(inputs, i);
        fab.start();
        sc_core::sc_start();
        tessera::models::after_systemc();
        poll_interrupt();
        if (fab.error()) {
          con.error(Diagnostic{"compiled layout, step " + std::to_string(step) + (nmb > 1 ? ", micro-batch " + std::to_string(i) : std::string()), *fab.error(),
                               "report it with the scenario"}.str());
          return false;
        }
        parts.push_back(read_y());
        run_cycles.push_back(fab.stats().cycles);
      }
    }
    return true;
  };
  if (!run_parts(0, 1)) return 2;
  int64_t step0_cycles = 0;
  for (const int64_t c : run_cycles) step0_cycles += c;
  const double sim_s = static_cast<double>(step0_cycles) / cfg.clock_hz;
  report["latency"]["simulated_s"] = sim_s;
  report["latency"]["predicted_s"] = pred_s;
  const double err = (pred_s - sim_s) / sim_s * 100;
  report["latency"]["error_pct"] = err;
  if (nmb > 1) report["latency"]["micro_batches"] = {{"count", nmb}, {"samples", mb}, {"predicted_s_each", cp.predicted_s}, {"simulated_s_first", static_cast<double>(st.cycles) / cfg.clock_hz}};
  {
    char line[200];
    if (nmb > 1) {
      std::snprintf(line, sizeof line, "%-28s %9.3f us %11.3f us %+7.1f%%", "total (one micro-batch)", cp.predicted_s * 1e6, static_cast<double>(st.cycles) / cfg.clock_hz * 1e6,
                    (cp.predicted_s * cfg.clock_hz - static_cast<double>(st.cycles)) / static_cast<double>(st.cycles) * 100);
      con.out(line);
    }
    std::snprintf(line, sizeof line, "%-28s %9.3f us %11.3f us %+7.1f%%", nmb > 1 ? ("total (" + std::to_string(nmb) + " micro-batches)").c_str() : "total", pred_s * 1e6, sim_s * 1e6, err);
    con.out(line);
    double flops = 0;
    for (const auto& k : cp.kernels) flops += k.est.flops * static_cast<double>(nmb);
    report["latency"]["flops"] = flops;
    report["latency"]["effective_flops_per_s"] = flops / sim_s;
    con.out("effective " + format_num(flops / sim_s / 1e12, "%.4f") + " TFLOP/s (" + format_num(flops, "%.4g") + " FLOPs in " + std::to_string(step0_cycles) +
            " simulated cycles" + (nmb > 1 ? " over " + std::to_string(nmb) + " runs" : std::string()) + ")");
  }
  check_latency_error(expect, err, report, all_pass, failures);
  report["compile"] = {{"mode", ws ? "weight_streaming" : "pipelined"},
                       {"kernels", cp.kernels.size()},
                       {"fabric", {cp.fabric_width, cp.fabric_height}},
                       {"pes", pes},
                       {"colors", cp.colors_used},
                       {"sram_high_water_bytes", cp.sram_high_water},
                       {"predicted_cycles", cp.predicted_cycles}};
  if (nmb > 1) report["compile"]["micro_batch"] = mb;
  report["faults"] = faults;
  report["stats"] = wafer_stats_json(st, static_cast<double>(st.cycles) / cfg.clock_hz);  // (the first run's)
  if (ws) {
    const json mf = stream_figures(mx.transfers()), sf = stream_figures(sx.transfers());
    report["weight_streaming"] = {
        {"memoryx",
         {{"bytes_read", mx.stats().bytes_read}, {"transactions", mx.stats().transactions}, {"busy_s", mf["busy_s"]},
          {"achieved_bandwidth_Bps", mf["achieved_bandwidth_Bps"]}}},
        {"swarmx",
         {{"bytes_broadcast", sx.stats().bytes_broadcast}, {"busy_s", sf["busy_s"]}, {"achieved_bandwidth_Bps", sf["achieved_bandwidth_Bps"]}}},
        {"port_wavelets", st.port_in_wavelets},
        {"layers", layers}};
    con.out("weight streaming: MemoryX read " + format_num(static_cast<double>(mx.stats().bytes_read), "%.0f") + " B at " +
            format_num(mf["achieved_bandwidth_Bps"].get<double>() / 1e9, "%.2f") + " GB/s achieved; " +
            std::to_string(st.port_in_wavelets) + " weight wavelets into the fabric");
  }

  // Steps: closures on each step's outputs (fetched from the PEs), the later steps run on the same
  // elaborated fabric with their own inputs. The outputs checked below are the last step's.
  Tensor y;
  std::vector<StepMark> closure_marks;
  double t_steps = 0, last_run = 0;  // last_run: where the last run (micro-batch) starts
  for (int64_t step = 0; step < sched.steps; ++step) {
    if (step > 0) {
      inputs = step_inputs.at(step);
      parts.clear();
      run_cycles.clear();
      if (!run_parts(step, 0)) return 2;
    }
    y = nmb > 1 ? batch_concat(parts) : parts[0];
    int64_t cyc = 0;
    for (const int64_t c : run_cycles) cyc += c;
    if (sched.steps > 1) step_spans.push_back({"step " + std::to_string(step), t_steps, t_steps + static_cast<double>(cyc) / cfg.clock_hz});
    for (size_t i = 0, at = 0; i < run_cycles.size(); at += static_cast<size_t>(run_cycles[i]), ++i) {
      const double t0 = t_steps + static_cast<double>(at) / cfg.clock_hz;
      if (nmb > 1) step_spans.push_back({"micro-batch " + std::to_string(i), t0, t0 + static_cast<double>(run_cycles[i]) / cfg.clock_hz});
      last_run = t0;
    }
    t_steps += static_cast<double>(cyc) / cfg.clock_hz;
    json rec = {{"step", step}, {"cycles", cyc}, {"simulated_s", static_cast<double>(cyc) / cfg.clock_hz},
                {"activation", sched.is_activation(step)}, {"checkpoint", sched.is_checkpoint(step)}};
    finish_step(report, std::move(rec), closures, sched, step, {{cp.output, y}}, opt.out_dir, t_steps, closure_marks);
  }
  warn_if_stop_ignored(sched.steps);
  if (sched.steps > 1)
    con.out(std::to_string(sched.steps) + " steps: " + format_num(t_steps * 1e6, "%.4f") + " us simulated in all, " + format_num(t_steps / static_cast<double>(sched.steps) * 1e6, "%.4f") +
            " us per step");
  // The reference on the last step's inputs.
  enter_phase("reference");
  ReferenceResult rr = cached_reference(g, inputs, [](size_t, size_t) { poll_interrupt(); });
  const std::map<std::string, Tensor> reference = std::move(rr.outputs);
  host_note("reference_cache", rr.cache);
  if (rr.cache == "hit") con.detail("reference: the cached result of an identical model and inputs (" + reference_cache_dir() + ")");
  heartbeat.finish();
  enter_phase("check");

  // Outputs.
  const Tolerance deftol = default_tolerance(compute);
  {
    std::string file;
    if (s.resolved["outputs"]["save"].get<bool>()) {
      file = s.resolved["outputs"]["dir"].get<std::string>() + "/" + safe_file_name(cp.output) + ".npy";
      write_npy((out / file).string(), y);
    }
    con.out("\n  " + cp.output + " " + std::string(dtype_name(y.dtype())) + shape_str(y.shape()) +
            check_machine_output(cp.output, y, file, &reference.at(cp.output), deftol, expect, report, all_pass, failures));
  }
  con.out(con.bold("simulated") + " " + format_num(sim_s * 1e6, "%.4f") + " us (" + std::to_string(st.cycles) + " cycles at " + format_num(cfg.clock_hz / 1e6, "%.0f") +
          " MHz, " + std::to_string(st.program_pes) + " PEs, " + std::to_string(st.wavelet_hops) + " wavelet hops, preset " + s.preset + ")");
  compare_published(report, sim_s);
  if (trace_wanted(s)) {
    const std::string note = write_trace_file(
        s.resolved["trace"], build_wafer_trace(s.resolved["trace"], L, fab, s.name, &mx, &sx, t_start.to_seconds() - last_run, pred_spans, sim_spans,
                                              sched.steps > 1 || nmb > 1 ? step_spans : std::vector<PredictedKernel>{}, closure_marks, last_run),
        opt.out_dir);
    report["trace"] = {{"file", s.resolved["trace"]["file"]}};
    con.out(note);
  }
  write_wafer_heatmap(s, fab, s.name + " (compiled, " + s.preset + (sched.steps > 1 ? ", last step" : "") + (nmb > 1 ? ", last micro-batch" : "") + ")", opt.out_dir, report);
  return finish_run(opt.out_dir, report, all_pass, failures, std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(), {{"compile_s", compile_s}});
}

}  // namespace tessera::sim
