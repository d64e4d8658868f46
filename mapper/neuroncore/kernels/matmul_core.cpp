// The compiler's own 2-D matmul loop (kernels/matmul.hpp). The tensor engine contracts over the
// partitions: the stationary tile is A^T [K, M <= 128], the moving tile B [K, N <= 512], both with K
// on the partitions. A tile whose free dimension is contiguous in HBM loads with one DMA; one whose
// K is contiguous (a row-major activation as A, a transposed view as B) loads the other way round
// and goes through the tensor engine's transpose (128 x 128 blocks into PSUM, copied back).
#include <algorithm>
#include <cmath>
#include <functional>

#include "mapper/neuroncore/kernels/matmul.hpp"

namespace tessera::neuroncore {

AccessPattern Mat::by_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const {
  return hbm_ap(ref, off + r0 * rs + c0 * cs, static_cast<int32_t>(nr), rs, {{static_cast<int32_t>(nc), static_cast<int32_t>(cs)}});
}
AccessPattern Mat::by_cols(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const {
  return hbm_ap(ref, off + r0 * rs + c0 * cs, static_cast<int32_t>(nc), cs, {{static_cast<int32_t>(nr), static_cast<int32_t>(rs)}});
}

namespace {

// An operand seen as [K, F] with K on the partitions: A^T (F = M) or B (F = N).
struct KF {
  TensorRef ref;
  int64_t off = 0, K = 0, F = 0, sk = 0, sf = 0;
  bool transpose = false;  // loaded as [F, K] and turned by the tensor engine
  int64_t es() const { return ref.es(); }
};

KF as_kf(const Mat& m, bool is_a) {
  KF r;
  r.ref = m.ref;
  r.off = m.off;
  if (is_a) {  // A [M, K]: (k, f) = A(f, k)
    r.K = m.cols, r.F = m.rows, r.sk = m.cs, r.sf = m.rs;
  } else {
    r.K = m.rows, r.F = m.cols, r.sk = m.rs, r.sf = m.cs;
  }
  r.transpose = loads_transposed(r.sk, r.sf, r.F);
  return r;
}

}  // namespace

int64_t auto_buffers(const Ctx& x, int64_t tile_bytes_per_part, int64_t kp, int64_t parts_out, int64_t free) {
  const double t_dma = dma_transfer_seconds(tile_bytes_per_part * kp, kp, x.cfg);
  Instr probe;
  probe.op = Op::multiply_moving;
  probe.dst.parts = static_cast<int32_t>(parts_out);
  probe.src0.parts = static_cast<int32_t>(kp);
  probe.src0.ndims = 1;
  probe.src0.dims[0] = {static_cast<int32_t>(free), 1};
  probe.src0.dtype = x.opt.compute;
  const double t_mm = static_cast<double>(instr_cycles(probe, x.cfg)) / x.cfg.tensor_hz;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil((t_dma + x.cfg.dma_trigger_latency) / t_mm)) + 2, 3, 64);
}

