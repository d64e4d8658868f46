#pragma once
// The trace of a wafer run, from the fabric's records (FabricOptions::record):
//   a process per rectangle of the layout, with
//     thread "kernel"          the run as one slice (the layout's name and cycles)
//     thread "PE (x,y)"        sampled PEs: the rectangle's corners and centre (detail "kernel" or
//                              "instruction"), or up to 64 program PEs per rectangle (detail "pe");
//                              one slice per DSD operation, named by opcode, with the PE's
//                              instruction text, elements and cycles as args
//   counters (process "fabric"): "active PEs" (PEs with a DSD operation in flight) and
//     "wavelets delivered per 100 cycles", binned to at most ~1000 points.
// Never one track per PE for a full wafer. Times are ns from the run start (pe.clock).
#include <nlohmann/json.hpp>
#include <string>

#include "traces/trace_builder.hpp"

namespace tessera::wafer {
class Fabric;
struct LoadedLayout;
}  // namespace tessera::wafer

namespace tessera::sim {

traces::TraceBuilder build_wafer_trace(const nlohmann::json& trace_cfg, const wafer::LoadedLayout& layout,
                                       const wafer::Fabric& fab, const std::string& name);

}  // namespace tessera::sim
