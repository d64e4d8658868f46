// Accumulating kernels: MatMul, Gemm, Conv, ConvTranspose. Sums run in fp64 (int64 for integer
// MatMul) in i-k-j order (matmul blocked and threaded, same bits); results are written in the
// input dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "isa/host_threads.hpp"
#include "isa/interrupt.hpp"
#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// C[M,N] = A[M,K] * B[K,N], row-major; C is overwritten. T is double, or uint64_t for integer
// matmul (unsigned arithmetic wraps, giving two's-complement results without undefined behaviour).
//
// Every element is summed over k = 0..K-1 in order, one rounded product and one rounded addition
// at a time, exactly as the plain i-k-j loop (`row[j] += A[i,k] * B[k,j]`), so the results are the
// same bits whatever the blocking and the number of threads. For speed: j and k are blocked so a
// kKc x kNc panel of B stays in cache while the rows pass over it; four k at a time keep the
// running sum in a register (t += a0 b0[j]; t += a1 b1[j]; ... : the same additions in the same
// order); the rows are split over the host's threads when the product is large.
template <typename T>
void matmul_rows(const T* A, const T* B, T* C, int64_t i0, int64_t i1, int64_t K, int64_t N) {
  constexpr int64_t kKc = 128, kNc = 512;  // a B panel of 128 x 512 doubles: 512 KiB
  for (int64_t i = i0; i < i1; ++i) std::fill(C + i * N, C + (i + 1) * N, T{0});
  for (int64_t j0 = 0; j0 < N; j0 += kNc) {
    const int64_t j1 = std::min(N, j0 + kNc);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t k1 = std::min(K, k0 + kKc);
      if (interrupt_requested()) return;  // the caller polls after the threads joined
      for (int64_t i = i0; i < i1; ++i) {
        T* row = C + i * N;
        const T* a = A + i * K;
        int64_t k = k0;
        for (; k + 4 <= k1; k += 4) {
          const T a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
          const T *b0 = B + k * N, *b1 = b0 + N, *b2 = b1 + N, *b3 = b2 + N;
          for (int64_t j = j0; j < j1; ++j) {
            T t = row[j];
            t += a0 * b0[j];
            t += a1 * b1[j];
            t += a2 * b2[j];
            t += a3 * b3[j];
            row[j] = t;
          }
        }
        for (; k < k1; ++k) {
          const T ak = a[k];
          const T* bk = B + k * N;
          for (int64_t j = j0; j < j1; ++j) row[j] += ak * bk[j];
        }
      }
    }
  }
}

// Runs f(i0, i1) over [0, n) in contiguous ranges, one per host thread when `work` (multiply-adds)
// is large enough to pay for them, else in this thread; then polls for Ctrl-C (f returns early
// when interrupt_requested(), so a signal stops even one big kernel within a block's time).
template <typename F>
void parallel_ranges(int64_t n, int64_t work, F&& f) {
  const int64_t threads = work < (int64_t{1} << 22) ? 1 : std::min<int64_t>(n, host_threads());
  if (threads <= 1) {
    f(int64_t{0}, n);
  } else {
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t) pool.emplace_back([&f, n, t, threads] { f(n * t / threads, n * (t + 1) / threads); });
    for (auto& th : pool) th.join();
  }
  poll_interrupt();
}

template <typename T>
void matmul_block(const T* A, const T* B, T* C, int64_t M, int64_t K, int64_t N) {
  parallel_ranges(M, M * K * N, [=](int64_t i0, int64_t i1) { matmul_rows(A, B, C, i0, i1, K, N); });
}