namespace {

// The loop's tile sizes and buffers, decided before anything is emitted (matmul_auto_sbuf sizes
// the SBUF regions of a batched matmul with it).
// PSUM banks a matmul's accumulations rotate over: two go to transposed loads when there are any.
int64_t accumulation_banks(const Ctx& x, const KF& a, const KF& b) { return x.banks() - ((a.transpose || b.transpose) ? 2 : 0); }

struct Plan {
  int64_t M = 0, N = 0, K = 0, TM = 128, TN = 512, TK = 128, MT = 0, NT = 0, KT = 0, nbuf_a = 0, nbuf_b = 0, fixed = 0;
  bool a_resident = true;
  bool b_pre = false;  // B already in SBUF for the whole kernel (MatmulJob::b_pre)
  // SBUF bytes per partition with A's stationary tiles (or B's moving block) resident for all of K.
  int64_t need(bool ares, const KF& a, const KF& b) const {
    if (b_pre) return ares ? KT * TM * a.es() : nbuf_a * TM * a.es();
    return ares ? KT * TM * a.es() + nbuf_b * TN * b.es() : KT * TN * b.es() + nbuf_a * TM * a.es();
  }
};

constexpr int64_t kStageSlots = 8;  // staging slots of transposed tile loads
constexpr int64_t kBlockTiles = 4;  // output tiles per streamed block (G)

Plan plan_of(const Ctx& x, const MatmulJob& job, const KF& a, const KF& b) {
  Plan p;
  p.M = job.a.rows, p.K = job.a.cols, p.N = job.b.cols;
  p.TM = std::min<int64_t>(x.opt.tile_m > 0 ? x.opt.tile_m : x.cfg.tensor_cols, x.cfg.tensor_cols);
  p.TN = x.tile_free(job.name);
  p.TK = x.cfg.tensor_rows;
  p.MT = ceil_div(p.M, p.TM), p.NT = ceil_div(p.N, p.TN), p.KT = ceil_div(p.K, p.TK);
  // Bytes each order moves (a transposed load costs about twice: the transpose and its copy).
  const double a_bytes = static_cast<double>(p.M * p.K * a.es()) * (a.transpose ? 2 : 1);
  const double b_bytes = static_cast<double>(p.K * p.N * b.es()) * (b.transpose ? 2 : 1);
  // (With A resident, MG row tiles share each pass of B: Core::run.)
  const int64_t mg = std::min<int64_t>(p.MT, std::max<int64_t>(1, accumulation_banks(x, a, b) / 2));
  p.a_resident = static_cast<double>(ceil_div(p.MT, mg)) * b_bytes + a_bytes < static_cast<double>(p.NT) * a_bytes + b_bytes;
  // Never more buffers than the loop streams tiles (MT x NT x KT whichever operand streams): a small
  // matmul (an attention head's) then takes little SBUF, and more of them run at once.
  const int64_t tiles = p.MT * p.NT * p.KT;
  p.nbuf_a = std::min(tiles, x.opt.buffers > 0 ? x.opt.buffers : auto_buffers(x, p.TM * a.es(), std::min(p.K, p.TK), std::min(p.M, p.TM), std::min(p.N, p.TN)));
  p.nbuf_b = std::min(tiles, x.opt.buffers > 0 ? x.opt.buffers : auto_buffers(x, p.TN * b.es(), std::min(p.K, p.TK), std::min(p.M, p.TM), std::min(p.N, p.TN)));
  p.b_pre = job.b_pre >= 0;
  if (p.b_pre || !job.segments.empty() || job.norm) p.a_resident = true;
  p.fixed = 2 * p.TN * 4 + ((a.transpose || b.transpose) ? kStageSlots * 128 * 4 : 0);
  return p;
}

class Core {
 public:
  Core(Ctx& x, const MatmulJob& job, EpilogueEmitter& epi, Sbuf& sb, int64_t& tiles)
      : x_(x), job_(job), epi_(epi), sb_(sb), tiles_(tiles), a_(as_kf(job.a, true)), b_(as_kf(job.b, false)) {}

