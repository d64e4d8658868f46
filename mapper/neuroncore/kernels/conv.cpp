// Convolutions (1-D and 2-D; any stride, dilation, asymmetric pads and groups, depthwise included)
// as sums of matmuls over the kernel taps: out[co, pixels] += W_tap[ci, co]^T @ x_shifted[ci, pixels]
// for each tap (kh, kw) and input-channel tile. A band of input rows is loaded into SBUF once per
// output tile (zeros where the padding is), and each tap's moving operand is a strided view of it
// (rows `stride` apart, shifted by the tap's dilated offset) -- no im2col in memory. Grouped
// convolutions use the dense [Cin, Cout] matrix of each tap, block-diagonal over the groups, and
// skip its all-zero 128 x 128 blocks: a depthwise convolution is one diagonal block per tap.
#include <algorithm>

#include "isa/error.hpp"
#include "mapper/neuroncore/kernels/epilogue.hpp"
#include "mapper/neuroncore/kernels/kernels.hpp"

namespace tessera::neuroncore {

using graph::Node;
using graph::Strided;

namespace {

// A ConvTranspose is the convolution of its input with zeros inserted between the elements (the
// stride), padded by dilation * (k - 1) - pad, with the taps flipped and the channels swapped; `idh`,
// `idw` are that input dilation (1 for a Conv), and H, W the input's own size.
struct Geometry {
  int64_t N = 0, Cin = 0, H = 1, W = 0, Cout = 0, KH = 1, KW = 0, G = 1, OH = 1, OW = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, idh = 1, idw = 1;
  bool transposed = false;
  int64_t Hd() const { return (H - 1) * idh + 1; }
  int64_t Wd() const { return (W - 1) * idw + 1; }
};


Status geometry(const Ctx& x, const Node& n, Geometry& g) {
  const Shape& xs = x.g.value(n.inputs[0]).shape;
  const Shape& ws = x.g.value(n.inputs[1]).shape;
  const Shape& os = x.g.value(n.outputs[0]).shape;
  if (xs.size() != 3 && xs.size() != 4) return Status::fail("convolutions are compiled in 1-D and 2-D; this one has input " + shape_str(xs));
  const bool one_d = xs.size() == 3;
  g.N = xs[0];
  g.Cin = xs[1];
  g.H = one_d ? 1 : xs[2];
  g.W = xs.back();
  g.G = n.attrs.get_int("group", 1);
  g.transposed = n.op == "ConvTranspose";
  g.Cout = g.transposed ? ws[1] * g.G : ws[0];
  g.KH = one_d ? 1 : ws[2];
  g.KW = ws.back();
  g.OH = one_d ? 1 : os[2];
  g.OW = os.back();
  const auto st = n.attrs.get_ints("strides", {}), dl = n.attrs.get_ints("dilations", {});
  if (!st.empty()) g.sh = one_d ? 1 : st[0], g.sw = st.back();
  if (!dl.empty()) g.dh = one_d ? 1 : dl[0], g.dw = dl.back();
  const std::string ap = n.attrs.get_string("auto_pad", "NOTSET");
  if (ap == "NOTSET") {
    const auto p = n.attrs.get_ints("pads", {});
    if (!p.empty()) g.pt = one_d ? 0 : p[0], g.pl = one_d ? p[0] : p[1];
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    auto lead = [&](int64_t in, int64_t out, int64_t s, int64_t k, int64_t d) {
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
      return ap == "SAME_UPPER" ? total / 2 : total - total / 2;
    };
    g.pt = lead(g.H, g.OH, g.sh, g.KH, g.dh);
    g.pl = lead(g.W, g.OW, g.sw, g.KW, g.dw);
  }
  if (g.transposed) {
    if (ap != "NOTSET") return Status::fail("a ConvTranspose with auto_pad is not compiled", "export with explicit pads");
    if (n.attrs.has("output_shape")) return Status::fail("a ConvTranspose with output_shape is not compiled", "give pads and output_padding");
    g.idh = g.sh, g.idw = g.sw;
    g.sh = g.sw = 1;
    g.pt = g.dh * (g.KH - 1) - g.pt;
    g.pl = g.dw * (g.KW - 1) - g.pl;
  }
  if (g.Cin % g.G || g.Cout % g.G) return Status::fail("group " + std::to_string(g.G) + " does not divide the channels");
  return {};
}

}  // namespace

Strided as_2d_spatial(const Strided& v) {
  if (v.shape.size() == 4) return v;
  Strided r = v;
  r.shape.insert(r.shape.begin() + 2, 1);
  r.strides.insert(r.strides.begin() + 2, 0);
  return r;
}

Status conv(Ctx& x, const Node& n, const Epilogue& ep) {
  Geometry g;
  if (Status s = geometry(x, n, g); !s.ok) return s;
  const auto& wv = x.g.value(n.inputs[1]);
  if (!wv.data && g.G != 1) return Status::fail("a grouped convolution with computed (trained) weights is not compiled");
  const TensorRef X = x.st.ref(n.inputs[0]);
  const TensorRef O = x.st.ref(ep.out);
  const Strided xv = as_2d_spatial(X.view);
  const int64_t cin_g = g.Cin / g.G, cout_g = g.Cout / g.G, taps = g.KH * g.KW;
  // Stationary taps: dense [tap][Cin][Cout] (block-diagonal over groups), in the compute dtype.
  TensorRef Wt;
  if (wv.data) {
    const auto w = wv.data->cast(DType::f32).to_f32();
    std::vector<float> t(static_cast<size_t>(taps * g.Cin * g.Cout), 0.0f);
    for (int64_t co = 0; co < g.Cout; ++co)
      for (int64_t ci = 0; ci < cin_g; ++ci)
        for (int64_t tp = 0; tp < taps; ++tp) {
          const int64_t cin = (co / cout_g) * cin_g + ci;
          // Conv: W[co, ci, tap]; ConvTranspose: W[cin, co within the group, flipped tap].
          const int64_t src = g.transposed ? (cin * cout_g + co % cout_g) * taps + (taps - 1 - tp) : (co * cin_g + ci) * taps + tp;
          t[static_cast<size_t>((tp * g.Cin + cin) * g.Cout + co)] = w[static_cast<size_t>(src)];
        }
    Wt = x.st.constant(n.inputs[1] + "@taps", Tensor::from_f32({taps, g.Cin, g.Cout}, std::move(t)).cast(x.opt.compute));
  } else {
    Wt = x.st.ref(n.inputs[1]);  // [Cout, Cin, (KH,) KW]: tap tiles are strided loads
  }
  // Computed weights [Cout, Cin, (KH,) KW] (ConvTranspose: [Cin, Cout, ...], taps flipped) are read
  // tap by tap with strided loads.
  const int64_t s_co = g.transposed ? 1 : 0, s_ci = g.transposed ? 0 : 1;
  auto tap_elem = [&](int64_t tp, int64_t ci, int64_t co) {  // element of W_tap[ci, co]
    if (wv.data) return Wt.view.offset + (tp * g.Cin + ci) * g.Cout + co;
    const int64_t t = g.transposed ? taps - 1 - tp : tp;
    return Wt.view.offset + co * Wt.view.strides[static_cast<size_t>(s_co)] + ci * Wt.view.strides[static_cast<size_t>(s_ci)] + t * Wt.view.strides.back();
  };
  const int64_t tap_ci_stride = wv.data ? g.Cout : Wt.view.strides[static_cast<size_t>(s_ci)];
  const int64_t tap_co_stride = wv.data ? 1 : Wt.view.strides[static_cast<size_t>(s_co)];
  auto tap_kh_kw = [&](int64_t tp) { return std::pair<int64_t, int64_t>{tp / g.KW, tp % g.KW}; };
  if (!wv.data && wv.shape.size() == 4 && Wt.view.strides[3] * g.KW != Wt.view.strides[2]) return Status::fail("weights whose taps are not contiguous");
  const int64_t P = x.cfg.partitions, CT = ceil_div(g.Cin, P), OT = ceil_div(g.Cout, P);
  auto block_used = [&](int64_t ci_t, int64_t co_t) {  // a group meets both channel ranges
    const int64_t c0 = ci_t * P, c1 = std::min(g.Cin, c0 + P), o0 = co_t * P, o1 = std::min(g.Cout, o0 + P);
    return c0 / cin_g <= (o1 - 1) / cout_g && o0 / cout_g <= (c1 - 1) / cin_g;
  };
  // Pixel tiles: up to 512 output pixels (images x rows x columns).
  const int64_t free_max = std::min<int64_t>(x.cfg.max_moving_free, x.cfg.psum_bank_bytes() / 4);
  const int64_t own = std::min(g.OW, free_max), nr = std::max<int64_t>(1, std::min(g.OH, free_max / own));
  const int64_t nn = nr == g.OH ? std::max<int64_t>(1, std::min(g.N, free_max / (g.OH * own))) : 1;
  const int64_t bh = (nr - 1) * g.sh + (g.KH - 1) * g.dh + 1, bw = (own - 1) * g.sw + (g.KW - 1) * g.dw + 1;
  const int64_t es = X.es();
  const int64_t band = nn * bh * bw;
  x.begin(n.name);
  Sbuf sb = x.sbuf(n.name);
  sb.hint = "the convolution keeps a band of input rows per 128 input channels, and its weights when they fit, in SBUF; this layer's band is too large";
  // Band sets and output buffers in rotation (up to 4 each), so the loads of the next tiles and the
  // stores of the last ones overlap this tile's matmuls instead of forming one chain.
  const int64_t pixel_tiles = ceil_div(g.N, nn) * ceil_div(g.OH, nr) * ceil_div(g.OW, own);
  const int64_t sets = std::clamp<int64_t>(std::min<int64_t>(4, pixel_tiles), 1, std::max<int64_t>(1, (sb.limit / 2) / std::max<int64_t>(1, CT * band * es)));
  const int64_t bands = sb.take(sets * CT * band * es);
  // The taps stay in SBUF when they fit (each input-channel tile: taps x Cout), else stream.
  const int64_t wes = Wt.es();
  // Constant taps sit as [tap][Cout] per input-channel tile; computed weights as they lie in HBM,
  // [Cout][tap] per input channel (one DMA per tile, read back with the tap as a stride).
  const bool resident = CT * taps * g.Cout * wes <= 64 * 1024;
  const int64_t wbuf = resident ? sb.take(CT * taps * g.Cout * wes) : sb.take(4 * P * wes);
  EpilogueEmitter epi(x, ep, sb, free_max);
  constexpr int64_t kOutSlots = 4;
  const int64_t obuf = sb.take(kOutSlots * free_max * 4);
  x.used(sb);
  x.used_psum();
  if (resident)
    for (int64_t ci_t = 0; ci_t < CT; ++ci_t) {
      const int32_t cp = static_cast<int32_t>(std::min(P, g.Cin - ci_t * P));
      const int32_t T = static_cast<int32_t>(taps), C = static_cast<int32_t>(g.Cout);
      const AccessPattern dst = on_chip(Space::sbuf, Wt.dtype, 0, cp, wbuf + ci_t * taps * g.Cout * wes, wv.data ? std::vector<Dim>{{T, C}, {C, 1}} : std::vector<Dim>{{C, T}, {T, 1}});
      if (wv.data)
        x.em.dma(dst, hbm_ap(Wt, tap_elem(0, ci_t * P, 0), cp, g.Cout, {{T, static_cast<int32_t>(g.Cin * g.Cout)}, {C, 1}}), Emitter::DmaClass::spread);
      else  // natural tap order (a ConvTranspose's flip is in how the taps are read)
        x.em.dma(dst, hbm_ap(Wt, Wt.view.offset + ci_t * P * tap_ci_stride, cp, tap_ci_stride, {{C, static_cast<int32_t>(tap_co_stride)}, {T, static_cast<int32_t>(Wt.view.strides.back())}}),
                 Emitter::DmaClass::spread);
    }
  // The bias columns (per output channel) before the loop, beside the weights' loads.
  if (ep.bias)
    for (int64_t co_t = 0; co_t < OT; ++co_t) {
      const Strided b = as_2d_spatial(ep.bias->view);
      epi.preload_column(TileView{b.offset + co_t * P * b.strides[1], b.strides[1], {}}, static_cast<int32_t>(std::min(P, g.Cout - co_t * P)));
    }
  // What each band set last had written ([rows, cols] in band coordinates, images): a padded tile
  // zeroes its set only when an earlier tile wrote where this one needs zeros.
  struct Rect {
    int64_t r0 = 0, r1 = -1, c0 = 0, c1 = -1, n = 0;
  };
  Rect written[4];
  int64_t tile = 0, wslot = 0, outs = 0;
  for (int64_t n0 = 0; n0 < g.N; n0 += nn)
    for (int64_t oh0 = 0; oh0 < g.OH; oh0 += nr)
      for (int64_t ow0 = 0; ow0 < g.OW; ow0 += own) {
        const int64_t tn = std::min(nn, g.N - n0), tr = std::min(nr, g.OH - oh0), tc = std::min(own, g.OW - ow0);
        const int64_t ih0 = oh0 * g.sh - g.pt, iw0 = ow0 * g.sw - g.pl;
        const int64_t set = (tile % sets) * CT * band * es;
        // Load the band of every input-channel tile (zeros where it reaches into the padding).
        // The input rows and columns in the band (in the zero-inserted input of a ConvTranspose,
        // every idh-th row): r in [r_lo, r_hi) sits at band row r * idh - ih0.
        const int64_t r_lo = (std::max<int64_t>(0, ih0) + g.idh - 1) / g.idh, r_hi = std::max(r_lo, (std::min(g.Hd(), ih0 + bh) - 1) / g.idh + 1);
        const int64_t c_lo = (std::max<int64_t>(0, iw0) + g.idw - 1) / g.idw, c_hi = std::max(c_lo, (std::min(g.Wd(), iw0 + bw) - 1) / g.idw + 1);
        const bool padded = g.idh > 1 || g.idw > 1 || r_lo * g.idh > ih0 || (r_hi - 1) * g.idh + 1 < ih0 + bh || c_lo * g.idw > iw0 ||
                            (c_hi - 1) * g.idw + 1 < iw0 + bw;
        const Rect cur{r_lo * g.idh - ih0, (r_hi - 1) * g.idh + 1 - ih0, c_lo * g.idw - iw0, (c_hi - 1) * g.idw + 1 - iw0, tn};
        Rect& prev = written[tile % sets];
        const bool fresh = prev.r1 < 0;
        const bool inside = !fresh && prev.r0 >= cur.r0 && prev.r1 <= cur.r1 && prev.c0 >= cur.c0 && prev.c1 <= cur.c1 && prev.n <= cur.n;
        const bool zero = padded && (!inside || g.idh > 1 || g.idw > 1);
        if (zero || fresh) prev = cur;
        else prev = Rect{std::min(prev.r0, cur.r0), std::max(prev.r1, cur.r1), std::min(prev.c0, cur.c0), std::max(prev.c1, cur.c1), std::max(prev.n, cur.n)};
        for (int64_t ci_t = 0; ci_t < CT; ++ci_t) {
          const int32_t cp = static_cast<int32_t>(std::min(P, g.Cin - ci_t * P));
          const int64_t boff = bands + set + ci_t * band * es;
          if (zero) x.memset(on_chip(Space::sbuf, X.dtype, 0, cp, boff, {{static_cast<int32_t>(tn * bh * bw), 1}}), 0.0);
          if (r_hi > r_lo && c_hi > c_lo)
            x.em.dma(on_chip(Space::sbuf, X.dtype, 0, cp, boff + ((r_lo * g.idh - ih0) * bw + (c_lo * g.idw - iw0)) * es,
                             {{static_cast<int32_t>(tn), static_cast<int32_t>(bh * bw)}, {static_cast<int32_t>(r_hi - r_lo), static_cast<int32_t>(g.idh * bw)},
                              {static_cast<int32_t>(c_hi - c_lo), static_cast<int32_t>(g.idw)}}),
                     hbm_ap(X, xv.offset + n0 * xv.strides[0] + ci_t * P * xv.strides[1] + r_lo * xv.strides[2] + c_lo * xv.strides[3], cp, xv.strides[1],
                            {{static_cast<int32_t>(tn), static_cast<int32_t>(xv.strides[0])}, {static_cast<int32_t>(r_hi - r_lo), static_cast<int32_t>(xv.strides[2])},
                             {static_cast<int32_t>(c_hi - c_lo), static_cast<int32_t>(xv.strides[3])}}),
                     Emitter::DmaClass::spread);
        }
        const int32_t npix = static_cast<int32_t>(tn * tr * tc);
        for (int64_t co_t = 0; co_t < OT; ++co_t) {
          const int32_t op = static_cast<int32_t>(std::min(P, g.Cout - co_t * P));
          std::vector<std::pair<int64_t, int64_t>> steps;  // (tap, ci_t)
          for (int64_t tp = 0; tp < taps; ++tp)
            for (int64_t ci_t = 0; ci_t < CT; ++ci_t)
              if (block_used(ci_t, co_t)) steps.push_back({tp, ci_t});
          const AccessPattern ps = x.psum(tile * OT + co_t, op, npix);
          for (size_t s = 0; s < steps.size(); ++s) {
            const auto [tp, ci_t] = steps[s];
            const auto [kh, kw] = tap_kh_kw(tp);
            const int32_t cp = static_cast<int32_t>(std::min(P, g.Cin - ci_t * P));
            AccessPattern stat;
            if (resident && wv.data) {
              stat = on_chip(Space::sbuf, Wt.dtype, 0, cp, wbuf + (ci_t * taps * g.Cout + tp * g.Cout + co_t * P) * wes, {{op, 1}});
            } else if (resident) {
              const int64_t t = g.transposed ? taps - 1 - tp : tp;
              stat = on_chip(Space::sbuf, Wt.dtype, 0, cp, wbuf + (ci_t * taps * g.Cout + co_t * P * taps + t) * wes, {{op, static_cast<int32_t>(taps)}});
            } else {
              stat = on_chip(Space::sbuf, Wt.dtype, 0, cp, wbuf + (wslot++ % 4) * P * wes, {{op, 1}});
              x.em.dma(stat, hbm_ap(Wt, tap_elem(tp, ci_t * P, co_t * P), cp, tap_ci_stride, {{op, static_cast<int32_t>(tap_co_stride)}}));
            }
            const int64_t boff = bands + set + ci_t * band * es + (kh * g.dh * bw + kw * g.dw) * es;
            const AccessPattern mov = on_chip(Space::sbuf, X.dtype, 0, cp, boff,
                                              {{static_cast<int32_t>(tn), static_cast<int32_t>(bh * bw)}, {static_cast<int32_t>(tr), static_cast<int32_t>(g.sh * bw)},
                                               {static_cast<int32_t>(tc), static_cast<int32_t>(g.sw)}});
            x.matmul_step(ps, stat, mov, s == 0, s + 1 == steps.size());
          }
          if (steps.empty()) throw std::logic_error("conv: an output channel tile with no input");
          // Evacuate with the epilogue and store [co, (n, oh, ow)].
          const int64_t t = outs++;
          const AccessPattern dst = on_chip(Space::sbuf, O.dtype, 0, op, obuf + (t % kOutSlots) * free_max * 4, {{npix, 1}});
          auto tile_view = [&](const Strided& v) {
            const Strided w = as_2d_spatial(v);
            return TileView{w.offset + n0 * w.strides[0] + co_t * P * w.strides[1] + oh0 * w.strides[2] + ow0 * w.strides[3], w.strides[1],
                            {{static_cast<int32_t>(tn), static_cast<int32_t>(w.strides[0])}, {static_cast<int32_t>(tr), static_cast<int32_t>(w.strides[2])},
                             {static_cast<int32_t>(tc), static_cast<int32_t>(w.strides[3])}}};
          };
          epi.run(dst, ps, ep.bias ? tile_view(ep.bias->view) : TileView{}, ep.residual ? tile_view(ep.residual->view) : TileView{}, t);
          // One store per image: each DMA's HBM rows then span one image, so its pieces (split by
          // partition groups over the engines) write disjoint ranges and run side by side.
          const TileView o = tile_view(O.view);
          const int64_t per = tr * tc;
          for (int64_t i = 0; i < tn; ++i)
            x.em.dma(hbm_ap(O, o.elem + i * o.free[0].stride, op, o.part_stride, {o.free[1], o.free[2]}),
                     on_chip(Space::sbuf, O.dtype, 0, op, obuf + (t % kOutSlots) * free_max * 4 + i * per * O.es(), {{static_cast<int32_t>(per), 1}}),
                     Emitter::DmaClass::spread_store);
        }
        ++tile;
      }
  return {};
}

}  // namespace tessera::neuroncore
