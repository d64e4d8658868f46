// Recurrent layers on the wafer (docs/wafer-compiler.md "Recurrent layers"): a stack of RNN, GRU or
// LSTM nodes (the canonical graph keeps them whole for the wafer) as one dense kernel per layer and
// step, in time order (layer 0 .. L-1 of step 0, then of step 1, ...), each reading the kernel
// before it.
//
// Every step kernel's output row -- what the next kernel multicasts as its x -- carries the whole
// recurrent state: each layer's h (and an LSTM's c) in a slot of hb units per chain-end PE, then
// (where the next kernel is layer 0's) the next step's x, which the chain ends copy in from an array
// the host places with the graph input. A kernel's GEMM computes its layer's gates from the rows of
// its layer input (x, or the layer below's h of this step) and of its own h from the step before,
// and passes every state slot through by identity columns; its chain ends apply the cell (the
// gates' functions and products) in place, replacing its own layer's slots. So the cell finds its
// previous state (GRU's h, LSTM's c) beside its gates, on the PE of its units, and nothing moves
// between the rectangle's two edges but the x values every kernel takes anyway.
#include <algorithm>
#include <cmath>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

const char* const kRnnHint =
    "the wafer maps stacks of RNN, GRU (linear_before_reset=1, PyTorch's) and LSTM layers -- forward, or one reverse or bidirectional layer -- "
    "with the default activations, zero initial states and full-length sequences, read through a final state ([batch, hidden]: h_n[-1], "
    "output[:, -1]; a bidirectional layer's two side by side); run other recurrent models on target.kind neuroncore or reference";

std::vector<int64_t> ints_of(const graph::Graph& g, const graph::Node& n, size_t i) {
  const Tensor* t = i < n.inputs.size() ? constant_of(g, n.inputs[i]) : nullptr;
  return t ? t->to_i64() : std::vector<int64_t>{};
}

// The axis a one-axis Slice of a value of rank r selects along (ONNX: axes default to 0 ..; negative
// from the end), or -1.
int64_t slice_axis(const graph::Graph& g, const graph::Node& n, size_t rank) {
  auto a = n.inputs.size() > 3 && !n.inputs[3].empty() ? ints_of(g, n, 3) : std::vector<int64_t>{0};
  const auto st = n.inputs.size() > 4 && !n.inputs[4].empty() ? ints_of(g, n, 4) : std::vector<int64_t>{1};
  if (a.size() != 1 || st != std::vector<int64_t>{1} || ints_of(g, n, 1).size() != 1) return -1;
  return a[0] < 0 ? a[0] + static_cast<int64_t>(rank) : a[0];
}

// The range [b, e) a one-axis Slice selects of `dim` along its axis (nullopt: not constant).
std::optional<std::pair<int64_t, int64_t>> axis0_range(const graph::Graph& g, const graph::Node& n, int64_t dim) {
  const auto s = ints_of(g, n, 1), e = ints_of(g, n, 2);
  if (s.size() != 1 || e.size() != 1) return std::nullopt;
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
  return std::pair{clamp(s[0]), clamp(e[0])};
}

bool all_zero(const Tensor* t) {
  if (!t) return false;
  for (float v : t->to_f32())
    if (v != 0.0f) return false;
  return true;
}

}  // namespace

RnnLayout rnn_layout(const DenseKernel& k) {
  const RnnStep& r = *k.rnn;
  const int64_t Ln = k.k_on_columns ? k.h : k.w;
  RnnLayout o;
  o.hb = cdiv(r.H, Ln);
  o.xs = r.x_time >= 0 ? cdiv(r.X, Ln) : 0;
  o.S = r.states();
  o.G = r.gates();
  o.kw = o.S * o.hb + o.xs;
  o.nb = o.kw + o.G * o.hb;
  return o;
}

int64_t col_window(const Compiled& c, size_t reader) {
  const DenseKernel& n = c.kernels[reader];
  if (n.src < 0 || n.reads_input2 || !c.kernels[static_cast<size_t>(n.src)].rnn) return -1;
  return n.rnn ? 0 : n.rnn_slot * rnn_layout(c.kernels[static_cast<size_t>(n.src)]).hb;
}

