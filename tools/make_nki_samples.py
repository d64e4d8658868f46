#!/usr/bin/env python3
"""Writes scenarios/neuroncore/nki_samples/: the nki-samples kernels whose shapes and latency
thresholds are published (../shared/reference/neuroncore.md "More rows found 2026-11-24"), as
plain graphs for tessera's compiler:

- rmsnorm_qkv_*: out = rms_norm(hidden) @ W, rms_norm(h) = h / (sqrt(mean(h^2, -1)) + 1e-6), no
  gamma (nki-samples test_rmsnorm_qkv.py's cpu_golden_result with gamma None); hidden
  [1, seqlen, dim], W [dim, d_head]: 128 x 512 -> 512 fp16 (<= 25 us), 512 x 1024 -> 384 bf16
  (<= 40 us), 128 x 1024 -> 512 bf16 (<= 28 us).
- sd_attention_*: Stable Diffusion's small-head self-attention, q [1, d, seqlen] (transposed),
  k, v [1, seqlen, d]: softmax((q * 0.125)^T k^T) v (test_SD_attention_small_head.py's
  cpu_golden_attn), seqlen 4096, d 128, fp32 (<= 675 us) and bf16 (<= 480 us).

The figures are the tests' thresholds (`assert latency <= N`), upper bounds and not measurements:
expect.reference_latency.upper_bound. The hardware the thresholds were set on is not stated; these
run on trn1 (the NKI tutorial's machine). Inputs are tessera's seeded uniform values in (-1, 1)
where the tests draw [0, 1): the values do not change the timing. Outputs are checked against the
reference executor. Plain python3; CI never runs it.
"""
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "neuroncore", "nki_samples")
SRC_RMS = ("neuroncore.md More rows: nki-samples test_rmsnorm_qkv.py, p50 latency threshold %d us for [1,%d,%d] -> %d %s "
           "(an upper bound, unconfirmed)")
SRC_SD = ("neuroncore.md More rows: nki-samples test_SD_attention_small_head.py, latency threshold %d us for seqlen %d, d %d, "
          "%s (an upper bound, unconfirmed)")


def write(name, obj):
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def scenario(name, what, graph, inputs, dt, atol, bound, source):
    """One nki-samples scenario: the graph on trn1 in `dt`, its output against the reference executor
    (rtol 0.02, `atol`), predicted within 5%, the test's threshold as an upper bound."""
    write(name, {
        "schema": "tessera.scenario/1",
        "name": "nki-sample-" + name.replace("_", "-"),
        "description": what + " (tools/make_nki_samples.py); its test's latency threshold, %d us, is an upper bound." % bound,
        "target": {"kind": "neuroncore", "preset": "trn1"},
        "model": {"graph": graph},
        "inputs": {n: {"random": {"seed": i + 1, "dist": "uniform", "scale": 1.0}} for i, n in enumerate(inputs)},
        "precision": {"compute": dt},
        "expect": {"outputs": {"out": {"rtol": 0.02, "atol": atol}},
                   "latency_error_pct": 5,
                   "reference_latency": {"value": "%dus" % bound, "source": source, "upper_bound": True}},
    })


def rmsnorm_qkv(S, D, N, dt, bound):
    name = "rmsnorm_qkv_s%d_d%d_n%d_%s" % (S, D, N, dt)
    graph = {
        "inputs": {"hidden": {"shape": [1, S, D]}},
        "outputs": ["out"],
        "initializers": {"w": {"shape": [D, N], "random": {"seed": 2, "dist": "uniform", "scale": 1.0}},
                         "eps": {"values": [1e-6], "shape": [1]}},
        "nodes": [
            {"name": "square", "op": "Mul", "inputs": ["hidden", "hidden"], "outputs": ["sq"]},
            {"name": "mean", "op": "ReduceMean", "inputs": ["sq"], "outputs": ["ms"], "attrs": {"axes": [-1], "keepdims": 1}},
            {"name": "rms", "op": "Sqrt", "inputs": ["ms"], "outputs": ["rms"]},
            {"name": "add_eps", "op": "Add", "inputs": ["rms", "eps"], "outputs": ["den"]},
            {"name": "normalize", "op": "Div", "inputs": ["hidden", "den"], "outputs": ["norm"]},
            {"name": "qkv", "op": "MatMul", "inputs": ["norm", "w"], "outputs": ["out"]}]}
    # bf16 rounds hidden and W to 8 bits: over D products of ~0.5 that is ~0.002 each, a random walk
    # of sqrt(D) * 0.002 = 0.064 at D 1024 against the fp32 reference; 0.5 is ~8 of those (fp16: 8x finer).
    scenario(name, "nki-samples' fused RMSNorm + QKV projection: out = rms_norm(hidden) @ W with hidden [1, %d, %d] and "
             "W [%d, %d] in %s" % (S, D, D, N, dt), graph, ["hidden"], dt, 0.05 if dt == "fp16" else 0.5, bound,
             SRC_RMS % (bound, S, D, N, dt))


def sd_attention(S, d, dt, bound):
    name = "sd_attention_s%d_d%d_%s" % (S, d, dt)
    graph = {
        "inputs": {"q": {"shape": [1, d, S]}, "k": {"shape": [1, S, d]}, "v": {"shape": [1, S, d]}},
        "outputs": ["out"],
        "initializers": {"scale": {"values": [0.125], "shape": [1]}},
        "nodes": [
            {"name": "scale_q", "op": "Mul", "inputs": ["q", "scale"], "outputs": ["qs"]},
            {"name": "q_t", "op": "Transpose", "inputs": ["qs"], "outputs": ["qt"], "attrs": {"perm": [0, 2, 1]}},
            {"name": "k_t", "op": "Transpose", "inputs": ["k"], "outputs": ["kt"], "attrs": {"perm": [0, 2, 1]}},
            {"name": "scores", "op": "MatMul", "inputs": ["qt", "kt"], "outputs": ["score"]},
            {"name": "softmax", "op": "Softmax", "inputs": ["score"], "outputs": ["p"], "attrs": {"axis": -1}},
            {"name": "pv", "op": "MatMul", "inputs": ["p", "v"], "outputs": ["out"]}]}
    scenario(name, "nki-samples' Stable Diffusion self-attention for small heads: softmax((q * 0.125)^T k^T) v with "
             "q [1, %d, %d], k and v [1, %d, %d] in %s" % (d, S, S, d, dt), graph, ["q", "k", "v"], dt,
             1e-4 if dt == "fp32" else 0.01, bound, SRC_SD % (bound, S, d, dt))


def main():
    os.makedirs(HERE, exist_ok=True)
    rmsnorm_qkv(128, 512, 512, "fp16", 25)
    rmsnorm_qkv(512, 1024, 384, "bf16", 40)
    rmsnorm_qkv(128, 1024, 512, "bf16", 28)
    sd_attention(4096, 128, "fp32", 675)
    sd_attention(4096, 128, "bf16", 480)
    print("wrote", HERE)


if __name__ == "__main__":
    main()
