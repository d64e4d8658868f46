// The NKI matmul tutorial's loop nests (mapping.matmul_schedule), for an engineer who wants to
// reproduce or vary them: out [P, F] = stat[K, P]^T @ mov[K, F], stat the tutorial's lhsT (A^T), mov
// its rhs (B), P its M, F its N. Loads go out as spread DMAs (all engines), stores likewise on their
// own queue; each buffer is reused only after the instructions reading it (the scheduler orders them
// by their SBUF footprints), so loads of the next tiles overlap the matmuls of these wherever the
// loop nest leaves room:
//  tiled        for m, n: for k: load stat tile and mov tile, matmul; evacuate, store
//  hoisted      for m: load stat tiles for all k; for n: load mov tiles for all k; matmuls...
//  blocked_mn   for each block of block_m stat tile columns: load them for all k; for each
//               block of block_n mov tile columns: load them for all k; block_m x block_n tiles
//  blocked_mnk  for each block of block_n x 512 columns: zero accumulators in SBUF (compute dtype,
//               as the tutorial has them) for all of P; for each block of block_k k tiles: load the
//               mov block as block_k DMAs of [128, block_n x 512]; for each block of block_m stat
//               tiles: load it as block_k DMAs of [128, block_m x 128], matmul every tile pair into
//               PSUM and add the PSUM tile to its accumulator (vector engine); finally evacuate the
//               accumulators a row of tiles at a time and store each row with one DMA.
#include <algorithm>
#include <functional>

#include "mapper/neuroncore/kernels/matmul.hpp"

