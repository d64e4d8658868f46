#include "models/neuroncore/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "isa/numeric.hpp"

namespace tessera::neuroncore {

// ---------------------------------------------------------------------------------------------
// Element conversions: contiguous bytes of one dtype <-> fp32.

namespace {

template <class T>
void int_to_f32(const std::byte* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    d[i] = static_cast<float>(v);
  }
}

// Round to nearest even (the default floating-point environment), then saturate; NaN -> 0.
template <class T>
T saturating_round(float x) {
  if (std::isnan(x)) return T{0};
  const double r = std::nearbyint(static_cast<double>(x));
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (r <= lo) return std::numeric_limits<T>::min();
  if (r >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(r);
}

template <class T>
void f32_to_int(const float* s, std::byte* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = saturating_round<T>(s[i]);
    std::memcpy(d + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  }
}

void to_f32(const std::byte* src, float* dst, int64_t n, DType t) {
  if (n <= 0) return;
  if (auto f = float_format(t)) {
    widen_array(src, dst, static_cast<size_t>(n), *f);
    return;
  }
  switch (t) {
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + i * 8, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::i8: int_to_f32<int8_t>(src, dst, n); return;
    case DType::u8: int_to_f32<uint8_t>(src, dst, n); return;
    case DType::i16: int_to_f32<int16_t>(src, dst, n); return;
    case DType::i32: int_to_f32<int32_t>(src, dst, n); return;
    case DType::i64: int_to_f32<int64_t>(src, dst, n); return;
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != std::byte{0} ? 1.0f : 0.0f;
      return;
    default: throw std::logic_error("memory: unhandled dtype");
  }
}

void from_f32(const float* src, std::byte* dst, int64_t n, DType t) {
  if (n <= 0) return;
  if (auto f = float_format(t)) {
    narrow_array(src, dst, static_cast<size_t>(n), *f);
    return;
  }
  switch (t) {
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) {
        const double v = src[i];
        std::memcpy(dst + i * 8, &v, 8);
      }
      return;
    case DType::i8: f32_to_int<int8_t>(src, dst, n); return;
    case DType::u8: f32_to_int<uint8_t>(src, dst, n); return;
    case DType::i16: f32_to_int<int16_t>(src, dst, n); return;
    case DType::i32: f32_to_int<int32_t>(src, dst, n); return;
    case DType::i64: f32_to_int<int64_t>(src, dst, n); return;
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0.0f ? std::byte{1} : std::byte{0};
      return;
    default: throw std::logic_error("memory: unhandled dtype");
  }
}

// Copies `n` elements of `es` bytes, `stride` elements apart, into a dense buffer (and back).
void gather_strided(const std::byte* s, int64_t n, int64_t stride, int64_t es, std::byte* d) {
  const int64_t sb = stride * es;
  switch (es) {
    case 1: for (int64_t i = 0; i < n; ++i) d[i] = s[i * sb]; return;
    case 2: for (int64_t i = 0; i < n; ++i) std::memcpy(d + 2 * i, s + i * sb, 2); return;
    case 4: for (int64_t i = 0; i < n; ++i) std::memcpy(d + 4 * i, s + i * sb, 4); return;
    default: for (int64_t i = 0; i < n; ++i) std::memcpy(d + es * i, s + i * sb, static_cast<size_t>(es)); return;
  }
}
void scatter_strided(const std::byte* s, int64_t n, int64_t stride, int64_t es, std::byte* d) {
  const int64_t db = stride * es;
  switch (es) {
    case 1: for (int64_t i = 0; i < n; ++i) d[i * db] = s[i]; return;
    case 2: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * db, s + 2 * i, 2); return;
    case 4: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * db, s + 4 * i, 4); return;
    default: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * db, s + es * i, static_cast<size_t>(es)); return;
  }
}

// Per-thread scratch for runs that cannot convert in place (strided, or HBM across pages).
std::vector<std::byte>& scratch_bytes(size_t n) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < n) buf.resize(n);
  return buf;
}

bool on_chip(const AccessPattern& ap) { return ap.space != Space::hbm; }

