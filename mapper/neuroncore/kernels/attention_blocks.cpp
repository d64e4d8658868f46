// Fused attention over key ranges longer than one block of scores (kernels.hpp; attention.cpp
// takes the keys that fit one PSUM bank): the keys in blocks of 512 (a bank of fp32 scores), the
// softmax computed online (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax";
// the FlashAttention recurrence, Dao et al. 2022). Per unit (batch, 128-row query tile) and key
// block j, with n the row maxima negated and scaled (the exp's bias) and s the scores' scale:
//   S_j  PSUM [sq, kb] = (Q^T [dh, sq])^T @ K^T_j [dh, kb]              (tensor engine)
//   (masked: X_j SBUF fp32 = s S_j + M_j, then where(cond, X_j, fill); the steps below read X_j
//   with scale 1)
//   n_j  = min(n_{j-1}, -s rowmax(S_j)),  a_j = exp(n_j - n_{j-1})      (vector; scalar exp)
//        (with -n_j kept beside n_j, so that a_j is one activation with -n_{j-1} as its bias)
//   P_j  SBUF [sq, kb] = exp(s S_j + n_j), row sums r_j                 (scalar engine, from PSUM)
//   l_j  = l_{j-1} a_j + r_j                                            (vector, [sq, 1])
//   P_j^T per 128 keys (tensor engine transpose), C_j PSUM [sq, dv] = P_j @ V_j
//   O_j  SBUF fp32 [sq, dv] = O_{j-1} a_j + C_j                          (vector)
// and the unit's output O_last / l_last, stored. The scores never leave PSUM and SBUF. K^T and V
// stay in SBUF for all of a batch's query tiles (loaded block by block where first used), and once
// for all the heads that read the same (K and V broadcast over heads: grouped-query attention).
// A constant mask (or masked_fill condition) is read at compile time: a block whose every score
// it sets to -1e30 or below (-inf, finfo.min: a causal mask's upper triangle) is skipped -- exact,
// its probabilities are 0, when every query row of the unit keeps a score elsewhere; a block it
// leaves unchanged runs unmasked.
// A unit's blocks are one dependent chain (the running maxima, sums and output), so kGroup units
// run side by side: the steps go block by block over the group's units -- (u0, 0), (u1, 0), ...,
// (u0, 1), ... -- and are software-pipelined with one dependent link per stage, so that every
// consumer sits a whole iteration of other steps' work after its producer in its engine's in-order
// stream (a dependency right behind its producer idles the engine for the hand-off gap,
// isa.dependent_gap). PSUM: scores in banks 0-3, P^T in 4-5, the context in bank 6 (four tiles for
// dv <= 128), the loads' transposes in 7.
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "mapper/neuroncore/kernels/attention_parts.hpp"

namespace tessera::neuroncore::attn {

using graph::Strided;

namespace {

constexpr int64_t kGroup = 4;                 // units whose block chains interleave
constexpr int64_t kStepSets = 3 * kGroup;      // SBUF sets of a step's tiles and columns
constexpr int64_t kUnitSets = 2 * kGroup;      // SBUF sets of a unit's Q^T, running values and output
constexpr int64_t kStepCols = 4;               // per step: nb (the block's -rowmax), a, r, 1 / l
constexpr int64_t kUnitCols = 9;               // per unit: n, -n, l, each three times (by step count mod 3)
constexpr double kDead = -1e30;                // a masked score at or below this contributes exactly 0

enum class Kind : uint8_t { plain, masked, dead };

struct Step {
  int64_t u = 0, j = 0, b = 0, q0 = 0;
  int32_t sq = 0, kbj = 0;
  int64_t prev = -1;      // the unit's step before (-1: its first)
  int64_t k = 0;          // the unit's k-th step (its running values rotate over three copies)
  bool last = false;      // the unit's last step
  bool load_kv = false;   // the first step reading its K and V's block j: loads it
  bool mask = false, where = false;  // the block's mask tile is added / its condition applied
};

// A constant's value at logical (batch index, row, column) of [batch..., Sq, Sk] (numpy
// broadcasting: its shape aligned right, size-1 dims repeated).
class Broadcast {
 public:
  Broadcast(const Tensor& t, const Shape& batch, int64_t rows, int64_t cols) : v_(t.cast(DType::f64).to_f64()) {
    Shape full = batch;
    full.push_back(rows);
    full.push_back(cols);
    const Shape& s = t.shape();
    std::vector<int64_t> own(s.size(), 1);
    for (size_t d = s.size(); d-- > 1;) own[d - 1] = own[d] * s[d];
    st_.assign(full.size(), 0);
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] != 1) st_[full.size() - s.size() + d] = own[d];
    batch_ = batch;
  }
  // Element offset of batch index b's [rows, cols] slice.
  int64_t batch_offset(int64_t b) const {
    int64_t off = 0;
    for (size_t d = batch_.size(); d-- > 0;) {
      off += (b % batch_[d]) * st_[d];
      b /= batch_[d];
    }
    return off;
  }
  double at(int64_t off, int64_t r, int64_t c) const { return v_[static_cast<size_t>(off + r * st_[st_.size() - 2] + c * st_.back())]; }

