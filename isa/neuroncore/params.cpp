// NeuronCore parameters. Sources: shared/reference/neuroncore.md, whose keys are
// [A2] NKI architecture guide (NeuronCore-v2), [A3] Trainium2 guide (v3), [ISA] nki.isa estimated
// instruction costs, [DMA] NKI DMA overview and bandwidth guide, [MM] NKI matmul tutorial.
#include "isa/neuroncore/params.hpp"

namespace tessera::neuroncore {

using namespace tessera::decl;
using U = UnitKind;

const TargetDesc& target_desc() {
  static const TargetDesc desc = [] {
    TargetDesc t;
    t.kind = "neuroncore";
    t.description = "one NeuronCore issuing 8-lane VLIW bundles (tensor, vector, scalar, gpsimd, dma0, dma1, sync, control)";
    const double GHz = 1e9, KiB = 1024, GiB = 1073741824.0, GBs = 1e9, ns = 1e-9;
    t.decls = {
        // Clock domains (one per engine).
        number("tensor.clock", U::frequency, 2.8 * GHz, 1e6, 10 * GHz, "tensor engine clock", "neuroncore.md Engines, v2 [A2]"),
        number("vector.clock", U::frequency, 1.12 * GHz, 1e6, 10 * GHz, "vector engine clock", "neuroncore.md Engines, v2 [A2]"),
        number("scalar.clock", U::frequency, 1.4 * GHz, 1e6, 10 * GHz, "scalar (activation) engine clock", "neuroncore.md Engines, v2 [A2]"),
        number("gpsimd.clock", U::frequency, 1.4 * GHz, 1e6, 10 * GHz, "gpsimd engine clock", "neuroncore.md Engines, v2 [A2]"),
        number("access.clock", U::frequency, 1.4 * GHz, 1e6, 10 * GHz, "clock of the SBUF/PSUM access ports", "neuroncore.md Engines: SBUF/PSUM move 128 elem/cycle per port at 1.4 GHz [A2]"),
        // Tensor engine.
        integer("tensor.rows", U::count, 128, 1, 1024, "systolic array rows = max contraction K (partitions)", "neuroncore.md Engines: 128x128 systolic [A2]"),
        integer("tensor.cols", U::count, 128, 1, 1024, "systolic array columns = max stationary free size M", "neuroncore.md Engines: 128x128 systolic [A2]"),
        integer("tensor.max_moving_free", U::count, 512, 1, 4096, "max moving free size N (one PSUM bank of fp32)", "neuroncore.md: N <= 512 (one PSUM bank) [A2]"),
        integer("tensor.fp32_factor", U::count, 4, 1, 16, "matmul cost multiplier for fp32 inputs", "neuroncore.md Instruction costs: x4 for fp32 inputs [ISA]"),
        integer("tensor.fp8_rate", U::count, 1, 1, 4, "moving-data rate multiplier for fp8 (v3: 4x128 in)", "neuroncore.md Engines: v2 has no fp8 speed-up [A2]"),
        integer("tensor.fast_load_factor", U::count, 4, 1, 16, "fast LoadStationary speed-up over a MultiplyMoving of the same free size", "neuroncore.md: fast LoadStationary up to 4x faster [A2]"),
        integer("tensor.accumulation_groups", U::count, 8, 1, 64, "accumulation groups in flight (one per PSUM bank)", "neuroncore.md: up to 8 accumulation groups [A2]"),
        // Vector / scalar / gpsimd.
        integer("vector.elems_per_cycle", U::count, 128, 1, 4096, "vector engine elements per cycle, fp32", "neuroncore.md Engines: v2 128 elem/cycle [A2]"),
        integer("vector.elems_per_cycle_16bit", U::count, 128, 1, 4096, "vector engine elements per cycle, bf16/fp16", "neuroncore.md Engines: v2 128 elem/cycle [A2]"),
        integer("scalar.elems_per_cycle", U::count, 128, 1, 4096, "scalar engine elements per cycle", "neuroncore.md Engines: 128 elem/cycle [A2]"),
        integer("gpsimd.processors", U::count, 8, 1, 64, "gpsimd processors", "neuroncore.md Engines: 8 processors x 512-bit SIMD [A2]"),
        integer("gpsimd.simd_bits", U::count, 512, 32, 4096, "SIMD width of one gpsimd processor (bits)", "neuroncore.md Engines [A2]"),
        number("gpsimd.local_bytes", U::bytes, 64 * KiB, 1024, 16 * 1048576.0, "local memory per gpsimd processor", "neuroncore.md Engines: 64 KB local each [A2]"),
        // Memories.
        integer("sbuf.partitions", U::count, 128, 1, 1024, "SBUF partitions", "neuroncore.md Engines: 128 partitions [A2]"),
        number("sbuf.partition_bytes", U::bytes, 192 * KiB, 1024, 64 * 1048576.0, "SBUF bytes per partition", "neuroncore.md Engines: 24 MiB = 128 x 192 KiB [A2]"),
        integer("psum.banks", U::count, 8, 1, 64, "PSUM banks", "neuroncore.md Engines: 8 banks [A2]"),
        number("psum.partition_bytes", U::bytes, 16 * KiB, 1024, 1048576.0, "PSUM bytes per partition (all banks)", "neuroncore.md Engines: 2 MiB = 128 x 16 KiB [A2]"),
        integer("access.fixed_cycles", U::cycles, 60, 0, 10000, "fixed start cost of every tensor access (access clock cycles)", "neuroncore.md Engines: ~60 cycles fixed start [A2]"),
        number("access.slow_stride_bytes", U::bytes, 16, 1, 4096, "inner stride above which access bandwidth halves", "neuroncore.md Engines: inner stride > 16 bytes halves bandwidth [A2]"),
        flag("core.port_conflicts", true, "v2 port conflicts: vector/gpsimd share SBUF, vector/scalar share PSUM (serialised)", "neuroncore.md Engines: v2 port conflicts, lifted on v3 [A2][A3]"),
        // Instruction cost constants.
        integer("isa.min_ii", U::cycles, 64, 1, 10000, "minimum initiation interval of a vector/scalar instruction", "neuroncore.md Instruction costs: MIN_II ~ 64 [ISA]"),
        integer("isa.gpsimd_start", U::cycles, 150, 0, 100000, "fixed start cost of gpsimd instructions", "neuroncore.md Instruction costs: GPSIMD_START ~ 150 [ISA]"),
        integer("isa.dynamic_addressing", U::cycles, 600, 0, 100000, "extra cost of dynamic (register) addressing", "neuroncore.md Instruction costs: ~600 [ISA]"),
        integer("isa.dependent_gap", U::cycles, 200, 0, 100000, "extra cycles before an instruction that waits on a pending result (read after write)", "calibrated: NKI perf guide, dependent tiny activations 264 scalar cycles apart = MIN_II 64 + 200 (neuroncore.md; [A2] rule of thumb ~100)"),
        // HBM and DMA.
        number("hbm.bandwidth", U::bandwidth, 410 * GBs, 1e6, 1e15, "HBM bandwidth available to one core", "neuroncore.md Engines: trn1 820 GB/s per 2-core device; matmul roofline knee implies ~414 GB/s [MM]"),
        number("hbm.latency", U::time, 0, 0, 1e-3, "HBM access latency added to a DMA transfer", "assumption: 0; the [DMA] 32 KiB in 1416 ns measurement is matched by bandwidth alone (neuroncore.md)"),
        number("hbm.capacity", U::bytes, 16 * GiB, 1048576.0, 1e13, "HBM capacity available to one core", "neuroncore.md Engines: 32 GiB per 2-core device"),
        integer("dma.engines", U::count, 16, 1, 64, "DMA engines per core", "neuroncore.md DMA: 16 engines per core [DMA]"),
        integer("dma.queues_per_engine", U::count, 16, 1, 64, "queues per DMA engine (in order within, round-robin across)", "neuroncore.md DMA: 16 queues each [DMA]"),
        number("dma.engine_bandwidth", U::bandwidth, 17 * GBs, 1e6, 1e13, "sustained bandwidth of one DMA engine", "neuroncore.md DMA: sustained 17 B/ns per engine on trn1 [DMA]"),
        number("dma.peak_bandwidth", U::bandwidth, 27 * GBs, 1e6, 1e13, "peak bandwidth of one DMA engine", "neuroncore.md DMA: peak ~27 GB/s per engine [DMA]"),
        number("dma.trigger_latency", U::time, 1300 * ns, 0, 1e-3, "semaphore-to-start latency of a DMA triggered from another engine", "neuroncore.md DMA: ~1300 ns [DMA]"),
        number("dma.efficient_bytes", U::bytes, 2 * KiB, 1, 1048576.0, "per-partition transfer size needed for near-peak DMA efficiency", "neuroncore.md DMA: near peak needs >= 2 KiB per partition [DMA]"),
        number("dma.saturation_bytes", U::bytes, 4 * KiB, 1, 1048576.0, "per-partition transfer size at which DMA saturates", "neuroncore.md DMA: saturation >= 4 KiB [DMA]"),
    };
    t.presets = {
        {"trn1", "Trainium1 / Inferentia2 NeuronCore-v2 (one core of a 2-core device)", {}},
        // The same core and device figures: neuroncore.md lists one NeuronCore-v2 column for
        // trn1 and inf2 (engines, SBUF, PSUM, 2 cores, 32 GiB HBM, 820 GB/s); a name of its own
        // so that inf2's published rows say which instance they were measured on.
        {"inf2", "Inferentia2 NeuronCore-v2 (one core of a 2-core device; the same figures as trn1)", {}},
        {"trn2", "Trainium2 NeuronCore-v3 (one core of an 8-core device)",
         {
             set("tensor.clock", 2.4 * GHz, "neuroncore.md Engines, v3 [A3]"),
             set("vector.clock", 0.96 * GHz, "neuroncore.md Engines, v3 [A3]"),
             set("scalar.clock", 1.2 * GHz, "neuroncore.md Engines, v3 [A3]"),
             set("gpsimd.clock", 1.2 * GHz, "neuroncore.md Engines, v3 [A3]"),
             set("access.clock", 1.2 * GHz, "assumption: access ports follow the v3 scalar/gpsimd clock"),
             set("tensor.fp8_rate", 2, "neuroncore.md Engines: v3 fp8 4x128 in vs bf16 2x128 [A3]"),
             set("vector.elems_per_cycle", 256, "neuroncore.md Engines: v3 256 elem/cycle [A3]"),
             set("vector.elems_per_cycle_16bit", 512, "neuroncore.md Engines: v3 512 (bf16/fp16) [A3]"),
             set("sbuf.partition_bytes", 224 * KiB, "neuroncore.md Engines: 28 MiB = 128 x 224 KiB [A3]"),
             set("core.port_conflicts", 0, "neuroncore.md Engines: port conflicts lifted on v3 [A3]"),
             set("hbm.bandwidth", 2.9e12 / 8, "neuroncore.md Engines: trn2 2.9 TB/s per 8-core device"),
             set("hbm.capacity", 12 * GiB, "neuroncore.md Engines: 96 GiB per 8-core device"),
             set("dma.engine_bandwidth", 23 * GBs, "neuroncore.md DMA: sustained 23 B/ns on trn2 [DMA]"),
             set("dma.trigger_latency", 600 * ns, "neuroncore.md DMA: v3 hardware descriptor generation ~600 ns [DMA]"),
         }},
    };
    return t;
  }();
  return desc;
}

}  // namespace tessera::neuroncore
