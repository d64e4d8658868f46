// Data movement that is not a view (kernels/kernels.hpp): Concat (each input copied into its slice
// of the output), Pad (the output preloaded with the pad value, the input copied into its interior),
// a nearest Resize (one copy of the input broadcast over the factors),
// Gather (an embedding lookup of a constant table on the gpsimd engine, or constant indices as
// copies of slices).
#include <algorithm>

#include "isa/error.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"

namespace tessera::neuroncore {

using graph::Node;
using graph::Strided;

namespace {
int64_t axis_of(const Node& n, int64_t rank, int64_t def = 0) {
  const int64_t a = n.attrs.get_int("axis", def);
  return a < 0 ? a + rank : a;
}
}  // namespace

Status concat(Ctx& x, const Node& n) {
  const TensorRef O = x.st.ref(n.outputs[0]);
  const int64_t axis = axis_of(n, O.rank());
  x.begin(n.name);
  int64_t at = 0;
  for (const auto& in : n.inputs) {
    if (in.empty()) continue;
    const TensorRef src = x.st.ref(in);
    const int64_t len = src.shape()[static_cast<size_t>(axis)];
    if (len == 0) continue;
    TensorRef dst = O;
    dst.view = graph::slice(O.view, axis, at, len);
    copy_into(x, n.name, src, dst);
    at += len;
  }
  return {};
}

Status pad(Ctx& x, const Node& n) {
  const std::string mode = n.attrs.get_string("mode", "constant");
  if (mode != "constant") return Status::fail("Pad mode '" + mode + "' is not compiled (constant only)");
  const auto& g = x.g;
  const Tensor* pads_t = n.inputs.size() > 1 && !n.inputs[1].empty() ? (g.value(n.inputs[1]).data ? &*g.value(n.inputs[1]).data : nullptr) : nullptr;
  if (!pads_t) return Status::fail("Pad's pads must be a constant");
  double value = 0.0;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    if (!g.value(n.inputs[2]).data) return Status::fail("Pad's constant_value must be a constant");
    value = g.value(n.inputs[2]).data->cast(DType::f64).to_f64()[0];
  }
  const TensorRef X = x.st.ref(n.inputs[0]);
  const int64_t r = X.rank();
  auto pads = pads_t->to_i64();
  std::vector<int64_t> axes;
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) axes = g.value(n.inputs[3]).data->to_i64();
  else
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  const TensorRef O = x.st.ref(n.outputs[0]);
  if (O.view.extent().second - O.view.extent().first != O.view.numel() || O.view.has_broadcast())
    return Status::fail("a padded output stored with gaps");  // (the fill preloads the whole tensor)
  if (value != 0.0) x.c.hbm_init.push_back({O.hbm, Tensor::from_f32(O.shape(), std::vector<float>(static_cast<size_t>(shape_numel(O.shape())), static_cast<float>(value))).cast(O.dtype)});
  // The interior: the output sliced past each begin pad; a negative pad crops the input instead.
  TensorRef dst = O, src = X;
  const size_t na = axes.size();
  for (size_t k = 0; k < na; ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
    const int64_t b = pads[k], e = pads[k + na];
    const int64_t len = X.shape()[static_cast<size_t>(a)] + std::min<int64_t>(b, 0) + std::min<int64_t>(e, 0);
    dst.view = graph::slice(dst.view, a, std::max<int64_t>(b, 0), len);
    src.view = graph::slice(src.view, a, std::max<int64_t>(-b, 0), len);
  }
  x.begin(n.name);
  if (src.view.numel() > 0) copy_into(x, n.name, src, dst);
  return {};
}

