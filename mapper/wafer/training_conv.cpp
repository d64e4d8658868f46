// A trained Conv's backward parts (training.cpp; docs/wafer-compiler.md "Training"): at its chain
// ends the pool's backward (a global average pool's dy spread over every position, a max pool's dy
// routed to each window's maximum), and the input gradient of a Conv read by a Conv -- col2im.
// The reader's input gradient arrives at the producer's chain ends reduced along the x lines as
// im2col rows (the rows the gather sent, [samples, oh, ow] x (kh, kw, channel)); each tap's part is
// added into the producer's output gradient in one op over the walk the forward's gather read
// (for a tap, output positions map to distinct input positions, so one op has no overlaps; taps
// that overlap are added one after another). A bordered holder (the reader is padded) gets its own
// gradient array with the border, whose interior is then copied into dy: the border's values are
// the pads', which have no gradient.
#include <stdexcept>
#include <string>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

bool conv_reads_conv(const Compiled& c, size_t l) { return l > 0 && c.kernels[l].spatial() && c.kernels[l - 1].spatial(); }

namespace {

// Where col2im adds kernel l's input gradient (kernel l reads the Conv l - 1): the array, its
// height and width per sample, the walk's start, and whether it is a bordered copy of the
// producer's output gradient.
struct Col2im {
  std::string arr, full;  // the array, a 1-D DSD over all of it
  int64_t H = 0, W = 0, off = 0;
  bool border = false;
};

Col2im col2im_target(const Compiled& c, size_t l) {
  const DenseKernel& p = c.kernels[l - 1];
  const std::string L = std::to_string(l), P0 = std::to_string(l - 1);
  const ConvWalk cw = conv_walk(c, l);
  if (p.xp_h) return {"dh" + L, "dhm" + L, cw.H, cw.W, cw.off, true};
  return {(p.pkh ? "dyp" : "dy") + P0, (p.pkh ? "dypm" : "dym") + P0, cw.H, cw.W, cw.off, false};
}

// The producer's output (after its pool) per sample: height, width.
std::pair<int64_t, int64_t> produced_hw(const DenseKernel& p) { return p.pkh ? std::pair{p.ph, p.pw} : std::pair{p.oh, p.ow}; }

}  // namespace

void pool_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (!k.spatial() || l + 1 >= c.kernels.size()) return;
  const std::string L = std::to_string(l);
  const int64_t nb = k.nb, rows = k.rows_out();
  if (global_pool(k)) {  // dy of the mean, to every position of its sample and channel
    t.data("dyp" + L, Elem::f32, rows * nb, {}, -1, -1, "dy of the pool's output");
    t.mem4d("dgb" + L, "dyp" + L, 0, {{k.samples, nb}, {k.oh * k.ow, 0}, {nb, 1}}, "dy of the mean again for every position");
  } else if (k.pkh) {
    t.data("dyp" + L, Elem::f32, rows * nb, {}, -1, -1, "dy of the pool's output");
    t.data("pt" + L, Elem::f32, rows * nb, {}, -1, -1, "1 where y is its window's maximum");
    t.mem1d("dypm" + L, "dyp" + L);
    t.mem1d("ptm" + L, "pt" + L);
    for (int64_t a = 0; a < k.pkh; ++a)  // dy at window offset (a, b), as pw<l>_i walks y
      for (int64_t b = 0; b < k.pkw; ++b)
        t.mem4d("dw" + L + "_" + std::to_string(a * k.pkw + b), "dy" + L, (a * k.ow + b) * nb,
                {{k.samples, k.oh * k.ow * nb}, {k.ph, k.psh * k.ow * nb}, {k.pw, k.psw * nb}, {nb, 1}});
  }
  // A Flatten reader's input gradient arrives in the Flatten's order ([sample, channel, position]):
  // written back in the holder's ([sample, position, channel]) -- the pool's dy, or y's.
  const DenseKernel& n = c.kernels[l + 1];
  if (n.xread == DenseKernel::XRead::flatten)
    t.mem4d("dyT" + L, (k.pkh ? "dyp" : "dy") + L, 0, {{n.samples, n.P * nb}, {nb, 1}, {n.P, nb}}, "the Flatten's order");
}

void pool_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (!k.spatial()) return;
  const std::string L = std::to_string(l), dy = "dym" + L;
  if (global_pool(k)) {  // the global average pool: dy / positions to each position
    t.op(Op::fmuls, {dy, "dgb" + L, fnum(1.0 / static_cast<double>(k.oh * k.ow))});
  } else if (k.pkh) {  // the max pool: each window's dy to its maximum (exact ties: to each)
    for (int64_t i = 0; i < k.pkh * k.pkw; ++i) {
      const std::string I = std::to_string(i), pt = "ptm" + L;
      t.op(Op::fsubs, {pt, "pw" + L + "_" + I, "pall" + L});  // y - max <= 0
      t.op(Op::fmuls, {pt, pt, fimm(1.2676506e30)});
      t.op(Op::fmaxs, {pt, pt, fimm(-1.0)});
      t.op(Op::fadds, {pt, pt, fimm(1.0)});  // 1 at the maximum, else 0
      t.op(Op::fmuls, {"dw" + L + "_" + I, pt, "dypm" + L});
    }
  }
}

int64_t pool_backward_cycles(const DenseKernel& k, const WaferConfig& cfg) {
  if (k.spatial() && global_pool(k)) return dsd_cycles(Op::fmuls, k.samples * k.oh * k.ow * k.nb, 1, cfg);
  if (k.spatial() && k.pkh) return k.pkh * k.pkw * 5 * dsd_cycles(Op::fmuls, k.rows_out() * k.nb, k.psw * k.nb, cfg);
  return 0;
}

