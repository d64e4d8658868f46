#include "sim/cli.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "isa/error.hpp"
#include "isa/params.hpp"
#include "mapper/graph/summary.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "sim/compare.hpp"
#include "sim/jobs.hpp"
#include "sim/sweep.hpp"
#include "sim/conformance.hpp"
#include "sim/console.hpp"
#include "sim/model.hpp"
#include "sim/params_table.hpp"
#include "sim/outdir.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"
#include "sim/version.hpp"
#include "traces/reader.hpp"

namespace tessera::sim {

namespace {

struct Options {
  std::string verb;
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::vector<std::string> grids;  // sweep --grid
  std::string out_dir;
  std::string resume;
  bool help = false;
  bool no_numerics = false;
  bool emit_program = false;
  std::map<std::string, std::string> verb_opts;  // --exclusions, --pass-list, --write-pass-list, --format, --jobs, --plot, --rerun
  Verbosity verbosity = Verbosity::normal;
};

struct Verb {
  const char* name;
  const char* usage;
  const char* summary;
  const char* details;
  int (*handler)(const Options&);
};

int cmd_run(const Options&);
int cmd_validate(const Options&);
int cmd_params(const Options&);
int cmd_version(const Options&);
int cmd_graph(const Options&);
int cmd_schema(const Options&);
int cmd_trace_summary(const Options&);
int cmd_conformance(const Options&);
int cmd_compare(const Options&);
int cmd_sweep(const Options&);

const Verb kVerbs[] = {
    {"run", "tessera run [SCENARIO] [--out DIR] [--set key.path=value]... [--no-numerics] [--emit-program] [--resume CHECKPOINT] [--threads N]",
     "compile and run a scenario, check its outputs, write report.json",
     "SCENARIO is a scenario JSON file (or a report.json, to re-run the scenario it records).\n"
     "Without SCENARIO, runs scenarios/quickstart.json. Results go to --out DIR\n"
     "(default out/<scenario name>/). --emit-program also writes the compiled NeuronCore\n"
     "program as assembler text (program.s, one bundle per line; docs/neuroncore-asm.md).\n"
     "--resume CHECKPOINT continues a training run from a checkpoint directory it wrote\n"
     "(OUT/checkpoints/step_K: the state at the end of step K; docs/training.md).\n"
     "--threads N simulates a wafer on N host threads (run.threads, default auto: the host's\n"
     "cores; the same results on any number).",
     cmd_run},
    {"validate", "tessera validate SCENARIO [--set key.path=value]... [--no-numerics] [--out DIR]",
     "check a scenario without running it: every check run makes before it simulates",
     "Exit 0 when the scenario is valid, 2 otherwise, with every mistake of the file at once.\n"
     "Checks what `run` checks before it simulates, with the same code: the scenario's fields,\n"
     "the model (loads, shapes infer), the target's support of every op (the model compiles;\n"
     "the predicted latency is printed), memory fit (SBUF, PSUM, PE SRAM, HBM, host memory) and\n"
     "the input files (.npy header, dtype, shape). --out DIR checks that run could write there.\n"
     "--verbose prints the resolved scenario (defaults filled in, units in SI base units).",
     cmd_validate},
    {"params", "tessera params [TARGET|PRESET]",
     "list hardware parameters: name, value, unit, range, description, source",
     "TARGET is neuroncore or wafer (shows the declarations and their defaults); PRESET is\n"
     "trn1, trn2, wse2 or wse3 (shows the preset's values). Without an argument, lists targets\n"
     "and presets. Override any parameter in a scenario under target.params.",
     cmd_params},
    {"graph", "tessera graph SCENARIO [--canonical]",
     "print the model's graph after shape inference and folding: nodes, shapes, dtypes, parameter bytes, FLOPs",
     "FLOPs count a multiply-add as 2 (docs/graph.md has the convention per op). --canonical prints\n"
     "the canonical graph the compilers lower instead, after the passes that changed it\n"
     "(docs/canonical-graph.md).",
     cmd_graph},
    {"onnx-conformance",
     "tessera onnx-conformance DIR [--exclusions FILE] [--pass-list FILE] [--write-pass-list FILE] [--format table|summary]",
     "run the reference executor over ONNX backend tests (e.g. /usr/share/libonnx-testdata/data/node)",
     "Prints one row per test: pass, FAIL (values differ; max abs error), ERROR (a supported op\n"
     "rejected an attribute or dtype), unsupported (an op outside the supported set). Exit 1 when a\n"
     "test whose ops are all supported fails without a line in --exclusions, or when a test named\n"
     "in --pass-list does not pass.",
     cmd_conformance},
    {"compare",
     "tessera compare SCENARIO|REPORT|DIR... [--jobs N] [--out DIR] [--format table|csv|json|markdown] [--plot FILE.svg] [--rerun] [--set key.path=value]... [--no-numerics]",
     "predicted vs simulated (vs published) latency per scenario and kernel, with MAPE and worst case",
     "Arguments are scenario files, report.json files, or directories searched recursively for\n"
     "them (other JSON files, and build/, out/, tests/ and hidden directories below a DIR, are\n"
     "skipped). Each scenario runs as `tessera run SCENARIO --out OUT/NAME --quiet` in a child\n"
     "process, --jobs N at once (default 1), OUT being --out DIR (default out/compare); a\n"
     "report.json already there is reused when it is newer than the scenario, the files it names\n"
     "and the tessera binary, and records the same scenario (--rerun runs it anyway). --set and\n"
     "--no-numerics apply to every run. A run's stderr is kept in OUT/NAME/run.log.\n\n"
     "Prints per scenario and kernel: predicted, simulated, error = (predicted - simulated) /\n"
     "simulated, the published reference (expect.reference_latency) and simulated vs published;\n"
     "then the mean absolute percentage error and the worst case of each. Missing figures show\n"
     "'-' and are left out of the statistics. --format csv|json|markdown for other tools (json:\n"
     "schema tessera.compare/1; csv: the summary goes to stderr). --plot FILE.svg writes a log-log\n"
     "scatter of predicted against simulated: a circle per kernel and a diamond per scenario total,\n"
     "coloured by scenario (a legend names them), kernels outside +-10% ringed red, with y = x and\n"
     "+-10% lines.\n"
     "Exit 1 when a scenario failed a check or could not run (it is listed as ERROR with the\n"
     "first line of its error).",
     cmd_compare},
    {"sweep",
     "tessera sweep SCENARIO --grid key.path=[v1,v2,...]... [--points JSON] [--jobs N] [--out DIR] [--format table|csv|json|markdown] [--plot FILE.svg] [--scatter FILE.svg] [--rerun] [--set key.path=value]... [--no-numerics]",
     "run a scenario over a grid of parameter values: table, plots, predicted vs simulated per point",
     "Each --grid names a field by its --set key path and lists its values (JSON, or bare words\n"
     "such as [300GB/s,410GB/s]); the scenario's sweep.grid section gives more (a key given on the\n"
     "command line replaces the file's). The points are the cartesian product, the last key\n"
     "varying fastest. --points '[{\"K1\": V, \"K2\": W}, ...]' (or sweep.points) lists points whose\n"
     "fields go together (two shapes); each runs with every combination of the grid. Every point\n"
     "is validated like --set before anything runs. Each runs as\n"
     "`tessera run SCENARIO --set KEY=VALUE... --out OUT/POINT --quiet` in a child process, --jobs N\n"
     "at once, OUT being --out DIR (default out/sweep/<scenario name>); a point whose report is up\n"
     "to date is reused, as compare does (--rerun runs it anyway).\n\n"
     "Under mpirun (tessera built with MPI), the ranks share the points: rank 0 hands them out as\n"
     "ranks have a free slot and prints the results, which are the same as without mpirun; OUT\n"
     "must be a directory every rank sees. Prints one row per point: its values, predicted,\n"
     "simulated, error, the published reference, status; then the MAPE lines of compare.\n"
     "--plot FILE.svg draws simulated (and predicted) latency over the grid: a line for one\n"
     "parameter, heatmaps (one per value combination beyond the first two) for more. --scatter\n"
     "FILE.svg is compare's predicted-vs-simulated scatter, one colour per point. docs/sweep.md.\n"
     "Exit 1 when a point failed a check or could not run; 2 for a bad grid or a point that does\n"
     "not validate (nothing runs then).",
     cmd_sweep},
    {"trace-summary", "tessera trace-summary TRACE",
     "read a trace back (.pftrace or Chrome JSON): slices and busy time per track, top instructions by time",
     "Uses the same reader as the tests (traces/reader.hpp).", cmd_trace_summary},
    {"schema", "tessera schema [--format markdown|json-schema]",
     "print every scenario field (pointer, type, default, description) as Markdown, or as a JSON Schema",
     "docs/scenario-fields.md is the Markdown output. --format json-schema prints a JSON Schema\n"
     "(draft 2020-12) generated from the same declarations as tessera's own validator:\n"
     "docs/scenario.schema.json is that output. Editors that read \"$schema\" complete and check\n"
     "scenarios with it (a scenario may name it: \"$schema\": \"../docs/scenario.schema.json\").\n"
     "Checks written as code (names usable as directories, the unit inside a quantity string,\n"
     "files that exist) stay with `tessera validate`.",
     cmd_schema},
    {"version", "tessera version", "print the version of tessera and of the libraries it uses", "", cmd_version},
};

const Verb* find_verb(const std::string& name) {
  for (const auto& v : kVerbs)
    if (name == v.name) return &v;
  return nullptr;
}

void print_usage(std::ostream& os) {
  os << "tessera " << version_string() << " -- cycle-approximate simulator for dataflow ML accelerators\n\n"
     << "usage: tessera VERB [options]\n\nverbs:\n";
  for (const auto& v : kVerbs) {
    std::string n = v.name;
    n.resize(std::max<size_t>(n.size() + 2, 18), ' ');
    os << "  " << n << v.summary << "\n";
  }
  os << "\noptions:\n"
        "  --out DIR             output directory (default out/<scenario name>/)\n"
        "  --set key.path=value  override one scenario field (validated like the file)\n"
        "  --no-numerics         timing only: compute no tensor values\n"
        "  -q, --quiet           print only results and errors\n"
        "  -v, --verbose         print more detail\n"
        "  -h, --help            help (also: tessera VERB --help)\n"
        "  -V, --version         print the version, commit and libraries (tessera version)\n\n"
        "exit codes: 0 ok; 1 a check failed; 2 bad input, usage or environment (a path, memory);\n"
        "            3 internal error (a bug: please report it); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM)\n";
}

void print_verb_help(const Verb& v) {
  std::cout << "usage: " << v.usage << "\n\n" << v.summary << "\n";
  if (std::strlen(v.details)) std::cout << "\n" << v.details << "\n";
}

// Parses argv; throws InputError on a usage mistake.
Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& opt) -> std::string {
      const auto eq = a.find('=');
      if (eq != std::string::npos) return a.substr(eq + 1);
      if (i + 1 >= args.size()) throw InputError("command line", opt + " needs a value", "see tessera --help");
      return args[++i];
    };
    if (a == "-h" || a == "--help") o.help = true;
    else if (a == "--version" || a == "-V") o.verb = "version";
    else if (a == "-q" || a == "--quiet") o.verbosity = Verbosity::quiet;
    else if (a == "-v" || a == "--verbose") o.verbosity = Verbosity::verbose;
    else if (a == "--no-numerics") o.no_numerics = true;
    else if (a == "--emit-program") o.emit_program = true;
    else if (a == "--rerun") o.verb_opts["rerun"] = "1";
    else if (a == "--canonical") o.verb_opts["canonical"] = "1";
    else if (a == "--out" || a.rfind("--out=", 0) == 0) o.out_dir = value("--out");
    else if (a == "--set" || a.rfind("--set=", 0) == 0) o.sets.push_back(value("--set"));
    else if (a == "--threads" || a.rfind("--threads=", 0) == 0) o.sets.push_back("run.threads=" + value("--threads"));
    else if (a == "--grid" || a.rfind("--grid=", 0) == 0) o.grids.push_back(value("--grid"));
    else if (a == "--resume" || a.rfind("--resume=", 0) == 0) o.resume = value("--resume");
    else if (a == "--exclusions" || a == "--pass-list" || a == "--write-pass-list" || a == "--format" ||
             a == "--jobs" || a == "--plot" || a == "--scatter" || a.rfind("--scatter=", 0) == 0 || a == "--points" || a.rfind("--points=", 0) == 0 || a.rfind("--exclusions=", 0) == 0 || a.rfind("--pass-list=", 0) == 0 ||
             a.rfind("--write-pass-list=", 0) == 0 || a.rfind("--format=", 0) == 0 || a.rfind("--jobs=", 0) == 0 ||
             a.rfind("--plot=", 0) == 0) {
      const std::string key = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      o.verb_opts[key] = value("--" + key);
    } else if (a.size() > 1 && a[0] == '-') {
      std::vector<std::string> known = {"--help", "--quiet", "--verbose", "--out", "--set", "--no-numerics",
                                        "--exclusions", "--pass-list", "--write-pass-list", "--format",
                                        "--jobs", "--plot", "--scatter", "--grid", "--points", "--rerun", "--emit-program", "--resume", "--canonical", "--version", "--threads"};
      std::string hint = did_you_mean(a, known);
      throw InputError("command line", "unknown option '" + a + "'",
                       hint.empty() ? "see tessera --help" : "did you mean '" + hint + "'?");
    } else if (o.verb.empty()) o.verb = a;
    else o.positional.push_back(a);
  }
  return o;
}

