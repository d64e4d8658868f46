// Fused attention (kernels.hpp): O = softmax(scale * Q @ Kt + mask) @ V as one kernel, per batch
// (head) and 128-row tile of queries, the scores never leaving PSUM and SBUF:
//   scores  PSUM [sq, Sk]  = (Q^T [dh, sq])^T @ Kt [dh, Sk]          (tensor engine, K = dh)
//   masked  SBUF [sq, Sk]  = scale * scores + mask                   (the first matmul's epilogue)
//   P       SBUF [sq, Sk]  = exp(s - max), row sums accumulated      (vector max, scalar exp)
//   P^T     SBUF [kc, sq]  per 128 keys                              (tensor engine transpose)
//   context PSUM [sq, dv]  = sum over key chunks of (P^T)^T @ V      (tensor engine, K = keys)
//   O       SBUF [sq, dv]  = context * (1 / row sum)                 (vector, from PSUM), stored
// The normalisation moves after the second matmul (the sums are per query row), so P is written
// once. Units (batch, query tile) are software-pipelined over three stages (scores, probabilities,
// context) with the next unit's loads ahead of them, in four SBUF slots, PSUM alternating between
// two sets of banks, so one head's softmax runs beside the next heads' matmuls.
#include <algorithm>
#include <cmath>

#include "mapper/neuroncore/kernels/attention_parts.hpp"
#include "mapper/neuroncore/kernels/epilogue.hpp"

namespace tessera::neuroncore {

using graph::Strided;

using attn::Operands;
using attn::round64;

namespace {

constexpr int64_t kSlots = 4;  // SBUF slots (units whose operands are in SBUF at once)

// One slot's buffers (SBUF byte offsets per partition from `at`); `end` where the slot ends.
struct Slot {
  int64_t qT, kT, v, stage, s, p, pT, out, cond, cols, end;
};
Slot slot_layout(int64_t at, int64_t Sk, int64_t dv, int64_t es, bool scores_f32, int64_t cond_es) {
  const int64_t chunks = ceil_div(Sk, 128);
  auto take = [&](int64_t bytes) {
    const int64_t r = at;
    at += bytes;
    return r;
  };
  Slot s;
  s.qT = take(128 * es);                  // Q^T [dh, sq]
  s.kT = take(Sk * es);                   // K^T [dh, Sk]
  s.v = take(chunks * dv * es);           // V [kc, dv] per key chunk
  s.stage = take(4 * 128 * es);           // staging of transposed loads
  s.s = take(scores_f32 ? Sk * 4 : 0);    // masked scores [sq, Sk] fp32
  s.p = take(Sk * es);                    // P [sq, Sk]
  s.pT = take(chunks * 128 * es);         // P^T [kc, sq] per chunk
  s.out = take(dv * 4);                   // O [sq, dv]
  s.cond = take(Sk * cond_es);            // the masked_fill condition [sq, Sk]
  s.cols = take(16);                      // -max, row sum, 1 / sum
  s.end = at;
  return s;
}

class Attention {
 public:
  Attention(Ctx& x, const AttentionPlan& a) : x_(x), a_(a), o_(attn::operands(x, a)), ld_(x) {}

  void run() {
    const std::string name = a_.scores->name + "+attention";
    x_.begin(name);
    Sbuf sb = x_.sbuf(name);
    Epilogue mask_ep;  // scale * scores + mask into SBUF fp32 (only with a mask)
    mask_ep.scale = score_scale();
    mask_ep.bias = a_.score_ep.bias;
    EpilogueEmitter epi(x_, mask_ep, sb, o_.Sk);
    slot_bytes_ = round64(slot_layout(0, o_.Sk, o_.dv, es_in(), mask() || where(), where() ? a_.cond->es() : 0).end);
    slots_ = sb.take(kSlots * slot_bytes_);
    if (where()) {  // the fill value in a column, read with stride 0 along the keys
      fill_ = sb.take(64);
      x_.memset(on_chip(Space::sbuf, DType::f32, 0, 128, fill_, {{1, 1}}), a_.fill);
    }
    x_.used(sb);
    x_.used_psum();
    const int64_t qtiles = ceil_div(o_.Sq, 128);
    const int64_t units = o_.nb * qtiles;
    // Software-pipelined: at step t the loads of unit t + 1, the scores of t, the probabilities of
    // t - 1 and the context of t - 2 -- the engines' in-order streams interleave three units, so
    // one unit's dependent steps wait beside the others' work instead of idling the engines.
    if (units > 0) load(0, qtiles);
    for (int64_t t = 0; t < units + 2; ++t) {
      if (t + 1 < units) load(t + 1, qtiles);
      if (t < units) scores(t, qtiles, epi);
      if (t >= 1 && t - 1 < units) probabilities(t - 1, qtiles);
      if (t >= 2) context(t - 2, qtiles);
    }
  }