  void run() {
    const Plan p = plan_of(x_, job_, a_, b_);
    bpre_ = p.b_pre;
    const int64_t M = p.M, K = p.K, N = p.N, MT = p.MT, NT = p.NT, KT = p.KT, nbuf_a = p.nbuf_a, nbuf_b = p.nbuf_b, fixed = p.fixed;
    TM_ = p.TM, TN_ = p.TN, TK_ = p.TK;
    bool a_resident = p.a_resident;
    auto need = [&](bool ares) { return p.need(ares, a_, b_); };
    // (Segments and a fused LayerNorm need the A-resident loop: whole output rows in one pass.)
    const bool a_only = !job_.segments.empty() || job_.norm;
    if (!sb_.fits(need(a_resident) + fixed) && sb_.fits(need(!a_resident) + fixed) && !a_only) a_resident = !a_resident;
    if (!sb_.fits(need(a_resident) + fixed) && !a_only) {
      // Neither operand fits for all of K (a very long contraction): both stream, tile by tile.
      streamed_both(M, N, KT, std::min(nbuf_a, nbuf_b));
      return;
    }
    const int64_t nbuf = a_resident ? nbuf_b : nbuf_a;
    // Streamed right-operand tiles load G output tiles wide (one DMA of a K row's G * TN columns),
    // G accumulations live at once: per partition a DMA then moves G * TN contiguous elements
    // instead of TN (BERT's weights: 4 KiB runs instead of 1 KiB, 82% -> 95% of the engines'
    // bandwidth by the per-chunk overhead [DMA]).
    const int64_t banks_for_acc = accumulation_banks(x_, a_, b_);
    // (The same for streamed stationary tiles: G of them, G * TM columns of A^T, per DMA.)
    const KF& streamed = a_resident ? b_ : a_;
    const int64_t tiles_streamed = a_resident ? NT : MT, tile_cols = a_resident ? TN_ : TM_;
    // With A resident, MG of its row tiles stay resident together and each streamed B block is
    // applied to all of them (MG x G accumulations): the right operand streams MT / MG times
    // instead of MT (a batch-2 BERT layer's 256 token rows: its weights once, not twice).
    int64_t MG = 1;
    if (a_resident && MT > 1 && !bpre_ && !job_.norm) MG = std::min<int64_t>(MT, std::max<int64_t>(1, banks_for_acc / 2));
    if (!streamed.transpose && streamed.sf == 1 && tiles_streamed > 1 && !(a_resident && bpre_))
      G_ = std::min<int64_t>({tiles_streamed, kBlockTiles, std::max<int64_t>(1, banks_for_acc / 2 / MG)});
    auto extra = [&] { return (G_ - 1) * nbuf * tile_cols * streamed.es() + (MG - 1) * KT * TM_ * a_.es(); };
    while (!sb_.fits(need(a_resident) + fixed + extra()) && (G_ > 1 || MG > 1)) {
      if (G_ > 1) --G_;
      else --MG;
    }
    MG_ = MG;
    resident_ = sb_.take(a_resident ? MG * KT * TM_ * a_.es() : (bpre_ ? 0 : KT * TN_ * b_.es()));
    stream_ = sb_.take(a_resident && bpre_ ? 0 : nbuf * G_ * tile_cols * streamed.es());
    out_ = sb_.take(2 * TN_ * 4);
    // Staging for transposed loads: a whole [128, K] block of the resident operand (two, so the
    // next block's load overlaps this one's transposes), and slots for streamed tiles.
    const auto& res_op = a_resident ? a_ : b_;
    if (res_op.transpose && sb_.fits(2 * K * res_op.es() + kStageSlots * 128 * 4)) block_stage_ = sb_.take(2 * K * res_op.es());
    if (a_.transpose || b_.transpose) stage_ = sb_.take(kStageSlots * 128 * 4);
    more_outs();
    if (job_.norm) norm_buffers(N);
    x_.used(sb_);
    x_.used_psum();
    acc_banks_ = accumulation_banks(x_, a_, b_);
    int64_t slot = 0;
    if (a_resident) {
      const int64_t a_tiles = KT * TM_ * a_.es();  // one row tile of A, all of K
      for (int64_t mg = 0; mg < MT; mg += MG_) {
        const int64_t gm = std::min(MG_, MT - mg);
        for (int64_t i = 0; i < gm; ++i) {
          const int64_t m0 = (mg + i) * TM_;
          res_base_ = resident_ + i * a_tiles;
          load_resident(a_, TM_, m0, std::min(TM_, M - m0));
        }
        // A fused LayerNorm's row: its residual and bias added into it ahead of the accumulation
        // (each tile's evacuation is then one add from PSUM).
        if (job_.norm) {
          const int64_t m0 = mg * TM_, mn = std::min(TM_, M - m0);
          const AccessPattern row = on_chip(Space::sbuf, DType::f32, 0, static_cast<int32_t>(mn), norm_row_, {{static_cast<int32_t>(N), 1}});
          preadded_ = epi_.preadd(row, tile_at(job_.bias, job_.bias_rs, job_.bias_cs, m0, 0, N), tile_at(job_.residual, job_.res_rs, job_.res_cs, m0, 0, N), norm_res_);
        }
        const auto tiles = n_tiles(N);
        for (size_t n = 0; n < tiles.size(); n += static_cast<size_t>(G_)) {
          const int64_t g = std::min<int64_t>(G_, static_cast<int64_t>(tiles.size() - n)), n0 = tiles[n].first;
          const int64_t cols = tiles[n + static_cast<size_t>(g) - 1].first + tiles[n + static_cast<size_t>(g) - 1].second - n0;
          auto nn_of = [&](int64_t j) { return tiles[n + static_cast<size_t>(j)].second; };
          auto at_of = [&](int64_t j) { return tiles[n + static_cast<size_t>(j)].first - n0; };  // column in the block
          auto mn_of = [&](int64_t i) { return std::min(TM_, M - (mg + i) * TM_); };
          std::vector<AccessPattern> ps;  // [i * g + j]
          for (int64_t i = 0; i < gm; ++i)
            for (int64_t j = 0; j < g; ++j) ps.push_back(acc(mn_of(i), nn_of(j)));
          for (int64_t k = 0; k < KT; ++k, ++slot) {
            const int64_t so = bpre_ ? b_at(k, n0) : stream_ + (slot % nbuf) * G_ * TN_ * b_.es();
            if (!bpre_) load(b_, so, k, n0, cols);
            for (int64_t i = 0; i < gm; ++i)
              for (int64_t j = 0; j < g; ++j)
                step(ps[static_cast<size_t>(i * g + j)], resident_ + i * a_tiles + k * TM_ * a_.es(), so + at_of(j) * b_.es(), k, mn_of(i), nn_of(j), KT);
          }
          for (int64_t i = 0; i < gm; ++i)
            for (int64_t j = 0; j < g; ++j) finish(ps[static_cast<size_t>(i * g + j)], (mg + i) * TM_, mn_of(i), n0 + at_of(j), nn_of(j));
        }
        if (job_.norm) {  // the row tile is complete (MG is 1): normalise and store it
          if (deferred_) deferred_();
          deferred_ = nullptr;
          normalize(mg * TM_, std::min(TM_, M - mg * TM_), N);
        }
      }
    } else {
      for (int64_t n = 0; n < NT; ++n) {
        const int64_t n0 = n * TN_, nn = std::min(TN_, N - n0);
        res_base_ = resident_;
        if (!bpre_) load_resident(b_, TN_, n0, nn);
        for (int64_t m = 0; m < MT; m += G_) {
          const int64_t g = std::min(G_, MT - m), m0 = m * TM_, rows = std::min(g * TM_, M - m0);
          std::vector<AccessPattern> ps;
          for (int64_t j = 0; j < g; ++j) ps.push_back(acc(std::min(TM_, M - m0 - j * TM_), nn));
          for (int64_t k = 0; k < KT; ++k, ++slot) {
            const int64_t so = stream_ + (slot % nbuf) * G_ * TM_ * a_.es();
            load(a_, so, k, m0, rows);
            for (int64_t j = 0; j < g; ++j)
              step(ps[static_cast<size_t>(j)], so + j * TM_ * a_.es(), bpre_ ? b_at(k, n0) : resident_ + k * TN_ * b_.es(), k, std::min(TM_, M - m0 - j * TM_), nn, KT);
          }
          for (int64_t j = 0; j < g; ++j) finish(ps[static_cast<size_t>(j)], m0 + j * TM_, std::min(TM_, M - m0 - j * TM_), n0, nn);
        }
      }
    }
    if (deferred_) deferred_();
  }

