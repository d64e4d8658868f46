#pragma once
// Wafer runs (run_wafer.cpp: hand-written layouts; run_wafer_graph.cpp: compiled models) and what
// they share.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/run.hpp"

namespace sc_core {
class sc_time;
}
namespace tessera::wafer {
enum class Elem : uint8_t;
class Fabric;
class MemoryX;
class SwarmX;
struct Compiled;
struct MappingOptions;
struct FabricOptions;
struct FabricStats;
struct LoadedLayout;
struct StreamTransfer;
struct WaferConfig;
}

namespace tessera::sim {
class Heartbeat;

// run.faults armed on the fabric (SRAM bits flipped or forced at a cycle, wavelets dropped on a
// link); returns their report records and, in `what`, a line each. Errors name /run/faults/N.
nlohmann::json arm_wafer_faults(const Scenario& s, wafer::Fabric& fab, std::vector<std::string>& what);
// After the run: what each fault did, into its record and on the console.
void report_wafer_faults(nlohmann::json& faults, const std::vector<std::string>& what, const wafer::Fabric& fab);

// Fabric counters for report["stats"]; MemoryX / SwarmX transfer figures (busy_s, window_s,
// achieved_bandwidth_Bps).
nlohmann::json wafer_stats_json(const wafer::FabricStats& st, double fabric_s);
nlohmann::json stream_figures(const std::vector<wafer::StreamTransfer>& log);
// outputs.heatmap: heatmap.svg (sim/heatmap_wafer.hpp) of the fabric's last run into out_dir,
// report["heatmap"] (file and the panels' means and maxima), a line on the console.
void write_wafer_heatmap(const Scenario& s, const wafer::Fabric& fab, const std::string& title, const std::string& out_dir, nlohmann::json& report);

// Compiled wafer programs (run_wafer_graph.cpp, shared with train_wafer.cpp): `--emit-program`
// writes the layout and PE programs; the compiled layout loaded (a failure is a compiler bug);
// every layer's weights streamed from MemoryX through SwarmX into its port from `t_start` (weight
// streaming; fp16 mappings take the fp32 masters rounded at the port).
void write_compiled_wafer(const wafer::Compiled& cp, const RunOptions& opt);
// /precision/compute as the compiler's element type (an error at the pointer for a type the wafer
// compiler does not map).
wafer::Elem wafer_compute(const Scenario& s);
// /run/threads as a count: "auto" is the host's threads (isa/host_threads.hpp: the cores, or
// TESSERA_HOST_THREADS, which compare and sweep set for their children).
int wafer_threads(const Scenario& s);
// /mapping/wafer_rect into the compiler's rectangle (an error at the pointer unless [width, height]).
void wafer_rect_option(const nlohmann::json& mapping, wafer::MappingOptions& mo);
// Micro-batch i of n of a tensor with the samples along its first dimension, and back
// (run_wafer_graph.cpp).
Tensor batch_part(const Tensor& x, int64_t i, int64_t n);
Tensor batch_concat(const std::vector<Tensor>& parts);
// mapping.micro_batch auto: the whole batch B, or -- when a PE's data does not fit -- the largest
// divisor of B that does. `compile(b)` keeps its result and throws wafer::DoesNotFit when b samples
// do not fit. Returns the samples per run; the errors say what the whole batch needs and, when
// smaller runs do not help or the model cannot take them, why (run_wafer_graph.cpp).
int64_t fit_micro_batch(int64_t B, const std::function<void(int64_t)>& compile);
// The fabric options of a compiled run: run.max_time, run.host_memory, a trace's records, task
// ends, SIGINT polling, eager memory-only ops unless run.faults are armed.
// `hb` (optional): ticked by the fabric's progress callback (simulated time, hops).
// `L`: the loaded layout, whose traced PEs (wafer_trace_pes) are the only ones whose records are kept.
wafer::FabricOptions compiled_fabric_options(const Scenario& s, const wafer::WaferConfig& cfg, Heartbeat* hb = nullptr,
                                             const wafer::LoadedLayout* L = nullptr);
wafer::LoadedLayout load_compiled_wafer(const wafer::Compiled& cp, const wafer::WaferConfig& cfg);
void stream_compiled_weights(const wafer::Compiled& cp, wafer::Fabric& fab, wafer::MemoryX& mx, wafer::SwarmX& sx, const sc_core::sc_time& t_start);

// A model (ONNX or inline graph) compiled by mapper/wafer and run on the fabric.
int run_wafer_graph(const Scenario& s, const RunOptions& opt);

}  // namespace tessera::sim
