// Row kernels: ops that reduce or normalise over a set of axes. The kept axes become rows (on the
// partitions, 128 at a time), the reduced axes one row along the free dimension, whatever their
// position and strides: Softmax and LogSoftmax (max, exp with its sum accumulated, reciprocal),
// LayerNormalization (bn_stats / bn_aggr, rsqrt(var + eps)), RMSNormalization (the square's sum
// accumulated, rsqrt(mean + eps)), InstanceNormalization, and the reductions ReduceSum / Mean / Max
// / Min / Prod / SumSquare / L1 / L2 / LogSumExp and the global poolings.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <stdexcept>

#include "mapper/neuroncore/kernels/kernels.hpp"
#include "mapper/neuroncore/kernels/tiling.hpp"

namespace tessera::neuroncore {

// A norm's per-column rows of this many bytes or more are replicated by the tensor engine
// (Ctx::replicate_row), shorter ones by a stride-0 DMA on the bulk queues. Higher than the matmul
// epilogue's kReplicateRowBytes: at 128 B the zoo's decoder was 1.8% slower (the replication's
// PSUM banks held up the attention kernel before it), at 1 KiB no scenario is slower.
constexpr int64_t kRowsReplicateBytes = 1024;

using graph::Node;
using graph::Strided;

namespace {

// A whole row must fit in SBUF a few times over (input, work and output, double-buffered).
constexpr int64_t kMaxRow = 8192;

bool is_reduce(const std::string& op) {
  static const std::set<std::string> ops = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                                            "ReduceL1",  "ReduceL2",   "ReduceLogSumExp", "ReduceLogSum", "GlobalAveragePool", "GlobalMaxPool"};
  return ops.count(op) != 0;
}

// The reduced / normalised axes of `n` over an input of rank r.
std::vector<int64_t> axes_of(const Ctx& x, const Node& n, int64_t r) {
  std::vector<int64_t> axes;
  auto from = [&](int64_t a) {
    for (int64_t i = a < 0 ? a + r : a; i < r; ++i) axes.push_back(i);
  };
  if (n.op == "Softmax" || n.op == "LogSoftmax") return {[&] { int64_t a = n.attrs.get_int("axis", -1); return a < 0 ? a + r : a; }()};
  if (n.op == "LayerNormalization" || n.op == "RMSNormalization") from(n.attrs.get_int("axis", -1));
  else if (n.op == "InstanceNormalization" || n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") from(2);
  else {
    axes = n.attrs.get_ints("axes");
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = x.g.value(n.inputs[1]).data->to_i64();
    for (auto& a : axes)
      if (a < 0) a += r;
    if (axes.empty() && !n.attrs.get_int("noop_with_empty_axes", 0))
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

// Views permuted to [kept..., reduced...]; rows and the row's dims coalesced separately.
Loop row_loop(std::vector<Strided> views, size_t nkept) {
  auto part = [&](size_t from, size_t to) {
    std::vector<Strided> p;
    for (const auto& v : views) {
      Strided s;
      s.shape.assign(v.shape.begin() + static_cast<std::ptrdiff_t>(from), v.shape.begin() + static_cast<std::ptrdiff_t>(to));
      s.strides.assign(v.strides.begin() + static_cast<std::ptrdiff_t>(from), v.strides.begin() + static_cast<std::ptrdiff_t>(to));
      p.push_back(s);
    }
    std::vector<Strided*> ptrs;
    for (auto& s : p) ptrs.push_back(&s);
    graph::coalesce(ptrs);
    return p;
  };
  const auto rows = part(0, nkept), cols = part(nkept, views[0].shape.size());
  Loop l;
  l.dims = rows[0].shape;
  l.dims.insert(l.dims.end(), cols[0].shape.begin(), cols[0].shape.end());
  for (size_t j = 0; j < views.size(); ++j) {
    auto s = rows[j].strides;
    s.insert(s.end(), cols[j].strides.begin(), cols[j].strides.end());
    l.strides.push_back(s);
    l.offsets.push_back(views[j].offset);
  }
  l.k = rows[0].shape.size();
  l.chunk = l.k < l.dims.size() ? l.dims[l.k] : 1;
  return l;
}

Strided permuted(const Strided& v, const std::vector<int64_t>& perm) { return graph::permute(v, perm); }

}  // namespace

bool is_row_op(const std::string& op) {
  return is_reduce(op) || op == "Softmax" || op == "LogSoftmax" || op == "LayerNormalization" || op == "RMSNormalization" ||
         op == "InstanceNormalization";
}

Status rows(Ctx& x, const Node& n) {
  const TensorRef X = x.st.ref(n.inputs[0]);
  const TensorRef Y = x.st.ref(n.outputs[0]);
  const int64_t r = X.rank();
  const auto axes = axes_of(x, n, r);
  const bool reduce = is_reduce(n.op);
  if (n.outputs.size() > 1 && std::any_of(n.outputs.begin() + 1, n.outputs.end(), [](const std::string& o) { return !o.empty(); }))
    return Status::fail(n.op + "'s extra outputs (mean, inverse std) are not compiled");
  // [kept..., reduced...]
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i)
    if (!std::count(axes.begin(), axes.end(), i)) perm.push_back(i);
  const size_t nkept = perm.size();
  perm.insert(perm.end(), axes.begin(), axes.end());
  Strided xv = permuted(X.view, perm), yv;
  if (reduce) {  // the output over the kept dims, repeated (stride 0) along the reduced ones
    Shape kept;
    for (size_t i = 0; i < nkept; ++i) kept.push_back(xv.shape[i]);
    auto ry = graph::reshape(Y.view, kept);
    if (!ry) return Status::fail("the reduction's output view cannot be walked as its kept dims");
    yv = *ry;
    for (size_t i = nkept; i < perm.size(); ++i) {
      yv.shape.push_back(xv.shape[i]);
      yv.strides.push_back(0);
    }
  } else {
    yv = permuted(Y.view, perm);
  }
  std::vector<Strided> views{yv, xv};
  // Per-column operands (LayerNorm / RMSNorm scale and bias over the normalised dims) and per-row
  // ones (InstanceNorm's scale and bias per channel).
  std::vector<TensorRef> extra;
  const bool per_row = n.op == "InstanceNormalization";
  for (size_t k = 1; !reduce && k < n.inputs.size(); ++k) {
    if (n.inputs[k].empty() || n.op == "Softmax" || n.op == "LogSoftmax") continue;
    TensorRef e = x.st.ref(n.inputs[k]);
    Strided v;
    if (per_row) {  // [C] along dim 1 of [N, C, spatial...]
      v.shape = X.shape();
      v.strides.assign(static_cast<size_t>(r), 0);
      v.strides[1] = e.view.strides.empty() ? 0 : e.view.strides[0];
      v.offset = e.view.offset;
    } else {
      v = graph::broadcast_to(e.view, X.shape());
    }
    views.push_back(permuted(v, perm));
    extra.push_back(e);
  }
  Loop l = row_loop(views, nkept);
  if (l.dims.size() - l.k > 3) return Status::fail("more than three non-contiguous reduced dimensions");
  // A reduction walks a long row in chunks along its outermost dim, combining partial results;
  // the other row kernels keep a whole row in SBUF.
  const bool chunked = reduce && n.op != "ReduceLogSumExp";
  const int64_t whole = l.free_elems(l.chunk);
  if (chunked && l.k < l.dims.size()) l.chunk = std::max<int64_t>(1, std::min(l.chunk, kMaxRow / std::max<int64_t>(1, whole / l.chunk)));
  const int64_t C = l.free_elems(l.chunk);
  if (C > kMaxRow)
    return Status::fail("rows of " + std::to_string(whole) + " elements (the compiler keeps a whole row in SBUF; up to " + std::to_string(kMaxRow) + ")");
  const int64_t D = l.k < l.dims.size() ? l.dims[l.k] : 1;
  // Input, work and output rows (double-buffered in and out), per-column operands replicated.
  const int64_t need = 5 * C * 4 + 2 * 16 * 4 + static_cast<int64_t>(extra.size()) * (per_row ? 2 * 4 : C * 4) + 64 * 8;
  if (need > x.cfg.sbuf_partition_bytes)
    return Status::fail("rows of " + std::to_string(C) + " elements" + (extra.empty() ? "" : " with their scale and bias") + " need " +
                            std::to_string(need) + " bytes of SBUF per partition; it has " + std::to_string(x.cfg.sbuf_partition_bytes),
                        "the row kernel keeps a whole row (the reduced or normalised axes) in SBUF");
  x.begin(n.name);
  Sbuf sb = x.sbuf(n.name);
  sb.hint = "the row kernel keeps a whole row (the reduced or normalised axes) in SBUF";
  const int64_t xin = sb.take(2 * C * 4), work = sb.take(C * 4), yout = sb.take(2 * C * 4), small = sb.take(2 * 16 * 4);
  std::vector<int64_t> ebuf;
  for (size_t i = 0; i < extra.size(); ++i) ebuf.push_back(sb.take(per_row ? 2 * 4 : C * 4));
  x.used(sb);
  const int32_t P = static_cast<int32_t>(x.cfg.partitions);
  const std::vector<Dim> row_dims{{static_cast<int32_t>(C), 1}};
  auto row = [&](int32_t parts, int64_t off, DType t = DType::f32) { return on_chip(Space::sbuf, t, 0, parts, off, row_dims); };
  auto col = [&](int32_t parts, int64_t off) { return on_chip(Space::sbuf, DType::f32, 0, parts, off, {{1, 1}}); };
  // Per-column operands: loaded once, replicated on every partition -- rows of kRowsReplicateBytes
  // or more into partition 0 and over the partitions by the tensor engine (a LayerNorm's [768]
  // fp32 scale by a stride-0 DMA held four bulk queues 6.2 us), shorter ones by a stride-0 DMA.
  // The replications are emitted where the first tile needs them (after its statistics), so that
  // the first rows' load and statistics do not wait behind them (bundles issue in order). Over
  // the shipped NeuronCore scenarios this is marginally the fastest of the three places tried
  // (before the load, between load and statistics, here): BERT's first LayerNorm 11.8 -> 10.6 us,
  // the classifier's (64 rows) 8.7 -> 10.0 us.
  std::vector<std::function<void()>> replications;
  auto replicate = [&] {
    for (auto& rep : replications) rep();
    replications.clear();
  };
  if (!per_row)
    for (size_t i = 0; i < extra.size(); ++i) {
      const Packed p = pack(l.free_dims(2 + i, l.chunk));
      const DType dt = extra[i].dtype;
      if (p.elems * extra[i].es() >= kRowsReplicateBytes && sb.fits(P * extra[i].es())) {
        const int64_t ones = sb.take(P * extra[i].es());
        x.used(sb);
        x.em.dma(on_chip(Space::sbuf, dt, 0, 1, ebuf[i], p.sbuf), hbm_ap(extra[i], l.offsets[2 + i], 1, 0, p.hbm), Emitter::DmaClass::spread);
        replications.push_back([&x, dt, off = ebuf[i], count = p.elems, ones] { x.replicate_row(dt, off, count, ones); });
        continue;
      }
      x.em.dma(on_chip(Space::sbuf, dt, 0, P, ebuf[i], p.sbuf), hbm_ap(extra[i], l.offsets[2 + i], P, 0, p.hbm), Emitter::DmaClass::bulk);
    }
  const double eps = n.attrs.get_float("epsilon", 1e-5);
  int64_t t = 0;
  for (const Tile& tile : tiles_of(l, x.cfg.partitions)) {
    const int32_t pr = tile.parts;
    const int64_t xb = xin + (t % 2) * C * 4, yb = yout + (t % 2) * C * 4, sm = small + (t % 2) * 16 * 4;
    const AccessPattern y = reduce ? on_chip(Space::sbuf, Y.dtype, 0, pr, yb, {{1, 1}}) : row(pr, yb, Y.dtype);
    const std::string& op = n.op;
    auto load_x = [&](int64_t c0, int64_t cn, int64_t off) {
      const Packed xp = pack(l.free_dims(1, cn));
      const int64_t col0 = l.k < l.dims.size() ? c0 * l.strides[1][l.k] : 0;
      for (const Run& run : tile.runs)
        x.em.dma(on_chip(Space::sbuf, X.dtype, run.p0, run.parts, off, xp.sbuf), hbm_ap(X, run.offset[1] + col0, run.parts, l.row_stride(1), xp.hbm),
                 Emitter::DmaClass::spread);
      return on_chip(Space::sbuf, X.dtype, 0, pr, off, xp.read);
    };
    if (chunked) {
      const bool sums = op == "ReduceSum" || op == "ReduceMean" || op == "GlobalAveragePool" || op == "ReduceLogSum";
      const bool fn = op == "ReduceSumSquare" || op == "ReduceL1" || op == "ReduceL2";
      const Alu combine = op == "ReduceMax" || op == "GlobalMaxPool" ? Alu::max : op == "ReduceMin" ? Alu::min : op == "ReduceProd" ? Alu::multiply : Alu::add;
      const AccessPattern acc = col(pr, sm + 8);
      int64_t ci = 0;
      for (int64_t c0 = 0; c0 < D; c0 += l.chunk, ++ci) {
        const int64_t cn = std::min(l.chunk, D - c0);
        const AccessPattern xs = load_x(c0, cn, xin + ((t + ci) % 2) * C * 4);
        const AccessPattern part = ci == 0 ? acc : col(pr, sm + 4 * (ci % 2));
        const std::vector<Dim> wd{{static_cast<int32_t>(l.free_elems(cn)), 1}};
        if (fn) x.activation(on_chip(Space::sbuf, DType::f32, 0, pr, work, wd), xs, op == "ReduceL1" ? Func::abs : Func::square, 1.0, {}, 0.0, part);
        else x.reduce(part, xs, sums ? Alu::add : combine);
        if (ci > 0) x.tensor_tensor(combine, acc, acc, part);
      }
      const double inv = 1.0 / static_cast<double>(whole);
      if (op == "ReduceLogSum") x.activation(y, acc, Func::log);
      else if (op == "ReduceL2") x.activation(y, acc, Func::sqrt);
      else if (op == "ReduceMean" || op == "GlobalAveragePool") x.tensor_scalar(y, acc, Alu::multiply, inv);
      else x.copy(y, acc);
    }
    const AccessPattern xs = chunked ? AccessPattern{} : load_x(0, l.chunk, xb);
    if (chunked) {
    } else if (op == "Softmax" || op == "LogSoftmax" || op == "ReduceLogSumExp") {
      x.reduce(col(pr, sm), xs, Alu::max, true);                                       // -max
      x.activation(row(pr, work), xs, Func::exp, 1.0, col(pr, sm), 0.0, col(pr, sm + 4));  // exp(x - max), sum
      if (op == "Softmax") {
        x.activation(col(pr, sm + 8), col(pr, sm + 4), Func::reciprocal);
        x.tensor_scalar(y, row(pr, work), Alu::multiply, col(pr, sm + 8), Alu::bypass, {});  // * 1/sum per row
      } else {
        x.activation(col(pr, sm + 8), col(pr, sm + 4), Func::log);
        x.tensor_tensor(Alu::subtract, col(pr, sm + 12), col(pr, sm), col(pr, sm + 8));  // -max - ln(sum)
        if (op == "LogSoftmax") x.activation(y, xs, Func::identity, 1.0, col(pr, sm + 12));
        else x.tensor_scalar(y, col(pr, sm + 12), Alu::multiply, -1.0);  // max + ln(sum)
      }
    } else if (op == "LayerNormalization" || op == "InstanceNormalization") {
      x.row_stats(xs, sm, eps);  // mean at sm + 32, rstd at sm + 40
      replicate();
      const bool plain = extra.empty();
      // (x - mean) * rstd in one pass, both per partition (NKI's tensor_scalar takes [P,1] operands).
      x.tensor_scalar(plain ? y : row(pr, work), xs, Alu::subtract, col(pr, sm + 32), Alu::multiply, col(pr, sm + 40));
      if (per_row) {
        // scale and bias per row (channel): columns loaded per run
        std::vector<AccessPattern> cols;
        for (size_t i = 0; i < extra.size(); ++i) {
          const int64_t cb = ebuf[i] + (t % 2) * 4;
          for (const Run& run : tile.runs)
            x.em.dma(on_chip(Space::sbuf, extra[i].dtype, run.p0, run.parts, cb, {{1, 1}}), hbm_ap(extra[i], run.offset[2 + i], run.parts, l.row_stride(2 + i), {{1, 1}}));
          cols.push_back(on_chip(Space::sbuf, extra[i].dtype, 0, pr, cb, {{1, 1}}));
        }
        if (!cols.empty()) {
          x.tensor_tensor(Alu::multiply, row(pr, work), row(pr, work), on_chip(Space::sbuf, extra[0].dtype, 0, pr, ebuf[0] + (t % 2) * 4, {{static_cast<int32_t>(C), 0}}));
          if (cols.size() > 1) x.activation(y, row(pr, work), Func::identity, 1.0, cols[1]);
          else x.copy(y, row(pr, work));
        }
      } else if (!plain) {
        const Packed g0 = pack(l.free_dims(2, l.chunk));
        const AccessPattern gamma = on_chip(Space::sbuf, extra[0].dtype, 0, pr, ebuf[0], g0.read);
        if (extra.size() > 1) {
          x.tensor_tensor(Alu::multiply, row(pr, work), row(pr, work), gamma);
          const Packed b0 = pack(l.free_dims(3, l.chunk));
          x.tensor_tensor(Alu::add, y, row(pr, work), on_chip(Space::sbuf, extra[1].dtype, 0, pr, ebuf[1], b0.read));
        } else {
          x.tensor_tensor(Alu::multiply, y, row(pr, work), gamma);
        }
      }
    } else if (op == "RMSNormalization") {
      x.activation(row(pr, work), xs, Func::square, 1.0, {}, 0.0, col(pr, sm));                       // sum of squares
      if (n.attrs.get_int("eps_after_sqrt", 0)) {  // 1 / (sqrt(mean) + eps)
        x.tensor_scalar(col(pr, sm + 4), col(pr, sm), Alu::multiply, 1.0 / static_cast<double>(C));
        x.activation(col(pr, sm + 8), col(pr, sm + 4), Func::sqrt);
        x.tensor_scalar(col(pr, sm + 4), col(pr, sm + 8), Alu::add, eps);
        x.activation(col(pr, sm + 8), col(pr, sm + 4), Func::reciprocal);
      } else {
        x.tensor_scalar(col(pr, sm + 4), col(pr, sm), Alu::multiply, 1.0 / static_cast<double>(C), Alu::add, eps);
        x.activation(col(pr, sm + 8), col(pr, sm + 4), Func::rsqrt);
      }
      const Packed g0 = pack(l.free_dims(2, l.chunk));
      replicate();
      x.tensor_scalar(row(pr, work), xs, Alu::multiply, col(pr, sm + 8), Alu::bypass, {});  // * rstd per row
      x.tensor_tensor(Alu::multiply, y, row(pr, work), on_chip(Space::sbuf, extra[0].dtype, 0, pr, ebuf[0], g0.read));
    }
    // Stored by a DMA spread over every engine (a LayerNorm's [128, 768] fp32 output on the four
    // bulk queues took 6.2 us; global pools' columns: MobileNetV3 -6.6%, ResNet -3.3%, EfficientNet
    // +1.5%).
    const Packed yp = reduce ? Packed{{{1, 1}}, {{1, 1}}, {{1, 1}}, 1} : pack(l.free_dims(0, l.chunk));
    for (const Run& run : tile.runs)
      x.em.dma(hbm_ap(Y, run.offset[0], run.parts, l.row_stride(0), yp.hbm), on_chip(Space::sbuf, Y.dtype, run.p0, run.parts, yb, yp.sbuf),
               Emitter::DmaClass::spread_store);
    ++t;
  }
  if (!replications.empty()) throw std::logic_error("rows kernel " + n.name + ": a replicated row was never used");
  return {};
}

}  // namespace tessera::neuroncore