std::optional<RnnMatch> match_recurrent(const graph::Graph& g, const std::string& input, const std::function<std::string(const std::string&)>& canon,
                                        const std::function<bool(const std::string&)>& parity, std::set<size_t>& consumed) {
  std::vector<size_t> rec;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == "RNN" || g.nodes[i].op == "GRU" || g.nodes[i].op == "LSTM") rec.push_back(i);
  if (rec.empty()) return std::nullopt;
  auto refuse = [&](const graph::Node& n, const std::string& why) { throw InputError(g.where(n), why, kRnnHint); };
  const auto uses = g.consumers();
  auto readers = [&](const std::string& v) {
    const auto it = uses.find(v);
    return it == uses.end() ? std::vector<size_t>{} : it->second;
  };
  // The stack: layer 0 reads the graph input (as [steps, batch, x]: a Transpose of a [batch, steps,
  // x] input, PyTorch's batch_first, or the input itself); each next layer its Squeeze of Y.
  std::vector<size_t> stack;
  for (const size_t i : rec)
    if (canon(g.nodes[i].inputs[0]) == input) stack.push_back(i);
  if (stack.size() != 1) refuse(g.nodes[rec[0]], stack.empty() ? "this recurrent layer does not read the graph input: the wafer maps a stack of them on the graph input in this build"
                                                                   : "several recurrent layers read the graph input: the wafer maps one stack in this build");
  const graph::Node& n0 = g.nodes[stack[0]];
  const Shape xs = g.value(n0.inputs[0]).shape;
  if (xs.size() != 3) refuse(n0, "the input is " + shape_str(xs) + ", not [steps, batch, features]");
  const int64_t T = xs[0], B = xs[1], X = xs[2];
  const bool batch_major = parity(n0.inputs[0]);
  for (;;) {
    const graph::Node& n = g.nodes[stack.back()];
    if (n.outputs.empty()) break;
    const auto ys = readers(n.outputs[0]);
    if (ys.size() != 1 || g.nodes[ys[0]].op != "Reshape") break;
    if (g.value(g.nodes[ys[0]].outputs[0]).shape != Shape{T, B, g.value(n.outputs[0]).shape.back()}) break;  // (the Squeeze of [T, 1, B, H])
    const auto zs = readers(g.nodes[ys[0]].outputs[0]);
    if (zs.size() != 1 || !std::count(rec.begin(), rec.end(), zs[0]) || g.nodes[zs[0]].inputs[0] != g.nodes[ys[0]].outputs[0]) break;
    consumed.insert(ys[0]);
    stack.push_back(zs[0]);
  }
  for (const size_t i : rec)
    if (!std::count(stack.begin(), stack.end(), i)) refuse(g.nodes[i], "this recurrent layer is not in the stack on the graph input (each layer reading the layer below's output, squeezed)");
  const int64_t L = static_cast<int64_t>(stack.size());
  for (size_t j = 0; j + 1 < stack.size(); ++j)  // (a lower layer's Y: read by the layer above only)
    if (const auto& o = g.nodes[stack[j]].outputs; !o.empty() && std::find(g.outputs.begin(), g.outputs.end(), o[0]) != g.outputs.end())
      refuse(g.nodes[stack[j]], "its output at every step is the graph's output '" + o[0] + "'; the wafer maps a stack read through its final state in this build");
  RnnMatch m;
  std::vector<std::shared_ptr<const RnnWeights>> ws;  // per layer and direction
  RnnStep proto;
  bool reverse = false;  // (the one layer of the stack takes the sequence from its end)
  for (int64_t j = 0; j < L; ++j) {
    const graph::Node& n = g.nodes[stack[static_cast<size_t>(j)]];
    const RnnStep::Cell cell = n.op == "LSTM" ? RnnStep::Cell::lstm : n.op == "GRU" ? RnnStep::Cell::gru : RnnStep::Cell::rnn;
    if (j > 0 && (cell != proto.cell || n.op != n0.op)) refuse(n, "the stack's layers are of different kinds (" + n0.op + ", " + n.op + ")");
    const std::string direction = n.attrs.get_string("direction", "forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional") refuse(n, "direction '" + direction + "' is not an ONNX direction");
    if (direction == "bidirectional" && L > 1) refuse(n, "a bidirectional layer in a stack of several is not mapped on the wafer in this build (the layer above reads both directions at every step)");
    if (j > 0 && direction != "forward") refuse(n, "a " + direction + " layer above another is not mapped on the wafer in this build");
    // (the defaults may be written out: PyTorch's RNN exports activations ["Tanh"])
    const std::vector<std::string> acts = cell == RnnStep::Cell::lstm  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                          : cell == RnnStep::Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                       : std::vector<std::string>{"Tanh"};
    if ((n.attrs.has("activations") && n.attrs.get_strings("activations") != acts) || n.attrs.has("clip") || n.attrs.get_int("input_forget", 0) || n.attrs.get_int("layout", 0))
      refuse(n, "activations other than the defaults, clip, input_forget or layout=1 are not mapped on the wafer in this build");
    if (cell == RnnStep::Cell::gru && n.attrs.get_int("linear_before_reset", 0) != 1)
      refuse(n, "a GRU with linear_before_reset=0 (the reset gate before the recurrent product, ONNX's default) is not mapped on the wafer in this build; PyTorch exports linear_before_reset=1");
    const Tensor* W = constant_of(g, n.inputs[1]);
    const Tensor* R = constant_of(g, n.inputs[2]);
    const Tensor* Bt = n.inputs.size() > 3 && !n.inputs[3].empty() ? constant_of(g, n.inputs[3]) : nullptr;
    if (!W || !R || (n.inputs.size() > 3 && !n.inputs[3].empty() && !Bt)) refuse(n, "its weights and biases must be constants");
    const int64_t H = R->shape()[2], in = W->shape()[2], G = RnnStep::onnx_gates(cell);
    if (j > 0 && H != proto.H) refuse(n, "the stack's layers have different hidden sizes (" + std::to_string(proto.H) + ", " + std::to_string(H) + ")");
    if (in != (j ? H : X)) refuse(n, "its input has " + std::to_string(j ? H : X) + " features, its weights " + std::to_string(in));
    if (n.inputs.size() > 4 && !n.inputs[4].empty()) {
      const Tensor* sl = constant_of(g, n.inputs[4]);
      bool full = sl != nullptr;
      for (int64_t v : sl ? sl->to_i64() : std::vector<int64_t>{}) full = full && v == T;
      if (!full) refuse(n, "sequence_lens other than the full length of every sequence are not mapped on the wafer in this build");
    }
    for (size_t k = 5; k < std::min<size_t>(n.inputs.size(), 7); ++k)
      if (!n.inputs[k].empty() && !all_zero(constant_of(g, n.inputs[k]))) refuse(n, "initial states other than zeros are not mapped on the wafer in this build");
    if (n.inputs.size() > 7 && !n.inputs[7].empty()) refuse(n, "LSTM peepholes are not mapped on the wafer in this build");
    const int64_t D = direction == "bidirectional" ? 2 : 1;
    reverse = direction == "reverse";
    if (W->shape()[0] != D || R->shape()[0] != D || (Bt && Bt->shape()[0] != D))
      refuse(n, "its weights are for " + std::to_string(W->shape()[0]) + " direction(s), its direction attribute '" + direction + "' has " + std::to_string(D));
    const auto Wv = W->to_f32(), Rv = R->to_f32(), Bv = Bt ? Bt->to_f32() : std::vector<float>{};
    for (int64_t d = 0; d < D; ++d) {  // (ONNX's [directions, ...] tensors: one slice each)
      auto w = std::make_shared<RnnWeights>();
      w->in = in;
      w->W.assign(Wv.begin() + d * G * H * in, Wv.begin() + (d + 1) * G * H * in);
      w->R.assign(Rv.begin() + d * G * H * H, Rv.begin() + (d + 1) * G * H * H);
      w->Wb.assign(static_cast<size_t>(G * H), 0.0f), w->Rb = w->Wb;
      if (Bt) {
        std::copy(Bv.begin() + 2 * d * G * H, Bv.begin() + (2 * d + 1) * G * H, w->Wb.begin());
        std::copy(Bv.begin() + (2 * d + 1) * G * H, Bv.begin() + (2 * d + 2) * G * H, w->Rb.begin());
      }
      ws.push_back(w);
    }
    proto.dirs = D;
    proto.cell = cell, proto.H = H;
    consumed.insert(stack[static_cast<size_t>(j)]);
  }
  proto.layers = L, proto.T = T, proto.X = X, proto.B = B, proto.batch_major = batch_major;
  // The stack's final states (Y_h, Y_c; the last step of the top layer's Y): values that are a list
  // along axis 0 of state slots of [batch, hidden] each, through Concat, Slice and Reshape.
  std::map<std::string, std::vector<int64_t>> slots;
  for (int64_t j = 0; j < L; ++j) {
    const graph::Node& n = g.nodes[stack[static_cast<size_t>(j)]];
    std::vector<int64_t> hs, cs;  // (Y_h, Y_c: [directions, batch, hidden])
    for (int64_t d = 0; d < proto.dirs; ++d) hs.push_back(proto.h_slot(j * proto.dirs + d)), cs.push_back(proto.c_slot(j * proto.dirs + d));
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) slots[n.outputs[1]] = hs;
    if (n.outputs.size() > 2 && !n.outputs[2].empty()) slots[n.outputs[2]] = cs;
  }
  const graph::Node& top = g.nodes[stack.back()];
  std::vector<std::string> work;
  for (const auto& [v, s] : slots) work.push_back(v);
  // Y [steps, 1, batch, hidden]: only its last step, through its views -- a Squeeze to [steps,
  // batch, hidden], the Transpose to [batch, steps, hidden] of PyTorch's batch_first (output[:, -1]).
  std::vector<std::pair<std::string, int64_t>> views;  // (value, its time axis)
  if (!top.outputs.empty() && !top.outputs[0].empty()) views.push_back({top.outputs[0], 0});
  for (size_t vi = 0; vi < views.size(); ++vi) {
    const auto [o, time_axis] = views[vi];
    if (std::find(g.outputs.begin(), g.outputs.end(), o) != g.outputs.end())
      refuse(top, "its output at every step is the graph's output '" + o + "'; the wafer maps a stack read through its final state in this build");
    for (const size_t r : readers(o)) {
      const graph::Node& n = g.nodes[r];
      const Shape& os = g.value(n.outputs[0]).shape;
      consumed.insert(r);
      if (reverse || proto.dirs > 1)
        refuse(n, "it reads a reverse or bidirectional layer's output Y, whose last step is not the layer's final state; the wafer maps such a layer read through h_n (torch.cat((h_n[-2], h_n[-1]), 1)) in this build");
      if (n.op == "Reshape" && os == Shape{T, B, proto.H} && time_axis == 0) {
        views.push_back({n.outputs[0], 0});
        continue;
      }
      if (n.op == "Transpose" && os.size() == 3 && n.attrs.get_ints("perm", {}) == std::vector<int64_t>{1, 0, 2}) {
        views.push_back({n.outputs[0], 1 - time_axis});
        continue;
      }
      std::optional<std::pair<int64_t, int64_t>> range;
      if (n.op == "Slice" && slice_axis(g, n, g.value(o).shape.size()) == time_axis) range = axis0_range(g, n, T);
      if (!range || range->first != T - 1 || range->second != T)
        refuse(n, "it reads the top recurrent layer's output at every step; the wafer maps a stack read through its final state (the last step) in this build");
      slots[n.outputs[0]] = {proto.h_slot(L - 1)};
      work.push_back(n.outputs[0]);
    }
  }
  const int64_t BH = B * proto.H;
  std::set<std::string> finals;
  // Several states side by side as one value's features ([batch, n hidden]: a Concat along the last
  // axis of [batch, hidden] states, or h_n transposed to [batch, n, hidden] and reshaped --
  // torch.cat((h_n[-2], h_n[-1]), 1) of a bidirectional layer), and h_n transposed on its way there.
  std::map<std::string, std::vector<int64_t>> feat, tr;
  for (size_t w = 0; w < work.size(); ++w) {
    const std::string v = work[w];
    if (feat.count(v) || tr.count(v)) {
      const bool is_feat = feat.count(v) != 0;
      const std::vector<int64_t> sv = is_feat ? feat.at(v) : tr.at(v);
      for (const size_t r : readers(v)) {
        const graph::Node& n = g.nodes[r];
        const Shape& os = g.value(n.outputs[0]).shape;
        if (!is_feat && n.op == "Reshape" && os == Shape{B, static_cast<int64_t>(sv.size()) * proto.H}) {
          consumed.insert(r), feat[n.outputs[0]] = sv, work.push_back(n.outputs[0]);
          continue;
        }
        if (!is_feat || (n.op != "MatMul" && n.op != "Gemm"))
          refuse(n, n.op + " of recurrent states side by side: the wafer maps a dense layer (Linear) reading them, or their Reshape to [batch, features], in this build");
        for (size_t q = 1; q < sv.size(); ++q)
          if (sv[q] != sv[0] + static_cast<int64_t>(q)) refuse(n, "it reads recurrent states side by side that are not next to each other in the rows (h and c, or two layers' h); the wafer maps h_n of a bidirectional layer so");
        finals.insert(v);
      }
      if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) refuse(top, "the graph's output '" + v + "' holds several recurrent states; the wafer maps one final state ([batch, hidden]) as the output in this build");
      continue;
    }
    const std::vector<int64_t> sv = slots.at(v);
    if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) {
      if (sv.size() != 1 || g.value(v).shape.back() != proto.H)
        refuse(top, "the graph's output '" + v + "' holds several recurrent states; the wafer maps one final state ([batch, hidden]) as the output in this build");
      finals.insert(v);
    }
    for (const size_t r : readers(v)) {
      const graph::Node& n = g.nodes[r];
      if (consumed.count(r) && n.op != "Reshape" && n.op != "Transpose") continue;  // (a layout-only Reshape or Transpose is consumed as an alias: followed)
      std::vector<int64_t> out;
      if (n.op == "Reshape" && shape_numel(g.value(n.outputs[0]).shape) == static_cast<int64_t>(sv.size()) * BH) {
        out = sv;
      } else if (n.op == "Transpose" && sv.size() == 1) {  // ([1, batch, hidden] to [batch, 1, hidden]: h_n.transpose(0, 1) of one layer)
        out = sv;
      } else if (n.op == "Transpose" && n.attrs.get_ints("perm", {}) == std::vector<int64_t>{1, 0, 2} && g.value(v).shape.size() == 3) {
        consumed.insert(r), tr[n.outputs[0]] = sv, work.push_back(n.outputs[0]);  // ([n, batch, hidden] to [batch, n, hidden])
        continue;
      } else if (n.op == "Transpose") {
        refuse(n, "a Transpose of several recurrent states other than swapping their first two axes");
      } else if (n.op == "Slice") {
        const Shape& vs = g.value(v).shape;
        const auto range = slice_axis(g, n, vs.size()) == 0 && vs.size() >= 3 && vs[0] == static_cast<int64_t>(sv.size()) ? axis0_range(g, n, vs[0]) : std::nullopt;
        if (!range) refuse(n, "a Slice of the recurrent states other than along the layers' axis");
        out.assign(sv.begin() + range->first, sv.begin() + std::max(range->first, range->second));
      } else if (n.op == "Concat" && g.value(v).shape.size() == 2 && (n.attrs.get_int("axis", 0) == 1 || n.attrs.get_int("axis", 0) == -1)) {
        std::vector<int64_t> fs;  // (states side by side: each input one [batch, hidden] state)
        for (const auto& in : n.inputs) {
          if (!slots.count(in) || slots.at(in).size() != 1 || g.value(in).shape != Shape{B, proto.H}) refuse(n, "a Concat of a recurrent state with other values");
          fs.push_back(slots.at(in)[0]);
        }
        consumed.insert(r);
        if (!feat.count(n.outputs[0])) work.push_back(n.outputs[0]);
        feat[n.outputs[0]] = fs;
        continue;
      } else if (n.op == "Concat" && (n.attrs.get_int("axis", 0) == 0 || n.attrs.get_int("axis", 0) == -static_cast<int64_t>(g.value(v).shape.size()))) {
        bool ok = true;
        for (const auto& in : n.inputs) {
          ok = ok && slots.count(in) && g.value(in).shape.size() >= 3 && g.value(in).shape[0] == static_cast<int64_t>(slots.at(in).size());
          if (ok) out.insert(out.end(), slots.at(in).begin(), slots.at(in).end());
        }
        if (!ok) refuse(n, "a Concat of recurrent states with other values");
      } else {
        if (sv.size() != 1 || g.value(v).shape.back() != proto.H) refuse(n, "it reads several recurrent states at once; the wafer maps a stack read through one final state ([batch, hidden]) in this build");
        if (n.op != "MatMul" && n.op != "Gemm") refuse(n, n.op + " of a recurrent state: the wafer maps a dense layer (Linear) reading it in this build");
        finals.insert(v);
        continue;
      }
      consumed.insert(r);
      if (!slots.count(n.outputs[0])) work.push_back(n.outputs[0]);
      slots[n.outputs[0]] = out;
    }
  }
  if (finals.size() != 1) refuse(top, finals.empty() ? "nothing reads the stack's final state" : "several of the stack's final states are read; the wafer maps one in this build");
  m.value = *finals.begin();
  const std::vector<int64_t>& fsl = feat.count(m.value) ? feat.at(m.value) : slots.at(m.value);
  m.slot = fsl[0], m.nslots = static_cast<int64_t>(fsl.size());
  // The kernels: layer j (direction d) of step s reads the kernel before it (the first: the graph
  // input's x at its step); a backward direction takes the steps from the last.
  for (int64_t s = 0; s < T; ++s)
    for (int64_t j = 0; j < L; ++j)
      for (int64_t d = 0; d < proto.dirs; ++d) {
      const graph::Node& n = g.nodes[stack[static_cast<size_t>(j)]];
      auto r = std::make_shared<RnnStep>(proto);
      const int64_t t = reverse || d == 1 ? T - 1 - s : s;
      r->layer = j, r->dir = d, r->t = t, r->w = ws[static_cast<size_t>(j * proto.dirs + d)];
      DenseKernel k;
      k.name = (n.name.empty() ? n.outputs[0] : n.name) + (proto.dirs > 1 ? (d ? "[b" : "[f") : "[") + std::to_string(t) + "]";
      k.op = n.op;
      k.nodes = {n.name};
      k.B = k.samples = B;
      k.src = static_cast<long>(m.kernels.size()) - 1;
      // (until the rectangle sets the slots: rnn_blocks)
      k.K = X + r->states() * proto.H;
      k.N = (r->states() + r->gates()) * proto.H + X;
      k.kflops = r->w->in + proto.H;
      k.nflops = RnnStep::onnx_gates(proto.cell) * proto.H;
      k.in_value = k.src < 0 ? input : k.name + "/in";
      k.rnn = std::move(r);
      m.kernels.push_back(std::move(k));
      }
  // Each kernel's rows carry the x of the next kernel's step where that one reads x (layer 0).
  for (size_t l = 0; l + 1 < m.kernels.size(); ++l) {
    const RnnStep& nx = *m.kernels[l + 1].rnn;
    if (nx.layer == 0) {
      auto r = std::make_shared<RnnStep>(*m.kernels[l].rnn);
      r->x_time = nx.t;
      m.kernels[l].rnn = std::move(r);
    }
  }
  return m;
}

