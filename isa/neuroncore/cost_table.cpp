#include "isa/neuroncore/cost_table.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::neuroncore {

CoreConfig CoreConfig::from(const ParamSet& p) {
  CoreConfig c{};
  c.tensor_hz = p.num("tensor.clock");
  c.vector_hz = p.num("vector.clock");
  c.scalar_hz = p.num("scalar.clock");
  c.gpsimd_hz = p.num("gpsimd.clock");
  c.access_hz = p.num("access.clock");
  c.tensor_rows = p.integer("tensor.rows");
  c.tensor_cols = p.integer("tensor.cols");
  c.max_moving_free = p.integer("tensor.max_moving_free");
  c.fp32_factor = p.integer("tensor.fp32_factor");
  c.fp8_rate = p.integer("tensor.fp8_rate");
  c.fast_load_factor = p.integer("tensor.fast_load_factor");
  c.vector_epc = p.integer("vector.elems_per_cycle");
  c.vector_epc_16 = p.integer("vector.elems_per_cycle_16bit");
  c.scalar_epc = p.integer("scalar.elems_per_cycle");
  c.partitions = p.integer("sbuf.partitions");
  c.sbuf_partition_bytes = static_cast<int64_t>(p.num("sbuf.partition_bytes"));
  c.psum_banks = p.integer("psum.banks");
  c.psum_partition_bytes = static_cast<int64_t>(p.num("psum.partition_bytes"));
  c.min_ii = p.integer("isa.min_ii");
  c.gpsimd_start = p.integer("isa.gpsimd_start");
  c.dynamic_addressing = p.integer("isa.dynamic_addressing");
  c.dependent_gap = p.integer("isa.dependent_gap");
  c.port_conflicts = p.flag("core.port_conflicts");
  c.hbm_bandwidth = p.num("hbm.bandwidth");
  c.hbm_latency = p.num("hbm.latency");
  c.hbm_capacity = p.num("hbm.capacity");
  c.dma_engines = p.integer("dma.engines");
  c.dma_queues_per_engine = p.integer("dma.queues_per_engine");
  c.dma_engine_bandwidth = p.num("dma.engine_bandwidth");
  c.dma_trigger_latency = p.num("dma.trigger_latency");
  c.dma_efficient_bytes = p.num("dma.efficient_bytes");
  return c;
}

const std::vector<CostRow>& cost_rows() {
  static const std::vector<CostRow> rows = {
      {Op::load_stationary, "ceil(M / fast_load_factor), x fp32_factor for fp32", "[A2] fast LoadStationary up to 4x faster; [ISA] LoadStationary ~ size/4 (128 -> 32)"},
      {Op::multiply_moving, "max(min(64, M), N), x fp32_factor for fp32, / fp8_rate for fp8", "[ISA] matmul back-to-back: max(min(64, N_stationary), N_moving); x4 for fp32"},
      {Op::transpose, "max(P, min(64, F))", "[ISA] transpose on the tensor engine"},
      {Op::tensor_tensor, "max(MIN_II, N) if an input is in PSUM or all-bf16 SBUF add/mul/sub contiguous, else max(MIN_II, 2N); divide: max(MIN_II, 8N)", "[ISA] tensor_tensor; reciprocal max(MIN_II, 8N) on vector"},
      {Op::tensor_scalar, "max(MIN_II, N); divide: max(MIN_II, 8N)", "[ISA] tensor_scalar; reciprocal on vector"},
      {Op::tensor_reduce, "N/2 for bf16 add/max, else N", "[ISA] tensor_reduce"},
      {Op::tensor_copy, "max(MIN_II, N)", "[ISA] tensor_copy"},
      {Op::transpose32, "max(MIN_II, N)", "[ISA] transpose on vector"},
      {Op::bn_stats, "max(MIN_II, N)", "[ISA] bn_stats"},
      {Op::bn_aggr, "max(MIN_II, 13N/3)", "[ISA] bn_aggr"},
      {Op::memset, "max(MIN_II, N/2) for zero in bf16/fp16, else max(MIN_II, N)", "[ISA] memset"},
      {Op::select, "max(MIN_II, 2N)", "[A2] rule of thumb: ~2N for two inputs"},
      {Op::activation, "max(MIN_II, N), + MIN_II with accumulate", "[ISA] activation; activation with reduce + MIN_II"},
      {Op::iota, "GPSIMD_START + N", "[ISA] iota: 150 + N on gpsimd"},
      {Op::affine_select, "GPSIMD_START + N", "[ISA] affine_select: 150 + N on gpsimd"},
      {Op::gather, "GPSIMD_START + N", "assumption: like iota/affine_select"},
      {Op::partition_all_reduce, "GPSIMD_START + N * ceil(log2 P)", "assumption: a log-depth tree over partitions"},
      {Op::dma, "1 (descriptor issue; the transfer runs on the DMA engine)", "[DMA] queues run asynchronously to the issuing lane"},
      {Op::sem_wait, "1", "sync lane"},
      {Op::sem_signal, "1", "sync lane"},
      {Op::step_marker, "1", "sync lane"},
      {Op::set_reg, "1", "control lane"},
      {Op::add_reg, "1", "control lane"},
      {Op::dec_branch_nz, "1", "control lane"},
      {Op::branch_nz, "1", "control lane"},
      {Op::jump, "1", "control lane"},
      {Op::halt, "1", "control lane"},
  };
  return rows;
}

