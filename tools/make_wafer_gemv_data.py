#!/usr/bin/python3
"""Inputs and expected output of scenarios/wafer/micro/gemv_8x8_run.json (Debian's /usr/bin/python3).

gemv.pe on an 8x8 grid: PE (px, py) holds a 4x4 block of A (column-major) and, in the top row, the
4 elements of x for its column. Each PE accumulates y_local = A_block @ x_col in fp32 (fmacs, one
column j at a time), then the row reduces west to east: PE px ends with the fp32 prefix sum of the
row's partial products up to px. Arrays are [PE rows, PE columns, elements]. Deterministic.
"""
import os

import numpy as np

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "wafer", "micro", "data")
rng = np.random.RandomState(7)
H = W = 8
R = C = 4
A = rng.standard_normal((H, W, R * C)).astype(np.float32)
x = rng.standard_normal((H, W, C)).astype(np.float32)
y = np.zeros((H, W, R), dtype=np.float32)
for py in range(H):
    acc = None
    for px in range(W):
        local = np.zeros(R, dtype=np.float32)
        for j in range(C):  # fmacs: y += A[:, j] * x_j, fp32
            local = (local + A[py, px, j * R:(j + 1) * R] * x[0, px, j]).astype(np.float32)
        acc = local if acc is None else (local + acc).astype(np.float32)
        y[py, px] = acc
os.makedirs(root, exist_ok=True)
np.save(os.path.join(root, "gemv_A.npy"), A)
np.save(os.path.join(root, "gemv_x.npy"), x)
np.save(os.path.join(root, "gemv_y.npy"), y)
print("wrote", root)
