#include "mapper/neuroncore/emit.hpp"

#include "isa/interrupt.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tessera::neuroncore {

namespace {
void fill_dims(AccessPattern& ap, std::vector<Dim> dims) {
  if (dims.empty() || dims.size() > 4) throw std::logic_error("access pattern needs 1-4 free dims");
  ap.ndims = static_cast<uint8_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) ap.dims[i] = dims[i];
}

// Whether b reads what a writes.
bool reads_result(const Instr& a, const Instr& b) {
  if (!a.dst.present()) return false;
  const Footprint w = footprint(a.dst);
  for (const AccessPattern* ap : {&b.src0, &b.src1, &b.aux})
    if (ap->present() && footprint(*ap).overlaps(w)) return true;
  return false;
}

// Whether b must stay after a: any overlap where one of them writes.
bool depends(const Instr& a, const Instr& b) {
  auto spans = [](const Instr& in, std::vector<std::pair<Footprint, bool>>& out) {
    out.clear();
    for (const AccessPattern* ap : {&in.src0, &in.src1})
      if (ap->present()) out.push_back({footprint(*ap), false});
    if (in.aux.present()) out.push_back({footprint(in.aux), in.op == Op::activation});
    if (in.dst.present()) out.push_back({footprint(in.dst), true});
  };
  static thread_local std::vector<std::pair<Footprint, bool>> sa, sb;
  spans(a, sa);
  spans(b, sb);
  for (const auto& [x, wx] : sa)
    for (const auto& [y, wy] : sb)
      if ((wx || wy) && x.overlaps(y)) return true;
  return false;
}

bool is_dma(Lane l) { return l == Lane::dma0 || l == Lane::dma1; }
}  // namespace

AccessPattern on_chip(Space s, DType t, int32_t p0, int32_t parts, int64_t offset, std::vector<Dim> dims) {
  AccessPattern ap;
  ap.space = s;
  ap.dtype = t;
  ap.part_start = p0;
  ap.parts = parts;
  ap.offset = offset;
  fill_dims(ap, std::move(dims));
  return ap;
}

AccessPattern in_hbm(DType t, int32_t rows, int64_t row_stride, int64_t offset, std::vector<Dim> dims) {
  AccessPattern ap;
  ap.space = Space::hbm;
  ap.dtype = t;
  ap.parts = rows;
  ap.part_stride = row_stride;
  ap.offset = offset;
  fill_dims(ap, std::move(dims));
  return ap;
}

int16_t Emitter::begin_kernel(const std::string& name) {
  p_.kernels.push_back(name);
  kernel_ = static_cast<int16_t>(p_.kernels.size() - 1);
  for (Item& it : at_kernel_) {
    it.in.kernel = kernel_;
    stream_.push_back(it);
  }
  at_kernel_.clear();
  return kernel_;
}

void Emitter::emit(Instr in, Lane lane) {
  if ((stream_.size() & 0xfff) == 0) poll_interrupt();  // a big kernel emits for seconds
  in.kernel = kernel_;
  if (holding_) {
    held_.push_back({in, lane});
    return;
  }
  stream_.push_back({in, lane});
  if (every_ > 0 && next_held_ < held_.size() && --countdown_ == 0) {
    push_held();
    countdown_ = every_;
  }
}

void Emitter::push_held() {
  Item it = held_[next_held_++];
  it.in.kernel = kernel_;
  stream_.push_back(it);
}

void Emitter::flush_held() {
  for (const Item& it : at_kernel_) held_.push_back(it);  // no kernel began: emitted here
  at_kernel_.clear();
  while (next_held_ < held_.size()) push_held();
  held_.clear();
  next_held_ = 0;
  every_ = 0;
}

void Emitter::dma(const AccessPattern& dst, const AccessPattern& src, DmaClass cls) {
  Instr in;
  in.op = Op::dma;
  in.dst = dst;
  in.src0 = src;
  if (cls == DmaClass::stream) {
    in.queue = static_cast<int16_t>(next_stream_);
    next_stream_ = (next_stream_ + 1) % stream_queues_;
    emit(in, Lane::dma0);
    return;
  }
  if (cls == DmaClass::spread || cls == DmaClass::spread_store || cls == DmaClass::prefetch) {
    in.queue = cls == DmaClass::spread ? kQueueAll : static_cast<int16_t>(cls == DmaClass::spread_store ? kQueueAll - 1 : kQueuePrefetch);
    emit(in, Lane::dma0);
    return;
  }
  // Bulk: split the rows into one group per bulk queue (when there are enough rows).
  const int32_t rows = src.parts;
  const int32_t groups = std::max(1, std::min(bulk_queues_, rows / 8));
  const int32_t per = (rows + groups - 1) / groups;
  for (int32_t r0 = 0; r0 < rows; r0 += per) {
    const int32_t rn = std::min(per, rows - r0);
    Instr part = in;
    for (AccessPattern* ap : {&part.dst, &part.src0}) {
      ap->parts = rn;
      if (ap->space == Space::hbm) ap->offset += static_cast<int64_t>(r0) * ap->part_stride * static_cast<int64_t>(dtype_size(ap->dtype));
      else ap->part_start += r0;
    }
    part.queue = static_cast<int16_t>(stream_queues_ + next_bulk_);
    next_bulk_ = (next_bulk_ + 1) % bulk_queues_;
    emit(part, Lane::dma0);
  }
}

