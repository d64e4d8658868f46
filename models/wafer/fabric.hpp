#pragma once
// The wafer fabric as ONE SystemC module (ARCHITECTURE.md decision 1; semantics and timing:
// docs/wafer-model.md; ISA: isa/wafer, docs/wafer-asm.md).
//
// PE and router state are flat arrays indexed by PE (row-major over the layout's fabric) or by
// "route slot" (one per PE and routed color) or by "PE slot" (one per PE that runs a program).
// A single SC_THREAD runs the fabric's own event calendar -- events ordered by (cycle, kind, id),
// ties broken by kind then id, so runs are deterministic (a timing wheel, fabric_impl.hpp) -- and
// synchronises with SystemC time every `quantum_cycles` (temporal decoupling) and at the end. On
// several host threads (FabricOptions::threads, stripes.cpp) each stripe of rows has a calendar,
// the same events happen in an order with the same effects, and SystemC time syncs at the end only.
// Nothing polls: a router or PE is on the calendar only when it has something to do at that
// cycle, or was woken because a neighbour freed space or delivered a wavelet, so idle PEs cost
// nothing.
//
// One elaborated fabric serves many runs: load() a layout (once), write inputs, start(), run
// SystemC until finished(), read outputs, start() again (SRAM keeps its contents; task state,
// registers, DSDs and queues restart from the program's initial state).
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <systemc>
#include <utility>
#include <vector>

#include "isa/wafer/asm.hpp"
#include "isa/wafer/isa.hpp"
#include "models/common/clock.hpp"

namespace tessera::wafer {

using models::ClockDomain;
using models::Femtos;

// The ranks of a partitioned fabric (FabricOptions::comm; docs/wafer-model.md, "Ranks"): one
// process per stripe of PE rows, each running the same driver. tessera's is MPI (sim/fabric_ranks.cpp);
// the model only needs ordered point-to-point messages and two collectives.
class RankComm {
 public:
  virtual ~RankComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Queues `msg` for rank `to` and returns; messages between two ranks arrive in the order sent.
  virtual void send(int to, std::vector<uint8_t> msg) = 0;
  // A message that has arrived (its sender in `from`), if any; never blocks.
  virtual bool poll(int& from, std::vector<uint8_t>& msg) = 0;
  // Collectives: every rank calls them in the same order.
  virtual void bcast(int root, std::vector<uint8_t>& bytes) = 0;
  virtual std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) = 0;
  // Every rank waits for every other; messages sent before it have been received (each rank took
  // what was sent to it), so sends may complete.
  virtual void barrier() = 0;
};

struct FabricOptions {
  int64_t quantum_cycles = 100'000;   // run-ahead before syncing with SystemC time
  int64_t deadlock_window = 10'000;   // cycles without progress while work remains -> deadlock
  int64_t max_cycles = 0;             // watchdog: cycles per run (0 = none)
  bool require_halt = true;           // a run is complete only when every program PE halted
  bool record = false;                // keep DeliveryRecord / OpRecord / TaskRecord lists (tests, traces)
  // With record: keep those records for these PEs (x, y) only (none given: every PE) -- a trace's
  // sampled PEs, so a large layout's run does not hold every PE's operations. The active-bin runs
  // (active_runs()) still cover every PE.
  std::optional<std::vector<std::pair<int32_t, int32_t>>> record_only;
  bool summary = false;               // keep a FabricSummary: bounded aggregates for the default trace
  // A main-thread DSD op whose operands are all memory (or scalars) computes every element when it
  // issues, in one pass, instead of width elements a cycle; its timing is unchanged (it cannot
  // stall). Only for programs where no other thread writes what such an op reads while it runs
  // (the wafer compiler's are; hand-written layouts run element by element). Off with bank
  // conflicts.
  bool eager_memory_ops = false;
  bool task_ends = false;             // keep, per PE and task, the end of its last run (task_end())
  std::vector<std::string> task_logs; // tasks whose every end is kept, per PE (task_end_log())
  std::function<bool()> stop;         // polled every 1024 calendar cycles: true ends the run with error "interrupted"
  std::function<void(int64_t cycle, int64_t hops)> progress;  // called every 1024 calendar cycles (relative cycle, hops so far)
  int64_t host_memory_budget = 0;     // bytes of host memory the fabric may take (0 = no limit): load()
                                      // throws InputError naming what it needs; SRAM writes past it fail the run
  // Host threads for a run: the fabric in stripes of PE rows, one per thread, synchronised cycle
  // by cycle so that every result is the sequential model's (docs/wafer-model.md, "Threads").
  // (A port reply whose streams could be due within a few cycles -- SwarmX latency below ~4 cycles a
  // thread -- runs on one.)
  int threads = 1;
  // A partitioned fabric: with more than one rank, each rank simulates the PE rows of its stripe
  // (and holds only their SRAM); boundary state crosses as messages under the same ordering
  // protocol as threads, so every result is the sequential model's. Every rank must make the same
  // calls on the fabric (load, writes, start, reads: reads of SRAM are collective). Not with port
  // replies (InputError); `threads` is ignored (one stripe a rank).
  std::shared_ptr<RankComm> comm;
};