 private:
  void streamed_both(int64_t M, int64_t N, int64_t KT, int64_t nbuf) {
    const int64_t sa = sb_.take(nbuf * TM_ * a_.es()), sbb = bpre_ ? 0 : sb_.take(nbuf * TN_ * b_.es());
    out_ = sb_.take(2 * TN_ * 4);
    if (a_.transpose || b_.transpose) stage_ = sb_.take(kStageSlots * 128 * 4);
    more_outs();
    x_.used(sb_);
    x_.used_psum();
    acc_banks_ = accumulation_banks(x_, a_, b_);
    int64_t slot = 0;
    for (int64_t m0 = 0; m0 < M; m0 += TM_)
      for (int64_t n0 = 0; n0 < N; n0 += TN_) {
        const int64_t mn = std::min(TM_, M - m0), nn = std::min(TN_, N - n0);
        const AccessPattern ps = acc(mn, nn);
        for (int64_t k = 0; k < KT; ++k, ++slot) {
          const int64_t ao = sa + (slot % nbuf) * TM_ * a_.es(), bo = bpre_ ? b_at(k, n0) : sbb + (slot % nbuf) * TN_ * b_.es();
          load(a_, ao, k, m0, mn);
          if (!bpre_) load(b_, bo, k, n0, nn);
          step(ps, ao, bo, k, mn, nn, KT);
        }
        finish(ps, m0, mn, n0, nn);
      }
    if (deferred_) deferred_();
  }

