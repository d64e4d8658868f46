// match_layers' pieces (internal.hpp; docs/wafer-compiler.md "Convolutions", "Elementwise
// functions"): constants per feature, a node absorbed into a kernel, GroupNorm and InstanceNorm at a
// Conv's chain ends, squeeze-excitation gates and gated units, ops of two values of one chain end,
// ConvTranspose (as a Conv over its dilated input), a nearest Resize into a Conv.
#include <algorithm>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// (internal.hpp: what the wafer compiler maps, for its refusals; the elementwise ops of one value)
const char* const kOpsHint =
    "the wafer compiler maps in this build: Gemm, or MatMul by a constant weight, with a bias Add and a scale per output feature (BatchNorm1d); "
    "Conv (1-D or 2-D, any stride, pads, dilation and groups), ConvTranspose, a nearest Resize (Upsample) into a Conv, MaxPool, AveragePool or GlobalAveragePool (or a mean over the spatial axes) after a Conv, "
    "a Flatten into a dense layer (or ending the graph); a Concat of branches read by Convs or dense layers; elementwise functions of one value (Relu, "
    "LeakyRelu, PRelu, Clip, Tanh, Sigmoid, HardSigmoid, HardSwish, Swish, GELU, Elu, Selu, Celu, Softplus, Mish, Abs, Neg, Add, Mul, Sub or Div by a scalar constant) "
    "and Add, Sub, Mul or Div of two values of one chain end (x - tanh(x), x / (1 + |x|)); a final "
    "Softmax or LogSoftmax; GroupNorm and InstanceNorm right after a Conv; residual Adds (ResNet's shortcuts, MobileNet's inverted residuals), squeeze-excitation gates, gated units (SwiGLU); LayerNorm "
    "and RMSNorm (also over a Conv's channels: LayerNorm2d, ConvNeXt's channels-last blocks); multi-head attention with additive or causal masks and rotary embeddings; a Vision Transformer's tokens (a Conv's positions as "
    "rows, a class token, a position embedding, one token into the head) (docs/wafer-compiler.md \"What it maps\"); "
    "run other models on target.kind neuroncore or reference";

// (internal.hpp)
const std::set<std::string> kUnary = {"Relu", "LeakyRelu", "Clip", "Tanh", "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Gelu",
                                      "Elu", "Selu", "Celu", "Softplus", "Mish", "PRelu", "Abs", "Neg", "Add", "Mul", "Sub", "Div"};

// A constant that adds or multiplies per feature: shape [..., N] with ones before the last axis
// for rows, [C, 1, 1] (or [1, C, 1, 1]; [C, 1] in 1-D) for a feature map of rank r.
bool per_feature(const Tensor& c, int64_t N, bool fmap, size_t rank) {
  if (c.numel() != N) return false;
  const Shape& s = c.shape();
  if (N == 1 || s.empty()) return true;
  if (fmap && s.size() < rank - 1) return false;
  const size_t axis = fmap ? s.size() - (rank - 2) - 1 : s.size() - 1;  // the feature axis, aligned from the right
  for (size_t d = 0; d < s.size(); ++d)
    if (d != axis && s[d] != 1) return false;
  return s[axis] == N;
}

// A node fused into the dense layer before it: named in its op and node list, the layer named by it
// -- except the bias Add the canonical graph splits off a Gemm ("<gemm>/bias"), which keeps the
// Gemm's name, the one the model file gives.
void absorb(DenseKernel& k, const graph::Node& n) {
  k.op += "+" + n.op;
  k.nodes.push_back(n.name);
  if (n.name != k.name + "/bias") k.name = n.name.empty() ? n.outputs[0] : n.name;
}