double lane_clock_hz(Lane lane, const CoreConfig& c) {
  switch (lane) {
    case Lane::tensor: return c.tensor_hz;
    case Lane::vector: return c.vector_hz;
    case Lane::scalar: return c.scalar_hz;
    case Lane::gpsimd: return c.gpsimd_hz;
    case Lane::dma0:
    case Lane::dma1: return c.access_hz;
    case Lane::sync:
    case Lane::control: return c.scalar_hz;
  }
  return c.scalar_hz;
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is16(DType t) { return t == DType::bf16 || t == DType::f16; }

// Element count per partition scaled to the vector engine's width: the [ISA] formulas count
// elements at 128 per cycle (v2); v3 moves 256 (fp32) or 512 (16-bit) per cycle.
int64_t vector_n(const AccessPattern& ap, const CoreConfig& c) {
  const int64_t epc = is16(ap.dtype) ? c.vector_epc_16 : c.vector_epc;
  return ceil_div(ap.free_elems() * 128, std::max<int64_t>(epc, 1));
}
}  // namespace

int64_t instr_cycles(const Instr& in, const CoreConfig& c) {
  const int64_t II = c.min_ii;
  switch (in.op) {
    case Op::nop: return 0;
    case Op::load_stationary: {
      const int64_t M = in.src0.free_elems();
      const int64_t k = std::max<int64_t>(1, ceil_div(M, c.fast_load_factor));
      return in.src0.dtype == DType::f32 ? k * c.fp32_factor : k;
    }
    case Op::multiply_moving: {
      const int64_t M = in.dst.parts, N = in.src0.free_elems();
      int64_t k = std::max(std::min<int64_t>(64, M), N);
      if (in.src0.dtype == DType::f32) k *= c.fp32_factor;
      if (in.src0.dtype == DType::f8e4m3 || in.src0.dtype == DType::f8e5m2) k = ceil_div(k, c.fp8_rate);
      return k;
    }
    case Op::transpose: return std::max<int64_t>(in.src0.parts, std::min<int64_t>(64, in.src0.free_elems()));
    case Op::tensor_tensor: {
      const int64_t N = vector_n(in.src0, c);
      if (in.alu == Alu::divide) return std::max(II, 8 * N);
      const bool psum_in = in.src0.space == Space::psum || in.src1.space == Space::psum;
      const bool fast_bf16 = in.src0.space == Space::sbuf && in.src1.space == Space::sbuf &&
                             in.src0.dtype == DType::bf16 && in.src1.dtype == DType::bf16 && in.dst.dtype == DType::bf16 &&
                             (in.alu == Alu::add || in.alu == Alu::multiply || in.alu == Alu::subtract) &&
                             in.src0.contiguous() && in.src1.contiguous() && in.dst.contiguous();
      return (psum_in || fast_bf16) ? std::max(II, N) : std::max(II, 2 * N);
    }
    case Op::tensor_scalar: {
      const int64_t N = vector_n(in.src0, c);
      return (in.alu == Alu::divide || in.alu1 == Alu::divide) ? std::max(II, 8 * N) : std::max(II, N);
    }
    case Op::tensor_reduce: {
      const int64_t N = vector_n(in.src0, c);
      return (in.src0.dtype == DType::bf16 && (in.alu == Alu::add || in.alu == Alu::max)) ? std::max<int64_t>(1, N / 2)
                                                                                          : std::max<int64_t>(1, N);
    }
    case Op::tensor_copy:
    case Op::transpose32:
    case Op::bn_stats: return std::max(II, vector_n(in.src0, c));
    case Op::bn_aggr: return std::max(II, ceil_div(13 * vector_n(in.src0, c), 3));
    case Op::memset: {
      const int64_t N = vector_n(in.dst, c);
      return (in.imm[0] == 0.0 && is16(in.dst.dtype)) ? std::max(II, N / 2) : std::max(II, N);
    }
    case Op::select: return std::max(II, 2 * vector_n(in.src0, c));
    case Op::activation: {
      const int64_t N = ceil_div(in.src0.free_elems() * 128, std::max<int64_t>(c.scalar_epc, 1));
      return std::max(II, N) + (in.aux.present() ? II : 0);
    }
    case Op::iota:
    case Op::affine_select: return c.gpsimd_start + in.dst.free_elems();
    case Op::gather: return c.gpsimd_start + in.dst.free_elems();
    case Op::partition_all_reduce: {
      const int64_t P = std::max<int64_t>(1, in.src0.parts);
      int64_t levels = 0;
      while ((int64_t{1} << levels) < P) ++levels;
      return c.gpsimd_start + in.src0.free_elems() * std::max<int64_t>(1, levels);
    }
    default: return 1;  // dma issue, sync, control
  }
}

void dma_shape(const Instr& in, int64_t& bytes, int64_t& chunks) {
  const AccessPattern& a = in.src0;
  bytes = a.elems() * static_cast<int64_t>(dtype_size(a.dtype));
  // A chunk is the longest contiguous innermost run common to source and destination.
  auto run = [](const AccessPattern& ap) {
    int64_t r = 1, expect = 1;
    for (int i = ap.ndims - 1; i >= 0; --i) {
      const auto& d = ap.dims[static_cast<size_t>(i)];
      if (d.stride != expect && d.num != 1) break;
      r *= d.num;
      expect *= d.num;
    }
    return r;
  };
  const int64_t elems_per_chunk = std::max<int64_t>(1, std::min(run(in.src0), run(in.dst)));
  chunks = std::max<int64_t>(1, ceil_div(a.elems(), elems_per_chunk));
}

double dma_transfer_seconds(int64_t bytes, int64_t chunks, const CoreConfig& c) {
  // e(chunk) = chunk / (chunk + overhead) = 0.9 at dma.efficient_bytes -> overhead = efficient/9.
  const double overhead = c.dma_efficient_bytes / 9.0;
  return (static_cast<double>(bytes) + static_cast<double>(chunks) * overhead) / c.dma_engine_bandwidth;
}

}  // namespace tessera::neuroncore