  // B's tile (k, columns from n0) when B is in SBUF for the whole kernel: [KT][N] per partition.
  int64_t b_at(int64_t k, int64_t n0) const { return job_.b_pre + (k * job_.b_pre_row + n0) * b_.es(); }

  int32_t kn(int64_t k) const { return static_cast<int32_t>(std::min(TK_, a_.K - k * TK_)); }

  AccessPattern acc(int64_t mn, int64_t nn) {
    return x_.psum(tiles_++ % acc_banks_, static_cast<int32_t>(mn), static_cast<int32_t>(nn));
  }

  // All K tiles of `o` for columns [f0, f0 + fn) into the resident buffer (tile k at k * tf). A
  // transposed operand is staged a [128, K] block at a time (one DMA) and turned tile by tile.
  void load_resident(const KF& o, int64_t tf, int64_t f0, int64_t fn) {
    const int64_t KT = ceil_div(o.K, TK_);
    if (!o.transpose || block_stage_ < 0) {
      for (int64_t k = 0; k < KT; ++k) load(o, res_base_ + k * tf * o.es(), k, f0, fn);
      return;
    }
    for (int64_t j = 0; j < fn; j += 128) {
      const int32_t fs = static_cast<int32_t>(std::min<int64_t>(128, fn - j));
      const int64_t st = block_stage_ + (blocks_++ % 2) * o.K * o.es();
      x_.em.dma(on_chip(Space::sbuf, o.ref.dtype, 0, fs, st, {{static_cast<int32_t>(o.K), 1}}),
                hbm_ap(o.ref, o.off + (f0 + j) * o.sf, fs, o.sf, {{static_cast<int32_t>(o.K), static_cast<int32_t>(o.sk)}}), Emitter::DmaClass::spread);
      // As many transposes as a PSUM bank holds go into one bank side by side and come back in one
      // copy (one vector instruction of 512 elements instead of four of 128: the copy's fixed cost
      // and the dependent instructions' gaps [ISA] once per bank, not per tile).
      const int64_t per_bank = std::max<int64_t>(1, x_.cfg.psum_bank_bytes() / 4 / fs);
      for (int64_t k = 0; k < KT;) {
        const int32_t kp = kn(k);
        int64_t g = 1;
        while (g < per_bank && k + g < KT && kn(k + g) == kp) ++g;
        const AccessPattern bank = x_.psum(acc_banks_ + stages_++ % 2, kp, static_cast<int32_t>(g * fs));
        for (int64_t t = 0; t < g; ++t) {
          AccessPattern pt = bank;
          pt.offset += t * fs * 4;
          pt.dims[0].num = fs;
          x_.transpose(pt, on_chip(Space::sbuf, o.ref.dtype, 0, fs, st + (k + t) * TK_ * o.es(), {{kp, 1}}));
        }
        x_.copy(on_chip(Space::sbuf, o.ref.dtype, 0, kp, res_base_ + (k * tf + j) * o.es(), {{static_cast<int32_t>(g), static_cast<int32_t>(tf)}, {fs, 1}}),
                bank);
        k += g;
      }
    }
  }

