#pragma once
// Building compiled programs: access-pattern helpers, an instruction stream in program order, and
// the list scheduler that packs it into 8-lane bundles.
#include <cstdint>
#include <string>
#include <vector>

#include "isa/neuroncore/isa.hpp"

namespace tessera::neuroncore {

// SBUF/PSUM operand: partitions [p0, p0+parts), `offset` bytes into each, free dims (outermost first,
// dense strides when stride is 0).
AccessPattern on_chip(Space s, DType t, int32_t p0, int32_t parts, int64_t offset, std::vector<Dim> dims);
// HBM operand: `rows` rows of `row_stride` elements from byte `offset`, free dims per row.
AccessPattern in_hbm(DType t, int32_t rows, int64_t row_stride, int64_t offset, std::vector<Dim> dims);

class Emitter {
 public:
  explicit Emitter(Program& p) : p_(p) {}
  int16_t begin_kernel(const std::string& name);
  // Appends an instruction for `lane` (dma: either DMA lane, chosen by the scheduler).
  void emit(Instr in, Lane lane);
  // DMA helper: alternates the queues over `queues` so transfers spread over engines.
  void dma(const AccessPattern& dst, const AccessPattern& src);
  void set_dma_queues(int32_t q) { queues_ = q; }
  // Packs everything emitted into bundles: each instruction goes into the earliest bundle after the
  // last one holding an instruction it depends on (overlapping memory, or the same unit for
  // in-order units), within a look-back window, in a free slot of its lane. Appends a halt.
  void schedule(int32_t window = 48);
  size_t size() const { return stream_.size(); }

 private:
  struct Item {
    Instr in;
    Lane lane;
  };
  Program& p_;
  std::vector<Item> stream_;
  int16_t kernel_ = -1;
  int32_t queues_ = 16, next_queue_ = 0;
};

}  // namespace tessera::neuroncore
