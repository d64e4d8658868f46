// `tessera run` on target.kind = "wafer" with a hand-written layout (model.layout): PE programs and
// routes as in docs/wafer-asm.md, run on the fabric model (models/wafer).
//
// Inputs and outputs bind by name, in this order, to: an edge port of the layout (a [lanes, n]
// stream, [n] for one lane), a MemoryX tensor (outputs: its values after the run), or the PE
// programs' `.data` arrays: the PEs declaring an array must form a rectangle of h x w PEs, and the
// tensor is [h, w, count] -- one slice per PE, rows of PEs first. Outputs are the names in
// /model/read (default: /expect/outputs). model.memoryx and model.swarmx stream weights from
// MemoryX through SwarmX into input ports when the run starts, and reduce what output ports
// collect into MemoryX updates (models/wafer/weight_stream.hpp).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <systemc>

#include "isa/npy.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "isa/numeric.hpp"
#include "models/wafer/fabric.hpp"
#include "models/wafer/weight_stream.hpp"
#include "isa/fileio.hpp"
#include "sim/check.hpp"
#include "sim/heatmap_wafer.hpp"
#include "sim/outdir.hpp"
#include "sim/console.hpp"
#include "sim/fabric_ranks.hpp"
#include "sim/model.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"
#include "sim/run_engines.hpp"
#include "sim/run_wafer.hpp"
#include "sim/session.hpp"
#include "sim/trace_neuroncore.hpp"
#include "sim/trace_wafer.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {

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

// A .npy for a hand-written layout (a port stream, a PE array, a MemoryX tensor): fp32 values the
// host writes in the layout's element type; another dtype only with "cast": true.
Tensor read_layout_file(const json& spec, const std::string& where, const std::string& name) {
  const NpyInfo info = npy_info_at(spec["file"].get<std::string>(), where + "/file");
  // The shape is checked by the caller (it depends on the port, the array or the declaration).
  return read_input_file(spec, where, name, DType::f32, {info.shape});
}

// Port payloads: f32 values, or 16-bit floats in the data half (f16, bf16, cbf16).
uint32_t to_payload(float v, wafer::Elem e) { return wafer::encode_elem(v, e); }
float from_payload(uint32_t p, wafer::Elem e) { return wafer::decode_elem(p, e); }  // (16-bit types read the low half)

}  // namespace

// Fabric counters for report["stats"].
json wafer_stats_json(const wafer::FabricStats& st, double fabric_s) {
  return {{"cycles", st.cycles},
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
          {"sram_pages", st.sram_pages},
          {"bank_conflict_cycles", st.bank_conflict_cycles},
          {"dropped_wavelets", st.dropped_wavelets},
          {"port_in_wavelets", st.port_in_wavelets},
          {"port_out_wavelets", st.port_out_wavelets},
          {"fabric_s", fabric_s}};
}

void write_wafer_heatmap(const Scenario& s, const wafer::Fabric& fab, const std::string& title, const std::string& out_dir, json& report) {
  if (!s.resolved["outputs"].value("heatmap", true)) return;
  const std::string path = (std::filesystem::path(out_dir) / "heatmap.svg").string();
  write_file_atomic(path, wafer_heatmap_svg(fab, title));
  const HeatmapFigures f = wafer_heatmap_figures(fab);
  report["heatmap"] = {{"file", "heatmap.svg"},     {"block", f.block},         {"busy_mean", f.busy_mean}, {"busy_max", f.busy_max},
                       {"sram_mean", f.sram_mean}, {"sram_max", f.sram_max}, {"link_mean", f.link_mean}, {"link_max", f.link_max}};
  Console::get().out("heatmap: " + shown_path(path) + " (busy " + format_num(100 * f.busy_mean, "%.1f") + "% mean, SRAM " +
                     format_num(100 * f.sram_mean, "%.1f") + "% mean, busiest link " + format_num(100 * f.link_max, "%.1f") + "%)");
}