std::string range_text(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Normalised walk of the free dimensions: dims of size 1 dropped, dense neighbours merged, so a
// row-contiguous operand is one run per row whatever way it was written.

struct CoreMemory::Walk {
  int nd = 1;                      // >= 1; the last dim is the run
  std::array<int64_t, 4> num{1, 1, 1, 1}, stride{1, 1, 1, 1};
  int64_t es = 4;                  // element size in bytes
  int64_t free = 1;                // elements per row
  int64_t lo = 0, hi = 0;          // element offsets touched per row: [lo, hi]

  // f(elem_offset, flat_index, n, stride) for each innermost run of one row, in flattened order.
  template <class F>
  void runs(F&& f) const {
    if (free == 0) return;
    const int inner = nd - 1;
    std::array<int64_t, 4> idx{};
    int64_t off = 0, flat = 0;
    for (;;) {
      f(off, flat, num[static_cast<size_t>(inner)], stride[static_cast<size_t>(inner)]);
      flat += num[static_cast<size_t>(inner)];
      int d = inner - 1;
      for (; d >= 0; --d) {
        const auto du = static_cast<size_t>(d);
        if (++idx[du] < num[du]) {
          off += stride[du];
          break;
        }
        off -= (num[du] - 1) * stride[du];
        idx[du] = 0;
      }
      if (d < 0) return;
    }
  }
};

CoreMemory::Walk CoreMemory::plan(const AccessPattern& ap, int64_t base) const {
  Walk w;
  w.es = static_cast<int64_t>(dtype_size(ap.dtype));
  // Collect the dims that matter (outermost first).
  std::array<int64_t, 4> num{}, stride{};
  int n = 0;
  w.free = 1;
  for (int i = 0; i < ap.ndims && i < 4; ++i) {
    const auto& d = ap.dims[static_cast<size_t>(i)];
    if (d.num < 0) throw std::runtime_error("memory: negative dimension size " + std::to_string(d.num));
    w.free *= d.num;
    if (d.num == 1) continue;
    num[static_cast<size_t>(n)] = d.num;
    stride[static_cast<size_t>(n)] = d.stride;
    ++n;
  }
  if (n == 0) {
    num[0] = 1;
    stride[0] = 1;
    n = 1;
  }
  // Merge from the inside out: an outer dim whose stride spans the inner one exactly.
  std::array<int64_t, 4> mn{}, ms{};
  int m = 0;
  for (int i = n - 1; i >= 0; --i) {
    const auto iu = static_cast<size_t>(i);
    if (m > 0 && stride[iu] == mn[static_cast<size_t>(m - 1)] * ms[static_cast<size_t>(m - 1)]) {
      mn[static_cast<size_t>(m - 1)] *= num[iu];
    } else {
      mn[static_cast<size_t>(m)] = num[iu];
      ms[static_cast<size_t>(m)] = stride[iu];
      ++m;
    }
  }
  w.nd = m;
  for (int i = 0; i < m; ++i) {  // back to outermost first
    w.num[static_cast<size_t>(i)] = mn[static_cast<size_t>(m - 1 - i)];
    w.stride[static_cast<size_t>(i)] = ms[static_cast<size_t>(m - 1 - i)];
  }
  for (int i = 0; i < w.nd; ++i) {
    const int64_t span = (w.num[static_cast<size_t>(i)] - 1) * w.stride[static_cast<size_t>(i)];
    if (span >= 0) w.hi += span; else w.lo += span;
  }

  // Bounds.
  if (ap.parts < 0) throw std::runtime_error("memory: negative partition count " + std::to_string(ap.parts));
  if (ap.parts == 0 || w.free == 0) return w;
  const std::string what = std::string(space_name(ap.space)) + "." + std::string(dtype_name(ap.dtype));
  if (on_chip(ap)) {
    if (ap.part_start < 0 || ap.part_start + ap.parts > parts_)
      throw std::runtime_error(what + " access out of range: partitions " +
                               range_text(ap.part_start, int64_t{ap.part_start} + ap.parts) + " of " +
                               std::to_string(parts_));
    const int64_t pb = ap.space == Space::sbuf ? sbuf_pb_ : psum_pb_;
    const int64_t lo = base + w.lo * w.es, hi = base + (w.hi + 1) * w.es;
    if (lo < 0 || hi > pb)
      throw std::runtime_error(what + " access out of range: bytes " + range_text(lo, hi) + " of a " +
                               std::to_string(pb) + "-byte partition");
  } else {
    const int64_t first = base, last = base + (ap.parts - 1) * ap.part_stride * w.es;
    const int64_t lo = std::min(first, last) + w.lo * w.es, hi = std::max(first, last) + (w.hi + 1) * w.es;
    if (lo < 0 || hi > hbm_cap_)
      throw std::runtime_error(what + " access out of range: bytes " + range_text(lo, hi) + " of HBM (" +
                               std::to_string(hbm_cap_) + " bytes)");
  }
  return w;
}

// ---------------------------------------------------------------------------------------------

CoreMemory::CoreMemory(const CoreConfig& c)
    : parts_(c.partitions),
      sbuf_pb_(c.sbuf_partition_bytes),
      psum_pb_(c.psum_partition_bytes),
      hbm_cap_(static_cast<int64_t>(c.hbm_capacity)),
      sbuf_(static_cast<size_t>(c.partitions * c.sbuf_partition_bytes)),
      psum_(static_cast<size_t>(c.partitions * c.psum_partition_bytes)) {}

int64_t CoreMemory::base_offset(const AccessPattern& ap, const RegFile& regs) {
  int64_t b = ap.offset;
  if (ap.offset_reg >= 0) {
    if (ap.offset_reg >= kRegs) throw std::runtime_error("memory: register r" + std::to_string(ap.offset_reg) + " out of range");
    b += regs[static_cast<size_t>(ap.offset_reg)] * ap.reg_scale;
  }
  return b;
}

std::byte* CoreMemory::row_ptr(const AccessPattern& ap, int64_t base, int64_t p) {
  return ap.space == Space::sbuf ? sbuf_ptr(ap.part_start + p, base) : psum_ptr(ap.part_start + p, base);
}
const std::byte* CoreMemory::row_ptr(const AccessPattern& ap, int64_t base, int64_t p) const {
  return const_cast<CoreMemory*>(this)->row_ptr(ap, base, p);
}

// ---- HBM pages ----

std::byte* CoreMemory::hbm_span(int64_t addr, int64_t n, bool create) {
  if (n <= 0 || !hbm_in_one_page(addr, n)) return nullptr;
  const int64_t page = addr / kPage;
  auto it = hbm_.find(page);
  if (it == hbm_.end()) {
    if (!create) return nullptr;
    auto mem = std::make_unique<std::byte[]>(static_cast<size_t>(kPage));  // value-initialised: zeros
    it = hbm_.emplace(page, std::move(mem)).first;
  }
  return it->second.get() + (addr - page * kPage);
}
const std::byte* CoreMemory::hbm_span(int64_t addr, int64_t n) const {
  if (n <= 0 || !hbm_in_one_page(addr, n)) return nullptr;
  auto it = hbm_.find(addr / kPage);
  return it == hbm_.end() ? nullptr : it->second.get() + (addr - (addr / kPage) * kPage);
}

void CoreMemory::hbm_write(int64_t addr, const void* data, size_t n) {
  const auto len = static_cast<int64_t>(n);
  if (addr < 0 || addr + len > hbm_cap_)
    throw std::runtime_error("hbm write out of range: bytes " + range_text(addr, addr + len) + " of " +
                             std::to_string(hbm_cap_));
  const auto* s = static_cast<const std::byte*>(data);
  while (n > 0) {  // addr >= 0 here
    const size_t in_page = std::min(n, static_cast<size_t>(kPage - addr % kPage));
    std::memcpy(hbm_span(addr, static_cast<int64_t>(in_page), true), s, in_page);
    addr += static_cast<int64_t>(in_page);
    s += in_page;
    n -= in_page;
  }
}

void CoreMemory::hbm_read(int64_t addr, void* data, size_t n) const {
  const auto len = static_cast<int64_t>(n);
  if (addr < 0 || addr + len > hbm_cap_)
    throw std::runtime_error("hbm read out of range: bytes " + range_text(addr, addr + len) + " of " +
                             std::to_string(hbm_cap_));
  auto* d = static_cast<std::byte*>(data);
  while (n > 0) {  // addr >= 0 here
    const size_t in_page = std::min(n, static_cast<size_t>(kPage - addr % kPage));
    if (const std::byte* p = hbm_span(addr, static_cast<int64_t>(in_page))) std::memcpy(d, p, in_page);
    else std::memset(d, 0, in_page);
    addr += static_cast<int64_t>(in_page);
    d += in_page;
    n -= in_page;
  }
}

// Strided HBM runs: one page lookup when the run lies in one page, else element by element.
void CoreMemory::hbm_gather_run(int64_t addr, int64_t n, int64_t stride, int64_t es, std::byte* out) const {
  const int64_t lo = addr + std::min<int64_t>(0, (n - 1) * stride) * es;
  const int64_t span = (std::abs((n - 1) * stride) + 1) * es;
  if (hbm_in_one_page(lo, span)) {
    if (const std::byte* pg = hbm_span(lo, span)) gather_strided(pg + (addr - lo), n, stride, es, out);
    else std::memset(out, 0, static_cast<size_t>(n * es));  // never written: zeros
    return;
  }
  for (int64_t i = 0; i < n; ++i) hbm_read(addr + i * stride * es, out + i * es, static_cast<size_t>(es));
}

void CoreMemory::hbm_scatter_run(int64_t addr, int64_t n, int64_t stride, int64_t es, const std::byte* in) {
  const int64_t lo = addr + std::min<int64_t>(0, (n - 1) * stride) * es;
  const int64_t span = (std::abs((n - 1) * stride) + 1) * es;
  if (std::byte* pg = hbm_span(lo, span, true)) {
    scatter_strided(in, n, stride, es, pg + (addr - lo));
    return;
  }
  for (int64_t i = 0; i < n; ++i) hbm_write(addr + i * stride * es, in + i * es, static_cast<size_t>(es));
}

// ---- reads and writes ----

void CoreMemory::read(const AccessPattern& ap, const RegFile& regs, std::vector<float>& out) const {
  out.resize(static_cast<size_t>(std::max<int64_t>(ap.elems(), 0)));
  read(ap, regs, out.data());
}

void CoreMemory::read(const AccessPattern& ap, const RegFile& regs, float* out) const {
  const int64_t base = base_offset(ap, regs);
  const Walk w = plan(ap, base);
  if (ap.parts == 0 || w.free == 0) return;
  const int64_t es = w.es;
  for (int64_t p = 0; p < ap.parts; ++p) {
    float* orow = out + p * w.free;
    if (on_chip(ap)) {
      const std::byte* row = row_ptr(ap, base, p);
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          to_f32(row + off * es, orow + flat, n, ap.dtype);
        } else {
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          gather_strided(row + off * es, n, stride, es, tmp.data());
          to_f32(tmp.data(), orow + flat, n, ap.dtype);
        }
      });
    } else {
      const int64_t row = base + p * ap.part_stride * es;
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          const int64_t addr = row + off * es;
          if (hbm_in_one_page(addr, n * es)) {
            if (const std::byte* s = hbm_span(addr, n * es)) to_f32(s, orow + flat, n, ap.dtype);
            else std::fill(orow + flat, orow + flat + n, 0.0f);  // never written: zeros
            return;
          }
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          hbm_read(addr, tmp.data(), static_cast<size_t>(n * es));
          to_f32(tmp.data(), orow + flat, n, ap.dtype);
        } else {
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          hbm_gather_run(row + off * es, n, stride, es, tmp.data());
          to_f32(tmp.data(), orow + flat, n, ap.dtype);
        }
      });
    }
  }
}