  // Tile (k, [f0, f0 + fn)) of `o` into SBUF at `off` as [kn, fn].
  void load(const KF& o, int64_t off, int64_t k, int64_t f0, int64_t fn) {
    const int32_t kp = kn(k);
    const int64_t e0 = o.off + k * TK_ * o.sk + f0 * o.sf;
    const auto cls = Emitter::DmaClass::spread;
    if (!o.transpose) {
      x_.em.dma(on_chip(Space::sbuf, o.ref.dtype, 0, kp, off, {{static_cast<int32_t>(fn), 1}}),
                hbm_ap(o.ref, e0, kp, o.sk, {{static_cast<int32_t>(fn), static_cast<int32_t>(o.sf)}}), cls);
      return;
    }
    // [fs, kn] blocks (F on the partitions, K contiguous), each transposed into PSUM and copied.
    for (int64_t j = 0; j < fn; j += 128) {
      const int32_t fs = static_cast<int32_t>(std::min<int64_t>(128, fn - j));
      const int64_t st = stage_ + (stages_ % kStageSlots) * 128 * 4;
      const AccessPattern staged = on_chip(Space::sbuf, o.ref.dtype, 0, fs, st, {{kp, 1}});
      x_.em.dma(staged, hbm_ap(o.ref, e0 + j * o.sf, fs, o.sf, {{kp, static_cast<int32_t>(o.sk)}}), Emitter::DmaClass::stream);
      const AccessPattern pt = x_.psum(acc_banks_ + stages_ % 2, kp, fs);
      x_.transpose(pt, staged);
      x_.copy(on_chip(Space::sbuf, o.ref.dtype, 0, kp, off + j * o.es(), {{fs, 1}}), pt);
      ++stages_;
    }
  }

  void step(const AccessPattern& ps, int64_t stat_off, int64_t mov_off, int64_t k, int64_t mn, int64_t nn, int64_t KT) {
    const int32_t kp = kn(k);
    x_.matmul_step(ps, on_chip(Space::sbuf, a_.ref.dtype, 0, kp, stat_off, {{static_cast<int32_t>(mn), 1}}),
                   on_chip(Space::sbuf, b_.ref.dtype, 0, kp, mov_off, {{static_cast<int32_t>(nn), 1}}), k == 0, k == KT - 1);
  }

  // Output tiles rotate over the two slots at out_ and, where SBUF has room left, up to
  // kOutSlots - 2 more: a tile's store (a spread DMA sharing the engines) then need not end before
  // the epilogue of the tile two after it may write its slot.
  static constexpr int64_t kOutSlots = 4;
  void more_outs() {
    out_slots_ = {out_, out_ + TN_ * 4};
    while (static_cast<int64_t>(out_slots_.size()) < kOutSlots && sb_.fits(TN_ * 4 + 16 * 1024)) out_slots_.push_back(sb_.take(TN_ * 4));
  }
  int64_t out_at(int64_t t) const { return out_slots_[static_cast<size_t>(t) % out_slots_.size()]; }