// A nearest Resize by whole factors (nn.Upsample's default, F.interpolate(mode="nearest")): the
// output viewed as [d0, f0, d1, f1, ...] (each axis split into the input's size and its factor) is
// one copy of the input broadcast over the factors (stride 0). For whole factors, asymmetric with
// nearest_mode floor (torch.onnx.export's form) and half_pixel / pytorch_half_pixel with a rounding
// nearest_mode both read input floor(i / f).
Status resize(Ctx& x, const Node& n) {
  if (const std::string form = graph::nearest_resize_form(n); !form.empty())
    return Status::fail("Resize is compiled as a nearest upsampling by whole factors (mode nearest; coordinate_transformation_mode asymmetric with nearest_mode floor, "
                        "or half_pixel); this one is " + form);
  const TensorRef X = x.st.ref(n.inputs[0]), O = x.st.ref(n.outputs[0]);
  const Shape &is = X.shape(), &os = O.shape();
  if (is.size() != os.size()) return Status::fail("Resize changes the rank");
  Shape split;
  graph::Strided src;
  src.offset = X.view.offset;
  for (size_t a = 0; a < is.size(); ++a) {
    if (is[a] == 0 || os[a] % is[a] || os[a] < is[a])
      return Status::fail("Resize is compiled as an upsampling by whole factors; " + shape_str(is) + " to " + shape_str(os) + " is not");
    split.push_back(is[a]), split.push_back(os[a] / is[a]);
    src.shape.push_back(is[a]), src.shape.push_back(os[a] / is[a]);
    src.strides.push_back(X.view.strides[a]), src.strides.push_back(0);
  }
  const auto ov = graph::reshape(O.view, split);
  if (!ov) return Status::fail("the upsampled output's view cannot be split by the factors");
  TensorRef s2 = X, d2 = O;
  s2.view = src;
  d2.view = *ov;
  x.begin(n.name);
  copy_into(x, n.name, s2, d2);
  return {};
}

