// Elementwise kernels with numpy broadcasting: every operand is a view of the output's shape (stride
// 0 where it repeats), tiled by kernels/tiling.hpp; a repeated operand is loaded once per tile and
// read with stride 0. Scalar constants are immediates (or a memset column for Where).
#include <algorithm>
#include <cmath>
#include <limits>

#include "isa/error.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"
#include "mapper/neuroncore/kernels/tiling.hpp"

namespace tessera::neuroncore {

using graph::Node;

namespace {

constexpr int64_t kMaxFree = 2048;

bool binary_alu(const std::string& op, Alu& a) {
  static const std::pair<const char*, Alu> t[] = {{"Add", Alu::add},        {"Sub", Alu::subtract},  {"Mul", Alu::multiply},       {"Div", Alu::divide},
                                                  {"Max", Alu::max},        {"Min", Alu::min},       {"Pow", Alu::pow},            {"Greater", Alu::is_gt},
                                                  {"Less", Alu::is_lt},     {"Equal", Alu::is_equal}, {"GreaterOrEqual", Alu::is_ge}, {"LessOrEqual", Alu::is_le},
                                                  {"And", Alu::multiply},   {"Or", Alu::max}};
  for (const auto& [name, alu] : t)
    if (op == name) {
      a = alu;
      return true;
    }
  return false;
}

bool commutes(Alu a) { return a == Alu::add || a == Alu::multiply || a == Alu::max || a == Alu::min || a == Alu::is_equal; }

Alu swapped(Alu a) {
  switch (a) {
    case Alu::is_gt: return Alu::is_lt;
    case Alu::is_ge: return Alu::is_le;
    case Alu::is_lt: return Alu::is_gt;
    case Alu::is_le: return Alu::is_ge;
    default: return a;
  }
}

bool unary_vector(const std::string& op) {
  return op == "Neg" || op == "Identity" || op == "Cast" || op == "Clip" || op == "LeakyRelu" || op == "HardSigmoid" || op == "HardSwish" ||
         op == "Not" || op == "Abs" || op == "Elu" || op == "Selu" || op == "Celu" || op == "PRelu";
}

// One elementwise op on SBUF tiles: y = op(a[, b]), imm the scalar constants (NaN where the operand
// is a tile), tmp an fp32 scratch tile of y's shape.
void emit_op(Ctx& x, const Node& n, const AccessPattern& y, const std::vector<AccessPattern>& in, const std::vector<double>& imm,
             const AccessPattern& tmp) {
  const std::string& op = n.op;
  Func f;
  Alu alu;
  auto is_imm = [&](size_t i) { return !std::isnan(imm[i]); };
  if (unary_func(op, n, f)) return x.activation(y, in[0], f);
  if (op == "Abs") return x.activation(y, in[0], Func::abs);
  if (op == "Neg") return x.tensor_scalar(y, in[0], Alu::multiply, -1.0);
  if (op == "Not") return x.tensor_scalar(y, in[0], Alu::multiply, -1.0, Alu::add, 1.0);
  if (op == "Cast" && x.g.value(n.outputs[0]).dtype == DType::boolean && x.g.value(n.inputs[0]).dtype != DType::boolean) {  // x != 0
    x.activation(tmp, in[0], Func::abs);
    return x.tensor_scalar(y, tmp, Alu::is_gt, 0.0);
  }
  if (op == "Identity" || op == "Cast") return x.copy(y, in[0]);
  if (op == "Clip") {
    const double lo = imm.size() > 1 && is_imm(1) ? imm[1] : -std::numeric_limits<double>::infinity();
    const double hi = imm.size() > 2 && is_imm(2) ? imm[2] : std::numeric_limits<double>::infinity();
    return x.tensor_scalar(y, in[0], Alu::max, lo, Alu::min, hi);
  }
  if (op == "LeakyRelu") {  // max(x, alpha x) for alpha <= 1
    x.tensor_scalar(tmp, in[0], Alu::multiply, n.attrs.get_float("alpha", 0.01));
    return x.tensor_tensor(Alu::max, y, in[0], tmp);
  }
  if (op == "Elu" || op == "Selu" || op == "Celu") {
    // g max(x, 0) + a g (exp(s min(x, 0)) - 1): Elu (s = 1, g = 1), Selu (gamma g), Celu (s = 1 / alpha);
    // the exponential on the scalar engine, the rest on the vector engine.
    const bool selu = op == "Selu", celu = op == "Celu";
    const double a = n.attrs.get_float("alpha", selu ? 1.67326319217681884765625 : 1.0), g = selu ? n.attrs.get_float("gamma", 1.05070102214813232421875) : 1.0;
    x.tensor_scalar(tmp, in[0], Alu::min, 0.0);
    x.activation(tmp, tmp, Func::exp, celu ? 1.0 / a : 1.0);
    x.tensor_scalar(tmp, tmp, Alu::multiply, a * g, Alu::add, -a * g);
    x.tensor_scalar(y, in[0], Alu::max, 0.0, Alu::multiply, g);
    return x.tensor_tensor(Alu::add, y, y, tmp);
  }
  if (op == "PRelu") {  // max(x, 0) + slope min(x, 0): one slope, or a slope per channel broadcast
    x.tensor_scalar(tmp, in[0], Alu::min, 0.0);
    if (is_imm(1)) x.tensor_scalar(tmp, tmp, Alu::multiply, imm[1]);
    else x.tensor_tensor(Alu::multiply, tmp, tmp, in[1]);
    x.tensor_scalar(y, in[0], Alu::max, 0.0);
    return x.tensor_tensor(Alu::add, y, y, tmp);
  }
  if (op == "HardSigmoid" || op == "HardSwish") {
    const double a = op == "HardSwish" ? 1.0 / 6.0 : n.attrs.get_float("alpha", 0.2), b = op == "HardSwish" ? 0.5 : n.attrs.get_float("beta", 0.5);
    const AccessPattern& hs = op == "HardSwish" ? tmp : y;
    x.tensor_scalar(hs, in[0], Alu::multiply, a, Alu::add, b);
    x.tensor_scalar(hs, hs, Alu::max, 0.0, Alu::min, 1.0);
    if (op == "HardSwish") x.tensor_tensor(Alu::multiply, y, in[0], tmp);
    return;
  }
  if (op == "Where") {
    Instr s;
    s.op = Op::select;
    s.dst = y;
    s.src0 = in[0];
    s.src1 = in[1];
    s.aux = in[2];
    x.em.emit(s, Lane::vector);
    return;
  }
  if (!binary_alu(op, alu)) throw std::logic_error("emit_op: " + op);
  if (!is_imm(0) && !is_imm(1)) {
    // a / b as a * (1 / b): the reciprocal on the scalar engine (N cycles) and a multiply, where the
    // vector engine's divide takes 8N ([ISA] tensor_tensor); the product is within an ulp of the
    // quotient (as x / c already runs as x * (1 / c)). A b repeated along the free dims (an RMSNorm's
    // or a softmax's denominator) is read with stride 0 either way.
    if (alu == Alu::divide) {
      x.activation(tmp, in[1], Func::reciprocal);
      return x.tensor_tensor(Alu::multiply, y, in[0], tmp);
    }
    return x.tensor_tensor(alu, y, in[0], in[1]);
  }
  if (is_imm(1)) {  // x op c
    const double c = imm[1];
    if (alu == Alu::pow && c == 2.0) return x.activation(y, in[0], Func::square);
    if (alu == Alu::pow && c == 0.5) return x.activation(y, in[0], Func::sqrt);
    if (alu == Alu::pow && c == 1.0) return x.copy(y, in[0]);
    if (alu == Alu::divide) return x.tensor_scalar(y, in[0], Alu::multiply, 1.0 / c);
    if (alu == Alu::subtract) return x.tensor_scalar(y, in[0], Alu::add, -c);
    return x.tensor_scalar(y, in[0], alu, c);
  }
  const double c = imm[0];  // c op x
  if (commutes(alu) || swapped(alu) != alu) return x.tensor_scalar(y, in[1], swapped(alu), c);
  if (alu == Alu::subtract) return x.tensor_scalar(y, in[1], Alu::multiply, -1.0, Alu::add, c);
  if (alu == Alu::divide) {
    x.activation(tmp, in[1], Func::reciprocal);
    return x.tensor_scalar(y, tmp, Alu::multiply, c);
  }
  // c ^ x = exp(x ln c), c > 0 (checked when planning)
  return x.activation(y, in[1], Func::exp, std::log(c));
}

Status check(const Ctx& x, const Node& n, const std::vector<double>& imm) {
  Alu alu;
  Func f;
  const std::string& op = n.op;
  if (unary_func(op, n, f) || unary_vector(op)) {
    if (op == "Clip")
      for (size_t k = 1; k < n.inputs.size(); ++k)
        if (!n.inputs[k].empty() && std::isnan(imm[k])) return Status::fail("Clip's min and max must be constants");
    if (op == "LeakyRelu" && n.attrs.get_float("alpha", 0.01) > 1.0) return Status::fail("LeakyRelu with alpha > 1 is not compiled");
    if (op == "Celu" && n.attrs.get_float("alpha", 1.0) == 0.0) return Status::fail("Celu with alpha 0 divides by zero");
    if (op == "Cast" && !is_float(x.g.value(n.outputs[0]).dtype) && x.g.value(n.outputs[0]).dtype != DType::boolean &&
        is_float(x.g.value(n.inputs[0]).dtype))
      return Status::fail("a Cast from a float to an integer type is not compiled (the engines round, ONNX truncates)");
    return {};
  }
  if (op == "Where") return {};
  if (!binary_alu(op, alu)) return Status::fail("op " + op + " is not in the NeuronCore compiler's elementwise set");
  const DType odt = x.g.value(n.outputs[0]).dtype;
  if ((op == "Div" || op == "Pow") && !is_float(odt) && odt != DType::boolean)
    return Status::fail(op + " of integers is not compiled (the engines compute in fp32 and round; ONNX truncates)");
  if (op == "Pow" && !std::isnan(imm[0]) && !(imm[0] > 0)) return Status::fail("Pow with a constant base is compiled as exp(x ln c): the base must be positive");
  return {};
}

}  // namespace

bool is_elementwise(const Node& n) {
  Alu a;
  Func f;
  return unary_func(n.op, n, f) || unary_vector(n.op) || binary_alu(n.op, a) || n.op == "Where";
}

Status elementwise(Ctx& x, const Node& n) {
  const TensorRef out = x.st.ref(n.outputs[0]);
  std::vector<double> imm;
  std::vector<std::optional<TensorRef>> ops;
  for (const auto& in : n.inputs) {
    const auto& v = in.empty() ? x.g.value(n.outputs[0]) : x.g.value(in);
    if (in.empty() || (v.data && v.data->numel() == 1)) {
      imm.push_back(in.empty() ? std::nan("") : v.data->cast(DType::f64).to_f64()[0]);
      ops.push_back(std::nullopt);
      continue;
    }
    imm.push_back(std::nan(""));
    TensorRef r = x.st.ref(in);
    r.view = graph::broadcast_to(r.view, out.shape());
    ops.push_back(r);
  }
  if (Status s = check(x, n, imm); !s.ok) return s;
  if (n.op == "Clip") ops.resize(1);
  std::vector<graph::Strided> views{out.view};
  for (const auto& o : ops)
    if (o) views.push_back(o->view);
  const Loop l = plan_loop(views, x.cfg.partitions, kMaxFree);
  x.begin(n.name);
  Sbuf sb = x.sbuf(n.name);
  sb.hint = "an elementwise kernel's tiles are at most 2048 elements per partition for each operand";
  const int64_t chunk_elems = l.free_elems(l.chunk);
  // Buffers: two per tiled operand (double-buffered), one per Where constant, the output, a temp.
  std::vector<int64_t> buf(ops.size(), -1), cst(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]) buf[i] = sb.take(2 * chunk_elems * 4);
    else if (n.op == "Where") cst[i] = sb.take(4);
  }
  const int64_t ybuf = sb.take(2 * chunk_elems * 4), tbuf = sb.take(chunk_elems * 4);
  x.used(sb);
  const int32_t P = static_cast<int32_t>(x.cfg.partitions);
  for (size_t i = 0; i < ops.size(); ++i)
    if (cst[i] >= 0) x.memset(on_chip(Space::sbuf, DType::f32, 0, P, cst[i], {{1, 1}}), imm[i]);
  int64_t t = 0;
  for (const Tile& tile : tiles_of(l, x.cfg.partitions)) {
    const auto ydims = l.free_dims(0, tile.cn);
    const Packed yp = pack(ydims);
    std::vector<AccessPattern> in(ops.size());
    size_t view = 1;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i]) {
        if (cst[i] >= 0) {
          std::vector<Dim> zero;
          for (const auto& d : yp.read) zero.push_back({d.num, 0});
          in[i] = on_chip(Space::sbuf, DType::f32, 0, tile.parts, cst[i], zero);
        }
        continue;
      }
      const TensorRef& r = *ops[i];
      const Packed p = pack(l.free_dims(view, tile.cn));
      const int64_t off = buf[i] + (t % 2) * chunk_elems * 4;
      in[i] = on_chip(Space::sbuf, r.dtype, 0, tile.parts, off, p.read);
      for (const Run& run : tile.runs)
        x.em.dma(on_chip(Space::sbuf, r.dtype, run.p0, run.parts, off, p.sbuf),
                 hbm_ap(r, run.offset[view] + tile.col[view], run.parts, l.row_stride(view), p.hbm), Emitter::DmaClass::spread);
      ++view;
    }
    const int64_t yoff = ybuf + (t % 2) * chunk_elems * 4;
    const AccessPattern y = on_chip(Space::sbuf, out.dtype, 0, tile.parts, yoff, yp.sbuf);
    emit_op(x, n, y, in, imm, on_chip(Space::sbuf, DType::f32, 0, tile.parts, tbuf, yp.sbuf));
    for (const Run& run : tile.runs)
      x.em.dma(hbm_ap(out, run.offset[0] + tile.col[0], run.parts, l.row_stride(0), yp.hbm),
               on_chip(Space::sbuf, out.dtype, run.p0, run.parts, yoff, yp.sbuf), Emitter::DmaClass::spread_store);
    ++t;
  }
  return {};
}