void rnn_blocks(std::vector<DenseKernel>& ks, size_t l) {
  DenseKernel& k = ks[l];
  if (!k.rnn) {
    if (k.rnn_slot < 0 || k.src < 0) return;
    const int64_t hb = rnn_layout(ks[static_cast<size_t>(k.src)]).hb, ns = k.rnn_nslots, H = ks[static_cast<size_t>(k.src)].rnn->H;
    if (ns == 1) {
      if (k.kb != hb) throw std::logic_error("rnn_blocks: the reader of a recurrent state takes " + std::to_string(k.kb) + " units per block, not the slot's");
      return;
    }
    // Several states side by side: K block p holds the block's units of each state in turn (the
    // slots' columns of the rows), where the graph's features are each state's H in turn.
    if (!k.rnn_w0) k.rnn_w0 = std::make_shared<const std::vector<float>>(k.W);  // (the graph's [ns H, N])
    const int64_t Lk = k.k_on_columns ? k.w : k.h;
    k.kb = ns * hb;
    k.K = Lk * k.kb;
    k.W.assign(static_cast<size_t>(k.K * k.N), 0.0f);
    for (int64_t q = 0; q < ns; ++q)
      for (int64_t u = 0; u < H; ++u)
        std::copy_n(k.rnn_w0->begin() + (q * H + u) * k.N, k.N, k.W.begin() + ((u / hb) * k.kb + q * hb + u % hb) * k.N);
    return;
  }
  const RnnStep& r = *k.rnn;
  const RnnWeights& w = *r.w;
  const RnnLayout o = rnn_layout(k);
  const int64_t Lk = k.k_on_columns ? k.w : k.h, Ln = k.k_on_columns ? k.h : k.w, H = r.H;
  const bool first = k.src < 0;
  const RnnLayout p = first ? RnnLayout{} : rnn_layout(ks[static_cast<size_t>(k.src)]);
  if (!first && r.layer == 0 && p.xs == 0) throw std::logic_error("rnn_blocks: layer 0 reads no x");
  k.kb = first ? cdiv(r.X, Lk) : p.kw;
  k.K = first ? r.X : Lk * p.kw;
  k.nb = o.nb;
  k.N = Ln * o.nb;
  k.W.assign(static_cast<size_t>(k.K * k.N), 0.0f);
  k.bias.assign(static_cast<size_t>(k.N), 0.0f);
  auto srow = [&](int64_t s, int64_t u) { return (u / p.hb) * p.kw + s * p.hb + u % p.hb; };        // the K row of state s, unit u
  auto xrow = [&](int64_t f) { return first ? f : (f / p.xs) * p.kw + p.S * p.hb + f % p.xs; };     // of x feature f
  auto inrow = [&](int64_t f) { return r.layer == 0 ? xrow(f) : srow(r.h_slot(r.v() - 1), f); };  // of the layer input's feature f (a layer above: the one below's h, forward only)
  auto col = [&](int64_t off, int64_t u) { return (u / o.hb) * o.nb + off + u % o.hb; };            // the column of unit u at offset off of a block
  float* W = k.W.data();
  for (int64_t u = 0; u < H; ++u) {
    for (int64_t s = 0; s < o.S && !first; ++s) W[srow(s, u) * k.N + col(s * o.hb, u)] = 1.0f;  // every state passes through
    for (int64_t gi = 0; gi < o.G; ++gi) {
      // ONNX's gate rows (iofc, zrh) and the parts they sum: GRU's h~ is two columns, x's and h's.
      const int64_t og = r.cell == RnnStep::Cell::gru && gi == 3 ? 2 : gi;
      const bool xpart = !(r.cell == RnnStep::Cell::gru && gi == 3), hpart = !(r.cell == RnnStep::Cell::gru && gi == 2);
      const int64_t cc = col(o.kw + gi * o.hb, u), gr = og * H + u;
      if (xpart) {
        for (int64_t f = 0; f < w.in; ++f) W[inrow(f) * k.N + cc] = w.W[static_cast<size_t>(gr * w.in + f)];
        k.bias[static_cast<size_t>(cc)] += w.Wb[static_cast<size_t>(gr)];
      }
      if (hpart) {
        for (int64_t v = 0; v < H && !first; ++v) W[srow(r.h_slot(r.v()), v) * k.N + cc] = w.R[static_cast<size_t>(gr * H + v)];
        k.bias[static_cast<size_t>(cc)] += w.Rb[static_cast<size_t>(gr)];
      }
    }
  }
}