 private:
  std::vector<double> v_;
  std::vector<int64_t> st_;
  Shape batch_;
};

class Blocks {
 public:
  Blocks(Ctx& x, const AttentionPlan& a) : x_(x), a_(a), o_(operands(x, a)), ld_(x, 1), kb_(key_block(x)) {
    nblk_ = ceil_div(o_.Sk, kb_);
    qtiles_ = ceil_div(o_.Sq, 128);
    masked_ = a_.score_ep.bias.has_value() || a_.cond.has_value();
    classify();
    plan_steps();
    layout();
  }

  // SBUF bytes per partition the kernel takes.
  int64_t bytes() const { return kv_sets_ * kv_bytes_ + kUnitSets * unit_bytes_ + kStepSets * step_bytes_ + stage_bytes_ + 64; }

  void run() {
    const std::string name = a_.scores->name + "+attention";
    x_.begin(name);
    Sbuf sb = x_.sbuf(name);
    kv_ = sb.take(kv_sets_ * kv_bytes_);
    unit_ = sb.take(kUnitSets * unit_bytes_);
    step_ = sb.take(kStepSets * step_bytes_);
    stage_ = sb.take(stage_bytes_);
    fill_ = sb.take(64);
    x_.used(sb);
    x_.used_psum();
    if (a_.cond) x_.memset(on_chip(Space::sbuf, DType::f32, 0, 128, fill_, {{1, 1}}), a_.fill);
    const int64_t steps = static_cast<int64_t>(steps_.size()), depth = static_cast<int64_t>(stages_.size());
    if (steps > 0) load(0);
    for (int64_t t = 0; t < steps + depth - 1; ++t) {
      if (t + 1 < steps) load(t + 1);
      for (int64_t k = 0; k < depth; ++k)
        if (t - k >= 0 && t - k < steps) (this->*stages_[static_cast<size_t>(k)])(t - k);
    }
  }

 private:
  using Stage = void (Blocks::*)(int64_t);