std::vector<Tensor> op_matmul(const OpCall& c) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 1);
  require_same_dtype(c, a, b);
  if (a.rank() == 0 || b.rank() == 0)
    fail(c, "MatMul inputs must have rank >= 1, got shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  Shape sa = a.shape(), sb = b.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  if (sb[sb.size() - 2] != K)
    fail(c, "inner dimensions do not match: A " + shape_str(a.shape()) + " and B " + shape_str(b.shape()) +
                " (" + std::to_string(K) + " vs " + std::to_string(sb[sb.size() - 2]) + ")");
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = broadcast_shapes(c, ba, bb);
  const auto map_a = broadcast_map(ba, batch);
  const auto map_b = broadcast_map(bb, batch);
  Shape out = batch;
  if (!a_vec) out.push_back(M);
  if (!b_vec) out.push_back(N);
  const size_t nb = map_a.size();

  auto run = [&](auto zero, const auto& av, const auto& bv) {
    using T = decltype(zero);
    std::vector<T> r(nb * static_cast<size_t>(M * N));
    for (size_t i = 0; i < nb; ++i)
      matmul_block<T>(av.data() + map_a[i] * M * K, bv.data() + map_b[i] * K * N,
                      r.data() + static_cast<int64_t>(i) * M * N, M, K, N);
    return r;
  };
  if (is_float(a.dtype())) return {from_f64(a.dtype(), out, run(0.0, a.to_f64(), b.to_f64()))};
  auto to_u = [](const Tensor& t) {
    const auto v = t.to_i64();
    return std::vector<uint64_t>(v.begin(), v.end());
  };
  const auto r = run(uint64_t{0}, to_u(a), to_u(b));
  return {from_i64_as(a.dtype(), out, std::vector<int64_t>(r.begin(), r.end()))};
}

std::vector<Tensor> op_gemm(const OpCall& c) {
  const Tensor& a = in(c, 0);
  const Tensor& b = in(c, 1);
  const Tensor* cc = opt_in(c, 2);
  require_same_dtype(c, a, b);
  const auto& at = attrs(c);
  const double alpha = at.get_float("alpha", 1.0), beta = at.get_float("beta", 1.0);
  const bool ta = at.get_int("transA", 0) != 0, tb = at.get_int("transB", 0) != 0;
  if (a.rank() != 2 || b.rank() != 2)
    fail(c, "Gemm needs 2-D A and B, got shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  const int64_t M = ta ? a.shape()[1] : a.shape()[0], K = ta ? a.shape()[0] : a.shape()[1];
  const int64_t Kb = tb ? b.shape()[1] : b.shape()[0], N = tb ? b.shape()[0] : b.shape()[1];
  if (K != Kb)
    fail(c, "inner dimensions do not match: A " + shape_str(a.shape()) + (ta ? " (transposed)" : "") + " and B " +
                shape_str(b.shape()) + (tb ? " (transposed)" : ""));
  auto av = a.to_f64(), bv = b.to_f64();
  if (ta) {
    std::vector<double> t(av.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) t[static_cast<size_t>(i * K + k)] = av[static_cast<size_t>(k * M + i)];
    av.swap(t);
  }
  if (tb) {
    std::vector<double> t(bv.size());
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) t[static_cast<size_t>(k * N + j)] = bv[static_cast<size_t>(j * K + k)];
    bv.swap(t);
  }
  std::vector<double> r(static_cast<size_t>(M * N));
  matmul_block<double>(av.data(), bv.data(), r.data(), M, K, N);
  for (double& e : r) e *= alpha;
  const Shape out{M, N};
  if (cc) {
    if (!broadcastable_to(cc->shape(), out))
      fail(c, "C of shape " + shape_str(cc->shape()) + " cannot be broadcast to the output shape " + shape_str(out));
    const auto map = broadcast_map(cc->shape(), out);
    const auto cv = cc->to_f64();
    for (size_t i = 0; i < r.size(); ++i) r[i] += beta * cv[static_cast<size_t>(map[i])];
  }
  if (is_float(a.dtype())) return {from_f64(a.dtype(), out, r)};
  std::vector<int64_t> ri(r.size());
  for (size_t i = 0; i < r.size(); ++i) ri[i] = static_cast<int64_t>(std::llround(r[i]));
  return {from_i64_as(a.dtype(), out, ri)};
}

// ---- convolution ---------------------------------------------------------------------------

// Spatial geometry of Conv/ConvTranspose, padded to 3 spatial dims (leading dims of size 1).
struct Geometry {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

std::vector<int64_t> spatial_attr(const OpCall& c, const char* name, int64_t nsp, int64_t def) {
  auto v = attrs(c).get_ints(name, std::vector<int64_t>(static_cast<size_t>(nsp), def));
  if (static_cast<int64_t>(v.size()) != nsp)
    fail(c, std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values; expected " +
                std::to_string(nsp) + " (one per spatial dimension)");
  return v;
}

std::vector<int64_t> pads_attr(const OpCall& c, int64_t nsp) {
  auto v = attrs(c).get_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * nsp), 0));
  if (static_cast<int64_t>(v.size()) != 2 * nsp)
    fail(c, "attribute 'pads' has " + std::to_string(v.size()) + " values; expected " + std::to_string(2 * nsp) +
                " (begin and end per spatial dimension)");
  for (int64_t p : v)
    if (p < 0) fail(c, "attribute 'pads' has a negative value " + std::to_string(p));
  return v;
}

