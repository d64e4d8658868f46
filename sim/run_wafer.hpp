#pragma once
// Wafer runs (run_wafer.cpp: hand-written layouts; run_wafer_graph.cpp: compiled models) and what
// they share.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/run.hpp"

namespace tessera::wafer {
class Fabric;
struct FabricStats;
struct StreamTransfer;
}

namespace tessera::sim {

// run.faults armed on the fabric (SRAM bits flipped or forced at a cycle, wavelets dropped on a
// link); returns their report records and, in `what`, a line each. Errors name /run/faults/N.
nlohmann::json arm_wafer_faults(const Scenario& s, wafer::Fabric& fab, std::vector<std::string>& what);
// After the run: what each fault did, into its record and on the console.
void report_wafer_faults(nlohmann::json& faults, const std::vector<std::string>& what, const wafer::Fabric& fab);

// Fabric counters for report["stats"]; MemoryX / SwarmX transfer figures (busy_s, window_s,
// achieved_bandwidth_Bps).
nlohmann::json wafer_stats_json(const wafer::FabricStats& st, double fabric_s);
nlohmann::json stream_figures(const std::vector<wafer::StreamTransfer>& log);

// A model (ONNX or inline graph) compiled by mapper/wafer and run on the fabric.
int run_wafer_graph(const Scenario& s, const RunOptions& opt);

}  // namespace tessera::sim
