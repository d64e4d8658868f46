// Wafer-scale engine parameters. Sources: shared/reference/wafer.md; "SDK" = Cerebras SDK
// documentation, "3P" = a third-party characterisation of WSE-3 (plausible, unconfirmed).
#include "isa/wafer/params.hpp"

namespace tessera::wafer {

using namespace tessera::decl;
using U = UnitKind;

const TargetDesc& target_desc() {
  static const TargetDesc desc = [] {
    TargetDesc t;
    t.kind = "wafer";
    t.description = "wafer-scale 2D mesh of PEs (48 KiB SRAM, DSD vector engine, colored-wavelet router) with MemoryX/SwarmX weight streaming";
    const double MHz = 1e6, KiB = 1024, GBs = 1e9, us = 1e-6;
    t.decls = {
        integer("fabric.width", U::count, 750, 1, 2048, "PE columns of the program rectangle", "wafer.md Whole wafer: CS-2 usable rectangle 750 x 994 (SDK)"),
        integer("fabric.height", U::count, 994, 1, 2048, "PE rows of the program rectangle", "wafer.md Whole wafer: CS-2 usable rectangle 750 x 994 (SDK)"),
        number("pe.clock", U::frequency, 850 * MHz, 1e6, 1e10, "PE and router clock", "wafer.md PE: 850 MHz in Cerebras' example timing code (SDK); 1.1 GHz elsewhere"),
        number("pe.sram_bytes", U::bytes, 48 * KiB, 1024, 1048576.0, "SRAM per PE", "wafer.md PE: 48 KiB = 49,152 bytes (SDK CSL Appendix)"),
        integer("pe.sram_banks", U::count, 8, 1, 64, "SRAM banks per PE (16-bit words interleaved)", "wafer.md PE: 8 banks of 6 KiB (SDK CSL Appendix)"),
        number("pe.reserved_bytes", U::bytes, 4 * KiB, 0, 1048576.0, "SRAM reserved for program, stack and runtime", "assumption: not published; leaves 44 KiB for data"),
        flag("pe.bank_conflicts", false, "model SRAM bank conflicts (two reads must hit banks with b1%4 != b2%4)", "wafer.md PE: read-port rule (SDK CSL Appendix); off by default"),
        integer("simd.fp16", U::count, 4, 1, 64, "elements/cycle of fp16 ops (fmach fmulh faddh fsubh fmovh mov16 add16)", "wafer.md PE SIMD widths: WSE-2 4 (SDK Appendix)"),
        integer("simd.fp32", U::count, 2, 1, 64, "elements/cycle of fp32 ops (fadds fsubs fmovs mov32 fmachs faddhs)", "wafer.md PE SIMD widths: WSE-2 2 (SDK Appendix)"),
        integer("simd.convert", U::count, 1, 1, 64, "elements/cycle of conversions (fh2s fs2h)", "wafer.md PE SIMD widths: WSE-2 1 (SDK Appendix)"),
        integer("simd.fmacs", U::count, 1, 1, 64, "elements/cycle of fmacs (fp32 FMA, not SIMD)", "wafer.md PE SIMD widths: fmacs width 1 (SDK Appendix)"),
        integer("simd.fmacs_interval", U::cycles, 1, 1, 16, "cycles per element group of fmacs (rate = simd.fmacs / this)", "wafer.md PE: SDK width 1 (1 per cycle); 3P measured 0.5 fmacs per cycle on WSE-3 silicon and simulator (2) and notes a dependent FP op every 2 cycles"),
        number("pe.sram_bytes_per_cycle", U::count, 0, 0, 4096, "bytes a DSD op's memory operands may move per cycle, reads and writes together (0 = no limit but the SIMD width)", "wafer.md Whole wafer: memory bandwidth 20 PB/s over 850,000 cores (WSE-2), 21 PB/s over 900,000 (WSE-3): 21.4 / 21.2 bytes per cycle at 1.1 GHz (the clock of Hot Chips 34 and WaferLLM); off by default (the presets keep the SDK widths)"),
        integer("dsd.setup_cycles", U::cycles, 16, 0, 1000, "fixed cycles to start one DSD operation", "wafer.md PE: 3P ~15-17 cycles on silicon (WSE-3)"),
        integer("task.count", U::count, 64, 1, 256, "task IDs per PE", "wafer.md PE: task IDs 0-63 (SDK Task IDs)"),
        int_list("queue.input_depth", U::count, {6, 6, 4, 4, 2, 2, 2, 2}, 0, 64, "input queue depths (wavelets), queues 0..7", "wafer.md PE: WSE-2 in 6,6,4,4,2,2,2,2 (SDK DSDs)"),
        int_list("queue.output_depth", U::count, {2, 2, 6, 6, 2, 2, 0, 0}, 0, 64, "output queue depths (wavelets), queues 0..7 (0 = none)", "wafer.md PE: WSE-2 out 2,2,6,6,2,2,-,- (SDK DSDs)"),
        integer("router.colors", U::count, 24, 1, 32, "routable colors", "wafer.md Fabric: 24 routable colors (SDK)"),
        integer("router.hop_latency", U::cycles, 1, 1, 2, "cycles for a wavelet to move one hop", "wafer.md Fabric: SDK says 1 cycle; 3P measured 2.000 on silicon"),
        integer("router.ramp_latency", U::cycles, 1, 1, 4, "cycles between a PE and its own router, each way (RAMP)", "wafer.md Published measurements: Luczynski et al.'s reduce model counts (2*T_R + 1) cycles a dependent step, T_R ~ 2, T_R the latency from the PE to its router and back (per a published summary of the paper, themoonlight.io); SDK: one cycle (default)"),
        integer("router.buffer_depth", U::count, 4, 1, 64, "wavelets buffered per color per router input", "assumption: not published (wafer.md Fabric: backpressure exists)"),
        number("memoryx.bandwidth", U::bandwidth, 150 * GBs, 1e6, 1e15, "weight stream bandwidth MemoryX -> wafer", "wafer.md Whole wafer: CS-2 host I/O 1.2 Tb/s over 100 GbE links"),
        number("memoryx.latency", U::time, 2 * us, 0, 1, "latency from a MemoryX read request to the first wavelet at the edge", "assumption: not published"),
        number("memoryx.capacity", U::bytes, 1.2e12, 1e6, 1e16, "MemoryX capacity for master weights and optimizer state", "assumption: not in wafer.md; smallest MemoryX configuration"),
        number("swarmx.bandwidth", U::bandwidth, 150 * GBs, 1e6, 1e15, "SwarmX broadcast/reduce bandwidth per system", "assumption: matched to the host I/O of wafer.md Whole wafer"),
        number("swarmx.latency", U::time, 1 * us, 0, 1, "latency through the SwarmX tree", "assumption: not published"),
        number("memoryx.burst_bytes", U::bytes, 4 * KiB, 4, 1e9, "bytes per MemoryX transaction (TLM burst) of a weight or gradient stream", "assumption: not published"),
    };
    t.presets = {
        {"wse2", "Cerebras WSE-2 (CS-2): 750 x 994 program rectangle, 850 MHz", {}},
        {"wse3", "Cerebras WSE-3 (CS-3): 762 x 1172 program rectangle",
         {
             set("fabric.width", 762, "wafer.md Whole wafer: CS-3 762 x 1172 (hardware scripts)"),
             set("fabric.height", 1172, "wafer.md Whole wafer: CS-3 762 x 1172 (hardware scripts)"),
             set("simd.fp16", 8, "wafer.md PE SIMD widths: WSE-3 8 (SDK Appendix)"),
             set("simd.fp32", 4, "wafer.md PE SIMD widths: WSE-3 4 (SDK Appendix)"),
             set("simd.convert", 4, "wafer.md PE SIMD widths: WSE-3 4 (SDK Appendix)"),
             set_list("queue.input_depth", {8, 8, 4, 4, 4, 4, 4, 4}, "wafer.md PE: WSE-3 in 8,8,4,4,4,4,4,4 (SDK DSDs)"),
             set_list("queue.output_depth", {8, 8, 8, 8, 8, 8, 8, 8}, "wafer.md PE: WSE-3 out 8 (SDK DSDs)"),
         }},
    };
    return t;
  }();
  return desc;
}

}  // namespace tessera::wafer
