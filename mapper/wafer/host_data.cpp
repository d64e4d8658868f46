// Host-side data movement of a compiled model (compile.hpp): the graph input, residual and target
// blocks as PE arrays, and a layer's weights and weight gradients in MemoryX order.
#include <algorithm>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

std::vector<HostArray> Compiled::place_input(const Tensor& x) const {
  const DenseKernel& k = kernels.front();
  const auto v = x.to_f32();
  std::vector<HostArray> out;
  if (k.rnn) {  // a recurrent stack: step 0's x at the sources, each later step's at the chain ends of the kernel before it
    detail::rnn_place_input(*this, v, out);
    return out;
  }
  // Every PE of the source edge sends x values, so each gets its block: lines past the K blocks
  // (a rectangle wider than the kernel needs) zeros, which their zero weight rows multiply. Left
  // unwritten, they would send what the array's bytes last held -- a later kernel's data when the
  // array shares them (live ranges), whose NaN or infinity times zero is not zero (fp16 runs after
  // the first step or micro-batch).
  const int64_t lines = std::max(k.kblocks(), k.k_on_columns ? k.w : k.h);
  for (int64_t i = 0; i < lines; ++i) {
    // The source PE of K block i: the start of its line in the flow direction.
    int64_t px = 0, py = 0;
    if (k.k_on_columns) px = i, py = k.x_flow == Dir::S ? 0 : k.h - 1;
    else py = i, px = k.x_flow == Dir::E ? 0 : k.w - 1;
    if (k.spatial()) {  // channels i cb .. i cb + cb - 1 as [sample, h, w, channel], inside a zero border (a ConvTranspose's: zeros between too)
      const int64_t H = k.ih_raw, W = k.iw_raw;  // a 1-D input [N, C, L] is of height 1
      HostArray a{k.x0 + px, k.y0 + py, "xs0", std::vector<float>(static_cast<size_t>(k.xs_elems()), 0.0f)};
      for (int64_t s = 0; s < k.samples; ++s)
        for (int64_t c = 0, cc = i / k.kh_blocks() * k.cblk; c < k.cblk && cc + c < k.cin; ++c)
          for (int64_t y = 0; y < H; ++y)
            for (int64_t x2 = 0; x2 < W; ++x2)
              a.values[static_cast<size_t>(((s * k.ih + y * k.ish + k.pad_t) * k.iw + x2 * k.isw + k.pad_l) * k.cblk + c)] =
                  v[static_cast<size_t>(((s * k.cin + cc + c) * H + y) * W + x2)];
      out.push_back(std::move(a));
      continue;
    }
    HostArray a{k.x0 + px, k.y0 + py, "xs0", std::vector<float>(static_cast<size_t>(k.B * k.kb), 0.0f)};
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t j = 0; j < k.kb && i * k.kb + j < k.K; ++j) a.values[static_cast<size_t>(b * k.kb + j)] = v[static_cast<size_t>(b * k.K + i * k.kb + j)];
    out.push_back(std::move(a));
  }
  // Pipelined residuals of the graph input: its blocks on the adding kernel's chain ends too.
  for (size_t l = 0; l < kernels.size(); ++l) {
    const DenseKernel& r = kernels[l];
    if (!r.res_host) continue;
    for (int64_t i = 0; i < r.nblocks(); ++i) {
      const int64_t px = r.k_on_columns ? r.w - 1 : i, py = r.k_on_columns ? i : r.h - 1;
      HostArray a{r.x0 + px, r.y0 + py, "xr" + std::to_string(l), std::vector<float>(static_cast<size_t>(r.B * r.nb), 0.0f)};
      for (int64_t b = 0; b < r.B; ++b)
        for (int64_t j = 0; j < r.nb && i * r.nb + j < r.N; ++j) {
          // (16-bit compute: the input as the layers take it, rounded to the compute type; the
          // block itself stays fp32, as the sums it is added to)
          const float x0 = v[static_cast<size_t>(b * r.N + i * r.nb + j)];
          a.values[static_cast<size_t>(b * r.nb + j)] = half() ? decode_elem(encode_elem(x0, compute), compute) : x0;
        }
      out.push_back(std::move(a));
    }
  }
  return out;
}

