#pragma once
// The DMA engines' arbitration ([DMA] in shared/reference/neuroncore.md: "16 DMA engines per core,
// 16 queues each; in order within a queue; round-robin across queues") as a fluid model shared by
// the simulated core (models/neuroncore) and the compiler's estimate (mapper/neuroncore): at every
// moment an engine's bandwidth is split equally between its queues whose head transfer is ready
// (descriptor-by-descriptor round-robin, averaged), and transfers through HBM together get no more
// than hbm.bandwidth (scaled down in proportion when they would).
//
// Transfers are submitted in issue order with what is known then; their ends are computed lazily:
// end(id) runs the engines forward assuming nothing else is submitted before that transfer ends,
// which holds for its callers -- an instruction waiting for a transfer does not issue, and so
// nothing after it, before the transfer ends. A transfer that waits for an earlier one in flight
// names it in `after` instead of asking for its end.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"

namespace tessera::neuroncore {

class DmaEngines {
 public:
  DmaEngines() = default;
  DmaEngines(int64_t engines, int64_t queues_per_engine, double hbm_bandwidth, double hbm_latency);
  void reset(double t0);  // empty, the engines' time at t0

  struct Piece {
    int32_t queue = 0;          // global queue index (its engine: queue % engines)
    double issued = 0;          // when the descriptor reached the queue
    double ready = 0;           // when it may start, as far as known at submission (>= issued)
    double latency = 0;         // added once when it waited past `issued` (dma.trigger_latency)
    double work = 0;            // seconds of its engine at full rate
    int64_t bytes = 0;          // bytes moved
    double hbm_bytes = 0;       // bytes through HBM (0: none)
    std::vector<int32_t> after; // transfers in flight it waits for
  };
  int32_t submit(const Piece& p);
  bool finished(int32_t id) const { return pieces_[static_cast<size_t>(id)].end >= 0; }
  double end(int32_t id);    // when it ends (runs the engines until then)
  double start(int32_t id);  // when it started
  // Runs the engines to time t: every transfer ending by t is finished. Nothing submitted later may
  // be ready before t.
  void advance(double t);
  double now() const { return now_; }
  // Runs until one of `ids` has ended; the engines' time then.
  double run_until_any(const std::vector<int32_t>& ids);
  // Runs until every transfer has ended; the last end (t0 if none).
  double drain();

 private:
  struct State {
    Piece p;
    double start = -1, end = -1, left = 0;
    int32_t waiting = 0;  // transfers in `after` not yet ended
    bool known = false;   // ready is final
  };
  std::vector<State> pieces_;
  std::vector<std::vector<int32_t>> dependents_;  // per piece: pieces waiting for it
  std::vector<std::deque<int32_t>> queues_;
  std::vector<int32_t> busy_queues_;              // queues with transfers (unordered)
  int64_t engines_ = 1;
  double hbm_bw_ = 0, hbm_latency_ = 0, now_ = 0, last_end_ = 0;
  std::vector<int32_t> active_;                   // scratch: ready heads
  std::vector<double> rate_;                      // scratch
  std::vector<int32_t> per_engine_;               // scratch
  // One step: runs to the next event or `limit`, whichever is first; false when nothing can happen
  // (no transfer in flight).
  bool step(double limit);
  void finish(int32_t id, double t);
};

// A DMA instruction's pieces as the engines take them, issued at `issued` and otherwise ready at
// `ready` or after the transfers `after` (seconds): one on its queue, or -- a spread queue
// (`queue=allN`) -- one per partition group of 8 or more over the engines, on queue N of each,
// bytes and chunks divided with the partitions, each `work` the cost table's transfer time. The
// simulated core and the compiler's estimate both submit these.
std::vector<DmaEngines::Piece> dma_pieces(const Instr& in, const CoreConfig& c, double issued, double ready, const std::vector<int32_t>& after);

}  // namespace tessera::neuroncore