// ConvNeXt's and SAM's LayerNorm2d: x.permute(0, 2, 3, 1), layer_norm over the channels, permute
// back -- a LayerNorm over each position's channels, which a Conv's chain ends hold as a row.
std::pair<long, long> channel_norm_at(const graph::Graph& g, const graph::Node& n, const Shape& cs, const std::function<long(const std::string&, const char*)>& sole) {
  if (n.op != "Transpose" || cs.size() != 4 || n.attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 2, 3, 1}) return {-1, -1};
  const long ln = sole(n.outputs[0], "LayerNormalization");
  if (ln < 0) return {-1, -1};
  const graph::Node& l = g.nodes[static_cast<size_t>(ln)];
  const int64_t ax = l.attrs.get_int("axis", -1);
  const long back = ax == -1 || ax == 3 ? sole(l.outputs[0], "Transpose") : -1;
  if (back < 0 || g.nodes[static_cast<size_t>(back)].attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 3, 1, 2}) return {-1, -1};
  return {ln, back};
}

// GroupNorm as torch.nn exports it: a Reshape of [batch, C, spatial...] to [batch, G, rest] whose one
// consumer is an InstanceNormalization whose one consumer is a Reshape back to the map's shape; or
// an InstanceNormalization of the feature map itself (InstanceNorm2d: G = C).
GroupNormAt groupnorm_at(const graph::Graph& g, const graph::Node& n, size_t i, const Shape& cs, const std::function<long(const std::string&, const char*)>& sole) {
  GroupNormAt at;
  if (cs.size() < 3) return at;
  if (n.op == "InstanceNormalization") {
    at.in = static_cast<long>(i), at.groups = cs[1];
  } else if (n.op == "Reshape") {
    const Shape& os = g.value(n.outputs[0]).shape;
    int64_t rest = 1;
    for (size_t d = 1; d < cs.size(); ++d) rest *= cs[d];
    const long in_n = sole(n.outputs[0], "InstanceNormalization");
    if (os.size() == 3 && os[0] == cs[0] && os[1] > 0 && cs[1] % os[1] == 0 && os[1] * os[2] == rest && in_n >= 0) {
      const long back = sole(g.nodes[static_cast<size_t>(in_n)].outputs[0], "Reshape");
      if (back >= 0 && g.value(g.nodes[static_cast<size_t>(back)].outputs[0]).shape == cs) at.in = in_n, at.back = back, at.groups = os[1];
    }
  }
  return at;
}

// Right after a Conv and its bias: gn_size channels per group; the InstanceNormalization's own scale
// and shift per group become functions per channel (GroupNorm's affine map follows as a Mul and an
// Add per channel: more functions).
void groupnorm_into(DenseKernel& k, const graph::Graph& g, const graph::Node& n, const GroupNormAt& at, bool flat, const ConstantOf& constant, const Unsupported& unsupported) {
  const graph::Node& inn = g.nodes[static_cast<size_t>(at.in)];
  if (!k.spatial() || k.activated() || k.residual >= 0 || k.pkh || k.gn_size || k.gate_of >= 0 || flat)
    unsupported("GroupNorm and InstanceNorm are mapped right after a Conv (and its bias), before its functions, a residual or a pool");
  const Tensor* sc = inn.inputs.size() > 2 ? constant(inn.inputs[1]) : nullptr;
  const Tensor* bi = inn.inputs.size() > 2 ? constant(inn.inputs[2]) : nullptr;
  if (!sc || !bi || sc->numel() != at.groups || bi->numel() != at.groups)
    unsupported("InstanceNormalization's scale and bias must be constants of one value per group (" + std::to_string(at.groups) + ")");
  k.gn_size = k.N / at.groups;
  k.gn_eps = inn.attrs.get_float("epsilon", 1e-5);
  std::vector<float> scale(static_cast<size_t>(k.N)), shift(static_cast<size_t>(k.N));
  const auto sv = sc->to_f32(), bv = bi->to_f32();
  for (int64_t ch = 0; ch < k.N; ++ch)
    scale[static_cast<size_t>(ch)] = sv[static_cast<size_t>(ch / k.gn_size)], shift[static_cast<size_t>(ch)] = bv[static_cast<size_t>(ch / k.gn_size)];
  if (std::any_of(scale.begin(), scale.end(), [](float v) { return v != 1.0f; })) k.acts.push_back(Unary{Unary::Kind::mul_per, 0, 0, inn.op, scale});
  if (std::any_of(shift.begin(), shift.end(), [](float v) { return v != 0.0f; })) k.acts.push_back(Unary{Unary::Kind::add_per, 0, 0, inn.op, shift});
  absorb(k, n);
  if (at.back >= 0) absorb(k, inn), absorb(k, g.nodes[static_cast<size_t>(at.back)]);  // (n the Reshape before them)
}

