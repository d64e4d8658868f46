#!/usr/bin/python3
"""BERT-base encoder layer batch sweep on the simulated trn1 NeuronCore.

Exports the layer of scenarios/models/bert_layer.onnx (the same weights: seed 4, the same
exportable nn.TransformerEncoderLayer, opset 13, fixed shapes) at each batch size into a scratch
directory, writes a scenario per batch (bf16, random inputs, outputs checked against the
reference executor), runs `tessera run` on each and prints a Markdown table: simulated latency,
per sequence, sequences per second, tensor-engine utilisation.

With --layers N (N > 1) it exports a stack of N such layers (the first with the scenario's weights,
the others seeded 5, 6, ...) at batch 1 and prints the per-layer time of the stack, the time of
N layers less the time of one divided by N - 1: the steady state, where a layer's first weights
load while the layer before it computes (a single-layer scenario has nothing to hide them behind).

Needs Debian's python3-torch (the `python3` on PATH has no torch) and a built tessera:

    /usr/bin/python3 tools/bert_batch_sweep.py [--batches 1 2 4 8] [--layers N] [--work DIR]

CI does not run it (the exports are 28 MB each); docs/neuroncore-compiler.md holds its table.
"""
import argparse
import io
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402  (same directory)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(batch, path, layers=1):
    stack = []
    for i in range(layers):
        torch.manual_seed(4 + i)  # export_models.model_specs: transformer_spec("bert_layer", 4, ...)
        _, exportable = export_models.encoder_layer_pair(768, 12, 3072, "gelu", False)
        stack.append(exportable.eval())
    exportable = stack[0] if layers == 1 else torch.nn.Sequential(*stack).eval()
    x = torch.zeros(batch, 128, 768)
    buf = io.BytesIO()
    torch.onnx.export(exportable, (x,), buf, opset_version=export_models.OPSET, do_constant_folding=True,
                      input_names=["x"], output_names=["y"], export_params=True,
                      training=torch.onnx.TrainingMode.EVAL)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def scenario(name, description, onnx_path):
    """trn1, bf16, random inputs, the output checked against the reference executor."""
    return {"schema": "tessera.scenario/1", "name": name, "description": description,
            "target": {"kind": "neuroncore", "preset": "trn1"},
            "model": {"onnx": onnx_path},
            "inputs": {"x": {"random": {"seed": 1}}},
            "precision": {"compute": "bf16"},
            "expect": {"outputs": {"y": {"rtol": 5e-2, "atol": 5e-2}}}}


def run(args, scen, tag):
    sp = os.path.join(args.work, f"bert_{tag}.json")
    with open(sp, "w") as f:
        json.dump(scen, f, indent=1)
    out = os.path.join(args.work, f"out_{tag}")
    r = subprocess.run([args.tessera, "run", sp, "--out", out, "-q"], capture_output=True, text=True,
                       env=dict(os.environ, TESSERA_HOME=ROOT))
    if r.returncode != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
        raise SystemExit(f"{tag}: tessera run failed ({r.returncode})")
    return json.load(open(os.path.join(out, "report.json")))


def stack(args):
    sims = {}
    for n in (1, args.layers):
        onnx_path = os.path.join(args.work, f"bert_l{n}.onnx")
        if not os.path.exists(onnx_path):
            export(1, onnx_path, n)
        rep = run(args, scenario(f"bert-layers-{n}", f"{n} BERT-base encoder layers, batch 1, seq 128, bf16 "
                                 "(tools/bert_batch_sweep.py --layers)", onnx_path), f"l{n}")
        sims[n] = rep["latency"]["simulated_s"]
        print(f"{n} layer(s): {sims[n] * 1e6:.1f} us, outputs checked", file=sys.stderr)
    n = args.layers
    per = (sims[n] - sims[1]) / (n - 1)
    print(f"| layers | simulated | per layer | steady state per layer ((T{n} - T1) / {n - 1}) |")
    print("| --- | --- | --- | --- |")
    print(f"| 1 | {sims[1] * 1e6:.1f} us | {sims[1] * 1e6:.1f} us | |")
    print(f"| {n} | {sims[n] * 1e6:.1f} us | {sims[n] * 1e6 / n:.1f} us | {per * 1e6:.1f} us |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="*", default=[1, 2, 4, 8])
    p.add_argument("--layers", type=int, default=1, help="a stack of N layers at batch 1: the per-layer steady state")
    p.add_argument("--work", default="/tmp/tessera_bert_sweep")
    p.add_argument("--tessera", default=os.path.join(ROOT, "build/release/tools/tessera"))
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(1)
    if args.layers > 1:
        return stack(args)
    rows = []
    for b in args.batches:
        onnx_path = os.path.join(args.work, f"bert_b{b}.onnx")
        if not os.path.exists(onnx_path):
            export(b, onnx_path)
        rep = run(args, scenario(f"bert-layer-b{b}", f"BERT-base encoder layer, batch {b}, seq 128, bf16 (tools/bert_batch_sweep.py)",
                                 onnx_path), f"b{b}")
        sim = rep["latency"]["simulated_s"]
        flops = sum(k["flops"] for k in rep["kernels"])
        util = flops / (sim * 92e12)  # neuroncore.md: tensor peak 92 TFLOP/s bf16 (v2)
        rows.append((b, sim, rep["latency"]["predicted_s"], util, len(rep["kernels"])))
        print(f"batch {b}: {sim * 1e6:.1f} us", file=sys.stderr)
    print("| batch | simulated | per sequence | sequences/s | predicted vs simulated | tensor engine (of 92 TFLOP/s) | kernels |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for b, sim, pred, util, nk in rows:
        print(f"| {b} | {sim * 1e6:.1f} us | {sim * 1e6 / b:.1f} us | {b / sim:,.0f} | {(pred - sim) / sim * 100:+.1f}% | "
              f"{util * 100:.1f}% | {nk} |")


if __name__ == "__main__":
    sys.exit(main())
