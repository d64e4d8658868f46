"""Numbers come through the fabric (issue 20, acceptance 3): for every kernel of a compiled
pipelined layout, a bit flipped in that kernel's resident weights (array W<l> on the first PE of
its rectangle, the top exponent bit of its first 64 elements: the layer's first block, which holds
W[0, 0] and is never all padding; several elements, as one weight may meet only zero activations
after a ReLU) makes the output check fail, and the run without a fault passes. The kernels and their
rectangles are read from the layout the compiler emits (--emit-program), so a new kernel is
covered without editing this file. Usage: wafer_fault_every_kernel.py TESSERA ROOT."""
import json, os, re, subprocess, sys, tempfile

tessera, root = sys.argv[1], sys.argv[2]
os.chdir(root)

CASES = [
    ("scenarios/wafer/mlp/mlp_pipelined.json", []),
    ("scenarios/wafer/mlp/mlp_pipelined_bf16.json", []),
    ("scenarios/wafer/transformer/transformer_layer_pipelined.json", ["mapping.wafer_block=16"]),
    ("scenarios/wafer/cnn/lenet_pipelined.json", ["mapping.wafer_block=4"]),
    ("tests/cli/data/wafer_cnn_padded.json", []),
    ("tests/cli/data/wafer_conv1d.json", []),
]


def run(scenario, out, sets, *flags):
    args = [tessera, "run", scenario, "-q", "--out", out, *flags]
    for s in sets + ["outputs.heatmap=false", "trace.detail=none"]:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


checked = 0
with tempfile.TemporaryDirectory() as t:
    for scenario, sets in CASES:
        # The run without a fault passes and emits the layout: one rectangle per kernel, named
        # k<l>.<node>, whose program declares W<l>.
        em = os.path.join(t, "em")
        rc, log = run(scenario, em, sets, "--emit-program")
        assert rc == 0, (scenario, log)
        with open(os.path.join(em, "layout.json")) as f:
            rects = json.load(f)["rects"]
        kernels = 0
        for r in rects:
            m = re.match(r"k(\d+)\.", r["name"])
            if not m:
                continue
            l = int(m.group(1))
            with open(os.path.join(em, r["program"])) as f:
                d = re.search(r"^\.data W%d (\w+) (\d+)" % l, f.read(), re.M)
            assert d, (scenario, r["name"])
            bit = 30 if d.group(1) == "f32" else 14  # the exponent's top bit (f16, bf16, cbf16: 14)
            n = min(int(d.group(2)), 64)
            fault = [{"kind": "sram_bit_flip", "pe": [r["x"], r["y"]], "array": "W%d" % l, "element": e, "bit": bit} for e in range(n)]
            out = os.path.join(t, "k%d" % l)
            rc, log = run(scenario, out, sets + ["run.faults=" + json.dumps(fault)])
            assert rc == 1, (scenario, r["name"], rc, log)
            assert "check failed" in log, (scenario, r["name"], log)
            kernels += 1
        assert kernels >= 3, (scenario, kernels)
        checked += kernels
        print("%s: a fault in each of %d kernels' weights fails the output check" % (scenario, kernels))
print("wafer-fault-every-kernel-ok (%d kernels)" % checked)
