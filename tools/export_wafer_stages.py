#!/usr/bin/python3
"""Export the first six stages of the zoo's MobileNetV3-small as a small wafer test model.

Writes tests/cli/data/wafer_mbv3_stages.onnx, wafer_mbv3_stages_x.npy and wafer_mbv3_stages_y.npy:
torchvision.models.mobilenet_v3_small(width_mult=0.5, num_classes=10).features[:6] (the stem
Conv + HardSwish, the squeeze-excitation stage with ReLU, two inverted residuals, the first
HardSwish stage with squeeze-excitation and a residual), then a global average pool, a Flatten
and a Linear to 4 outputs, at 32 x 32 and batch 2, with the zoo's weight treatment
(tools/export_zoo.py: noise on the 1-D parameters, BatchNorm statistics measured on random
batches). A plain torch.onnx.export at opset 17 (input "x"; the output keeps its default name). The wafer tests run it in
fp16 in micro-batches of one sample (docs/wafer-compiler.md "Micro-batches").

Run with Debian's python3-torch: /usr/bin/python3 tools/export_wafer_stages.py. CI never runs it;
a re-run writes the same bytes.
"""
import os
import sys

import numpy as np
import torch
import torchvision
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo  # noqa: E402  (perturb, calibrate_batchnorm, write, write_npy)


def main():
    torch.set_num_threads(1)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "tests", "cli", "data")
    torch.manual_seed(13)
    inputs = {"x": (2, 3, 32, 32)}
    net = torchvision.models.mobilenet_v3_small(width_mult=0.5, num_classes=10)
    net = export_zoo.calibrate_batchnorm(export_zoo.perturb(net), inputs, 13).eval()
    x = np.random.RandomState(5).standard_normal(inputs["x"]).astype(np.float32)
    stages = net.features[:6]
    c = stages(torch.from_numpy(x)).shape[1]
    torch.manual_seed(14)
    model = nn.Sequential(stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 4)).eval()
    y = model(torch.from_numpy(x)).detach().numpy()
    export_zoo.check_depends_on_inputs(model, {"x": x}, y)
    data, outputs = export_zoo.export(model, (torch.from_numpy(x),), ["x"], 17)
    assert len(outputs) == 1, outputs
    export_zoo.write(os.path.join(d, "wafer_mbv3_stages.onnx"), data)
    export_zoo.write_npy(os.path.join(d, "wafer_mbv3_stages_x.npy"), x)
    export_zoo.write_npy(os.path.join(d, "wafer_mbv3_stages_y.npy"), y.astype(np.float32))
    print(f"output {outputs[0]} {list(y.shape)}, |y| max {np.abs(y).max():.4g}")


if __name__ == "__main__":
    main()
