#pragma once
// The core's memories as bytes: SBUF (partitions x sbuf.partition_bytes), PSUM (partitions x
// psum.partition_bytes) and HBM (flat, hbm.capacity bytes, allocated lazily in 1 MiB pages: reads
// of never-written memory return zeros and allocate nothing).
//
// Access patterns are read as fp32 and written from fp32, row-major [parts][free_elems]:
//   - float dtypes widen exactly on read and round to nearest even on write (isa/numeric.hpp);
//   - integer dtypes (int8/uint8/int16/int32/int64, bool) read as the nearest fp32 (exact up to
//     2^24) and write by rounding to nearest even, then saturating to the type's range (NaN -> 0;
//     bool stores x != 0);
//   - fp64 reads round to fp32 and writes are exact.
// Innermost runs with stride 1 convert in bulk (widen_array / narrow_array per run), so a
// 128 x 512 bf16 tile reads in tens of microseconds.
//
// Every access is bounds-checked with its dynamic (register) offset applied: partitions within
// [0, partitions), bytes within the partition (SBUF/PSUM) or within [0, hbm.capacity) (HBM).
// Violations throw std::runtime_error naming the space and the range.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/isa.hpp"

namespace tessera::neuroncore {

using RegFile = std::array<int64_t, kRegs>;

class CoreMemory {
 public:
  explicit CoreMemory(const CoreConfig& c);

  // Effective byte offset of an operand (offset + reg[offset_reg] * reg_scale).
  static int64_t base_offset(const AccessPattern& ap, const RegFile& regs);

  // Reads the operand as fp32, row-major [parts][free_elems]; `out` is resized to ap.elems().
  void read(const AccessPattern& ap, const RegFile& regs, std::vector<float>& out) const;
  void read(const AccessPattern& ap, const RegFile& regs, float* out) const;
  // Writes ap.elems() fp32 values ([parts][free_elems]), rounding to ap.dtype.
  void write(const AccessPattern& ap, const RegFile& regs, const float* values);
  // Raw copy between operands of the same dtype and total element count, element by element in
  // each one's flattened [rows][free] order (DMA without conversion). The source is read in full
  // before the destination is written, so overlapping operands behave like a snapshot copy.
  void copy(const AccessPattern& dst, const AccessPattern& src, const RegFile& regs);

  // If the operand is on chip (SBUF/PSUM), fp32, 4-byte aligned and each row one dense run,
  // returns a pointer to row 0's first element and sets `row_stride` (in floats) between rows;
  // otherwise nullptr. Bounds are checked either way. Lets the tensor engine accumulate into
  // PSUM in place.
  float* dense_f32(const AccessPattern& ap, const RegFile& regs, int64_t& row_stride);

  // Direct byte access (used by the loader for HBM tensors and by tests).
  void hbm_write(int64_t addr, const void* data, size_t n);
  void hbm_read(int64_t addr, void* data, size_t n) const;
  std::byte* sbuf_ptr(int64_t partition, int64_t offset) { return &sbuf_[static_cast<size_t>(partition * sbuf_pb_ + offset)]; }
  std::byte* psum_ptr(int64_t partition, int64_t offset) { return &psum_[static_cast<size_t>(partition * psum_pb_ + offset)]; }
  int64_t hbm_pages_allocated() const { return static_cast<int64_t>(hbm_.size()); }
  int64_t partitions() const { return parts_; }
  int64_t sbuf_partition_bytes() const { return sbuf_pb_; }
  int64_t psum_partition_bytes() const { return psum_pb_; }
  int64_t hbm_capacity() const { return hbm_cap_; }

  static constexpr int64_t kPage = int64_t{1} << 20;

 private:
  struct Walk;  // an access pattern's free dims, normalised (memory.cpp)

  // Validates the operand against its space and returns the walk; `base` is the effective offset.
  Walk plan(const AccessPattern& ap, int64_t base) const;
  // Pointer to the first byte of row p (SBUF/PSUM only).
  std::byte* row_ptr(const AccessPattern& ap, int64_t base, int64_t p);
  const std::byte* row_ptr(const AccessPattern& ap, int64_t base, int64_t p) const;
  // Gathers the operand's raw element bytes in flattened order into `out` / scatters them back.
  void gather(const AccessPattern& ap, int64_t base, std::byte* out) const;
  void scatter(const AccessPattern& ap, int64_t base, const std::byte* in);
  // HBM: a pointer to [addr, addr + n) if it lies inside one page (nullptr if that page does not
  // exist and create is false, or if the range crosses a page boundary).
  std::byte* hbm_span(int64_t addr, int64_t n, bool create);
  const std::byte* hbm_span(int64_t addr, int64_t n) const;
  // Strided runs of n elements (es bytes, stride elements apart) from byte address addr.
  void hbm_gather_run(int64_t addr, int64_t n, int64_t stride, int64_t es, std::byte* out) const;
  void hbm_scatter_run(int64_t addr, int64_t n, int64_t stride, int64_t es, const std::byte* in);
  bool hbm_in_one_page(int64_t addr, int64_t n) const { return addr / kPage == (addr + n - 1) / kPage; }

  int64_t parts_, sbuf_pb_, psum_pb_, hbm_cap_;
  std::vector<std::byte> sbuf_, psum_;
  std::unordered_map<int64_t, std::unique_ptr<std::byte[]>> hbm_;
};

}  // namespace tessera::neuroncore
