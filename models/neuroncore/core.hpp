#pragma once
// One NeuronCore as a SystemC module.
//
// The issue process (an SC_THREAD) fetches 8-lane bundles in order. A bundle issues when every one
// of its instructions can start: its unit is free, its operands' pending writes have completed
// and pending accesses to its destination are done (a scoreboard on memory regions), semaphore
// waits are satisfied, and (v2) no port conflict blocks it. Each instruction then occupies its
// unit for its cost-table cycles in that unit's clock domain. DMA instructions hand a descriptor to
// a DMA engine and do not hold the bundle: the transfer may start once its operands are ready, and
// the engines serve their queues round-robin, in order within a queue, sharing HBM bandwidth
// (isa/neuroncore/dma_engines.hpp, the arbitration the compiler's estimate replays too). Numerics run in program order when an instruction issues; with the full scoreboard that
// is the same result as running at the timed start.
//
// The issue process runs ahead of SystemC time by at most a quantum (temporal decoupling) and
// schedules each instruction's retirement on its lane's retire process (an SC_METHOD per lane) at
// the instruction's end time, so observers in SystemC time see completions exactly when they
// happen. One elaborated core runs many programs: load() a program, run, load the next.
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <systemc>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/dma_engines.hpp"
#include "isa/neuroncore/isa.hpp"
#include "models/common/clock.hpp"
#include "models/neuroncore/execute.hpp"
#include "models/neuroncore/memory.hpp"

namespace tessera::neuroncore {

using models::ClockDomain;
using models::Femtos;

struct InstrRecord {
  int32_t bundle;        // bundle index
  int32_t instr;         // index into Program::instrs
  Lane lane;
  Femtos issue;          // when its bundle issued
  Femtos start, end;     // unit busy interval (DMA: the transfer)
  int64_t cycles;        // cost-table cycles (DMA: 0)
  int32_t flow_from;     // record index of the DMA whose data this instruction reads (-1: none)
};

enum class Stall : uint8_t { unit_busy, dependency, semaphore, port_conflict, count };
std::string_view stall_name(Stall s);

struct CoreStats {
  int64_t bundles = 0;
  std::array<int64_t, kLanes> instructions{};
  std::array<int64_t, kLanes> busy_cycles{};              // in each lane's clock
  std::array<Femtos, static_cast<size_t>(Stall::count)> stall_fs{};  // bundle issue delay by cause
  std::vector<int64_t> dma_queue_bytes;                   // per DMA queue
  std::vector<int64_t> dma_queue_transfers;
  int64_t hbm_read_bytes = 0, hbm_write_bytes = 0;
  int64_t sbuf_high_water = 0, psum_high_water = 0;       // highest byte written in a partition
  Femtos end_time = 0;                                    // last instruction or transfer done
};

struct CoreOptions {
  bool numerics = true;
  bool record = true;                  // keep a per-instruction event record (traces, kernels)
  Femtos quantum = 10'000'000'000;     // 10 us of run-ahead
  Femtos max_time = 0;                 // watchdog (0 = none)
};

class NeuronCore : public sc_core::sc_module {
 public:
  NeuronCore(sc_core::sc_module_name name, const CoreConfig& cfg, CoreOptions opt);

  // Starts `p` at the current SystemC time (the previous program must have finished). The
  // program must outlive the run. Memory keeps its contents across programs.
  void load(const Program& p);
  bool finished() const { return finished_; }
  sc_core::sc_event& finished_event() { return finished_ev_; }
  // A runtime failure (deadlock on a semaphore, watchdog, a numerics fault), with where.
  const std::optional<std::string>& error() const { return error_; }

  CoreMemory& memory() { return mem_; }
  const CoreStats& stats() const { return stats_; }
  const std::vector<InstrRecord>& records() const { return records_; }
  int64_t retired(Lane l) const { return retired_[static_cast<size_t>(l)]; }
  const CoreConfig& config() const { return cfg_; }
  const ClockDomain& clock(Lane l) const { return clocks_[static_cast<size_t>(l)]; }
  const RegFile& regs() const { return regs_; }
  Femtos start_time() const { return t_start_; }

