#!/usr/bin/python3
"""Export tessera's small reference models from PyTorch to ONNX, with reference inputs/outputs.

Writes, for each model NAME in MODELS:
    scenarios/models/NAME.onnx            opset 13, fixed shapes, constant-folded
    scenarios/data/NAME/<input>.npy       float32, C order
    scenarios/data/NAME/<output>.npy      float32, what PyTorch computed for those inputs
    scenarios/reference/NAME.json         a tessera.scenario/1 that runs NAME on the reference
                                          target and checks the outputs

Run with Debian's python3-torch (the `python3` on PATH has no torch):

    /usr/bin/python3 tools/export_models.py [--out DIR] [--only NAME ...] [--stock-mha]

CI never runs this; its outputs are committed. Seeds are fixed and torch runs on one thread,
so a re-run reproduces the committed files byte for byte.

Each export is checked before anything is written: onnx.checker, every op in ALLOWED_OPS (the
tessera reference executor's set), the ONNX graph re-run by the small numpy (float64)
interpreter below and compared with PyTorch's output (onnx 1.12 has no onnx.reference and
onnxruntime is not installed), and the FLOPs / parameter bytes counted on the graph equal the
hand formulas documented in scenarios/models/README.md.
"""
import argparse
import collections
import io
import json
import math
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch import nn

OPSET = 13

ALLOWED_OPS = {
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp",
    "Log", "Erf", "Neg", "Abs", "Reciprocal", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip",
    "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "ReduceMean",
    "ReduceSum", "ReduceMax", "MaxPool", "AveragePool", "GlobalAveragePool", "Transpose",
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Where",
    "Cast", "Identity", "Constant", "Shape", "Expand", "Equal", "Less", "Greater",
}


# ---------------------------------------------------------------------------------------------
# Models


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.flatten(self.features(x)))


