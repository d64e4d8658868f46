#!/usr/bin/python3
"""Inputs and expected outputs of scenarios/wafer/stream/stream_layer_run.json, computed with numpy.

One training step of a weight-streamed linear layer on a 4x4 PE grid, one sample per PE:
y_b = W x_b; loss 0.5 |y_b|^2, so dL/dW = sum_b y_b x_b^T; MemoryX applies SGD. The PEs
accumulate in fp32 in the order the weights arrive (k inner), rows of PEs sum their gradients
west to east, SwarmX adds the four rows in lane order: the expected values follow the same order
in float32 so the comparison can be tight. Writes scenarios/data/wafer_stream/{x,W,y,gradients,
W_after}.npy. Run with /usr/bin/python3 (numpy); CI never runs it.
"""
import os

import numpy as np

R, P, K, N, LR = 4, 4, 8, 4, np.float32(0.05)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "data", "wafer_stream")
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(17)
x = rng.standard_normal((R, P, K)).astype(np.float32)
W = (0.5 * rng.standard_normal((N, K))).astype(np.float32)

y = np.zeros((R, P, N), np.float32)
for r in range(R):
    for p in range(P):
        for n in range(N):
            acc = np.float32(0)
            for k in range(K):
                acc = np.float32(acc + np.float32(x[r, p, k] * W[n, k]))
            y[r, p, n] = acc
grads = np.zeros((R, N * K), np.float32)
for r in range(R):
    s = None
    for p in range(P):
        g = np.outer(y[r, p], x[r, p]).astype(np.float32).reshape(-1)
        s = g if s is None else (g + s).astype(np.float32)
    grads[r] = s
total = np.zeros(N * K, np.float32)
for r in range(R):
    total = (total + grads[r]).astype(np.float32)
W_after = (W.reshape(-1) - LR * total).astype(np.float32).reshape(N, K)

for name, a in [("x", x), ("W", W), ("y", y), ("gradients", grads), ("W_after", W_after)]:
    np.save(os.path.join(out, name + ".npy"), a)
print("max |dW| =", float(np.abs(W_after - W).max()))