void Emitter::schedule(int32_t window, const CoreConfig* cfg) {
  // bundle_of[i]: where stream item i went.
  std::vector<int32_t> bundle_of(stream_.size());
  std::vector<std::array<int32_t, kLanes>> bundles;  // stream item per lane slot, -1 free
  // Seconds each bundle's compute instructions keep their engines busy (the pace of the stream).
  std::vector<double> pace;
  auto seconds = [&](const Item& it) {
    return cfg ? static_cast<double>(instr_cycles(it.in, *cfg)) / lane_clock_hz(it.lane, *cfg) : 0.0;
  };
  // The last bundle holding an instruction of each in-order unit: a unit runs its instructions in
  // program order, so a later one may not be placed before it.
  std::array<int32_t, kLanes> last_on_lane;
  last_on_lane.fill(-1);
  // DMA queues are in order: a DMA stays after the previous one of its queue (other queues are
  // free to pass it; memory dependencies are checked like any other instruction's).
  std::map<int32_t, int32_t> last_on_queue;
  for (size_t i = 0; i < stream_.size(); ++i) {
    if ((i & 0xfff) == 0) poll_interrupt();
    const Item& it = stream_[i];
    const bool dma = is_dma(it.lane);
    int32_t lo = -1;
    // A DMA may share the bundle of the previous one on its queue, in the dma1 slot after it (the
    // lanes issue in order), so that loads can run ahead of the compute that two per bundle
    // would otherwise only keep pace with.
    int32_t same_q = -1;
    if (dma) {
      auto q = last_on_queue.find(it.in.queue);
      same_q = q == last_on_queue.end() ? -1 : q->second;
      lo = std::max(-1, same_q - 1);
    } else {
      lo = last_on_lane[static_cast<size_t>(it.lane)];
    }
    lo = std::max(lo, static_cast<int32_t>(bundles.size()) - window - 1);
    // A weight prefetch stays where it was released among the kernel's instructions (it has no
    // dependency to hold it: hoisted, it would take the engines ahead of the loads it was placed
    // after).
    if (dma && it.in.queue == kQueuePrefetch && i > 0) lo = std::max(lo, bundle_of[i - 1] - 1);
    // Latest dependency among the stream items placed in bundles after `lo`.
    double lag = 0;  // how long after bundle `lo` issues its results are ready (compute producers)
    for (int32_t b = static_cast<int32_t>(bundles.size()) - 1; b > lo; --b) {
      bool dep = false;
      for (int32_t s : bundles[static_cast<size_t>(b)])
        if (s >= 0 && depends(stream_[static_cast<size_t>(s)].in, it.in)) {
          dep = true;
          const Item& pr = stream_[static_cast<size_t>(s)];
          // Ready after the producer's run and the hand-off gap of the consumer (isa.dependent_gap).
          if (cfg && !dma && !is_dma(pr.lane) && pr.lane != it.lane && reads_result(pr.in, it.in))
            lag = std::max(lag, seconds(pr) + static_cast<double>(cfg->dependent_gap) / lane_clock_hz(it.lane, *cfg));
        }
      if (dep) {
        lo = b;
        break;
      }
    }
    // Skip the bundles the producer's latency covers (never past the end: a new bundle then).
    for (double covered = 0; covered < lag && lo + 1 < static_cast<int32_t>(bundles.size());) covered += pace[static_cast<size_t>(++lo)];
    int32_t placed = -1;
    for (int32_t b = lo + 1; b < static_cast<int32_t>(bundles.size()) && placed < 0; ++b) {
      auto& slots = bundles[static_cast<size_t>(b)];
      if (dma) {
        for (Lane l : {Lane::dma0, Lane::dma1})
          if (slots[static_cast<size_t>(l)] < 0 && (b != same_q || l == Lane::dma1)) {
            slots[static_cast<size_t>(l)] = static_cast<int32_t>(i);
            placed = b;
            break;
          }
      } else if (slots[static_cast<size_t>(it.lane)] < 0) {
        slots[static_cast<size_t>(it.lane)] = static_cast<int32_t>(i);
        placed = b;
      }
    }
    if (placed < 0) {
      bundles.emplace_back();
      pace.push_back(0);
      bundles.back().fill(-1);
      bundles.back()[static_cast<size_t>(dma ? Lane::dma0 : it.lane)] = static_cast<int32_t>(i);
      placed = static_cast<int32_t>(bundles.size()) - 1;
    }
    bundle_of[i] = placed;
    if (!dma) pace[static_cast<size_t>(placed)] = std::max(pace[static_cast<size_t>(placed)], seconds(it));
    if (dma) last_on_queue[it.in.queue] = std::max(last_on_queue[it.in.queue], placed);
    else last_on_lane[static_cast<size_t>(it.lane)] = std::max(last_on_lane[static_cast<size_t>(it.lane)], placed);
  }
  const int32_t base = static_cast<int32_t>(p_.instrs.size());
  for (const auto& it : stream_) p_.instrs.push_back(it.in);
  for (const auto& slots : bundles) {
    Bundle b;
    for (int l = 0; l < kLanes; ++l)
      b.slot[static_cast<size_t>(l)] = slots[static_cast<size_t>(l)] < 0 ? -1 : base + slots[static_cast<size_t>(l)];
    p_.bundles.push_back(b);
  }
  Instr halt;
  halt.op = Op::halt;
  p_.instrs.push_back(halt);
  Bundle hb;
  hb.slot[static_cast<size_t>(Lane::control)] = static_cast<int32_t>(p_.instrs.size()) - 1;
  p_.bundles.push_back(hb);
  stream_.clear();
}

}  // namespace tessera::neuroncore
