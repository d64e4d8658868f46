// `tessera run` on target.kind = "wafer" with a hand-written layout (model.layout): PE programs and
// routes as in docs/wafer-asm.md, run on the fabric model (models/wafer).
//
// Inputs and outputs bind by array name to the PE programs' `.data` arrays: the PEs declaring an
// array must form a rectangle of h x w PEs, and the tensor is [h, w, count] -- one slice per PE,
// rows of PEs first. Outputs are the arrays named in /model/read (default: /expect/outputs).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <systemc>

#include "isa/npy.hpp"
#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"
#include "sim/check.hpp"
#include "sim/console.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/run_engines.hpp"
#include "sim/trace_neuroncore.hpp"
#include "sim/trace_wafer.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {

std::string fmt(double v, const char* f = "%.4g") {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

struct ArrayPlace {
  int64_t x0 = 0, y0 = 0, w = 0, h = 0, count = 0;
};

// The rectangle of PEs whose programs declare `name`.
ArrayPlace place_of(const wafer::LoadedLayout& L, const std::string& name, const std::string& where) {
  int64_t x0 = INT64_MAX, y0 = INT64_MAX, x1 = -1, y1 = -1, count = -1, n = 0;
  for (int64_t y = 0; y < L.layout.height; ++y)
    for (int64_t x = 0; x < L.layout.width; ++x) {
      const uint32_t pi = L.program_at(x, y);
      if (pi == wafer::kNoProgram) continue;
      for (const auto& d : L.programs[pi].data)
        if (d.name == name) {
          if (count >= 0 && d.count != count)
            throw InputError(where, "array '" + name + "' has " + std::to_string(d.count) + " elements on PE (" + std::to_string(x) +
                                        "," + std::to_string(y) + ") but " + std::to_string(count) + " elsewhere",
                             "bound arrays need the same size on every PE");
          count = d.count;
          x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x), y1 = std::max(y1, y);
          ++n;
        }
    }
  if (n == 0) throw InputError(where, "no PE program declares an array '" + name + "'", "declare it with .data in a PE program");
  if (n != (x1 - x0 + 1) * (y1 - y0 + 1))
    throw InputError(where, "the PEs declaring '" + name + "' do not form a rectangle", "declare it on every PE of one rectangle");
  return {x0, y0, x1 - x0 + 1, y1 - y0 + 1, count};
}

}  // namespace