  // A fused LayerNorm (MatmulJob::norm): a row tile's result [rows, N] fp32, its output, the scale
  // and bias replicated on every partition, and the statistics.
  void norm_buffers(int64_t N) {
    const Epilogue::Norm& nm = *job_.norm;
    const int32_t P = static_cast<int32_t>(x_.cfg.partitions);
    norm_row_ = sb_.take(N * 4);
    norm_y_ = sb_.take(N * job_.out.ref.es());
    norm_small_ = sb_.take(64);
    if (const auto& res = epi_.epilogue().residual) norm_res_ = sb_.take(N * res->es());
    norm_records_ = sb_.take(static_cast<int64_t>(n_tiles(N).size()) * 6 * 4);
    for (const auto* e : {&nm.scale, &nm.bias}) {
      if (!*e) {
        norm_rows_.push_back(-1);
        continue;
      }
      const TensorRef& r = **e;
      const int64_t at = sb_.take(N * r.es()), ones = sb_.take(P * r.es());
      x_.em.dma(on_chip(Space::sbuf, r.dtype, 0, 1, at, {{static_cast<int32_t>(N), 1}}),
                hbm_ap(r, r.view.offset, 1, 0, {{static_cast<int32_t>(N), static_cast<int32_t>(r.view.strides.empty() ? 1 : r.view.strides[0])}}),
                Emitter::DmaClass::spread);
      x_.replicate_row(r.dtype, at, N, ones);
      norm_rows_.push_back(at);
    }
  }
  // Normalises rows [m0, m0 + mn) held in norm_row_ (as kernels/rows.cpp does a LayerNorm) and
  // stores them.
  void normalize(int64_t m0, int64_t mn, int64_t N) {
    const Epilogue::Norm& nm = *job_.norm;
    const int32_t pr = static_cast<int32_t>(mn);
    auto col = [&](int64_t off) { return on_chip(Space::sbuf, DType::f32, 0, pr, norm_small_ + off, {{1, 1}}); };
    x_.aggregate_stats(pr, norm_records_, static_cast<int64_t>(n_tiles(N).size()), norm_small_, nm.eps);  // (chunks' records: finish)
    // In column chunks, each stored as soon as it is normalised: the store of one overlaps the
    // next one's normalisation, instead of the whole row's store (and the DMA's trigger latency)
    // following the whole row's three passes.
    const bool scale = norm_rows_[0] >= 0, bias = norm_rows_[1] >= 0;
    const int64_t cw = N >= 512 ? 256 : N;
    for (int64_t c0 = 0; c0 < N; c0 += cw) {
      const int32_t cn = static_cast<int32_t>(std::min(cw, N - c0));
      const AccessPattern r = on_chip(Space::sbuf, DType::f32, 0, pr, norm_row_ + c0 * 4, {{cn, 1}});
      x_.tensor_scalar(r, r, Alu::subtract, col(32), Alu::multiply, col(40));  // (x - mean) * rstd
      auto operand = [&](size_t i) {
        const TensorRef& t = i == 0 ? *nm.scale : *nm.bias;
        return on_chip(Space::sbuf, t.dtype, 0, pr, norm_rows_[i] + c0 * t.es(), {{cn, 1}});
      };
      const AccessPattern y = on_chip(Space::sbuf, job_.out.ref.dtype, 0, pr, norm_y_ + c0 * job_.out.ref.es(), {{cn, 1}});
      if (scale) x_.tensor_tensor(Alu::multiply, bias ? r : y, r, operand(0));
      if (bias) x_.tensor_tensor(Alu::add, y, r, operand(1));
      if (!scale && !bias) x_.copy(y, r);
      x_.em.dma(job_.out.by_rows(m0, mn, c0, cn), y, Emitter::DmaClass::spread_store);
    }
  }