  // Kinds of the (unit, block) tiles from a constant mask and condition; all masked when the mask
  // is computed, all plain without either.
  void classify() {
    const int64_t units = o_.nb * qtiles_;
    kind_.assign(static_cast<size_t>(units * nblk_), masked_ ? Kind::masked : Kind::plain);
    if (!masked_) return;
    const Tensor* md = a_.score_ep.bias ? x_.g.value(a_.score_ep.bias_value).data ? &*x_.g.value(a_.score_ep.bias_value).data : nullptr : nullptr;
    if (a_.score_ep.bias && !md) return;  // a computed mask: every tile masked
    const Tensor* cd = a_.where ? (x_.g.value(a_.where->inputs[0]).data ? &*x_.g.value(a_.where->inputs[0]).data : nullptr) : nullptr;
    if (a_.cond && !cd) return;
    std::optional<Broadcast> mb, cb;
    if (md) mb.emplace(*md, o_.batch, o_.Sq, o_.Sk);
    if (cd) cb.emplace(*cd, o_.batch, o_.Sq, o_.Sk);
    const bool fill_dead = a_.fill <= kDead;
    // Per distinct (mask, condition) batch slice: the kinds of its tiles (heads share a mask).
    std::map<std::pair<int64_t, int64_t>, std::vector<Kind>> seen;
    for (int64_t b = 0; b < o_.nb; ++b) {
      const int64_t mo = mb ? mb->batch_offset(b) : 0, co = cb ? cb->batch_offset(b) : 0;
      auto it = seen.find({mo, co});
      if (it == seen.end()) {
        std::vector<Kind> kinds(static_cast<size_t>(qtiles_ * nblk_));
        for (int64_t qt = 0; qt < qtiles_; ++qt) {
          const int64_t q0 = qt * 128, sq = std::min<int64_t>(128, o_.Sq - q0);
          std::vector<bool> row_live(static_cast<size_t>(sq), false);
          for (int64_t j = 0; j < nblk_; ++j) {
            const int64_t k0 = j * kb_, kbj = std::min(kb_, o_.Sk - k0);
            bool all_dead = true, all_plain = true;
            for (int64_t r = 0; r < sq; ++r)
              for (int64_t c = 0; c < kbj; ++c) {
                const bool filled = cb && ((cb->at(co, q0 + r, k0 + c) != 0) != a_.keep_when);
                const double m = mb ? mb->at(mo, q0 + r, k0 + c) : 0.0;
                const bool dead = filled ? fill_dead : m <= kDead;
                all_dead = all_dead && dead;
                all_plain = all_plain && !filled && m == 0.0;
                if (!dead) row_live[static_cast<size_t>(r)] = true;
              }
            kinds[static_cast<size_t>(qt * nblk_ + j)] = all_dead ? Kind::dead : all_plain ? Kind::plain : Kind::masked;
          }
          // Skipping is exact only when every row keeps a score somewhere.
          if (!std::all_of(row_live.begin(), row_live.end(), [](bool v) { return v; }))
            for (int64_t j = 0; j < nblk_; ++j)
              if (kinds[static_cast<size_t>(qt * nblk_ + j)] == Kind::dead) kinds[static_cast<size_t>(qt * nblk_ + j)] = Kind::masked;
        }
        it = seen.emplace(std::make_pair(mo, co), std::move(kinds)).first;
      }
      std::copy(it->second.begin(), it->second.end(), kind_.begin() + b * qtiles_ * nblk_);
    }
  }