std::vector<HostArray> Compiled::place_input2(const Tensor& x2) const {
  const auto v = x2.to_f32();
  std::vector<HostArray> out;
  for (size_t f = 1; f < kernels.size(); ++f) {
    const DenseKernel& k = kernels[f];
    if (!k.reads_input2) continue;
    if (static_cast<int64_t>(v.size()) != k.B * k.K)
      throw InputError("graph input '" + input2 + "'", "has " + std::to_string(v.size()) + " values; kernel '" + k.name + "' reads it as " + std::to_string(k.B) + " rows of " +
                                                         std::to_string(k.K) + " features",
                       "give the input the shape the model declares " + shape_str(input2_shape));
    // The chain ends that hand off to the run of followers k belongs to (layer_program: kernel
    // lead - 1's, where lead is the run's first kernel, the cross-attention's Q); line i holds
    // K block i (zeros past K: their zero weight rows multiply them).
    size_t lead = f;
    while (lead > 0 && kernels[lead].k_on_columns == kernels[lead - 1].k_on_columns) --lead;  // (detail::follower)
    const DenseKernel& p = kernels[lead - 1];
    const int64_t lines = p.k_on_columns ? p.h : p.w;
    for (int64_t i = 0; i < lines; ++i) {
      const int64_t px = p.k_on_columns ? p.w - 1 : i, py = p.k_on_columns ? i : p.h - 1;
      HostArray a{p.x0 + px, p.y0 + py, "xg" + std::to_string(f), std::vector<float>(static_cast<size_t>(k.B * k.kb), 0.0f)};
      for (int64_t b = 0; b < k.B; ++b)
        for (int64_t j = 0; j < k.kb && i * k.kb + j < k.K; ++j) a.values[static_cast<size_t>(b * k.kb + j)] = v[static_cast<size_t>(b * k.K + i * k.kb + j)];
      out.push_back(std::move(a));
    }
  }
  return out;
}

std::vector<float> Compiled::memoryx_layout(const DenseKernel& k) const {
  // Lane `lane`, stream position t: block `pos` = t / (kb nb) along the line, then column-major
  // within the block. Stored position-major, lanes interleaved (the order SwarmX hands them out).
  std::vector<float> out(static_cast<size_t>(k.lanes * k.lane_len), 0.0f);
  const int64_t bs = k.kb * k.nb;
  for (int64_t t = 0; t < k.lane_len; ++t)
    for (int64_t lane = 0; lane < k.lanes; ++lane) {
      const int64_t pos = t / bs, e = t % bs, j = e / k.nb, i = e % k.nb;
      const int64_t kk = pos * k.kb + j, nn = lane * k.nb + i;  // pos runs along K, the lane along N
      if (kk < k.K && nn < k.N) out[static_cast<size_t>(t * k.lanes + lane)] = k.W[static_cast<size_t>(kk * k.N + nn)];
    }
  return out;
}

std::vector<HostArray> Compiled::place_target(const Tensor& t) const {
  const DenseKernel& k = kernels.back();
  const auto v = t.to_f32();
  std::vector<HostArray> out;
  for (int64_t i = 0; i < k.nblocks(); ++i) {
    const int64_t px = k.k_on_columns ? k.w - 1 : i, py = k.k_on_columns ? i : k.h - 1;
    HostArray a{k.x0 + px, k.y0 + py, "tgt", std::vector<float>(static_cast<size_t>(k.B * k.nb), 0.0f)};
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t n = 0; n < k.nb && i * k.nb + n < k.N; ++n) {
        const float tv = v[static_cast<size_t>(b * k.N + i * k.nb + n)];
        // mixed precision: the target in the compute type (as the training graph casts it), kept in fp32
        a.values[static_cast<size_t>(b * k.nb + n)] = half() ? decode_elem(encode_elem(tv, compute), compute) : tv;
      }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<float> Compiled::gradient_layout(const DenseKernel& k, const std::vector<std::vector<float>>& lanes) const {
  // Lane `lane` carries the blocks of its chain from the chain end back: stream block q is the
  // block of position len - 1 - q; MemoryX holds block `pos` at stream positions pos * bs ...
  const int64_t bs = k.kb * k.nb, len = k.lane_len / bs;
  std::vector<float> out(static_cast<size_t>(k.lanes * k.lane_len), 0.0f);
  for (int64_t lane = 0; lane < k.lanes; ++lane)
    for (int64_t pos = 0; pos < len; ++pos)
      for (int64_t e = 0; e < bs; ++e)
        out[static_cast<size_t>((pos * bs + e) * k.lanes + lane)] = lanes[static_cast<size_t>(lane)][static_cast<size_t>((len - 1 - pos) * bs + e)];
  return out;
}

std::vector<float> Compiled::from_memoryx_layout(const DenseKernel& k, const std::vector<float>& mx) const {
  std::vector<float> w(static_cast<size_t>(k.K * k.N), 0.0f);
  const int64_t bs = k.kb * k.nb;
  for (int64_t t = 0; t < k.lane_len; ++t)
    for (int64_t lane = 0; lane < k.lanes; ++lane) {
      const int64_t pos = t / bs, e = t % bs, j = e / k.nb, i = e % k.nb;
      const int64_t kk = pos * k.kb + j, nn = lane * k.nb + i;
      if (kk < k.K && nn < k.N) w[static_cast<size_t>(kk * k.N + nn)] = mx[static_cast<size_t>(t * k.lanes + lane)];
    }
  return w;
}

}  // namespace tessera::wafer
