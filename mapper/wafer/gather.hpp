#pragma once
// The templates of compile.hpp's Compiled that read the output back from the PEs (included there).
#include <string>
#include <vector>

#include "mapper/wafer/compile.hpp"

namespace tessera::wafer {

template <class Read>
Tensor Compiled::gather_output(Read read) const {
  const DenseKernel& k = kernels.back();
  if (k.rnn) return gather_state(read);  // (a recurrent stack's final state)
  // Rows per sample: 1, or a conv's (pooled) positions, which the output has channel-major.
  const int64_t R = k.rows_out() / k.samples;
  std::vector<float> out(static_cast<size_t>(k.rows_out() * k.feat_N()), 0.0f);
  // The chain ends: the last column (K on columns) or the last row (K on rows); block i of N.
  for (int64_t i = 0; i < k.nblocks(); ++i) {
    const int64_t px = k.k_on_columns ? k.w - 1 : i, py = k.k_on_columns ? i : k.h - 1;
    const size_t l = static_cast<size_t>(&k - kernels.data());
    const bool arena = sequenced && !k.attn && !k.pkh && k.gate_of < 0;  // y in the sequencer's arena
    const std::vector<float> y = read(k.x0 + px, k.y0 + py, arena ? std::string("Yar") : (k.attn ? "att" : k.pkh ? "p" : k.gate_of >= 0 ? "gt" : "y") + std::to_string(l));
    const size_t base = arena ? static_cast<size_t>(y_off[l]) : 0;
    const int64_t nb = k.feat_nb(), N = k.feat_N();
    for (int64_t s = 0; s < k.samples; ++s)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < nb && i * nb + n < N; ++n)
          out[static_cast<size_t>((s * N + i * nb + n) * R + r)] = y[base + static_cast<size_t>((s * R + r) * nb + n)];
  }
  return Tensor::from_f32(output_shape, std::move(out));
}

template <class Read>
Tensor Compiled::gather_state(Read read) const {
  const DenseKernel& k = kernels.back();
  const size_t l = kernels.size() - 1;
  const int64_t H = output_shape.back(), Ln = k.k_on_columns ? k.h : k.w, hb = (H + Ln - 1) / Ln;
  std::vector<float> out(static_cast<size_t>(k.B * H), 0.0f);
  for (int64_t i = 0; i < Ln && i * hb < H; ++i) {
    const std::vector<float> y = read(k.x0 + (k.k_on_columns ? k.w - 1 : i), k.y0 + (k.k_on_columns ? i : k.h - 1), sequenced ? std::string("Yar") : "y" + std::to_string(l));
    const size_t base = sequenced ? static_cast<size_t>(y_off[l]) : 0;
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t u = 0; u < hb && i * hb + u < H; ++u) out[static_cast<size_t>(b * H + i * hb + u)] = y[base + static_cast<size_t>(b * k.nb + k.rnn_slot * hb + u)];
  }
  return Tensor::from_f32(output_shape, std::move(out));
}

}  // namespace tessera::wafer