// Squeeze-excitation: the running activation, a per-channel gate [samples, C, 1, 1] (a 1x1 Conv of
// pooled features and its Sigmoid), times the feature map an earlier Conv pooled (o2, of shape os).
// Or a gated unit (SwiGLU: silu(w1 x) * w3 x): the running activation times an earlier dense
// kernel's output of the same shape that no kernel reads -- multiplied at the chain ends as a
// residual is added (the two kernels read one input, so their outputs lie on the same PEs).
void gate_into(std::vector<DenseKernel>& ks, const std::vector<std::string>& kout, const std::string& o2, const Shape& os, const Shape& cs, bool flat,
               const Unsupported& unsupported) {
  long gk = -1;
  for (size_t q = 0; q + 1 < ks.size(); ++q)
    if (ks[q].prepool == o2) gk = static_cast<long>(q);
  DenseKernel& k = ks.back();
  long mk = -1;
  for (size_t q = 0; q + 1 < kout.size(); ++q)
    if (kout[q] == o2 && !ks[q].spatial()) mk = static_cast<long>(q);
  if (gk < 0 && mk >= 0 && !k.spatial() && k.residual < 0 && k.gate_of < 0 && !k.layernorm && !k.softmax && !k.attn && !flat && os == cs) {
    k.residual = mk;
    k.res_out = true;
    k.res_mul = true;
  } else if (gk < 0 || !k.spatial() || k.oh * k.ow != 1 || k.residual >= 0 || k.pkh || k.layernorm || k.softmax || k.attn || k.gate_of >= 0 || flat ||
             os.size() != cs.size() || os[0] != cs[0] || os[1] != cs[1]) {
    unsupported("Mul of two activations is mapped only as squeeze-excitation (a per-channel gate -- a 1x1 Conv of the features an earlier Conv pooled, after its function -- times that Conv's feature map) or as a gated unit (a dense layer's output, after its functions, times another dense layer's output of the same shape that no kernel reads)");
  } else {
    k.gate_of = gk;
    k.gate_rows = ks[static_cast<size_t>(gk)].B;
  }
}

// A residual: the other input o2 is the input of an earlier kernel (held on the PEs), or an earlier
// kernel's output no kernel reads, or an earlier kernel's value before its LayerNorm (a pre-norm
// block's residual) -- taken from that kernel's chain ends when they are the last kernel's (weight
// streaming's orientations), else the match before stands (the graph input on the sources, say).
void residual_into(std::vector<DenseKernel>& ks, const std::vector<std::string>& kout, const std::string& o2, const std::string& input2, bool flat,
                   const Unsupported& unsupported) {
  long r = -1;
  bool out = false;
  if (!input2.empty() && o2 == input2)
    unsupported("a residual of the second graph input ('" + input2 + "') is not mapped: the wafer compiler maps a second input only as cross-attention's keys and values");
  for (size_t q = 0; q < ks.size(); ++q)
    if (ks[q].in_value == o2 && !ks[q].reads_input2) r = static_cast<long>(q);
  for (size_t q = 0; r < 0 && q + 1 < kout.size(); ++q)
    if (kout[q] == o2) r = static_cast<long>(q), out = true;
  bool preln = false;
  const std::vector<bool> on_cols = streaming_orientations(ks);
  for (size_t q = 0; q + 1 < ks.size(); ++q)
    if (ks[q].layernorm && ks[q].preln_value == o2 && (r < 0 || on_cols[q] == on_cols.back())) r = static_cast<long>(q), out = false, preln = true;
  const DenseKernel& k = ks.back();
  if (r < 0 || k.residual >= 0 || k.gate_of >= 0 || k.layernorm || k.softmax || k.attn || k.pkh || flat)
    unsupported("Add of two activations is mapped only as a residual: the running activation plus the input of an earlier dense layer or Conv, before any LayerNorm or pool");
  ks.back().residual = r;
  ks.back().res_out = out;
  ks.back().res_preln = preln;
}