namespace tessera::neuroncore {

Status matmul_nki(Ctx& x, const MatmulJob& job, const Epilogue& ep) {
  const Mat& stat = job.a;  // lhs [M, K] read as lhsT tiles
  const Mat& mov = job.b;
  const Mat& out = job.out;
  if (!(stat.rs == 1 || stat.rows == 1) || !(mov.cs == 1 || mov.cols == 1))
    return Status::fail("mapping.matmul_schedule loads lhsT and rhs tiles with one DMA each: the left operand must be stored transposed "
                        "(K before M) and the right one row-major",
                        "use matmul_schedule auto, or give the left operand as lhsT with a Transpose (scenarios/neuroncore/nki_matmul)");
  const int64_t K = stat.cols, P = stat.rows, F = mov.cols;
  const MatmulSchedule sch = x.opt.matmul_schedule;
  const int64_t es = stat.ref.es();
  const int64_t TK = x.cfg.tensor_rows;
  const int64_t TM = std::min<int64_t>(x.opt.tile_m > 0 ? x.opt.tile_m : x.cfg.tensor_cols, x.cfg.tensor_cols);
  const int64_t TN = x.tile_free(job.name, 512);  // the NKI tutorial's 128 x 512 tile
  const int64_t KT = ceil_div(K, TK), MT = ceil_div(P, TM), NT = ceil_div(F, TN);
  const int64_t bm = x.opt.block_m > 0 ? x.opt.block_m : (sch == MatmulSchedule::blocked_mnk ? 16 : 2);
  const int64_t bn = x.opt.block_n > 0 ? x.opt.block_n : 2;
  const int64_t bk = x.opt.block_k > 0 ? x.opt.block_k : 8;
  const DType ct = stat.ref.dtype;
  x.begin(job.name);
  Sbuf sb = x.sbuf(job.name);
  sb.hint = "use smaller blocks (mapping.block_m / block_n / block_k) or tiles (mapping.tile_m / tile_n)";
  EpilogueEmitter epi(x, ep, sb, TN);
  auto rows_of = [&](int64_t k) { return static_cast<int32_t>(std::min(TK, K - k * TK)); };
  auto cols = [](int64_t t, int64_t T, int64_t total) { return static_cast<int32_t>(std::min(T, total - t * T)); };
  // Tile k of lhsT (is_a) or rhs, columns c0..c0+cn, into SBUF at `off`.
  auto load = [&](int64_t off, bool is_a, int64_t k, int64_t c0, int32_t cn) {
    const int32_t kn = rows_of(k);
    const Mat& src = is_a ? stat : mov;
    x.em.dma(on_chip(Space::sbuf, src.ref.dtype, 0, kn, off, {{cn, 1}}), is_a ? src.by_cols(c0, cn, k * TK, kn) : src.by_rows(k * TK, kn, c0, cn),
             Emitter::DmaClass::spread);
  };
  int64_t psum_next = 0;
  auto psum_tile = [&](int32_t pn, int32_t fn) { return x.psum(psum_next++, pn, fn); };
  auto matmul = [&](const AccessPattern& ps, int64_t stat_off, int64_t mov_off, int64_t k, int32_t pn, int32_t fn, bool start, bool stop) {
    const int32_t kn = rows_of(k);
    x.matmul_step(ps, on_chip(Space::sbuf, stat.ref.dtype, 0, kn, stat_off, {{pn, 1}}), on_chip(Space::sbuf, mov.ref.dtype, 0, kn, mov_off, {{fn, 1}}), start, stop);
  };
  // A tile's epilogue (or accumulate) is emitted after the next tile's matmuls, so that it sits
  // in the bundles of those, when its PSUM tile is complete, instead of holding them up.
  std::function<void()> deferred;
  auto defer = [&](std::function<void()> f) {
    if (deferred) deferred();
    deferred = std::move(f);
  };
  int64_t out_count = 0;
  int64_t out_buf = -1;
  auto finish = [&](const AccessPattern& acc, int64_t m, int64_t f0, int32_t pn, int32_t fn) {
    const int64_t t = out_count++;
    const AccessPattern o = on_chip(Space::sbuf, out.ref.dtype, 0, pn, out_buf + (t % 2) * TN * 4, {{fn, 1}});
    epi.run(o, acc, tile_at(job.bias, job.bias_rs, job.bias_cs, m * TM, f0, fn), tile_at(job.residual, job.res_rs, job.res_cs, m * TM, f0, fn), t);
    x.em.dma(out.by_rows(m * TM, pn, f0, fn), o, Emitter::DmaClass::spread_store);
  };
  // Sets of buffers for a group of tiles: two when they fit beside everything else, so the next
  // group's loads can start while this one computes.
  auto sets_of = [&](int64_t bytes, int64_t reserve) { return sb.next + 2 * bytes + reserve <= sb.limit ? 2 : 1; };
  // Blocked schedules run as steps. An operand with two buffer sets has step i+1's loads emitted
  // before step i's matmuls (they write the other set, last read by step i-1), so the scheduler
  // can start them while step i computes; with one set they must follow step i's reads.
  struct Step {
    std::function<void()> load_stat, load_mov, compute;
  };
  auto run_steps = [&](const std::vector<Step>& steps, int64_t s_sets, int64_t m_sets) {
    auto loads = [&](size_t i, bool early) {
      if (i >= steps.size()) return;
      if (steps[i].load_stat && (s_sets == 2) == early) steps[i].load_stat();
      if (steps[i].load_mov && (m_sets == 2) == early) steps[i].load_mov();
    };
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i == 0) {
        loads(0, true);
        loads(0, false);
      }
      loads(i + 1, true);
      steps[i].compute();
      loads(i + 1, false);
    }
  };

  if (sch == MatmulSchedule::tiled) {
    const int64_t nbuf = x.opt.buffers > 0 ? x.opt.buffers : auto_buffers(x, TM * es, std::min(K, TK), std::min(TM, P), std::min(TN, F));
    const int64_t sbuf_ = sb.take(nbuf * TM * es), mbuf = sb.take(nbuf * TN * es);
    out_buf = sb.take(2 * TN * 4);
    int64_t slot = 0;
    for (int64_t m = 0; m < MT; ++m)
      for (int64_t n = 0; n < NT; ++n) {
        const int32_t pn = cols(m, TM, P), fn = cols(n, TN, F);
        const AccessPattern ps = psum_tile(pn, fn);
        for (int64_t k = 0; k < KT; ++k, ++slot) {
          const int64_t so = sbuf_ + (slot % nbuf) * TM * es, mo = mbuf + (slot % nbuf) * TN * es;
          load(so, true, k, m * TM, pn);
          load(mo, false, k, n * TN, fn);
          matmul(ps, so, mo, k, pn, fn, k == 0, k == KT - 1);
        }
        defer([=, &finish] { finish(ps, m, n * TN, pn, fn); });
      }
  } else if (sch == MatmulSchedule::hoisted || sch == MatmulSchedule::blocked_mn) {
    // hoisted is blocked_mn with 1x1 blocks. A step is one (stat block, mov block) pair.
    const int64_t BMt = sch == MatmulSchedule::hoisted ? 1 : bm, BNt = sch == MatmulSchedule::hoisted ? 1 : bn;
    const int64_t stat_bytes = BMt * KT * TM * es, mov_bytes = BNt * KT * TN * es;
    out_buf = sb.take(2 * TN * 4);
    const int64_t s_sets = sets_of(stat_bytes, mov_bytes);
    const int64_t stat_blk = sb.take(s_sets * stat_bytes);
    const int64_t m_sets = sets_of(mov_bytes, 0);
    const int64_t mov_blk = sb.take(m_sets * mov_bytes);
    const int64_t MB = ceil_div(MT, BMt), NB = ceil_div(NT, BNt);
    std::vector<Step> steps;
    for (int64_t mb = 0; mb < MB; ++mb)
      for (int64_t nb = 0; nb < NB; ++nb) {
        const int64_t so = stat_blk + (mb % s_sets) * stat_bytes;
        const int64_t mo = mov_blk + (static_cast<int64_t>(steps.size()) % m_sets) * mov_bytes;
        const int64_t m_lo = mb * BMt, m_hi = std::min(MT, (mb + 1) * BMt), n_lo = nb * BNt, n_hi = std::min(NT, (nb + 1) * BNt);
        Step st;
        if (nb == 0)
          st.load_stat = [=, &load, &cols] {
            for (int64_t m = m_lo; m < m_hi; ++m)
              for (int64_t k = 0; k < KT; ++k) load(so + ((m - m_lo) * KT + k) * TM * es, true, k, m * TM, cols(m, TM, P));
          };
        st.load_mov = [=, &load, &cols] {
          for (int64_t n = n_lo; n < n_hi; ++n)
            for (int64_t k = 0; k < KT; ++k) load(mo + ((n - n_lo) * KT + k) * TN * es, false, k, n * TN, cols(n, TN, F));
        };
        st.compute = [=, &psum_tile, &matmul, &defer, &finish, &cols] {
          for (int64_t m = m_lo; m < m_hi; ++m)
            for (int64_t n = n_lo; n < n_hi; ++n) {
              const int32_t pn = cols(m, TM, P), fn = cols(n, TN, F);
              const AccessPattern ps = psum_tile(pn, fn);
              for (int64_t k = 0; k < KT; ++k)
                matmul(ps, so + ((m - m_lo) * KT + k) * TM * es, mo + ((n - n_lo) * KT + k) * TN * es, k, pn, fn, k == 0, k == KT - 1);
              defer([=, &finish] { finish(ps, m, n * TN, pn, fn); });
            }
        };
        steps.push_back(std::move(st));
      }
    run_steps(steps, s_sets, m_sets);
  } else {  // blocked_mnk
    const int64_t BM = bm * TM, BN = bn * TN;
    // Accumulators: every stationary tile row x the block's column tiles, in the compute dtype as
    // the tutorial has them (dtype=lhsT.dtype): PSUM sums each K block in fp32, the running sum
    // over K blocks rounds to the compute dtype once per block. Half the SBUF of fp32 leaves room
    // to double-buffer the operand blocks.
    const DType adt = ct;
    const int64_t aes = static_cast<int64_t>(dtype_size(adt)), oes = out.ref.es();
    const int64_t acc = sb.take(MT * BN * aes);
    out_buf = sb.take(2 * BN * oes);
    const int64_t m_bytes = bk * BN * es, s_bytes = bk * BM * es;
    const int64_t m_sets = sets_of(m_bytes, s_bytes);
    const int64_t mov_blk = sb.take(m_sets * m_bytes);
    const int64_t s_sets = sets_of(s_bytes, 0);
    const int64_t stat_blk0 = sb.take(s_sets * s_bytes);
    const int64_t KB = ceil_div(KT, bk), NB = ceil_div(F, BN), MB = ceil_div(P, BM);
    // A step is one (N block, K block, M block): its stat block (and, first in a K block, the mov
    // block) loaded, its tile pairs multiplied and accumulated.
    std::vector<Step> steps;
    for (int64_t nb = 0; nb < NB; ++nb) {
      const int64_t f0 = nb * BN;
      const int32_t fnb = static_cast<int32_t>(std::min(BN, F - f0));
      for (int64_t kb = 0; kb < KB; ++kb) {
        const int64_t k_lo = kb * bk, k_hi = std::min(KT, (kb + 1) * bk);
        const int64_t mo = mov_blk + ((nb * KB + kb) % m_sets) * m_bytes;
        for (int64_t mb = 0; mb < MB; ++mb) {
          const int64_t so = stat_blk0 + (static_cast<int64_t>(steps.size()) % s_sets) * s_bytes;
          const int64_t p0 = mb * BM;
          const int32_t pnb = static_cast<int32_t>(std::min(BM, P - p0));
          Step st;
          if (mb == 0)
            st.load_mov = [=, &load] {
              for (int64_t k = k_lo; k < k_hi; ++k) load(mo + (k - k_lo) * BN * es, false, k, f0, fnb);
            };
          st.load_stat = [=, &load] {
            for (int64_t k = k_lo; k < k_hi; ++k) load(so + (k - k_lo) * BM * es, true, k, p0, pnb);
          };
          const bool first = kb == 0 && mb == 0, last = kb == KB - 1 && mb == MB - 1;
          st.compute = [=, &psum_tile, &matmul, &defer, &cols, &out_count, &x, &epi, &job] {
            if (first)  // zero this N block's accumulators
              for (int64_t m = 0; m < MT; ++m) {
                Instr z;
                z.op = Op::memset;
                z.dst = on_chip(Space::sbuf, adt, 0, cols(m, TM, P), acc + m * BN * aes, {{fnb, 1}});
                z.imm[0] = 0.0;
                x.em.emit(z, Lane::vector);
              }
            for (int64_t j = 0; j * TN < fnb; ++j)
              for (int64_t i = 0; i * TM < pnb; ++i) {
                const int32_t pn = static_cast<int32_t>(std::min(TM, pnb - i * TM)), fn = static_cast<int32_t>(std::min(TN, fnb - j * TN));
                const AccessPattern ps = psum_tile(pn, fn);
                for (int64_t k = k_lo; k < k_hi; ++k)
                  matmul(ps, so + ((k - k_lo) * BM + i * TM) * es, mo + ((k - k_lo) * BN + j * TN) * es, k, pn, fn, k == k_lo, k == k_hi - 1);
                const AccessPattern a = on_chip(Space::sbuf, adt, 0, pn, acc + ((mb * bm + i) * BN + j * TN) * aes, {{fn, 1}});
                defer([=, &x] { x.tensor_tensor(Alu::add, a, a, ps); });
              }
            if (!last) return;
            defer({});
            // A row of accumulators packed into one buffer, stored with one DMA.
            for (int64_t m = 0; m < MT; ++m) {
              const int32_t pn = cols(m, TM, P);
              const int64_t packed = out_buf + (out_count++ % 2) * BN * oes;
              for (int64_t j = 0; j * TN < fnb; ++j) {
                const int32_t fn = static_cast<int32_t>(std::min(TN, fnb - j * TN));
                epi.run(on_chip(Space::sbuf, out.ref.dtype, 0, pn, packed + j * TN * oes, {{fn, 1}}),
                        on_chip(Space::sbuf, adt, 0, pn, acc + (m * BN + j * TN) * aes, {{fn, 1}}),
                        tile_at(job.bias, job.bias_rs, job.bias_cs, m * TM, f0 + j * TN, fn),
                        tile_at(job.residual, job.res_rs, job.res_cs, m * TM, f0 + j * TN, fn), m);
              }
              x.em.dma(out.by_rows(m * TM, pn, f0, fnb), on_chip(Space::sbuf, out.ref.dtype, 0, pn, packed, {{fnb, 1}}), Emitter::DmaClass::spread_store);
            }
          };
          steps.push_back(std::move(st));
        }
      }
    }
    run_steps(steps, s_sets, m_sets);
  }
  defer({});
  x.used(sb);
  x.used_psum();
  return {};
}

}  // namespace tessera::neuroncore