void CoreMemory::write(const AccessPattern& ap, const RegFile& regs, const float* values) {
  const int64_t base = base_offset(ap, regs);
  const Walk w = plan(ap, base);
  if (ap.parts == 0 || w.free == 0) return;
  const int64_t es = w.es;
  for (int64_t p = 0; p < ap.parts; ++p) {
    const float* vrow = values + p * w.free;
    if (on_chip(ap)) {
      std::byte* row = row_ptr(ap, base, p);
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          from_f32(vrow + flat, row + off * es, n, ap.dtype);
        } else {
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          from_f32(vrow + flat, tmp.data(), n, ap.dtype);
          scatter_strided(tmp.data(), n, stride, es, row + off * es);
        }
      });
    } else {
      const int64_t row = base + p * ap.part_stride * es;
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          const int64_t addr = row + off * es;
          if (std::byte* d = hbm_span(addr, n * es, true)) {
            from_f32(vrow + flat, d, n, ap.dtype);
            return;
          }
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          from_f32(vrow + flat, tmp.data(), n, ap.dtype);
          hbm_write(addr, tmp.data(), static_cast<size_t>(n * es));
        } else {
          auto& tmp = scratch_bytes(static_cast<size_t>(n * es));
          from_f32(vrow + flat, tmp.data(), n, ap.dtype);
          hbm_scatter_run(row + off * es, n, stride, es, tmp.data());
        }
      });
    }
  }
}