// Kernel l (a Conv reading the Conv l - 1): the arrays and walks of its col2im at the producer's
// chain ends -- one walk
// pair per tap (cd<l>_i into the target, cs<l>_i over the reduced input gradient: the reduce ends
// in place in dx<l> there), and a bordered target's array and interior walk.
void col2im_arrays(const Compiled& c, size_t l, ProgramTemplate& t) {
  if (!conv_reads_conv(c, l)) return;
  const DenseKernel& n = c.kernels[l];
  const DenseKernel& p = c.kernels[l - 1];
  if (n.kh_blocks() != 1 || n.cblk != p.nb)  // (placement gives a Conv reading a chain end's holder whole kernel rows and the holder's channels)
    throw std::logic_error("col2im of kernel '" + n.name + "': kernel rows split over lines, or channel blocks other than the producer's");
  const std::string L = std::to_string(l), P0 = std::to_string(l - 1);
  const int64_t cb = n.cblk, kb = n.kb, S = n.samples;
  const Col2im g = col2im_target(c, l);
  t.if_("last" + P0);
  if (g.border) {
    const auto [h, w] = produced_hw(p);
    t.data(g.arr, Elem::f32, S * g.H * g.W * cb, {}, -1, -1, "the input gradient inside the reader's zero border");
    t.mem1d(g.full, g.arr);
    t.mem4d("dhi" + L, g.arr, (p.xp_t * p.xp_w + p.xp_l) * cb, {{S, g.H * g.W * cb}, {h, g.W * cb}, {w * cb, 1}}, "the interior: the producer's output gradient");
  }
  for (int64_t a = 0; a < n.kh; ++a)
    for (int64_t b = 0; b < n.kw; ++b) {
      const int64_t i = a * n.kw + b;
      const std::string I = L + "_" + std::to_string(i);
      t.mem4d("cd" + I, g.arr, g.off + (a * g.W + b) * cb, {{S, g.H * g.W * cb}, {n.oh, n.sh * g.W * cb}, {n.ow, n.sw * cb}, {cb, 1}});
      t.mem4d("cs" + I, "dx" + L, i * cb, {{S, n.oh * n.ow * kb}, {n.oh, n.ow * kb}, {n.ow, kb}, {cb, 1}});
    }
  t.endif();
}

// At the producer's chain ends, once the reduce has ended there: the target zeroed, every tap's
// part added, a bordered target's interior copied into the producer's output gradient.
void col2im_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& n = c.kernels[l];
  const DenseKernel& p = c.kernels[l - 1];
  const std::string L = std::to_string(l), P0 = std::to_string(l - 1);
  const Col2im g = col2im_target(c, l);
  t.op(Op::fmovs, {g.full, fimm(0.0)});
  for (int64_t i = 0; i < n.kh * n.kw; ++i) {
    const std::string I = L + "_" + std::to_string(i);
    t.op(Op::fadds, {"cd" + I, "cd" + I, "cs" + I});
  }
  if (g.border) t.op(Op::fmovs, {(p.pkh ? "dypm" : "dym") + P0, "dhi" + L});
}

int64_t col2im_cycles(const Compiled& c, size_t l, const WaferConfig& cfg) {
  if (!conv_reads_conv(c, l)) return 0;
  const DenseKernel& n = c.kernels[l];
  const DenseKernel& p = c.kernels[l - 1];
  const Col2im g = col2im_target(c, l);
  const auto [h, w] = produced_hw(p);
  const int64_t cb = n.cblk, S = n.samples;
  int64_t cy = dsd_cycles(Op::fmovs, g.border ? S * g.H * g.W * cb : S * h * w * cb, 1, cfg);
  cy += n.kh * n.kw * dsd_cycles(Op::fadds, S * n.oh * n.ow * cb, 1, cfg);
  if (g.border) cy += dsd_cycles(Op::fmovs, S * h * w * cb, 1, cfg);
  return cy;
}

int64_t col2im_bytes(const Compiled& c, size_t l) {
  if (!conv_reads_conv(c, l)) return 0;
  const DenseKernel& n = c.kernels[l];
  const Col2im g = col2im_target(c, l);
  return (g.border ? n.samples * g.H * g.W * n.cblk : 0) * 4;
}

// What a trained Conv read by a Conv needs (else an error naming the kernel).
void check_conv_training(const Compiled& c, size_t l, const char* hint) {
  const DenseKernel& k = c.kernels[l];
  const std::string where = "kernel '" + k.name + "'";
  if (k.groups > 1)
    throw InputError(where, "a grouped Conv (" + std::to_string(k.groups) + " groups) is not trained on the wafer in this build: it runs as the dense Conv with zero blocks, which an update would fill", hint);
  if (l == 0) return;
  const DenseKernel& p = c.kernels[l - 1];
  if (!p.spatial())
    throw InputError(where, "a trained Conv after the first kernel reads a Conv in this build (not a dense layer's rows)", hint);
  if (global_pool(p) || p.xp_sh > 1 || p.xp_sw > 1 || p.xp_rh > 1 || p.xp_rw > 1)
    throw InputError(where, "a trained Conv reads a Conv's output, or its max pool, in this build (not a global pool, an upsampled or dilated map)", hint);
}

}  // namespace tessera::wafer::detail