Status gather(Ctx& x, const Node& n) {
  const auto& g = x.g;
  const auto& data = g.value(n.inputs[0]);
  const auto& idx = g.value(n.inputs[1]);
  const int64_t axis = axis_of(n, static_cast<int64_t>(data.shape.size()));
  const TensorRef O = x.st.ref(n.outputs[0]);
  if (idx.data) {  // constant indices: a copy of each index's slice
    const TensorRef D = x.st.ref(n.inputs[0]);
    auto iv = idx.data->to_i64();
    const int64_t dim = data.shape[static_cast<size_t>(axis)];
    // The output as [outer..., number of indices, inner...] (the index dims flattened).
    Shape os(data.shape.begin(), data.shape.begin() + axis);
    os.push_back(static_cast<int64_t>(iv.size()));
    os.insert(os.end(), data.shape.begin() + axis + 1, data.shape.end());
    auto ov = graph::reshape(O.view, os);
    if (!ov) return Status::fail("the gathered output's view");
    x.begin(n.name);
    for (size_t i = 0; i < iv.size(); ++i) {
      const int64_t j = iv[i] < 0 ? iv[i] + dim : iv[i];
      TensorRef src = D, dst = O;
      src.view = graph::slice(D.view, axis, j, 1);
      dst.view = graph::slice(*ov, axis, static_cast<int64_t>(i), 1);
      copy_into(x, n.name, src, dst);
    }
    return {};
  }
  if (axis != 0 || data.shape.size() != 2 || !data.data)
    return Status::fail("Gather with computed indices is compiled as an embedding lookup: rows (axis 0) of a constant 2-D table, got axis " +
                        std::to_string(axis) + " of " + shape_str(data.shape) + (data.data ? "" : " (not a constant)"));
  if (is_float(idx.dtype)) return Status::fail("Gather indices must be integers, got " + std::string(dtype_name(idx.dtype)));
  const int64_t V = data.shape[0], D = data.shape[1], N = shape_numel(idx.shape);
  const DType ct = x.opt.compute;
  if (V * static_cast<int64_t>(dtype_size(ct)) > x.cfg.sbuf_partition_bytes / 2)
    return Status::fail("the embedding table's " + std::to_string(V) + " rows do not fit half an SBUF partition (" + std::to_string(x.cfg.sbuf_partition_bytes / 2) +
                            " bytes) in " + std::string(dtype_name(ct)),
                        "the gather keeps a column of the table per partition; use a smaller vocabulary or run on target.kind \"reference\"");
  // The indices as one dimension (a view of them in any strides), the output as [N, D] rows.
  TensorRef I = x.st.ref(n.inputs[1]);
  auto iv = graph::reshape(I.view, {N});
  auto ov = graph::reshape(O.view, {N, D});
  if (!ov) return Status::fail("the output's view cannot be walked as [indices, " + std::to_string(D) + "]");
  // The table transposed ([D, V], at compile time): a column of it per partition.
  const TensorRef T = x.st.constant(n.inputs[0] + "@T", transpose2d(data.data->cast(DType::f32)).cast(ct));
  x.begin(n.name);
  if (!iv) {  // indices in a view that does not flatten (a transpose of them): copied in order first
    TensorRef flat = x.st.scratch(n.inputs[1] + "@flat", I.dtype, {N});
    flat.view = graph::reshape(flat.view, I.shape()).value();
    copy_into(x, n.name, I, flat);
    I = flat;
    iv = graph::Strided::contiguous({N});
    iv->offset = 0;
  }
  Sbuf sb = x.sbuf(n.name);
  sb.hint = "the gather keeps a column of the table per partition; use a smaller vocabulary";
  const int64_t NC = std::min<int64_t>(N, x.cfg.tensor_cols);  // indices per gather: one transpose block
  const int64_t tab = sb.take(V * T.es()), ix = sb.take(2 * NC * 4), wrap = sb.take(NC * 4), res = sb.take(2 * NC * 4),
                rows = sb.take(2 * x.cfg.partitions * 4);
  x.used(sb);
  int64_t chunk = 0;
  for (int64_t d0 = 0; d0 < D; d0 += x.cfg.partitions) {
    const int32_t dg = static_cast<int32_t>(std::min<int64_t>(x.cfg.partitions, D - d0));
    x.em.dma(on_chip(Space::sbuf, T.dtype, 0, dg, tab, {{static_cast<int32_t>(V), 1}}), hbm_ap(T, d0 * V, dg, V, {{static_cast<int32_t>(V), 1}}),
             Emitter::DmaClass::bulk);
    for (int64_t n0 = 0; n0 < N; n0 += NC, ++chunk) {
      const int32_t nc = static_cast<int32_t>(std::min(NC, N - n0));
      const AccessPattern iap = on_chip(Space::sbuf, I.dtype, 0, dg, ix + (chunk % 2) * NC * 4, {{nc, 1}});
      // The indices broadcast to every partition; negative ones (ONNX counts from the end) + V.
      x.em.dma(iap, hbm_ap(I, iv->offset + n0 * iv->strides[0], dg, 0, {{nc, static_cast<int32_t>(iv->strides[0])}}));
      const AccessPattern w = on_chip(Space::sbuf, DType::f32, 0, dg, wrap, {{nc, 1}});
      x.tensor_scalar(w, iap, Alu::is_lt, 0.0, Alu::multiply, static_cast<double>(V));
      x.tensor_tensor(Alu::add, iap, iap, w);
      const AccessPattern r = on_chip(Space::sbuf, T.dtype, 0, dg, res + (chunk % 2) * NC * 4, {{nc, 1}});
      Instr gi;
      gi.op = Op::gather;
      gi.dst = r;
      gi.src0 = on_chip(Space::sbuf, T.dtype, 0, dg, tab, {{static_cast<int32_t>(V), 1}});
      gi.src1 = iap;
      x.em.emit(gi, Lane::gpsimd);
      // A column per index -> a row per index: the tensor engine's transpose.
      const AccessPattern ps = x.psum(chunk, nc, dg);
      x.transpose(ps, r);
      const AccessPattern rw = on_chip(Space::sbuf, O.dtype, 0, nc, rows + (chunk % 2) * x.cfg.partitions * 4, {{dg, 1}});
      x.copy(rw, ps);
      x.em.dma(hbm_ap(O, ov->offset + n0 * ov->strides[0] + d0 * ov->strides[1], nc, ov->strides[0], {{dg, static_cast<int32_t>(ov->strides[1])}}), rw,
               Emitter::DmaClass::bulk);
    }
  }
  x.used_psum();
  return {};
}

}  // namespace tessera::neuroncore
