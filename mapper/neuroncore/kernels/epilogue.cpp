#include <algorithm>

#include "mapper/neuroncore/kernels/epilogue.hpp"

#include "mapper/neuroncore/kernels/tiling.hpp"

namespace tessera::neuroncore {

EpilogueEmitter::EpilogueEmitter(Ctx& x, const Epilogue& ep, Sbuf& sb, int64_t free) : x_(x), ep_(ep), free_(free), sb_(&sb) {
  if (ep.bias) {
    bias_buf_ = sb.take(free * 4);
    col_buf_ = sb.take(kColumnSlots * 4);
  }
  if (ep.residual) res_buf_ = sb.take(2 * free * 4);
  // Two work tiles: the next tile's first step (the bias add, on the vector engine) need not wait
  // for this tile's last (the activation, on the scalar engine) to read it.
  if (ep.bias || ep.residual) tmp_buf_ = sb.take(2 * free * 4);
}

TileView tile_at(const TileView& at, int64_t rs, int64_t cs, int64_t m0, int64_t n0, int64_t nn) {
  return TileView{at.elem + m0 * rs + n0 * cs, rs, {{static_cast<int32_t>(nn), static_cast<int32_t>(cs)}}};
}

void EpilogueEmitter::preload_row_bias(int64_t elem, int64_t count, int64_t stride) {
  const int32_t P = static_cast<int32_t>(x_.cfg.partitions);
  const DType dt = ep_.bias ? ep_.bias->dtype : DType::f32;
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  if (!ep_.bias || row_buf_ >= 0 || !sb_->fits(count * es + P * es + 64 * 1024)) return;  // leave room for the kernel's tiles
  row_buf_ = sb_->take(count * es);
  row_elem_ = elem;
  row_count_ = count;
  row_stride_ = stride;
  // Replicated on every partition: a short row by a stride-0 DMA, a longer one loaded into
  // partition 0 and replicated by the tensor engine (Ctx::replicate_row).
  if (count * es < kReplicateRowBytes) {
    x_.em.dma(on_chip(Space::sbuf, dt, 0, P, row_buf_, {{static_cast<int32_t>(count), 1}}),
              hbm_ap(*ep_.bias, elem, P, 0, {{static_cast<int32_t>(count), static_cast<int32_t>(stride)}}), Emitter::DmaClass::spread);
    x_.used(*sb_);
    return;
  }
  const int64_t ones = sb_->take(P * es);
  x_.em.dma(on_chip(Space::sbuf, dt, 0, 1, row_buf_, {{static_cast<int32_t>(count), 1}}),
            hbm_ap(*ep_.bias, elem, 1, 0, {{static_cast<int32_t>(count), static_cast<int32_t>(stride)}}), Emitter::DmaClass::spread);
  x_.replicate_row(dt, row_buf_, count, ones);
  x_.used(*sb_);
}

AccessPattern EpilogueEmitter::column(const TileView& bias, int32_t parts) {
  const std::array<int64_t, 3> key{bias.elem, bias.part_stride, parts};
  auto it = std::find(columns_.begin(), columns_.end(), key);
  size_t slot = static_cast<size_t>(it - columns_.begin());
  const bool hit = it != columns_.end();
  if (!hit) {
    slot = columns_.size() % kColumnSlots;
    if (columns_.size() < kColumnSlots) columns_.push_back(key);
    else columns_[slot] = key;
  }
  const AccessPattern b = on_chip(Space::sbuf, ep_.bias->dtype, 0, parts, col_buf_ + static_cast<int64_t>(slot) * 4, {{1, 1}});
  if (!hit) x_.em.dma(b, hbm_ap(*ep_.bias, bias.elem, parts, bias.part_stride, {{1, 1}}));
  return b;
}

void EpilogueEmitter::preload_column(const TileView& bias, int32_t parts) {
  if (ep_.bias && columns_.size() < kColumnSlots) column(bias, parts);
}

namespace {
bool per_partition(const TileView& v) {
  for (const auto& d : v.free)
    if (d.stride != 0 && d.num > 1) return false;
  return true;
}
}  // namespace

AccessPattern EpilogueEmitter::row_bias(const TileView& bias, int32_t parts) const {
  if (row_buf_ < 0 || bias.part_stride != 0 || bias.free.size() != 1 || bias.free[0].stride != row_stride_ || row_stride_ == 0) return {};
  if ((bias.elem - row_elem_) % row_stride_ != 0) return {};
  const int64_t j = (bias.elem - row_elem_) / row_stride_;
  if (j < 0 || j + bias.free[0].num > row_count_) return {};
  return on_chip(Space::sbuf, ep_.bias->dtype, 0, parts, row_buf_ + j * ep_.bias->es(), {{bias.free[0].num, 1}});
}

bool EpilogueEmitter::preadd(const AccessPattern& dst, const TileView& bias, const TileView& residual, int64_t res_off) {
  if (ep_.scale != 1.0 || (ep_.residual && !ep_.residual_first) || (!ep_.residual && !ep_.bias)) return false;
  const int32_t parts = dst.parts;
  const AccessPattern b = ep_.bias ? row_bias(bias, parts) : AccessPattern{};
  if (ep_.bias && !b.present()) return false;
  if (!ep_.residual) {
    x_.copy(dst, b);
    return true;
  }
  const Packed p = pack(residual.free);
  x_.em.dma(on_chip(Space::sbuf, ep_.residual->dtype, 0, parts, res_off, p.sbuf), hbm_ap(*ep_.residual, residual.elem, parts, residual.part_stride, p.hbm),
            Emitter::DmaClass::spread);
  const AccessPattern res = on_chip(Space::sbuf, ep_.residual->dtype, 0, parts, res_off, p.read);
  if (b.present()) x_.tensor_tensor(Alu::add, dst, res, b);
  else x_.copy(dst, res);
  return true;
}

void EpilogueEmitter::run_preadded(const AccessPattern& dst, const AccessPattern& acc) {
  x_.tensor_tensor(Alu::add, dst, acc, dst);
  if (ep_.func != Func::identity) x_.activation(dst, dst, ep_.func);
}

void EpilogueEmitter::run(const AccessPattern& dst, const AccessPattern& acc, const TileView& bias, const TileView& residual, int64_t t) {
  const int32_t parts = acc.parts;
  const std::vector<Dim> flat{{static_cast<int32_t>(acc.free_elems()), 1}};
  const AccessPattern tmp = tmp_buf_ >= 0 ? on_chip(Space::sbuf, DType::f32, 0, parts, tmp_buf_ + (t % 2) * free_ * 4, flat) : AccessPattern{};
  // Loads `v` of operand `r` into SBUF at `off` (packed); returns the AP reading it in tile order.
  auto load = [&](const TensorRef& r, const TileView& v, int64_t off) {
    const Packed p = pack(v.free);
    x_.em.dma(on_chip(Space::sbuf, r.dtype, 0, parts, off, p.sbuf), hbm_ap(r, v.elem, parts, v.part_stride, p.hbm), Emitter::DmaClass::spread);
    return on_chip(Space::sbuf, r.dtype, 0, parts, off, p.read);
  };
  AccessPattern res;
  if (ep_.residual) res = load(*ep_.residual, residual, res_buf_ + (t % 2) * free_ * 4);
  // acc * scale + bias [+ residual] into tmp when more than one step follows, else straight to dst.
  const bool col = ep_.bias && per_partition(bias);
  AccessPattern b;
  if (ep_.bias) {
    const bool reuse = !col && bias.elem == last_bias_ && parts <= last_bias_parts_ && bias.part_stride == 0;
    const AccessPattern row = col ? AccessPattern{} : row_bias(bias, parts);
    if (col) {  // a column per partition, loaded once and kept (the kernel's tiles reuse them)
      b = column(bias, parts);
    } else if (row.present()) {  // the kernel's preloaded bias row
      b = row;
    } else if (reuse) {
      b = on_chip(Space::sbuf, ep_.bias->dtype, 0, parts, bias_buf_, pack(bias.free).read);
    } else {
      b = load(*ep_.bias, bias, bias_buf_);
      last_bias_ = bias.part_stride == 0 ? bias.elem : -1;
      last_bias_parts_ = parts;
    }
  }
  if (!ep_.residual && (!ep_.bias || col)) {  // one activation: func(acc * scale + bias[p])
    x_.activation(dst, acc, ep_.func, ep_.scale, col ? b : AccessPattern{});
    return;
  }
  // A bias row and the residual added to each other as soon as both are in SBUF (neither waits
  // for the accumulation), so that the accumulator's evacuation is one add: (acc + (res + bias)).
  if (ep_.residual && ep_.residual_first && ep_.bias && !col && ep_.scale == 1.0) {
    x_.tensor_tensor(Alu::add, tmp, res, b);
    if (ep_.func == Func::identity) {
      x_.tensor_tensor(Alu::add, dst, acc, tmp);
    } else {
      x_.tensor_tensor(Alu::add, tmp, acc, tmp);
      x_.activation(dst, tmp, ep_.func);
    }
    return;
  }
  // tmp = acc * scale + bias
  if (col || !ep_.bias) {
    x_.activation(tmp, acc, ep_.residual_first ? Func::identity : ep_.func, ep_.scale, col ? b : AccessPattern{});
  } else {
    if (ep_.scale != 1.0) {
      x_.activation(tmp, acc, Func::identity, ep_.scale);
      x_.tensor_tensor(Alu::add, tmp, tmp, b);
    } else {
      x_.tensor_tensor(Alu::add, tmp, acc, b);
    }
    if (!ep_.residual) {
      x_.activation(dst, tmp, ep_.func);
      return;
    }
    if (!ep_.residual_first && ep_.func != Func::identity) x_.activation(tmp, tmp, ep_.func);
  }
  if (ep_.residual_first && ep_.func == Func::identity) {  // straight into dst: no copy after the add
    x_.tensor_tensor(Alu::add, dst, tmp, res);
  } else if (ep_.residual_first) {
    x_.tensor_tensor(Alu::add, tmp, tmp, res);
    x_.activation(dst, tmp, ep_.func);
  } else {
    x_.tensor_tensor(Alu::add, dst, tmp, res);
  }
}

}  // namespace tessera::neuroncore