// A wavelet handed from a router to its PE (RAMP), into an input queue. Cycles are relative to
// the run's start cycle; `cycle` is when the wavelet is in the queue and can be read.
struct DeliveryRecord {
  int32_t x, y;
  uint8_t color, queue;
  uint32_t payload;
  int64_t cycle;
};
// One DSD instruction (main thread or microthread): issued at `start`, done at `end` (the cycle
// the next instruction of its thread may issue). Relative cycles.
struct OpRecord {
  int32_t x, y;
  int32_t instr;       // index into the PE's Program::instrs
  bool async;
  uint8_t thread;      // async: the microthread (its fabric DSD's queue); 0 for the main thread
  int64_t start, end;
  int64_t elements;
};

// One task run on a PE's main thread, from the cycle it was picked to the cycle it ended (ret,
// halt or its last instruction). Relative cycles; the durations of a PE's records add up to its
// busy_cycles().
struct TaskRecord {
  int32_t x, y;
  int32_t task;        // index into the PE's Program::tasks
  int64_t start, end;
};

struct FabricStats {
  int64_t start_cycle = 0;           // absolute clock cycle of the run's start
  int64_t cycles = 0;                // run length (last activity - start)
  int64_t program_pes = 0;
  int64_t busy_cycles = 0;           // sum over program PEs of cycles a task occupied the main thread
  int64_t idle_cycles = 0;           // program_pes * cycles - busy_cycles
  int64_t stall_cycles = 0;          // of busy: DSD ops waiting for a queue, fifo or microthread
  int64_t instructions = 0;
  int64_t dsd_elements = 0;
  int64_t tasks_run = 0;
  int64_t wavelet_hops = 0;          // router -> router link traversals
  int64_t ramp_deliveries = 0;       // router -> PE
  int64_t ramp_injections = 0;       // PE output queue -> router
  int64_t events = 0;                // calendar events handled
  std::vector<int64_t> color_hops;   // per color (kMaxColors entries): link traversals + deliveries
  std::vector<int64_t> in_queue_high_water, out_queue_high_water;  // per queue id, max over PEs
  int64_t router_buffer_high_water = 0;
  int64_t port_in_wavelets = 0;      // injected by edge input ports
  int64_t port_out_wavelets = 0;     // collected by edge output ports
  int64_t sram_pages = 0;            // SRAM pages allocated (FabricStats::kPageBytes each)
  int64_t bank_conflict_cycles = 0;  // of stall: cycles lost to SRAM read-port conflicts (pe.bank_conflicts)
  int64_t dropped_wavelets = 0;      // lost on links by injected faults (Fabric::WaveletDrop)
  static constexpr int64_t kPageBytes = 512;
};

