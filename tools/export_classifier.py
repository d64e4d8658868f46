#!/usr/bin/python3
"""Exports a small classifier head from PyTorch for the NeuronCore compiler's row kernels.

    Linear(256, 512) -> LayerNorm(512) -> GELU (erf) -> Linear(512, 10) -> Softmax, batch 64

At opset 13 the exporter writes LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add
and GELU as Div/Erf/Add/Mul/Mul: the reference executor runs that decomposition, the compiler
fuses it back (mapper/passes/fuse.cpp). Writes scenarios/models/classifier.onnx and
scenarios/data/classifier/{x,y}.npy. Run with Debian's /usr/bin/python3 (torch, onnx, numpy);
CI never runs it. Deterministic (fixed seeds, one thread).
"""
import collections
import os

import numpy as np
import onnx
import torch
from torch import nn

torch.set_num_threads(1)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios")


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.norm = nn.LayerNorm(512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        h = nn.functional.gelu(self.norm(self.fc1(x)))
        return torch.softmax(self.fc2(h), dim=-1)


def main():
    torch.manual_seed(11)
    m = Classifier().eval()
    with torch.no_grad():
        for p in m.parameters():  # LayerNorm starts at 1/0: make gamma/beta matter
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    x = torch.from_numpy(np.random.RandomState(11).standard_normal((64, 256)).astype(np.float32))
    with torch.no_grad():
        y = m(x)
    path = os.path.join(root, "models", "classifier.onnx")
    torch.onnx.export(m, (x,), path, opset_version=13, do_constant_folding=True,
                      input_names=["x"], output_names=["y"])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    print("ops:", dict(collections.Counter(n.op_type for n in model.graph.node)))
    os.makedirs(os.path.join(root, "data", "classifier"), exist_ok=True)
    np.save(os.path.join(root, "data", "classifier", "x.npy"), x.numpy())
    np.save(os.path.join(root, "data", "classifier", "y.npy"), y.numpy())


if __name__ == "__main__":
    main()