  // The steps in order, their units' chains, and the K/V sets by the pipeline's reach.
  void plan_steps() {
    const int64_t units = o_.nb * qtiles_;
    // Batches reading the same K and V (broadcast over heads: grouped-query attention) share them.
    std::map<std::pair<int64_t, int64_t>, int64_t> kv_of;
    kv_id_.assign(static_cast<size_t>(o_.nb), 0);
    for (int64_t b = 0; b < o_.nb; ++b)
      kv_id_[static_cast<size_t>(b)] = kv_of.emplace(std::make_pair(batch_slice(o_.ktv, b).offset, batch_slice(o_.vv, b).offset),
                                                     static_cast<int64_t>(kv_of.size())).first->second;
    const int64_t kvs = static_cast<int64_t>(kv_of.size());
    std::vector<int64_t> last(static_cast<size_t>(units), -1), count(static_cast<size_t>(units), 0);
    std::vector<bool> loaded(static_cast<size_t>(kvs * nblk_), false);
    for (int64_t u0 = 0; u0 < units; u0 += kGroup) {
      const int64_t g = std::min(kGroup, units - u0);
      for (int64_t j = 0; j < nblk_; ++j)
        for (int64_t u = u0; u < u0 + g; ++u) {
          const Kind kd = kind_[static_cast<size_t>(u * nblk_ + j)];
          if (kd == Kind::dead) continue;
          Step s;
          s.u = u;
          s.j = j;
          s.b = u / qtiles_;
          s.q0 = (u % qtiles_) * 128;
          s.sq = static_cast<int32_t>(std::min<int64_t>(128, o_.Sq - s.q0));
          s.kbj = static_cast<int32_t>(std::min(kb_, o_.Sk - j * kb_));
          s.prev = last[static_cast<size_t>(u)];
          s.k = count[static_cast<size_t>(u)]++;
          const size_t kj = static_cast<size_t>(kv_id_[static_cast<size_t>(s.b)] * nblk_ + j);
          s.load_kv = !loaded[kj];
          loaded[kj] = true;
          s.mask = kd == Kind::masked && a_.score_ep.bias.has_value();
          s.where = kd == Kind::masked && a_.cond.has_value();
          last[static_cast<size_t>(u)] = static_cast<int64_t>(steps_.size());
          steps_.push_back(s);
        }
    }
    for (int64_t l : last)
      if (l >= 0) steps_[static_cast<size_t>(l)].last = true;
    if (masked_)
      stages_ = {&Blocks::scores, &Blocks::evacuate,    &Blocks::add_mask, &Blocks::select,   &Blocks::row_max,   &Blocks::running_max,
                 &Blocks::exps,   &Blocks::sums_and_turn, &Blocks::copy_turned, &Blocks::products, &Blocks::accumulate};
    else
      stages_ = {&Blocks::scores, &Blocks::row_max, &Blocks::running_max, &Blocks::exps, &Blocks::sums_and_turn, &Blocks::copy_turned,
                 &Blocks::products, &Blocks::accumulate};
    // A batch's K and V (shared by the batches reading the same) take a set from the iteration its
    // first step's loads are emitted (one before the step) to the one its last step's products are:
    // sets are reused only after that, so a load is never emitted before a read of the K and V it
    // replaces (the scoreboard orders by program order).
    const int64_t reach = static_cast<int64_t>(stages_.size()) - 2;  // products' stage
    std::vector<std::pair<int64_t, int64_t>> span(static_cast<size_t>(kvs), {-2, -1});
    for (size_t i = 0; i < steps_.size(); ++i) {
      auto& sp = span[static_cast<size_t>(kv_id_[static_cast<size_t>(steps_[i].b)])];
      if (sp.first < -1) sp.first = static_cast<int64_t>(i) - 1;
      sp.second = static_cast<int64_t>(i) + reach;
    }
    std::vector<int64_t> set_end;  // per set: the iteration of its last read
    kv_set_.assign(static_cast<size_t>(kvs), 0);
    std::vector<int64_t> by_start(static_cast<size_t>(kvs));
    for (int64_t k = 0; k < kvs; ++k) by_start[static_cast<size_t>(k)] = k;
    std::stable_sort(by_start.begin(), by_start.end(), [&](int64_t a, int64_t b) { return span[static_cast<size_t>(a)].first < span[static_cast<size_t>(b)].first; });
    for (int64_t k : by_start) {
      const auto& sp = span[static_cast<size_t>(k)];
      if (sp.first < -1) continue;  // no step reads it (all masked out)
      size_t s = 0;
      while (s < set_end.size() && set_end[s] >= sp.first) ++s;
      if (s == set_end.size()) set_end.push_back(0);
      set_end[s] = sp.second;
      kv_set_[static_cast<size_t>(k)] = static_cast<int64_t>(s);
    }
    kv_sets_ = std::max<int64_t>(1, static_cast<int64_t>(set_end.size()));
  }