void report_input_error(const InputError& e) {
  auto& c = Console::get();
  const auto& diags = e.diagnostics();
  if (diags.size() > 1) c.error(std::to_string(diags.size()) + " problems:");
  for (const auto& d : diags) c.error(d.str());
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string r;
  for (const auto& x : v) r += (r.empty() ? "" : sep) + x;
  return r;
}

std::string one_scenario(const Options& o, bool default_quickstart) {
  if (o.positional.size() > 1)
    throw InputError("command line", "expected one scenario, got " + std::to_string(o.positional.size()),
                     "run one scenario at a time");
  if (!o.positional.empty()) return o.positional[0];
  if (!default_quickstart) throw InputError("command line", "missing SCENARIO", "e.g. tessera validate scenarios/quickstart.json");
  return default_scenario_path();
}

int cmd_validate(const Options& o) {
  if (!o.out_dir.empty()) check_out_dir(o.out_dir);
  std::vector<std::string> sets = o.sets;
  if (o.no_numerics) sets.push_back("run.numerics=false");
  Scenario s = load_scenario(one_scenario(o, false), sets);
  auto& c = Console::get();
  for (const auto& w : s.warnings) c.warn(w);
  // Every check `run` makes before it simulates (the same code, stopped before elaboration):
  // model, shapes, the target's support of every op, compilation and memory fit, input files.
  RunOptions ro;
  ro.check_only = true;
  ro.resume = o.resume;
  std::vector<std::string> checked;
  ro.checked = &checked;
  const Verbosity v = c.verbosity();
  if (v != Verbosity::verbose) c.set_verbosity(Verbosity::quiet);
  run_scenario(s, ro);
  c.set_verbosity(v);
  c.result("ok: " + s.name + " (" + s.kind + (s.preset.empty() ? "" : "/" + s.preset) + ") is a valid " +
           kScenarioSchema + " scenario" + (checked.empty() ? std::string() : ": " + join(checked, "; ")));
  if (c.verbosity() == Verbosity::verbose) std::cout << s.resolved.dump(2) << "\n";
  return kExitOk;
}

