// `tessera run` on target.kind = "neuroncore" with a hand-written program (model.program).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <systemc>

#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/npy.hpp"
#include "mapper/reference/executor.hpp"
#include "models/common/clock.hpp"
#include "models/neuroncore/core.hpp"
#include "sim/check.hpp"
#include "sim/console.hpp"
#include "sim/model.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/run_engines.hpp"

namespace tessera::sim {

using json = nlohmann::json;
using namespace tessera::neuroncore;

namespace {

std::string fmt(double v, const char* f = "%.4g") {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

Tensor input_tensor(const json& spec, const HbmTensor& t) {
  if (spec.contains("file")) return read_npy(spec["file"].get<std::string>());
  const json& r = spec["random"];
  return random_tensor(DType::f32, t.shape, r["seed"].get<uint64_t>(), r["dist"] == "normal", r["scale"].get<double>());
}

}  // namespace

int run_neuroncore(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto wall0 = std::chrono::steady_clock::now();
  const json& model = s.resolved.value("model", json());
  if (model.is_null() || !model.contains("program"))
    throw InputError("/model", "the NeuronCore compiler is not in this build yet: give a hand-written program",
                     "set /model/program to an assembly file (docs/neuroncore-asm.md)");
  if (s.resolved["run"]["steps"].get<int64_t>() != 1)
    throw InputError("/run/steps", "multi-step runs are not supported by this build yet", "set run.steps to 1");
  if (!s.resolved["step_closures"].empty())
    throw InputError("/step_closures", "step closures are not supported by this build yet", "remove /step_closures");
  if (s.resolved.contains("trace")) con.warn("/trace: traces are not written by this build yet");

  const CoreConfig cfg = CoreConfig::from(s.params);
  const std::string program_path = model["program"].get<std::string>();
  Program prog = assemble_file(program_path);
  validate(prog, cfg);
  const bool numerics = s.resolved["run"]["numerics"].get<bool>();

  // Bind scenario inputs to the program's HBM tensors.
  DiagnosticList d;
  std::map<std::string, Tensor> inputs;  // fp32 values as given (the reference executor's inputs)
  std::vector<std::string> hbm_names;
  for (const auto& t : prog.hbm) hbm_names.push_back(t.name);
  for (const auto& [name, spec] : s.resolved["inputs"].items()) {
    const HbmTensor* t = prog.find_hbm(name);
    const std::string where = "/inputs/" + schema::pointer_token(name);
    if (!t) {
      const std::string hint = did_you_mean(name, hbm_names);
      d.add(where, "the program declares no HBM tensor '" + name + "'",
            hint.empty() ? "declare it with .hbm in " + program_path : "did you mean '" + hint + "'?");
      continue;
    }
    Tensor v = input_tensor(spec, *t);
    if (v.shape() != t->shape) {
      d.add(where, "shape " + shape_str(v.shape()) + " does not match the program's " + shape_str(t->shape));
      continue;
    }
    inputs[name] = std::move(v);
  }
  d.throw_if_any();

  // The reference: a model given next to the program, run on the same (unrounded) inputs.
  std::map<std::string, Tensor> reference;
  if (model.contains("onnx") || model.contains("graph")) {
    graph::Graph g = load_model(s);
    std::map<std::string, Tensor> ref_in;
    for (const auto& i : g.inputs) {
      auto it = inputs.find(i);
      if (it == inputs.end())
        throw InputError("/inputs", "the reference model's input '" + i + "' has no value", "add /inputs/" + i);
      // The reference computes on the values the machine holds: inputs rounded to their HBM dtype.
      const HbmTensor* t = prog.find_hbm(i);
      ref_in[i] = t && t->dtype != it->second.dtype() ? it->second.cast(t->dtype).cast(DType::f32) : it->second;
    }
    reference = reference::execute(g, ref_in);
  }

  // Elaborate one core, load HBM, run.
  models::set_fs_resolution();
  CoreOptions copt;
  copt.numerics = numerics;
  copt.max_time = static_cast<models::Femtos>(s.resolved["run"]["max_time"].get<double>() * 1e15);
  NeuronCore core("core", cfg, copt);
  if (numerics)
    for (const auto& [name, v] : inputs) {
      const HbmTensor* t = prog.find_hbm(name);
      const Tensor cast = v.dtype() == t->dtype ? v : v.cast(t->dtype);
      core.memory().hbm_write(t->offset, cast.data(), cast.nbytes());
    }
  core.load(prog);
  install_interrupt_handler();
  sc_core::sc_start();
  throw_if_interrupted();
  if (!core.finished()) throw std::runtime_error("the NeuronCore did not finish (SystemC ran out of events)");
  if (core.error()) throw InputError(program_path, *core.error(), "fix the program");

  const CoreStats& st = core.stats();
  const double sim_s = static_cast<double>(st.end_time - core.start_time()) / 1e15;
  const ClockDomain& tclk = core.clock(Lane::tensor);

  json report = new_report(s);
  report["latency"]["simulated_s"] = sim_s;
  report["latency"]["note"] = "hand-written program: no compiler prediction";
  report["kernels"].push_back({{"name", std::filesystem::path(program_path).stem().string()},
                               {"op", "program"},
                               {"predicted_cycles", nullptr},
                               {"simulated_cycles", tclk.cycle_at_or_after(st.end_time) - tclk.cycle_at_or_after(core.start_time())},
                               {"clock_hz", tclk.hz()},
                               {"predicted_s", nullptr},
                               {"simulated_s", sim_s},
                               {"error_pct", nullptr}});
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

  // Outputs: every HBM tensor the scenario did not bind as an input.
  const json& expect = s.resolved["expect"];
  const Tolerance deftol = default_tolerance(s.resolved["precision"]["compute"].get<std::string>());
  std::vector<std::string> failures;
  bool all_pass = true;
  for (const auto& t : prog.hbm) {
    if (inputs.count(t.name)) continue;
    json rec = {{"name", t.name}};
    if (!numerics) {
      rec["checked"] = false;
      rec["note"] = "timing-only run: no values";
      report["outputs"].push_back(rec);
      continue;
    }
    Tensor out(t.dtype, t.shape);
    core.memory().hbm_read(t.offset, out.data(), out.nbytes());
    std::string file;
    if (s.resolved["outputs"]["save"].get<bool>()) {
      file = s.resolved["outputs"]["dir"].get<std::string>() + "/" + t.name + ".npy";
      write_npy((std::filesystem::path(opt.out_dir) / file).string(), out);
    }
    std::string line = "  " + t.name + " " + std::string(dtype_name(t.dtype)) + shape_str(t.shape);
    std::vector<OutputCheck> checks;
    Tolerance ref_tol = deftol;
    if (expect["outputs"].contains(t.name)) {
      const json& e = expect["outputs"][t.name];
      const Tolerance tol{e["rtol"].get<double>(), e["atol"].get<double>()};
      if (e.contains("file"))
        checks.push_back(check_output(t.name, out, read_npy(e["file"].get<std::string>()), tol, "file", expect, failures));
      else
        ref_tol = tol;
    }
    if (reference.count(t.name)) checks.push_back(check_output(t.name, out, reference.at(t.name), ref_tol, "reference", expect, failures));
    for (const auto& c : checks) {
      json r = output_record(t.name, file, &c.cmp, c.tol.rtol, c.tol.atol);
      r["against"] = c.against;
      report["outputs"].push_back(r);
      all_pass = all_pass && c.cmp.pass;
      line += "  vs " + c.against + ": max abs err " + fmt(c.cmp.max_abs_error, "%.3g") + " max rel err " +
              fmt(c.cmp.max_rel_error, "%.3g") + " " + (c.cmp.pass ? con.green("PASS") : con.red("FAIL"));
    }
    if (checks.empty()) {
      report["outputs"].push_back(output_record(t.name, file, nullptr, 0, 0));
      line += "  (no expected values)";
    }
    con.out(line);
  }

  con.out(con.bold("simulated") + " " + fmt(sim_s * 1e6, "%.4f") + " us (" + std::to_string(st.bundles) +
          " bundles, preset " + s.preset + ")");
  const json& pub = report["latency"]["published_s"];
  if (!pub.is_null()) {
    const double p = pub.get<double>();
    report["latency"]["simulated_vs_published_pct"] = (sim_s - p) / p * 100.0;
    con.out("published " + fmt(p * 1e6, "%.4f") + " us (" + report["latency"]["published_source"].get<std::string>() +
            "): simulated is " + fmt((sim_s - p) / p * 100.0, "%+.1f") + "%");
  }
  for (int l = 0; l < kLanes; ++l) {
    const auto i = static_cast<size_t>(l);
    if (!st.instructions[i]) continue;
    con.detail("  lane " + std::string(lane_name(static_cast<Lane>(l))) + ": " + std::to_string(st.instructions[i]) +
               " instructions, " + std::to_string(st.busy_cycles[i]) + " busy cycles");
  }
  for (const auto& f : failures) report["checks"].push_back({{"check", "outputs"}, {"pass", false}, {"detail", f}});
  report["pass"] = all_pass;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  write_report(opt.out_dir, report, wall);
  con.out("report: " + (std::filesystem::path(opt.out_dir) / "report.json").string());
  if (!all_pass) {
    for (const auto& f : failures) con.error("check failed: " + f);
    return 1;
  }
  return 0;
}

}  // namespace tessera::sim