 private:
  bool mask() const { return a_.score_ep.bias.has_value(); }
  double q_scale() const { return attn::q_scale(o_, a_); }
  bool where() const { return a_.cond.has_value(); }
  // Bytes per element the slots are sized for: the widest of Q's, K's and V's dtypes.
  int64_t es_in() const { return std::max({o_.q.es(), o_.kt.es(), o_.v.es()}); }

  Slot slot(int64_t u) const {
    return slot_layout(slots_ + (u % kSlots) * slot_bytes_, o_.Sk, o_.dv, es_in(), mask() || where(), where() ? a_.cond->es() : 0);
  }

  AccessPattern psum_at(int64_t bank, int64_t off, int32_t parts, int32_t free) const { return ld_.psum_at(bank, off, parts, free); }
  void load_kf(const TensorRef& r, int64_t elem, int64_t K, int64_t sk, int64_t F, int64_t sf, int64_t dst, int64_t stage, double scale = 1.0) {
    ld_.load_kf(r, elem, K, sk, F, sf, dst, stage, scale);
  }

  // Heads packed in pairs (one query tile per head, dh <= 64, and heads b and b + 1 side by side
  // in Q's and K's contraction axis, as a [S, heads * dh] projection lays them out): the pair's
  // Q^T and K^T load as one [2 dh, F] block -- one transpose and one copy for two heads -- into
  // the even head's slot, the odd head's on partitions 64-127, where its scores' matmul reads
  // them (a contraction of 64 rows may start at partition 64 [A2]).
  bool paired(int64_t b, int64_t qtiles) const {
    if (qtiles != 1 || o_.dh > 64 || o_.nb < 2) return false;
    const int64_t e = b - b % 2;
    if (e + 1 >= o_.nb) return false;
    const Strided q0 = batch_slice(o_.qv, e), q1 = batch_slice(o_.qv, e + 1), k0 = batch_slice(o_.ktv, e), k1 = batch_slice(o_.ktv, e + 1);
    return q1.offset - q0.offset == 64 * q0.strides[1] && k1.offset - k0.offset == 64 * k0.strides[0] && o_.dh == 64;
  }
  void load(int64_t u, int64_t qtiles) {
    const int64_t b = u / qtiles, q0 = (u % qtiles) * 128, sq = std::min<int64_t>(128, o_.Sq - q0);
    const Slot s = slot(u);
    const Strided q = batch_slice(o_.qv, b), kt = batch_slice(o_.ktv, b), v = batch_slice(o_.vv, b);
    const bool pair = paired(b, qtiles);
    if (!pair || b % 2 == 0) {
      const int64_t rows = pair ? 2 * o_.dh : o_.dh;
      // Q^T [dh, sq]: (k, f) = Q(q0 + f, k)
      load_kf(o_.q, q.offset + q0 * q.strides[0], rows, q.strides[1], sq, q.strides[0], s.qT, s.stage, q_scale());
      // K^T [dh, Sk]
      load_kf(o_.kt, kt.offset, rows, kt.strides[0], o_.Sk, kt.strides[1], s.kT, s.stage);
    }
    // V [kc, dv] per chunk of 128 keys
    for (int64_t c0 = 0, c = 0; c0 < o_.Sk; c0 += 128, ++c) {
      const int64_t kc = std::min<int64_t>(128, o_.Sk - c0);
      load_kf(o_.v, v.offset + c0 * v.strides[0], kc, v.strides[0], o_.dv, v.strides[1], s.v + c * o_.dv * o_.v.es(), s.stage);
    }
  }

  struct Unit {
    int64_t b, q0;
    int32_t sq;
    Slot s;
    int64_t set;  // PSUM: scores in bank `set`, context in 2 + set, P^T in 4 + set
  };
  Unit unit(int64_t u, int64_t qtiles) const {
    Unit r;
    r.b = u / qtiles;
    r.q0 = (u % qtiles) * 128;
    r.sq = static_cast<int32_t>(std::min<int64_t>(128, o_.Sq - r.q0));
    r.s = slot(u);
    r.set = u % 2;
    return r;
  }
  AccessPattern col(const Unit& n, int i) const { return on_chip(Space::sbuf, DType::f32, 0, n.sq, n.s.cols + i * 4, {{1, 1}}); }