  void layout() {
    const int64_t chunks = ceil_div(o_.Sk, 128);
    kT_ = 0;
    v_ = round64(o_.Sk * o_.kt.es());
    kv_bytes_ = round64(v_ + chunks * o_.dv * o_.v.es());
    qT_ = 0;
    o_off_ = round64(128 * o_.q.es());
    out_ = o_off_ + round64(o_.dv * 4);
    ucols_ = out_ + round64(o_.dv * o_.o.es());
    unit_bytes_ = round64(ucols_ + kUnitCols * 4);
    const int64_t kb = std::min(kb_, o_.Sk);  // the widest block
    p_ = 0;
    pT_ = round64(kb * o_.v.es());
    x_off_ = pT_ + round64(ceil_div(kb, 128) * 128 * o_.v.es());  // P^T: [kc, sq <= 128] per chunk of 128 keys
    m_ = x_off_ + (masked_ ? round64(kb * 4) : 0);
    c_ = m_ + (a_.score_ep.bias ? round64(kb * a_.score_ep.bias->es()) : 0);
    scols_ = c_ + (a_.cond ? round64(kb * a_.cond->es()) : 0);
    step_bytes_ = round64(scols_ + kStepCols * 4);
    stage_bytes_ = round64(4 * 128 * std::max({o_.q.es(), o_.kt.es(), o_.v.es()}));
  }

  const Step& at(int64_t i) const { return steps_[static_cast<size_t>(i)]; }
  int64_t kv_at(int64_t b) const { return kv_ + kv_set_[static_cast<size_t>(kv_id_[static_cast<size_t>(b)])] * kv_bytes_; }
  int64_t unit_at(int64_t u) const { return unit_ + (u % kUnitSets) * unit_bytes_; }
  int64_t step_at(int64_t i) const { return step_ + (i % kStepSets) * step_bytes_; }
  AccessPattern column(int64_t off, int32_t parts) const { return on_chip(Space::sbuf, DType::f32, 0, parts, off, {{1, 1}}); }
  // Step i's own columns: 0 nb, 1 a, 2 r, 3 1 / l.
  AccessPattern scol(int64_t i, int k) const { return column(step_at(i) + scols_ + k * 4, at(i).sq); }
  // The unit's running values after step i: 0 n, 1 -n, 2 l, in three rotating copies (by the unit's
  // step count): a step may follow the unit's previous one directly (the other units of its group
  // skip the block), and that one's reads of its predecessor's values come a stage after this
  // step's writes in the same iteration, so two copies would not do.
  AccessPattern ucol(int64_t i, int k) const { return column(unit_at(at(i).u) + ucols_ + (k * 3 + at(i).k % 3) * 4, at(i).sq); }
  // The scale still to apply to the scores (1 when Q carries it).
  double score_scale() const { return q_scale(o_, a_) != 1.0 ? 1.0 : a_.score_ep.scale; }
  AccessPattern scores_psum(int64_t i) const { return ld_.psum_at(i % 4, 0, at(i).sq, at(i).kbj); }
  AccessPattern masked_scores(int64_t i) const { return on_chip(Space::sbuf, DType::f32, 0, at(i).sq, step_at(i) + x_off_, {{at(i).kbj, 1}}); }
  // What the softmax reads, and the scale it applies: the masked scores (scaled already) or S.
  AccessPattern src(int64_t i) const { return masked_ ? masked_scores(i) : scores_psum(i); }
  double src_scale() const { return masked_ ? 1.0 : score_scale(); }
  // The context tiles [sq, dv] fp32 take 512-byte positions of bank 6 (four for dv <= 128, two up
  // to 256: blocks_fit).
  AccessPattern context_psum(int64_t i) const {
    const int64_t size = ceil_div(o_.dv * 4, 512) * 512, positions = std::max<int64_t>(1, ld_.bank / size);
    return ld_.psum_at(6, (i % positions) * size, at(i).sq, static_cast<int32_t>(o_.dv));
  }
  AccessPattern probs(int64_t i) const { return on_chip(Space::sbuf, o_.v.dtype, 0, at(i).sq, step_at(i) + p_, {{at(i).kbj, 1}}); }
  AccessPattern running_out(int64_t i) const {
    return on_chip(Space::sbuf, DType::f32, 0, at(i).sq, unit_at(at(i).u) + o_off_, {{static_cast<int32_t>(o_.dv), 1}});
  }

