// `tessera run` on target.kind = "neuroncore": a hand-written program (model.program, with an
// optional reference model next to it) or a graph compiled by mapper/neuroncore.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <systemc>

#include "isa/fileio.hpp"
#include "isa/interrupt.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/npy.hpp"
#include "mapper/neuroncore/compile.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "models/common/clock.hpp"
#include "models/common/systemc_env.hpp"
#include "models/neuroncore/core.hpp"
#include "sim/check.hpp"
#include "sim/console.hpp"
#include "sim/reference_cache.hpp"
#include "sim/model.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/run_engines.hpp"
#include "sim/run_neuroncore.hpp"
#include "sim/session.hpp"
#include "sim/trace_neuroncore.hpp"

namespace tessera::sim {

using json = nlohmann::json;
using namespace tessera::neuroncore;

namespace {

// An input of dtype `want` and shape `shape`: its .npy, checked (check_input_file), or seeded
// random fp32 values.
Tensor input_tensor(const json& spec, const std::string& name, DType want, const Shape& shape) {
  if (spec.contains("file")) return read_input_file(spec, "/inputs/" + schema::pointer_token(name), name, want, {shape});
  const json& r = spec["random"];
  return random_tensor(DType::f32, shape, r["seed"].get<uint64_t>(), r["dist"] == "normal", r["scale"].get<double>());
}

// What runs on the core and how graph values map to HBM.
struct Binding {
  std::string name;        // scenario input / output name
  const HbmTensor* hbm;
  IoBinding at;            // where the value's elements sit in the tensor
  Shape shape;             // the value's own shape
};

// Element offsets of a binding's value in row-major order (its shape walked with its strides).
std::vector<int64_t> element_offsets(const IoBinding& b, const Shape& shape) {
  std::vector<int64_t> r(static_cast<size_t>(shape_numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = 0; i < r.size(); ++i) {
    int64_t off = b.offset;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * b.strides[d];
    r[i] = off;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

bool row_major(const IoBinding& b, const Shape& shape) {
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && b.strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

struct Job {
  Program prog;
  std::vector<Binding> inputs, outputs;
  std::vector<std::pair<std::string, Tensor>> init;  // HBM tensor name -> data
  std::optional<Compiled> compiled;
  double compile_s = 0;
};

DType compute_dtype(const std::string& p) { return *parse_dtype(p); }

}  // namespace

MappingOptions nc_mapping_options(const Scenario& s) {
  MappingOptions mo;
  mo.compute = compute_dtype(s.resolved["precision"]["compute"].get<std::string>());
  const json& m = s.resolved["mapping"];
  mo.tile_m = m.value("tile_m", 0);
  mo.tile_n = m.value("tile_n", 0);
  mo.buffers = m.value("buffers", 0);
  static const std::map<std::string, MatmulSchedule> schedules = {{"auto", MatmulSchedule::automatic},
                                                                  {"tiled", MatmulSchedule::tiled},
                                                                  {"hoisted", MatmulSchedule::hoisted},
                                                                  {"blocked_mn", MatmulSchedule::blocked_mn},
                                                                  {"blocked_mnk", MatmulSchedule::blocked_mnk}};
  mo.matmul_schedule = schedules.at(m.value("matmul_schedule", std::string("auto")));
  mo.block_m = m.value("block_m", 0);
  mo.block_n = m.value("block_n", 0);
  mo.block_k = m.value("block_k", 0);
  mo.fuse_attention = m.value("fuse_attention", true);
  static const std::map<std::string, AttentionKernel> attention_kernels = {
      {"auto", AttentionKernel::automatic}, {"one_bank", AttentionKernel::one_bank}, {"key_blocks", AttentionKernel::key_blocks}};
  mo.attention_kernel = attention_kernels.at(m.value("attention_kernel", std::string("auto")));
  mo.fuse_norm = m.value("fuse_norm", true);
  mo.prefetch_weights = m.value("prefetch_weights", true);
  return mo;
}

// Run to starvation like a plain sc_start(), but in slices of simulated time so that a SIGINT is
// seen while the model runs (the model knows nothing of it). A slice is resized to take roughly
// 10-80 ms of wall time; slicing does not change the simulated result (reports are identical).
void run_systemc_sliced(double predicted_s) {
  using sc_core::sc_time;
  Heartbeat heartbeat("simulating", predicted_s);
  const double t0 = sc_core::sc_time_stamp().to_seconds();
  sc_time slice(10, sc_core::SC_US);
  const sc_time min_slice(1, sc_core::SC_US), max_slice(1, sc_core::SC_SEC);
  do {
    const auto w0 = std::chrono::steady_clock::now();
    // At least up to the next event: a slice that ends before it would not move time at all.
    const sc_time next = sc_core::sc_time_to_pending_activity();
    sc_core::sc_start(next > slice ? next : slice, sc_core::SC_EXIT_ON_STARVATION);
    models::after_systemc();
    poll_interrupt();
    heartbeat.tick(sc_core::sc_time_stamp().to_seconds() - t0);
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    if (w < 0.01 && slice < max_slice) slice = slice * 2.0;
    else if (w > 0.08 && slice > min_slice) slice = slice / 2.0;
  } while (sc_core::sc_pending_activity());
}

void nc_kernel_table(const Compiled& cp, const Program& prog, const NeuronCore& core, json& report) {
  auto& con = Console::get();
  const ClockDomain& tclk = core.clock(Lane::tensor);
  // Kernels overlap (the scheduler starts a kernel's loads while the previous one computes), so
  // a kernel's simulated time is from the previous kernel's end to its own: the kernel times
  // partition the run and add up to the total, like the estimator's.
  std::vector<models::Femtos> k1(cp.kernels.size(), core.start_time());
  for (const auto& r : core.records()) {
    const int16_t k = prog.instrs[static_cast<size_t>(r.instr)].kernel;
    if (k >= 0) k1[static_cast<size_t>(k)] = std::max(k1[static_cast<size_t>(k)], r.end);
  }
  std::vector<models::Femtos> k0(cp.kernels.size(), core.start_time());
  for (size_t k = 1; k < k1.size(); ++k) {
    k1[k] = std::max(k1[k], k1[k - 1]);
    k0[k] = k1[k - 1];
  }
  con.out(std::string("\n") + "kernel                        predicted      simulated    error   PE util  bound");
  for (size_t k = 0; k < cp.kernels.size(); ++k) {
    const auto& e = cp.kernels[k];
    const double simk = k1[k] > k0[k] ? static_cast<double>(k1[k] - k0[k]) / 1e15 : 0.0;
    const double err = simk > 0 ? (e.seconds - simk) / simk * 100 : 0.0;
    report["kernels"].push_back({{"name", e.name},
                                 {"op", e.op},
                                 {"predicted_cycles", tclk.cycle_at_or_after(static_cast<models::Femtos>(e.seconds * 1e15))},
                                 {"simulated_cycles", tclk.cycle_at_or_after(k1[k]) - tclk.cycle_at_or_after(k0[k])},
                                 {"clock_hz", tclk.hz()},
                                 {"predicted_s", e.seconds},
                                 {"simulated_s", simk},
                                 {"error_pct", err},
                                 {"flops", e.flops},
                                 {"bytes", e.bytes},
                                 {"predicted_tensor_utilisation", e.tensor_utilisation},
                                 {"bound", e.bound}});
    char line[200];
    std::snprintf(line, sizeof line, "%-28.28s %9.3f us %11.3f us %+7.1f%% %7.1f%%  %s", e.name.c_str(), e.seconds * 1e6,
                  simk * 1e6, err, e.tensor_utilisation * 100, e.bound.c_str());
    con.out(line);
  }
}

IoBinding nc_contiguous_binding(const std::string& name, const HbmTensor& t) {
  IoBinding b{name, t.name, 0, {}};
  b.strides.assign(t.shape.size(), 1);
  for (size_t d = t.shape.size(); d-- > 1;) b.strides[d - 1] = b.strides[d] * t.shape[d];
  return b;
}

void nc_write_value(NeuronCore& core, const HbmTensor& t, const Tensor& value, const IoBinding& b) {
  // Host-side placement: the value in the program's layout and dtype (data movement only).
  const Tensor cast = value.dtype() == t.dtype ? value : value.cast(t.dtype);
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  if (row_major(b, value.shape())) {
    core.memory().hbm_write(t.offset + b.offset * es, cast.data(), cast.nbytes());
    return;
  }
  std::vector<std::byte> buf(static_cast<size_t>(shape_numel(t.shape) * es));
  core.memory().hbm_read(t.offset, buf.data(), buf.size());
  const auto offs = element_offsets(b, value.shape());
  for (size_t i = 0; i < offs.size(); ++i)
    std::memcpy(buf.data() + offs[i] * es, cast.data() + static_cast<int64_t>(i) * es, static_cast<size_t>(es));
  core.memory().hbm_write(t.offset, buf.data(), buf.size());
}

Tensor nc_read_value(NeuronCore& core, const HbmTensor& t, const IoBinding& b, const Shape& shape) {
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  Tensor out(t.dtype, shape);
  if (row_major(b, shape)) {
    core.memory().hbm_read(t.offset + b.offset * es, out.data(), out.nbytes());
  } else {
    std::vector<std::byte> buf(static_cast<size_t>(shape_numel(t.shape) * es));
    core.memory().hbm_read(t.offset, buf.data(), buf.size());
    const auto offs = element_offsets(b, shape);
    for (size_t i = 0; i < offs.size(); ++i)
      std::memcpy(out.data() + static_cast<int64_t>(i) * es, buf.data() + offs[i] * es, static_cast<size_t>(es));
  }
  if (out.dtype() != DType::f32 && is_float(out.dtype())) out = out.cast(DType::f32);
  return out;
}

int run_neuroncore(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto wall0 = std::chrono::steady_clock::now();
  const json& model = s.resolved.value("model", json());
  if (model.is_null()) throw InputError("/model", "the scenario has no model", "give /model/onnx, /model/graph or /model/program");
  const bool has_model_graph = model.contains("onnx") || model.contains("graph");
  if (!has_model_graph && s.resolved["run"]["steps"].get<int64_t>() != 1)
    throw InputError("/run/steps", "multi-step runs of hand-written programs are not supported yet (compiled models take run.steps)", "set run.steps to 1");
  if (!has_model_graph && !s.resolved["step_closures"].empty())
    throw InputError("/step_closures", "step closures need a model (compiled runs); hand-written programs do not take them yet", "remove /step_closures");
  if (!has_model_graph && !cpp_step_closures().empty())
    throw InputError("C++ step closure '" + cpp_step_closures().front().name + "'", "step closures need a model (compiled runs); hand-written programs do not take them yet");
  const StepSchedule sched = StepSchedule::from(s.resolved["run"]);
  for (const auto& w : sched.warnings) con.warn(w);

  const CoreConfig cfg = CoreConfig::from(s.params);
  const bool numerics = s.resolved["run"]["numerics"].get<bool>();
  const bool has_graph = model.contains("onnx") || model.contains("graph");
  std::optional<graph::Graph> graph;
  HostMemory mem;
  if (has_graph) {
    graph = load_model(s);
    check_expect_names(s, *graph);
    mem = precheck_graph_data(s, *graph, sched.steps, numerics);
  }
  Job job;
  std::map<std::string, Tensor> given;  // scenario inputs as given (fp32)
  DiagnosticList d;

  if (model.contains("program")) {
    enter_phase("compile");
    const std::string path = model["program"].get<std::string>();
    job.prog = assemble_file(path);
    validate(job.prog, cfg);
    std::vector<std::string> names;
    for (const auto& t : job.prog.hbm) names.push_back(t.name);
    for (const auto& [name, spec] : s.resolved["inputs"].items()) {
      const HbmTensor* t = job.prog.find_hbm(name);
      if (!t) {
        const std::string hint = did_you_mean(name, names);
        d.add("/inputs/" + schema::pointer_token(name), "the program declares no HBM tensor '" + name + "'",
              hint.empty() ? "declare it with .hbm in " + path : "did you mean '" + hint + "'?");
        continue;
      }
      job.inputs.push_back({name, t, nc_contiguous_binding(name, *t), t->shape});
    }
    for (const auto& t : job.prog.hbm)
      if (!s.resolved["inputs"].contains(t.name)) job.outputs.push_back({t.name, &t, nc_contiguous_binding(t.name, t), t.shape});
  } else {
    enter_phase("compile");
    const MappingOptions mo = nc_mapping_options(s);
    const auto c0 = std::chrono::steady_clock::now();
    // The compiler lowers the canonical graph (mapper/passes/canonicalize.hpp); the reference keeps
    // running the graph as exported.
    graph::Graph cg = *graph;
    passes::canonicalize(cg);
    job.compiled = compile(cg, cfg, mo);
    job.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    job.prog = job.compiled->program;
    try {
      validate(job.prog, cfg);
    } catch (const InputError& e) {
      throw std::runtime_error(std::string("the compiler produced an invalid program: ") + e.what());
    }
    for (const auto& b : job.compiled->inputs)
      job.inputs.push_back({b.name, job.prog.find_hbm(b.hbm), b, graph->value(b.name).shape});
    for (const auto& b : job.compiled->outputs)
      job.outputs.push_back({b.name, job.prog.find_hbm(b.hbm), b, graph->value(b.name).shape});
    job.init = job.compiled->hbm_init;
    con.out(con.bold("predicted") + " " + format_num(job.compiled->predicted_s * 1e6, "%.3f") + " us (compiled " +
            count_of(static_cast<int64_t>(job.prog.kernels.size()), "kernel") + ", " + std::to_string(job.prog.instrs.size()) +
            " instructions in " + std::to_string(job.prog.bundles.size()) + " bundles, " + format_num(job.compile_s * 1e3, "%.1f") +
            " ms)");
  }
  enter_phase("inputs");
  for (const auto& b : job.inputs) {
    if (!s.resolved["inputs"].contains(b.name)) {
      d.add("/inputs", "model input '" + b.name + "' has no value", "add /inputs/" + b.name);
      continue;
    }
    // A program's inputs are its HBM tensors'; a model's are its graph inputs' (the compiled binding may store them narrower).
    const DType want = graph && graph->has_value(b.name) ? graph->value(b.name).dtype : b.hbm->dtype;
    try {
      given[b.name] = input_tensor(s.resolved["inputs"][b.name], b.name, want, b.shape);
    } catch (const InputError& e) {
      for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
    }
  }
  d.throw_if_any();
  if (numerics) {
    double hbm = 0;
    for (const auto& t : job.prog.hbm) hbm += static_cast<double>(shape_numel(t.shape)) * static_cast<double>(dtype_size(t.dtype));
    mem.parts.push_back({"NeuronCore HBM", hbm});
  }
  mem.check(s);

  std::vector<StepClosure> closures;
  std::optional<StepInputs> step_inputs;
  if (job.compiled) {
    {
      const auto sizes = output_sizes(*graph);
      closures = parse_closures(s.resolved["step_closures"], graph->outputs, &sizes);
    }
    if (!closures.empty() && !numerics)
      throw InputError(s.resolved["step_closures"].empty() ? "C++ step closure '" + closures.front().name + "'" : std::string("/step_closures"),
                       "step closures need values: run.numerics is false", "remove the closures or --no-numerics");
    if (sched.steps > 1) step_inputs.emplace(s, *graph, sched.steps);
  }
  if (opt.check_only) {
    // --verbose: each kernel's prediction, as run's kernel table shows it, without simulating.
    if (job.compiled)
      for (size_t k = 0; k < job.compiled->kernels.size(); ++k) {
        const auto& e = job.compiled->kernels[k];
        con.detail("kernel " + std::to_string(k) + " " + e.name + " (" + e.op + "): predicted " + format_num(e.seconds * 1e6, "%.3f") + " us, tensor engine " +
                   format_num(e.tensor_utilisation * 100, "%.1f") + "%, " + e.bound);
      }
    note_checked(opt, job.compiled ? "compiled " + count_of(static_cast<int64_t>(job.prog.kernels.size()), "kernel") + ", predicted " +
                                         format_num(job.compiled->predicted_s * 1e6, "%.3f") + " us"
                                   : "program " + std::to_string(job.prog.bundles.size()) + " bundles (hardware rules)");
    note_checked(opt, "inputs, host memory " + format_num(mem.total() / (1024.0 * 1024), "%.1f") + " MiB");
    return 0;
  }
  if (job.compiled) {
    write_file_atomic((std::filesystem::path(opt.out_dir) / "compile_report.txt").string(), compile_report(*job.compiled, cfg));
    if (opt.emit_program) write_file_atomic((std::filesystem::path(opt.out_dir) / "program.s").string(), disassemble(job.prog));
  }

  // The reference: the model (alone, or next to a program) on the values the machine holds:
  // inputs rounded to the dtype they are stored in (for multi-step runs: the last step's inputs).
  std::map<std::string, Tensor> reference;
  if (graph && numerics) {
    if (step_inputs) given = step_inputs->at(sched.steps - 1);
    std::map<std::string, Tensor> ref_in;
    for (const auto& i : graph->inputs) {
      auto it = given.find(i);
      if (it == given.end()) throw InputError("/inputs", "the reference model's input '" + i + "' has no value", "add /inputs/" + i);
      const Binding* b = nullptr;
      for (const auto& x : job.inputs)
        if (x.name == i) b = &x;
      // The reference sees a float input rounded as the machine holds it; integers as given.
      ref_in[i] = b && is_float(it->second.dtype()) && b->hbm->dtype != it->second.dtype() ? it->second.cast(b->hbm->dtype).cast(DType::f32)
                                                                                            : it->second;
    }
    enter_phase("reference");
    ReferenceResult rr = cached_reference(*graph, ref_in, [](size_t, size_t) { poll_interrupt(); });
    reference = std::move(rr.outputs);
    host_note("reference_cache", rr.cache);
    if (rr.cache == "hit") con.detail("reference: the cached result of an identical model and inputs (" + reference_cache_dir() + ")");
    if (step_inputs) given = step_inputs->at(0);
  }

  // Elaborate one core, preload HBM, run.
  enter_phase("elaborate");
  models::set_fs_resolution();
  CoreOptions copt;
  copt.numerics = numerics;
  copt.max_time = static_cast<models::Femtos>(s.resolved["run"]["max_time"].get<double>() * 1e15);
  NeuronCore core("core", cfg, copt);
  if (numerics) {
    for (const auto& [name, data] : job.init) {
      const HbmTensor* t = job.prog.find_hbm(name);
      core.memory().hbm_write(t->offset, data.data(), data.nbytes());
    }
  }
  auto write_inputs = [&](const std::map<std::string, Tensor>& in) {
    if (!numerics) return;
    for (const auto& b : job.inputs) nc_write_value(core, *b.hbm, in.at(b.name), b.at);
  };
  write_inputs(given);
  core.load(job.prog);
  install_interrupt_handlers();
  const double predicted_total = job.compiled ? job.compiled->predicted_s : 0.0;
  const auto run_core = [predicted_total] { run_systemc_sliced(predicted_total); };
  enter_phase("simulate");
  run_core();
  if (!core.finished()) throw std::runtime_error("the NeuronCore did not finish (SystemC ran out of events)");
  // Reported without throwing: unwinding after SystemC's coroutines ran trips ASan's stack
  // bookkeeping (google/sanitizers#189), and the result is the same exit code 2.
  if (core.error()) {
    con.error(Diagnostic{job.prog.source, *core.error(), "fix the program"}.str());
    return 2;
  }

  const CoreStats st = core.stats();  // the first step's (the kernel table and the latency are the first step's)
  const double sim_s = static_cast<double>(st.end_time - core.start_time()) / 1e15;
  const ClockDomain& tclk = core.clock(Lane::tensor);
  json report = new_report(s);
  report["latency"]["simulated_s"] = sim_s;
  const json& expect = s.resolved["expect"];
  std::vector<std::string> failures;
  bool all_pass = true;

  // Kernels: predicted by the estimator, simulated as the span of their instructions.
  if (job.compiled) {
    const Compiled& cp = *job.compiled;
    nc_kernel_table(cp, job.prog, core, report);
    const double err = (cp.predicted_s - sim_s) / sim_s * 100;
    report["latency"]["predicted_s"] = cp.predicted_s;
    report["latency"]["error_pct"] = err;
    report["compile"] = {{"kernels", cp.kernels.size()},
                         {"instructions", job.prog.instrs.size()},
                         {"bundles", job.prog.bundles.size()},
                         {"sbuf_high_water_bytes_per_partition", cp.sbuf_high_water},
                         {"hbm_bytes", cp.hbm_bytes}};
    char line[200];
    std::snprintf(line, sizeof line, "%-28s %9.3f us %11.3f us %+7.1f%%", "total", cp.predicted_s * 1e6, sim_s * 1e6, err);
    con.out(line);
    check_latency_error(expect, err, report, all_pass, failures);
  } else {
    report["latency"]["note"] = "hand-written program: no compiler prediction";
    report["kernels"].push_back({{"name", std::filesystem::path(job.prog.source).stem().string()},
                                 {"op", "program"},
                                 {"predicted_cycles", nullptr},
                                 {"simulated_cycles", tclk.cycle_at_or_after(st.end_time) - tclk.cycle_at_or_after(core.start_time())},
                                 {"clock_hz", tclk.hz()},
                                 {"predicted_s", nullptr},
                                 {"simulated_s", sim_s},
                                 {"error_pct", nullptr}});
  }

  json lanes = json::object();
  for (int l = 0; l < kLanes; ++l) {
    const Lane lane = static_cast<Lane>(l);
    const auto i = static_cast<size_t>(l);
    lanes[std::string(lane_name(lane))] = {
        {"instructions", st.instructions[i]},
        {"busy_cycles", st.busy_cycles[i]},
        {"clock_hz", core.clock(lane).hz()},
        {"utilisation", sim_s > 0 ? static_cast<double>(st.busy_cycles[i]) * core.clock(lane).period_s() / sim_s : 0.0}};
  }
  json stalls = json::object();
  for (size_t c = 0; c < st.stall_fs.size(); ++c)
    stalls[std::string(stall_name(static_cast<Stall>(c)))] = {
        {"seconds", static_cast<double>(st.stall_fs[c]) / 1e15},
        {"issue_cycles", core.clock(Lane::control).cycle_at_or_after(st.stall_fs[c])}};
  json queues = json::array();
  for (size_t q = 0; q < st.dma_queue_bytes.size(); ++q)
    if (st.dma_queue_transfers[q]) queues.push_back({{"queue", q}, {"transfers", st.dma_queue_transfers[q]}, {"bytes", st.dma_queue_bytes[q]}});
  report["stats"] = {{"bundles", st.bundles},
                     {"lanes", lanes},
                     {"stalls", stalls},
                     {"dma_queues", queues},
                     {"hbm_read_bytes", st.hbm_read_bytes},
                     {"hbm_write_bytes", st.hbm_write_bytes},
                     {"sbuf_high_water_bytes_per_partition", st.sbuf_high_water},
                     {"psum_high_water_bytes_per_partition", st.psum_high_water},
                     {"numerics", numerics}};

  // Steps: closures on each step's outputs, read from HBM; later steps run the same program on the
  // same core with their own inputs. The outputs checked below are the last step's.
  auto read_output = [&](const Binding& b) { return nc_read_value(core, *b.hbm, b.at, b.shape); };
  std::vector<PredictedKernel> step_spans;
  std::vector<StepMark> closure_marks;
  const models::Femtos first_start = core.start_time();
  if (job.compiled) {
    double t_steps = 0;
    for (int64_t step = 0; step < sched.steps; ++step) {
      if (step > 0) {
        write_inputs(step_inputs->at(step));
        core.load(job.prog);
        run_core();
        if (core.error()) {
          con.error(Diagnostic{job.prog.source + ", step " + std::to_string(step), *core.error(), "report it with the scenario"}.str());
          return 2;
        }
      }
      const double step_s = static_cast<double>(core.stats().end_time - core.start_time()) / 1e15;
      const double step_t0 = static_cast<double>(core.start_time() - first_start) / 1e15;
      step_spans.push_back({"step " + std::to_string(step), step_t0, step_t0 + step_s});
      t_steps += step_s;
      json rec = {{"step", step}, {"simulated_s", step_s}, {"activation", sched.is_activation(step)}, {"checkpoint", sched.is_checkpoint(step)}};
      std::map<std::string, Tensor> values;
      if (numerics && !closures.empty())
        for (const auto& b : job.outputs) values[b.name] = read_output(b);
      finish_step(report, std::move(rec), closures, sched, step, values, opt.out_dir, step_spans.back().end_s, closure_marks);
    }
    warn_if_stop_ignored(sched.steps);
    if (sched.steps > 1)
      con.out(std::to_string(sched.steps) + " steps: " + format_num(t_steps * 1e6, "%.4f") + " us simulated in all, " +
              format_num(t_steps / static_cast<double>(sched.steps) * 1e6, "%.4f") + " us per step");
  }

  // Outputs.
  enter_phase("check");
  const Tolerance deftol = default_tolerance(s.resolved["precision"]["compute"].get<std::string>());
  if (!job.outputs.empty()) con.out("");
  for (const auto& b : job.outputs) {
    json rec = {{"name", b.name}};
    if (!numerics) {
      rec["checked"] = false;
      rec["note"] = "timing-only run: no values";
      report["outputs"].push_back(rec);
      con.out("  " + b.name + ": not checked (timing only: run.numerics is false)");
      continue;
    }
    Tensor out = read_output(b);
    std::string file;
    if (s.resolved["outputs"]["save"].get<bool>()) {
      file = s.resolved["outputs"]["dir"].get<std::string>() + "/" + safe_file_name(b.name) + ".npy";
      write_npy((std::filesystem::path(opt.out_dir) / file).string(), out);
    }
    const auto ref = reference.find(b.name);
    con.out("  " + b.name + " " + std::string(dtype_name(out.dtype())) + shape_str(out.shape()) +
            check_machine_output(b.name, out, file, ref == reference.end() ? nullptr : &ref->second, deftol, expect, report, all_pass, failures));
  }

  con.out(con.bold("simulated") + " " + format_num(sim_s * 1e6, "%.4f") + " us (" + std::to_string(st.bundles) +
          " bundles, preset " + s.preset + ")");
  compare_published(report, sim_s);
  for (int l = 0; l < kLanes; ++l) {
    const auto i = static_cast<size_t>(l);
    if (!st.instructions[i]) continue;
    con.detail("  lane " + std::string(lane_name(static_cast<Lane>(l))) + ": " + std::to_string(st.instructions[i]) +
               " instructions, " + std::to_string(st.busy_cycles[i]) + " busy cycles");
  }
  if (trace_wanted(s)) {
    enter_phase("trace");
    // The estimator's kernels laid end to end, above the simulated timeline.
    std::vector<PredictedKernel> predicted;
    if (job.compiled) {
      double t = 0;
      for (const auto& k : job.compiled->kernels) {
        predicted.push_back({k.name, t, t + k.seconds});
        t += k.seconds;
      }
    }
    const std::string note = write_neuroncore_trace(s.resolved["trace"], job.prog, core, predicted, opt.out_dir,
                                                    sched.steps > 1 ? step_spans : std::vector<PredictedKernel>{}, closure_marks,
                                                    sched.steps > 1 ? static_cast<int64_t>(first_start) : -1);
    report["trace"] = {{"file", s.resolved["trace"]["file"]}};
    con.out(note);
  }
  return finish_run(opt.out_dir, report, all_pass, failures, std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(), {{"compile_s", job.compile_s}});
}

}  // namespace tessera::sim