class ExportableEncoderLayer(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer whose self-attention gets key and value as distinct tensors.

    With query, key and value the same tensor object, torch 1.13's MultiheadAttention projects
    with one packed [3D, D] linear and then `chunk(3)`s the result, which the exporter writes as
    a Shape -> Gather -> int64 Add/Div/Mul -> Slice subgraph computed at run time (integer
    division included). With distinct (but equal) key/value tensors it chunks the packed
    *weight* instead, which constant folding turns into three [D, D] initializers: the graph
    is then plain float MatMul/Add with no int64 arithmetic. The numerics are the same
    computation; the reference outputs still come from the stock layer.
    """

    def _sa_block(self, x, attn_mask, key_padding_mask):
        x = self.self_attn(x, x.detach(), x.detach(), attn_mask=attn_mask,
                           key_padding_mask=key_padding_mask, need_weights=False)[0]
        return self.dropout1(x)


def encoder_layer_pair(d_model, nhead, dim_feedforward, activation, stock_mha):
    kwargs = dict(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward, dropout=0.0,
                  batch_first=True, activation=activation, norm_first=False)
    stock = nn.TransformerEncoderLayer(**kwargs)
    # Default init leaves the attention biases at 0 and LayerNorm at weight 1 / bias 0: an
    # executor that ignored them would still pass, and the exporter even merges identical
    # initializers into Identity nodes. Add noise to every 1-D parameter.
    with torch.no_grad():
        for p in stock.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    if stock_mha:
        return stock, stock
    exportable = ExportableEncoderLayer(**kwargs)
    exportable.load_state_dict(stock.state_dict())
    return stock, exportable


def transformer_spec(name, seed, d, h, f, s, activation, stock_mha):
    torch.manual_seed(seed)
    stock, exportable = encoder_layer_pair(d, h, f, activation, stock_mha)
    return dict(name=name, seed=seed, reference=stock, export=exportable,
                inputs={"x": (1, s, d)}, outputs=["y"],
                hand=lambda: hand_count_encoder(1, s, d, h, f))


def model_specs(stock_mha):
    specs = []
    torch.manual_seed(1)
    m = MLP()
    specs.append(dict(name="mlp", seed=1, reference=m, export=m, inputs={"x": (8, 64)},
                      outputs=["y"], hand=lambda: hand_count_mlp(8, [64, 128, 128, 10])))
    torch.manual_seed(2)
    m = LeNet5()
    specs.append(dict(name="lenet", seed=2, reference=m, export=m, inputs={"x": (2, 1, 28, 28)},
                      outputs=["y"], hand=lambda: hand_count_lenet(2)))
    # gelu exports as Div, Erf, Add, Mul, Mul (exact erf form), all in ALLOWED_OPS; it keeps
    # transformer_layer the same graph as bert_layer at a 1/300 of the cost.
    specs.append(transformer_spec("transformer_layer", 3, 64, 4, 128, 16, "gelu", stock_mha))
    specs.append(transformer_spec("bert_layer", 4, 768, 12, 3072, 128, "gelu", stock_mha))
    return specs


# Tolerances (rtol, atol) written into the scenarios: |got - want| <= atol + rtol * |want|.
# export_one() requires PyTorch's fp32 output to use at most HEADROOM of them against a float64
# evaluation of the ONNX graph, so an executor as accurate as PyTorch passes with a margin.
# bert_layer: |y| <= ~4.9 (LayerNorm output) and its fp32 error is ~2e-6 absolute, uniform in
# |y|; atol 1e-5 covers the outputs near 0 (worst ~0.12 of the tolerance), so 1e-4 is not
# needed. See scenarios/models/README.md.
TOLERANCES = {
    "mlp": (1e-4, 1e-5),
    "lenet": (1e-4, 1e-5),
    "transformer_layer": (1e-4, 1e-5),
    "bert_layer": (1e-4, 1e-5),
}
HEADROOM = 0.25

DESCRIPTIONS = {
    "mlp": "MLP 64-128-128-10 (ReLU), batch 8, exported from PyTorch; outputs checked against "
           "PyTorch's.",
    "lenet": "LeNet-5-style CNN on 2x1x28x28 (Conv/ReLU/MaxPool x2, Linear 400-120-84-10), "
             "exported from PyTorch; outputs checked against PyTorch's.",
    "transformer_layer": "torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, "
                         "dim_feedforward=128, gelu, post-norm) on [1,16,64]; outputs checked "
                         "against PyTorch's.",
    "bert_layer": "BERT-base encoder layer: torch.nn.TransformerEncoderLayer(d_model=768, "
                  "nhead=12, dim_feedforward=3072, gelu, post-norm) on [1,128,768]; outputs "
                  "checked against PyTorch's.",
}


# ---------------------------------------------------------------------------------------------
# Hand counts (the formulas of scenarios/models/README.md). Convention:
#   MatMul / Gemm: 2*M*K*N (a multiply-add is 2); Gemm's bias C adds 1 per output element.
#   Conv: 2*(Cin/group)*kH*kW per output element, +1 per output element for the bias.
#   Elementwise ops (Add Sub Mul Div Pow Sqrt Erf Relu ...): 1 per output element.
#   ReduceMean: 1 per input element.   Softmax: 5 per element (max, sub, exp, sum, div).
#   MaxPool: kH*kW per output element.
#   Layout/shape ops (Transpose Reshape Flatten Constant Identity ...): 0.
# Parameter bytes: the float initializers (4 bytes each); Constant nodes are counted apart.


def add(counts, op, flops):
    counts[op] = counts.get(op, 0) + flops


def hand_count_mlp(b, widths):
    c, params = {}, 0
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        add(c, "Gemm", 2 * b * k * n + b * n)
        if i < len(widths) - 2:
            add(c, "Relu", b * n)
        params += k * n + n
    return c, 4 * params


def hand_count_lenet(b):
    c, params = {}, 0
    # conv1 1->6 5x5 pad 2: 28x28 out; pool -> 14x14; conv2 6->16 5x5: 10x10; pool -> 5x5
    for cin, cout, hw in ((1, 6, 28), (6, 16, 10)):
        out = b * cout * hw * hw
        add(c, "Conv", 2 * cin * 25 * out + out)
        add(c, "Relu", out)
        add(c, "MaxPool", 4 * (out // 4))
        params += cout * cin * 25 + cout
    for i, (k, n) in enumerate(((400, 120), (120, 84), (84, 10))):
        add(c, "Gemm", 2 * b * k * n + b * n)
        if i < 2:
            add(c, "Relu", b * n)
        params += k * n + n
    return c, 4 * params


def hand_count_encoder(b, s, d, h, f):
    """torch TransformerEncoderLayer (post-norm, gelu) as exported at opset 13."""
    t, dh = b * s, d // h
    c = {}
    # q, k, v projections: MatMul + bias Add each; q scaled by 1/sqrt(dh) (a Div)
    add(c, "MatMul", 3 * 2 * t * d * d)
    add(c, "Add", 3 * t * d)
    add(c, "Div", t * d)
    # scores = q k^T per (batch, head), softmax, context = p v
    add(c, "MatMul", b * h * 2 * s * dh * s)
    add(c, "Softmax", 5 * b * h * s * s)
    add(c, "MatMul", b * h * 2 * s * s * dh)
    # out projection: Gemm with bias on [t, d]
    add(c, "Gemm", 2 * t * d * d + t * d)
    for _ in range(2):  # residual Add + LayerNorm, twice (LayerNorm is decomposed at opset 13)
        add(c, "Add", t * d)                 # residual
        add(c, "ReduceMean", t * d)          # mean
        add(c, "Sub", t * d)                 # x - mean
        add(c, "Pow", t * d)                 # (x - mean)^2
        add(c, "ReduceMean", t * d)          # variance
        add(c, "Add", t)                     # + eps
        add(c, "Sqrt", t)
        add(c, "Div", t * d)                 # / sqrt(var + eps)
        add(c, "Mul", t * d)                 # * gamma
        add(c, "Add", t * d)                 # + beta
    # feed-forward: MatMul + bias, gelu = x * (erf(x / sqrt2) + 1) * 0.5, MatMul + bias
    add(c, "MatMul", 2 * t * d * f)
    add(c, "Add", t * f)
    add(c, "Div", t * f)
    add(c, "Erf", t * f)
    add(c, "Add", t * f)
    add(c, "Mul", 2 * t * f)
    add(c, "MatMul", 2 * t * f * d)
    add(c, "Add", t * d)
    params = (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    return c, 4 * params


# ---------------------------------------------------------------------------------------------
# A small float64 numpy interpreter for the exported graphs (only to check the export).


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pairs(x, n):
    return [x] * n if isinstance(x, int) else list(x)


def conv2d(x, w, b, a):
    group = a.get("group", 1)
    kh, kw = w.shape[2:]
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    assert a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, cin, hp, wp = x.shape
    ho = (hp - dh * (kh - 1) - 1) // sh + 1
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    cg, og = cin // group, w.shape[0] // group
    out = np.zeros((n, w.shape[0], ho, wo))
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        cols = np.stack([xs[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                            j * dw:j * dw + sw * (wo - 1) + 1:sw]
                         for i in range(kh) for j in range(kw)], axis=2)  # n,cg,kh*kw,ho,wo
        wg = w[g * og:(g + 1) * og].reshape(og, cg, kh * kw)
        out[:, g * og:(g + 1) * og] = np.einsum("nckhw,ock->nohw", cols, wg)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def maxpool2d(x, a):
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    assert a.get("ceil_mode", 0) == 0 and a.get("dilations", [1, 1]) == [1, 1]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    ho = (x.shape[2] - kh) // sh + 1
    wo = (x.shape[3] - kw) // sw + 1
    wins = [x[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]
    return np.max(np.stack(wins), axis=0)


def int_div(p, q):
    if np.issubdtype(p.dtype, np.integer) and np.issubdtype(q.dtype, np.integer):
        return (np.abs(p) // np.abs(q)) * np.sign(p) * np.sign(q)  # ONNX: truncation
    return p / q


_erf = np.vectorize(math.erf, otypes=[np.float64])


def run_node(node, ins, a):
    op = node.op_type
    if op == "Constant":
        return onnx.numpy_helper.to_array(a["value"])
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": int_div,
              "Pow": np.power}[op]
        return fn(ins[0], ins[1])
    unary = {"Relu": lambda v: np.maximum(v, 0), "Sqrt": np.sqrt, "Erf": _erf, "Exp": np.exp,
             "Tanh": np.tanh, "Neg": np.negative, "Abs": np.abs, "Log": np.log,
             "Reciprocal": lambda v: 1 / v, "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
             "Identity": lambda v: v}
    if op in unary:
        return unary[op](ins[0])
    if op == "MatMul":
        return np.matmul(ins[0], ins[1])
    if op == "Gemm":
        A = ins[0].T if a.get("transA", 0) else ins[0]
        B = ins[1].T if a.get("transB", 0) else ins[1]
        y = a.get("alpha", 1.0) * (A @ B)
        if len(ins) > 2 and ins[2] is not None:
            y = y + a.get("beta", 1.0) * ins[2]
        return y
    if op == "Softmax":
        ax = a.get("axis", -1)
        e = np.exp(ins[0] - ins[0].max(axis=ax, keepdims=True))
        return e / e.sum(axis=ax, keepdims=True)
    if op == "ReduceMean":
        return ins[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
    if op == "Transpose":
        return np.transpose(ins[0], a.get("perm"))
    if op == "Reshape":
        shape = [d if d != 0 else ins[0].shape[i] for i, d in enumerate(ins[1].tolist())]
        return ins[0].reshape(shape)
    if op == "Flatten":
        ax = a.get("axis", 1)
        return ins[0].reshape(int(np.prod(ins[0].shape[:ax])), -1)
    if op == "Conv":
        return conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a)
    if op == "MaxPool":
        return maxpool2d(ins[0], a)
    if op == "Shape":
        return np.array(ins[0].shape, dtype=np.int64)
    if op == "Gather":
        return np.take(ins[0], ins[1], axis=a.get("axis", 0))
    if op == "Unsqueeze":
        return np.expand_dims(ins[0], tuple(ins[1].tolist()))
    if op == "Squeeze":
        return np.squeeze(ins[0], tuple(ins[1].tolist()) if len(ins) > 1 else None)
    if op == "Concat":
        return np.concatenate(ins, axis=a["axis"])
    if op == "Slice":
        data, starts, ends = ins[0], ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 else np.arange(len(starts))
        steps = ins[4] if len(ins) > 4 else np.ones(len(starts), dtype=np.int64)
        idx = [slice(None)] * data.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            idx[int(ax)] = slice(int(s), int(e), int(st))
        return data[tuple(idx)]
    raise NotImplementedError(f"numpy check interpreter: no {op} (node {node.name})")


def node_flops(node, ins, out, a):
    """FLOPs of one node under the README's convention; 0 for integer (shape) arithmetic."""
    op = node.op_type
    if not np.issubdtype(out.dtype, np.floating):
        return 0
    if op == "MatMul":
        k = ins[0].shape[-1]
        return 2 * out.size * k
    if op == "Gemm":
        k = ins[0].shape[0] if a.get("transA", 0) else ins[0].shape[1]
        return 2 * out.size * k + (out.size if len(ins) > 2 else 0)
    if op == "Conv":
        w = ins[1]
        per_out = 2 * int(np.prod(w.shape[1:]))
        return out.size * per_out + (out.size if len(ins) > 2 else 0)
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Relu", "Exp", "Tanh", "Neg",
              "Abs", "Log", "Reciprocal", "Sigmoid"):
        return out.size
    if op == "ReduceMean":
        return ins[0].size
    if op == "Softmax":
        return 5 * out.size
    if op == "MaxPool":
        return out.size * int(np.prod(a["kernel_shape"]))
    return 0