int cmd_run(const Options& o) {
  std::vector<std::string> sets = o.sets;
  if (o.no_numerics) sets.push_back("run.numerics=false");
  Scenario s = load_scenario(one_scenario(o, true), sets);
  RunOptions ro;
  ro.out_dir = o.out_dir.empty() ? (std::filesystem::path("out") / s.name).string() : o.out_dir;
  ro.emit_program = o.emit_program;
  ro.resume = o.resume;
  // Under mpirun (more than one rank) a wafer run is one partitioned fabric (sim/fabric_ranks.hpp):
  // every rank runs the same driver; rank 0 prints and writes --out, the others write into a
  // directory of their own that goes away afterwards.
  if (s.kind == "wafer" && distributed() && rank() != 0) {
    // (its messages, errors too, are rank 0's: the same driver on the same results)
    Console::get().set_verbosity(Verbosity::quiet);
    if (!std::getenv("TESSERA_RANK_STDERR")) {
      std::fflush(stderr);
      if (FILE* nul = std::fopen("/dev/null", "w")) dup2(fileno(nul), STDERR_FILENO), std::fclose(nul);
    }
    ro.out_dir = (std::filesystem::temp_directory_path() / ("tessera-rank" + std::to_string(rank()) + "-" + std::to_string(::getpid()))).string();
    const int rc = run_scenario(s, ro);
    std::error_code ec;
    std::filesystem::remove_all(ro.out_dir, ec);
    finish_distributed();
    return rc;
  }
  if (distributed() && rank() != 0) {  // (another machine's scenario: rank 0 runs it alone)
    finish_distributed();
    return kExitOk;
  }
  const int rc = run_scenario(s, ro);
  finish_distributed();
  return rc;
}