// ---- raw copies ----

void CoreMemory::gather(const AccessPattern& ap, int64_t base, std::byte* out) const {
  const Walk w = plan(ap, base);
  if (ap.parts == 0 || w.free == 0) return;
  const int64_t es = w.es;
  for (int64_t p = 0; p < ap.parts; ++p) {
    std::byte* orow = out + p * w.free * es;
    if (on_chip(ap)) {
      const std::byte* row = row_ptr(ap, base, p);
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) std::memcpy(orow + flat * es, row + off * es, static_cast<size_t>(n * es));
        else gather_strided(row + off * es, n, stride, es, orow + flat * es);
      });
    } else {
      const int64_t row = base + p * ap.part_stride * es;
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          hbm_read(row + off * es, orow + flat * es, static_cast<size_t>(n * es));
        } else {
          hbm_gather_run(row + off * es, n, stride, es, orow + flat * es);
        }
      });
    }
  }
}

void CoreMemory::scatter(const AccessPattern& ap, int64_t base, const std::byte* in) {
  const Walk w = plan(ap, base);
  if (ap.parts == 0 || w.free == 0) return;
  const int64_t es = w.es;
  for (int64_t p = 0; p < ap.parts; ++p) {
    const std::byte* irow = in + p * w.free * es;
    if (on_chip(ap)) {
      std::byte* row = row_ptr(ap, base, p);
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) std::memcpy(row + off * es, irow + flat * es, static_cast<size_t>(n * es));
        else scatter_strided(irow + flat * es, n, stride, es, row + off * es);
      });
    } else {
      const int64_t row = base + p * ap.part_stride * es;
      w.runs([&](int64_t off, int64_t flat, int64_t n, int64_t stride) {
        if (stride == 1) {
          hbm_write(row + off * es, irow + flat * es, static_cast<size_t>(n * es));
        } else {
          hbm_scatter_run(row + off * es, n, stride, es, irow + flat * es);
        }
      });
    }
  }
}