std::string auto_pad_attr(const OpCall& c) {
  const std::string ap = attrs(c).get_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    fail(c, "attribute 'auto_pad' = '" + ap + "' is not supported", "use NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  return ap;
}

void check_conv_inputs(const OpCall& c, const Tensor& x, const Tensor& w) {
  require_float(c, x, "input X");
  require_same_dtype(c, x, w);
  if (x.rank() < 3 || x.rank() > 5)
    fail(c, "input X of shape " + shape_str(x.shape()) + " is not supported",
         "the reference executor supports 1-D, 2-D and 3-D convolutions (X of rank 3..5)");
  if (w.rank() != x.rank())
    fail(c, "weight W of shape " + shape_str(w.shape()) + " does not match input X of shape " + shape_str(x.shape()) +
                " (ranks differ)");
  if (attrs(c).has("kernel_shape")) {
    const auto ks = attrs(c).get_ints("kernel_shape");
    if (ks != Shape(w.shape().begin() + 2, w.shape().end()))
      fail(c, "attribute 'kernel_shape' " + shape_str(ks) + " does not match weight W of shape " + shape_str(w.shape()));
  }
}

std::vector<Tensor> op_conv(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& w = in(c, 1);
  const Tensor* bias = opt_in(c, 2);
  check_conv_inputs(c, x, w);
  const int64_t nsp = x.rank() - 2;
  const int64_t group = attrs(c).get_int("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1], M = w.shape()[0];
  if (group < 1 || C % group != 0 || M % group != 0 || w.shape()[1] * group != C)
    fail(c, "input X of shape " + shape_str(x.shape()) + " and weight W of shape " + shape_str(w.shape()) +
                " do not fit group = " + std::to_string(group),
         "W must be [M, C/group, k...] with C and M divisible by group");
  if (bias && (bias->rank() != 1 || bias->shape()[0] != M))
    fail(c, "bias B of shape " + shape_str(bias->shape()) + " does not match weight W of shape " + shape_str(w.shape()));
  const auto strides = spatial_attr(c, "strides", nsp, 1);
  const auto dil = spatial_attr(c, "dilations", nsp, 1);
  auto pads = pads_attr(c, nsp);
  const std::string ap = auto_pad_attr(c);

  Geometry g;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = i - (3 - nsp);  // index into the real spatial dims
    const bool real = j >= 0;
    g.in[i] = real ? x.shape()[static_cast<size_t>(2 + j)] : 1;
    g.k[i] = real ? w.shape()[static_cast<size_t>(2 + j)] : 1;
    g.s[i] = real ? strides[static_cast<size_t>(j)] : 1;
    g.d[i] = real ? dil[static_cast<size_t>(j)] : 1;
    if (g.s[i] < 1 || g.d[i] < 1) fail(c, "strides and dilations must be >= 1");
    const int64_t dk = (g.k[i] - 1) * g.d[i] + 1;
    if (!real) {
      g.pb[i] = g.pe[i] = 0;
    } else if (ap == "NOTSET") {
      g.pb[i] = pads[static_cast<size_t>(j)];
      g.pe[i] = pads[static_cast<size_t>(j + nsp)];
    } else if (ap == "VALID") {
      g.pb[i] = g.pe[i] = 0;
    } else {
      const int64_t o = (g.in[i] + g.s[i] - 1) / g.s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * g.s[i] + dk - g.in[i]);
      g.pb[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pe[i] = total - g.pb[i];
    }
    const int64_t span = g.in[i] + g.pb[i] + g.pe[i] - dk;
    if (span < 0)
      fail(c, "kernel of weight W " + shape_str(w.shape()) + " (dilated) is larger than the padded input X " +
                  shape_str(x.shape()));
    g.out[i] = span / g.s[i] + 1;
  }

  const auto xv = x.to_f64();
  const auto wv = w.to_f64();
  const std::vector<double> bv = bias ? bias->to_f64() : std::vector<double>{};
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
  const int64_t kvol = g.k[0] * g.k[1] * g.k[2];
  // Valid output-w range per kernel-w offset.
  std::vector<int64_t> ow_lo(static_cast<size_t>(g.k[2])), ow_hi(static_cast<size_t>(g.k[2]));
  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
    int64_t lo = g.out[2], hi = 0;
    for (int64_t ow = 0; ow < g.out[2]; ++ow) {
      const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
      if (iw >= 0 && iw < g.in[2]) {
        lo = std::min(lo, ow);
        hi = ow + 1;
      }
    }
    ow_lo[static_cast<size_t>(kw)] = lo;
    ow_hi[static_cast<size_t>(kw)] = hi;
  }

  Shape out_shape{N, M};
  for (int64_t i = 3 - nsp; i < 3; ++i) out_shape.push_back(g.out[i]);
  std::vector<double> r(static_cast<size_t>(N * M * out_plane));
  // One output plane per (n, oc), each summed in the same order whichever thread computes it: the
  // planes are split over the host's threads when the convolution is large (same bits).
  auto planes = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      if (interrupt_requested()) return;  // polled after the threads joined
      const int64_t n = p / M, oc = p % M;
      const int64_t grp = oc / Mg;
      double* acc = r.data() + (n * M + oc) * out_plane;
      std::fill(acc, acc + out_plane, bias ? bv[static_cast<size_t>(oc)] : 0.0);
      for (int64_t cl = 0; cl < Cg; ++cl) {
        const int64_t ic = grp * Cg + cl;
        const double* xp = xv.data() + (n * C + ic) * in_plane;
        const double* wp = wv.data() + (oc * Cg + cl) * kvol;
        for (int64_t kd = 0; kd < g.k[0]; ++kd)
          for (int64_t kh = 0; kh < g.k[1]; ++kh)
            for (int64_t kw = 0; kw < g.k[2]; ++kw) {
              const double wt = wp[(kd * g.k[1] + kh) * g.k[2] + kw];
              const int64_t lo = ow_lo[static_cast<size_t>(kw)], hi = ow_hi[static_cast<size_t>(kw)];
              for (int64_t od = 0; od < g.out[0]; ++od) {
                const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (int64_t oh = 0; oh < g.out[1]; ++oh) {
                  const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                  if (ih < 0 || ih >= g.in[1]) continue;
                  const int64_t base = (id * g.in[1] + ih) * g.in[2] - g.pb[2] + kw * g.d[2];
                  double* arow = acc + (od * g.out[1] + oh) * g.out[2];
                  for (int64_t ow = lo; ow < hi; ++ow) arow[ow] += wt * xp[base + ow * g.s[2]];
                }
              }
            }
      }
    }
  };
  parallel_ranges(N * M, N * M * out_plane * Cg * kvol, planes);
  return {from_f64(x.dtype(), out_shape, r)};
}

