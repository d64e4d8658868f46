// The gradient of each op the training step differentiates (autodiff.hpp): given the gradient of a
// node's output, the gradients of its inputs, as graph ops.
#include <algorithm>

#include "mapper/passes/autodiff_builder.hpp"

namespace tessera::passes::detail {

const char* kHint =
    "training differentiates MatMul, Gemm, Conv (1-D and 2-D), MaxPool (tiling windows), GlobalAveragePool, Add, Sub, Mul, Div, Neg, Relu, Tanh, "
    "Sigmoid, Exp, Log, Sqrt, Pow (constant exponent), Erf, Softmax, LayerNormalization, ReduceSum, ReduceMean and the shape ops "
    "Reshape/Flatten/Squeeze/Unsqueeze/Identity/Transpose/Slice/Split/Concat (docs/training.md); other ops on the path from a weight to the "
    "loss (overlapping or padded pooling, average pooling, Gather...) are not supported yet";

void differentiate(Backward& bw, const graph::Node& n, const std::string& go) {
  const graph::Graph& forward = bw.forward;
  graph::Graph& g = bw.g;
  Builder& b = bw.b;
  auto acc = [&](const std::string& v, const std::string& gv) { bw.acc(v, gv); };
  auto shape = [&](const std::string& v) { return bw.shape(v); };
  auto in = [&](size_t k) { return bw.low(n.inputs[k]); };
  auto wants = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty() && bw.needs.count(n.inputs[k]) != 0; };
  const DType dt = b.dt;
  if (n.op == "MatMul") {
    const Shape &sa = shape(n.inputs[0]), &sb = shape(n.inputs[1]);
    if (sa.size() < 2 || sb.size() < 2) throw InputError(forward.where(n), "MatMul gradients need operands of rank 2 or more (got " + shape_str(sa) + " @ " + shape_str(sb) + ")", kHint);
    if (sa.size() == 2 && sb.size() == 2) {
      if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose(in(1))}));
      if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose(in(0)), go}));
    } else if (sa.size() == sb.size() && std::equal(sa.begin(), sa.end() - 2, sb.begin())) {  // batched, same batch dims
      std::vector<int64_t> perm;
      for (size_t i = 0; i < sa.size(); ++i) perm.push_back(static_cast<int64_t>(i));
      std::swap(perm[sa.size() - 1], perm[sa.size() - 2]);
      if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose_perm(in(1), perm)}));
      if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose_perm(in(0), perm), go}));
    } else if (sb.size() == 2 && sa.size() > 2) {  // [.., M, K] @ [K, N]: the weight's gradient sums over the leading axes
      Shape a2{shape_numel(sa) / sa.back(), sa.back()};
      Shape g2{a2[0], sb[1]};
      if (wants(0)) acc(n.inputs[0], b.node("MatMul", {go, b.transpose(in(1))}));
      if (wants(1)) acc(n.inputs[1], b.node("MatMul", {b.transpose(b.reshape(in(0), a2)), b.reshape(go, g2)}));
    } else {
      throw InputError(forward.where(n), "MatMul gradients of " + shape_str(sa) + " @ " + shape_str(sb) + " (broadcast batch dimensions) are not supported", kHint);
    }
  } else if (n.op == "Gemm") {
    if (n.attrs.get_int("transA", 0) || n.attrs.get_float("alpha", 1.0) != 1.0 || n.attrs.get_float("beta", 1.0) != 1.0)
      throw InputError(forward.where(n), "Gemm gradients need alpha = beta = 1 and no transA", kHint);
    const bool tb = n.attrs.get_int("transB", 0) != 0;
    if (wants(0)) acc(n.inputs[0], tb ? b.node("MatMul", {go, in(1)}) : b.node("MatMul", {go, b.transpose(in(1))}));
    if (wants(1)) acc(n.inputs[1], tb ? b.node("MatMul", {b.transpose(go), in(0)}) : b.node("MatMul", {b.transpose(in(0)), go}));
    if (wants(2)) acc(n.inputs[2], b.unbroadcast(go, shape(n.inputs[2]), shape(n.outputs[0])));
  } else if (n.op == "Add") {
    for (size_t k = 0; k < 2; ++k)
      if (wants(k)) acc(n.inputs[k], b.unbroadcast(go, shape(n.inputs[k]), shape(n.outputs[0])));
  } else if (n.op == "Relu") {
    if (wants(0)) acc(n.inputs[0], b.node("Where", {b.node("Greater", {in(0), b.scalar(0.0)}), go, b.scalar(0.0)}));
  } else if (n.op == "Tanh") {
    const std::string y = n.outputs[0];
    if (wants(0)) acc(n.inputs[0], b.mul(go, b.sub(b.scalar(1.0), b.mul(y, y))));
  } else if (n.op == "Sigmoid") {
    const std::string y = n.outputs[0];
    if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(y, b.sub(b.scalar(1.0), y))));
  } else if (n.op == "Conv") {
    // 1-D or 2-D, group 1, no dilation, explicit pads. dX = ConvTranspose(dY, W) to X's size; dW = the
    // correlation of X and dY: a Conv of X^T ([Ci, N, spatial]) with dY^T ([Co, N, out spatial]) as
    // the kernel, dilated by the forward stride, with the forward pads, cut to the kernel size and
    // transposed back; dB = dY summed over N and the spatial dims.
    const Shape &sx = shape(n.inputs[0]), &sw = shape(n.inputs[1]);
    const size_t d = sx.size() - 2;
    if ((d != 1 && d != 2) || n.attrs.get_int("group", 1) != 1 || n.attrs.get_ints("dilations", std::vector<int64_t>(d, 1)) != std::vector<int64_t>(d, 1) ||
        n.attrs.get_string("auto_pad", "NOTSET") != "NOTSET")
      throw InputError(forward.where(n), "Conv gradients are 1-D or 2-D, group 1, without dilation or auto_pad in this build", kHint);
    const std::vector<int64_t> strides = n.attrs.get_ints("strides", std::vector<int64_t>(d, 1));
    const std::vector<int64_t> pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * d, 0));
    std::vector<int64_t> swap01{1, 0}, spatial, zeros(d, 0), kernel;
    for (size_t i = 0; i < d; ++i) {
      swap01.push_back(static_cast<int64_t>(2 + i));
      spatial.push_back(static_cast<int64_t>(2 + i));
      kernel.push_back(sw[2 + i]);
    }
    if (wants(0)) {
      graph::Attributes a;
      // The forward pads as they are, and output_padding for the rows and columns the forward
      // stride skipped at the end (always < stride): output_shape would re-centre the pads.
      const Shape& so = shape(n.outputs[0]);
      std::vector<int64_t> opad(d);
      for (size_t i = 0; i < d; ++i) opad[i] = sx[2 + i] + pads[i] + pads[d + i] - sw[2 + i] - strides[i] * (so[2 + i] - 1);
      a.set("strides", strides);
      a.set("pads", pads);
      a.set("output_padding", opad);
      acc(n.inputs[0], b.node("ConvTranspose", {go, in(1)}, a));
    }
    if (wants(1)) {
      graph::Attributes a;
      a.set("dilations", strides);
      a.set("pads", pads);
      const std::string full = b.node("Conv", {b.transpose_perm(in(0), swap01), b.transpose_perm(go, swap01)}, a);
      const std::string cut = b.node("Slice", {full, b.ints(zeros), b.ints(kernel), b.ints(spatial)});
      acc(n.inputs[1], b.transpose_perm(cut, swap01));
    }
    std::vector<int64_t> over{0};
    over.insert(over.end(), spatial.begin(), spatial.end());
    if (n.inputs.size() > 2 && !n.inputs[2].empty() && wants(2)) acc(n.inputs[2], b.reduce_sum(go, over, false));
  } else if (n.op == "GlobalAveragePool") {  // dx = dy spread evenly over the spatial positions
    const Shape& si = shape(n.inputs[0]);
    double count = 1;
    for (size_t i = 2; i < si.size(); ++i) count *= static_cast<double>(si[i]);
    if (wants(0)) acc(n.inputs[0], b.mul(b.node("Expand", {go, b.ints(si)}), b.scalar(1.0 / count)));
  } else if (n.op == "Slice") {  // dx: dy at the sliced positions, zeros around (a Concat per sliced axis)
    const Shape& si = shape(n.inputs[0]);
    const int64_t r = static_cast<int64_t>(si.size());
    auto consts = [&](size_t k) {
      if (k >= n.inputs.size() || n.inputs[k].empty()) return std::vector<int64_t>{};
      const auto& v = forward.value(n.inputs[k]);
      if (!v.data) throw InputError(forward.where(n), "Slice gradients need constant starts, ends, axes and steps", kHint);
      return v.data->cast(DType::i64).to_i64();
    };
    const auto starts = n.inputs.size() > 1 ? consts(1) : n.attrs.get_ints("starts");
    auto axes = n.inputs.size() > 3 ? consts(3) : n.attrs.get_ints("axes");
    const auto steps = consts(4);
    if (axes.empty())
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    Shape cur = shape(n.outputs[0]);
    std::string gx = go;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
      if (k < steps.size() && steps[k] != 1) throw InputError(forward.where(n), "Slice gradients with a step other than 1 are not supported", kHint);
      const int64_t dim = si[static_cast<size_t>(a)], len = cur[static_cast<size_t>(a)];
      const int64_t s0 = std::clamp<int64_t>(starts[k] < 0 ? starts[k] + dim : starts[k], 0, dim);
      std::vector<std::string> parts;
      Shape pad = cur;
      if (s0 > 0) parts.push_back(b.zeros((pad[static_cast<size_t>(a)] = s0, pad), 0.0));
      parts.push_back(gx);
      if (dim - s0 - len > 0) parts.push_back(b.zeros((pad[static_cast<size_t>(a)] = dim - s0 - len, pad), 0.0));
      if (parts.size() > 1) gx = b.concat(parts, a);
      cur[static_cast<size_t>(a)] = dim;
    }
    if (wants(0)) acc(n.inputs[0], gx);
  } else if (n.op == "Split" || n.op == "Concat") {
    const int64_t r = static_cast<int64_t>(shape(n.op == "Split" ? n.inputs[0] : n.outputs[0]).size());
    int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += r;
    if (n.op == "Split") {  // dx = the outputs' gradients side by side (zeros for an output without one)
      std::vector<std::string> parts;
      for (const auto& o : n.outputs) parts.push_back(bw.grad.count(o) ? bw.grad.at(o) : b.zeros(shape(o), 0.0));
      if (wants(0)) acc(n.inputs[0], b.concat(parts, axis));
    } else {  // each input's gradient: its slice of dy
      int64_t at = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const int64_t len = shape(n.inputs[k])[static_cast<size_t>(axis)];
        if (wants(k)) acc(n.inputs[k], b.node("Slice", {go, b.ints({at}), b.ints({at + len}), b.ints({axis})}));
        at += len;
      }
    }
  } else if (n.op == "MaxPool") {
    // Non-overlapping 2-D windows (kernel = strides, no pads): dY goes to the positions that hold
    // their window's max -- Y repeated over each window (Reshape, Expand, Reshape) compared with X.
    const Shape &sx = shape(n.inputs[0]), &sy = shape(n.outputs[0]);
    const auto ks = n.attrs.get_ints("kernel_shape");
    const auto st = n.attrs.get_ints("strides", ks);
    const auto pads = n.attrs.get_ints("pads", {0, 0, 0, 0});
    if (sx.size() != 4 || ks.size() != 2 || st != ks || pads != std::vector<int64_t>{0, 0, 0, 0} || n.outputs.size() > 1 ||
        n.attrs.get_int("ceil_mode", 0) || sx[2] != sy[2] * ks[0] || sx[3] != sy[3] * ks[1])
      throw InputError(forward.where(n), "MaxPool gradients need 2-D windows that tile the input (kernel = strides, no pads)", kHint);
    const Shape six{sy[0], sy[1], sy[2], 1, sy[3], 1}, big{sy[0], sy[1], sy[2], ks[0], sy[3], ks[1]};
    auto spread = [&](const std::string& v) {
      return b.reshape(b.node("Expand", {b.reshape(v, six), b.ints(std::vector<int64_t>(big.begin(), big.end()))}), sx);
    };
    if (wants(0)) {
      const std::string at_max = b.node("Equal", {in(0), spread(n.outputs[0])});
      acc(n.inputs[0], b.node("Where", {at_max, spread(go), b.scalar(0.0)}));
    }
  } else if (n.op == "Sub" || n.op == "Mul" || n.op == "Div") {
    const Shape& so = shape(n.outputs[0]);
    if (n.op == "Sub") {
      if (wants(0)) acc(n.inputs[0], b.unbroadcast(go, shape(n.inputs[0]), so));
      if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.node("Neg", {go}), shape(n.inputs[1]), so));
    } else if (n.op == "Mul") {
      if (wants(0)) acc(n.inputs[0], b.unbroadcast(b.mul(go, in(1)), shape(n.inputs[0]), so));
      if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.mul(go, in(0)), shape(n.inputs[1]), so));
    } else {  // d(a / c) = go / c, -go a / c^2
      if (wants(0)) acc(n.inputs[0], b.unbroadcast(b.node("Div", {go, in(1)}), shape(n.inputs[0]), so));
      if (wants(1)) acc(n.inputs[1], b.unbroadcast(b.node("Neg", {b.node("Div", {b.mul(go, n.outputs[0]), in(1)})}), shape(n.inputs[1]), so));
    }
  } else if (n.op == "Neg") {
    if (wants(0)) acc(n.inputs[0], b.node("Neg", {go}));
  } else if (n.op == "Exp") {
    if (wants(0)) acc(n.inputs[0], b.mul(go, n.outputs[0]));
  } else if (n.op == "Log") {
    if (wants(0)) acc(n.inputs[0], b.node("Div", {go, in(0)}));
  } else if (n.op == "Sqrt") {
    if (wants(0)) acc(n.inputs[0], b.node("Div", {go, b.mul(n.outputs[0], b.scalar(2.0))}));
  } else if (n.op == "Pow") {
    const auto& e = forward.value(n.inputs[1]);
    if (!e.data || e.data->numel() != 1) throw InputError(forward.where(n), "Pow gradients need a constant scalar exponent", kHint);
    const double p = e.data->cast(DType::f64).to_f64()[0];
    if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(b.node("Pow", {in(0), b.scalar(p - 1)}), b.scalar(p))));
  } else if (n.op == "Erf") {  // 2 / sqrt(pi) exp(-x^2)
    if (wants(0)) acc(n.inputs[0], b.mul(go, b.mul(b.node("Exp", {b.node("Neg", {b.mul(in(0), in(0))})}), b.scalar(1.1283791670955126))));
  } else if (n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze" || n.op == "Identity") {
    if (wants(0)) acc(n.inputs[0], b.reshape(go, shape(n.inputs[0])));
  } else if (n.op == "Transpose") {
    const size_t r = shape(n.inputs[0]).size();
    std::vector<int64_t> perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
    std::vector<int64_t> inv(r);
    for (size_t i = 0; i < r; ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    if (wants(0)) acc(n.inputs[0], b.transpose_perm(go, inv));
  } else if (n.op == "ReduceSum" || n.op == "ReduceMean") {
    // The gradient spread back over the reduced axes: go with the reduced axes kept as 1, times
    // ones of the input's shape (broadcast), divided by the count for a mean.
    const Shape& si = shape(n.inputs[0]);
    std::vector<int64_t> axes = n.attrs.get_ints("axes");
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      const auto& av = forward.value(n.inputs[1]);
      if (!av.data) throw InputError(forward.where(n), "reduction gradients need constant axes", kHint);
      axes = av.data->cast(DType::i64).to_i64();
    }
    const int64_t r = static_cast<int64_t>(si.size());
    if (axes.empty() && n.attrs.get_int("noop_with_empty_axes", 0))
      throw InputError(forward.where(n), "a reduction with noop_with_empty_axes and no axes is not differentiated", kHint);
    std::vector<bool> red(si.size(), axes.empty());
    for (int64_t a : axes) {
      const int64_t ax = a < 0 ? a + r : a;
      if (ax < 0 || ax >= r) throw InputError(forward.where(n), "axis " + std::to_string(a) + " is out of range for " + shape_str(si), kHint);
      red[static_cast<size_t>(ax)] = true;
    }
    Shape keep = si;
    double count = 1;
    for (size_t i = 0; i < si.size(); ++i)
      if (red[i]) {
        keep[i] = 1;
        count *= static_cast<double>(si[i]);
      }
    graph::Value ones{b.fresh("ones"), dt, si, true, Tensor::from_f32(si, std::vector<float>(static_cast<size_t>(shape_numel(si)), 1.0f)).cast(dt), false};
    const std::string on = ones.name;
    g.values[on] = std::move(ones);
    std::string gx = b.mul(b.reshape(go, keep), on);
    if (n.op == "ReduceMean") gx = b.mul(gx, b.scalar(1.0 / count));
    if (wants(0)) acc(n.inputs[0], gx);
  } else if (n.op == "Softmax") {  // dx = y (go - sum(go y))
    const int64_t r = static_cast<int64_t>(shape(n.inputs[0]).size());
    const int64_t axis = n.attrs.get_int("axis", forward.opset >= 13 ? -1 : 1);
    if (axis != -1 && axis != r - 1) throw InputError(forward.where(n), "Softmax gradients over the last axis only", kHint);
    const std::string y = n.outputs[0];
    if (wants(0)) acc(n.inputs[0], b.mul(y, b.sub(go, b.reduce_sum(b.mul(go, y), {r - 1}, true))));
  } else if (n.op == "LayerNormalization") {
    // Over the last axis: xh = (x - mean) rstd; y = xh scale + bias. d bias = sum go, d scale =
    // sum go xh (over the leading axes); dxh = go scale; dx = rstd (dxh - mean(dxh) - xh mean(dxh xh)).
    const Shape& si = shape(n.inputs[0]);
    const int64_t r = static_cast<int64_t>(si.size());
    const int64_t axis = n.attrs.get_int("axis", -1);
    if (axis != -1 && axis != r - 1) throw InputError(forward.where(n), "LayerNormalization gradients over the last axis only", kHint);
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) throw InputError(forward.where(n), "LayerNormalization with Mean/InvStdDev outputs is not differentiated", kHint);
    const double eps = n.attrs.get_float("epsilon", 1e-5);
    const std::string x = in(0);
    const std::string mu = b.reduce_mean(x, {r - 1}, true);
    const std::string xc = b.sub(x, mu);
    const std::string var = b.reduce_mean(b.mul(xc, xc), {r - 1}, true);
    const std::string rstd = b.node("Div", {b.scalar(1.0), b.node("Sqrt", {b.add(var, b.scalar(eps))})});
    const std::string xh = b.mul(xc, rstd);
    std::vector<int64_t> lead;
    for (int64_t i = 0; i + 1 < r; ++i) lead.push_back(i);
    const bool has_scale = n.inputs.size() > 1 && !n.inputs[1].empty();
    auto over_lead = [&](const std::string& v) { return lead.empty() ? v : b.reduce_sum(v, lead, false); };
    if (n.inputs.size() > 2 && !n.inputs[2].empty() && wants(2)) acc(n.inputs[2], b.reshape(over_lead(go), shape(n.inputs[2])));
    if (has_scale && wants(1)) acc(n.inputs[1], b.reshape(over_lead(b.mul(go, xh)), shape(n.inputs[1])));
    if (wants(0)) {
      const std::string dxh = has_scale ? b.mul(go, in(1)) : go;
      auto mean_last = [&](const std::string& v) { return b.reduce_mean(v, {r - 1}, true); };
      acc(n.inputs[0], b.mul(rstd, b.sub(b.sub(dxh, mean_last(dxh)), b.mul(xh, mean_last(b.mul(dxh, xh))))));
    }
  } else {
    throw InputError(forward.where(n), "no gradient for " + n.op + " in this build", kHint);
  }
}

}  // namespace tessera::passes::detail
