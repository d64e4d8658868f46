#!/usr/bin/python3
"""Export PyTorch training references for tessera's training scenarios (docs/training.md).

For each case it builds a small model with a fixed seed, exports its *initial* forward graph to
ONNX (opset 13), makes a dataset (one batch per step), trains it in PyTorch for STEPS steps with
torch.optim, and writes the loss of every step:

    scenarios/models/train_NAME.onnx
    scenarios/data/train_NAME/{x,target}.npy      [steps, batch, ...] float32
    scenarios/data/train_NAME/losses_OPT.npy      [steps] float32, PyTorch's loss per step
    scenarios/reference/train_NAME_OPT.json       the scenario (target.kind reference)

Run with Debian's python3-torch:  /usr/bin/python3 tools/export_training.py [--out DIR] [--only NAME ...]
CI never runs this; the outputs are committed. torch runs on one thread with fixed seeds.
"""
import argparse
import io
import json
import os

import numpy as np
import onnx
import torch
from torch import nn

STEPS = 25
WEIGHT_DECAY = 0.01  # momentum_wd: torch.optim.SGD(weight_decay=...)


class NoBiasRegressor(nn.Module):  # the MLP regression without biases (Linear(bias=False): plain MatMuls)
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16, bias=False)
        self.fc2 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Regressor(nn.Module):  # MLP regression: 8 -> 16 -> 4, MSE
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Classifier(nn.Module):  # 10 -> 32 -> 3, softmax cross-entropy
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class ReluClassifier(nn.Module):  # 10 -> 32 -> 3, ReLU, softmax cross-entropy (the wafer maps ReLU, not Tanh)
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class SmallCNN(nn.Module):  # [1, 8, 8] -> Conv 3x3 (4 channels, padding 1) -> ReLU -> MaxPool 2 -> Linear 64 -> 3
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.max_pool2d(torch.relu(self.conv(x)), 2), 1))


class GapCNN(nn.Module):  # [1, 8, 8] -> Conv 3x3 (8 channels, padding 1) -> ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear 8 -> 3
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


class Conv2CNN(nn.Module):  # [1, 8, 8] -> Conv 3x3 (4, padding 1) -> ReLU -> Conv 3x3 stride 2 (8, padding 1) -> ReLU -> AdaptiveAvgPool2d(1) -> Linear 8 -> 3
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv2(torch.relu(self.conv1(x))))), 1))


class FfnLN(nn.Module):  # a post-norm transformer's feed-forward half: LayerNorm(x + Linear(ReLU(Linear(x)))), d 16, hidden 32
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.fc2(torch.relu(self.fc1(x))))


class Ffn2LN(nn.Module):  # two post-norm feed-forward blocks: the second's residual adds the first's output
    def __init__(self):
        super().__init__()
        self.a = FfnLN()
        self.b = FfnLN()

    def forward(self, x):
        return self.b(self.a(x))


class Mha(nn.Module):  # torch's multi-head self-attention (d 16, 2 heads, batch_first): in_proj, attention, out_proj
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.a(x, x, x, need_weights=False)[0]


def ffn_data(rng):  # [2, 8, 16] token rows; the target a fixed mixing of each token, normalised per token
    a = rng.normal(scale=0.3, size=(16, 16)).astype(np.float32)
    x = rng.normal(size=(STEPS, 2, 8, 16)).astype(np.float32)
    z = x + 0.5 * np.tanh(x @ a)
    t = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    return x, t.astype(np.float32)


