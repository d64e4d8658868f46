// Fused attention over key ranges longer than one block of scores (kernels.hpp; attention.cpp
// takes the keys that fit one PSUM bank): the keys in blocks of 512 (a bank of fp32 scores), the
// softmax computed online (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax";
// the FlashAttention recurrence, Dao et al. 2022). Per unit (batch, 128-row query tile) and key
// block j, with n the row maxima negated and scaled (the exp's bias) and s the scores' scale:
//   S_j  PSUM [sq, kb] = (Q^T [dh, sq])^T @ K^T_j [dh, kb]              (tensor engine)
//   n_j  = min(n_{j-1}, -s rowmax(S_j)),  a_j = exp(n_j - n_{j-1})      (vector; scalar exp)
//        (with -n_j kept beside n_j, so that a_j is one activation with -n_{j-1} as its bias)
//   P_j  SBUF [sq, kb] = exp(s S_j + n_j), row sums r_j                 (scalar engine, from PSUM)
//   l_j  = l_{j-1} a_j + r_j                                            (vector, [sq, 1])
//   P_j^T per 128 keys (tensor engine transpose), C_j PSUM [sq, dv] = P_j @ V_j
//   O_j  SBUF fp32 [sq, dv] = O_{j-1} a_j + C_j                          (vector)
// and the unit's output O_last / l_last, stored. The scores never leave PSUM and SBUF. K^T and V
// stay in SBUF for all of a batch's query tiles (loaded block by block during the batch's first
// tile). A unit's blocks are one dependent chain (the running maxima, sums and output), so kGroup
// units run side by side: the steps go block by block over the group's units -- (u0, 0), (u1, 0),
// ..., (u0, 1), ... -- and are software-pipelined over eight stages, one dependent link each, so
// that every consumer sits a whole iteration of other steps' work after its producer in its
// engine's in-order stream (a dependency right behind its producer idles the engine for the
// hand-off gap, isa.dependent_gap). PSUM: scores in banks 0-3 (read up to three stages after they
// are written), P^T in 4-5, the context in bank 6 (four tiles for dv <= 128), the loads' transposes 7.
// Masks are not taken here (blocks_fit says so; the chain then compiles kernel by kernel).
#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "mapper/neuroncore/kernels/attention_parts.hpp"

namespace tessera::neuroncore::attn {

using graph::Strided;

namespace {

constexpr int64_t kGroup = 4;                 // units whose block chains interleave
constexpr int64_t kStepSets = 2 * kGroup + 4;  // SBUF sets of a step's probabilities and columns
constexpr int64_t kUnitSets = 2 * kGroup;      // SBUF sets of a unit's Q^T and output
constexpr int64_t kCols = 7;      // per step: nb, n, a, r, l, 1 / l, -n

// SBUF bytes per partition of the kernel's sets (offsets within a set; sizes rounded to 64).
struct Layout {
  int64_t kT = 0, v = 0, kv = 0;             // per batch (kv_sets): K^T [dh, Sk], V [kc, dv] per 128 keys
  int64_t qT = 0, o = 0, out = 0, unit = 0;  // per unit (kUnitSets): Q^T [dh, sq], O fp32 [sq, dv], output tile
  int64_t p = 0, pT = 0, cols = 0, step = 0; // per step (kStepSets): P [sq, kb], P^T per chunk, columns
  int64_t stage = 0;                         // staging of transposed loads (4 x 128 elements)
  int64_t kv_sets = 1;                       // batches whose K and V are in SBUF at once
  int64_t total() const { return kv_sets * kv + kUnitSets * unit + kStepSets * step + stage; }
};

Layout layout_of(const Operands& o, int64_t kb) {
  Layout l;
  // The units in flight (two groups) span at most this many batches; a batch's sets are reused only
  // after every read of the batch before it (program order, so the scoreboard orders them).
  const int64_t qtiles = ceil_div(o.Sq, 128);
  l.kv_sets = std::min(o.nb, ceil_div(2 * kGroup, qtiles) + 1);
  const int64_t chunks = ceil_div(o.Sk, 128);
  l.kT = 0;
  l.v = round64(o.Sk * o.kt.es());
  l.kv = round64(l.v + chunks * o.dv * o.v.es());
  l.qT = 0;
  l.o = round64(128 * o.q.es());
  l.out = l.o + round64(o.dv * 4);
  l.unit = round64(l.out + o.dv * o.o.es());
  l.p = 0;
  l.pT = round64(kb * o.v.es());
  l.cols = l.pT + round64(kb * o.v.es());
  l.step = round64(l.cols + kCols * 4);
  l.stage = round64(4 * 128 * std::max({o.q.es(), o.kt.es(), o.v.es()}));
  return l;
}

class Blocks {
 public:
  Blocks(Ctx& x, const AttentionPlan& a)
      : x_(x), a_(a), o_(operands(x, a)), ld_(x, 1), kb_(key_block(x)), l_(layout_of(o_, kb_)) {
    nblk_ = ceil_div(o_.Sk, kb_);
    qtiles_ = ceil_div(o_.Sq, 128);
    const int64_t units = o_.nb * qtiles_;
    for (int64_t u0 = 0; u0 < units; u0 += kGroup) {
      const int64_t g = std::min(kGroup, units - u0);
      for (int64_t j = 0; j < nblk_; ++j)
        for (int64_t k = 0; k < g; ++k) {
          order_.push_back({u0 + k, j});
          prev_.push_back(j == 0 ? -1 : static_cast<int64_t>(order_.size()) - 1 - g);
        }
    }
    steps_ = static_cast<int64_t>(order_.size());
  }