def run_graph(model, feeds):
    g = model.graph
    env = {i.name: onnx.numpy_helper.to_array(i) for i in g.initializer}
    env = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in env.items()}
    env.update({k: v.astype(np.float64) for k, v in feeds.items()})
    flops = collections.Counter()
    for node in g.node:
        a = attrs_of(node)
        ins = [env[n] if n else None for n in node.input]
        out = np.asarray(run_node(node, ins, a))
        if out.dtype == np.float32:
            out = out.astype(np.float64)
        assert len(node.output) == 1, node.op_type
        env[node.output[0]] = out
        flops[node.op_type] += node_flops(node, ins, out, a)
    return {o.name: env[o.name] for o in g.output}, flops


def graph_bytes(model):
    """(float initializer bytes, Constant-node bytes, other initializer bytes)."""
    fl = other = 0
    for i in model.graph.initializer:
        arr = onnx.numpy_helper.to_array(i)
        if arr.dtype == np.float32:
            fl += arr.nbytes
        else:
            other += arr.nbytes
    const = sum(onnx.numpy_helper.to_array(attrs_of(n)["value"]).nbytes
                for n in model.graph.node if n.op_type == "Constant")
    return fl, const, other


# ---------------------------------------------------------------------------------------------


def err_stats(got, want, rtol, atol):
    diff = np.abs(got - want)
    worst = float(np.max(diff / (atol + rtol * np.abs(want))))  # <= 1 passes
    return float(diff.max()), worst