def image_data(rng, batch=16):  # 8x8 images: one of three fixed patterns, scaled, plus noise; one-hot labels
    patterns = rng.normal(size=(3, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 3, size=(STEPS, batch))
    x = (patterns[labels] * rng.uniform(0.5, 1.5, size=(STEPS, batch, 1, 1, 1)) + 0.5 * rng.normal(size=(STEPS, batch, 1, 8, 8))).astype(np.float32)
    t = np.eye(3, dtype=np.float32)[labels]
    return x, t


class DeepRegressor(nn.Module):  # MLP regression 8 -> 16 -> 12 -> 4 (three layers: the wafer's two buffers hold every block the backward pass reads)
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 12)
        self.fc3 = nn.Linear(12, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Deep6Regressor(nn.Module):  # MLP regression 8 -> 16 -> 16 -> 12 -> 12 -> 8 -> 4 (six layers: the wafer streams layers 1-3 again for the backward pass)
    def __init__(self):
        super().__init__()
        dims = [8, 16, 16, 12, 12, 8, 4]
        self.fcs = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def forward(self, x):
        for fc in self.fcs[:-1]:
            x = torch.relu(fc(x))
        return self.fcs[-1](x)


class Deep6Classifier(nn.Module):  # 10 -> 24 -> 24 -> 16 -> 16 -> 12 -> 3, Tanh and ReLU, softmax cross-entropy
    def __init__(self):
        super().__init__()
        dims = [10, 24, 24, 16, 16, 12, 3]
        self.fcs = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def forward(self, x):
        for i, fc in enumerate(self.fcs[:-1]):
            x = torch.tanh(fc(x)) if i % 2 else torch.relu(fc(x))
        return self.fcs[-1](x)


def regression_data(rng):
    a = rng.normal(size=(8, 4)).astype(np.float32)
    x = rng.normal(size=(STEPS, 16, 8)).astype(np.float32)
    t = (np.tanh(x @ a) + 0.05 * rng.normal(size=(STEPS, 16, 4))).astype(np.float32)
    return x, t


def classification_data(rng):
    centres = rng.normal(scale=2.0, size=(3, 10)).astype(np.float32)
    labels = rng.integers(0, 3, size=(STEPS, 24))
    x = (centres[labels] + rng.normal(size=(STEPS, 24, 10))).astype(np.float32)
    t = np.eye(3, dtype=np.float32)[labels]  # one-hot
    return x, t


def train(model, x, t, loss_kind, opt_kind, lr):
    sched = None
    if opt_kind == "sgd_exponential":  # SGD with ExponentialLR(gamma 0.9), stepped after every optimizer step
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    elif opt_kind == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    elif opt_kind == "momentum":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    elif opt_kind == "momentum_wd":  # with L2 weight decay on every parameter (biases too, torch's default)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=WEIGHT_DECAY)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for k in range(STEPS):
        opt.zero_grad()
        y = model(torch.from_numpy(x[k]))
        tk = torch.from_numpy(t[k])
        if loss_kind == "mse":
            loss = nn.functional.mse_loss(y, tk)
        else:
            loss = nn.functional.cross_entropy(y, tk.argmax(dim=1))
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32)


OPSET17 = {"ffn_ln", "ffn2_ln", "mha"}  # (LayerNormalization is an ONNX op from opset 17; earlier exports decompose it)


