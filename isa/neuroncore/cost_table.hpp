#pragma once
// Instruction costs: one row per instruction, each a formula from shared/reference/neuroncore.md
// ([ISA] "estimated instruction cost", [A2] engine facts). The model (models/neuroncore) and the
// compiler's estimator (mapper/neuroncore) both read this table, so a prediction and a simulation
// start from the same numbers and differ only in what the estimator does not model.
#include <cstdint>
#include <string_view>
#include <vector>

#include "isa/neuroncore/isa.hpp"
#include "isa/params.hpp"

namespace tessera::neuroncore {

// The parameters the costs and the model need, read once from a ParamSet.
struct CoreConfig {
  double tensor_hz, vector_hz, scalar_hz, gpsimd_hz, access_hz;
  int64_t tensor_rows, tensor_cols, max_moving_free, fp32_factor, fp8_rate, fast_load_factor;
  int64_t vector_epc, vector_epc_16, scalar_epc;
  int64_t partitions, sbuf_partition_bytes, psum_banks, psum_partition_bytes;
  int64_t min_ii, gpsimd_start, dynamic_addressing, dependent_gap;
  bool port_conflicts;
  double hbm_bandwidth, hbm_latency, hbm_capacity;
  int64_t dma_engines, dma_queues_per_engine;
  double dma_engine_bandwidth, dma_trigger_latency, dma_efficient_bytes;

  static CoreConfig from(const ParamSet& p);
  int64_t psum_bank_bytes() const { return psum_partition_bytes / psum_banks; }
};

struct CostRow {
  Op op;
  std::string_view formula;  // as documented
  std::string_view source;
};
// Every instruction with an engine cost, in ISA order.
const std::vector<CostRow>& cost_rows();

// Engine cycles of one instruction in its lane's clock: the time its unit is busy.
int64_t instr_cycles(const Instr& in, const CoreConfig& c);
// Clock of the unit behind a lane (sync/control issue at the scalar clock, DMA lanes at the access clock).
double lane_clock_hz(Lane lane, const CoreConfig& c);

// DMA transfer time in seconds (after it starts): bytes through one engine at its sustained
// bandwidth, with a per-contiguous-chunk overhead so that chunks of dma.efficient_bytes reach 90%
// of it ("near peak needs >= 2 KiB per partition", [DMA]).
double dma_transfer_seconds(int64_t bytes, int64_t chunks, const CoreConfig& c);
// Contiguous chunks and bytes moved by a DMA (per row, the longest contiguous innermost run).
void dma_shape(const Instr& in, int64_t& bytes, int64_t& chunks);

}  // namespace tessera::neuroncore