  void run() {
    const std::string name = a_.scores->name + "+attention";
    x_.begin(name);
    Sbuf sb = x_.sbuf(name);
    kv_ = sb.take(l_.kv_sets * l_.kv);
    unit_ = sb.take(kUnitSets * l_.unit);
    step_ = sb.take(kStepSets * l_.step);
    stage_ = sb.take(l_.stage);
    x_.used(sb);
    x_.used_psum();
    void (Blocks::*const stages[])(int64_t) = {&Blocks::scores,      &Blocks::row_max,    &Blocks::running_max, &Blocks::exps,
                                               &Blocks::sums_and_turn, &Blocks::copy_turned, &Blocks::products,  &Blocks::accumulate};
    constexpr int64_t depth = std::size(stages);
    if (steps_ > 0) load(0);
    for (int64_t t = 0; t < steps_ + depth - 1; ++t) {
      if (t + 1 < steps_) load(t + 1);
      for (int64_t k = 0; k < depth; ++k)
        if (t - k >= 0 && t - k < steps_) (this->*stages[k])(t - k);
    }
  }

 private:
  struct Step {
    int64_t u, j, b, q0;
    int32_t sq, kbj;
  };
  Step at(int64_t i) const {
    Step s;
    s.u = order_[static_cast<size_t>(i)].first;
    s.j = order_[static_cast<size_t>(i)].second;
    s.b = s.u / qtiles_;
    s.q0 = (s.u % qtiles_) * 128;
    s.sq = static_cast<int32_t>(std::min<int64_t>(128, o_.Sq - s.q0));
    s.kbj = static_cast<int32_t>(std::min(kb_, o_.Sk - s.j * kb_));
    return s;
  }
  int64_t kv_at(int64_t b) const { return kv_ + (b % l_.kv_sets) * l_.kv; }
  int64_t unit_at(int64_t u) const { return unit_ + (u % kUnitSets) * l_.unit; }
  int64_t prev(int64_t i) const { return prev_[static_cast<size_t>(i)]; }  // the unit's step before i
  int64_t step_at(int64_t i) const { return step_ + (i % kStepSets) * l_.step; }
  AccessPattern col(int64_t i, int k) const { return on_chip(Space::sbuf, DType::f32, 0, at(i).sq, step_at(i) + l_.cols + k * 4, {{1, 1}}); }
  // The running l after step i (block 0 starts it with its own row sums).
  AccessPattern l_run(int64_t i) const { return col(i, at(i).j == 0 ? 3 : 4); }
  // The scale still to apply to the scores (1 when Q carries it).
  double score_scale() const { return q_scale(o_, a_) != 1.0 ? 1.0 : a_.score_ep.scale; }

  // Q^T of a unit (its first block); K^T and V of block j (a batch's first query tile).
  void load(int64_t i) {
    const Step s = at(i);
    if (s.j == 0) {
      const Strided q = batch_slice(o_.qv, s.b);
      ld_.load_kf(o_.q, q.offset + s.q0 * q.strides[0], o_.dh, q.strides[1], s.sq, q.strides[0], unit_at(s.u) + l_.qT, stage_, q_scale(o_, a_));
    }
    if (s.u % qtiles_ != 0) return;
    const Strided kt = batch_slice(o_.ktv, s.b), v = batch_slice(o_.vv, s.b);
    const int64_t k0 = s.j * kb_;
    ld_.load_kf(o_.kt, kt.offset + k0 * kt.strides[1], o_.dh, kt.strides[0], s.kbj, kt.strides[1], kv_at(s.b) + l_.kT + k0 * o_.kt.es(), stage_);
    for (int64_t c0 = k0; c0 < k0 + s.kbj; c0 += 128) {
      const int64_t kc = std::min<int64_t>(128, o_.Sk - c0);
      ld_.load_kf(o_.v, v.offset + c0 * v.strides[0], kc, v.strides[0], o_.dv, v.strides[1], kv_at(s.b) + l_.v + (c0 / 128) * o_.dv * o_.v.es(), stage_);
    }
  }