// Busy time, the window from the first transfer's start to the last one's end, and the bytes over
// that window, of a MemoryX or SwarmX transfer log.
json stream_figures(const std::vector<wafer::StreamTransfer>& log) {
  double busy = 0, first = 0, last = 0;
  int64_t bytes = 0;
  for (size_t k = 0; k < log.size(); ++k) {
    busy += (log[k].end - log[k].start).to_seconds();
    first = k ? std::min(first, log[k].start.to_seconds()) : log[k].start.to_seconds();
    last = std::max(last, log[k].end.to_seconds());
    bytes += log[k].bytes;
  }
  const double window = log.empty() ? 0.0 : last - first;
  return {{"busy_s", busy}, {"window_s", window}, {"achieved_bandwidth_Bps", window > 0 ? static_cast<double>(bytes) / window : 0.0}};
}

// Faults of run.faults armed on the fabric (SRAM bits flipped or forced at a cycle, wavelets
// dropped on a link); returns their report records, `fault_what` a line each.
json arm_wafer_faults(const Scenario& s, wafer::Fabric& fab, std::vector<std::string>& fault_what) {
  json faults = json::array();
  for (size_t i = 0; i < s.resolved["run"]["faults"].size(); ++i) {
    const json& f = s.resolved["run"]["faults"][i];
    const std::string where = "/run/faults/" + std::to_string(i);
    const auto pe = f["pe"].get<std::vector<int64_t>>();
    if (pe.size() != 2) throw InputError(where + "/pe", "a PE is [x, y]");
    const std::string kind = f["kind"].get<std::string>();
    const int64_t cycle = f["cycle"].get<int64_t>();
    json rec = {{"kind", kind}, {"pe", pe}, {"cycle", cycle}};
    try {
      if (kind == "drop_wavelets") {
        if (!f.contains("direction") || !f.contains("color"))
          throw InputError(where, "drop_wavelets needs \"direction\" and \"color\"", "e.g. \"direction\": \"E\", \"color\": 1");
        wafer::Fabric::WaveletDrop dw;
        dw.x = pe[0];
        dw.y = pe[1];
        const std::string dn = f["direction"].get<std::string>();
        for (int k = 0; k < wafer::kDirs; ++k)
          if (wafer::dir_name(static_cast<wafer::Dir>(k)) == dn) dw.dir = static_cast<wafer::Dir>(k);
        dw.color = f["color"].get<int>();
        dw.from_cycle = cycle;
        dw.count = f["count"].get<int64_t>();
        fab.add_fault(dw);
        rec["direction"] = f["direction"];
        rec["color"] = dw.color;
        rec["count"] = dw.count;
        fault_what.push_back("up to " + std::to_string(dw.count) + " wavelet(s) of color " + std::to_string(dw.color) + " leaving PE (" +
                             std::to_string(pe[0]) + "," + std::to_string(pe[1]) + ") towards " + dn + " dropped from cycle " + std::to_string(cycle));
      } else {
        if (!f.contains("array")) throw InputError(where, kind + " needs \"array\"", "name a .data array of the program that PE runs");
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
        wafer::Fabric::SramFlip fl;
        fl.x = pe[0];
        fl.y = pe[1];
        fl.addr = decl->addr + static_cast<uint32_t>(el * es + bit / 8);
        fl.bit = static_cast<int>(bit % 8);
        fl.cycle = cycle;
        if (kind == "sram_bit_force") fl.force = f["value"].get<int>();
        fab.add_fault(fl);
        rec["array"] = array;
        rec["element"] = el;
        rec["bit"] = bit;
        if (kind == "sram_bit_force") rec["value"] = fl.force;
        fault_what.push_back((kind == "sram_bit_force" ? "bit " + std::to_string(bit) + " forced to " + std::to_string(fl.force) : "bit " + std::to_string(bit) + " flipped") +
                             " in " + array + "[" + std::to_string(el) + "] on PE (" + std::to_string(pe[0]) + "," + std::to_string(pe[1]) + ") at cycle " +
                             std::to_string(cycle));
      }
    } catch (const InputError& e) {  // the fabric names the PE; the scenario pointer goes first
      const Diagnostic& dg = e.diagnostics().at(0);
      if (dg.where.rfind("/run/faults", 0) == 0) throw;
      throw InputError(where, dg.where + ": " + dg.message, dg.hint);
    }
    faults.push_back(rec);
  }
  return faults;
}