std::pair<int, std::vector<Unary>*> functions_list(DenseKernel& k) {
  if (k.layernorm && !k.attn && !k.softmax && k.gate_of < 0 && !k.pkh) return {2, &k.acts_post_ln};
  return k.residual >= 0 ? std::pair<int, std::vector<Unary>*>{1, &k.acts_after} : std::pair<int, std::vector<Unary>*>{0, &k.acts};
}

void two_values_into(std::vector<Unary>& fns, size_t at, const graph::Node& n, bool first, const Unsupported& unsupported) {
  for (size_t q = at; q < fns.size(); ++q)
    if (fns[q].kind == Unary::Kind::keep || fns[q].kind == Unary::Kind::combine)
      unsupported(n.op + " of two values at the chain ends overlaps another such op (" + fns[q].op + "): the wafer keeps one earlier value at a time");
  const Unary::Bin bin = n.op == "Add" ? Unary::Bin::add : n.op == "Sub" ? Unary::Bin::sub : n.op == "Mul" ? Unary::Bin::mul : Unary::Bin::div;
  fns.insert(fns.begin() + static_cast<long>(at), Unary{Unary::Kind::keep, 0, 0, n.op, {}});
  fns.push_back(Unary{Unary::Kind::combine, static_cast<double>(bin), first ? 1.0 : 0.0, n.op, {}});
}

// A constant per output feature (channel) that folds into neither W nor the bias (after a GroupNorm
// or a function): an array at the chain ends, as PRelu's slopes (Sub: plus -c; Div: times 1 / c).
Unary per_feature_unary(const graph::Node& n, const Tensor& c) {
  std::vector<float> v = c.to_f32();
  for (float& x : v) x = n.op == "Sub" ? -x : n.op == "Div" ? 1.0f / x : x;
  return Unary{n.op == "Mul" || n.op == "Div" ? Unary::Kind::mul_per : Unary::Kind::add_per, 0, 0, n.op, v};
}