  // Q^T of a unit (its first step), K^T and V of a block (where first read), the step's mask and
  // condition tiles.
  void load(int64_t i) {
    const Step& s = at(i);
    if (s.prev < 0) {
      const Strided q = batch_slice(o_.qv, s.b);
      ld_.load_kf(o_.q, q.offset + s.q0 * q.strides[0], o_.dh, q.strides[1], s.sq, q.strides[0], unit_at(s.u) + qT_, stage_, q_scale(o_, a_));
    }
    const int64_t k0 = s.j * kb_;
    if (s.load_kv) {
      const Strided kt = batch_slice(o_.ktv, s.b), v = batch_slice(o_.vv, s.b);
      ld_.load_kf(o_.kt, kt.offset + k0 * kt.strides[1], o_.dh, kt.strides[0], s.kbj, kt.strides[1], kv_at(s.b) + kT_ + k0 * o_.kt.es(), stage_);
      for (int64_t c0 = k0; c0 < k0 + s.kbj; c0 += 128) {
        const int64_t kc = std::min<int64_t>(128, o_.Sk - c0);
        ld_.load_kf(o_.v, v.offset + c0 * v.strides[0], kc, v.strides[0], o_.dv, v.strides[1], kv_at(s.b) + v_ + (c0 / 128) * o_.dv * o_.v.es(), stage_);
      }
    }
    auto tile = [&](const TensorRef& r, const Strided& view, int64_t off) {
      const Strided m = batch_slice(view, s.b);
      x_.em.dma(on_chip(Space::sbuf, r.dtype, 0, s.sq, step_at(i) + off, {{s.kbj, 1}}),
                hbm_ap(r, m.offset + s.q0 * m.strides[0] + k0 * m.strides[1], s.sq, m.strides[0], {{s.kbj, static_cast<int32_t>(m.strides[1])}}),
                Emitter::DmaClass::spread);
    };
    if (s.mask) tile(*a_.score_ep.bias, o_.mask, m_);
    if (s.where) tile(*a_.cond, o_.cond, c_);
  }

