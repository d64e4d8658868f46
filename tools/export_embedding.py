#!/usr/bin/python3
"""Exports a small token-embedding front end from PyTorch for the NeuronCore compiler's Gather.

    tokens int64 [2, 16] -> Embedding(500, 96) -> Linear(96, 200) -> ReLU

Writes scenarios/models/embedding.onnx and scenarios/data/embedding/{tokens,y}.npy (tokens int64,
y float32 as PyTorch computed it). Run with Debian's /usr/bin/python3 (torch, onnx, numpy); CI
never runs it. Deterministic (fixed seeds, one thread).
"""
import collections
import os

import numpy as np
import onnx
import torch
from torch import nn

torch.set_num_threads(1)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios")


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(500, 96)
        self.fc = nn.Linear(96, 200)

    def forward(self, tokens):
        return torch.relu(self.fc(self.emb(tokens)))


def main():
    torch.manual_seed(13)
    m = Embedding().eval()
    tokens = torch.from_numpy(np.random.RandomState(13).randint(0, 500, size=(2, 16)).astype(np.int64))
    tokens[0, 0] = 0    # the first and last rows of the table are looked up too
    tokens[1, 15] = 499
    with torch.no_grad():
        y = m(tokens)
    path = os.path.join(root, "models", "embedding.onnx")
    torch.onnx.export(m, (tokens,), path, opset_version=13, do_constant_folding=True,
                      input_names=["tokens"], output_names=["y"])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    print("ops:", dict(collections.Counter(n.op_type for n in model.graph.node)))
    os.makedirs(os.path.join(root, "data", "embedding"), exist_ok=True)
    np.save(os.path.join(root, "data", "embedding", "tokens.npy"), tokens.numpy())
    np.save(os.path.join(root, "data", "embedding", "y.npy"), y.numpy())


if __name__ == "__main__":
    main()