// A time series in bins of `width` cycles (relative to the run's start). The width starts at 64 and
// doubles, merging neighbouring bins, whenever the run outgrows kMaxBins, so the series stays a few
// KiB however long the run. add(c, v): an amount v at cycle c. count[b] is the sum of v in bin b;
// level(t), the sum of v before t, is a step function whose integral over bin b is integrals()[b]
// (with +1 at each task's start and -1 at its end: the PE-cycles of tasks in the bin).
struct BinSeries {
  static constexpr size_t kMaxBins = 4096;
  int64_t width = 64;
  std::vector<int64_t> count, weight;  // weight[b]: the sum of v * (end of bin b - c)
  void add(int64_t cycle, int64_t v) {  // (every delivery and task end: inline while the bin exists)
    const auto u = static_cast<uint64_t>(width);
    if (cycle >= 0 && (u & (u - 1)) == 0) {  // (not std::has_single_bit: without -mpopcnt a call into libgcc)
      const auto b = static_cast<size_t>(static_cast<uint64_t>(cycle) >> std::countr_zero(u));
      if (b < count.size()) {
        count[b] += v;
        weight[b] += v * ((static_cast<int64_t>(b) + 1) * width - cycle);
        return;
      }
    }
    add_new(cycle, v);
  }
  void merge(const BinSeries& o);  // as if o's amounts had been added to this series
  std::vector<double> integrals() const;
  void clear() { *this = BinSeries{}; }

 private:
  void widen();  // bins twice as wide, neighbours merged
  void add_new(int64_t cycle, int64_t v);  // add's general path: a negative cycle (bin 0), a new bin, wider bins, or a width not a power of two
};
// First and last relative cycle of something and how many times it happened (first = -1: never).
struct Span {
  int64_t first = -1, last = -1, count = 0;
  void add(int64_t a, int64_t b, int64_t n = 1) {
    if (first < 0 || a < first) first = a;
    if (b > last) last = b;
    count += n;
  }
};
// FabricOptions::summary: what the default (summary) trace and the heatmap need, at a cost per
// task run and per wavelet delivered or injected, never per instruction, and bounded in size.
// "Groups" are the layout's rectangles followed by its ports (group rects + i = Layout::ports[i]).
struct FabricSummary {
  BinSeries busy;                     // +1 at a task's start, -1 at its end, every PE
  BinSeries delivered;                // wavelets a router handed to its PE
  BinSeries hops;                     // router -> router hops
  // Phases: per rectangle, the span of each task (by name) over the rectangle's PEs.
  struct Phase {
    int32_t rect = 0;
    std::string task;
    Span span;                        // first start, last end, task runs
  };
  std::vector<Phase> phases;
  int32_t rects = 0;
  // Per group x color (kMaxColors): wavelets its PEs (a rectangle) or its lanes (an input port)
  // put into the fabric, and wavelets delivered to its PEs (or collected by an output port).
  std::vector<Span> sent, received;
};

// Why a run stopped without completing: the PEs that could not go on, with what each waits for.
struct StuckPe {
  int32_t x, y;
  std::string what;                  // "task 'main' at send.pe:6 (fmovs out, xm): ..."
  int64_t elements_done = -1;        // of the stalled DSD op of the main thread (-1: none)
};
struct StuckRouter {
  int32_t x, y;
  uint8_t color;
  std::string what;                  // "3 wavelet(s) from W waiting for E (buffer full)"
};

class Fabric : public sc_core::sc_module {
 public:
  Fabric(sc_core::sc_module_name name, const WaferConfig& cfg, FabricOptions opt = {});

  // Builds routers, PEs and SRAM (fill values written) for `layout`, which must outlive the
  // fabric. Only once per fabric (routes and programs are fixed; start() re-runs them).
  void load(const LoadedLayout& layout);
  // Starts a run at the current SystemC time (the previous run must have finished).
  void start();
  bool finished() const { return finished_; }
  sc_core::sc_event& finished_event() { return finished_ev_; }
  // Set when the run did not complete: deadlock (with stuck_pes/stuck_routers), watchdog, a
  // runtime fault (an SRAM access outside the data area). Where = "PE (x,y)".
  const std::optional<std::string>& error() const { return error_; }
  const std::vector<StuckPe>& stuck_pes() const { return stuck_pes_; }
  const std::vector<StuckRouter>& stuck_routers() const { return stuck_routers_; }

