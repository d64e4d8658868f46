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
  c.kernels = match_layers(g, c.input, c.output, c.input2);
  if (opt.mode == MapMode::pipelined) fuse_qkv(c.kernels);
  c.input_shape = g.value(c.input).shape;
  if (!c.input2.empty()) c.input2_shape = g.value(c.input2).shape;
  c.output_shape = g.value(c.output).shape;
  c.kernels.front().input_layer = true;
  const int64_t nker = static_cast<int64_t>(c.kernels.size());
  c.readers.assign(c.kernels.size() + 1, {});
  if (c.input_shape.size() == 4)
    for (size_t l = 1; l < c.kernels.size(); ++l)
      if (c.kernels[l].src < 0) throw InputError("kernel '" + c.kernels[l].name + "'", "a feature-map input read by several kernels is not mapped", kOpsHint);
  for (size_t l = 0; l < c.kernels.size(); ++l) c.readers[static_cast<size_t>(c.kernels[l].src + 1)].push_back(l);
  for (const auto& k : c.kernels)  // a pre-norm residual: its producer keeps the value before its LayerNorm
    if (k.res_preln) c.kernels[static_cast<size_t>(k.residual)].keeps_preln = true;
  // More kernels than task ids and colors for one set each: weight-streaming inference of a chain
  // runs them from shared tasks (the sequencer); other mappings stop here. A branch (a Conv reading
  // an earlier kernel than the one before it: ResNet's downsampling shortcut) runs sequenced too,
  // where the chain ends of the kernel before a reader hand its input off.
  // (Also a residual of an output no kernel reads that lies on the other edge: its chain ends'
  // hand-off task sends it along the diagonal. On the same edge -- a gated unit's two kernels --
  // the reduce keeps it, and own tasks do.)
  const std::vector<bool> on_cols = streaming_orientations(c.kernels);
  bool branch = false;
  for (const auto& k : c.kernels) branch = branch || k.reads_input2;  // (cross-attention's K and V: followers sent from the chain ends)
  for (size_t l = 1; l < c.kernels.size(); ++l)
    branch = branch || (c.kernels[l].src >= 0 && c.kernels[l].src != static_cast<int64_t>(l) - 1 && c.kernels[l].spatial()) ||
             (c.kernels[l].res_out && on_cols[static_cast<size_t>(c.kernels[l].residual)] != on_cols[l]);
  // Training always runs sequenced (its backward pass, from shared tasks too, follows the forward
  // pass's kernels; training's own checks below refuse what is not a chain of dense layers).
  // (Pipelined, every kernel has a program of its own on its own rectangle: its task ids are its
  // own, any number of kernels.)
  if ((nker > kOwnTaskKernels && opt.mode == MapMode::weight_streaming) || (branch && opt.mode == MapMode::weight_streaming) ||
      (opt.training && opt.mode == MapMode::weight_streaming)) {
    std::string why;
    for (size_t l = 0; l < c.kernels.size(); ++l) c.kernels[l].k_on_columns = on_cols[l];
    for (size_t l = 0; why.empty() && !opt.training && l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      // Kernel l's x values come from the chain ends of kernel l - 1, which hold its input when
      // that is kernel l - 1's output or one on the same edge; or, for a follower (the same
      // orientation as kernel l - 1), right after kernel l - 1's from the chain ends that sent
      // those, when the first kernel of the run is a Conv (its gathers go one after another).
      const bool same_edge = k.src >= 0 && l >= 1 && c.kernels[static_cast<size_t>(k.src)].k_on_columns == c.kernels[l - 1].k_on_columns;
      size_t lead = l;
      while (follower(c, lead)) --lead;
      // (Or a dense layer reading what the kernel before it reads -- attention's K and V after Q:
      // the same chain ends send its x values right after that kernel's.)
      // (Or reading another holder on the chain ends that hand the run's x values off: the second
      // part of a dense layer reading a Concat of two dense branches, concat.cpp.)
      const bool rows_follows = follower(c, l) && !k.spatial() && k.xread == DenseKernel::XRead::rows &&
                                (k.src == c.kernels[l - 1].src ||
                                 (k.src >= 0 && c.kernels[static_cast<size_t>(k.src)].k_on_columns == c.kernels[handoff_from(c, l)].k_on_columns));
      const bool follows = rows_follows || (follower(c, l) && k.src >= 0 && k.spatial() && lead >= 1 && c.kernels[lead].spatial());
      // A holder whose readers are one run of followers (Q, K and V of one input) has one hand-off.
      bool one_run = true;
      for (size_t j = 1; j < c.readers[l + 1].size(); ++j)
        one_run = one_run && c.readers[l + 1][j] == c.readers[l + 1][0] + j && !c.kernels[c.readers[l + 1][j]].spatial();
      if (follower(c, l) && k.src >= 0 && !follows)
        why = "kernel '" + k.name + "' would follow kernel '" + c.kernels[l - 1].name + "' in its orientation (its input lies on the edge that kernel's came from), which is mapped for Convs after a Conv and for dense layers reading what the kernel before them reads";
      else if (k.src != static_cast<int64_t>(l) - 1 && !follows && !same_edge)
        why = "kernel '" + k.name + "' reads " + (k.src < 0 ? std::string("the graph input") : "kernel '" + c.kernels[static_cast<size_t>(k.src)].name + "'") +
              (k.src >= 0 ? ", whose output is not on the edge of the kernel before it" : ", not the kernel before it");
      else if (c.readers[l + 1].size() > 1 && !k.spatial() && !one_run) why = "kernel '" + k.name + "' is read by " + std::to_string(c.readers[l + 1].size()) + " kernels that do not run one after another";
      else if (k.qkv) why = "kernel '" + k.name + "' has fused Q, K and V";
    }
    if (!why.empty() && nker <= kOwnTaskKernels)
      throw InputError(g.source, "a branch (a Conv reading an earlier kernel than the one before it, or a residual of an output no kernel reads) runs from shared tasks in weight-streaming inference; here " + why,
                       "run it on target.kind neuroncore or reference (docs/wafer-compiler.md \"Many kernels\")");
    if (!why.empty())
      throw InputError(g.source, std::to_string(nker) + " kernels: a PE has task ids and colors for " + std::to_string(kOwnTaskKernels) +
                                     " with their own tasks; more run in weight-streaming inference of a chain (each kernel reading the one before it, "
                                     "or what that one reads) from shared tasks; here " + why,
                       std::string("map at most ") + std::to_string(kOwnTaskKernels) + " kernels, or run the chain with \"mapping\": {\"mode\": \"weight_streaming\"} for inference (docs/wafer-compiler.md \"Many kernels\")");
    c.sequenced = true;
  }
  if (!c.sequenced) {
    const int nk5 = task_id_kernels(c);
    bool gathers = false;  // (a conv reader's im2col gather: ids 7n + reader)
    for (const auto& k : c.kernels) gathers = gathers || k.spatial();
    int next_id = gathers ? 8 * nk5 : 7 * nk5 + 1;  // after the send (7n) and the gathers (7n + reader, reader < n)
    // (Pipelined, kernel l's program holds the sends of holder l + 1, kernel 0's those of the
    // graph input's too: the later holders' ids start after the input's.)
    const int later = next_id + std::max<int>(0, static_cast<int>(c.readers[0].size()) - 1);
    c.extra_send_id.assign(c.readers.size(), 0);
    for (size_t p = 0; p < c.readers.size(); ++p) {
      if (opt.mode == MapMode::pipelined && p > 0) next_id = later;
      c.extra_send_id[p] = next_id;
      next_id += std::max<int>(0, static_cast<int>(c.readers[p].size()) - 1);
    }
    if (next_id > static_cast<int>(cfg.task_count))
      throw InputError(g.source, "the kernels' sends need task ids up to " + std::to_string(next_id - 1) + "; a PE has ids 0.." + std::to_string(cfg.task_count - 1), kOpsHint);
  }
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (opt.mode == MapMode::pipelined && k.reads_input2)
      throw InputError("/mapping/mode", "kernel '" + k.name + "' computes cross-attention's keys or values from the second graph input ('" + c.input2 + "'): pipelined mode maps chains of layers",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}, which maps cross-attention (docs/wafer-compiler.md \"Cross-attention\")");
    if (opt.mode == MapMode::pipelined && k.src != static_cast<int64_t>(l) - 1)
      throw InputError("/mapping/mode", "kernel '" + k.name + "' reads " + (k.src < 0 ? std::string("the graph input") : "kernel '" + c.kernels[static_cast<size_t>(k.src)].name + "'") +
                                            ", not the kernel before it: pipelined mode maps chains of layers",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"} for branching graphs (every kernel on one rectangle)");
    if (opt.mode == MapMode::pipelined && (k.tokens || k.row_period || k.sel_period))
      throw InputError("/mapping/mode", "kernel '" + k.name + "': tokens (a Conv's positions as rows, constant rows, a Slice of one token) are mapped in weight streaming only",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"}");
    if (c.readers[l + 1].size() > 1 && (k.spatial() || k.pkh) && opt.mode == MapMode::pipelined)
      throw InputError("/mapping/mode", "kernel '" + k.name + "': its output is read by " + std::to_string(c.readers[l + 1].size()) + " kernels: pipelined mode maps chains of layers",
                       "use \"mapping\": {\"mode\": \"weight_streaming\"} for branching graphs (every kernel on one rectangle)");
    if (c.readers[l + 1].size() > 1 && (k.spatial() || k.pkh) && !c.sequenced)  // one gather per holder: a feature map has one reader (sequenced: one per hand-off)
      throw InputError("kernel '" + k.name + "'", "a convolution's output read by several kernels is not mapped (" + std::to_string(c.readers[l + 1].size()) + " read it)",
                       kOpsHint);
  }
  for (size_t l = 0; l + 1 < c.kernels.size(); ++l)
    if (c.kernels[l].softmax) throw InputError("kernel '" + c.kernels[l].name + "'", "Softmax is mapped only after the last dense layer", kOpsHint);
  if (c.kernels.back().softmax && c.kernels.back().N > 16)
    throw InputError("kernel '" + c.kernels.back().name + "'", "Softmax on the wafer takes up to 16 outputs per sample (its Newton reciprocal's range); this one has " +
                                                             std::to_string(c.kernels.back().N), kOpsHint);
  if (c.kernels.back().softmax && opt.training)
    throw InputError("kernel '" + c.kernels.back().name + "'", "a model ending in Softmax is not trained on the wafer",
                     "end the model with the logits and use \"loss\": \"softmax_cross_entropy\"");
  c.compute = opt.compute;
  c.training = opt.training;
  c.loss = opt.loss;
  c.momentum = opt.momentum;
  c.weight_decay = opt.weight_decay;
  c.loss_scaling = opt.loss_scaling;
  c.micro_batches = opt.micro_batches;
  c.adam = opt.adam, c.beta1 = opt.beta1, c.beta2 = opt.beta2, c.eps = opt.eps;
  c.lr_scheduled = opt.lr_scheduled;
  if (c.training) check_training(c, opt);

  if (opt.mode == MapMode::pipelined) place_pipelined_rect(c, cfg, opt);
  else place_streaming_rect(c, cfg, opt);
  for (auto& k : c.kernels) conv_weights(k);
  for (const auto& k : c.kernels)
    if (k.attn) {
      const DenseKernel &q = c.kernels[static_cast<size_t>(k.attn_q)], &kk = c.kernels[static_cast<size_t>(k.attn_k)];
      if (q.k_on_columns != k.k_on_columns || kk.k_on_columns != k.k_on_columns || q.nb != k.nb || kk.nb != k.nb || q.B != (k.attn_qrows ? k.attn_qrows : k.B) || kk.B != k.B ||
          q.N != k.N || kk.N != k.N)
        throw InputError("kernel '" + k.name + "'", "the attention's Q, K and V must come out on the same PEs in the same blocks (dense layers of the same input and size)", kOpsHint);
    }
  for (const auto& k : c.kernels)
    if (k.attn && (!k.attn_q_cos.empty() || !k.attn_k_cos.empty()) && k.attn_group() > 1) pair_rotary_features(c, k);
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
      if (k.res_move)  // (the move's send runs on microthread 4, as attention's broadcasts do; LayerNorm's use 5)
        for (const auto& o : c.kernels)
          if (o.attn)
            throw InputError(where, "a residual from the other edge (moved along the diagonal) in a model with attention is not mapped in this build (their queues)", kOpsHint);
    }
    if (!same)
      throw InputError(where, "the residual's input (the " + std::string(k.res_preln ? "value before the LayerNorm" : k.res_out ? "output" : "input") + " of kernel '" + r.name + "') does not lie on this kernel's chain ends in the same blocks (" +
                                  (opt.mode == MapMode::pipelined ? std::string("pipelined: an odd number of kernels in the branch")
                                   : opt.training                 ? std::string("training: an odd number of kernels in the branch, which it does not move")
                                                                  : std::string("rows or blocks differ")) + ")",
                       opt.mode == MapMode::pipelined ? "use \"mapping\": {\"mode\": \"weight_streaming\"}, which moves a residual from the other edge" : kOpsHint);
  }
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
    if (c.training) t.data("Xsv", c.compute, c.xs_arena, {}, -1, -1, "the x values each kernel took (the weight gradients need them; its place: Compiled::xs_off)");
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const DenseKernel& k = c.kernels[l];
      if (!c.sequenced || first_of_orientation(c, l) == l) x_routes(k, true, routes);  // (sequenced: one x color per orientation)
      if (k.res_move && first_move(c, l) == l) move_routes(k, routes);
      if (first_of_orientation(c, l) == l) {  // shared colors: one set of routes
        reduce_routes(k, routes);
        weight_routes(k, routes);
      }
      layer_params(k, l, true, c.training, params);
      // (sequenced: the LayerNorm and attention chains of one orientation share one set of routes)
      if (k.layernorm) ln_params(k, l, params);
      if (k.layernorm && ln_chain_owner(c, l) == l) ln_routes(k, routes);
      if (k.attn_group() > 1) attn_params(k, l, params);
      if (k.attn_group() > 1 && attn_chain_owner(c, l) == l) attn_routes(k, routes);
      layer_program(c, l, t);
      bool have = false;
      for (const auto& pj : ports) have = have || pj["name"] == k.port;
      if (!have)
        ports.push_back({{"name", k.port}, {"dir", "in"}, {"side", k.k_on_columns ? "W" : "N"}, {"x", 0}, {"y", 0}, {"length", k.lanes}, {"color", k.cw},
                         {"type", we}});
    }
    if (c.sequenced) sequenced_tasks(c, t);
    if (c.training) training_layout(c, opt, routes, params, ports, t);
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
          const int64_t R = k.row_period ? k.row_period : 1;  // (rows of constants: the bias plus each row's)
          HostArray a{k.x0 + px, k.y0 + py, "bias" + std::to_string(l), std::vector<float>(static_cast<size_t>(R * k.nb), 0.0f)};
          for (int64_t r = 0; r < R; ++r)
            for (int64_t i = 0; i < k.nb; ++i)
              if (nbk * k.nb + i < k.N)
                a.values[static_cast<size_t>(r * k.nb + i)] = k.bias[static_cast<size_t>(nbk * k.nb + i)] + (k.row_period ? k.row_bias[static_cast<size_t>(r * k.N + nbk * k.nb + i)] : 0.0f);
          c.constants.push_back(std::move(a));
          if (k.attn && !k.attn_mask.empty()) c.constants.push_back({k.x0 + px, k.y0 + py, "amask" + std::to_string(l), k.attn_mask});  // the scores' mask
          if (k.attn && !k.attn_q_cos.empty()) {  // the rotary tables (a split head: the PE's pairs' columns)
            c.constants.push_back({k.x0 + px, k.y0 + py, "rcq" + std::to_string(l), rotary_table(k, k.attn_q_cos, nbk)});
            c.constants.push_back({k.x0 + px, k.y0 + py, "rsq" + std::to_string(l), rotary_table(k, k.attn_q_sin, nbk)});
          }
          if (k.attn && !k.attn_k_cos.empty()) {
            c.constants.push_back({k.x0 + px, k.y0 + py, "rck" + std::to_string(l), rotary_table(k, k.attn_k_cos, nbk)});
            c.constants.push_back({k.x0 + px, k.y0 + py, "rsk" + std::to_string(l), rotary_table(k, k.attn_k_sin, nbk)});
          }
          for (size_t j = 0; j < k.acts.size(); ++j)  // a PRelu's slopes, a per-feature scale or shift, for the block's features (0 beyond N)
            if (!k.acts[j].per.empty()) {
              HostArray s{k.x0 + px, k.y0 + py, "prs" + std::to_string(l) + "_" + std::to_string(j), std::vector<float>(static_cast<size_t>(k.nb), 0.0f)};
              for (int64_t i = 0; i < k.nb && nbk * k.nb + i < k.N; ++i) s.values[static_cast<size_t>(i)] = k.acts[j].per[static_cast<size_t>(nbk * k.nb + i)];
              c.constants.push_back(std::move(s));
            }
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
            if (k.ln_padded()) c.constants.push_back(std::move(m));
          }
        }
      }
  }
  estimate(c, cfg);
  return c;
}

}  // namespace tessera::wafer