// Pipelined: each step on its own rectangle of E x E PEs (the first one's K side: as many as step 0's
// x needs), E the chain ends that hold hb ~ b units each -- E = ceil(H / hb) and hb = ceil(H / E) at
// once, so that no chain end is left without units and a reader's K blocks line up with them; a
// reader of a final state takes hb units a K block.
void rnn_pipelined(std::vector<DenseKernel>& ks, size_t l, int64_t b) {
  DenseKernel& k = ks[l];
  const DenseKernel* rk = k.rnn ? &k : &ks[static_cast<size_t>(k.src)];
  const int64_t H = rk->rnn->H;
  int64_t E = cdiv(H, std::min(b, H));
  while (cdiv(H, cdiv(H, E)) != E) E = cdiv(H, cdiv(H, E));
  if (!k.rnn) {  // the reader: its K along the source's chain ends
    k.kb = cdiv(H, E);
    k.w = k.k_on_columns ? E : k.nblocks();
    k.h = k.k_on_columns ? k.nblocks() : E;
    rnn_blocks(ks, l);  // (states side by side: their units per block)
    return;
  }
  const int64_t X = k.rnn->X, Lk = k.src < 0 ? cdiv(X, cdiv(X, std::min(E, X))) : E;
  k.w = k.k_on_columns ? Lk : E;
  k.h = k.k_on_columns ? E : Lk;
  rnn_blocks(ks, l);
}

}  // namespace tessera::wafer::detail