int run_wafer(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto wall0 = std::chrono::steady_clock::now();
  const json& model = s.resolved.value("model", json());
  if (model.is_null() || !model.contains("layout"))
    throw InputError("/model", "the wafer compiler is not in this build yet: give a hand-written layout",
                     "set /model/layout to a layout file (docs/wafer-asm.md)");
  if (s.resolved["run"]["steps"].get<int64_t>() != 1)
    throw InputError("/run/steps", "multi-step runs are not supported by this build yet", "set run.steps to 1");
  if (!s.resolved["step_closures"].empty())
    throw InputError("/step_closures", "step closures are not supported by this build yet", "remove /step_closures");
  if (!s.resolved["run"]["numerics"].get<bool>()) con.warn("/run/numerics: the wafer model always computes values");

  const wafer::WaferConfig cfg = wafer::WaferConfig::from(s.params);
  const std::string layout_path = model["layout"].get<std::string>();
  const wafer::LoadedLayout L = wafer::load_layout(layout_path, cfg);

  DiagnosticList d;
  std::map<std::string, std::pair<ArrayPlace, Tensor>> inputs;
  for (const auto& [name, spec] : s.resolved["inputs"].items()) {
    const std::string where = "/inputs/" + schema::pointer_token(name);
    try {
      const ArrayPlace p = place_of(L, name, where);
      const Shape shape{p.h, p.w, p.count};
      Tensor t;
      if (spec.contains("file")) {
        t = read_npy(spec["file"].get<std::string>());
      } else {
        const json& r = spec["random"];
        t = random_tensor(DType::f32, shape, r["seed"].get<uint64_t>(), r["dist"] == "normal", r["scale"].get<double>());
      }
      if (t.shape() != shape) {
        d.add(where, "shape " + shape_str(t.shape()) + " does not match the array's [PE rows, PE columns, elements] " + shape_str(shape));
        continue;
      }
      inputs[name] = {p, t.cast(DType::f32)};
    } catch (const InputError& e) {
      for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
    }
  }
  std::vector<std::string> reads;
  if (model.contains("read")) reads = model["read"].get<std::vector<std::string>>();
  else
    for (const auto& [name, e] : s.resolved["expect"]["outputs"].items()) reads.push_back(name);
  std::map<std::string, ArrayPlace> outputs;
  for (size_t i = 0; i < reads.size(); ++i) {
    try {
      outputs[reads[i]] = place_of(L, reads[i], model.contains("read") ? "/model/read/" + std::to_string(i) : "/expect/outputs/" + reads[i]);
    } catch (const InputError& e) {
      for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
    }
  }
  d.throw_if_any();

  models::set_fs_resolution();
  wafer::FabricOptions fo;
  fo.max_cycles = static_cast<int64_t>(s.resolved["run"]["max_time"].get<double>() * cfg.clock_hz);
  fo.record = s.resolved.contains("trace");  // the op and delivery records the trace renders
  wafer::Fabric fab("wafer", cfg, fo);
  fab.load(L);
  for (const auto& [name, pt] : inputs) {
    const auto& [p, t] = pt;
    const auto v = t.to_f32();
    for (int64_t py = 0; py < p.h; ++py)
      for (int64_t px = 0; px < p.w; ++px)
        fab.write_array(p.x0 + px, p.y0 + py, name,
                        std::span<const float>(v.data() + (py * p.w + px) * p.count, static_cast<size_t>(p.count)));
  }
  // Faults: flip one bit of an element in PE SRAM before the run (the report lists them).
  json fired = json::array();
  for (size_t i = 0; i < s.resolved["run"]["faults"].size(); ++i) {
    const json& f = s.resolved["run"]["faults"][i];
    const std::string where = "/run/faults/" + std::to_string(i);
    const auto pe = f["pe"].get<std::vector<int64_t>>();
    if (pe.size() != 2) throw InputError(where + "/pe", "a PE is [x, y]");
    const std::string array = f["array"].get<std::string>();
    const wafer::Program* prog = fab.program(pe[0], pe[1]);
    const wafer::DataDecl* decl = nullptr;
    if (prog)
      for (const auto& dd : prog->data)
        if (dd.name == array) decl = &dd;
    if (!decl)
      throw InputError(where, "PE (" + std::to_string(pe[0]) + "," + std::to_string(pe[1]) + ") has no array '" + array + "'",
                       "name a .data array of the program that PE runs");
    const int64_t el = f["element"].get<int64_t>(), bit = f["bit"].get<int64_t>();
    const int64_t es = decl->bytes() / std::max<int32_t>(1, decl->count);
    if (el >= decl->count || bit >= es * 8)
      throw InputError(where, "element " + std::to_string(el) + " bit " + std::to_string(bit) + " is outside array '" + array + "' (" +
                                  std::to_string(decl->count) + " elements of " + std::to_string(es) + " bytes)");
    const uint32_t addr = decl->addr + static_cast<uint32_t>(el * es + bit / 8);
    auto byte = fab.read_bytes(pe[0], pe[1], addr, 1);
    byte[0] = static_cast<uint8_t>(byte[0] ^ (1u << (bit % 8)));
    fab.write_bytes(pe[0], pe[1], addr, byte);
    fired.push_back({{"kind", "sram_bit_flip"}, {"pe", pe}, {"array", array}, {"element", el}, {"bit", bit}, {"cycle", 0}});
    con.warn("fault injected: bit " + std::to_string(bit) + " of " + array + "[" + std::to_string(el) + "] on PE (" +
             std::to_string(pe[0]) + "," + std::to_string(pe[1]) + ")");
  }
  fab.start();
  install_interrupt_handler();
  sc_core::sc_start();
  throw_if_interrupted();
  if (fab.error()) {  // not thrown: see run_neuroncore.cpp
    con.error(Diagnostic{layout_path, *fab.error(), "fix the PE programs or routes"}.str());
    return 2;
  }
  if (!fab.finished()) throw std::runtime_error("the fabric did not finish (SystemC ran out of events)");

  const wafer::FabricStats& st = fab.stats();
  const double sim_s = static_cast<double>(st.cycles) / cfg.clock_hz;
  json report = new_report(s);
  report["latency"]["simulated_s"] = sim_s;
  report["latency"]["note"] = "hand-written layout: no compiler prediction";
  report["kernels"].push_back({{"name", std::filesystem::path(layout_path).stem().string()},
                               {"op", "layout"},
                               {"predicted_cycles", nullptr},
                               {"simulated_cycles", st.cycles},
                               {"clock_hz", cfg.clock_hz},
                               {"predicted_s", nullptr},
                               {"simulated_s", sim_s},
                               {"error_pct", nullptr}});
  report["faults"] = fired;
  report["stats"] = {{"cycles", st.cycles},
                     {"program_pes", st.program_pes},
                     {"busy_cycles", st.busy_cycles},
                     {"idle_cycles", st.idle_cycles},
                     {"stall_cycles", st.stall_cycles},
                     {"instructions", st.instructions},
                     {"dsd_elements", st.dsd_elements},
                     {"tasks_run", st.tasks_run},
                     {"wavelet_hops", st.wavelet_hops},
                     {"ramp_deliveries", st.ramp_deliveries},
                     {"ramp_injections", st.ramp_injections},
                     {"router_buffer_high_water", st.router_buffer_high_water},
                     {"sram_pages", st.sram_pages}};

  const json& expect = s.resolved["expect"];
  std::vector<std::string> failures;
  bool all_pass = true;
  for (const auto& [name, p] : outputs) {
    std::vector<float> v(static_cast<size_t>(p.h * p.w * p.count));
    for (int64_t py = 0; py < p.h; ++py)
      for (int64_t px = 0; px < p.w; ++px) {
        const auto a = fab.read_array(p.x0 + px, p.y0 + py, name);
        std::copy(a.begin(), a.end(), v.begin() + (py * p.w + px) * p.count);
      }
    const Tensor out = Tensor::from_f32({p.h, p.w, p.count}, std::move(v));
    std::string file;
    if (s.resolved["outputs"]["save"].get<bool>()) {
      file = s.resolved["outputs"]["dir"].get<std::string>() + "/" + safe_file_name(name) + ".npy";
      write_npy((std::filesystem::path(opt.out_dir) / file).string(), out);
    }
    std::string line = "  " + name + " fp32" + shape_str(out.shape());
    if (expect["outputs"].contains(name) && expect["outputs"][name].contains("file")) {
      const json& e = expect["outputs"][name];
      const OutputCheck c = check_output(name, out, read_npy(e["file"].get<std::string>()),
                                         {e["rtol"].get<double>(), e["atol"].get<double>()}, "file", expect, failures);
      json r = output_record(name, file, &c.cmp, c.tol.rtol, c.tol.atol);
      r["against"] = "file";
      report["outputs"].push_back(r);
      all_pass = all_pass && c.cmp.pass;
      line += "  vs file: max abs err " + fmt(c.cmp.max_abs_error, "%.3g") + " " + (c.cmp.pass ? con.green("PASS") : con.red("FAIL"));
    } else {
      report["outputs"].push_back(output_record(name, file, nullptr, 0, 0));
      line += "  (no expected values)";
    }
    con.out(line);
  }
  con.out(con.bold("simulated") + " " + fmt(sim_s * 1e6, "%.4f") + " us (" + std::to_string(st.cycles) + " cycles at " +
          fmt(cfg.clock_hz / 1e6, "%.0f") + " MHz, " + std::to_string(st.program_pes) + " PEs, " + std::to_string(st.wavelet_hops) +
          " wavelet hops, preset " + s.preset + ")");
  const json& pub = report["latency"]["published_s"];
  if (!pub.is_null()) {
    const double pv = pub.get<double>();
    report["latency"]["simulated_vs_published_pct"] = (sim_s - pv) / pv * 100.0;
    con.out("published " + fmt(pv * 1e6, "%.4f") + " us (" + report["latency"]["published_source"].get<std::string>() +
            "): simulated is " + fmt((sim_s - pv) / pv * 100.0, "%+.1f") + "%");
  }
  if (s.resolved.contains("trace")) {
    const std::string note = write_trace_file(s.resolved["trace"],
                                              build_wafer_trace(s.resolved["trace"], L, fab, std::filesystem::path(layout_path).stem().string()),
                                              opt.out_dir);
    report["trace"] = {{"file", s.resolved["trace"]["file"]}};
    con.out(note);
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
