#include "sim/run.hpp"
#include "sim/session.hpp"
#include "sim/train.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "isa/compare.hpp"
#include "isa/npy.hpp"
#include "mapper/graph/summary.hpp"
#include "mapper/reference/executor.hpp"
#include "sim/console.hpp"
#include "sim/model.hpp"
#include "sim/outdir.hpp"
#include "sim/report.hpp"
#include "sim/run_engines.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

// The reference target: the golden interpreter runs the graph; no timing model.
int run_reference(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto t0 = std::chrono::steady_clock::now();
  graph::Graph g = load_model(s);
  check_expect_names(s, g);
  if (s.resolved.contains("training")) return run_training(s, opt, g);
  const StepSchedule sched = StepSchedule::from(s.resolved["run"]);
  const auto out_sizes = output_sizes(g);
  const std::vector<StepClosure> closures = parse_closures(s.resolved["step_closures"], g.outputs, &out_sizes);
  if (!s.resolved["run"]["numerics"].get<bool>())
    throw InputError("/run/numerics", "the reference target computes values only; timing-only runs need a machine target",
                     "remove --no-numerics or choose target.kind neuroncore or wafer");
  const HostMemory mem = precheck_graph_data(s, g, sched.steps, true);
  const StepInputs step_inputs(s, g, sched.steps);
  const auto tot = graph::totals(g);
  con.info("model: " + g.source + " (" + std::to_string(g.nodes.size()) + " nodes, " + std::to_string(tot.params) +
           " parameters, " + graph::count_str(tot.flops) + " FLOPs)");
  if (trace_wanted(s))
    con.warn("/trace: the reference target has no timeline; no trace is written");
  for (const auto& w : sched.warnings) con.warn(w);
  if (opt.check_only) {
    note_checked(opt, "model " + std::to_string(g.nodes.size()) + " nodes, inputs, host memory " +
                          format_num(mem.total() / (1024.0 * 1024), "%.1f") + " MiB");
    return 0;
  }
  enter_phase("reference");

  // Every step runs the graph on its inputs; closures see each step's outputs; the outputs checked
  // and written are the last step's.
  json report = new_report(s);
  std::map<std::string, Tensor> outputs;
  for (int64_t step = 0; step < sched.steps; ++step) {
    Progress progress("reference executor", static_cast<double>(g.nodes.size()));
    outputs = reference::execute(g, step_inputs.at(step), [&](size_t done, size_t) {
      poll_interrupt();
      progress.update(static_cast<double>(done));
    });
    progress.finish();
    json rec = {{"step", step}, {"activation", sched.is_activation(step)}, {"checkpoint", sched.is_checkpoint(step)}};
    std::vector<StepMark> marks;  // the reference target writes no trace
    finish_step(report, std::move(rec), closures, sched, step, outputs, opt.out_dir, 0.0, marks);
  }
  warn_if_stop_ignored(sched.steps);

  enter_phase("check");
  report["graph"] = {{"nodes", g.nodes.size()}, {"parameters", tot.params}, {"parameter_bytes", tot.param_bytes},
                     {"flops", tot.flops}};
  report["latency"]["note"] = "the reference target has no timing model";
  const json& out_cfg = s.resolved["outputs"];
  const std::string out_sub = out_cfg["dir"].get<std::string>();
  const json& expect = s.resolved["expect"];
  bool all_pass = true;
  std::vector<std::string> failures;
  con.out(con.bold("outputs") + " (reference executor, fp32):");
  for (const auto& name : g.outputs) {
    const Tensor& t = outputs.at(name);
    std::string file;
    if (out_cfg["save"].get<bool>()) {
      file = out_sub + "/" + safe_file_name(name) + ".npy";
      write_npy((std::filesystem::path(opt.out_dir) / file).string(), t);
    }
    std::string line = "  " + name + " " + std::string(dtype_name(t.dtype())) + shape_str(t.shape());
    if (expect["outputs"].contains(name)) {
      const json& e = expect["outputs"][name];
      if (!e.contains("file"))
        throw InputError("/expect/outputs/" + name, "the reference target needs expected values from a file",
                         "add \"file\": \"expected.npy\"");
      const Tensor want = read_npy(e["file"].get<std::string>());
      const double rtol = e["rtol"].get<double>(), atol = e["atol"].get<double>();
      Comparison c = compare(t, want, rtol, atol);
      if (c.pass && expect.contains("max_rel_error") && c.max_rel_error > expect["max_rel_error"].get<double>()) {
        c.pass = false;
        failures.push_back(name + ": max relative error " + fmt(c.max_rel_error) + " exceeds expect.max_rel_error " +
                           fmt(expect["max_rel_error"].get<double>()));
      } else if (!c.pass) {
        failures.push_back(name + (c.shapes_match ? ": " + std::to_string(c.mismatches) + " elements outside rtol " +
                                                        fmt(rtol) + " atol " + fmt(atol) + " (max abs error " +
                                                        fmt(c.max_abs_error) + ")"
                                                  : ": shape " + shape_str(t.shape()) + " differs from expected " +
                                                        shape_str(want.shape())));
      }
      all_pass = all_pass && c.pass;
      report["outputs"].push_back(output_record(name, file, &c, rtol, atol));
      line += "  max abs err " + fmt(c.max_abs_error) + "  max rel err " + fmt(c.max_rel_error) + "  " +
              (c.pass ? con.green("PASS") : con.red("FAIL"));
    } else {
      report["outputs"].push_back(output_record(name, file, nullptr, 0, 0));
      line += "  (no expected values given)";
    }
    con.out(line);
  }
  if (expect.contains("latency_error_pct"))
    con.warn("/expect/latency_error_pct: the reference target has no latency; the check is skipped");
  for (const auto& f : failures) report["checks"].push_back({{"check", "outputs"}, {"pass", false}, {"detail", f}});
  report["pass"] = all_pass;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  poll_interrupt();
  write_report(opt.out_dir, report, wall);
  con.out("report: " + shown_path((std::filesystem::path(opt.out_dir) / "report.json").string()));
  if (!all_pass) {
    for (const auto& f : failures) con.error("check failed: " + f);
    return 1;
  }
  return 0;
}

