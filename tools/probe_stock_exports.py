#!/usr/bin/python3
"""Export torchvision and torch.nn models the way users do and ask tessera which targets compile them.

For each case: a plain torch.onnx.export (input "x", the opset given) into a temporary directory,
then `tessera validate` (compile only, no simulation) of a scenario per target -- the wafer (WSE-2)
in weight streaming and pipelined mode, fp16, the rectangle left to the compiler, and the
NeuronCore (trn1). Prints a markdown table: "ok" with the kernel count, or the first line of the
error (which names the node and what to do). docs/wafer-compiler.md "Stock exports" has the table
of the last run.

Run with Debian's python3-torch from the repository root, after a build:
  /usr/bin/python3 tools/probe_stock_exports.py [--only NAME,NAME] [--keep DIR]
CI never runs it (it needs PyTorch); it takes a few minutes (ResNet-50 and EfficientNetV2 compile
for 16,384 and 9,216 PEs).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
from torch import nn

M = torchvision.models


class LastStep(nn.Module):  # a recurrent classifier as users write one: its output at the last step into a Linear
    def __init__(self, rnn, hidden):
        super().__init__()
        self.rnn, self.fc = rnn, nn.Linear(hidden, 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1, :])


class BiFinal(nn.Module):  # a bidirectional classifier: both directions' final states side by side into a Linear
    def __init__(self, rnn, hidden):
        super().__init__()
        self.rnn, self.fc = rnn, nn.Linear(2 * hidden, 4)

    def forward(self, x):
        _, h = self.rnn(x)
        return self.fc(torch.cat((h[-2], h[-1]), 1))


class MeanHead(nn.Module):  # a CNN whose forward ends in x.mean((2, 3)), as MNASNet's does
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.f(x).mean((2, 3)))


def cases():
    seq = nn.Sequential
    return [
        # name, model factory, input shape, opset
        ("torchvision resnet18", lambda: M.resnet18(num_classes=10), [1, 3, 32, 32], 17),
        ("torchvision resnet18, batch 2", lambda: M.resnet18(num_classes=10), [2, 3, 32, 32], 13),
        ("torchvision resnet50", lambda: M.resnet50(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision mobilenet_v2 (0.5), batch 3", lambda: M.mobilenet_v2(width_mult=0.5, num_classes=10), [3, 3, 32, 32], 11),
        ("torchvision mobilenet_v3_large (0.5), batch 2", lambda: M.mobilenet_v3_large(width_mult=0.5, num_classes=10), [2, 3, 32, 32], 17),
        ("torchvision mnasnet0_5", lambda: M.mnasnet0_5(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision regnet_x_400mf", lambda: M.regnet_x_400mf(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision efficientnet_v2_s", lambda: M.efficientnet_v2_s(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision shufflenet_v2_x0_5", lambda: M.shufflenet_v2_x0_5(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision squeezenet1_1", lambda: M.squeezenet1_1(num_classes=10), [1, 3, 64, 64], 13),
        ("torchvision googlenet", lambda: M.googlenet(num_classes=10, aux_logits=False, init_weights=True), [1, 3, 32, 32], 13),
        ("torchvision convnext_tiny", lambda: M.convnext_tiny(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision vgg11_bn", lambda: M.vgg11_bn(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision efficientnet_b0, batch 2", lambda: M.efficientnet_b0(num_classes=10), [2, 3, 32, 32], 13),
        ("torchvision regnet_y_400mf", lambda: M.regnet_y_400mf(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision resnext50_32x4d", lambda: M.resnext50_32x4d(num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision vit_b_16 (image_size 32)", lambda: M.vit_b_16(image_size=32, num_classes=10), [1, 3, 32, 32], 13),
        ("torchvision densenet121", lambda: M.densenet121(num_classes=10), [1, 3, 32, 32], 13),
        ("nn MLP: Linear, GELU, LayerNorm, Linear, batch 3", lambda: seq(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10)), [3, 32], 14),
        ("nn MLP: Linear, ReLU, Dropout, Linear, Softmax", lambda: seq(nn.Linear(20, 30), nn.ReLU(), nn.Dropout(0.1), nn.Linear(30, 7), nn.Softmax(dim=1)), [5, 20], 9),
        ("nn MLP: Linear, BatchNorm1d, ReLU, Linear", lambda: seq(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 8)), [4, 16], 13),
        ("nn MLP: LeakyReLU, ELU, SELU, CELU", lambda: seq(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 32), nn.ELU(), nn.Linear(32, 32), nn.SELU(), nn.Linear(32, 32), nn.CELU(0.5), nn.Linear(32, 4)), [2, 16], 13),
        ("nn MLP: SiLU, Mish, Softplus, Hardtanh, ReLU6", lambda: seq(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 32), nn.Mish(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 32), nn.Hardtanh(), nn.Linear(32, 32), nn.ReLU6(), nn.Linear(32, 4)), [2, 16], 17),
        ("nn MLP: PReLU, LogSoftmax", lambda: seq(nn.Linear(16, 32), nn.PReLU(), nn.Linear(32, 8), nn.LogSoftmax(dim=1)), [4, 16], 13),
        ("nn MLP: Softsign, Tanhshrink", lambda: seq(nn.Linear(16, 32), nn.Softsign(), nn.Linear(32, 32), nn.Tanhshrink(), nn.Linear(32, 8)), [4, 16], 13),
        ("nn MLP on [2, 5, 16] (a 3-D input)", lambda: seq(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)), [2, 5, 16], 13),
        ("nn CNN: BatchNorm2d, MaxPool(3, 2), AdaptiveAvgPool", lambda: seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5)), [4, 3, 16, 16], 13),
        ("nn CNN: VGG-style padded Convs, MaxPool(2)", lambda: seq(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 10)), [2, 3, 16, 16], 15),
        ("nn CNN: grouped Conv", lambda: seq(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)), [2, 4, 8, 8], 13),
        ("nn CNN: dilated Conv, MaxPool ceil_mode", lambda: seq(nn.Conv2d(3, 8, 3, padding=2, dilation=2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(), nn.Linear(8 * 4 * 4, 4)), [2, 3, 8, 8], 13),
        ("nn CNN: GroupNorm", lambda: seq(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)), [2, 3, 8, 8], 13),
        ("nn CNN: x.mean((2, 3)) head", MeanHead, [2, 3, 8, 8], 13),
        ("nn autoencoder: Conv2d, ConvTranspose2d", lambda: seq(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1), nn.Sigmoid()), [2, 3, 16, 16], 13),
        ("nn decoder: Upsample (nearest), Conv2d", lambda: seq(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2), nn.Conv2d(8, 3, 3, padding=1)), [2, 3, 8, 8], 13),
        ("nn Conv1d, MaxPool1d, AdaptiveMaxPool1d", lambda: seq(nn.Conv1d(4, 8, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(8, 8, 3), nn.ReLU(), nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(8, 3)), [2, 4, 20], 13),
        ("nn.TransformerEncoderLayer (sequence first)", lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), [8, 2, 32], 12),
        ("nn.TransformerEncoderLayer (batch first, pre-norm, GELU)", lambda: nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"), [2, 8, 32], 17),
        ("nn.GRU classifier input (a GRU alone)", lambda: nn.GRU(8, 16, batch_first=True), [2, 5, 8], 13),
        ("nn.LSTM (2 layers) classifier: out[:, -1, :] -> Linear", lambda: LastStep(nn.LSTM(8, 16, num_layers=2, batch_first=True), 16), [2, 5, 8], 13),
        ("nn.GRU bidirectional classifier: cat(h_n[-2], h_n[-1]) -> Linear", lambda: BiFinal(nn.GRU(8, 16, batch_first=True, bidirectional=True), 16), [2, 5, 8], 13),
    ]


def scenario(target, mode=None):
    s = {"schema": "tessera.scenario/1", "name": "probe", "model": {"onnx": "model.onnx"}, "inputs": {"x": {"file": "x.npy"}}}
    if target == "wafer":
        s["target"] = {"kind": "wafer", "preset": "wse2"}
        s["mapping"] = {"mode": mode}
        s["precision"] = {"compute": "fp16"}
    else:
        s["target"] = {"kind": "neuroncore", "preset": "trn1"}
    return s


def validate(tessera, d, s):
    path = os.path.join(d, "s.json")
    with open(path, "w") as f:
        json.dump(s, f)
    p = subprocess.run([tessera, "validate", path], capture_output=True, text=True, timeout=600)
    out = (p.stdout + p.stderr).strip().splitlines()
    if p.returncode == 0:
        line = next((l for l in out if l.startswith("ok:")), "")
        k = line.split("compiled ", 1)[1].split(" ", 1)[0] if "compiled " in line else "?"
        return f"ok ({k} kernels)"
    errs = [l for l in out if l.startswith("error:")]
    err = errs[0] if errs else (out[-1] if out else "?")
    if err.rstrip().endswith("problems:") and len(errs) > 1:  # (several nodes named: the count and the first)
        err = err.rstrip() + " " + errs[1].replace("error: ", "")
    for cut in (" (the wafer compiler maps", " (run the model on", " (use \"mapping\"", "; run the model", " (give "):
        err = err.split(cut)[0]
    return err.replace("error: ", "").replace("|", "/")[:150]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tessera = os.path.join(root, "build", "release", "tools", "tessera")
    os.environ.setdefault("TESSERA_HOME", root)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("| model (torch.onnx.export defaults) | wafer, weight streaming | wafer, pipelined | NeuronCore |")
    print("| --- | --- | --- | --- |")
    for name, make, shape, opset in cases():
        if a.only and not any(o in name for o in a.only.split(",")):
            continue
        d = a.keep and os.path.join(a.keep, "".join(c if c.isalnum() else "_" for c in name)) or tempfile.mkdtemp()
        os.makedirs(d, exist_ok=True)
        m = make().eval()
        x = torch.randn(*shape)
        try:
            torch.onnx.export(m, x, os.path.join(d, "model.onnx"), opset_version=opset, input_names=["x"])
        except Exception as e:  # (PyTorch's exporter refuses some forms: say so and go on)
            print(f"| {name}, opset {opset} | torch.onnx.export fails: {str(e).splitlines()[0][:120]} | | |", flush=True)
            continue
        np.save(os.path.join(d, "x.npy"), x.numpy())
        cols = [validate(tessera, d, scenario("wafer", "weight_streaming")), validate(tessera, d, scenario("wafer", "pipelined")),
                validate(tessera, d, scenario("neuroncore"))]
        print(f"| {name}, opset {opset} | " + " | ".join(cols) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
