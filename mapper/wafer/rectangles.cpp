// The rectangles (compile.hpp; docs/wafer-compiler.md "Layout", "Weight streaming"): pipelined
// mode's block search (the smallest block whose kernels' staircase fits the fabric and whose PEs'
// data fits SRAM) and weight streaming's one rectangle (as large as useful, grown while a PE's data
// does not fit), with the checks that depend on them.
#include <algorithm>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

void place_pipelined_rect(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt) {
  const int64_t area = cfg.data_area_bytes();
  const int64_t wbytes_pe = c.half() ? 2 : 4;
  // Residuals: the graph input the host places on the kernel's chain ends; the input of the
  // kernel it reads passes through that kernel (pass_through); others have no place here.
  std::vector<size_t> passes;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    DenseKernel& k = c.kernels[l];
    if (k.residual < 0) continue;
    const DenseKernel& r = c.kernels[static_cast<size_t>(k.residual)];
    if (k.res_out || k.res_preln)
      throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode maps a residual of the graph input or of a kernel's input; this one adds the " +
                                            (k.res_preln ? "value before the LayerNorm" : "output") + " of kernel '" + r.name + "'",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}");
    if (r.src < 0 && r.xread == DenseKernel::XRead::rows && !k.attn) {
      k.res_host = true;
    } else if (k.src == k.residual && k.N == r.K && r.xread == DenseKernel::XRead::rows && k.xread == DenseKernel::XRead::rows && !r.layernorm && !r.softmax &&
               !r.attn && !r.pkh && r.residual < 0 && !k.activated() && !k.attn && !k.softmax) {
      // (the identity rows add the input into the sum, before the bias: an activation of k would
      // then act on it, where the graph adds it after)
      passes.push_back(l);
    } else {
      const bool after = k.activated() || k.attn || k.softmax;
      throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode maps a residual of the graph input, or of the input of the kernel it reads (x + W2 f(W1 x), added after the bias); this one adds the input of kernel '" + r.name + "'" +
                                            (after && k.src == k.residual ? " after an activation or attention" : ""),
                       "use \"mapping\": {\"mode\": \"weight_streaming\"} (every kernel on one rectangle, held inputs on the PEs)");
    }
  }
  // The smallest block (most PEs, shortest per-PE work) whose staircase fits the fabric and whose
  // per-PE data fits the SRAM data area; a given block is taken as is.
  std::vector<int64_t> cands;
  if (opt.block > 0) cands = {opt.block};
  else
    for (int64_t b = 1; b <= 4096; b *= 2) cands.push_back(b);
  // Each candidate block starts from a copy of the kernels. Only a fused attention's (qkv_weights),
  // a pass-through pair's (pass_through) and recurrent layers' (rnn_pipelined, rnn_blocks: with
  // one, every kernel is copied) weights change with the block; the others' W -- all of a large
  // GEMV's or MLP's weights -- wait aside, not copied per candidate, and go back into the kernels
  // chosen (or into c's when none fits).
  std::vector<std::vector<float>> aside(c.kernels.size());
  {
    bool rnn = false;
    for (const auto& k : c.kernels) rnn = rnn || k.rnn || k.rnn_slot >= 0;
    std::vector<char> changes(c.kernels.size(), rnn);
    for (size_t l = 0; l < c.kernels.size(); ++l) changes[l] = changes[l] || c.kernels[l].qkv;
    for (const size_t l : passes) changes[l] = changes[static_cast<size_t>(c.kernels[l].residual)] = 1;
    for (size_t l = 0; l < c.kernels.size(); ++l)
      if (!changes[l]) aside[l] = std::move(c.kernels[l].W);
  }
  auto put_back = [&](std::vector<DenseKernel>& ks) {
    for (size_t l = 0; l < ks.size(); ++l)
      if (!aside[l].empty()) ks[l].W = std::move(aside[l]);
  };
  std::string why;
  bool placed = false;
  for (const int64_t b : cands) {
    std::vector<DenseKernel> ks = c.kernels;
    int64_t bad_dh = 0;  // the attention takes whole heads, or whole fractions of one, per chain end
    for (auto& k : ks)
      if (k.qkv) {
        if (b % k.dh != 0 && k.dh % b != 0) bad_dh = k.dh;
        qkv_weights(k, b);
      }
    if (bad_dh) {
      if (opt.block > 0)
        throw InputError("/mapping/wafer_block", "block " + std::to_string(b) + ": the attention's heads of " + std::to_string(bad_dh) + " features do not split into blocks of " + std::to_string(b) +
                                                     " (a chain end takes whole heads, or whole fractions of one)",
                         "give a block that divides the head size or is a multiple of it, or leave mapping.wafer_block out");
      continue;  // (the search goes on to the next power of two)
    }
    int64_t bad_gn = 0;  // GroupNorm: whole groups per chain end
    for (const auto& k : ks)
      if (k.gn_size > 1 && b % k.gn_size != 0) bad_gn = k.gn_size;
    if (bad_gn) {
      if (opt.block > 0)
        throw InputError("/mapping/wafer_block", "block " + std::to_string(b) + ": a GroupNorm's groups of " + std::to_string(bad_gn) + " channels do not split into blocks of " + std::to_string(b) +
                                                     " (a chain end takes whole groups)",
                         "give a block that is a multiple of the group size, or leave mapping.wafer_block out");
      if (why.empty()) why = "block " + std::to_string(b) + ": a GroupNorm's groups of " + std::to_string(bad_gn) + " channels would span several PEs";
      continue;
    }
    for (const size_t l : passes) pass_through(ks, l, b);
    const auto [W, H] = place_pipelined(ks, b);
    if (ks.back().softmax && ks.back().nblocks() != 1) {
      if (why.empty()) why = "block " + std::to_string(b) + ": the Softmax's " + std::to_string(ks.back().N) + " outputs would span several PEs";
      continue;
    }
    int64_t worst = 0;
    size_t wk = 0;
    for (size_t l = 0; l < ks.size(); ++l)
      if (pe_bytes(ks[l], true, wbytes_pe) > worst) worst = pe_bytes(ks[l], true, wbytes_pe), wk = l;
    if (W > cfg.fabric_width || H > cfg.fabric_height) {
      why = "block " + std::to_string(b) + ": the layers' rectangles span " + std::to_string(W) + " x " + std::to_string(H) + " PEs, the fabric is " +
            std::to_string(cfg.fabric_width) + " x " + std::to_string(cfg.fabric_height);
      continue;
    }
    if (worst > area) {
      if (why.rfind("block", 0) == 0 && why.find("SRAM") != std::string::npos) continue;  // keep the first such reason (smallest block)
      why = "block " + std::to_string(b) + ": a PE of kernel '" + ks[wk].name + "' needs " + std::to_string(worst) + " bytes of SRAM, the data area is " +
            std::to_string(area);
      continue;
    }
    put_back(ks);
    c.kernels = std::move(ks);
    c.fabric_width = W;
    c.fabric_height = H;
    c.sram_high_water = worst;
    placed = true;
    break;
  }
  if (!placed) {
    put_back(c.kernels);
    int64_t wbytes = 0;
    for (const auto& k : c.kernels) wbytes += k.K * k.N * (k.qkv ? 3 : 1) * wbytes_pe;  // (a fused kernel holds V's projection until its block is chosen)
    const int64_t sram = cfg.fabric_width * cfg.fabric_height * area;
    const std::string wdesc = std::to_string(wbytes) + " bytes in " + (c.half() ? "16 bits" : "fp32");
    // The weights alone, or the layers' PEs with their activations (a PE's data at the batch, the
    // staircase's extent), do not fit.
    const std::string msg = wbytes > sram ? "the weights (" + wdesc + ") do not fit on the wafer in pipelined mode: more than the " + std::to_string(sram) +
                                                " bytes of SRAM data area of all " + std::to_string(cfg.fabric_width * cfg.fabric_height) + " PEs"
                                          : "the layers do not fit on the wafer in pipelined mode with their weights resident (" + wdesc + " of weights): " + why;
    throw InputError("/mapping/mode", msg,
                     std::string("use \"mapping\": {\"mode\": \"weight_streaming\"}: weights then stream from MemoryX layer by layer") +
                         (c.half() ? "" : ", or compute in 16 bits (precision.compute fp16, bf16 or cbf16)") + ", or give a larger fabric");
  }
}