def export_one(spec, root):
    name = spec["name"]
    ref_model, exp_model = spec["reference"].eval(), spec["export"].eval()
    rs = np.random.RandomState(1000 + spec["seed"])
    feeds = {k: rs.standard_normal(shape).astype(np.float32) for k, shape in
             spec["inputs"].items()}
    args = tuple(torch.from_numpy(v) for v in feeds.values())

    # PyTorch's output, from the stock module with grad enabled (the standard, non-fused path).
    ys = ref_model(*args)
    ys = ys if isinstance(ys, tuple) else (ys,)
    want = {o: y.detach().numpy().astype(np.float32) for o, y in zip(spec["outputs"], ys)}
    y_exp = exp_model(*args)
    y_exp = y_exp if isinstance(y_exp, tuple) else (y_exp,)
    for o, y in zip(spec["outputs"], y_exp):
        if np.abs(y.detach().numpy() - want[o]).max() > 1e-6:
            raise SystemExit(f"{name}: the exported module disagrees with the stock one on {o}")
    if isinstance(ref_model, nn.TransformerEncoderLayer):
        with torch.no_grad():  # eval + no_grad: torch's fused _transformer_encoder_layer_fwd
            y_fast = ref_model(*args)
        print(f"  torch: exported module vs stock max |diff| "
              f"{np.abs(y_exp[0].detach().numpy() - want[spec['outputs'][0]]).max():.3g}; "
              f"fused fast path vs stock {np.abs(y_fast.numpy() - want['y']).max():.3g}")

    buf = io.BytesIO()
    torch.onnx.export(exp_model, args, buf, opset_version=OPSET, do_constant_folding=True,
                      input_names=list(spec["inputs"]), output_names=spec["outputs"],
                      export_params=True, training=torch.onnx.TrainingMode.EVAL)
    data = buf.getvalue()
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)  # full_check: strict shape inference too

    hist = collections.Counter(n.op_type for n in model.graph.node)
    print("  ops: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items())))
    bad = sorted(set(hist) - ALLOWED_OPS)
    if bad:
        raise SystemExit(f"{name}: ops outside the reference executor's set: {bad}")
    for v in list(model.graph.input) + list(model.graph.output):
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in v.type.tensor_type.shape.dim]
        if not all(isinstance(d, int) and d > 0 for d in dims):
            raise SystemExit(f"{name}: {v.name} has a non-fixed shape {dims}")
        print(f"  {'input ' if v in model.graph.input else 'output'} {v.name}: "
              f"float32 {dims}")

    got, flops = run_graph(model, feeds)
    rtol, atol = TOLERANCES[name]
    for o in spec["outputs"]:
        y64 = got[o]
        max_abs, worst = err_stats(want[o], y64, rtol, atol)
        print(f"  {o}: |y| max {np.abs(want[o]).max():.4g}, mean {np.abs(want[o]).mean():.4g}; "
              f"torch fp32 vs ONNX graph in float64: max abs err {max_abs:.3g}, "
              f"worst err/(atol+rtol*|y|) = {worst:.3g} (rtol {rtol:g}, atol {atol:g})")
        if worst > HEADROOM:
            raise SystemExit(f"{name}: ONNX graph disagrees with PyTorch on {o}")

    hand_flops, hand_param_bytes = spec["hand"]()
    fl_bytes, const_bytes, other_bytes = graph_bytes(model)
    graph_flops = {k: v for k, v in flops.items() if v}
    print(f"  parameters: {fl_bytes // 4} ({fl_bytes} bytes fp32 initializers); Constant nodes "
          f"{const_bytes} bytes; other initializers {other_bytes} bytes")
    print(f"  FLOPs: {sum(graph_flops.values())} = " +
          ", ".join(f"{k} {v}" for k, v in sorted(graph_flops.items())))
    if graph_flops != hand_flops or fl_bytes != hand_param_bytes:
        raise SystemExit(f"{name}: graph count disagrees with the hand formulas:\n"
                         f"  graph {graph_flops} {fl_bytes}\n  hand  {hand_flops} "
                         f"{hand_param_bytes}")

    write(os.path.join(root, "scenarios", "models", name + ".onnx"), data)
    for k, v in list(feeds.items()) + list(want.items()):
        b = io.BytesIO()
        np.save(b, np.ascontiguousarray(v, dtype=np.float32))
        write(os.path.join(root, "scenarios", "data", name, k + ".npy"), b.getvalue())
    scenario = {
        "schema": "tessera.scenario/1",
        "name": name.replace("_", "-") + "-reference",
        "description": DESCRIPTIONS[name] + " Generated by tools/export_models.py.",
        "target": {"kind": "reference"},
        "model": {"onnx": f"../models/{name}.onnx"},
        "inputs": {k: {"file": f"../data/{name}/{k}.npy"} for k in feeds},
        "expect": {"outputs": {o: {"file": f"../data/{name}/{o}.npy", "rtol": rtol, "atol": atol}
                               for o in spec["outputs"]}},
    }
    text = json.dumps(scenario, indent=2) + "\n"
    write(os.path.join(root, "scenarios", "reference", name + ".json"), text.encode())


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    print(f"  wrote {path} ({len(data)} bytes)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   help="repository root to write under (default: this checkout)")
    p.add_argument("--only", nargs="*", help="export only these models")
    p.add_argument("--stock-mha", action="store_true",
                   help="export the unmodified TransformerEncoderLayer (int64 Shape/Slice "
                        "subgraph; its outputs are not the committed ones)")
    args = p.parse_args()
    if args.stock_mha and os.path.realpath(args.out) == os.path.realpath(p.get_default("out")):
        p.error("--stock-mha would overwrite the committed files: give --out DIR")
    torch.set_num_threads(1)  # a fixed reduction order: reproducible outputs
    for spec in model_specs(args.stock_mha):
        if args.only and spec["name"] not in args.only:
            continue
        print(f"{spec['name']}:")
        export_one(spec, args.out)


if __name__ == "__main__":
    sys.exit(main())
