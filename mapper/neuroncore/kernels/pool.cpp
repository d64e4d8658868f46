// MaxPool and AveragePool (1-D and 2-D; kernel, strides, dilations, asymmetric pads, ceil mode,
// count_include_pad) on the vector engine: the (n, c) pairs on the partitions, a band of input rows
// in SBUF with the padding value around it (-inf for max, 0 for average), and one tensor_tensor per
// tap over a strided view of the band. An average divides by the number of taps each output saw
// (a compile-time map of reciprocal counts when they differ). Global poolings are reductions
// (kernels/rows.cpp).
#include <algorithm>
#include <limits>

#include "mapper/neuroncore/kernels/kernels.hpp"
#include "mapper/neuroncore/kernels/tiling.hpp"

namespace tessera::neuroncore {

using graph::Node;
using graph::Strided;

bool is_pool(const std::string& op) { return op == "MaxPool" || op == "AveragePool"; }

Status pool(Ctx& x, const Node& n) {
  const bool is_max = n.op == "MaxPool";
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) return Status::fail("MaxPool's Indices output is not compiled");
  const TensorRef X = x.st.ref(n.inputs[0]);
  const TensorRef O = x.st.ref(n.outputs[0]);
  const int64_t r = X.rank();
  if (r != 3 && r != 4) return Status::fail("pooling is compiled in 1-D and 2-D; this input is " + shape_str(X.shape()));
  const Strided xv = as_2d_spatial(X.view), ov = as_2d_spatial(O.view);
  const bool one_d = r == 3;
  const auto k = n.attrs.get_ints("kernel_shape");
  const auto st = n.attrs.get_ints("strides", {}), dl = n.attrs.get_ints("dilations", {}), pads = n.attrs.get_ints("pads", {});
  const int64_t KH = one_d ? 1 : k[0], KW = k.back();
  const int64_t sh = st.empty() || one_d ? 1 : st[0], sw = st.empty() ? 1 : st.back();
  const int64_t dh = dl.empty() || one_d ? 1 : dl[0], dw = dl.empty() ? 1 : dl.back();
  const std::string ap = n.attrs.get_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") return Status::fail("auto_pad " + ap + " pooling is not compiled", "export with explicit pads");
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  if (!pads.empty() && ap == "NOTSET") {
    if (one_d) pl = pads[0], pr = pads[1];
    else pt = pads[0], pl = pads[1], pb = pads[2], pr = pads[3];
  }
  const int64_t H = xv.shape[2], W = xv.shape[3], OH = ov.shape[2], OW = ov.shape[3];
  const bool include_pad = n.attrs.get_int("count_include_pad", 0) != 0;
  // Rows: the (n, c) pairs.
  Strided xr{{xv.shape[0], xv.shape[1]}, {xv.strides[0], xv.strides[1]}, xv.offset};
  Strided orows{{ov.shape[0], ov.shape[1]}, {ov.strides[0], ov.strides[1]}, ov.offset};
  std::vector<Strided*> ptrs{&orows, &xr};
  graph::coalesce(ptrs);
  Loop l;
  l.dims = orows.shape;
  l.strides = {orows.strides, xr.strides};
  l.offsets = {orows.offset, xr.offset};
  l.k = l.dims.size();
  // Output rows per band, so that the band stays within 48 KiB per partition (fp32).
  int64_t nr = OH;
  auto band_rows = [&](int64_t rows) { return (rows - 1) * sh + (KH - 1) * dh + 1; };
  const int64_t bw = (OW - 1) * sw + (KW - 1) * dw + 1;
  while (nr > 1 && band_rows(nr) * bw * 4 > 48 * 1024) nr = (nr + 1) / 2;
  const int64_t bh = band_rows(nr);
  if (bh * bw * 4 > 96 * 1024) return Status::fail("a pooling window row band of " + std::to_string(bh * bw) + " elements does not fit in SBUF");
  // Reciprocal tap counts per output position (average pooling), when they are not all equal.
  std::optional<TensorRef> counts;
  double inv_all = 1.0 / static_cast<double>(KH * KW);
  if (!is_max) {
    std::vector<float> c(static_cast<size_t>(OH * OW));
    bool same = true;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t cnt = 0;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
            const bool in = include_pad ? (ih < H + pb && iw < W + pr) : (ih >= 0 && ih < H && iw >= 0 && iw < W);
            cnt += in;
          }
        c[static_cast<size_t>(oh * OW + ow)] = 1.0f / static_cast<float>(std::max<int64_t>(cnt, 1));
        same = same && cnt == KH * KW;
      }
    if (!same) counts = x.st.constant(n.name + "@counts", Tensor::from_f32({OH, OW}, std::move(c)));
  }
  const double pad_value = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  x.begin(n.name);
  Sbuf sb = x.sbuf(n.name);
  sb.hint = "the pooling keeps a band of input rows per 128 (image, channel) pairs in SBUF";
  const int64_t band = sb.take(2 * bh * bw * 4), acc = sb.take(nr * OW * 4), yout = sb.take(2 * nr * OW * 4);
  const int64_t cbuf = counts ? sb.take(nr * OW * 4) : -1;
  x.used(sb);
  int64_t t = 0;
  for (const Tile& tile : tiles_of(l, x.cfg.partitions)) {
    const int32_t parts = tile.parts;
    for (int64_t oh0 = 0; oh0 < OH; oh0 += nr, ++t) {
      const int64_t tr = std::min(nr, OH - oh0), ih0 = oh0 * sh - pt, iw0 = -pl;
      const int64_t boff = band + (t % 2) * bh * bw * 4;
      const int64_t r_lo = std::max<int64_t>(0, ih0), r_hi = std::min(H, ih0 + band_rows(tr)), c_lo = 0, c_hi = std::min(W, iw0 + bw);
      const bool padded = r_lo > ih0 || r_hi < ih0 + band_rows(tr) || pl > 0 || c_hi < iw0 + bw;
      if (padded) x.memset(on_chip(Space::sbuf, X.dtype, 0, parts, boff, {{static_cast<int32_t>(bh * bw), 1}}), pad_value);
      if (r_hi > r_lo)
        for (const Run& run : tile.runs)
          x.em.dma(on_chip(Space::sbuf, X.dtype, run.p0, run.parts, boff + ((r_lo - ih0) * bw + (c_lo - iw0)) * X.es(),
                           {{static_cast<int32_t>(r_hi - r_lo), static_cast<int32_t>(bw)}, {static_cast<int32_t>(c_hi - c_lo), 1}}),
                   hbm_ap(X, run.offset[1] + r_lo * xv.strides[2] + c_lo * xv.strides[3], run.parts, l.row_stride(1),
                          {{static_cast<int32_t>(r_hi - r_lo), static_cast<int32_t>(xv.strides[2])}, {static_cast<int32_t>(c_hi - c_lo), static_cast<int32_t>(xv.strides[3])}}),
                   Emitter::DmaClass::spread);
      const std::vector<Dim> odims{{static_cast<int32_t>(tr), static_cast<int32_t>(OW)}, {static_cast<int32_t>(OW), 1}};
      const AccessPattern a = on_chip(Space::sbuf, DType::f32, 0, parts, acc, odims);
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const AccessPattern v = on_chip(Space::sbuf, X.dtype, 0, parts, boff + (kh * dh * bw + kw * dw) * X.es(),
                                          {{static_cast<int32_t>(tr), static_cast<int32_t>(sh * bw)}, {static_cast<int32_t>(OW), static_cast<int32_t>(sw)}});
          if (kh == 0 && kw == 0) x.copy(a, v);
          else x.tensor_tensor(is_max ? Alu::max : Alu::add, a, a, v);
        }
      const int64_t yoff = yout + (t % 2) * nr * OW * 4;
      const AccessPattern y = on_chip(Space::sbuf, O.dtype, 0, parts, yoff, odims);
      if (is_max) {
        x.copy(y, a);
      } else if (counts) {
        const AccessPattern c = on_chip(Space::sbuf, DType::f32, 0, parts, cbuf, odims);
        x.em.dma(c, hbm_ap(*counts, oh0 * OW, parts, 0, {{static_cast<int32_t>(tr * OW), 1}}));
        x.tensor_tensor(Alu::multiply, y, a, c);
      } else {
        x.tensor_scalar(y, a, Alu::multiply, inv_all);
      }
      for (const Run& run : tile.runs)
        x.em.dma(hbm_ap(O, run.offset[0] + oh0 * ov.strides[2], run.parts, l.row_stride(0),
                        {{static_cast<int32_t>(tr), static_cast<int32_t>(ov.strides[2])}, {static_cast<int32_t>(OW), static_cast<int32_t>(ov.strides[3])}}),
                 on_chip(Space::sbuf, O.dtype, run.p0, run.parts, yoff, odims), Emitter::DmaClass::spread_store);
    }
  }
  return {};
}

}  // namespace tessera::neuroncore