void CoreMemory::copy(const AccessPattern& dst, const AccessPattern& src, const RegFile& regs) {
  if (dst.dtype != src.dtype)
    throw std::runtime_error("memory copy: dtypes differ (" + std::string(dtype_name(dst.dtype)) + " <- " +
                             std::string(dtype_name(src.dtype)) + ")");
  if (dst.elems() != src.elems())
    throw std::runtime_error("memory copy: element counts differ (" + std::to_string(dst.elems()) + " <- " +
                             std::to_string(src.elems()) + ")");
  const auto bytes = static_cast<size_t>(src.elems()) * dtype_size(src.dtype);
  std::vector<std::byte> tmp(bytes);  // own buffer: gather/scatter use the run scratch
  gather(src, base_offset(src, regs), tmp.data());
  scatter(dst, base_offset(dst, regs), tmp.data());
}

float* CoreMemory::dense_f32(const AccessPattern& ap, const RegFile& regs, int64_t& row_stride) {
  const int64_t base = base_offset(ap, regs);
  const Walk w = plan(ap, base);
  if (!on_chip(ap) || ap.dtype != DType::f32 || ap.parts == 0 || w.free == 0) return nullptr;
  if (w.nd != 1 || w.stride[0] != 1 || base % 4 != 0) return nullptr;
  const int64_t pb = ap.space == Space::sbuf ? sbuf_pb_ : psum_pb_;
  if (pb % 4 != 0) return nullptr;
  row_stride = pb / 4;
  return reinterpret_cast<float*>(row_ptr(ap, base, 0));
}

}  // namespace tessera::neuroncore