  // Host access to PE SRAM by array name (declared with .data in the PE's program). Values are
  // converted to the array's element type (f16: round to nearest even; i16/i32: truncation).
  // Throws InputError for an unknown PE or array, or values past the array's end (`offset` in
  // elements). Only between runs.
  void write_array(int64_t x, int64_t y, const std::string& array, std::span<const float> values, int64_t offset = 0);
  std::vector<float> read_array(int64_t x, int64_t y, const std::string& array) const;
  void write_bytes(int64_t x, int64_t y, uint32_t addr, std::span<const uint8_t> bytes);
  std::vector<uint8_t> read_bytes(int64_t x, int64_t y, uint32_t addr, uint32_t n) const;
  const Program* program(int64_t x, int64_t y) const;  // nullptr: routing only / outside

  // Edge ports (Layout::ports). An input port's lane injects its stream, one wavelet per cycle
  // from the run's start as its router's buffer has room, arriving like a hop from an off-fabric
  // neighbour; set streams between runs (they stay for later runs). An output port's lane keeps
  // (payload, cycle of arrival relative to the run's start) of every wavelet its router sent off
  // the fabric, cleared at each start. Throws InputError for an unknown port or lane.
  // `ready` (optional, one per payload, non-decreasing): the cycle, relative to the run's start,
  // from which each wavelet is at the port (a stream arriving from SwarmX).
  void set_port_stream(const std::string& port, int64_t lane, std::vector<uint32_t> payloads, std::vector<int64_t> ready = {});
  int64_t port_lanes(const std::string& port) const;  // 0: no such port
  // A reply to output-port traffic (MemoryX's verdict on the gradients it took, in training with
  // loss scaling), armed between runs for every later run: once `count` wavelets have left through
  // the output ports `from` in a run, `fn` is called inside the run with the cycle (relative to the
  // run's start) the last of them left, and returns per lane of input port `to` its payloads and
  // the cycle (relative) from which they are at the port (not before the call's). A reply that is
  // due counts as progress: the deadlock check waits for it. Throws InputError for unknown ports.
  // On a partitioned fabric (FabricOptions::comm) the streams must be due at least SwarmX's latency
  // (WaferConfig::swarmx_latency) after the call's cycle, as MemoryX's verdict is: every rank fires
  // the reply, and a rank may be that far ahead of the one that counted the last wavelet.
  struct PortReply {
    std::vector<std::string> from;
    int64_t count = 0;
    std::string to;
    std::function<std::vector<std::pair<std::vector<uint32_t>, int64_t>>(int64_t)> fn;
  };
  void set_port_reply(PortReply reply);
  const std::vector<std::pair<uint32_t, int64_t>>& port_output(const std::string& port, int64_t lane) const;

  // Per PE after a run.
  bool halted(int64_t x, int64_t y) const;
  int64_t halt_cycle(int64_t x, int64_t y) const;      // relative; -1 if not halted
  int64_t busy_cycles(int64_t x, int64_t y) const;
  uint32_t reg(int64_t x, int64_t y, int r) const;
  // Wavelets that crossed the link leaving PE (x,y) towards d (N/S/E/W; RAMP: deliveries to the PE).
  int64_t link_wavelets(int64_t x, int64_t y, Dir d) const;
  int64_t queue_high_water(int64_t x, int64_t y, int queue, bool input) const;

  // Faults (resilience studies, and proof that outputs come from the machine). Armed between runs;
  // each applies to every later run until clear_faults(). Cycles are relative to the run's start.
  // Throws InputError for a PE outside the fabric, an address outside the data area, or a drop on a
  // color the router does not route.
  struct SramFlip {
    int64_t x = 0, y = 0;
    uint32_t addr = 0;      // byte in the PE's data area
    int bit = 0;            // 0..7 within that byte
    int64_t cycle = 0;      // 0: before the first instruction
    int force = -1;         // -1: flip the bit; 0/1: force it to that value
  };
  struct WaveletDrop {
    int64_t x = 0, y = 0;   // the router the wavelets leave
    Dir dir = Dir::E;       // the link (RAMP: the delivery into its own PE)
    int color = 0;
    int64_t from_cycle = 0; // the first cycle a wavelet may be dropped
    int64_t count = 1;      // how many (at most)
  };
  // What each armed fault did in the last run, in the order they were added: flips fire once (at
  // their cycle, if the run reached it), drops count the wavelets they took.
  struct FaultFired {
    int64_t count = 0;               // 0: did not fire
    int64_t first_cycle = -1, last_cycle = -1;
  };
  void add_fault(const SramFlip& f);
  void add_fault(const WaveletDrop& f);
  void clear_faults();
  const std::vector<FaultFired>& faults_fired() const { return fired_; }

