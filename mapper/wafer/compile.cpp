// The wafer compiler (compile.hpp; choices and figures in docs/wafer-compiler.md).
// The driver: match the layers, place them, allocate colors, generate the layout, the PE programs
// and the resident constants, estimate. Its pieces: internal.hpp (and docs/wafer-compiler.md "Layout").
#include <algorithm>
#include <set>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer {

using namespace detail;

Compiled compile(const graph::Graph& g, const WaferConfig& cfg, const MappingOptions& opt) {
  Compiled c;
  c.mode = opt.mode;
  c.clock_hz = cfg.clock_hz;
  c.kernels = match_layers(g, c.input, c.output);
  if (opt.mode == MapMode::pipelined) fuse_qkv(c.kernels);
  c.input_shape = g.value(c.input).shape;
  c.output_shape = g.value(c.output).shape;
  c.kernels.front().input_layer = true;
  const int64_t nker = static_cast<int64_t>(c.kernels.size());
  c.readers.assign(c.kernels.size() + 1, {});
  if (c.input_shape.size() == 4)
    for (size_t l = 1; l < c.kernels.size(); ++l)
      if (c.kernels[l].src < 0) throw InputError("kernel '" + c.kernels[l].name + "'", "a feature-map input read by several kernels is not mapped", kOpsHint);
  for (size_t l = 0; l < c.kernels.size(); ++l) c.readers[static_cast<size_t>(c.kernels[l].src + 1)].push_back(l);
  // More kernels than task ids and colors for one set each: weight-streaming inference of a chain
  // runs them from shared tasks (the sequencer); other mappings stop here. A branch (a Conv reading
  // an earlier kernel than the one before it: ResNet's downsampling shortcut) runs sequenced too,
  // where the chain ends of the kernel before a reader hand its input off.
  bool branch = false;  // (also a residual of an output no kernel reads: its chain ends' hand-off task sends or keeps it)
  for (size_t l = 1; l < c.kernels.size(); ++l)
    branch = branch || (c.kernels[l].src >= 0 && c.kernels[l].src != static_cast<int64_t>(l) - 1 && c.kernels[l].spatial()) || c.kernels[l].res_out;
  // Training always runs sequenced (its backward pass, from shared tasks too, follows the forward
  // pass's kernels; training's own checks below refuse what is not a chain of dense layers).
  if (nker > kOwnTaskKernels || (branch && opt.mode == MapMode::weight_streaming) || (opt.training && opt.mode == MapMode::weight_streaming)) {
    if (opt.mode != MapMode::weight_streaming)  // (at /mapping/mode: mode auto streams instead)
      throw InputError("/mapping/mode", std::to_string(nker) + " kernels: pipelined mode gives every kernel its own tasks and colors, which a PE has for " + std::to_string(kOwnTaskKernels),
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}: a chain of more kernels runs there from shared tasks (docs/wafer-compiler.md \"Many kernels\")");
    std::string why;
    for (auto& k : c.kernels)  // the orientations of weight streaming (place_streaming's rule)
      k.k_on_columns = k.src < 0 || !c.kernels[static_cast<size_t>(k.src)].k_on_columns;
    for (size_t l = 0; why.empty() && !opt.training && l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      // Kernel l's x values come from the chain ends of kernel l - 1, which hold its input when
      // that is kernel l - 1's output or one on the same edge; or, for a follower (the same
      // orientation as kernel l - 1), right after kernel l - 1's from the chain ends that sent
      // those, when the first kernel of the run is a Conv (its gathers go one after another).
      const bool same_edge = k.src >= 0 && l >= 1 && c.kernels[static_cast<size_t>(k.src)].k_on_columns == c.kernels[l - 1].k_on_columns;
      size_t lead = l;
      while (follower(c, lead)) --lead;
      const bool follows = follower(c, l) && k.src >= 0 && k.spatial() && lead >= 1 && c.kernels[lead].spatial();
      if (follower(c, l) && k.src >= 0 && !follows)
        why = "kernel '" + k.name + "' would follow kernel '" + c.kernels[l - 1].name + "' in its orientation (its input lies on the edge that kernel's came from), which is mapped for Convs after a Conv only";
      else if (k.src != static_cast<int64_t>(l) - 1 && !follows && (!same_edge || (!k.spatial() && k.xread != DenseKernel::XRead::flatten)))
        why = "kernel '" + k.name + "' reads " + (k.src < 0 ? std::string("the graph input") : "kernel '" + c.kernels[static_cast<size_t>(k.src)].name + "'") +
              (k.src >= 0 ? ", whose output is not on the edge of the kernel before it" : ", not the kernel before it");
      else if (c.readers[l + 1].size() > 1 && !k.spatial()) why = "kernel '" + k.name + "' is read by " + std::to_string(c.readers[l + 1].size()) + " kernels";
      else if (k.attn || k.layernorm || k.qkv) why = "kernel '" + k.name + "' has attention or LayerNorm";
    }
    if (!why.empty() && nker <= kOwnTaskKernels)
      throw InputError(g.source, "a branch (a Conv reading an earlier kernel than the one before it, or a residual of an output no kernel reads) runs from shared tasks in weight-streaming inference; here " + why,
                       "run it on target.kind neuroncore or reference (docs/wafer-compiler.md \"Many kernels\")");
    if (!why.empty())
      throw InputError(g.source, std::to_string(nker) + " kernels: a PE has task ids and colors for " + std::to_string(kOwnTaskKernels) +
                                     " with their own tasks; more run in weight-streaming inference of a chain (each kernel reading the one before it, "
                                     "no attention or LayerNorm) from shared tasks; here " + why,
                       std::string("map at most ") + std::to_string(kOwnTaskKernels) + " kernels, or run the chain with \"mapping\": {\"mode\": \"weight_streaming\"} for inference (docs/wafer-compiler.md \"Many kernels\")");
    c.sequenced = true;
  }
  if (!c.sequenced) {
    const int nk5 = std::max<int>(5, static_cast<int>(nker));
    int next_id = 8 * nk5;  // after the send (7n) and the gathers (7n + reader, reader < n)
    c.extra_send_id.assign(c.readers.size(), 0);
    for (size_t p = 0; p < c.readers.size(); ++p) {
      c.extra_send_id[p] = next_id;
      next_id += std::max<int>(0, static_cast<int>(c.readers[p].size()) - 1);
    }
    if (next_id > static_cast<int>(cfg.task_count))
      throw InputError(g.source, "the kernels' sends need task ids up to " + std::to_string(next_id - 1) + "; a PE has ids 0.." + std::to_string(cfg.task_count - 1), kOpsHint);
  }
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (opt.mode == MapMode::pipelined && k.src != static_cast<int64_t>(l) - 1)
      throw InputError("/mapping/mode", "kernel '" + k.name + "' reads " + (k.src < 0 ? std::string("the graph input") : "kernel '" + c.kernels[static_cast<size_t>(k.src)].name + "'") +
                                            ", not the kernel before it: pipelined mode maps chains of layers",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"} for branching graphs (every kernel on one rectangle)");
    if (c.readers[l + 1].size() > 1 && (k.spatial() || k.pkh) && !c.sequenced)  // one gather per holder: a feature map has one reader (sequenced: one per hand-off)
      throw InputError("kernel '" + k.name + "'", "a convolution's output read by several kernels is not mapped (" + std::to_string(c.readers[l + 1].size()) + " read it)",
                       kOpsHint);
    // (Weight streaming: Q, K and V are fp32 at the chain ends, where the attention runs in fp32
    // as the other post-ops do; pipelined mode's fused form is untested in 16 bits.)
    if (k.attn && c.half() && opt.mode == MapMode::pipelined)
      throw InputError("/precision/compute", "kernel '" + k.name + "': attention in pipelined mode is mapped in fp32 in this build",
                       "use precision.compute fp32, or \"mapping\": {\"mode\": \"weight_streaming\"} (16-bit weights and activations, the attention in fp32)");
  }
  for (size_t l = 0; l + 1 < c.kernels.size(); ++l)
    if (c.kernels[l].softmax) throw InputError("kernel '" + c.kernels[l].name + "'", "Softmax is mapped only after the last dense layer", kOpsHint);
  if (c.kernels.back().softmax && c.kernels.back().N > 16)
    throw InputError("kernel '" + c.kernels.back().name + "'", "Softmax on the wafer takes up to 16 outputs per sample (its Newton reciprocal's range); this one has " +
                                                             std::to_string(c.kernels.back().N), kOpsHint);
  if (c.kernels.back().softmax && opt.training)
    throw InputError("kernel '" + c.kernels.back().name + "'", "a model ending in Softmax is not trained on the wafer",
                     "end the model with the logits and use \"loss\": \"softmax_cross_entropy\"");
  const int64_t area = cfg.data_area_bytes();
  c.compute = opt.compute;
  const int64_t wbytes_pe = c.half() ? 2 : 4;
  c.training = opt.training;
  c.loss = opt.loss;
  c.momentum = opt.momentum;
  if (c.training) {
    const char* hint = "training on the wafer maps chains of dense layers (Gemm/MatMul, bias, ReLU or Tanh) with weight streaming in fp32, MSE or softmax cross-entropy (docs/wafer-compiler.md); run it on target.kind neuroncore or reference";
    if (opt.mode != MapMode::weight_streaming) throw InputError("/mapping/mode", "training on the wafer runs in weight_streaming mode (weights and their updates in MemoryX)", "set mapping.mode to weight_streaming");
    if (c.half()) throw InputError("/precision/compute", "training on the wafer is compiled in fp32 in this build", hint);
    for (const auto& k : c.kernels) {
      if (k.b_value == "*") throw InputError("kernel '" + k.name + "'", "two biases (Gemm's C and an Add) are not trained on the wafer", hint);
      if (k.xread != DenseKernel::XRead::rows) throw InputError("kernel '" + k.name + "'", "convolutions are not trained on the wafer in this build", hint);
      if (k.attn || k.src != static_cast<int64_t>(&k - c.kernels.data()) - 1)
        throw InputError("kernel '" + k.name + "'", "attention and branching graphs (a layer reading other than the layer before it) are not trained on the wafer in this build", hint);
    }
    if (opt.loss != "mse" && opt.loss != "softmax_cross_entropy") throw InputError("/training/loss", "the wafer computes mse or softmax_cross_entropy", hint);
  }

  if (opt.mode == MapMode::pipelined) {
    // Residuals: the graph input the host places on the kernel's chain ends; the input of the
    // kernel it reads passes through that kernel (pass_through); others have no place here.
    std::vector<size_t> passes;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      DenseKernel& k = c.kernels[l];
      if (k.residual < 0) continue;
      const DenseKernel& r = c.kernels[static_cast<size_t>(k.residual)];
      if (k.res_out)
        throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode maps a residual of the graph input or of a kernel's input; this one adds the output of kernel '" + r.name + "'",
                         "use \"mapping\": {\"mode\": \"weight_streaming\"}");
      if (r.src < 0 && r.xread == DenseKernel::XRead::rows && !k.attn) {
        k.res_host = true;
      } else if (k.src == k.residual && k.N == r.K && r.xread == DenseKernel::XRead::rows && k.xread == DenseKernel::XRead::rows && !r.layernorm && !r.softmax &&
                 !r.attn && !r.pkh && r.residual < 0 && !k.activated() && !k.attn && !k.softmax && !is_half(opt.compute)) {
        // (the identity rows add the input into the sum, before the bias: an activation of k would
        // then act on it, where the graph adds it after)
        passes.push_back(l);
      } else {
        const bool after = k.activated() || k.attn || k.softmax;
        throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode maps a residual of the graph input, or of the input of the kernel it reads (x + W2 f(W1 x), fp32, added after the bias); this one adds the input of kernel '" + r.name + "'" +
                                              (after && k.src == k.residual ? " after an activation or attention" : is_half(opt.compute) && k.src == k.residual ? " in 16-bit compute" : ""),
                         "use \"mapping\": {\"mode\": \"weight_streaming\"} (every kernel on one rectangle, held inputs on the PEs)");
      }
    }
    // The smallest block (most PEs, shortest per-PE work) whose staircase fits the fabric and whose
    // per-PE data fits the SRAM data area; a given block is taken as is.
    std::vector<int64_t> cands;
    if (opt.block > 0) cands = {opt.block};
    else
      for (int64_t b = 1; b <= 4096; b *= 2) cands.push_back(b);
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
      c.kernels = std::move(ks);
      c.fabric_width = W;
      c.fabric_height = H;
      c.sram_high_water = worst;
      placed = true;
      break;
    }
    if (!placed) {
      int64_t wbytes = 0;
      for (const auto& k : c.kernels) wbytes += k.K * k.N * (k.qkv ? 3 : 1) * 4;  // (a fused kernel holds V's projection until its block is chosen)
      const int64_t sram = cfg.fabric_width * cfg.fabric_height * area;
      const std::string detail = wbytes > sram ? "more than the " + std::to_string(sram) + " bytes of SRAM data area of all " +
                                                     std::to_string(cfg.fabric_width * cfg.fabric_height) + " PEs"
                                               : why;
      throw InputError("/mapping/mode",
                       "the weights (" + std::to_string(wbytes) + " bytes fp32) do not fit on the wafer in pipelined mode: " + detail,
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}: weights then stream from MemoryX layer by layer, or give a larger fabric");
    }
  } else {
    // One rectangle for every layer: as large as useful (blocks of at least kMinBlock per axis)
    // within the fabric, unless given.
    constexpr int64_t kMinBlock = 16;
    int64_t wneed = 1, hneed = 1;
    for (size_t l = 0; l < c.kernels.size(); ++l)  // the orientations (place_streaming's rule)
      c.kernels[l].k_on_columns = c.kernels[l].src < 0 || !c.kernels[static_cast<size_t>(c.kernels[l].src)].k_on_columns;
    // Residuals whose input lies on the other edge move along the diagonal: a square rectangle.
    bool moves = false;
    for (auto& k : c.kernels) {
      const int64_t rs = k.residual < 0 || k.res_host ? -1 : res_producer(c.kernels, k);
      k.res_move = rs >= 0 && c.kernels[static_cast<size_t>(rs)].k_on_columns != k.k_on_columns && !opt.training;
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
    for (int64_t grow = 1;; grow *= 2) {
    w = opt.rect_width > 0 ? opt.rect_width : std::min(cfg.fabric_width, wneed * grow);
    h = opt.rect_height > 0 ? opt.rect_height : std::min(cfg.fabric_height, hneed * grow);
    for (const auto& k : c.kernels)  // attention: whole heads per chain-end PE (nb a multiple of dh)
      if (k.attn) {
        int64_t& len = k.k_on_columns ? h : w;
        const bool given = k.k_on_columns ? opt.rect_height > 0 : opt.rect_width > 0;
        auto fits = [&](int64_t n) { const int64_t b = cdiv(k.N, n); return b % k.dh == 0 || k.dh % b == 0; };
        while (!given && len > 1 && !fits(len)) --len;
        if (!fits(len))
          throw InputError("/mapping/wafer_rect", "the attention of kernel '" + k.name + "' needs whole heads, or whole fractions of one, on each chain-end PE: " + std::to_string(k.N) +
                                                      " features over " + std::to_string(len) + " PEs is " + std::to_string(cdiv(k.N, len)) + " per PE, heads have " + std::to_string(k.dh),
                           std::string("give a rectangle whose ") + (k.k_on_columns ? "height" : "width") + " makes the features per PE a multiple or a divisor of the head size");
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
    if (opt.training && opt.loss == "softmax_cross_entropy" && (c.kernels.back().k_on_columns ? h : w) != 1) {
      const DenseKernel& k = c.kernels.back();
      throw InputError("/mapping/wafer_rect", "softmax cross-entropy runs on one PE per sample row: the last layer's " + std::to_string(k.N) + " classes must lie on one chain-end PE, but the " +
                                                  std::to_string(w) + " x " + std::to_string(h) + " rectangle splits them into " + std::to_string(k.nblocks()) + " blocks",
                       std::string("give a rectangle one PE ") + (k.k_on_columns ? "high" : "wide") + " along the last layer's output axis, e.g. \"wafer_rect\": [" +
                           (k.k_on_columns ? std::to_string(w) + ", 1" : "1, " + std::to_string(h)) + "]");
    }
    int64_t wa = 0, wb = 0, data = streaming_data_bytes(c, wbytes_pe);
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      const bool second = c.sequenced ? !k.k_on_columns : l % 2 == 1;  // (sequenced: a buffer per orientation)
      (second ? wb : wa) = std::max(second ? wb : wa, k.kb * k.nb * wbytes_pe);
    }
    if (c.training)
      for (size_t l = 0; l < c.kernels.size(); ++l) {
        const DenseKernel& k = c.kernels[l];
        data += (k.B * k.kb * (l ? 2 : 1) + k.kb * k.nb) * 4;  // saved x, weight gradient, input gradient
        data += (k.B * k.nb * (k.activated() ? 2 : 1) + k.nb) * 4;  // chain ends: dy, mask, bias gradient
        if (opt.momentum != 0) data += k.nb * 4;                       // chain ends: the bias velocity
        if (l + 1 == c.kernels.size())
          data += (opt.loss == "softmax_cross_entropy" ? k.B * k.nb + 2 * k.B * k.N + 7 * k.B + 2 : 2 * k.B * k.nb + 2) * 4;  // target, work arrays, loss
      }
    c.sram_high_water = data + wa + wb;
    if (c.sram_high_water > area && auto_rect && (wneed * grow < cfg.fabric_width || hneed * grow < cfg.fabric_height)) continue;
    if (c.sram_high_water > area) {
      size_t big = 0;
      for (size_t l = 0; l < c.kernels.size(); ++l)
        if (c.kernels[l].kb * c.kernels[l].nb > c.kernels[big].kb * c.kernels[big].nb) big = l;
      throw InputError("/mapping/mode",
                       "a PE needs " + std::to_string(c.sram_high_water) + " bytes of SRAM on a " + std::to_string(w) + " x " + std::to_string(h) +
                           " rectangle (kernel '" + c.kernels[big].name + "' has " + std::to_string(c.kernels[big].kb) + " x " +
                           std::to_string(c.kernels[big].nb) + " weight blocks); the data area is " + std::to_string(area),
                       "give a larger rectangle (mapping.wafer_rect or target.params fabric.width/height) or a smaller batch");
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
  for (auto& k : c.kernels) conv_weights(k);
  for (const auto& k : c.kernels)
    if (k.attn) {
      const DenseKernel &q = c.kernels[static_cast<size_t>(k.attn_q)], &kk = c.kernels[static_cast<size_t>(k.attn_k)];
      if (q.k_on_columns != k.k_on_columns || kk.k_on_columns != k.k_on_columns || q.nb != k.nb || kk.nb != k.nb || q.B != k.B || kk.B != k.B || q.N != k.N || kk.N != k.N)
        throw InputError("kernel '" + k.name + "'", "the attention's Q, K and V must come out on the same PEs in the same blocks (dense layers of the same input and size)", kOpsHint);
    }
  // Squeeze-excitation: the gated feature map lies on the gate's chain ends in the same blocks.
  for (const auto& k : c.kernels) {
    if (k.gate_of < 0) continue;
    const DenseKernel& gk = c.kernels[static_cast<size_t>(k.gate_of)];
    if (opt.mode == MapMode::pipelined)
      throw InputError("/mapping/mode", "kernel '" + k.name + "': pipelined mode does not map a squeeze-excitation gate (the feature map it multiplies lies in another kernel's rectangle)",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}");
    if (gk.k_on_columns != k.k_on_columns || gk.nb != k.nb || gk.samples != k.samples)
      throw InputError("kernel '" + k.name + "'", "the squeeze-excitation gate's feature map (the output of kernel '" + gk.name + "') does not lie on its chain ends in the same blocks (an odd number of kernels between them)", kOpsHint);
  }
  // Residuals: the held input must lie on this kernel's chain ends in the same blocks.
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (k.residual < 0) continue;
    const DenseKernel& r = c.kernels[static_cast<size_t>(k.residual)];
    const std::string where = "kernel '" + k.name + "'";
    if (c.half() && opt.mode == MapMode::pipelined)
      throw InputError("/mapping/mode", where + ": pipelined mode maps a residual Add in fp32 in this build", "use \"mapping\": {\"mode\": \"weight_streaming\"} or precision.compute fp32");
    if (k.res_host) {  // the host places the graph input's blocks on the chain ends
      if (k.N != c.input_shape.back() || k.B != r.B)
        throw InputError(where, "the residual adds the graph input " + shape_str(c.input_shape) + " to " + std::to_string(k.B) + " x " + std::to_string(k.N) + " outputs", kOpsHint);
      continue;
    }
    // The held value: kernel r's input -- the graph input on r's sources (rows), or kernel p's output
    // on p's chain ends, which must be this kernel's chain ends with the same blocks and rows.
    bool same = false;
    const int64_t ps = res_producer(c.kernels, k);
    if (ps < 0) {
      same = r.xread == DenseKernel::XRead::rows && r.k_on_columns != k.k_on_columns && r.kb == k.nb && r.B == k.B;
    } else {
      const DenseKernel& p = c.kernels[static_cast<size_t>(ps)];
      same = (p.k_on_columns == k.k_on_columns || (k.res_move && c.fabric_width == c.fabric_height)) && p.feat_nb() == k.nb && p.rows_out() == k.B && p.feat_N() == k.N;
      if (k.res_move) {
        // One route and queue per direction, used one move at a time; the last kernel halts its
        // PEs at its reduce, which would drop a send still on the route.
        if (l + 1 == c.kernels.size())
          throw InputError(where, "a residual from the other edge (moved along the diagonal) into the last kernel is not mapped in this build", kOpsHint);
        for (size_t q = 0; q < c.kernels.size(); ++q) {
          const DenseKernel& o = c.kernels[q];
          if (q == l || !o.res_move) continue;
          const int64_t os = res_producer(c.kernels, o);
          if (os == ps || (os < static_cast<int64_t>(l) && ps < static_cast<int64_t>(q)))
            throw InputError(where, "its residual from the other edge overlaps the one of kernel '" + o.name + "' (moves along the diagonal go one at a time in this build)", kOpsHint);
        }
      }
      if (k.res_move)
        for (const auto& o : c.kernels)
          if (o.attn || o.layernorm)
            throw InputError(where, "a residual from the other edge (moved along the diagonal) in a model with attention or LayerNorm is not mapped in this build (their queues)", kOpsHint);
    }
    if (!same)
      throw InputError(where, "the residual's input (the " + std::string(k.res_out ? "output" : "input") + " of kernel '" + r.name + "') does not lie on this kernel's chain ends in the same blocks (" +
                                  (opt.mode == MapMode::pipelined ? std::string("pipelined: an odd number of kernels in the branch")
                                   : opt.training                 ? std::string("training: an odd number of kernels in the branch, which it does not move")
                                                                  : std::string("rows or blocks differ")) + ")",
                       opt.mode == MapMode::pipelined ? "use \"mapping\": {\"mode\": \"weight_streaming\"}, which moves a residual from the other edge" : kOpsHint);
  }
  if (c.training)
    for (const auto& k : c.kernels)
      if ((k.activated() && !k.act_is(Unary::Kind::relu) && !k.act_is(Unary::Kind::tanh)) || k.layernorm || k.residual >= 0)
        throw InputError("kernel '" + k.name + "'", "activations other than one Relu or Tanh, LayerNorm and residuals are not trained on the wafer in this build",
                         "train it on target.kind neuroncore or reference");
  allocate_colors(c, cfg, opt);

  // Layout and programs.
  const bool ws = c.mode == MapMode::weight_streaming;
  json layout = {{"schema", "tessera.wafer-layout/1"}, {"fabric", {{"width", c.fabric_width}, {"height", c.fabric_height}}}, {"rects", json::array()}};
  if (ws) {
    json routes = json::array(), params = json::object(), ports = json::array();
    ProgramTemplate t("compiled/streaming.pe");
    int64_t wa = 0, wb = 0;
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const bool second = c.sequenced ? !c.kernels[l].k_on_columns : l % 2 == 1;  // (sequenced: a buffer per orientation)
      (second ? wb : wa) = std::max(second ? wb : wa, c.kernels[l].kb * c.kernels[l].nb);
    }
    t.comment("tessera wafer compiler, weight streaming: every layer on this " + std::to_string(c.fabric_width) + " x " + std::to_string(c.fabric_height) + " rectangle");
    const std::string we(elem_name(c.compute));
    t.data("Wa", c.compute, wa, {}, -1, -1, c.sequenced ? "weight blocks of the kernels with K along the columns" : "weight blocks of layers 0, 2, 4");
    if (wb) t.data("Wb", c.compute, wb, {}, -1, -1, c.sequenced ? "along the rows" : "layers 1, 3, 5");
    t.data("junk", c.compute, 1, {}, -1, -1, "weights of other PEs land here");
    if (c.sequenced) t.data("Yar", Elem::f32, c.y_arena, {}, -1, -1, "every kernel's y (its place: Compiled::y_off)");
    if (c.training) t.data("Xsv", Elem::f32, c.xs_arena, {}, -1, -1, "the x values each kernel took (the weight gradients need them; its place: Compiled::xs_off)");
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      if (!c.sequenced || first_of_orientation(c, l) == l) x_routes(k, true, routes);  // (sequenced: one x color per orientation)
      if (k.res_move && first_move(c, l) == l) move_routes(k, routes);
      if (first_of_orientation(c, l) == l) {  // shared colors: one set of routes
        reduce_routes(k, routes);
        weight_routes(k, routes);
      }
      layer_params(k, l, true, c.training, params);
      if (k.layernorm) ln_routes(k, routes), ln_params(k, l, params);
      if (k.attn_group() > 1) attn_routes(k, routes), attn_params(k, l, params);
      layer_program(c, l, t);
      bool have = false;
      for (const auto& pj : ports) have = have || pj["name"] == k.port;
      if (!have)
        ports.push_back({{"name", k.port}, {"dir", "in"}, {"side", k.k_on_columns ? "W" : "N"}, {"x", 0}, {"y", 0}, {"length", k.lanes}, {"color", k.cw},
                         {"type", we}});
    }
    if (c.sequenced) sequenced_tasks(c, t);
    if (c.training) {
      for (size_t l = 0; l < c.kernels.size(); ++l) {
        DenseKernel& k = c.kernels[l];
        dy_routes(k, routes);
        backward_program(c, l, t);
        // One gradient port per orientation (the chain colors are the orientation's): its lanes carry
        // the kernels' blocks one kernel after another, last kernel first.
        k.grad_port = k.k_on_columns ? "grads_e" : "grads_s";
        if (first_of_orientation(c, l) != l) continue;
        grad_port_routes(k, routes);
        const int64_t len = k.k_on_columns ? k.w : k.h;
        ports.push_back({{"name", k.grad_port}, {"dir", "out"}, {"side", k.k_on_columns ? "E" : "S"}, {"x", k.k_on_columns ? k.w - 1 : 0},
                         {"y", k.k_on_columns ? 0 : k.h - 1}, {"length", k.lanes}, {"color", chain_color(k, len - 1)}, {"type", "f32"}});
      }
      backward_tasks(c, opt.learning_rate, t);
      loss_routes(c, routes);
      train_params(c, params);
      if (opt.loss == "softmax_cross_entropy") xent_program(c, t);
      else loss_program(c, t);
      c.loss_x = c.fabric_width - 1;
      c.loss_y = c.fabric_height - 1;
    }
    for (const auto& [name, v] : params.items()) t.param(name);
    c.programs.emplace("compiled/streaming.pe", std::move(t));
    layout["rects"].push_back({{"name", "layers"}, {"x", 0}, {"y", 0}, {"width", c.fabric_width}, {"height", c.fabric_height},
                               {"program", "compiled/streaming.pe"}, {"params", params}, {"routes", routes}});
    layout["ports"] = ports;
  } else {
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      json routes = json::array(), params = json::object();
      x_routes(k, l == 0, routes);
      reduce_routes(k, routes);
      if (l + 1 < c.kernels.size()) handoff_routes(k, c.kernels[l + 1], routes);
      layer_params(k, l, false, false, params);
      if (k.act_split())  // the activation's blocks (pass-through columns after them)
        params["act" + std::to_string(l)] = std::string(k.k_on_columns ? "py" : "px") + " < " + std::to_string(k.act_blocks);
      if (k.layernorm) ln_routes(k, routes), ln_params(k, l, params);
      if (k.attn_group() > 1) attn_routes(k, routes), attn_params(k, l, params);
      const std::string file = "compiled/k" + std::to_string(l) + ".pe";
      ProgramTemplate t(file);
      t.comment("tessera wafer compiler, pipelined: kernel " + std::to_string(l) + " on " + std::to_string(k.w) + " x " + std::to_string(k.h) + " PEs at (" +
                std::to_string(k.x0) + "," + std::to_string(k.y0) + ")");
      layer_program(c, l, t);
      for (const auto& [name, v] : params.items()) t.param(name);
      c.programs.emplace(file, std::move(t));
      layout["rects"].push_back(
          {{"name", "k" + std::to_string(l) + "." + k.name}, {"x", k.x0}, {"y", k.y0}, {"width", k.w}, {"height", k.h}, {"program", file}, {"params", params}, {"routes", routes}});
    }
  }
  c.layout_json = layout.dump(1);

  // Resident constants: W blocks (pipelined) and the bias replicated per sample at the chain ends.
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    for (int64_t py = 0; py < k.h; ++py)
      for (int64_t px = 0; px < k.w; ++px) {
        const int64_t kbk = k.k_on_columns ? px : py, nbk = k.k_on_columns ? py : px;
        const bool last = (k.k_on_columns ? px == k.w - 1 : py == k.h - 1);
        if (!ws) {
          HostArray a{k.x0 + px, k.y0 + py, "W" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.kb * k.nb), 0.0f)};
          for (int64_t j = 0; j < k.kb; ++j)
            for (int64_t i = 0; i < k.nb; ++i) {
              const int64_t kk = kbk * k.kb + j, nn = nbk * k.nb + i;
              if (kk < k.K && nn < k.N) a.values[static_cast<size_t>(j * k.nb + i)] = k.W[static_cast<size_t>(kk * k.N + nn)];
            }
          c.constants.push_back(std::move(a));
        }
        if (last) {
          HostArray a{k.x0 + px, k.y0 + py, "bias" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
          for (int64_t i = 0; i < k.nb; ++i)
            if (nbk * k.nb + i < k.N) a.values[static_cast<size_t>(i)] = k.bias[static_cast<size_t>(nbk * k.nb + i)];
          c.constants.push_back(std::move(a));
          if (k.layernorm) {  // the scale and bias of the block's features (0 beyond N), and the mask when padded
            HostArray ga{k.x0 + px, k.y0 + py, "lng" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            HostArray b2{k.x0 + px, k.y0 + py, "lnb" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            HostArray m{k.x0 + px, k.y0 + py, "lnk" + std::to_string(l), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
            for (int64_t i = 0; i < k.nb && nbk * k.nb + i < k.N; ++i) {
              ga.values[static_cast<size_t>(i)] = k.ln_gamma[static_cast<size_t>(nbk * k.nb + i)];
              b2.values[static_cast<size_t>(i)] = k.ln_beta[static_cast<size_t>(nbk * k.nb + i)];
              m.values[static_cast<size_t>(i)] = 1.0f;
            }
            c.constants.push_back(std::move(ga));
            c.constants.push_back(std::move(b2));
            if ((k.k_on_columns ? k.h : k.w) * k.nb > k.N) c.constants.push_back(std::move(m));
          }
        }
      }
  }
  estimate(c, cfg);
  return c;
}

}  // namespace tessera::wafer
