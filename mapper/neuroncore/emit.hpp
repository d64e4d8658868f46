#pragma once
// Building compiled programs: access-pattern helpers, an instruction stream in program order, and
// the list scheduler that packs it into 8-lane bundles.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/isa.hpp"

namespace tessera::neuroncore {

// DMA queues the compiler uses: streamed tiles on queues [0, kStreamQueues), bulk transfers (operand
// blocks, stores) on the next kBulkQueues, so a long store never blocks a tile the tensor engine
// waits for (queues are in order).
inline constexpr int kStreamQueues = 12;
inline constexpr int kBulkQueues = 4;
// Weight prefetches (DmaClass::prefetch): spread like kQueueAll, on each engine's queue 3.
inline constexpr int16_t kQueuePrefetch = kQueueAll - 2;

// SBUF/PSUM operand: partitions [p0, p0+parts), `offset` bytes into each, free dims (outermost first;
// strides in elements, 0 repeats an element: a broadcast).
AccessPattern on_chip(Space s, DType t, int32_t p0, int32_t parts, int64_t offset, std::vector<Dim> dims);
// HBM operand: `rows` rows of `row_stride` elements from byte `offset`, free dims per row.
AccessPattern in_hbm(DType t, int32_t rows, int64_t row_stride, int64_t offset, std::vector<Dim> dims);

class Emitter {
 public:
  explicit Emitter(Program& p) : p_(p) {}
  int16_t begin_kernel(const std::string& name);
  // Appends an instruction for `lane` (dma: either DMA lane, chosen by the scheduler).
  void emit(Instr in, Lane lane);
  // DMA helpers. Streamed tiles (weights, per-tile operands) rotate over the stream queues; bulk
  // transfers (operand blocks, result stores) over separate bulk queues, split by partition groups
  // over several of them, so a long store never sits in front of a tile the tensor engine waits
  // for (queues are in order, one engine each).
  // Spread: one instruction the core splits by partition groups over all the DMA engines, as NKI
  // does with every dma_copy (isa.hpp): loads on each engine's queue 1, stores (spread_store) on
  // its queue 2, so that a store waiting for its tile never holds up the loads behind it.
  // Prefetch: weights of a later kernel loaded ahead (lower.cpp), spread on each engine's queue 3,
  // so they wait behind neither the current kernels' loads nor their stores.
  enum class DmaClass { stream, bulk, spread, spread_store, prefetch };
  void dma(const AccessPattern& dst, const AccessPattern& src, DmaClass cls = DmaClass::stream);
  void set_dma_queues(int32_t stream_queues, int32_t bulk_queues) {
    stream_queues_ = stream_queues;
    bulk_queues_ = bulk_queues;
  }
  // Packs everything emitted into bundles: each instruction goes into the earliest bundle after the
  // last one holding an instruction it depends on (overlapping memory, or the same unit for
  // in-order units), within a look-back window, in a free slot of its lane. Appends a halt.
  // With `cfg`, the scheduler also knows how long instructions take: a bundle issues only when all
  // its instructions' operands are ready, so an instruction that reads the result of a long one on
  // another engine (a vector add of a PSUM tile the tensor engine is still accumulating) goes into
  // the first bundle that the bundles after the producer take long enough to reach, instead of
  // holding up the instructions issued beside it.
  void schedule(int32_t window = 48, const CoreConfig* cfg = nullptr);
  size_t size() const { return stream_.size(); }
  // Held instructions (weight prefetches, lower.cpp): what is emitted between begin_hold and
  // end_hold is held back; release(every) lets the held ones out one after every `every`
  // instructions emitted from then on, so that their DMAs issue spread over the kernel emitted
  // meanwhile (a burst of prefetches would take the engines' share from the kernel's own loads all
  // at once: the engines round-robin across queues); flush_held emits the rest. A held instruction belongs to
  // the kernel being emitted when it goes out.
  void begin_hold() { holding_ = true; }
  void end_hold() { holding_ = false; }
  void release(int64_t every) { every_ = countdown_ = std::max<int64_t>(1, every); }
  void flush_held();
  // What is emitted between begin_hold and end_hold with at_next_kernel: emitted as the next kernel
  // begins, its first instructions (a kernel's own prefetched weights, before anything reads them).
  void end_hold_for_next_kernel() {
    holding_ = false;
    for (size_t i = next_held_; i < held_.size(); ++i) at_kernel_.push_back(held_[i]);
    held_.resize(next_held_);
  }

 private:
  struct Item {
    Instr in;
    Lane lane;
  };
  Program& p_;
  std::vector<Item> stream_;
  bool holding_ = false;
  std::vector<Item> held_;   // held back (in order); held_[next_held_..] not yet emitted
  size_t next_held_ = 0;
  int64_t every_ = 0, countdown_ = 0;  // release(): one held instruction after every `every_`
  void push_held();
  std::vector<Item> at_kernel_;  // emitted by the next begin_kernel
  int16_t kernel_ = -1;
  int32_t stream_queues_ = kStreamQueues, bulk_queues_ = kBulkQueues, next_stream_ = 0, next_bulk_ = 0;
};

}  // namespace tessera::neuroncore
