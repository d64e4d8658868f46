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


# Losses of a training run against PyTorch's, as the zoo's training scenarios check them.
_LOSS_TOL = {"fp32": (1e-3, 1e-6), "bf16": (5e-2, 1e-3), "fp16": (5e-2, 1e-3)}
_LOSSES = {"mse": "mse", "softmax_cross_entropy": "softmax_cross_entropy", "cross_entropy": "softmax_cross_entropy"}


def _optimizer(spec):
    """training["optimizer"] (a kind or a dict) -> the scenario's optimizer section."""
    opt = {"kind": spec} if isinstance(spec, str) else dict(spec or {})
    opt.setdefault("kind", "sgd")
    opt.setdefault("learning_rate", 0.01)
    if opt["kind"] not in ("sgd", "momentum", "adam"):
        raise ValueError(f"training optimizer kind {opt['kind']!r}: use sgd, momentum or adam")
    return opt


def from_torch(module, example_inputs, *, target="neuroncore", preset=None, precision=None, out_dir=None,
               name=None, opset=17, params=None, training=None):
    """Exports `module` (eval mode) with `example_inputs` (a tensor or a tuple of tensors) and
    returns a scenario dict that tessera.run() takes: the ONNX model and the inputs written to
    `out_dir` (default out/from_torch/<name>), PyTorch's outputs as the expected values.

    target: "neuroncore", "wafer" or "reference"; preset: e.g. "trn1" (default: the target's
    first); precision: the machine's compute dtype ("bf16" or "fp32"; default bf16 for inference,
    fp32 for training); params: hardware parameter overrides (target.params). The bf16 tolerance is
    PyTorch's own bf16 inference error on these inputs, doubled (at least 1e-3 absolute, 5e-2
    relative): a machine computing in bf16 can be no closer to fp32 than that.

    training (a dict) makes it a training scenario: every step runs forward, backward and the
    optimizer update on the machine, and the loss of every step is checked against PyTorch's,
    trained here from the same initial weights on the same data:
      target      the loss's target (required): a tensor of the output's shape used every step,
                  or with a leading steps axis, one per step (softmax_cross_entropy: one-hot or
                  soft class probabilities)
      loss        "mse" (default) or "softmax_cross_entropy" ("cross_entropy")
      optimizer   "sgd" (default), "momentum", "adam", or a dict of the scenario's optimizer
                  section (kind, learning_rate, momentum, beta1, beta2, eps, weight_decay)
      steps       how many (default 10)
      inputs      optional: the inputs per step, each with a leading steps axis (default: the
                  example inputs every step)
    The module trains as in eval mode on both sides (tessera's canonical graph drops Dropout).
    The exported model is the module before training; the module itself is left untouched.
    """
    import torch

    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    precision = precision or ("fp32" if training else "bf16")
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
    if training:
        _add_training(scenario, module, args, input_names, ys, training, precision, target, out_dir)
    return scenario


def _add_training(scenario, module, args, input_names, ys, training, precision, target, out_dir):
    import torch

    tr = dict(training)
    unknown = set(tr) - {"target", "loss", "optimizer", "steps", "inputs"}
    if unknown:
        raise ValueError(f"training: unknown key(s) {sorted(unknown)}; use target, loss, optimizer, steps, inputs")
    if "target" not in tr:
        raise ValueError("training needs a target: a tensor of the output's shape (or one per step)")
    if len(ys) != 1:
        raise ValueError(f"training takes the loss of one output; the module returns {len(ys)}")
    loss = _LOSSES.get(tr.get("loss", "mse"))
    if loss is None:
        raise ValueError(f"training loss {tr.get('loss')!r}: use mse or softmax_cross_entropy")
    steps = int(tr.get("steps", 10))
    if steps < 1:
        raise ValueError("training steps must be at least 1")
    opt = _optimizer(tr.get("optimizer", "sgd"))
    t = torch.as_tensor(tr["target"], dtype=torch.float32)
    y_shape = tuple(ys[0].shape)
    if tuple(t.shape) == (steps,) + y_shape:
        per_step_target = True
    elif tuple(t.shape) == y_shape:
        per_step_target = False
    else:
        raise ValueError(f"training target shape {tuple(t.shape)}: give the output's shape {y_shape} or [{steps}] + that")
    step_inputs = tr.get("inputs")
    if step_inputs is not None:
        step_inputs = tuple(step_inputs) if isinstance(step_inputs, (tuple, list)) else (step_inputs,)
        if len(step_inputs) != len(args) or any(tuple(s.shape) != (steps,) + tuple(a.shape) for s, a in zip(step_inputs, args)):
            raise ValueError(f"training inputs: one tensor per model input, each [{steps}] + the example input's shape")
    # PyTorch's losses, from a copy of the module at its exported weights.
    model = copy.deepcopy(module).float().eval()
    xs = [s.float() for s in step_inputs] if step_inputs is not None else None
    wd = opt.get("weight_decay", 0.0)
    if opt["kind"] == "adam":
        o = torch.optim.Adam(model.parameters(), lr=opt["learning_rate"],
                             betas=(opt.get("beta1", 0.9), opt.get("beta2", 0.999)), eps=opt.get("eps", 1e-8), weight_decay=wd)
    else:  # SGD; momentum as torch.optim.SGD's (no dampening)
        o = torch.optim.SGD(model.parameters(), lr=opt["learning_rate"], weight_decay=wd,
                            momentum=opt.get("momentum", 0.9) if opt["kind"] == "momentum" else 0.0)
    losses = []
    for k in range(steps):
        o.zero_grad()
        y = model(*([a[k] for a in xs] if xs is not None else args))
        y = y[0] if isinstance(y, (tuple, list)) else y
        tk = t[k] if per_step_target else t
        # mse: the mean over every element; softmax cross-entropy against class probabilities, batch mean
        l = torch.nn.functional.mse_loss(y, tk) if loss == "mse" else -(tk * torch.log_softmax(y, dim=-1)).sum(dim=-1).mean()
        l.backward()
        o.step()
        losses.append(l.item())
    tgt = os.path.join(out_dir, "target.npy")
    _write_npy(tgt, t.numpy())
    if step_inputs is not None:
        for n, s_ in zip(input_names, step_inputs):
            _write_npy(scenario["inputs"][n]["file"], s_.detach().cpu().numpy())
    scenario["inputs"]["target"] = {"file": tgt}
    lf = os.path.join(out_dir, "losses.npy")
    _write_npy(lf, np.array(losses, dtype=np.float32))
    rtol, atol = _LOSS_TOL["fp32" if target == "reference" else precision]
    scenario["run"] = {"steps": steps}
    scenario["training"] = {"loss": loss, "optimizer": opt}
    scenario["step_closures"] = [{"kind": "log", "tensors": ["loss"]}, {"kind": "assert", "condition": "finite(loss)"}]
    scenario["expect"] = {"losses": {"file": lf, "rtol": rtol, "atol": atol}}
    scenario["description"] += f"; trained {steps} steps ({loss}, {opt['kind']} lr {opt['learning_rate']}), PyTorch's losses expected"
