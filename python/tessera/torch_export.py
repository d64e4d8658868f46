"""tessera.from_torch: an nn.Module and example inputs to a runnable scenario, through a plain
torch.onnx.export (only the opset and names given), as the zoo's models are exported
(tools/export_zoo.py)."""
import copy
import os
import re

import numpy as np

# Tolerances of PyTorch's fp32 outputs, as the zoo's scenarios use them (scenarios/zoo/README.md).
_TOL = {"reference": (1e-4, 1e-5), "fp32": (1e-3, 1e-4), "bf16": (5e-2, 1e-3)}


def _write_npy(path, a):
    np.save(path, np.ascontiguousarray(a))


def from_torch(module, example_inputs, *, target="neuroncore", preset=None, precision="bf16", out_dir=None,
               name=None, opset=17, params=None):
    """Exports `module` (eval mode) with `example_inputs` (a tensor or a tuple of tensors) and
    returns a scenario dict that tessera.run() takes: the ONNX model and the inputs written to
    `out_dir` (default out/from_torch/<name>), PyTorch's outputs as the expected values.

    target: "neuroncore", "wafer" or "reference"; preset: e.g. "trn1" (default: the target's
    first); precision: the machine's compute dtype ("bf16" or "fp32"); params: hardware parameter
    overrides (target.params). The bf16 tolerance is PyTorch's own bf16 inference error on these
    inputs, doubled (at least 1e-3 absolute, 5e-2 relative): a machine computing in bf16 can be no
    closer to fp32 than that.
    """
    import torch

    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    name = name or re.sub(r"[^A-Za-z0-9_.-]", "_", type(module).__name__.lower())
    out_dir = os.path.abspath(out_dir or os.path.join("out", "from_torch", name))
    os.makedirs(out_dir, exist_ok=True)
    model = module.eval()
    input_names = ["x"] if len(args) == 1 else [f"x{i}" for i in range(len(args))]
    with torch.no_grad():
        ys = model(*args)
    ys = tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)
    output_names = ["y"] if len(ys) == 1 else [f"y{i}" for i in range(len(ys))]
    onnx_path = os.path.join(out_dir, "model.onnx")
    torch.onnx.export(model, args, onnx_path, opset_version=opset, input_names=input_names,
                      output_names=output_names)

    inputs = {}
    for n, a in zip(input_names, args):
        p = os.path.join(out_dir, n + ".npy")
        _write_npy(p, a.detach().cpu().numpy())
        inputs[n] = {"file": p}
    rtol, atol = _TOL["reference" if target == "reference" else precision]
    if target != "reference" and precision == "bf16":
        with torch.no_grad():
            yb = copy.deepcopy(model).to(torch.bfloat16)(*[a.to(torch.bfloat16) for a in args])
        yb = tuple(yb) if isinstance(yb, (tuple, list)) else (yb,)
        err = max(float((b.float() - y.float()).abs().max()) for b, y in zip(yb, ys))
        atol = max(atol, float(f"{2 * err:.2g}"))
    expect = {}
    for n, y in zip(output_names, ys):
        p = os.path.join(out_dir, n + ".npy")
        _write_npy(p, y.detach().cpu().numpy().astype(np.float32))
        expect[n] = {"file": p, "rtol": rtol, "atol": atol}

    scenario = {
        "schema": "tessera.scenario/1",
        "name": name,
        "description": f"{type(module).__name__} exported by tessera.from_torch (torch.onnx.export, opset {opset}); "
                       f"expected outputs are PyTorch's (fp32)",
        "target": {"kind": target},
        "model": {"onnx": onnx_path},
        "inputs": inputs,
        "expect": {"outputs": expect},
    }
    if preset:
        scenario["target"]["preset"] = preset
    if params:
        scenario["target"]["params"] = dict(params)
    if target != "reference":
        scenario["precision"] = {"compute": precision}
    return scenario