std::vector<Tensor> op_conv_transpose(const OpCall& c) {
  const Tensor& x = in(c, 0);
  const Tensor& w = in(c, 1);
  const Tensor* bias = opt_in(c, 2);
  check_conv_inputs(c, x, w);
  const int64_t nsp = x.rank() - 2;
  const int64_t group = attrs(c).get_int("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1];
  if (group < 1 || C % group != 0 || w.shape()[0] != C)
    fail(c, "input X of shape " + shape_str(x.shape()) + " and weight W of shape " + shape_str(w.shape()) +
                " do not fit group = " + std::to_string(group),
         "ConvTranspose W must be [C, M/group, k...] with C divisible by group");
  const int64_t Mg = w.shape()[1], M = Mg * group;
  if (bias && (bias->rank() != 1 || bias->shape()[0] != M))
    fail(c, "bias B of shape " + shape_str(bias->shape()) + " does not match the " + std::to_string(M) +
                " output channels of weight W " + shape_str(w.shape()));
  const auto strides = spatial_attr(c, "strides", nsp, 1);
  const auto dil = spatial_attr(c, "dilations", nsp, 1);
  const auto opad = spatial_attr(c, "output_padding", nsp, 0);
  auto pads = pads_attr(c, nsp);
  const std::string ap = auto_pad_attr(c);
  std::vector<int64_t> oshape;
  if (attrs(c).has("output_shape")) {
    oshape = attrs(c).get_ints("output_shape");
    if (static_cast<int64_t>(oshape.size()) == nsp + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
    if (static_cast<int64_t>(oshape.size()) != nsp)
      fail(c, "attribute 'output_shape' " + shape_str(oshape) + " does not have one value per spatial dimension");
  }

  Geometry g;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = i - (3 - nsp);
    const bool real = j >= 0;
    const size_t ju = static_cast<size_t>(std::max<int64_t>(j, 0));
    g.in[i] = real ? x.shape()[static_cast<size_t>(2 + j)] : 1;
    g.k[i] = real ? w.shape()[static_cast<size_t>(2 + j)] : 1;
    g.s[i] = real ? strides[ju] : 1;
    g.d[i] = real ? dil[ju] : 1;
    if (g.s[i] < 1 || g.d[i] < 1) fail(c, "strides and dilations must be >= 1");
    const int64_t op = real ? opad[ju] : 0;
    const int64_t full = g.s[i] * (g.in[i] - 1) + op + (g.k[i] - 1) * g.d[i] + 1;
    if (!real) {
      g.pb[i] = g.pe[i] = 0;
      g.out[i] = 1;
      continue;
    }
    int64_t target = -1;
    if (!oshape.empty()) target = oshape[ju];
    else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") target = g.in[i] * g.s[i];
    if (target >= 0) {
      // total may be negative when output_shape asks for more than the full size: the extra
      // positions get no contributions (floor division, as ONNX's reference computes it).
      const int64_t total = full - target;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (ap == "SAME_UPPER") {
        g.pb[i] = half;
        g.pe[i] = total - half;
      } else {
        g.pb[i] = total - half;
        g.pe[i] = half;
      }
      g.out[i] = target;
    } else {
      if (ap == "NOTSET") {
        g.pb[i] = pads[ju];
        g.pe[i] = pads[ju + static_cast<size_t>(nsp)];
      } else {
        g.pb[i] = g.pe[i] = 0;  // VALID
      }
      g.out[i] = full - g.pb[i] - g.pe[i];
      if (g.out[i] < 0)
        fail(c, "pads " + shape_str(pads) + " exceed the transposed-conv output for input X " + shape_str(x.shape()));
    }
  }

  const auto xv = x.to_f64();
  const auto wv = w.to_f64();
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
  const int64_t kvol = g.k[0] * g.k[1] * g.k[2];
  const int64_t Cg = C / group;
  Shape out_shape{N, M};
  for (int64_t i = 3 - nsp; i < 3; ++i) out_shape.push_back(g.out[i]);
  std::vector<double> r(static_cast<size_t>(N * M * out_plane), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ic = 0; ic < C; ++ic) {
      poll_interrupt();
      const int64_t grp = ic / Cg;
      const double* xp = xv.data() + (n * C + ic) * in_plane;
      for (int64_t m = 0; m < Mg; ++m) {
        const int64_t oc = grp * Mg + m;
        double* acc = r.data() + (n * M + oc) * out_plane;
        const double* wp = wv.data() + (ic * Mg + m) * kvol;
        for (int64_t kd = 0; kd < g.k[0]; ++kd)
          for (int64_t kh = 0; kh < g.k[1]; ++kh)
            for (int64_t kw = 0; kw < g.k[2]; ++kw) {
              const double wt = wp[(kd * g.k[1] + kh) * g.k[2] + kw];
              for (int64_t id = 0; id < g.in[0]; ++id) {
                const int64_t od = id * g.s[0] - g.pb[0] + kd * g.d[0];
                if (od < 0 || od >= g.out[0]) continue;
                for (int64_t ih = 0; ih < g.in[1]; ++ih) {
                  const int64_t oh = ih * g.s[1] - g.pb[1] + kh * g.d[1];
                  if (oh < 0 || oh >= g.out[1]) continue;
                  const double* xrow = xp + (id * g.in[1] + ih) * g.in[2];
                  double* arow = acc + (od * g.out[1] + oh) * g.out[2];
                  for (int64_t iw = 0; iw < g.in[2]; ++iw) {
                    const int64_t ow = iw * g.s[2] - g.pb[2] + kw * g.d[2];
                    if (ow >= 0 && ow < g.out[2]) arow[ow] += wt * xrow[iw];
                  }
                }
              }
            }
      }
    }
  if (bias) {
    const auto bv = bias->to_f64();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t oc = 0; oc < M; ++oc) {
        double* acc = r.data() + (n * M + oc) * out_plane;
        for (int64_t i = 0; i < out_plane; ++i) acc[i] += bv[static_cast<size_t>(oc)];
      }
  }
  return {from_f64(x.dtype(), out_shape, r)};
}

}  // namespace

std::vector<OpEntry> linalg_ops() {
  return {{"MatMul", op_matmul}, {"Gemm", op_gemm}, {"Conv", op_conv}, {"ConvTranspose", op_conv_transpose}};
}

}  // namespace tessera::reference
