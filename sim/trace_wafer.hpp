#pragma once
// The trace of a wafer run, from the fabric's summary (FabricOptions::summary, required) and, at
// detail kernel and above, its records (FabricOptions::record):
//   a process per rectangle of the layout, with
//     thread "kernel"          the run as one slice (the layout's name and cycles)
//     thread "phase TASK"      per task of the rectangle's programs, one slice from its first start
//                              to its last end over all the rectangle's PEs (e.g. a compiled
//                              layer's weight load, x tasks, reduce and hand-off)
//     threads "send cN"/"recv cN"  the wavelet streams on color N to / from other rectangles or
//                              ports (first to last wavelet), joined by flows (traces/README.md);
//                              process "ports" has the ports' ("port NAME send cN")
//     thread "PE (x,y)"        (not at detail "summary") sampled PEs: the rectangle's corners and centre (detail "kernel" or
//                              "instruction"), or up to 64 program PEs per rectangle (detail "pe"),
//                              or the PEs of the rectangle inside the region `pes` {x, y, width,
//                              height} (fabric coordinates) when the trace config gives one;
//                              one slice per task run ("task NAME"; their durations add up to the
//                              PE's busy cycles) with one slice per DSD operation nested inside,
//                              named by opcode, with the PE's instruction text, elements and
//                              cycles as args; async ops on a track per microthread
//                              "PE (x,y) async Q" (Q: its queue)
//   counters (process "fabric"): "busy PEs" (mean PEs running a task), "wavelets delivered per 100
//     cycles", "link utilisation %", and with records "active PEs" (PEs with a DSD operation in
//     flight), binned to at most ~1000 points.
//   process "weight streaming" (when MemoryX/SwarmX moved data): tracks "MemoryX" and "SwarmX"
//     with a slice per transfer (read/update, broadcast/reduce) and counters "MemoryX GB/s" and
//     "SwarmX GB/s" (bytes per bin / bin length).
// Never one track per PE for a full wafer. Times are ns from the run start (pe.clock).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/trace_neuroncore.hpp"
#include "traces/trace_builder.hpp"

namespace tessera::wafer {
class Fabric;
struct LoadedLayout;
class MemoryX;
class SwarmX;
}  // namespace tessera::wafer

namespace tessera::sim {

// Before a run: the trace config's region `pes` must lie on the fabric and hold a PE with a program
// (else an InputError at /trace/pes naming the layout's rectangles).
void check_wafer_trace_pes(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout);
// The PEs the trace shows (at detail kernel and above): per rectangle with a program, those in the
// region `pes`, else its corners and centre (detail kernel, instruction) or its first 64 cells
// (detail pe) -- PEs with a program only, in (x, y) order. A run keeps the records of these PEs
// only (FabricOptions::record_only).
std::vector<std::pair<int32_t, int32_t>> wafer_trace_pes(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout, size_t rect);
std::vector<std::pair<int32_t, int32_t>> wafer_trace_pes(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout);
traces::TraceBuilder build_wafer_trace(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout,
                                       const wafer::Fabric& fab, const std::string& name);
// The same, plus a "weight streaming" process when MemoryX or SwarmX moved data: a track of
// transfers each and bandwidth counters (GB/s), times relative to `t0_s` (SystemC seconds of the
// fabric run's start).
traces::TraceBuilder build_wafer_trace(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout,
                                       const wafer::Fabric& fab, const std::string& name, const wafer::MemoryX* mx,
                                       const wafer::SwarmX* sx, double t0_s, const std::vector<PredictedKernel>& predicted = {},
                                       const std::vector<PredictedKernel>& simulated = {}, const std::vector<PredictedKernel>& steps = {},
                                       const std::vector<StepMark>& closures = {},
                                       double detail_offset_s = 0);
// `steps` (multi-step runs): process "host" with a "steps" track of step slices and the step
// closures as instants (time, name, values as args); the PE detail (the last step's records) is
// placed `detail_offset_s` into the timeline, where that step ran.
// (compiled runs) process "kernels" with the simulated kernel spans (each from the previous
// kernel's output to its own) and process "predicted (compiler)" with the estimator's, one above
// the other.

}  // namespace tessera::sim