void note_checked(const RunOptions& opt, const std::string& what) {
  if (opt.checked) opt.checked->push_back(what);
}

namespace {

int dispatch(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  con.info("scenario " + s.name + ": target " + s.kind + (s.preset.empty() ? "" : "/" + s.preset));
  if (s.resolved.contains("training") && (s.resolved["model"].contains("layout") || s.resolved["model"].contains("program")))
    throw InputError("/training", "training needs a model graph (onnx or graph) to differentiate; hand-written programs and layouts are not trained",
                     "give /model/onnx or /model/graph, or remove /training");
  if ((s.kind == "neuroncore" || s.kind == "wafer") && s.resolved.contains("training")) {
    graph::Graph g = load_model(s);
    check_expect_names(s, g);
    return run_training(s, opt, g);
  }
  if (!opt.resume.empty() && !s.resolved.contains("training"))
    throw InputError("command line", "--resume continues a training run; this scenario has no /training", "remove --resume");
  if (s.kind == "reference") return run_reference(s, opt);
  if (s.kind == "neuroncore") return run_neuroncore(s, opt);
  if (s.kind == "wafer") return run_wafer(s, opt);
  // The NeuronCore and wafer engines land with their issues; nothing is pretended here.
  throw InputError("/target/kind", "target kind '" + s.kind + "' cannot run in this build yet",
                   "'tessera validate' checks the scenario; use target.kind \"reference\" to run the model on the golden interpreter");
}

}  // namespace

int run_scenario(const Scenario& s, const RunOptions& opt) {
  install_interrupt_handlers();
  reset_stop_request();
  if (opt.check_only) return dispatch(s, opt);
  OutputDir out(opt.out_dir);
  RunOptions o = opt;
  o.out_dir = out.dir();
  const int code = dispatch(s, o);
  if (code == 0 || code == 1) {
    enter_phase("write");
    poll_interrupt();  // a signal before the outputs move into place: none of them appear
    out.commit();
  }
  return code;
}

}  // namespace tessera::sim