  // 1. S = Q K^T for the block (tensor engine).
  void scores(int64_t i) {
    const Step& s = at(i);
    const int32_t dh = static_cast<int32_t>(o_.dh);
    x_.matmul_step(scores_psum(i), on_chip(Space::sbuf, o_.q.dtype, 0, dh, unit_at(s.u) + qT_, {{s.sq, 1}}),
                   on_chip(Space::sbuf, o_.kt.dtype, 0, dh, kv_at(s.b) + kT_ + s.j * kb_ * o_.kt.es(), {{s.kbj, 1}}), true, true);
  }
  // Masked kernels. 1a. X = s S (scalar engine), or S + M when the scale is 1 (vector).
  void evacuate(int64_t i) {
    const Step& s = at(i);
    if (s.mask && score_scale() == 1.0)
      x_.tensor_tensor(Alu::add, masked_scores(i), scores_psum(i), on_chip(Space::sbuf, a_.score_ep.bias->dtype, 0, s.sq, step_at(i) + m_, {{s.kbj, 1}}));
    else
      x_.activation(masked_scores(i), scores_psum(i), Func::identity, score_scale());
  }
  // 1b. X += M (after a scale).
  void add_mask(int64_t i) {
    const Step& s = at(i);
    if (!s.mask || score_scale() == 1.0) return;
    x_.tensor_tensor(Alu::add, masked_scores(i), masked_scores(i), on_chip(Space::sbuf, a_.score_ep.bias->dtype, 0, s.sq, step_at(i) + m_, {{s.kbj, 1}}));
  }
  // 1c. X = cond ? X : fill (or the other way round).
  void select(int64_t i) {
    const Step& s = at(i);
    if (!s.where) return;
    const AccessPattern X = masked_scores(i), fill = on_chip(Space::sbuf, DType::f32, 0, s.sq, fill_, {{s.kbj, 0}});
    Instr sel;
    sel.op = Op::select;
    sel.dst = X;
    sel.src0 = on_chip(Space::sbuf, a_.cond->dtype, 0, s.sq, step_at(i) + c_, {{s.kbj, 1}});
    sel.src1 = a_.keep_when ? X : fill;
    sel.aux = a_.keep_when ? fill : X;
    x_.em.emit(sel, Lane::vector);
  }
  // 2. The block's row maxima, negated: nb (in the softmax's source units).
  void row_max(int64_t i) { x_.reduce(scol(i, 0), src(i), Alu::max, true); }
  // 3. The running n = min(n_prev, scale nb) and its negation (two independent ops).
  void running_max(int64_t i) {
    const Step& s = at(i);
    const double sc = src_scale();
    if (s.prev < 0) {
      x_.tensor_scalar(ucol(i, 0), scol(i, 0), Alu::multiply, sc);
      x_.tensor_scalar(ucol(i, 1), scol(i, 0), Alu::multiply, -sc);
      return;
    }
    x_.tensor_scalar_with(ucol(i, 0), scol(i, 0), Alu::multiply, AccessPattern{}, sc, Alu::min, ucol(s.prev, 0), 0.0);
    x_.tensor_scalar_with(ucol(i, 1), scol(i, 0), Alu::multiply, AccessPattern{}, -sc, Alu::max, ucol(s.prev, 1), 0.0);
  }
  // 4. P = exp(scale src + n) with its row sums r, and a = exp(n - n_prev) (scalar engine).
  void exps(int64_t i) {
    x_.activation(probs(i), src(i), Func::exp, src_scale(), ucol(i, 0), 0.0, scol(i, 2));
    if (at(i).prev >= 0) x_.activation(scol(i, 1), ucol(i, 0), Func::exp, 1.0, ucol(at(i).prev, 1));
  }
  // O_prev a goes in stage 5, away from the add of the accumulate stage that depends on it, when the
  // unit's previous accumulate comes before this step's stage 5: kGroup or more steps apart (else it
  // goes with the add).
  bool early_rescale(int64_t i) const { return at(i).prev >= 0 && i - at(i).prev >= kGroup; }
  // 5. l = l_prev a + r and O_prev a (vector); P^T per 128 keys into PSUM (tensor engine).
  void sums_and_turn(int64_t i) {
    const Step& s = at(i);
    if (s.prev < 0) {
      x_.copy(ucol(i, 2), scol(i, 2));
    } else {
      x_.tensor_scalar(ucol(i, 2), ucol(s.prev, 2), Alu::multiply, scol(i, 1), Alu::add, scol(i, 2));
      if (early_rescale(i)) x_.tensor_scalar(running_out(i), running_out(i), Alu::multiply, scol(i, 1), Alu::bypass, AccessPattern{});
    }
    const int64_t pes = o_.v.es();
    for (int64_t c = 0, chunks = ceil_div(s.kbj, 128); c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.transpose(ld_.psum_at(4 + i % 2, c * 512, kc, s.sq), on_chip(Space::sbuf, o_.v.dtype, 0, s.sq, step_at(i) + p_ + c * 128 * pes, {{kc, 1}}));
    }
  }
  // 6. P^T out of PSUM (scalar engine: the vector engine has the maxima and the running output);
  // after the unit's last step, 1 / l.
  void copy_turned(int64_t i) {
    const Step& s = at(i);
    const int64_t pes = o_.v.es();
    for (int64_t c = 0, chunks = ceil_div(s.kbj, 128); c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.activation(on_chip(Space::sbuf, o_.v.dtype, 0, kc, step_at(i) + pT_ + c * 128 * pes, {{s.sq, 1}}), ld_.psum_at(4 + i % 2, c * 512, kc, s.sq),
                    Func::identity);
    }
    if (s.last) x_.activation(scol(i, 3), ucol(i, 2), Func::reciprocal);
  }
  // 7. C = P @ V over the block's 128-key chunks (tensor engine).
  void products(int64_t i) {
    const Step& s = at(i);
    const int64_t pes = o_.v.es(), chunks = ceil_div(s.kbj, 128), chunk0 = s.j * kb_ / 128;
    const int32_t dv = static_cast<int32_t>(o_.dv);
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, s.kbj - c * 128));
      x_.matmul_step(context_psum(i), on_chip(Space::sbuf, o_.v.dtype, 0, kc, step_at(i) + pT_ + c * 128 * pes, {{s.sq, 1}}),
                     on_chip(Space::sbuf, o_.v.dtype, 0, kc, kv_at(s.b) + v_ + (chunk0 + c) * o_.dv * pes, {{dv, 1}}), c == 0, c == chunks - 1);
    }
  }
  // 8. O = O_prev a + C (vector); after the unit's last step the output tile O / l, stored.
  void accumulate(int64_t i) {
    const Step& s = at(i);
    const AccessPattern O = running_out(i);
    if (s.prev >= 0 && !early_rescale(i)) x_.tensor_scalar(O, O, Alu::multiply, scol(i, 1), Alu::bypass, AccessPattern{});
    if (s.prev < 0) x_.copy(O, context_psum(i));
    else x_.tensor_tensor(Alu::add, O, O, context_psum(i));
    if (!s.last) return;
    const int32_t dv = static_cast<int32_t>(o_.dv);
    const AccessPattern out = on_chip(Space::sbuf, o_.o.dtype, 0, s.sq, unit_at(s.u) + out_, {{dv, 1}});
    const double cs = a_.context_ep.scale;
    x_.tensor_scalar_with(out, O, Alu::multiply, scol(i, 3), 0.0, cs != 1.0 ? Alu::multiply : Alu::bypass, AccessPattern{}, cs);
    store_out(x_, o_, s.b, s.q0, s.sq, out);
  }

  Ctx& x_;
  const AttentionPlan& a_;
  Operands o_;
  Loader ld_;
  int64_t kb_;
  int64_t nblk_ = 1, qtiles_ = 1;
  bool masked_ = false;
  std::vector<Kind> kind_;  // per (unit, block)
  std::vector<Step> steps_;
  std::vector<Stage> stages_;
  std::vector<int64_t> kv_id_;   // per batch: its K and V (batches reading the same share them)
  std::vector<int64_t> kv_set_;  // per K and V: its SBUF set
  int64_t kv_sets_ = 1;
  // Offsets within a set (bytes per partition), set sizes, and where the sets start.
  int64_t kT_ = 0, v_ = 0, kv_bytes_ = 0;
  int64_t qT_ = 0, o_off_ = 0, out_ = 0, ucols_ = 0, unit_bytes_ = 0;
  int64_t p_ = 0, pT_ = 0, x_off_ = 0, m_ = 0, c_ = 0, scols_ = 0, step_bytes_ = 0, stage_bytes_ = 0;
  int64_t kv_ = 0, unit_ = 0, step_ = 0, stage_ = 0, fill_ = 0;
};

}  // namespace

Status blocks_fit(Ctx& x, const AttentionPlan& a, const Operands& o) {
  // Consecutive steps' context tiles take different places in bank 6: the accumulate of one is
  // emitted after the next one's products.
  if (ceil_div(o.dv * 4, 512) * 512 * 2 > x.cfg.psum_bank_bytes())
    return Status::fail("a value width of " + std::to_string(o.dv) + ": the key-block kernel keeps two context tiles in a PSUM bank (at most " +
                        std::to_string(x.cfg.psum_bank_bytes() / 8) + ")");
  const int64_t need = Blocks(x, a).bytes() + 1024;
  if (need > x.cfg.sbuf_partition_bytes)
    return Status::fail("SBUF too small for the key-block kernel over " + std::to_string(o.Sk) + " keys (" + std::to_string(need) +
                        " bytes per partition)");
  return {};
}

Status blocks(Ctx& x, const AttentionPlan& a) {
  Blocks(x, a).run();
  return {};
}

}  // namespace tessera::neuroncore::attn
