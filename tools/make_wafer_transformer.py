#!/usr/bin/env python3
"""Writes a transformer encoder layer scenario for the wafer as an inline JSON graph.

The graph mirrors what torch.onnx exports for nn.TransformerEncoderLayer (batch_first, post-norm,
GELU, one sequence; see scenarios/models/README.md "transformer_layer"): Transposes that only move
the batch axis, Q/K/V MatMuls with bias Adds, the attention block (Reshape [S, H, dh], Transpose,
Div by sqrt(dh), MatMul, Softmax, MatMul, Transpose, Reshape), the output projection Gemm, the
residual Add, LayerNorm decomposed (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add),
the feed-forward MatMuls with GELU's erf form, residual, LayerNorm. Weights are seeded random
(tessera's `random` initializers), so the file stays small; outputs are checked against tessera's
reference executor. Plain python3, no dependencies; CI never runs it.

    python3 tools/make_wafer_transformer.py --d 64 --heads 4 --ff 128 --seq 64 \\
        --name wafer-transformer-s64 --out tests/cli/data/wafer_transformer_s64.json
"""
import argparse
import json
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ff", type=int, default=3072)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--name", default="wafer-transformer")
    ap.add_argument("--rect", default="", help="mapping.wafer_rect as W,H (default: the compiler's choice)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    d, H, F, S = a.d, a.heads, a.ff, a.seq
    dh = d // H
    init = {}

    def rnd(name, shape, seed, scale):
        init[name] = {"shape": shape, "random": {"seed": seed, "dist": "normal", "scale": scale}}

    def vals(name, shape, values, dtype=None):
        init[name] = {"shape": shape, "values": values}
        if dtype:
            init[name]["dtype"] = dtype

    ws = 0.02 * math.sqrt(768.0 / d) * 1.5  # BERT's 0.02 at d = 768, scaled for other widths
    for i, w in enumerate(["Wq", "Wk", "Wv"]):
        rnd(w, [d, d], 10 + i, ws)
        rnd("b" + w[1], [d], 20 + i, 0.1)
    rnd("Wo", [d, d], 13, ws)  # Gemm transB: [out, in]
    rnd("bo", [d], 23, 0.1)
    rnd("W1", [d, F], 14, ws)
    rnd("b1", [F], 24, 0.1)
    rnd("W2", [F, d], 15, ws * 0.5)
    rnd("b2", [d], 25, 0.1)
    for ln, ph in (("1", 0.0), ("2", 1.0)):
        vals("g" + ln, [d], [round(1.0 + 0.1 * math.sin(0.37 * i + ph), 6) for i in range(d)])
        vals("be" + ln, [d], [round(0.1 * math.cos(0.23 * i + ph), 6) for i in range(d)])
    vals("shape3", [3], [S, H, dh], "int64")
    vals("shape2", [2], [S, d], "int64")
    vals("shape_s1d", [3], [S, 1, d], "int64")
    vals("sqrt_dh", [], [math.sqrt(dh)])
    vals("sqrt2", [], [1.4142135381698608])
    vals("one", [], [1.0])
    vals("half", [], [0.5])
    vals("two", [], [2.0])
    vals("eps", [], [1e-5])
    n = []

    def node(op, ins, outs, **attrs):
        e = {"op": op, "inputs": ins, "outputs": outs}
        if attrs:
            e["attrs"] = attrs
        n.append(e)

    node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])
    for t in "qkv":
        node("MatMul", ["xt", "W" + t], [t + "m"])
        node("Add", ["b" + t, t + "m"], [t])
    node("Reshape", ["q", "shape3"], ["qr"])
    node("Transpose", ["qr"], ["qt"], perm=[1, 0, 2])
    node("Div", ["qt", "sqrt_dh"], ["qs"])
    node("Reshape", ["k", "shape3"], ["kr"])
    node("Transpose", ["kr"], ["kt"], perm=[1, 2, 0])
    node("Reshape", ["v", "shape3"], ["vr"])
    node("Transpose", ["vr"], ["vt"], perm=[1, 0, 2])
    node("MatMul", ["qs", "kt"], ["sc"])
    node("Softmax", ["sc"], ["p"], axis=-1)
    node("MatMul", ["p", "vt"], ["o"])
    node("Transpose", ["o"], ["ot"], perm=[1, 0, 2])
    node("Reshape", ["ot", "shape2"], ["orows"])
    node("Gemm", ["orows", "Wo", "bo"], ["a"], transB=1)
    node("Reshape", ["a", "shape_s1d"], ["ar"])
    node("Transpose", ["ar"], ["at"], perm=[1, 0, 2])
    node("Add", ["x", "at"], ["r1"])

    def layernorm(x, g, b, out, tag):
        node("ReduceMean", [x], [tag + "mu"], axes=[-1])
        node("Sub", [x, tag + "mu"], [tag + "d"])
        node("Pow", [tag + "d", "two"], [tag + "d2"])
        node("ReduceMean", [tag + "d2"], [tag + "v"], axes=[-1])
        node("Add", [tag + "v", "eps"], [tag + "ve"])
        node("Sqrt", [tag + "ve"], [tag + "sd"])
        node("Div", [tag + "d", tag + "sd"], [tag + "n"])
        node("Mul", [tag + "n", g], [tag + "ng"])
        node("Add", [tag + "ng", b], [out])

    layernorm("r1", "g1", "be1", "h1", "ln1_")
    node("MatMul", ["h1", "W1"], ["f1m"])
    node("Add", ["b1", "f1m"], ["f1"])
    node("Div", ["f1", "sqrt2"], ["f1d"])
    node("Erf", ["f1d"], ["f1e"])
    node("Add", ["f1e", "one"], ["f1p"])
    node("Mul", ["f1", "f1p"], ["f1g"])
    node("Mul", ["f1g", "half"], ["g"])
    node("MatMul", ["g", "W2"], ["f2m"])
    node("Add", ["b2", "f2m"], ["f2"])
    node("Add", ["h1", "f2"], ["r2"])
    layernorm("r2", "g2", "be2", "y", "ln2_")
    sc = {
        "schema": "tessera.scenario/1",
        "name": a.name,
        "description": (f"A transformer encoder layer (d {d}, {H} heads of {dh}, ff {F}, GELU, post-norm) on {S} tokens, written by "
                        f"tools/make_wafer_transformer.py in the form PyTorch exports (seeded random weights, {4 * d * d + 2 * d * F} matrix "
                        "parameters), on the wafer with weight streaming; checked against the reference executor."),
        "target": {"kind": "wafer", "preset": "wse2"},
        "model": {"graph": {"inputs": {"x": {"shape": [1, S, d]}}, "outputs": ["y"], "initializers": init, "nodes": n}},
        "inputs": {"x": {"random": {"seed": 7, "dist": "normal", "scale": 1.0}}},
        "mapping": {"mode": "weight_streaming"},
        "precision": {"compute": "fp32"},
        "expect": {"outputs": {"y": {"rtol": 1e-3, "atol": 1e-4}}, "latency_error_pct": 10},
    }
    if a.rect:
        sc["mapping"]["wafer_rect"] = [int(v) for v in a.rect.split(",")]
    with open(a.out, "w") as f:
        f.write(json.dumps(sc, indent=1) + "\n")


if __name__ == "__main__":
    main()