// A ConvTranspose (stride s, pads p, output_padding a, dilation d) is the Conv of stride 1 over its
// input with s - 1 zeros between the values, pads d (k - 1) - p at the start and d (k - 1) - p + a at
// the end, and the kernel flipped with its channel axes swapped (per group): the general path, every
// zero multiplied (docs/wafer-compiler.md "Convolutions").
DenseKernel conv_transpose_kernel(const graph::Node& n, const Shape& cs, const Tensor& wt, long csrc, std::vector<DenseKernel>& ks, const Unsupported& unsupported) {
  const size_t sp = cs.size() - 2;
  if (!n.attrs.get_ints("output_shape", {}).empty()) unsupported("ConvTranspose with output_shape is not mapped; give pads and output_padding (torch.onnx.export's form)");
  if (n.attrs.get_string("auto_pad", "NOTSET") != "NOTSET") unsupported("ConvTranspose auto_pad is not mapped; give explicit pads");
  const int64_t groups = n.attrs.get_int("group", 1);
  const std::vector<int64_t> st = n.attrs.get_ints("strides", std::vector<int64_t>(sp, 1)), dil = n.attrs.get_ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * sp, 0)), opad = n.attrs.get_ints("output_padding", std::vector<int64_t>(sp, 0));
  const Shape& ws = wt.shape();
  if (st.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp || ws.size() != cs.size() || groups < 1 || ws[0] != cs[1] || cs[1] % groups)
    unsupported("ConvTranspose needs a weight [C_in, C_out / group, kernel...] matching its input " + shape_str(cs) + " and one stride, dilation and output padding and two pads per spatial axis");
  const int64_t cin = ws[0], cog = ws[1], cig = cin / groups, cout = cog * groups;
  int64_t taps = 1;
  for (size_t j = 0; j < sp; ++j) taps *= ws[2 + j];
  std::vector<int64_t> cpads(2 * sp);
  for (size_t j = 0; j < sp; ++j) {
    cpads[j] = dil[j] * (ws[2 + j] - 1) - pads[j];
    cpads[j + sp] = dil[j] * (ws[2 + j] - 1) - pads[j + sp] + opad[j];
    if (cpads[j] < 0 || cpads[j + sp] < 0 || st[j] < 1) unsupported("ConvTranspose pads beyond the kernel's extent minus one are not mapped");
  }
  const std::vector<float> wv = wt.to_f32();
  std::vector<float> wc(static_cast<size_t>(cout * cig * taps));
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t o = 0; o < cog; ++o)
      for (int64_t i = 0; i < cig; ++i)
        for (int64_t tap = 0; tap < taps; ++tap)  // (the taps in reverse: the kernel flipped along every axis)
          wc[static_cast<size_t>(((gi * cog + o) * cig + i) * taps + tap)] = wv[static_cast<size_t>(((gi * cig + i) * cog + o) * taps + (taps - 1 - tap))];
  Shape wcs = ws;
  wcs[0] = cout, wcs[1] = cig;
  graph::Node nc = n;
  nc.op = "Conv";
  nc.attrs.set("strides", std::vector<int64_t>(sp, 1));
  nc.attrs.set("pads", cpads);
  DenseKernel k = conv_kernel_in(nc, cs, Tensor::from_f32(wcs, std::move(wc)), csrc, ks, unsupported, sp == 2 ? st[0] : 1, st.back());
  k.op = "ConvTranspose" + k.op.substr(4);
  k.w_derived = "a ConvTranspose's kernel is flipped with its channel axes swapped";
  // FLOPs: every input value times every tap into C_out / group outputs (not the zeros between).
  k.kflops = static_cast<int64_t>(std::llround(static_cast<double>(cig * taps * k.ih_raw * k.iw_raw) / static_cast<double>(k.oh * k.ow)));
  return k;
}

// A nearest Resize (nn.Upsample's default) of a feature map cs to os by integer factors per spatial
// axis, where every output takes the input floor(i / s): coordinate_transformation_mode half_pixel
// or pytorch_half_pixel with a nearest_mode that rounds (|(r + 1/2) / s - 1/2| < 1/2: always q), or
// asymmetric with floor (torch.onnx.export's). {sh, sw}, or unsupported.
std::pair<int64_t, int64_t> upsample_of(const graph::Node& n, const Shape& cs, const Shape& os, const Unsupported& unsupported) {
  if (const std::string form = graph::nearest_resize_form(n); !form.empty())
    unsupported("Resize is mapped as a nearest upsampling by whole factors (mode nearest; coordinate_transformation_mode asymmetric with nearest_mode floor, or half_pixel); this one is " + form);
  if (os.size() != cs.size() || os[0] != cs[0] || os[1] != cs[1]) unsupported("Resize is mapped over the spatial axes only");
  const int64_t ih = cs.size() == 4 ? cs[2] : 1, iw = cs.back(), oh = os.size() == 4 ? os[2] : 1, ow = os.back();
  if (oh % ih || ow % iw || oh < ih || ow < iw) unsupported("Resize is mapped as an upsampling by whole factors; " + shape_str(cs) + " to " + shape_str(os) + " is not");
  return {oh / ih, ow / iw};
}

}  // namespace tessera::wafer::detail