  // Stage 1: the scores, masked and scaled, and their row maxima (negated, scaled).
  void scores(int64_t u, int64_t qtiles, EpilogueEmitter& epi) {
    const Unit n = unit(u, qtiles);
    const int32_t Sk = static_cast<int32_t>(o_.Sk), dh = static_cast<int32_t>(o_.dh);
    const AccessPattern ps = psum_at(n.set, 0, n.sq, Sk);
    const bool odd = paired(n.b, qtiles) && n.b % 2 == 1;  // Q^T and K^T in the even head's slot, partitions 64-127
    const Slot& at = odd ? slot(u - 1) : n.s;
    const int32_t p0 = odd ? 64 : 0;
    x_.matmul_step(ps, on_chip(Space::sbuf, o_.q.dtype, p0, dh, at.qT, {{n.sq, 1}}), on_chip(Space::sbuf, o_.kt.dtype, p0, dh, at.kT, {{Sk, 1}}), true,
                   true);
    const AccessPattern src = scores_src(n);
    if (mask()) {
      const Strided m = batch_slice(o_.mask, n.b);
      const TileView mt{m.offset, 0, {}};
      epi.run(src, ps, tile_at(mt, m.strides[0], m.strides[1], n.q0, 0, Sk), TileView{}, u);
    }
    if (where()) {  // src = cond ? scores : fill (or the other way round), the scale applied first
      if (!mask()) x_.activation(src, ps, Func::identity, score_scale());
      const Strided c = batch_slice(o_.cond, n.b);
      const AccessPattern ct = on_chip(Space::sbuf, a_.cond->dtype, 0, n.sq, n.s.cond, {{Sk, 1}});
      x_.em.dma(ct, hbm_ap(*a_.cond, c.offset + n.q0 * c.strides[0], n.sq, c.strides[0], {{Sk, static_cast<int32_t>(c.strides[1])}}),
                Emitter::DmaClass::spread);
      const AccessPattern fill = on_chip(Space::sbuf, DType::f32, 0, n.sq, fill_, {{Sk, 0}});
      Instr sel;
      sel.op = Op::select;
      sel.dst = src;
      sel.src0 = ct;
      sel.src1 = a_.keep_when ? src : fill;
      sel.aux = a_.keep_when ? fill : src;
      x_.em.emit(sel, Lane::vector);
    }
    x_.reduce(col(n, 0), src, Alu::max, true);  // -max
    if (exp_scale() != 1.0) x_.tensor_scalar(col(n, 0), col(n, 0), Alu::multiply, exp_scale());
  }
  AccessPattern scores_src(const Unit& n) const {
    return mask() || where() ? on_chip(Space::sbuf, DType::f32, 0, n.sq, n.s.s, {{static_cast<int32_t>(o_.Sk), 1}})
                  : psum_at(n.set, 0, n.sq, static_cast<int32_t>(o_.Sk));
  }
  double exp_scale() const { return mask() || where() ? 1.0 : score_scale(); }
  // The scale still to apply to the scores (1 when Q carries it).
  double score_scale() const { return q_scale() != 1.0 ? 1.0 : a_.score_ep.scale; }

  // Stage 2: P = exp(s - max) with its row sums, 1 / sum, P^T per 128 keys.
  void probabilities(int64_t u, int64_t qtiles) {
    const Unit n = unit(u, qtiles);
    const DType pdt = o_.v.dtype;
    const int64_t pes = o_.v.es();
    const AccessPattern p = on_chip(Space::sbuf, pdt, 0, n.sq, n.s.p, {{static_cast<int32_t>(o_.Sk), 1}});
    x_.activation(p, scores_src(n), Func::exp, exp_scale(), col(n, 0), 0.0, col(n, 1));  // exp(sc * s - sc * max), row sums
    x_.activation(col(n, 2), col(n, 1), Func::reciprocal);
    if (a_.context_ep.scale != 1.0) x_.tensor_scalar(col(n, 2), col(n, 2), Alu::multiply, a_.context_ep.scale);
    for (int64_t c = 0, chunks = ceil_div(o_.Sk, 128); c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, o_.Sk - c * 128));
      const AccessPattern pt = psum_at(4 + n.set, c * 512, kc, n.sq);
      x_.transpose(pt, on_chip(Space::sbuf, pdt, 0, n.sq, n.s.p + c * 128 * pes, {{kc, 1}}));
      x_.copy(on_chip(Space::sbuf, pdt, 0, kc, n.s.pT + c * 128 * pes, {{n.sq, 1}}), pt);
    }
  }