int cmd_params(const Options& o) {
  if (o.positional.size() > 1) throw InputError("command line", "params takes at most one TARGET or PRESET");
  if (o.positional.empty()) {
    print_targets(std::cout);
    return kExitOk;
  }
  print_params(std::cout, o.positional[0]);
  return kExitOk;
}

int cmd_graph(const Options& o) {
  Scenario s = load_scenario(one_scenario(o, false), o.sets);
  graph::Graph g = load_model(s);
  if (o.verb_opts.count("canonical")) {
    std::string changed;
    // (the graph the target compiles: the wafer keeps recurrent layers whole)
    const bool wafer = s.resolved.contains("target") && s.resolved["target"].value("kind", "") == "wafer";
    for (const auto& p : passes::canonicalize(g, !wafer)) changed += (changed.empty() ? "" : ", ") + p;
    std::cout << "canonical graph (passes that changed it: " << (changed.empty() ? "none" : changed) << ")\n";
  }
  graph::print_graph(std::cout, g);
  return kExitOk;
}

int cmd_conformance(const Options& o) {
  if (o.positional.size() != 1)
    throw InputError("command line", "onnx-conformance takes one DIR", "e.g. tessera onnx-conformance /usr/share/libonnx-testdata/data/node");
  ConformanceOptions c;
  c.dir = o.positional[0];
  auto get = [&](const char* k) { auto it = o.verb_opts.find(k); return it == o.verb_opts.end() ? std::string() : it->second; };
  c.exclusions_file = get("exclusions");
  c.pass_list_file = get("pass-list");
  c.write_pass_list = get("write-pass-list");
  if (!get("format").empty()) c.format = get("format");
  if (c.format != "table" && c.format != "summary")
    throw InputError("--format", "'" + c.format + "' is not a format of onnx-conformance", "use table or summary");
  return run_conformance(c);
}