  // The evacuation and store of a tile, emitted after the next tile's matmuls so that it sits in
  // their bundles (when its PSUM tile is complete) instead of holding them up.
  void finish(const AccessPattern& ps, int64_t m0, int64_t mn, int64_t n0, int64_t nn) {
    if (deferred_) deferred_();
    const int64_t t = outs_++;
    deferred_ = [=, this] {
      if (!job_.segments.empty()) {  // the segment holding these columns, in its own coordinates
        for (const MatmulSegment& sg : job_.segments) {
          if (n0 < sg.n0 || n0 >= sg.n0 + sg.n) continue;
          const int64_t c0 = n0 - sg.n0;
          const AccessPattern dst = on_chip(Space::sbuf, sg.out.ref.dtype, 0, static_cast<int32_t>(mn), out_at(t), {{static_cast<int32_t>(nn), 1}});
          sg.epi->run(dst, ps, tile_at(sg.bias, sg.bias_rs, sg.bias_cs, m0, c0, nn), TileView{}, t);
          x_.em.dma(sg.out.by_rows(m0, mn, c0, nn), dst, Emitter::DmaClass::spread_store);
        }
        return;
      }
      const Mat& o = job_.out;
      if (job_.norm) {  // into the row (fp32), normalised once the row is complete
        const AccessPattern r = on_chip(Space::sbuf, DType::f32, 0, static_cast<int32_t>(mn), norm_row_ + n0 * 4, {{static_cast<int32_t>(nn), 1}});
        if (preadded_) epi_.run_preadded(r, ps);
        else epi_.run(r, ps, tile_at(job_.bias, job_.bias_rs, job_.bias_cs, m0, n0, nn), tile_at(job_.residual, job_.res_rs, job_.res_cs, m0, n0, nn), t);
        // This chunk's statistics now, while the row's next tiles accumulate: only their
        // aggregation waits for the row's last tile (normalize).
        const auto tiles = n_tiles(job_.out.cols);
        const auto at = std::find_if(tiles.begin(), tiles.end(), [&](const auto& c) { return c.first == n0; }) - tiles.begin();
        x_.chunk_stats(r, norm_records_ + at * 6 * 4);
        return;
      }
      const AccessPattern dst = on_chip(Space::sbuf, o.ref.dtype, 0, static_cast<int32_t>(mn), out_at(t), {{static_cast<int32_t>(nn), 1}});
      epi_.run(dst, ps, tile_at(job_.bias, job_.bias_rs, job_.bias_cs, m0, n0, nn), tile_at(job_.residual, job_.res_rs, job_.res_cs, m0, n0, nn), t);
      x_.em.dma(o.by_rows(m0, mn, n0, nn), dst, Emitter::DmaClass::spread_store);
    };
  }

  // The output tiles along N: TN wide, or within each segment when the output is split.
  std::vector<std::pair<int64_t, int64_t>> n_tiles(int64_t N) const {
    std::vector<std::pair<int64_t, int64_t>> t;
    if (job_.segments.empty()) {
      for (int64_t n0 = 0; n0 < N; n0 += TN_) t.push_back({n0, std::min(TN_, N - n0)});
      return t;
    }
    for (const MatmulSegment& sg : job_.segments)
      for (int64_t c = 0; c < sg.n; c += TN_) t.push_back({sg.n0 + c, std::min(TN_, sg.n - c)});
    return t;
  }

  Ctx& x_;
  const MatmulJob& job_;
  EpilogueEmitter& epi_;
  Sbuf& sb_;
  int64_t& tiles_;
  KF a_, b_;
  int64_t TM_ = 128, TN_ = 512, TK_ = 128;
  bool bpre_ = false;
  int64_t G_ = 1, MG_ = 1;
  int64_t res_base_ = 0;  // where load_resident writes (resident_, or a row tile's part of it)
  std::vector<int64_t> out_slots_;
  int64_t norm_row_ = 0, norm_y_ = 0, norm_small_ = 0, norm_records_ = 0, norm_res_ = -1;
  bool preadded_ = false;
  std::vector<int64_t> norm_rows_;  // the replicated scale and bias (-1: none)
  int64_t resident_ = 0, stream_ = 0, out_ = 0, stage_ = 0, block_stage_ = -1, acc_banks_ = 8, stages_ = 0, outs_ = 0, blocks_ = 0;
  std::function<void()> deferred_;
};

}  // namespace

void matmul_auto(Ctx& x, const MatmulJob& job, EpilogueEmitter& epi, Sbuf& sb, int64_t& tile_count) {
  Core(x, job, epi, sb, tile_count).run();
}

int64_t matmul_auto_sbuf(const Ctx& x, const MatmulJob& job) {
  const KF a = as_kf(job.a, true), b = as_kf(job.b, false);
  const Plan p = plan_of(x, job, a, b);
  const KF& res = p.a_resident ? a : b;
  return std::min(p.need(true, a, b), p.need(false, a, b)) + p.fixed + (res.transpose ? 2 * p.K * res.es() : 0);
}

}  // namespace tessera::neuroncore