  // Stage 3: the context (P^T)^T @ V over the key chunks, normalised by the row sums, stored.
  void context(int64_t u, int64_t qtiles) {
    const Unit n = unit(u, qtiles);
    const int32_t dv = static_cast<int32_t>(o_.dv);
    const DType pdt = o_.v.dtype;
    const int64_t pes = o_.v.es(), chunks = ceil_div(o_.Sk, 128);
    const AccessPattern po = psum_at(2 + n.set, 0, n.sq, dv);
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t kc = static_cast<int32_t>(std::min<int64_t>(128, o_.Sk - c * 128));
      x_.matmul_step(po, on_chip(Space::sbuf, pdt, 0, kc, n.s.pT + c * 128 * pes, {{n.sq, 1}}),
                     on_chip(Space::sbuf, o_.v.dtype, 0, kc, n.s.v + c * o_.dv * pes, {{dv, 1}}), c == 0, c == chunks - 1);
    }
    const AccessPattern out = on_chip(Space::sbuf, o_.o.dtype, 0, n.sq, n.s.out, {{dv, 1}});
    x_.tensor_tensor(Alu::multiply, out, po, on_chip(Space::sbuf, DType::f32, 0, n.sq, n.s.cols + 8, {{dv, 0}}));
    attn::store_out(x_, o_, n.b, n.q0, n.sq, out);
  }

  Ctx& x_;
  const AttentionPlan& a_;
  Operands o_;
  attn::Loader ld_;
  int64_t slot_bytes_ = 0, slots_ = 0, fill_ = 0;
};

}  // namespace

Status attention_fits(Ctx& x, AttentionPlan& a) {
  if (a.score_ep.func != Func::identity || a.score_ep.residual) return Status::fail("the scores have an activation or a residual");
  if (a.context_ep.bias || a.context_ep.residual || a.context_ep.func != Func::identity || !a.context_ep.operand[0].empty())
    return Status::fail("the context matmul has an epilogue beyond a scale");
  if (a.score_ep.scale <= 0 || a.context_ep.scale <= 0) return Status::fail("a scale that is not positive");
  for (const std::string* v : {&a.scores->inputs[0], &a.scores->inputs[1], &a.context->inputs[1]})
    if (x.g.value(*v).data || x.g.value(*v).shape.size() < 2) return Status::fail("a constant or 1-D operand");
  const Operands o = attn::operands(x, a);
  if (o.ov.rank() < 2 || o.q.rank() < 2) return Status::fail("operands of rank < 2");
  const int64_t bank_f32 = x.cfg.psum_bank_bytes() / 4, free_max = std::min<int64_t>(bank_f32, x.cfg.max_moving_free);
  if (x.banks() < 8) return Status::fail("fewer than 8 PSUM banks");
  if (o.dh > x.cfg.tensor_rows || o.dh > 128) return Status::fail("a head dimension over 128");
  if (o.dv > free_max) return Status::fail("a value width beyond one PSUM bank");
  if (x.cfg.tensor_cols < 128 || x.cfg.partitions < 128) return Status::fail("an array narrower than 128");
  // The key-block kernel: keys beyond one block, or chosen (MappingOptions::attention_kernel;
  // `automatic` is resolved by compile() before it gets here and counts as key_blocks) and fitting
  // (else the one-bank kernel takes it).
  a.key_blocks = false;
  if (o.Sk > attn::key_block(x) || x.opt.attention_kernel != AttentionKernel::one_bank) {
    const Status s = attn::blocks_fit(x, a, o);
    a.key_blocks = s.ok;
    if (s.ok || o.Sk > attn::key_block(x)) return s;
  }
  const int64_t es = std::max({o.q.es(), o.kt.es(), o.v.es()});
  const int64_t need = kSlots * round64(slot_layout(0, o.Sk, o.dv, es, a.score_ep.bias || a.cond, a.cond ? a.cond->es() : 0).end) + 3 * o.Sk * 4 + 1024;
  if (need > x.cfg.sbuf_partition_bytes) return Status::fail("SBUF too small for the fused kernel's slots");
  return {};
}

Status attention(Ctx& x, const AttentionPlan& a) {
  const Operands o = attn::operands(x, a);
  if (o.Sk <= attn::key_block(x)) ++x.c.attention_choices;
  if (a.key_blocks) return attn::blocks(x, a);
  Attention(x, a).run();
  return {};
}

}  // namespace tessera::neuroncore