int parse_jobs(const std::string& j) {
  size_t used = 0;
  long n = 0;
  try {
    n = std::stol(j, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != j.size() || n < 1 || n > 256)
    throw InputError("--jobs", "'" + j + "' is not a number of jobs", "give a whole number from 1 to 256, e.g. --jobs 2");
  return static_cast<int>(n);
}

int cmd_compare(const Options& o) {
  if (distributed() && rank() != 0) Console::get().set_verbosity(Verbosity::quiet);
  CompareOptions c;
  c.inputs = o.positional;
  c.out_dir = o.out_dir;
  c.no_numerics = o.no_numerics;
  c.sets = o.sets;
  auto get = [&](const char* k) { auto it = o.verb_opts.find(k); return it == o.verb_opts.end() ? std::string() : it->second; };
  if (!get("format").empty()) c.format = get("format");
  c.plot_file = get("plot");
  c.rerun = !get("rerun").empty();
  if (const std::string j = get("jobs"); !j.empty()) c.jobs = parse_jobs(j);
  const int rc = run_compare(c);
  finish_distributed();
  return rc;
}

int cmd_sweep(const Options& o) {
  // Under mpirun the other ranks only run points: rank 0 reports.
  if (distributed() && rank() != 0) Console::get().set_verbosity(Verbosity::quiet);
  SweepOptions sw;
  if (o.positional.size() != 1)
    throw InputError("command line", o.positional.empty() ? "sweep needs a scenario" : "sweep takes one scenario",
                     "e.g. tessera sweep scenarios/neuroncore/mlp.json --grid target.params.hbm.bandwidth=[205GB/s,410GB/s]");
  sw.scenario = o.positional[0];
  sw.grid = o.grids;
  if (auto it = o.verb_opts.find("points"); it != o.verb_opts.end()) sw.points = it->second;
  sw.out_dir = o.out_dir;
  sw.no_numerics = o.no_numerics;
  sw.sets = o.sets;
  auto get = [&](const char* k) { auto it = o.verb_opts.find(k); return it == o.verb_opts.end() ? std::string() : it->second; };
  if (!get("format").empty()) sw.format = get("format");
  sw.plot_file = get("plot");
  sw.scatter_file = get("scatter");
  sw.rerun = !get("rerun").empty();
  if (const std::string j = get("jobs"); !j.empty()) sw.jobs = parse_jobs(j);
  const int rc = run_sweep(sw);
  finish_distributed();
  return rc;
}

int cmd_trace_summary(const Options& o) {
  if (o.positional.size() != 1) throw InputError("command line", "trace-summary takes one TRACE file", "e.g. tessera trace-summary out/quickstart/trace.pftrace");
  std::cout << traces::summarize(traces::read_trace_file(o.positional[0]));
  return kExitOk;
}

int cmd_schema(const Options& o) {
  const auto f = o.verb_opts.find("format");
  const std::string format = f == o.verb_opts.end() ? "markdown" : f->second;
  if (format == "json-schema") {
    std::cout << schema::json_schema(scenario_schema(), kScenarioSchema).dump(2) << "\n";
    return kExitOk;
  }
  if (format != "markdown")
    throw InputError("--format", "'" + format + "' is not a format of schema", "use markdown or json-schema");
  std::cout << "# Scenario fields (" << kScenarioSchema << ")\n\nGenerated by `tessera schema`; a test keeps it in sync.\n"
            << "NAME stands for a name you choose, N for an array index.\n\n"
            << schema::markdown_table(scenario_schema());
  return kExitOk;
}

int cmd_version(const Options&) {
  std::cout << version_report();
  return kExitOk;
}

}  // namespace