// What each armed fault did, into its record and on the console.
void report_wafer_faults(json& faults, const std::vector<std::string>& fault_what, const wafer::Fabric& fab) {
  auto& con = Console::get();
  for (size_t i = 0; i < faults.size(); ++i) {
    const auto& fr = fab.faults_fired().at(i);
    faults[i]["fired"] = fr.count > 0;
    faults[i]["fired_count"] = fr.count;
    faults[i]["first_cycle"] = fr.count ? json(fr.first_cycle) : json(nullptr);
    faults[i]["last_cycle"] = fr.count ? json(fr.last_cycle) : json(nullptr);
    con.warn("fault injected: " + fault_what[i] + ": " +
             (faults[i]["kind"].get<std::string>() == "drop_wavelets"
                  ? std::to_string(fr.count) + " dropped" + (fr.count ? " (cycles " + std::to_string(fr.first_cycle) + ".." + std::to_string(fr.last_cycle) + ")" : "")
                  : std::string(fr.count ? "fired" : "did not fire (the run ended first)")));
  }
}

int run_wafer(const Scenario& s, const RunOptions& opt) {
  auto& con = Console::get();
  const auto wall0 = std::chrono::steady_clock::now();
  const json& model = s.resolved.value("model", json());
  if (model.is_null()) throw InputError("/model", "the scenario has no model", "give /model/onnx, /model/graph or a hand-written /model/layout");
  if (model.contains("onnx") || model.contains("graph")) return run_wafer_graph(s, opt);
  if (s.resolved["run"]["steps"].get<int64_t>() != 1)
    throw InputError("/run/steps", "multi-step runs of hand-written layouts are not supported yet (compiled models take run.steps)", "set run.steps to 1");
  if (!s.resolved["step_closures"].empty())
    throw InputError("/step_closures", "step closures need a model (compiled runs); hand-written layouts do not take them yet", "remove /step_closures");
  if (!cpp_step_closures().empty())
    throw InputError("C++ step closure '" + cpp_step_closures().front().name + "'", "step closures need a model (compiled runs); hand-written layouts do not take them yet");
  if (!s.resolved["run"]["numerics"].get<bool>()) con.warn("/run/numerics: the wafer model always computes values");

  const wafer::WaferConfig cfg = wafer::WaferConfig::from(s.params);
  const std::string layout_path = model["layout"].get<std::string>();
  enter_phase("compile");
  const wafer::LoadedLayout L = wafer::load_layout(layout_path, cfg);

  DiagnosticList d;
  std::map<std::string, std::pair<ArrayPlace, Tensor>> inputs;
  std::map<std::string, Tensor> port_inputs;
  for (const auto& [name, spec] : s.resolved["inputs"].items()) {
    const std::string where = "/inputs/" + schema::pointer_token(name);
    if (const wafer::PortSpec* ps = L.layout.port(name)) {
      if (!ps->input) {
        d.add(where, "port '" + name + "' is an output port", "give streams to input ports; read output ports under /expect/outputs");
        continue;
      }
      if (!spec.contains("file")) {
        d.add(where, "a port stream needs a file (its length is the file's)", "a .npy of shape [lanes, n], or [n] for one lane");
        continue;
      }
      try {
        Tensor t = read_layout_file(spec, where, name);
        if (t.rank() == 1 && ps->length == 1) t = t.reshaped({1, t.shape()[0]});
        if (t.rank() != 2 || t.shape()[0] != ps->length) {
          d.add(where, "shape " + shape_str(t.shape()) + " does not match port '" + name + "': [" + std::to_string(ps->length) + " lanes, n]");
          continue;
        }
        port_inputs[name] = t.cast(DType::f32);
      } catch (const InputError& e) {
        for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
      }
      continue;
    }
    try {
      const ArrayPlace p = place_of(L, name, where);
      const Shape shape{p.h, p.w, p.count};
      Tensor t;
      if (spec.contains("file")) {
        t = read_layout_file(spec, where, name);
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
  // MemoryX tensors and the SwarmX streams.
  const json mxj = model.value("memoryx", json::object());
  const json sxj = model.value("swarmx", json::object());
  const json mx_tensors = mxj.value("tensors", json::object());
  std::map<std::string, Tensor> mx_init;
  for (const auto& [name, spec] : mx_tensors.items()) {
    const std::string where = "/model/memoryx/tensors/" + schema::pointer_token(name);
    const Shape shape = spec["shape"].get<Shape>();
    try {
      Tensor t;
      if (spec.contains("file")) t = read_layout_file(spec, where, name);
      else {
        const json& r = spec["random"];
        t = random_tensor(DType::f32, shape, r["seed"].get<uint64_t>(), r["dist"] == "normal", r["scale"].get<double>());
      }
      if (t.shape() != shape) d.add(where, "the file's shape " + shape_str(t.shape()) + " is not the declared " + shape_str(shape));
      else mx_init[name] = t.cast(DType::f32);
    } catch (const InputError& e) {
      for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
    }
  }
  auto port_of = [&](const std::string& name, bool input, const std::string& where) -> const wafer::PortSpec* {
    const wafer::PortSpec* ps = L.layout.port(name);
    if (!ps) d.add(where, "the layout declares no port '" + name + "'", "declare it under \"ports\" in " + layout_path);
    else if (ps->input != input) d.add(where, "port '" + name + "' is an " + (input ? "output" : "input") + " port");
    else return ps;
    return nullptr;
  };
  std::map<std::string, std::string> streamed;  // input port -> MemoryX tensor
  const json bcasts = sxj.value("broadcast", json::array());
  for (size_t i = 0; i < bcasts.size(); ++i) {
    const std::string where = "/model/swarmx/broadcast/" + std::to_string(i);
    const std::string t = bcasts[i]["tensor"].get<std::string>();
    if (!mx_init.count(t) && !mx_tensors.contains(t))
      d.add(where + "/tensor", "no MemoryX tensor '" + t + "'", "declare it under /model/memoryx/tensors");
    const auto& ports = bcasts[i]["ports"];
    for (size_t k = 0; k < ports.size(); ++k) {
      const std::string pn = ports[k].get<std::string>();
      if (!port_of(pn, true, where + "/ports/" + std::to_string(k))) continue;
      if (port_inputs.count(pn) || streamed.count(pn))
        d.add(where + "/ports/" + std::to_string(k), "port '" + pn + "' already gets a stream", "one stream per input port");
      streamed[pn] = t;
    }
  }
  struct Reduce {
    std::vector<const wafer::PortSpec*> ports;
    std::string tensor;
  };
  std::vector<Reduce> reduces;
  const json reds = sxj.value("reduce", json::array());
  for (size_t i = 0; i < reds.size(); ++i) {
    const std::string where = "/model/swarmx/reduce/" + std::to_string(i);
    Reduce r;
    r.tensor = reds[i]["tensor"].get<std::string>();
    if (!mx_tensors.contains(r.tensor)) d.add(where + "/tensor", "no MemoryX tensor '" + r.tensor + "'", "declare it under /model/memoryx/tensors");
    const auto& ports = reds[i]["ports"];
    for (size_t k = 0; k < ports.size(); ++k)
      if (const auto* ps = port_of(ports[k].get<std::string>(), false, where + "/ports/" + std::to_string(k))) r.ports.push_back(ps);
    reduces.push_back(std::move(r));
  }
  // Outputs: ports, MemoryX tensors, arrays.
  std::map<std::string, ArrayPlace> outputs;
  std::vector<std::string> port_outputs, mx_outputs;
  for (size_t i = 0; i < reads.size(); ++i) {
    const std::string where = model.contains("read") ? "/model/read/" + std::to_string(i) : "/expect/outputs/" + reads[i];
    if (const wafer::PortSpec* ps = L.layout.port(reads[i])) {
      if (ps->input) d.add(where, "port '" + reads[i] + "' is an input port; it collects nothing");
      else port_outputs.push_back(reads[i]);
      continue;
    }
    if (mx_tensors.contains(reads[i])) {
      mx_outputs.push_back(reads[i]);
      continue;
    }
    try {
      outputs[reads[i]] = place_of(L, reads[i], where);
    } catch (const InputError& e) {
      for (const auto& di : e.diagnostics()) d.add(di.where, di.message, di.hint);
    }
  }
  d.throw_if_any();
  wafer::Fabric::check_host_memory(L, cfg, static_cast<int64_t>(s.resolved["run"]["host_memory"].get<double>()));
  if (trace_wanted(s)) check_wafer_trace_pes(s.resolved["trace"], L);
  if (opt.check_only) {
    if (!s.resolved["run"]["faults"].empty()) {  // faults name PEs, arrays and routes: armed on the loaded fabric (not run)
      models::set_fs_resolution();
      wafer::Fabric fab("wafer", cfg, wafer::FabricOptions{});
      fab.load(L);
      std::vector<std::string> what;
      arm_wafer_faults(s, fab, what);
    }
    note_checked(opt, "layout " + std::to_string(L.layout.width) + " x " + std::to_string(L.layout.height) + " PEs, " +
                          std::to_string(L.programs.size()) + " program(s), inputs, host memory");
    return 0;
  }

  enter_phase("elaborate");
  models::set_fs_resolution();
  wafer::FabricOptions fo;
  Heartbeat heartbeat("simulating", 0.0, "hops");  // a hand-written layout has no prediction
  fo.progress = [&heartbeat, hz = cfg.clock_hz](int64_t cycle, int64_t hops) { heartbeat.tick(static_cast<double>(cycle) / hz, hops); };
  fo.max_cycles = static_cast<int64_t>(s.resolved["run"]["max_time"].get<double>() * cfg.clock_hz);
  fo.record = trace_records(s);  // the op and task records the trace renders at detail kernel and above: its PEs' only
  if (fo.record) fo.record_only = wafer_trace_pes(s.resolved["trace"], L);
  fo.summary = trace_wanted(s);
  fo.threads = wafer_threads(s);
  fo.stop = [] { return interrupt_requested(); };  // SIGINT stops a long fabric run (tessera exits 130, nothing written)
  fo.host_memory_budget = static_cast<int64_t>(s.resolved["run"]["host_memory"].get<double>());
  fo.comm = fabric_comm();  // under mpirun: a stripe of rows per rank
  wafer::Fabric fab("wafer", cfg, fo);
  fab.load(L);
  wafer::MemoryX mx("memoryx", cfg);
  wafer::SwarmX sx("swarmx", cfg);
  sx.socket.bind(mx.socket);
  mx.set_sgd(mxj.value("optimizer", json::object()).value("learning_rate", 0.01));
  for (const auto& [name, t] : mx_init) mx.add_tensor(name, t.to_f32());
  for (const auto& [name, t] : port_inputs) {
    const wafer::PortSpec* ps = L.layout.port(name);
    const auto v = t.to_f32();
    const int64_t n = t.shape()[1];
    for (int64_t lane = 0; lane < ps->length; ++lane) {
      std::vector<uint32_t> pl(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pl[static_cast<size_t>(i)] = to_payload(v[static_cast<size_t>(lane * n + i)], ps->type);
      fab.set_port_stream(name, lane, std::move(pl));
    }
  }
  // Weight streams: read from MemoryX through SwarmX from the start of the run; each value
  // reaches every lane of the port when its burst has passed the tree.
  const sc_core::sc_time t_start = sc_core::sc_time_stamp();
  const models::ClockDomain& ck = fab.clock();
  const int64_t c_start = ck.cycle_at_or_after(static_cast<models::Femtos>(t_start.value()));
  std::map<std::string, wafer::SwarmX::Stream> streams;
  for (const auto& [pn, t] : streamed) {
    if (!streams.count(t)) streams[t] = sx.broadcast(mx.address(t), mx.count(t), t_start);
    const auto& st = streams[t];
    const wafer::PortSpec* ps = L.layout.port(pn);
    std::vector<uint32_t> pl(st.values.size());
    std::vector<int64_t> ready(st.values.size());
    for (size_t i = 0; i < pl.size(); ++i) {
      pl[i] = to_payload(st.values[i], ps->type);
      ready[i] = ck.cycle_at_or_after(static_cast<models::Femtos>(st.ready[i].value())) - c_start;
    }
    for (int64_t lane = 0; lane < ps->length; ++lane) fab.set_port_stream(pn, lane, pl, ready);
  }
  for (const auto& [name, pt] : inputs) {
    const auto& [p, t] = pt;
    const auto v = t.to_f32();
    for (int64_t py = 0; py < p.h; ++py)
      for (int64_t px = 0; px < p.w; ++px)
        fab.write_array(p.x0 + px, p.y0 + py, name,
                        std::span<const float>(v.data() + (py * p.w + px) * p.count, static_cast<size_t>(p.count)));
  }
  std::vector<std::string> fault_what;
  json faults = arm_wafer_faults(s, fab, fault_what);
  fab.start();
  install_interrupt_handlers();
  enter_phase("simulate");
  sc_core::sc_start();
  tessera::models::after_systemc();
  heartbeat.finish();
  poll_interrupt();
  enter_phase("check");
  report_wafer_faults(faults, fault_what, fab);
  if (fab.error()) {  // not thrown: see run_neuroncore.cpp
    bool fired = false;
    for (const auto& f : faults) fired = fired || f.value("fired", false);
    con.error(Diagnostic{layout_path, *fab.error(),
                         fired ? "the injected fault (run.faults) stopped the run here; remove it to run the layout as written"
                               : "fix the PE programs or routes"}
                  .str());
    return 2;
  }
  if (!fab.finished()) throw std::runtime_error("the fabric did not finish (SystemC ran out of events)");
  host_note("threads", {{"requested", s.resolved["run"]["threads"]}, {"used", fab.threads_used()}, {"ranks", fab.ranks_used()}});

  const wafer::FabricStats& st = fab.stats();
  // Gradient streams: each reduce sums every lane of its ports (each the tensor's length); MemoryX
  // applies the update once the tree has summed the last wavelet to arrive.
  sc_core::sc_time t_end = sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(c_start + st.cycles)));
  json reduced = json::array();
  for (size_t i = 0; i < reduces.size(); ++i) {
    const Reduce& r = reduces[i];
    const int64_t n = mx.count(r.tensor);
    std::vector<std::vector<float>> grads;
    int64_t last = 0;
    for (const wafer::PortSpec* ps : r.ports)
      for (int64_t lane = 0; lane < ps->length; ++lane) {
        const auto& out = fab.port_output(ps->name, lane);
        if (static_cast<int64_t>(out.size()) != n)
          throw InputError("/model/swarmx/reduce/" + std::to_string(i), "port '" + ps->name + "' lane " + std::to_string(lane) + " collected " +
                                                                          std::to_string(out.size()) + " wavelets; MemoryX tensor '" + r.tensor + "' has " +
                                                                          std::to_string(n) + " elements",
                           "every lane of a reduced port sends one gradient of the tensor's size");
        std::vector<float> g(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) g[static_cast<size_t>(k)] = from_payload(out[static_cast<size_t>(k)].first, ps->type);
        if (n) last = std::max(last, out.back().second);
        grads.push_back(std::move(g));
      }
    const sc_core::sc_time t0 = sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(c_start + last)));
    const sc_core::sc_time done = sx.reduce_update(mx.address(r.tensor), grads, t0);
    t_end = std::max(t_end, done);
    reduced.push_back({{"tensor", r.tensor}, {"gradients", grads.size()}, {"updated_at_s", (done - t_start).to_seconds()}});
  }
  const double fabric_s = static_cast<double>(st.cycles) / cfg.clock_hz;
  const double sim_s = (t_end - t_start).to_seconds();
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
  report["faults"] = faults;
  report["stats"] = wafer_stats_json(st, fabric_s);
  const json mx_figures = stream_figures(mx.transfers()), sx_figures = stream_figures(sx.transfers());
  if (!streamed.empty() || !reduces.empty() || !mx_init.empty())
    report["weight_streaming"] = {{"memoryx", {{"bytes_read", mx.stats().bytes_read},
                                               {"bytes_written", mx.stats().bytes_written},
                                               {"updates", mx.stats().updates},
                                               {"transactions", mx.stats().transactions},
                                               {"busy_s", mx_figures["busy_s"]},
                                               {"achieved_bandwidth_Bps", mx_figures["achieved_bandwidth_Bps"]}}},
                                  {"swarmx", {{"bytes_broadcast", sx.stats().bytes_broadcast},
                                              {"bytes_reduced", sx.stats().bytes_reduced},
                                              {"busy_s", sx_figures["busy_s"]},
                                              {"achieved_bandwidth_Bps", sx_figures["achieved_bandwidth_Bps"]}}},
                                  {"broadcast", streamed},
                                  {"reduce", reduced}};

  const json& expect = s.resolved["expect"];
  std::vector<std::string> failures;
  bool all_pass = true;
  std::vector<std::pair<std::string, Tensor>> results;
  for (const auto& [name, p] : outputs) {
    std::vector<float> v(static_cast<size_t>(p.h * p.w * p.count));
    for (int64_t py = 0; py < p.h; ++py)
      for (int64_t px = 0; px < p.w; ++px) {
        const auto a = fab.read_array(p.x0 + px, p.y0 + py, name);
        std::copy(a.begin(), a.end(), v.begin() + (py * p.w + px) * p.count);
      }
    results.push_back({name, Tensor::from_f32({p.h, p.w, p.count}, std::move(v))});
  }
  for (const auto& name : port_outputs) {
    const wafer::PortSpec* ps = L.layout.port(name);
    const size_t n = fab.port_output(name, 0).size();
    std::vector<float> v;
    for (int64_t lane = 0; lane < ps->length; ++lane) {
      const auto& out = fab.port_output(name, lane);
      if (out.size() != n)
        throw InputError("/expect/outputs/" + schema::pointer_token(name), "port '" + name + "' lane " + std::to_string(lane) + " collected " +
                                                                              std::to_string(out.size()) + " wavelets, lane 0 " + std::to_string(n),
                         "a port is read as [lanes, n]: every lane the same length");
      for (const auto& [pl, cyc] : out) v.push_back(from_payload(pl, ps->type));
    }
    results.push_back({name, Tensor::from_f32({ps->length, static_cast<int64_t>(n)}, std::move(v))});
  }
  for (const auto& name : mx_outputs)
    results.push_back({name, Tensor::from_f32(mx_tensors[name]["shape"].get<Shape>(), mx.values(name))});
  for (const auto& [name, out] : results) {
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
      line += "  vs file: max abs err " + format_num(c.cmp.max_abs_error, "%.3g") + " " + (c.cmp.pass ? con.green("PASS") : con.red("FAIL"));
    } else {
      report["outputs"].push_back(output_record(name, file, nullptr, 0, 0));
      line += "  (no expected values)";
    }
    con.out(line);
  }
  if (!streamed.empty() || !reduces.empty())
    con.out("weight streaming: MemoryX read " + std::to_string(mx.stats().bytes_read) + " B, " + std::to_string(mx.stats().updates) +
            " update(s); fabric done at " + format_num(fabric_s * 1e6, "%.4f") + " us, last update at " + format_num(sim_s * 1e6, "%.4f") + " us");
  con.out(con.bold("simulated") + " " + format_num(sim_s * 1e6, "%.4f") + " us (" + std::to_string(st.cycles) + " cycles at " +
          format_num(cfg.clock_hz / 1e6, "%.0f") + " MHz, " + std::to_string(st.program_pes) + " PEs, " + std::to_string(st.wavelet_hops) +
          " wavelet hops, preset " + s.preset + ")");
  compare_published(report, sim_s);
  if (trace_wanted(s)) {
    const std::string note = write_trace_file(s.resolved["trace"],
                                              build_wafer_trace(s.resolved["trace"], L, fab, std::filesystem::path(layout_path).stem().string(), &mx, &sx,
                                                                t_start.to_seconds()),
                                              opt.out_dir);
    report["trace"] = {{"file", s.resolved["trace"]["file"]}};
    con.out(note);
  }
  write_wafer_heatmap(s, fab, s.name + " (" + std::filesystem::path(layout_path).filename().string() + ", " + s.preset + ")", opt.out_dir, report);
  return finish_run(opt.out_dir, report, all_pass, failures, std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
}

}  // namespace tessera::sim
