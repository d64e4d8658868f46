#pragma once
// The trace of a NeuronCore run: measured tracks from the core's instruction records, counters,
// DMA -> consumer flows, and the compiler's predicted kernels as a separate process.
//
// Layout (Perfetto; the Chrome JSON fallback has the same processes and threads):
//   process "neuroncore core0" (pid 1)
//     thread "kernels"        the program as one slice (its name: the program file's stem)
//     thread per used lane    tensor, tensor loader (load_stationary runs in the background, so it
//                             overlaps matmuls and gets its own track), vector, scalar, gpsimd,
//                             sync, control: one slice per instruction named by opcode
//     thread "dma q<N>"       one per DMA queue used: one slice per transfer
//     counters                "HBM bandwidth (GB/s)" (binned, <= ~1000 points),
//                             "SBUF high-water (bytes/partition)", "PSUM high-water (bytes/partition)"
//     flows                   from a DMA transfer to each instruction that reads its data
//   process "predicted (compiler)" (pid 2), thread "kernels": the estimator's kernels
//
// Instruction slice args: opcode, operands (disassembly), bundle, line, cycles, start_cycle and
// end_cycle (in the lane's own clock, counted from the program start); DMA: queue, bytes,
// direction. Times are ns from the program start, rounded to nearest (traces/README.md).
//
// trace.detail: "instruction" and "pe" (the same on a NeuronCore): every instruction and transfer;
// "kernel": one summary slice per lane and DMA queue (args: instructions, busy cycles,
// utilisation) plus the counters. Optional trace keys: "sample" (keep 1 in N instruction slices
// per track; default 1) and "max_bytes" (byte budget, a number or a size like "64MiB"; default
// 256 MiB; past it slices are dropped and a warning says how many).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traces/trace_builder.hpp"

namespace tessera::neuroncore {
struct Program;
class NeuronCore;
}  // namespace tessera::neuroncore

namespace tessera::sim {

// A kernel of the compiler's estimate, in seconds from the program start.
struct PredictedKernel {
  std::string name;
  double start_s = 0, end_s = 0;
};

// An instant on the host's steps track (a step closure that ran): time, name, values as args.
struct StepMark {
  double t_s = 0;
  std::string name;
  std::vector<traces::Arg> args;
};

// Builds the trace in memory (what write_neuroncore_trace writes; tests use it directly).
// `trace_cfg` is the resolved /trace object; missing keys take their defaults.
traces::TraceBuilder build_neuroncore_trace(const nlohmann::json& trace_cfg, const neuroncore::Program& prog,
                                            const neuroncore::NeuronCore& core,
                                            const std::vector<PredictedKernel>& predicted,
                                            const std::vector<PredictedKernel>& steps = {},
                                            const std::vector<StepMark>& closures = {},
                                            int64_t origin_fs = -1,
                                            const std::vector<PredictedKernel>& phases = {});

// Writes a built trace into out_dir/<trace.file> atomically in trace.format ("perfetto" or
// "json"), warns when the byte budget trimmed it, and returns the one-line note (shared by every
// target's renderer).
std::string write_trace_file(const nlohmann::json& trace_cfg, const traces::TraceBuilder& b, const std::string& out_dir);

// Writes the run's trace into out_dir/<trace.file> atomically, in trace.format ("perfetto" or
// "json"); warns on the console when the byte budget trimmed it; returns a one-line note
// ("trace: DIR/trace.pftrace, 12.3 KiB, 345 slices, detail instruction[, dropped N]").
std::string write_neuroncore_trace(const nlohmann::json& trace_cfg, const neuroncore::Program& prog,
                                   const neuroncore::NeuronCore& core, const std::vector<PredictedKernel>& predicted,
                                   const std::string& out_dir,
                                   const std::vector<PredictedKernel>& steps = {},
                                   const std::vector<StepMark>& closures = {},
                                   int64_t origin_fs = -1,
                                   const std::vector<PredictedKernel>& phases = {});
// Multi-step runs: `steps` (slices on a "host" process's "steps" track) and the step closures (instants
// at the steps' ends with their values as args); the core's records (the last step's) are placed
// from `origin_fs`, the first step's start, so they sit in that step's slice. Training runs add
// `phases` (forward, loss, backward, optimizer spans of every step) on the host's "phases" track.

}  // namespace tessera::sim
