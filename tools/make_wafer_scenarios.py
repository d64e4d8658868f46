#!/usr/bin/env python3
"""Writes the wafer compiler's scenario files that use inline graphs with seeded random weights:
the GEMV / GEMM scaling series (scenarios/wafer/scaling/, and the large ones in scenarios/wafer/large/) and the deep MLP whose weights do not fit
on a small fabric (scenarios/wafer/deep_mlp/). Standard library only; the files are committed, CI
does not run this. Usage: python3 tools/make_wafer_scenarios.py [OUT_ROOT]"""
import json
import math
import os
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")


def write(rel, obj):
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    print("wrote", path)


def dense_graph(batch, sizes, relu_all_but_last=True, bias=True):
    """x [batch, sizes[0]] through Gemm layers sizes[i] -> sizes[i+1] (weights N(0, 1/sqrt(K)))."""
    inits, nodes = {}, []
    cur = "x"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        w, b, y = f"w{i}", f"b{i}", f"h{i}"
        inits[w] = {"shape": [k, n], "random": {"seed": 100 + i, "dist": "normal", "scale": 1.0 / math.sqrt(k)}}
        ins = [cur, w]
        if bias:
            inits[b] = {"shape": [n], "random": {"seed": 200 + i, "dist": "uniform", "scale": 0.1}}
            ins.append(b)
        nodes.append({"name": f"fc{i}", "op": "Gemm", "inputs": ins, "outputs": [y]})
        cur = y
        if relu_all_but_last and i + 2 < len(sizes):
            nodes.append({"name": f"relu{i}", "op": "Relu", "inputs": [cur], "outputs": [f"r{i}"]})
            cur = f"r{i}"
    nodes[-1]["outputs"] = ["y"]
    return {"inputs": {"x": {"shape": [batch, sizes[0]]}}, "outputs": ["y"], "initializers": inits, "nodes": nodes}


def scaling(kind, batch, n, side, block, ci):
    name = f"{kind}_{n}_{side}x{side}"
    desc = (f"{'GEMV' if batch == 1 else 'GEMM'} scaling series: y[{batch},{n}] = x[{batch},{n}] W[{n},{n}] (fp32, random weights) on a "
            f"{side}x{side} fabric in pipelined mode, {block}x{block} weight blocks per PE (W resident, x multicast down the columns, "
            f"partial sums reduced along the rows). Prints cycles and effective TFLOP/s (2*B*K*N over the simulated time)."
            + ("" if ci else " Large (minutes, GBs of host memory): run by hand; CI runs scenarios/wafer/scaling."))
    write(f"scenarios/wafer/{'scaling' if ci else 'large'}/{name}.json", {
        "schema": "tessera.scenario/1",
        "name": f"wafer-{name.replace('_', '-')}",
        "description": desc,
        "target": {"kind": "wafer", "preset": "wse2", "params": {"fabric.width": side, "fabric.height": side}},
        "model": {"graph": {"inputs": {"x": {"shape": [batch, n]}}, "outputs": ["y"],
                            "initializers": {"w": {"shape": [n, n], "random": {"seed": 7, "dist": "normal", "scale": 1.0 / math.sqrt(n)}}},
                            "nodes": [{"name": "matmul", "op": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]}]}},
        "inputs": {"x": {"random": {"seed": 1, "dist": "normal", "scale": 1.0}}},
        "precision": {"compute": "fp32"},
        "mapping": {"mode": "pipelined", "wafer_block": block},
        "run": {"max_time": "1s", "host_memory": "20GiB"},
        "expect": {"outputs": {"y": {"rtol": 1e-4, "atol": 1e-4}}, "latency_error_pct": 10},
    })


def main():
    # GEMV: 4096 on 64x64 up to 16384 on 512x512 (the series); GEMM: batch 64.
    scaling("gemv", 1, 4096, 64, 64, True)
    scaling("gemv", 1, 8192, 128, 64, False)
    scaling("gemv", 1, 16384, 256, 64, False)
    scaling("gemv", 1, 16384, 512, 32, False)
    scaling("gemm", 16, 1024, 32, 32, True)
    scaling("gemm", 64, 4096, 128, 32, False)
    # A deep MLP whose 3 MB of weights exceed the 2.9 MB of SRAM of an 8x8 fabric: pipelined mode
    # refuses it (tests/cli: wafer_deep_mlp_pipelined_does_not_fit), weight streaming runs it.
    write("scenarios/wafer/deep_mlp/deep_mlp_streaming.json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-deep-mlp-streaming",
        "description": "A 4-layer MLP 512-512-512-512-256 (ReLU, batch 4, random weights, 3.1 MB fp32) on an 8x8 fabric (2.8 MB of SRAM data "
                       "area): too large for pipelined mode, so every layer runs in turn on the 8x8 rectangle with its weights streamed "
                       "from MemoryX through SwarmX (64x64 blocks per PE). The report's weight_streaming section has the MemoryX/SwarmX "
                       "traffic and, per layer, when the weights were in place and how long the layer waited for them.",
        "target": {"kind": "wafer", "preset": "wse2", "params": {"fabric.width": 8, "fabric.height": 8}},
        "model": {"graph": dense_graph(4, [512, 512, 512, 512, 256])},
        "inputs": {"x": {"random": {"seed": 3, "dist": "normal", "scale": 1.0}}},
        "precision": {"compute": "fp32"},
        "mapping": {"mode": "weight_streaming"},
        "expect": {"outputs": {"y": {"rtol": 1e-4, "atol": 1e-4}}, "latency_error_pct": 10},
    })


if __name__ == "__main__":
    main()
