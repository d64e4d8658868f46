// MatMul of any rank (numpy semantics: 1-D operands promoted, batch dimensions broadcast) as 2-D
// matmuls over strided views (kernels/matmul.hpp). When the right operand does not change across
// the batch (a linear layer over [batch, seq, d]), the batch folds into M: one 2-D matmul.
#include <algorithm>
#include <array>
#include <deque>

#include "isa/error.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"
#include "mapper/neuroncore/kernels/matmul.hpp"

namespace tessera::neuroncore {

using graph::Node;
using graph::Strided;

namespace {

// A constant operand laid out for the tensor engine at compile time, in the compute dtype: A as
// A^T (K before M, so stationary tiles load directly), B as it is.
TensorRef constant_operand(Ctx& x, const std::string& v, bool is_a) {
  const Tensor& data = *x.g.value(v).data;
  const Shape& s = data.shape();
  if (!is_a || s.size() < 2) {
    if (const TensorRef* r = x.st.stored(v + "@mm")) return *r;  // its prefetch or an earlier reader made it
    return x.st.constant(v + "@mm", data.cast(DType::f32).cast(x.opt.compute));
  }
  const int64_t M = s[s.size() - 2], K = s.back(), batch = data.numel() / (M * K);
  const auto f = data.cast(DType::f32).to_f32();
  std::vector<float> t(f.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) t[static_cast<size_t>((b * K + k) * M + m)] = f[static_cast<size_t>((b * M + m) * K + k)];
  Shape ts = s;
  std::swap(ts[ts.size() - 1], ts[ts.size() - 2]);
  TensorRef r = x.st.constant(v + "@T", Tensor::from_f32(ts, std::move(t)).cast(x.opt.compute));
  std::vector<int64_t> perm;
  for (size_t i = 0; i < s.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  r.view = graph::permute(r.view, perm);
  return r;
}

Strided insert_unit(Strided v, size_t at) {
  v.shape.insert(v.shape.begin() + static_cast<std::ptrdiff_t>(at), 1);
  v.strides.insert(v.strides.begin() + static_cast<std::ptrdiff_t>(at), 0);
  return v;
}

Mat mat(const TensorRef& r, const Strided& v) {
  Mat m;
  m.ref = r;
  m.off = v.offset;
  m.rows = v.shape[0];
  m.cols = v.shape[1];
  m.rs = v.strides[0];
  m.cs = v.strides[1];
  return m;
}

// Folds the row dims (the batch dims and M) of views [batch..., M, X] (X each view's own) into
// rows: all of them when the strides allow; else the largest block of them that merges in every
// view, over some order of them -- the same for every view, rows being independent -- the rest left
// as batch dims. Returns the batches left (1: every view 2-D). PyTorch's seq-first attention
// projections see [S, B, d] as a batch of S matmuls of B rows, B outermost in memory; without the
// partial fold a batch-2 BERT layer ran each as 128 matmuls of 2 rows, each streaming the weight.
int64_t fold_rows(const Shape& batch, int64_t M, const std::vector<Strided*>& views) {
  const int64_t nb = shape_numel(batch);
  if (nb <= 1) return nb;
  std::vector<Strided> full;
  for (const Strided* v : views)
    if (auto f = graph::reshape(*v, {nb * M, v->shape.back()})) full.push_back(*f);
  if (full.size() == views.size()) {
    for (size_t i = 0; i < views.size(); ++i) *views[i] = full[i];
    return 1;
  }
  if (batch.size() > 4) return nb;
  const size_t nrd = batch.size() + 1;  // row dims: the batch dims, then M
  Shape rdims = batch;
  rdims.push_back(M);
  std::vector<int64_t> perm(nrd);
  for (size_t i = 0; i < nrd; ++i) perm[i] = static_cast<int64_t>(i);
  int64_t best_outer = nb;
  std::vector<Strided> best;
  do {
    for (size_t j = 0; j < nrd; ++j) {  // row dims perm[j..] fold into the rows
      int64_t inner = 1;
      Shape outer;
      for (size_t i = 0; i < nrd; ++i) {
        const int64_t d = rdims[static_cast<size_t>(perm[i])];
        if (i < j) outer.push_back(d);
        else inner *= d;
      }
      if (shape_numel(outer) >= best_outer) continue;
      std::vector<int64_t> p(perm);
      p.push_back(static_cast<int64_t>(nrd));
      std::vector<Strided> got;
      for (const Strided* v : views) {
        Shape sh = outer;
        sh.push_back(inner);
        sh.push_back(v->shape.back());
        auto r = graph::reshape(graph::permute(*v, p), sh);
        if (!r) break;
        got.push_back(*r);
      }
      if (got.size() != views.size()) continue;
      best_outer = shape_numel(outer);
      best = std::move(got);
      break;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  if (best_outer < nb)
    for (size_t i = 0; i < views.size(); ++i) *views[i] = best[i];
  return best_outer;
}

// A right operand [K, N] (view `b` of B, N contiguous) that several batches share, loaded into SBUF
// once as [KT][N] per partition when it takes at most a third of what is left: its offset, or -1
// (then every batch streams it). MatmulJob::b_pre.
int64_t load_shared_b(Ctx& x, const TensorRef& B, const Strided& b, Sbuf& sb) {
  if (b.strides[1] != 1) return -1;
  const int64_t K = b.shape[0], N = b.shape[1], P = x.cfg.tensor_rows, KT = ceil_div(K, P), es = B.es();
  if (KT * N * es * 3 > sb.limit - sb.next) return -1;
  const int64_t at = sb.take(KT * N * es);
  for (int64_t k = 0; k < KT; ++k) {
    const int32_t kp = static_cast<int32_t>(std::min(P, K - k * P));
    x.em.dma(on_chip(Space::sbuf, B.dtype, 0, kp, at + k * N * es, {{static_cast<int32_t>(N), 1}}),
             hbm_ap(B, b.offset + k * P * b.strides[0], kp, b.strides[0], {{static_cast<int32_t>(N), 1}}), Emitter::DmaClass::spread);
  }
  return at;
}

}  // namespace

// The last two dims of `v` at batch index `b` (row-major over v's batch dims).
Strided batch_slice(const Strided& v, int64_t b) {
  Strided r;
  r.offset = v.offset;
  const size_t nb = v.shape.size() - 2;
  for (size_t i = nb; i-- > 0;) {
    r.offset += (b % v.shape[i]) * v.strides[i];
    b /= v.shape[i];
  }
  r.shape = {v.shape[nb], v.shape[nb + 1]};
  r.strides = {v.strides[nb], v.strides[nb + 1]};
  return r;
}

namespace {

// A sibling group's views, rows folded (fold_rows) the same way for all: A [batch.., rows, K] and
// each member's output and bias [batch.., rows, N_s]; nb batches left (1: all 2-D).
struct GroupViews {
  Strided a;
  std::vector<Strided> y, bias;
  TensorRef A;
  std::vector<TensorRef> Y;
  int64_t K = 0, nb = 1;
};

std::optional<GroupViews> group_views(Ctx& x, const std::vector<const Node*>& nodes, const std::vector<const Epilogue*>& eps) {
  GroupViews g;
  const std::string& ain = eps[0]->operand[0].empty() ? nodes[0]->inputs[0] : eps[0]->operand[0];
  g.A = x.st.ref(ain);
  const Shape& as = g.A.shape();
  if (as.size() < 2) return std::nullopt;
  const int64_t M = as[as.size() - 2];
  g.K = as.back();
  const Shape batch(as.begin(), as.end() - 2);
  g.a = g.A.view;
  for (size_t s = 0; s < nodes.size(); ++s) {
    const TensorRef Y = x.st.ref(eps[s]->out);
    const Shape& ys = Y.shape();
    if (ys.size() != as.size() || !std::equal(as.begin(), as.end() - 1, ys.begin())) return std::nullopt;
    g.Y.push_back(Y);
    g.y.push_back(Y.view);
    g.bias.push_back(eps[s]->bias ? eps[s]->bias->view : Y.view);
  }
  std::vector<Strided*> views{&g.a};
  for (size_t s = 0; s < nodes.size(); ++s) {
    views.push_back(&g.y[s]);
    views.push_back(&g.bias[s]);
  }
  g.nb = fold_rows(batch, M, views);
  return g;
}

}  // namespace

bool matmul_group_fits(Ctx& x, const std::vector<const Node*>& nodes, const std::vector<const Epilogue*>& eps) {
  if (nodes.size() < 2 || x.opt.matmul_schedule != MatmulSchedule::automatic) return false;
  int64_t K = -1;
  for (size_t s = 0; s < nodes.size(); ++s) {
    const Epilogue& ep = *eps[s];
    if (ep.residual || ep.norm || !ep.operand[1].empty()) return false;
    const auto& bv = x.g.value(nodes[s]->inputs[1]);
    if (!bv.data || bv.shape.size() != 2) return false;
    if (K >= 0 && bv.shape[0] != K) return false;
    // Narrow outputs (under 128 columns) gain nothing: their kernels overlap each other's
    // evacuation anyway (transformer_layer's d-64 projections grouped: +3%).
    if (bv.shape[1] < 128) return false;
    K = bv.shape[0];
  }
  const auto g = group_views(x, nodes, eps);
  if (!g || g->K != K) return false;
  // The left operand's row tiles stay resident (the core's A-resident loop, which splits the output).
  const int64_t es = static_cast<int64_t>(dtype_size(x.opt.compute));
  return ceil_div(K, x.cfg.tensor_rows) * x.cfg.tensor_cols * es <= 32 * 1024;
}

Status matmul_group(Ctx& x, const std::vector<const Node*>& nodes, const std::vector<const Epilogue*>& eps) {
  auto gv = group_views(x, nodes, eps);
  if (!gv) return Status::fail("sibling matmuls whose views do not fold");
  const GroupViews& g = *gv;
  // The right operands side by side: one constant [K, N_1 + N_2 + ...] in the compute dtype.
  std::vector<std::vector<float>> bs;
  std::vector<int64_t> ns;
  std::string key;
  for (const Node* n : nodes) {
    const Tensor& t = *x.g.value(n->inputs[1]).data;
    bs.push_back(t.cast(DType::f32).to_f32());
    ns.push_back(t.shape()[1]);
    key += n->inputs[1] + "|";
  }
  const int64_t K = g.K;
  int64_t Ntot = 0;
  for (int64_t n : ns) Ntot += n;
  std::vector<float> cat(static_cast<size_t>(K * Ntot));
  for (int64_t k = 0, off = 0; k < K; ++k, off = 0)
    for (size_t s = 0; s < bs.size(); ++s) {
      std::copy_n(bs[s].begin() + k * ns[s], ns[s], cat.begin() + k * Ntot + off);
      off += ns[s];
    }
  const TensorRef B = x.st.constant(key + "@cat", Tensor::from_f32({K, Ntot}, std::move(cat)).cast(x.opt.compute));
  const std::string name = nodes[0]->name + "+" + std::to_string(nodes.size() - 1) + " siblings";
  x.begin(name);
  Sbuf sb = x.sbuf(name);
  std::deque<EpilogueEmitter> epis;
  for (size_t s = 0; s < nodes.size(); ++s) epis.emplace_back(x, *eps[s], sb, 512);
  auto slice = [&](const Strided& v, int64_t i) { return v.rank() == 2 ? v : batch_slice(v, i); };
  auto job_at = [&](int64_t i) {
    MatmulJob job;
    job.name = name;
    job.a = mat(g.A, slice(g.a, i));
    job.b = mat(B, B.view);
    job.out = mat(g.Y[0], slice(g.y[0], i));
    int64_t n0 = 0;
    for (size_t s = 0; s < nodes.size(); ++s) {
      const Strided bsl = slice(g.bias[s], i);
      MatmulSegment sg;
      sg.n0 = n0;
      sg.n = ns[s];
      sg.out = mat(g.Y[s], slice(g.y[s], i));
      sg.bias.elem = bsl.offset;
      sg.bias_rs = bsl.strides[0];
      sg.bias_cs = bsl.strides[1];
      sg.epi = &epis[s];
      job.segments.push_back(sg);
      n0 += ns[s];
    }
    return job;
  };
  {
    const MatmulJob j0 = job_at(0);
    for (size_t s = 0; s < nodes.size(); ++s)
      if (eps[s]->bias && j0.segments[s].bias_rs == 0) epis[s].preload_row_bias(j0.segments[s].bias.elem, ns[s], j0.segments[s].bias_cs);
  }
  int64_t tiles = 0;
  if (g.nb == 1) {
    matmul_auto(x, job_at(0), epis.front(), sb, tiles);
    x.used(sb);
    return {};
  }
  // Several batches (rows that fold only per sequence): the weights load into SBUF once
  // (load_shared_b), and the batches alternate between two regions of the rest.
  const int64_t b_pre = load_shared_b(x, B, B.view, sb);
  x.used(sb);
  const int64_t half = (sb.limit - sb.next) / 2 / 64 * 64;
  for (int64_t i = 0; i < g.nb; ++i) {
    MatmulJob j = job_at(i);
    j.b_pre = b_pre;
    j.b_pre_row = Ntot;
    Sbuf region = x.sbuf(name, sb.next + (i % 2) * half, sb.next + (i % 2 + 1) * half);
    matmul_auto(x, j, epis.front(), region, tiles);
    x.used(region);
  }
  return {};
}

int64_t prefetch_bytes(const Ctx& x, const Node& n, const Epilogue& ep) {
  if (n.op != "MatMul" || x.opt.matmul_schedule != MatmulSchedule::automatic) return 0;
  const std::string& ain = ep.operand[0].empty() ? n.inputs[0] : ep.operand[0];
  const std::string& bin = ep.operand[1].empty() ? n.inputs[1] : ep.operand[1];
  const auto& av = x.g.value(ain);
  const auto& bv = x.g.value(bin);
  if (!bv.data || bv.shape.size() != 2 || av.data || av.shape.size() < 2) return 0;
  const int64_t K = bv.shape[0], N = bv.shape[1], P = x.cfg.tensor_rows;
  const int64_t es = static_cast<int64_t>(dtype_size(x.opt.compute));
  // The left operand's stationary tiles for all of K stay resident beside it (the core's
  // A-resident loop, which a B in SBUF takes).
  if (ceil_div(K, P) * x.cfg.tensor_cols * es > 32 * 1024) return 0;
  return (ceil_div(K, P) * N * es + 63) / 64 * 64;
}

namespace {
// Columns per prefetch DMA: at least an output tile (512) and 2 KiB per partition (near peak
// [DMA]); short enough that a kernel's own loads issued behind one do not wait long.
int64_t prefetch_cols(int64_t N, int64_t es) { return std::min(N, std::max<int64_t>(512, 2048 / es)); }
}  // namespace

int64_t prefetch_dmas(const Ctx& x, const Node& n, const Epilogue& ep) {
  const std::string& bin = ep.operand[1].empty() ? n.inputs[1] : ep.operand[1];
  const Shape& s = x.g.value(bin).shape;
  const int64_t es = static_cast<int64_t>(dtype_size(x.opt.compute));
  return ceil_div(s[0], x.cfg.tensor_rows) * ceil_div(s[1], prefetch_cols(s[1], es));
}

double prefetch_dma_seconds(const Ctx& x, const Node& n, const Epilogue& ep) {
  const std::string& bin = ep.operand[1].empty() ? n.inputs[1] : ep.operand[1];
  const Shape& s = x.g.value(bin).shape;
  const int64_t es = static_cast<int64_t>(dtype_size(x.opt.compute));
  // A full K-tile's DMA, split by partition groups of 8 over the engines (the core's spread).
  const int64_t rows = std::min(s[0], x.cfg.tensor_rows), groups = std::max<int64_t>(1, std::min<int64_t>(x.cfg.dma_engines, rows / 8));
  return dma_transfer_seconds(rows / groups * prefetch_cols(s[1], es) * es, rows / groups, x.cfg);
}

void prefetch(Ctx& x, const Node& n, const Epilogue& ep, int64_t offset, int64_t first, int64_t last) {
  const std::string& bin = ep.operand[1].empty() ? n.inputs[1] : ep.operand[1];
  const TensorRef B = constant_operand(x, bin, false);
  const int64_t K = B.shape()[0], N = B.shape()[1], P = x.cfg.tensor_rows, es = B.es(), KT = ceil_div(K, P);
  const int64_t cols = prefetch_cols(N, es);
  // Column blocks outermost, as the A-resident loop reads B (output tile by output tile).
  for (int64_t i = first; i < last; ++i) {
    const int64_t n0 = i / KT * cols, k = i % KT, k0 = k * P;
    const int32_t kp = static_cast<int32_t>(std::min(P, K - k0)), nn = static_cast<int32_t>(std::min(cols, N - n0));
    x.em.dma(on_chip(Space::sbuf, B.dtype, 0, kp, offset + (k * N + n0) * es, {{nn, 1}}),
             hbm_ap(B, B.view.offset + k0 * B.view.strides[0] + n0 * B.view.strides[1], kp, B.view.strides[0],
                    {{nn, static_cast<int32_t>(B.view.strides[1])}}),
             Emitter::DmaClass::prefetch);
  }
}

Status matmul(Ctx& x, const Node& n, const Epilogue& ep) {
  const std::string& ain = ep.operand[0].empty() ? n.inputs[0] : ep.operand[0];
  const std::string& bin = ep.operand[1].empty() ? n.inputs[1] : ep.operand[1];
  const auto& av = x.g.value(ain);
  const auto& bv = x.g.value(bin);
  if (av.shape.empty() || bv.shape.empty()) return Status::fail("MatMul of a scalar operand");
  TensorRef A = av.data ? constant_operand(x, ain, true) : x.st.ref(ain);
  TensorRef B = bv.data ? constant_operand(x, bin, false) : x.st.ref(bin);
  const TensorRef Y = x.st.ref(ep.out);
  const bool a1 = av.shape.size() == 1, b1 = bv.shape.size() == 1;
  // numpy promotion: [K] @ B is [1, K] @ B without the 1; A @ [K] is A @ [K, 1] without the 1.
  auto promote_out = [&](Strided v) {
    if (a1) v = insert_unit(v, v.shape.size() - (b1 ? 0 : 1));
    if (b1) v = insert_unit(v, v.shape.size());
    return v;
  };
  Strided a = a1 ? insert_unit(A.view, 0) : A.view;
  Strided b = b1 ? insert_unit(B.view, 1) : B.view;
  Strided y = promote_out(Y.view);
  Strided bias = ep.bias ? promote_out(ep.bias->view) : y, res = ep.residual ? promote_out(ep.residual->view) : y;
  const Shape batch(y.shape.begin(), y.shape.end() - 2);
  const int64_t M = y.shape[y.shape.size() - 2], N = y.shape.back(), K = a.shape.back();
  auto with_batch = [&](const Strided& v, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return graph::broadcast_to(v, s);
  };
  a = with_batch(a, M, K);
  b = with_batch(b, K, N);
  int64_t nb = shape_numel(batch);
  // A right operand that repeats over the batch: fold the batch into M when the strides allow.
  if (nb > 1) {
    bool b_repeats = true;
    for (size_t i = 0; i < batch.size(); ++i) b_repeats = b_repeats && (b.strides[i] == 0 || batch[i] == 1);
    if (b_repeats) {
      const int64_t folded = fold_rows(batch, M, {&a, &y, &bias, &res});
      if (folded < nb) {
        b = batch_slice(b, 0);
        nb = folded;
      }
    }
  }
  // B already in SBUF: prefetched by earlier kernels (lower.cpp), or (set below) a right operand
  // shared by the batches, loaded once.
  int64_t b_pre = -1;
  const auto pf = x.prefetched.find(n.name);
  // (Laid out as B's own [K, N]; a batch that did not fold into the rows reads B per batch and
  // streams it as before.)
  if (pf != x.prefetched.end()) {
    bool same = true;  // every batch reads B's own [K, N]
    for (size_t i = 0; i + 2 < b.shape.size(); ++i) same = same && (b.strides[i] == 0 || b.shape[i] == 1);
    const Strided b2 = b.shape.size() == 2 ? b : batch_slice(b, 0);
    if (same && b2.offset == B.view.offset && b2.strides == B.view.strides && b2.shape == B.view.shape) b_pre = pf->second;
  }
  auto job_at = [&](int64_t i) {
    const bool flat = a.shape.size() == 2;
    const Strided ai = flat ? a : batch_slice(a, i), bi = b.shape.size() == 2 ? b : batch_slice(b, i), yi = flat ? y : batch_slice(y, i);
    const Strided bsi = flat ? bias : batch_slice(bias, i), rsi = flat ? res : batch_slice(res, i);
    MatmulJob j;
    j.name = n.name;
    j.a = mat(A, ai);
    j.b = mat(B, bi);
    j.out = mat(Y, yi);
    j.bias.elem = bsi.offset;
    j.bias_rs = bsi.strides[0];
    j.bias_cs = bsi.strides[1];
    j.residual.elem = rsi.offset;
    j.res_rs = rsi.strides[0];
    j.res_cs = rsi.strides[1];
    j.b_pre = b_pre;
    j.b_pre_row = b_pre >= 0 ? b.shape.back() : 0;
    return j;
  };
  if (ep.norm) {
    // The fused LayerNorm needs whole rows in one job and room for them; otherwise the matmul writes
    // the LayerNorm's input and the LayerNorm runs as its own kernel.
    // (The matmul's own buffers: about 96 KiB streaming its right operand; with that operand
    // prefetched, A's row tile resident over K plus 48 KiB of output slots, epilogue and staging.)
    const int64_t room = x.sbuf(n.name).limit;
    const int64_t own = b_pre >= 0 ? ceil_div(K, 128) * 128 * A.es() + 48 * 1024 : 96 * 1024;
    const bool fits = 6 * N * 4 + own <= room;
    if (nb != 1 || x.opt.matmul_schedule != MatmulSchedule::automatic || !fits) {
      Epilogue plain = ep;
      plain.norm.reset();
      plain.out = ep.norm->in;
      const Status s = matmul(x, n, plain);
      if (!s.ok) return s;
      return rows(x, *ep.norm->node);
    }
  }
  if (x.opt.matmul_schedule != MatmulSchedule::automatic) {
    if (nb != 1) return Status::fail("mapping.matmul_schedule applies to 2-D matmuls; this one has " + std::to_string(nb) + " batches", "use matmul_schedule auto");
    return matmul_nki(x, job_at(0), ep);
  }
  x.begin(n.name);
  Sbuf sb = x.sbuf(n.name);
  EpilogueEmitter epi(x, ep, sb, 512);
  int64_t tiles = 0;
  if (nb == 1) {
    MatmulJob j = job_at(0);
    if (ep.norm) j.norm = &*ep.norm;
    if (j.bias_rs == 0) epi.preload_row_bias(j.bias.elem, j.out.cols, j.bias_cs);
    matmul_auto(x, j, epi, sb, tiles);
    x.used(sb);
    return {};
  }
  // A right operand the batches share (a linear layer whose batch did not all fold into M) loads
  // once for all of them (the batch-8 BERT layer's projections: 8 jobs of 128 rows).
  if (b.shape.size() == 2 && b_pre < 0) b_pre = load_shared_b(x, B, b, sb);
  // Batches rotate over R regions of SBUF, as many as hold a batch's working set, so that the next
  // batches' loads overlap one's compute: at least two, at most the batches and the PSUM banks a
  // batch's accumulation can rotate over beside the two of transposed loads (more batches in flight
  // than banks wait for each other's evacuations).
  x.used(sb);
  const int64_t max_regions = std::max<int64_t>(2, std::min(nb, x.banks() - 2));
  const int64_t per = (matmul_auto_sbuf(x, job_at(0)) + 63) / 64 * 64;
  const int64_t R = std::clamp<int64_t>(per > 0 ? (sb.limit - sb.next) / per : 2, 2, max_regions);
  const int64_t half = (sb.limit - sb.next) / R / 64 * 64;
  for (int64_t i = 0; i < nb; ++i) {
    Sbuf region = x.sbuf(n.name, sb.next + (i % R) * half, sb.next + (i % R + 1) * half);
    matmul_auto(x, job_at(i), epi, region, tiles);
    x.used(region);
  }
  return {};
}

}  // namespace tessera::neuroncore