  AccessPattern scores_psum(int64_t i) const { return ld_.psum_at(i % 4, 0, at(i).sq, at(i).kbj); }
  // The context tiles [sq, dv] fp32 take 512-byte positions of bank 6 (four for dv <= 128).
  AccessPattern context_psum(int64_t i) const {
    const int64_t size = ceil_div(o_.dv * 4, 512) * 512, positions = std::max<int64_t>(1, ld_.bank / size);
    return ld_.psum_at(6, (i % positions) * size, at(i).sq, static_cast<int32_t>(o_.dv));
  }
  AccessPattern probs(int64_t i) const { return on_chip(Space::sbuf, o_.v.dtype, 0, at(i).sq, step_at(i) + l_.p, {{at(i).kbj, 1}}); }
  AccessPattern running_out(int64_t i) const {
    return on_chip(Space::sbuf, DType::f32, 0, at(i).sq, unit_at(at(i).u) + l_.o, {{static_cast<int32_t>(o_.dv), 1}});
  }

  // 1. S = Q K^T for the block (tensor engine).
  void scores(int64_t i) {
    const Step s = at(i);
    const int32_t dh = static_cast<int32_t>(o_.dh);
    x_.matmul_step(scores_psum(i), on_chip(Space::sbuf, o_.q.dtype, 0, dh, unit_at(s.u) + l_.qT, {{s.sq, 1}}),
                   on_chip(Space::sbuf, o_.kt.dtype, 0, dh, kv_at(s.b) + l_.kT + s.j * kb_ * o_.kt.es(), {{s.kbj, 1}}), true, true);
  }
  // 2. The block's row maxima, negated: nb (unscaled).
  void row_max(int64_t i) { x_.reduce(col(i, 0), scores_psum(i), Alu::max, true); }
  // 3. The running n = min(n_prev, s nb) and its negation (two independent ops).
  void running_max(int64_t i) {
    const double sc = score_scale();
    if (at(i).j == 0) {
      x_.tensor_scalar(col(i, 1), col(i, 0), Alu::multiply, sc);
      x_.tensor_scalar(col(i, 6), col(i, 0), Alu::multiply, -sc);
      return;
    }
    x_.tensor_scalar_with(col(i, 1), col(i, 0), Alu::multiply, AccessPattern{}, sc, Alu::min, col(prev(i), 1), 0.0);
    x_.tensor_scalar_with(col(i, 6), col(i, 0), Alu::multiply, AccessPattern{}, -sc, Alu::max, col(prev(i), 6), 0.0);
  }
  // 4. P = exp(s S + n) with its row sums r, and a = exp(n - n_prev) (scalar engine).
  void exps(int64_t i) {
    x_.activation(probs(i), scores_psum(i), Func::exp, score_scale(), col(i, 1), 0.0, col(i, 3));
    if (at(i).j > 0) x_.activation(col(i, 2), col(i, 1), Func::exp, 1.0, col(prev(i), 6));
  }
  // O_prev a goes in stage 5, away from the add of stage 8 that depends on it, when the unit's
  // previous step's stage 8 comes before this step's stage 5: kGroup or more steps apart (a smaller
  // last group rescales in stage 8).
  bool early_rescale(int64_t i) const { return i - prev(i) >= kGroup; }
  // 5. l = l_prev a + r and O_prev a (vector); P^T per 128 keys into PSUM (tensor engine).
  void sums_and_turn(int64_t i) {
    const Step s = at(i);
    if (s.j > 0) {
      x_.tensor_scalar(col(i, 4), l_run(prev(i)), Alu::multiply, col(i, 2), Alu::add, col(i, 3));
      if (early_rescale(i)) x_.tensor_scalar(running_out(i), running_out(i), Alu::multiply, col(i, 2), Alu::bypass, AccessPattern{});
    }
    const int64_t pes = o_.v.es();
    for (int64_t c = 0, chunks = ceil_div(s.kbj, 128); c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.transpose(ld_.psum_at(4 + i % 2, c * 512, kc, s.sq), on_chip(Space::sbuf, o_.v.dtype, 0, s.sq, step_at(i) + l_.p + c * 128 * pes, {{kc, 1}}));
    }
  }
  // 6. P^T out of PSUM (scalar engine: the vector engine has the maxima and the running output);
  // after the last block, 1 / l (times the context's scale).
  void copy_turned(int64_t i) {
    const Step s = at(i);
    const int64_t pes = o_.v.es();
    for (int64_t c = 0, chunks = ceil_div(s.kbj, 128); c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.activation(on_chip(Space::sbuf, o_.v.dtype, 0, kc, step_at(i) + l_.pT + c * 128 * pes, {{s.sq, 1}}), ld_.psum_at(4 + i % 2, c * 512, kc, s.sq),
                    Func::identity);
    }
    if (s.j == nblk_ - 1) x_.activation(col(i, 5), l_run(i), Func::reciprocal, 1.0);
  }
  // 7. C = P @ V over the block's 128-key chunks (tensor engine).
  void products(int64_t i) {
    const Step s = at(i);
    const int64_t pes = o_.v.es(), chunks = ceil_div(s.kbj, 128), chunk0 = s.j * kb_ / 128;
    const int32_t dv = static_cast<int32_t>(o_.dv);
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.matmul_step(context_psum(i), on_chip(Space::sbuf, o_.v.dtype, 0, kc, step_at(i) + l_.pT + c * 128 * pes, {{s.sq, 1}}),
                     on_chip(Space::sbuf, o_.v.dtype, 0, kc, kv_at(s.b) + l_.v + (chunk0 + c) * o_.dv * pes, {{dv, 1}}), c == 0, c == chunks - 1);
    }
  }
  // 8. O = O_prev a + C (vector); after the last block the output tile O / l, stored.
  void accumulate(int64_t i) {
    const Step s = at(i);
    const AccessPattern O = running_out(i);
    if (s.j > 0 && !early_rescale(i)) x_.tensor_scalar(O, O, Alu::multiply, col(i, 2), Alu::bypass, AccessPattern{});
    if (s.j == 0) x_.copy(O, context_psum(i));
    else x_.tensor_tensor(Alu::add, O, O, context_psum(i));
    if (s.j != nblk_ - 1) return;
    const int32_t dv = static_cast<int32_t>(o_.dv);
    const AccessPattern out = on_chip(Space::sbuf, o_.o.dtype, 0, s.sq, unit_at(s.u) + l_.out, {{dv, 1}});
    const double cs = a_.context_ep.scale;
    x_.tensor_scalar_with(out, O, Alu::multiply, on_chip(Space::sbuf, DType::f32, 0, s.sq, step_at(i) + l_.cols + 5 * 4, {{1, 1}}), 0.0,
                          cs != 1.0 ? Alu::multiply : Alu::bypass, AccessPattern{}, cs);
    const Strided ov = batch_slice(o_.ov, s.b);
    x_.em.dma(hbm_ap(o_.o, ov.offset + s.q0 * ov.strides[0], s.sq, ov.strides[0], {{dv, static_cast<int32_t>(ov.strides[1])}}), out,
              Emitter::DmaClass::spread_store);
  }

  Ctx& x_;
  const AttentionPlan& a_;
  Operands o_;
  Loader ld_;
  int64_t kb_;
  Layout l_;
  int64_t nblk_ = 1, qtiles_ = 1, steps_ = 0;
  std::vector<std::pair<int64_t, int64_t>> order_;  // steps: (unit, key block)
  std::vector<int64_t> prev_;
  int64_t kv_ = 0, unit_ = 0, step_ = 0, stage_ = 0;
};

}  // namespace

Status blocks_fit(Ctx& x, const AttentionPlan& a, const Operands& o) {
  if (a.score_ep.bias || a.cond)
    return Status::fail("a mask on keys beyond one PSUM bank (" + std::to_string(o.Sk) + " keys): the key-block kernel takes unmasked attention only");
  const int64_t need = layout_of(o, key_block(x)).total() + 1024;
  if (need > x.cfg.sbuf_partition_bytes)
    return Status::fail("SBUF too small for two batches' K and V over " + std::to_string(o.Sk) + " keys (" + std::to_string(need) +
                        " bytes per partition)");
  return {};
}

Status blocks(Ctx& x, const AttentionPlan& a) {
  Blocks(x, a).run();
  return {};
}

}  // namespace tessera::neuroncore::attn