void place_streaming_rect(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt) {
  const int64_t area = cfg.data_area_bytes();
  const int64_t wbytes_pe = c.half() ? 2 : 4;
  // One rectangle for every layer: as large as useful (blocks of at least kMinBlock per axis)
  // within the fabric, unless given.
  constexpr int64_t kMinBlock = 16;
  int64_t wneed = 1, hneed = 1;
  const std::vector<bool> orient = streaming_orientations(c.kernels);
  for (size_t l = 0; l < c.kernels.size(); ++l) c.kernels[l].k_on_columns = orient[l];
  // Residuals whose input lies on the other edge move along the diagonal: a square rectangle.
  bool moves = false;
  for (auto& k : c.kernels) {
    const int64_t rs = k.residual < 0 || k.res_host ? -1 : res_producer(c.kernels, k);
    k.res_move = rs >= 0 && c.kernels[static_cast<size_t>(rs)].k_on_columns != k.k_on_columns && !opt.training && !k.res_preln && !k.res_mul;  // (a pre-LayerNorm value or a gate's factor does not move: compile's residual check names it)
    moves = moves || k.res_move;
  }
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    const int64_t kd = k.xread == DenseKernel::XRead::rows ? k.K : k.cin;  // conv / flatten: channel blocks along K
    const int64_t on_cols = k.k_on_columns ? kd : k.N, on_rows = k.k_on_columns ? k.N : kd;
    wneed = std::max(wneed, cdiv(on_cols, kMinBlock));
    hneed = std::max(hneed, cdiv(on_rows, kMinBlock));
  }
  // Not given: start from the weights' need and double both sides (within the fabric) while a
  // PE's data does not fit -- activations of many rows need more PEs than the weights do.
  const bool auto_rect = opt.rect_width <= 0 && opt.rect_height <= 0;
  int64_t w = 0, h = 0;
  for (int64_t grow = std::max<int64_t>(1, opt.rect_grow0);; grow *= 2) {
  c.rect_grow = auto_rect ? grow : 0;
  w = opt.rect_width > 0 ? opt.rect_width : std::min(cfg.fabric_width, wneed * grow);
  h = opt.rect_height > 0 ? opt.rect_height : std::min(cfg.fabric_height, hneed * grow);
  {  // A final Softmax (and softmax cross-entropy) runs on the chain end holding all N outputs of a
     // sample: one PE along the last layer's output axis when that side is the compiler's to choose.
    const DenseKernel& k = c.kernels.back();
    const bool given = k.k_on_columns ? opt.rect_height > 0 : opt.rect_width > 0;
    if (!given && k.softmax && k.N > 1) (k.k_on_columns ? h : w) = 1;
  }
  for (const auto& k : c.kernels)  // attention: whole heads per chain-end PE (nb a multiple of dh)
    if (k.attn) {
      int64_t& len = k.k_on_columns ? h : w;
      const bool given = k.k_on_columns ? opt.rect_height > 0 : opt.rect_width > 0;
      const bool rope = !k.attn_q_cos.empty() || !k.attn_k_cos.empty();  // (rotary embeddings: whole pairs of a head's features)
      auto fits = [&](int64_t n) { const int64_t b = cdiv(k.N, n); return b % k.dh == 0 || (k.dh % b == 0 && (!rope || b % 2 == 0)); };
      while (!given && len > 1 && !fits(len)) --len;
      if (!fits(len))
        throw InputError("/mapping/wafer_rect", "the attention of kernel '" + k.name + "' needs whole heads, or whole fractions of one" + (rope ? " of an even size (rotary embeddings rotate pairs of features)," : ",") + " on each chain-end PE: " + std::to_string(k.N) +
                                                    " features over " + std::to_string(len) + " PEs is " + std::to_string(cdiv(k.N, len)) + " per PE, heads have " + std::to_string(k.dh),
                         std::string("give a rectangle whose ") + (k.k_on_columns ? "height" : "width") + " makes the features per PE a multiple of the head size or " + (rope ? "an even" : "a") + " divisor of it");
    }
  for (const auto& k : c.kernels)  // GroupNorm: whole groups per chain-end PE (nb a multiple of the group's channels)
    if (k.gn_size > 1) {
      int64_t& len = k.k_on_columns ? h : w;
      const bool given = k.k_on_columns ? opt.rect_height > 0 : opt.rect_width > 0;
      auto fits = [&](int64_t n) { return cdiv(k.N, n) % k.gn_size == 0; };
      while (!given && len > 1 && !fits(len)) --len;
      if (!fits(len))
        throw InputError("/mapping/wafer_rect", "the GroupNorm of kernel '" + k.name + "' needs whole groups on each chain-end PE: " + std::to_string(k.N) + " channels over " +
                                                    std::to_string(len) + " PEs is " + std::to_string(cdiv(k.N, len)) + " per PE, groups have " + std::to_string(k.gn_size),
                         std::string("give a rectangle whose ") + (k.k_on_columns ? "height" : "width") + " makes the channels per PE a multiple of " + std::to_string(k.gn_size) +
                             ", or leave mapping.wafer_rect out");
    }
  if (moves && w != h) {
    const auto it = std::find_if(c.kernels.begin(), c.kernels.end(), [](const DenseKernel& k) { return k.res_move; });
    if (!auto_rect)
      throw InputError("/mapping/wafer_rect", "kernel '" + it->name + "' adds a residual from the other edge of the rectangle, which moves along its diagonal: the rectangle must be square, not " +
                                                  std::to_string(w) + " x " + std::to_string(h),
                       "give a square mapping.wafer_rect, or leave it out");
    w = h = std::min({std::max(w, h), cfg.fabric_width, cfg.fabric_height});
  }
  if (w > cfg.fabric_width || h > cfg.fabric_height)
    throw InputError("/mapping/wafer_rect", "the rectangle " + std::to_string(w) + " x " + std::to_string(h) + " is larger than the fabric " +
                                               std::to_string(cfg.fabric_width) + " x " + std::to_string(cfg.fabric_height));
  place_streaming(c.kernels, w, h);
  // Softmax cross-entropy runs where a sample's every class is: the last kernel's N in one block,
  // on its first line's chain end (the other lines' blocks are padding: zero weights, and the loss
  // program gives them dy = 0; loss.cpp).
  if (opt.training && opt.loss == "softmax_cross_entropy") c.kernels.back().nb = c.kernels.back().N;
  for (const auto& k : c.kernels)  // (a square rectangle for a moved residual may have changed it)
    if (k.gn_size > 1 && k.nb % k.gn_size != 0)
      throw InputError("/mapping/wafer_rect", "the GroupNorm of kernel '" + k.name + "' needs whole groups on each chain-end PE: the " + std::to_string(w) + " x " + std::to_string(h) +
                                                  " rectangle gives " + std::to_string(k.nb) + " channels per PE, groups have " + std::to_string(k.gn_size),
                       "give a rectangle whose side along the kernel's channels makes the channels per PE a multiple of the group size");
  if (c.sequenced) y_arena(c);
  if (c.training) {  // the saved x values' arena; the weights streamed again for the backward pass
    c.xs_off.assign(c.kernels.size(), 0);
    c.xs_arena = 0;
    c.reloads.clear();
    for (size_t l = 0; l < c.kernels.size(); ++l) c.xs_off[l] = c.xs_arena, c.xs_arena += c.kernels[l].B * c.kernels[l].kb;
    for (size_t l = c.kernels.size(); l-- > 1;)
      if (buffer_after(c, l) >= 0) c.reloads.push_back(static_cast<int64_t>(l));
  }
  if (c.kernels.back().softmax && c.kernels.back().nblocks() != 1) {
    const DenseKernel& k = c.kernels.back();
    throw InputError("/mapping/wafer_rect", "the Softmax's " + std::to_string(k.N) + " outputs per sample must lie on one PE, but the " + std::to_string(w) + " x " +
                                                std::to_string(h) + " rectangle splits them into " + std::to_string(k.nblocks()) + " blocks",
                     std::string("give a rectangle one PE ") + (k.k_on_columns ? "high" : "wide") + " along the last layer's output axis");
  }
  if (opt.training && opt.loss == "softmax_cross_entropy" && c.kernels.back().N > 16)
    throw InputError("/training/loss", "softmax cross-entropy on the wafer takes up to 16 classes (its Newton reciprocal and logarithm are accurate over sums in [1, 16]); the model has " +
                                           std::to_string(c.kernels.back().N),
                     "run it on target.kind neuroncore or reference");
  int64_t wa = 0, wb = 0, data = streaming_data_bytes(c, wbytes_pe);
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    const bool second = c.sequenced ? !k.k_on_columns : l % 2 == 1;  // (sequenced: a buffer per orientation)
    (second ? wb : wa) = std::max(second ? wb : wa, k.kb * k.nb * wbytes_pe);
  }
  if (c.training)
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      data += k.B * k.kb * wbytes_pe + (k.B * k.kb * (l ? 1 : 0) + k.kb * k.nb) * 4;  // saved x (as taken), weight gradient, input gradient
      data += (k.B * k.nb * (k.activated() && l + 1 == c.kernels.size() ? 2 : 1) + k.nb) * 4;  // chain ends: dy, the last kernel's mask (others' in y), bias gradient
      data += col2im_bytes(c, l) + attention_training_bytes(c, l);     // a Conv reading a Conv: a bordered copy of dy; attention: P, dO
      if (residual_producer(c, l) >= 0) data += k.B * k.nb * 4;       // chain ends: the residual's gradient (drs)
      if (k.layernorm) data += (k.B * k.nb + 2 * k.B + 2 * k.nb) * 4;  // chain ends: xhat, the two row means, the scale's and shift's gradients
      if (c.half()) data += (k.B * k.nb + k.kb * k.nb) * 2;           // dy and the weight gradient in 16 bits, as they are sent
      if (opt.loss_scaling) data += k.nb * 2 + 4;                     // db's finiteness, the loss scale
      if (opt.micro_batches > 1) data += k.nb * 4;                    // chain ends: the bias gradient summed over the micro-batches
      if (opt.momentum != 0) data += k.nb * 4;                       // chain ends: the bias velocity
      if (opt.adam) data += (2 + kAdamTemps) * k.nb * 4 + 8;          // chain ends: Adam's moments, temporaries, corrections
      if (opt.lr_scheduled) data += k.nb * 4 + 4;                     // chain ends: the step's learning rate, a temporary
      if (l + 1 == c.kernels.size())
        data += (opt.loss == "softmax_cross_entropy" ? k.B * k.nb + 2 * k.B * k.N + 7 * k.B + 2 : 2 * k.B * k.nb + 2) * 4;  // target, work arrays, loss
    }
  c.sram_high_water = data + wa + wb;
  if (c.sram_high_water > area && auto_rect && (wneed * grow < cfg.fabric_width || hneed * grow < cfg.fabric_height)) continue;
  if (c.sram_high_water > area) {
    size_t big = 0;
    for (size_t l = 0; l < c.kernels.size(); ++l)
      if (c.kernels[l].kb * c.kernels[l].nb > c.kernels[big].kb * c.kernels[big].nb) big = l;
    std::string kept;
    if (c.training) {  // what the backward pass keeps from the forward pass
      size_t most = 0;
      int64_t xs = 0;
      for (size_t l = 0; l < c.kernels.size(); ++l) {
        xs += c.kernels[l].B * c.kernels[l].kb * wbytes_pe;
        if (c.kernels[l].B * c.kernels[l].kb > c.kernels[most].B * c.kernels[most].kb) most = l;
      }
      kept = "; training keeps the x values every PE took, " + std::to_string(xs) + " bytes (kernel '" + c.kernels[most].name + "': " +
             std::to_string(c.kernels[most].B) + (c.kernels[most].spatial() ? " im2col rows" : " rows") + " of " + std::to_string(c.kernels[most].kb) + ")";
    }
    size_t most = 0;  // the kernel whose own arrays (outputs, functions' temporaries, chain-end post-ops) take the most
    for (size_t l = 0; l < c.kernels.size(); ++l)
      if (pe_bytes(c.kernels[l], false, wbytes_pe) > pe_bytes(c.kernels[most], false, wbytes_pe)) most = l;
    // Grown by the compiler: this is as large as the fabric allows (square when residuals move
    // along the diagonal); given: a larger one may help.
    const bool larger = !auto_rect && (w < cfg.fabric_width || h < cfg.fabric_height);
    throw DoesNotFit("/mapping/mode",
                     "a PE needs " + std::to_string(c.sram_high_water) + " bytes of SRAM on a " + std::to_string(w) + " x " + std::to_string(h) +
                         (auto_rect ? " rectangle, the largest the compiler can use on this fabric" + std::string(moves ? " (square: residuals move along its diagonal)" : "") : " rectangle") +
                         " (kernel '" + c.kernels[big].name + "' has " + std::to_string(c.kernels[big].kb) + " x " +
                         std::to_string(c.kernels[big].nb) + " weight blocks; kernel '" + c.kernels[most].name + "' keeps " +
                         std::to_string(pe_bytes(c.kernels[most], false, wbytes_pe)) + " bytes of its own arrays at a chain-end PE" + kept + "); the data area is " + std::to_string(area),
                     larger, c.half(), c.training);
  }
  break;
  }
  c.fabric_width = w;
  c.fabric_height = h;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    DenseKernel& k = c.kernels[l];
    k.mx_tensor = "W" + std::to_string(l) + "." + k.name;
    // One port per orientation (the kernels share its color; training's reloads follow the forward
    // pass's streams on it).
    k.port = k.k_on_columns ? "weights_w" : "weights_n";
    k.lanes = k.k_on_columns ? k.h : k.w;
    k.lane_len = (k.k_on_columns ? k.w : k.h) * k.kb * k.nb;
  }
}

}  // namespace tessera::wafer::detail