  const FabricStats& stats() const { return stats_; }
  // Host memory the loaded fabric's state was estimated to need before it was built (bytes; SRAM
  // pages first written during runs come on top).
  int64_t estimated_host_bytes() const { return estimated_bytes_; }
  // The same estimate before any fabric is built (tessera validate): throws the InputError load()
  // would throw past `budget` bytes (0: no limit); returns the estimate.
  static int64_t check_host_memory(const LoadedLayout& layout, const WaferConfig& cfg, int64_t budget);
  const std::vector<DeliveryRecord>& deliveries() const { return deliveries_; }
  const std::vector<OpRecord>& op_records() const { return op_records_; }
  const std::vector<TaskRecord>& task_records() const { return task_records_; }
  // With FabricOptions::record, for every PE: the bins of kActiveBin cycles (relative) in which it
  // had a DSD operation in flight, as sorted, disjoint runs [first, last] of bin indices (the
  // trace's "active PEs" counter; far smaller than every PE's op records).
  static constexpr int64_t kActiveBin = 100;
  struct ActiveRuns {
    int32_t x = 0, y = 0;
    std::vector<std::pair<int64_t, int64_t>> runs;
  };
  const std::vector<ActiveRuns>& active_runs() const { return active_runs_; }
  const FabricSummary& summary() const { return summary_; }     // FabricOptions::summary
  int threads_used() const;  // host threads of the last run (FabricOptions::threads, or 1: see there)
  int ranks_used() const;    // ranks with a stripe (FabricOptions::comm; 1 without)
  void set_threads(int n) { opt_.threads = n; }  // from the next start() on
  // The route of `color` at router (x,y) as loaded (nullptr: the router does not route it).
  const Route* route(int64_t x, int64_t y, int color) const;
  const LoadedLayout* layout() const;
  // With FabricOptions::task_ends: the cycle (relative) the last run of PE (x,y)'s task `name`
  // ended; -1 if it never ran to its end (or no such PE or task).
  int64_t task_end(int64_t x, int64_t y, const std::string& name) const;
  // With `name` in FabricOptions::task_logs: the cycles (relative) every run of PE (x,y)'s task
  // `name` ended, in order (empty if none).
  const std::vector<int64_t>& task_end_log(int64_t x, int64_t y, const std::string& name) const;
  const WaferConfig& config() const { return cfg_; }
  const ClockDomain& clock() const { return clock_; }
  int64_t width() const { return W_; }
  int64_t height() const { return H_; }

 private:
  struct Impl;
  void thread();
  void run();

  WaferConfig cfg_;
  FabricOptions opt_;
  ClockDomain clock_;
  int64_t W_ = 0, H_ = 0;
  Impl* impl_ = nullptr;  // owned; the flat arrays (fabric.cpp)

  FabricStats stats_;
  std::vector<DeliveryRecord> deliveries_;
  std::vector<OpRecord> op_records_;
  std::vector<TaskRecord> task_records_;
  std::vector<ActiveRuns> active_runs_;  // per PE slot (record)
  void note_active(uint32_t slot, int64_t start, int64_t end);  // an op in flight over [start, end] (relative cycles)
  FabricSummary summary_;
  std::vector<StuckPe> stuck_pes_;
  std::vector<StuckRouter> stuck_routers_;
  std::vector<FaultFired> fired_;
  int64_t estimated_bytes_ = 0;
  bool finished_ = true;
  bool start_pending_ = false;
  std::optional<std::string> error_;
  sc_core::sc_event start_ev_, finished_ev_;

 public:
  ~Fabric() override;
};

}  // namespace tessera::wafer
