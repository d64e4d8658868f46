#!/usr/bin/python3
"""Scenarios for the published BERT rows of neuroncore.md [BENCH] that have no committed ONNX.

BERT-large (batch 1, seq 128, p50 2.669 ms on trn1.2xlarge: 24 layers of d 1024, 16 heads, ff 4096)
would need a 50 MB ONNX file per layer. Instead this script exports the layer from PyTorch the way
scenarios/models/bert_layer.onnx was exported (tools/export_models.py: the exportable
nn.TransformerEncoderLayer, opset 13, constant folding, fixed shapes) and writes the exported graph
itself -- every node, attribute and constant as PyTorch emitted it -- as an inline scenario graph,
with each weight and bias replaced by seeded random values of the same shape and standard deviation
(normal, zero mean: a LayerNorm scale near 1 becomes one near 0, which changes no timing): the compiler sees exactly the stock export's structure, the file is small, and the
outputs are checked against the reference executor (not PyTorch: the weights differ).

Shape constants, integer tensors and tensors of one repeated value (LayerNorm's initial scale and
bias) keep their values.

Needs Debian's python3-torch (the `python3` on PATH has no torch); CI runs the scenarios it writes,
not this script:

    /usr/bin/python3 tools/export_bert_rows.py
"""
import io
import json
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402  (same directory)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
          onnx.TensorProto.BOOL: "bool", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.DOUBLE: "fp64"}
KEEP = 16  # float tensors up to this many elements keep their values


def attribute(a):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    if isinstance(v, (int, float, str)):
        return v
    raise SystemExit(f"attribute {a.name}: type {a.type} has no scenario form")


def tensor_entry(t, seed):
    arr = numpy_helper.to_array(t)
    e = {"shape": list(arr.shape)}
    if t.data_type != onnx.TensorProto.FLOAT:
        e["dtype"] = DTYPES[t.data_type]
    std = float(np.std(arr.astype(np.float64))) if t.data_type == onnx.TensorProto.FLOAT else 0.0
    if arr.size <= KEEP or std == 0.0:
        # (float32 values by their shortest round-tripping decimal)
        e["values"] = [float(str(np.float32(x))) if t.data_type == onnx.TensorProto.FLOAT else x.item() for x in arr.reshape(-1)]
    else:
        e["random"] = {"seed": seed, "dist": "normal", "scale": float(str(np.float32(std)))}
    return e


def graph_of(model):
    g = model.graph
    inits = {}
    for i, t in enumerate(g.initializer):
        inits[t.name] = tensor_entry(t, 100 + i)
    known = set(inits)
    inputs = {}
    for v in g.input:
        if v.name in known:
            continue
        tt = v.type.tensor_type
        inputs[v.name] = {"shape": [d.dim_value for d in tt.shape.dim]}
        if tt.elem_type != onnx.TensorProto.FLOAT:
            inputs[v.name]["dtype"] = DTYPES[tt.elem_type]
    nodes = []
    for n in g.node:
        if n.op_type == "Constant":  # its value becomes an initializer
            (a,) = n.attribute
            if a.name != "value":
                raise SystemExit(f"Constant {n.name}: attribute {a.name} has no scenario form")
            inits[n.output[0]] = tensor_entry(a.t, 100 + len(inits))
            continue
        node = {"name": n.name, "op": n.op_type, "inputs": list(n.input), "outputs": list(n.output)}
        attrs = {a.name: attribute(a) for a in n.attribute}
        if attrs:
            node["attrs"] = attrs
        nodes.append(node)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return {"opset": opset, "inputs": inputs, "outputs": [o.name for o in g.output], "initializers": inits, "nodes": nodes}


def export_layer(d, heads, ff, seq):
    torch.manual_seed(4)
    _, exportable = export_models.encoder_layer_pair(d, heads, ff, "gelu", False)
    exportable.eval()
    buf = io.BytesIO()
    torch.onnx.export(exportable, (torch.zeros(1, seq, d),), buf, opset_version=export_models.OPSET, do_constant_folding=True,
                      input_names=["x"], output_names=["y"], export_params=True, training=torch.onnx.TrainingMode.EVAL)
    return onnx.load_from_string(buf.getvalue())


def main():
    model = export_layer(1024, 16, 4096, 128)
    sc = {
        "schema": "tessera.scenario/1",
        "name": "bert-large-layer-neuroncore",
        "description": "A BERT-large encoder layer (batch 1, seq 128, d 1024, 16 heads, ff 4096, gelu): PyTorch's export "
                       "(tools/export_bert_rows.py, as scenarios/models/bert_layer.onnx for BERT-base) written as an inline "
                       "graph with seeded random weights of the exported ones' shapes and spreads, compiled for one trn1 "
                       "NeuronCore in bf16, checked against the reference executor. The published figure is the whole "
                       "24-layer BERT-large p50 on trn1 divided by 24.",
        "target": {"kind": "neuroncore", "preset": "trn1"},
        "model": {"graph": graph_of(model)},
        "inputs": {"x": {"random": {"seed": 1}}},
        "precision": {"compute": "bf16"},
        "expect": {
            "outputs": {"y": {"rtol": 5e-2, "atol": 5e-2}},
            "latency_error_pct": 10,
            "reference_latency": {"value": "111.21us",
                                  "source": "neuroncore.md [BENCH]: BERT-large batch 1 seq 128 p50 2.669 ms on trn1.2xlarge, / 24 layers"},
        },
    }
    path = os.path.join(ROOT, "scenarios", "neuroncore", "bert_large_layer.json")
    with open(path, "w") as f:
        json.dump(sc, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)}: {len(sc['model']['graph']['nodes'])} nodes")


if __name__ == "__main__":
    main()