Status copy(Ctx& x, const std::string& kernel, const TensorRef& src, const TensorRef& dst) {
  x.begin(kernel);
  copy_into(x, kernel, src, dst);
  return {};
}

namespace {

// A copy that transposes: after merging what merges, dst is [B, R, C] with unit inner stride and
// src the same elements with its unit stride on R (a materialized Transpose of the last two dims,
// possibly batched). The DMA path would move one element per descriptor; this one loads src rows
// of up to 128 contiguous elements, turns 128 x 128 blocks on the tensor engine (exact: a product
// by the identity into PSUM) and stores dst rows. Returns false when the views are not of that
// form (or the tensor engine cannot take the dtype), so the DMA path copies.
bool transposed_copy(Ctx& x, const std::string& kernel, const TensorRef& src, const TensorRef& dst) {
  if (!is_float(src.dtype) || !is_float(dst.dtype) || dtype_size(src.dtype) > 4 || src.view.has_broadcast()) return false;
  graph::Strided d = dst.view, sv = src.view;
  std::vector<graph::Strided*> ptrs{&d, &sv};
  graph::coalesce(ptrs);
  // Drop size-1 dims.
  for (size_t i = d.shape.size(); i-- > 0;)
    if (d.shape[i] == 1 && d.shape.size() > 1) {
      for (auto* v : ptrs) {
        v->shape.erase(v->shape.begin() + static_cast<std::ptrdiff_t>(i));
        v->strides.erase(v->strides.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  const size_t r = d.shape.size();
  if (r < 2 || r > 3 || d.strides[r - 1] != 1 || sv.strides[r - 2] != 1 || sv.strides[r - 1] == 1) return false;
  const int64_t B = r == 3 ? d.shape[0] : 1, R = d.shape[r - 2], C = d.shape[r - 1];
  if (R * C < 4096 || R < 32 || C < 32) return false;  // small copies: the DMA path is as good
  const int64_t dsb = r == 3 ? d.strides[0] : 0, ssb = r == 3 ? sv.strides[0] : 0;
  const int64_t dsr = d.strides[r - 2], ssc = sv.strides[r - 1];
  const int64_t P = x.cfg.partitions, T = std::min<int64_t>(P, x.cfg.tensor_cols);
  Sbuf sb = x.sbuf(kernel);
  const int64_t in_buf = sb.take(2 * T * 4), out_buf = sb.take(2 * T * 4);
  x.used(sb);
  int64_t k = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r0 = 0; r0 < R; r0 += T)
      for (int64_t c0 = 0; c0 < C; c0 += T, ++k) {
        const int32_t rr = static_cast<int32_t>(std::min(T, R - r0)), cc = static_cast<int32_t>(std::min(T, C - c0));
        // src rows c0.. (partitions), each rr contiguous elements r0..
        const AccessPattern in = on_chip(Space::sbuf, src.dtype, 0, cc, in_buf + (k % 2) * T * 4, {{rr, 1}});
        x.em.dma(in, hbm_ap(src, sv.offset + b * ssb + c0 * ssc + r0, cc, ssc, {{rr, 1}}), Emitter::DmaClass::spread);
        const AccessPattern ps = x.psum(k, rr, cc);
        x.transpose(ps, in);
        const AccessPattern out = on_chip(Space::sbuf, dst.dtype, 0, rr, out_buf + (k % 2) * T * 4, {{cc, 1}});
        x.copy(out, ps);
        x.em.dma(hbm_ap(dst, d.offset + b * dsb + r0 * dsr + c0, rr, dsr, {{cc, 1}}), out, Emitter::DmaClass::spread_store);
      }
  x.used_psum();
  return true;
}

}  // namespace

void copy_into(Ctx& x, const std::string& kernel, const TensorRef& src, const TensorRef& dst) {
  if (transposed_copy(x, kernel, src, dst)) return;
  const Loop l = plan_loop({dst.view, src.view}, x.cfg.partitions, kMaxFree);
  Sbuf sb = x.sbuf(kernel);
  const int64_t chunk_elems = l.free_elems(l.chunk);
  const int64_t in_buf = sb.take(2 * chunk_elems * 4), out_buf = sb.take(2 * chunk_elems * 4);
  x.used(sb);
  int64_t t = 0;
  for (const Tile& tile : tiles_of(l, x.cfg.partitions)) {
    const Packed yp = pack(l.free_dims(0, tile.cn));
    const Packed p = pack(l.free_dims(1, tile.cn));
    const int64_t off = in_buf + (t % 2) * chunk_elems * 4, yoff = out_buf + (t % 2) * chunk_elems * 4;
    for (const Run& run : tile.runs)
      x.em.dma(on_chip(Space::sbuf, src.dtype, run.p0, run.parts, off, p.sbuf),
               hbm_ap(src, run.offset[1] + tile.col[1], run.parts, l.row_stride(1), p.hbm), Emitter::DmaClass::spread);
    // The loaded tile goes out as it is unless the dtype changes or the source repeats elements.
    const bool convert = src.dtype != dst.dtype || p.elems != yp.elems;
    if (convert) x.copy(on_chip(Space::sbuf, dst.dtype, 0, tile.parts, yoff, yp.sbuf), on_chip(Space::sbuf, src.dtype, 0, tile.parts, off, p.read));
    for (const Run& run : tile.runs)
      x.em.dma(hbm_ap(dst, run.offset[0] + tile.col[0], run.parts, l.row_stride(0), yp.hbm),
               on_chip(Space::sbuf, dst.dtype, run.p0, run.parts, convert ? yoff : off, yp.sbuf), Emitter::DmaClass::spread_store);
    ++t;
  }
}

}  // namespace tessera::neuroncore