 private:
  using Region = Footprint;
  struct Pending {
    Region r;
    Femtos end;
    bool write;
    Lane lane;
    int32_t op = -1;  // a DMA in flight (dma_ops_): `end` not known yet
  };
  // A DMA instruction in the engines (isa/neuroncore/dma_engines.hpp): its pieces, and what to do
  // when its end is known (its record, its lane's retirement, its semaphore).
  struct DmaOp {
    std::vector<int32_t> pieces;
    int32_t record = -1;
    Lane lane = Lane::dma0;
    int sem = -1;
    bool done = false;
    Femtos start = 0, end = 0;
  };

  void issue_thread();
  void run_program();
  void retire(int lane);
  Region region(const AccessPattern& ap) const;
  // When `in` may start with respect to pending accesses; sets `raw` if the latest constraint is
  // a pending write of one of its operands (read after write).
  // A DMA (`after` given) waits in the engines for the DMAs in flight it depends on: their pieces
  // go to `after`. Any other instruction waits for their ends (DmaEngines::end).
  Femtos ready_time(const Instr& in, Lane lane, bool& raw, std::vector<int32_t>* after = nullptr);
  // DMAs: seconds on the engines' clock (relative to the program's start) and back.
  double secs(Femtos t) const { return static_cast<double>(t - t_start_) * 1e-15; }
  Femtos fs(double s) const { return t_start_ + static_cast<Femtos>(std::llround(s * 1e15)); }
  Femtos op_end(int32_t op);            // runs the engines until DMA op ends; records it
  void settle(Femtos t);                // runs the engines to t; records the DMAs done by then
  Femtos semaphore_time(int sem, int64_t value, int32_t bundle);
  void add_pending(const Instr& in, Lane lane, Femtos end, int32_t op = -1);
  void prune(Femtos t);
  // Record index of the latest DMA that wrote data `in` reads; forgets DMA writes `in` overwrites.
  int32_t track_dma_flow(const Instr& in, bool is_dma, int32_t record_index);
  void sync_to(Femtos t);
  // Records the first runtime failure (bundle, lane, source line, message); the run loop stops.
  void fail(int32_t bundle, Lane lane, const std::string& msg);

  CoreConfig cfg_;
  CoreOptions opt_;
  CoreMemory mem_;
  TensorEngineState te_;
  RegFile regs_{};
  std::array<ClockDomain, kLanes> clocks_;
  const Program* prog_ = nullptr;

  // Timing state (fs).
  Femtos t_start_ = 0, next_issue_ = 0;
  std::array<Femtos, kLanes> unit_free_{};
  Femtos loader_free_ = 0;           // the tensor engine loads stationaries in the background
  DmaEngines dma_;
  std::vector<DmaOp> dma_ops_;
  std::vector<int32_t> dma_open_;  // DMA ops whose end is not recorded yet
  std::vector<Pending> pending_;
  // The latest DMA write of each live region, for data-flow arrows in traces (record indices).
  std::vector<std::pair<Region, int32_t>> dma_writes_;
  std::array<std::vector<std::pair<Femtos, int64_t>>, kSemaphores> sem_signals_;
  // Port users (v2): until when the gpsimd engine holds the SBUF port, the scalar engine the PSUM port.
  Femtos gpsimd_sbuf_until_ = 0, scalar_psum_until_ = 0, vector_sbuf_until_ = 0, vector_psum_until_ = 0;

  CoreStats stats_;
  std::vector<InstrRecord> records_;
  std::array<int64_t, kLanes> retired_{};
  std::array<sc_core::sc_event_queue*, kLanes> retire_q_{};
  bool finished_ = true;
  bool start_pending_ = false;
  std::optional<std::string> error_;
  sc_core::sc_event start_ev_, finished_ev_;
};

}  // namespace tessera::neuroncore