int cli_main(int argc, char** argv) {
  auto& c = Console::get();
  install_interrupt_handlers();
  try {
    Options o = parse_args(argc, argv);
    c.set_verbosity(o.verbosity);
    if (o.verb.empty()) {
      print_usage(o.help ? std::cout : std::cerr);
      return o.help ? kExitOk : kExitBadInput;
    }
    const Verb* v = find_verb(o.verb);
    if (!v) {
      std::vector<std::string> names;
      for (const auto& vb : kVerbs) names.push_back(vb.name);
      std::string hint = did_you_mean(o.verb, names);
      throw InputError("command line", "unknown verb '" + o.verb + "'",
                       hint.empty() ? "verbs: run, validate, graph, params, compare, sweep, schema, trace-summary, onnx-conformance, version" : "did you mean '" + hint + "'?");
    }
    if (o.help) {
      print_verb_help(*v);
      return kExitOk;
    }
    return v->handler(o);
  } catch (const InputError& e) {
    report_input_error(e);
    return kExitBadInput;
  } catch (const Interrupted& e) {
    const std::string phase = current_phase();
    c.error(std::string(e.what()) + (phase.empty() ? "" : " during " + phase) +
            "; stopped, and no output was written (an existing --out directory is as it was)");
    if (std::getenv("TESSERA_INTERRUPT_AT")) c.error("stopped " + format_num(ms_since_signal(), "%.0f") + " ms after the signal");
    return interrupt_exit_code(e.signal);
  } catch (const CheckFailed& e) {
    c.error(e.what());
    return kExitCheckFailed;
  } catch (const std::bad_alloc&) {
    const std::string phase = current_phase();
    c.error(Diagnostic{phase.empty() ? std::string("host memory") : "host memory (" + phase + ")",
                       "this machine ran out of memory" + (phase.empty() ? std::string() : " during " + phase),
                       "the run needs more host memory than it can get: run a smaller model, batch or fabric; run.host_memory sets the budget "
                       "tessera checks before it allocates"}
                .str());
    return kExitBadInput;
  } catch (const std::filesystem::filesystem_error& e) {
    // The environment, not tessera: a full disk, a permission, a path that went away.
    c.error(Diagnostic{e.path1().empty() ? std::string("file system") : e.path1().string(), e.code().message(),
                       "check the path, its permissions and the free space"}
                .str());
    return kExitBadInput;
  } catch (const std::exception& e) {
    c.error(std::string("internal error: ") + e.what() + " (please report this with the scenario)");
    abort_distributed(kExitInternal);  // under mpirun: the other ranks may be waiting for this one
    return kExitInternal;
  }
}

}  // namespace tessera::sim