def export(model, shape, path, opset=13):
    buf = io.BytesIO()
    torch.onnx.export(model, torch.zeros(*shape), buf, opset_version=opset, input_names=["x"], output_names=["y"], do_constant_folding=True)
    m = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(m)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--only", nargs="*", default=None, help="export these cases only (by name: mlp, mlp6, ...)")
    args = ap.parse_args()
    root, only = args.out, args.only
    torch.set_num_threads(1)
    cases = [
        ("mlp", Regressor, regression_data, "mse", [("sgd", 0.05), ("adam", 0.01), ("sgd_exponential", 0.1)], (16, 8)),
        ("classifier", Classifier, classification_data, "softmax_cross_entropy", [("momentum", 0.05)], (24, 10)),
        ("relu_classifier", ReluClassifier, classification_data, "softmax_cross_entropy", [("sgd", 0.1), ("momentum", 0.05), ("momentum_wd", 0.05)], (24, 10)),
        ("cnn", SmallCNN, image_data, "softmax_cross_entropy", [("sgd", 0.05)], (16, 1, 8, 8)),
        ("mlp3", DeepRegressor, regression_data, "mse", [("sgd", 0.05)], (16, 8)),
        ("mlp6", Deep6Regressor, regression_data, "mse", [("sgd", 0.05)], (16, 8)),
        ("linear", lambda: nn.Linear(8, 4), regression_data, "mse", [("sgd", 0.05)], (16, 8)),  # one layer
        # the small CNN at batch 4 (the wafer keeps every im2col row of a conv on each PE of its line)
        ("cnn_b4", SmallCNN, lambda rng: image_data(rng, 4), "softmax_cross_entropy", [("sgd", 0.05)], (4, 1, 8, 8)),
        # a global average pool after the Conv (its backward: dy / positions to every position)
        ("cnn_gap_b4", GapCNN, lambda rng: image_data(rng, 4), "softmax_cross_entropy", [("sgd", 0.5)], (4, 1, 8, 8)),
        # a Conv read by a Conv (its input gradient: col2im at the first Conv's chain ends)
        ("cnn2_b4", Conv2CNN, lambda rng: image_data(rng, 4), "softmax_cross_entropy", [("sgd", 0.2)], (4, 1, 8, 8)),
        # a LayerNorm after a residual from the graph input (a post-norm transformer's feed-forward half)
        ("ffn_ln", FfnLN, ffn_data, "mse", [("sgd", 0.1), ("sgd_exponential", 0.1)], (2, 8, 16)),
        # two of them: the second block's residual carries its gradient back to the first block's LayerNorm
        ("ffn2_ln", Ffn2LN, ffn_data, "mse", [("sgd", 0.1)], (2, 8, 16)),
        # multi-head self-attention: its backward at the V kernel's chain ends (dV, dP, the softmax's, dQ, dK)
        ("mha", Mha, ffn_data, "mse", [("sgd", 0.1)], (2, 8, 16)),
        ("mlp_nobias", NoBiasRegressor, regression_data, "mse", [("sgd", 0.05)], (16, 8)),
        ("classifier6", Deep6Classifier, classification_data, "softmax_cross_entropy", [("momentum", 0.05)], (24, 10)),
    ]
    for name, cls, data, loss, opts, shape in cases:
        if only and name not in only:
            continue
        rng = np.random.default_rng(2026)
        x, t = data(rng)
        ddir = os.path.join(root, "scenarios", "data", "train_" + name)
        os.makedirs(ddir, exist_ok=True)
        np.save(os.path.join(ddir, "x.npy"), x)
        np.save(os.path.join(ddir, "target.npy"), t)
        torch.manual_seed(7)
        export(cls(), shape, os.path.join(root, "scenarios", "models", "train_" + name + ".onnx"), 17 if name in OPSET17 else 13)
        for opt_kind, lr in opts:
            torch.manual_seed(7)  # the same initial weights as the exported model
            losses = train(cls(), x, t, loss, opt_kind, lr)
            np.save(os.path.join(ddir, "losses_" + opt_kind + ".npy"), losses)
            print(name, opt_kind, "losses", losses[0], "->", losses[-1])
            scen = {
                "schema": "tessera.scenario/1",
                "name": "train-" + name + "-" + opt_kind,
                "description": f"Train the {name} ({loss}, {opt_kind} lr {lr}) for {STEPS} steps on the reference target, one batch per step; "
                               f"PyTorch's loss per step (tools/export_training.py, the same initial weights and data) is the expectation.",
                "target": {"kind": "reference"},
                "model": {"onnx": f"../models/train_{name}.onnx"},
                "inputs": {"x": {"file": f"../data/train_{name}/x.npy"}, "target": {"file": f"../data/train_{name}/target.npy"}},
                "run": {"steps": STEPS, "checkpoint_steps": 10, "activation_steps": 5},
                "training": {"loss": loss, "optimizer": ({"kind": "sgd", "learning_rate": lr, "schedule": {"kind": "exponential", "gamma": 0.9}}
                                                         if opt_kind == "sgd_exponential" else
                                                         {"kind": "momentum", "learning_rate": lr, "weight_decay": WEIGHT_DECAY}
                                                         if opt_kind == "momentum_wd" else {"kind": opt_kind, "learning_rate": lr})},
                "step_closures": [{"kind": "log", "tensors": ["loss"]}, {"kind": "assert", "condition": "finite(loss)"}],
                "expect": {"losses": {"file": f"../data/train_{name}/losses_{opt_kind}.npy", "rtol": 1e-4, "atol": 1e-6}},
            }
            with open(os.path.join(root, "scenarios", "reference", f"train_{name}_{opt_kind}.json"), "w") as f:
                json.dump(scen, f, indent=2)
                f.write("\n")


if __name__ == "__main__":
    main()
