"""The Python API (python/tessera, docs/python.md), run by ctest as `python.api` with Debian's
/usr/bin/python3 and PYTHONPATH=BUILD/python, from the source tree. TESSERA_BIN is the CLI of the
same build, for comparisons; TESSERA_TEST_OUT a scratch directory."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time
import unittest

import numpy as np

import tessera

try:  # PyTorch is optional: CI machines need not have it, and the test says it skipped
    import torch
except ImportError:
    torch = None

BIN = os.environ["TESSERA_BIN"]
OUT = pathlib.Path(os.environ["TESSERA_TEST_OUT"])


def fresh(name):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    return d


class RunTest(unittest.TestCase):
    def assert_report_is_the_clis(self, cli, py):
        """report.json of a Python run with step closures equals the CLI's but for the records
        of the Python closures (and the output directory)."""
        a = json.loads((cli / "report.json").read_text().replace(str(cli), "OUT"))
        b = json.loads((py / "report.json").read_text().replace(str(py), "OUT"))
        for rec in b["steps"]:
            rec["closures"] = [c for c in rec.get("closures", []) if c["kind"] != "callback"]
        self.assertEqual(a, b)

    def test_run_matches_the_cli_byte_for_byte(self):
        cli, py = fresh("cli_quickstart"), fresh("py_quickstart")
        subprocess.run([BIN, "run", "scenarios/quickstart.json", "--out", str(cli), "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        r = tessera.run("scenarios/quickstart.json", out=py, quiet=True)
        self.assertTrue(r.passed)
        self.assertGreater(r.simulated_s, 0)
        self.assertGreater(r.predicted_s, 0)
        self.assertEqual(len(r.kernels), 3)
        self.assertEqual(r.outputs["y"].shape, (8, 10))
        self.assertEqual(r.outputs["y"].dtype, np.float32)
        # The same machine, the same figures: report.json equal but for the output directory.
        a = (cli / "report.json").read_text().replace(str(cli), "OUT")
        b = (py / "report.json").read_text().replace(str(py), "OUT")
        self.assertEqual(a, b)
        self.assertEqual((cli / "outputs" / "y.npy").read_bytes(), (py / "outputs" / "y.npy").read_bytes())
        self.assertTrue(r.trace.endswith("trace.pftrace") and os.path.exists(r.trace))
        self.assertIsNone(r.heatmap)  # wafer runs only

    def test_a_wafer_run_has_its_trace_and_heatmap_by_default(self):
        r = tessera.run("scenarios/wafer/micro/gemv_8x8_run.json", out=fresh("py_wafer"), quiet=True)
        self.assertTrue(r.passed)
        self.assertTrue(r.trace.endswith("trace.pftrace") and os.path.exists(r.trace))
        self.assertTrue(r.heatmap.endswith("heatmap.svg") and pathlib.Path(r.heatmap).read_text().startswith("<svg"))

    @unittest.skipUnless(shutil.which("mpirun"), "Open MPI is not installed")
    def test_a_wafer_run_on_two_mpi_ranks_is_the_plain_runs(self):
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        scen = "scenarios/wafer/validation/allreduce_2d_q8.json"
        one = tessera.run(scen, out=fresh("py_ranks1"), quiet=True)
        two = tessera.run(scen, out=fresh("py_ranks2"), quiet=True, ranks=2)
        self.assertTrue(two.passed)
        a = (OUT / "py_ranks1" / "report.json").read_text().replace(str(OUT / "py_ranks1"), "OUT")
        b = (OUT / "py_ranks2" / "report.json").read_text().replace(str(OUT / "py_ranks2"), "OUT")
        self.assertEqual(a, b)
        self.assertEqual(one.simulated_s, two.simulated_s)
        host = json.loads((OUT / "py_ranks2" / "host.json").read_text())
        self.assertEqual(host["threads"]["ranks"], 2)
        with self.assertRaises(tessera.InputError):
            tessera.run({"schema": "tessera.scenario/1"}, ranks=2)

    def test_many_runs_in_one_process_and_a_dict_scenario(self):
        # SystemC elaborates once per process: every run is a child of this one.
        doc = json.loads(pathlib.Path("scenarios/reference/mlp.json").read_text())
        doc["model"]["onnx"] = "scenarios/models/mlp.onnx"  # relative to the current directory
        doc["inputs"]["x"]["file"] = "scenarios/data/mlp/x.npy"
        doc["expect"]["outputs"]["y"]["file"] = "scenarios/data/mlp/y.npy"
        first = tessera.run(doc, out=fresh("dict1"), quiet=True)
        second = tessera.run(doc, out=fresh("dict2"), quiet=True)
        third = tessera.run("scenarios/neuroncore/mlp.json", out=fresh("nc_mlp"), quiet=True, numerics=False)
        self.assertTrue(first.passed and second.passed and third.passed)
        np.testing.assert_array_equal(first.outputs["y"], second.outputs["y"])
        np.testing.assert_allclose(first.outputs["y"], np.load("scenarios/data/mlp/y.npy"), rtol=1e-4, atol=1e-5)
        self.assertIsNone(first.simulated_s)  # the reference target has no timing
        self.assertEqual(third.outputs, {})

    def test_bad_input_raises_with_the_cli_pointer_and_hint(self):
        out = fresh("bad")
        with self.assertRaises(tessera.InputError) as cm:
            tessera.run("scenarios/quickstart.json", out=out, set=["run.stpes=2"])
        e = cm.exception
        self.assertEqual(e.where, "--set run.stpes")
        self.assertIn("did you mean 'steps'", e.hint)
        self.assertFalse(out.exists())
        with self.assertRaises(tessera.InputError) as cm:
            tessera.run("tests/cli/data/three_mistakes.json")
        self.assertEqual(len(cm.exception.diagnostics), 3)
        cli = subprocess.run([BIN, "validate", "tests/cli/data/three_mistakes.json"], capture_output=True, text=True)
        cli_lines = [l[len("error: "):] for l in cli.stderr.splitlines() if l.startswith("error: ")]
        self.assertEqual(cli_lines[0], "3 problems:")
        self.assertEqual(str(cm.exception), "\n".join(cli_lines[1:]))

    def test_validate(self):
        checked = tessera.validate("scenarios/quickstart.json")
        self.assertTrue(any("compiled 3 kernels" in c for c in checked), checked)
        with self.assertRaises(tessera.InputError):
            tessera.validate("scenarios/quickstart.json", set=["target.kind=tpu"])

    def test_ctrl_c_stops_the_run_and_leaves_out_as_it_was(self):
        out = fresh("interrupted")
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            tessera.run("tests/cli/data/long_run.json", out=out, quiet=True)
        self.assertLess(time.monotonic() - t0, 5.0)  # the run takes about 9 s
        self.assertFalse(out.exists())
        self.assertEqual([p for p in OUT.iterdir() if p.name.startswith(".interrupted.tessera-")], [])

    def test_session_step_closures_see_the_machines_values(self):
        sets = ["run.activation_steps=1", "run.checkpoint_steps=10"]
        cli, py = fresh("cli_train"), fresh("py_train")
        subprocess.run([BIN, "run", "scenarios/neuroncore/train/train_mlp_sgd.json", "--out", str(cli), "--quiet"]
                       + [a for kv in sets for a in ("--set", kv)], check=True, stdout=subprocess.DEVNULL)
        s = tessera.Session("scenarios/neuroncore/train/train_mlp_sgd.json", out=py, set=sets, quiet=True)
        seen, at_checkpoints = [], []

        @s.step_closure("loss", "step")
        def record(loss, step):
            self.assertEqual(loss.shape, ())
            seen.append((int(step), float(loss)))

        @s.checkpoint_closure("loss")
        def checkpoint(loss):
            at_checkpoints.append(float(loss))

        r = s.run()
        self.assertTrue(r.passed)
        steps = r.json["steps"]
        self.assertEqual(len(seen), len(steps))  # every step is an activation step here
        for (step, loss), rec in zip(seen, steps):
            self.assertEqual(step, rec["step"])
            self.assertEqual(loss, rec["loss"])  # the machine's fp32 loss, exactly
        self.assertEqual(len(at_checkpoints), 3)  # steps 9, 19 and the last
        # The closures ran in this interpreter and the report is the CLI's but for their records.
        self.assert_report_is_the_clis(cli, py)

    def test_the_stock_mlp_trains_20_steps_with_a_python_closure(self):
        # The zoo's MLP as torch.onnx.export writes it, SGD on trn1: the closure sees the machine's
        # loss on each activation step, PyTorch's (expect.losses) within 1e-3, and the report is the CLI's.
        scenario = "scenarios/zoo/train_mlp_sgd/neuroncore.json"
        cli, py = fresh("cli_zoo_mlp"), fresh("py_zoo_mlp")
        subprocess.run([BIN, "run", scenario, "--out", str(cli), "--quiet"], check=True, stdout=subprocess.DEVNULL)
        s = tessera.Session(scenario, out=py, quiet=True)
        seen = []

        @s.step_closure("loss", "step")
        def record(loss, step):
            seen.append((int(step), float(loss)))

        r = s.run()
        self.assertTrue(r.passed)
        self.assertEqual(len(r.steps), 20)
        activation = [rec for rec in r.steps if rec["activation"]]
        self.assertEqual(seen, [(rec["step"], rec["loss"]) for rec in activation])
        want = np.load("scenarios/zoo/train_mlp_sgd/losses_sgd.npy")
        np.testing.assert_allclose([l for _, l in seen], want[[st for st, _ in seen]], rtol=1e-3)
        self.assert_report_is_the_clis(cli, py)

    def test_a_closure_stops_training_on_a_condition(self):
        # Train until the loss falls below a threshold; the losses are the CLI's for as many steps.
        s = tessera.Session("scenarios/neuroncore/train/train_mlp_sgd.json", out=fresh("py_stop"), quiet=True,
                            set=["run.activation_steps=1"])
        losses = []

        @s.step_closure("loss")
        def until(loss):
            losses.append(float(loss))
            if len(losses) >= 3 and losses[-1] < 0.98 * losses[0]:
                tessera.stop()

        r = s.run()
        self.assertTrue(r.passed)
        n = len(losses)
        self.assertLess(n, 25)
        self.assertEqual(r.json["training"]["stopped_after_step"], n - 1)
        self.assertEqual([rec["loss"] for rec in r.steps], losses)
        # The first n steps of the CLI's whole run (the same per-step inputs) have the same losses,
        # and the stopped run's final weights passed their check against the reference executor.
        cli = fresh("cli_stop")
        subprocess.run([BIN, "run", "scenarios/neuroncore/train/train_mlp_sgd.json", "--out", str(cli), "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        want = json.loads((cli / "report.json").read_text())
        self.assertEqual([rec["loss"] for rec in want["steps"]][:n], losses)
        states = [o for o in r.json["outputs"] if o.get("state")]
        self.assertTrue(states and all(o["pass"] for o in states))

    def test_an_exception_in_a_closure_stops_the_run(self):
        out = fresh("closure_raises")
        s = tessera.Session("scenarios/neuroncore/train/train_mlp_sgd.json", out=out, quiet=True)
        calls = []

        @s.step_closure("loss")
        def explode(loss):
            calls.append(float(loss))
            if len(calls) == 2:
                raise ValueError("enough")

        with self.assertRaisesRegex(ValueError, "enough"):
            s.run()
        self.assertEqual(len(calls), 2)
        self.assertFalse(out.exists())

    @unittest.skipUnless(torch is not None, "PyTorch is not installed")
    def test_from_torch_three_lines(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        x = torch.randn(8, 16)
        for precision in ("bf16", "fp32"):
            scenario = tessera.from_torch(model, x, precision=precision, name="seq_" + precision,
                                          out_dir=OUT / ("from_torch_" + precision))
            r = tessera.run(scenario, out=fresh("from_torch_run_" + precision), quiet=True)
            self.assertTrue(r.passed, r.json["checks"])
            self.assertGreater(r.predicted_s, 0)
            self.assertGreater(r.simulated_s, 0)
            tol = scenario["expect"]["outputs"]["y"]
            with torch.no_grad():
                want = model(x).numpy()
            np.testing.assert_allclose(r.outputs["y"], want, rtol=tol["rtol"], atol=tol["atol"])
            self.assertEqual(r.json["target"]["kind"], "neuroncore")

    @unittest.skipUnless(torch is not None, "PyTorch is not installed")
    def test_from_torch_training(self):
        # The same module trained on the machine and in PyTorch: every step's loss as PyTorch's.
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        before = [p.detach().clone() for p in model.parameters()]
        x, t = torch.randn(8, 8), torch.randn(8, 4)
        for target in ("neuroncore", "wafer"):
            sc = tessera.from_torch(model, x, target=target, name="train_" + target, out_dir=OUT / ("from_torch_train_" + target),
                                    training={"target": t, "loss": "mse", "optimizer": {"kind": "sgd", "learning_rate": 0.1}, "steps": 6})
            r = tessera.run(sc, out=fresh("from_torch_train_run_" + target), quiet=True)
            self.assertTrue(r.passed, r.json["checks"])
            self.assertEqual(len(r.steps), 6)
            want = np.load(sc["expect"]["losses"]["file"])
            got = np.array([s["loss"] for s in r.steps], dtype=np.float32)
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
            self.assertLess(want[-1], want[0])  # it learns
        for p, q in zip(model.parameters(), before):  # the user's module is left as it was
            self.assertTrue(torch.equal(p, q))
        # Cross-entropy with Adam and a batch per step, on the reference target.
        xs = torch.randn(4, 8, 8)
        ts = torch.nn.functional.one_hot(torch.randint(0, 4, (4, 8)), 4).float()
        sc = tessera.from_torch(model, x, target="reference", name="train_ce", out_dir=OUT / "from_torch_train_ce",
                                training={"target": ts, "inputs": xs, "loss": "cross_entropy", "optimizer": "adam", "steps": 4})
        self.assertEqual(sc["training"], {"loss": "softmax_cross_entropy", "optimizer": {"kind": "adam", "learning_rate": 0.01}})
        r = tessera.run(sc, out=fresh("from_torch_train_ce_run"), quiet=True)
        self.assertTrue(r.passed, r.json["checks"])
        with self.assertRaises(ValueError):
            tessera.from_torch(model, x, training={"target": torch.zeros(3)})

    def test_params_as_the_cli_lists_them(self):
        rows = tessera.params("trn1")
        cli = subprocess.run([BIN, "params", "trn1"], capture_output=True, text=True, check=True).stdout
        self.assertGreater(len(rows), 10)
        for p in rows:
            line = next(l for l in cli.splitlines() if l.split() and l.split()[0] == p["name"])
            self.assertIn(p["text"], line)
            self.assertIn("[" + p["source"] + "]", line)
        with self.assertRaises(tessera.InputError) as cm:
            tessera.params("trn3")
        self.assertIn("did you mean", cm.exception.hint)

    def test_compare(self):
        out = fresh("compare")
        c = tessera.compare("scenarios/quickstart.json", "scenarios/reference/mlp.json", out=out, jobs=2)
        self.assertEqual(c["schema"], "tessera.compare/1")
        by_name = {s["name"]: s for s in c["scenarios"]}
        self.assertEqual(set(by_name), {"quickstart", "mlp-reference"})
        self.assertEqual(by_name["quickstart"]["status"], "pass")
        self.assertEqual(len(by_name["quickstart"]["kernels"]), 3)
        self.assertTrue((out / "quickstart" / "report.json").exists())
        again = tessera.compare("scenarios/quickstart.json", out=out)
        self.assertEqual(again["scenarios"][0]["origin"], "reused")
        # A scenario that cannot run is a row with its error; a path that is not there is bad input.
        bad = tessera.compare("scenarios/quickstart.json", out=out, set=["run.stpes=2"])
        self.assertEqual(bad["scenarios"][0]["status"], "error")
        self.assertIn("did you mean 'steps'", bad["scenarios"][0]["detail"])
        with self.assertRaises(tessera.InputError) as cm:
            tessera.compare("scenarios/no_such_scenario.json", out=out)
        self.assertIn("no_such_scenario.json: no such file or directory", str(cm.exception))

    def test_sweep(self):
        out = fresh("sweep")
        sw = tessera.sweep("scenarios/neuroncore/mlp.json", {"target.params.dma.engine_bandwidth": ["8.5GB/s", "17GB/s"],
                                                              "precision.compute": ["bf16", "fp32"]},
                           out=out, jobs=2, plot=out / "grid.svg")
        self.assertEqual(sw["schema"], "tessera.sweep/1")
        self.assertEqual([g["key"] for g in sw["grid"]], ["target.params.dma.engine_bandwidth", "precision.compute"])
        self.assertEqual(len(sw["points"]), 4)
        self.assertEqual(sw["points"][1]["params"], {"target.params.dma.engine_bandwidth": "8.5GB/s", "precision.compute": "fp32"})
        sim = {(p["params"]["target.params.dma.engine_bandwidth"], p["params"]["precision.compute"]): p["result"]["simulated_s"]
               for p in sw["points"]}
        self.assertLess(sim[("17GB/s", "bf16")], sim[("8.5GB/s", "bf16")])  # faster DMA engines, faster run
        self.assertLess(sim[("17GB/s", "bf16")], sim[("17GB/s", "fp32")])
        self.assertTrue((out / "grid.svg").exists())
        again = tessera.sweep("scenarios/neuroncore/mlp.json", {"target.params.dma.engine_bandwidth": ["8.5GB/s", "17GB/s"],
                                                                 "precision.compute": ["bf16", "fp32"]}, out=out)
        self.assertEqual({p["result"]["origin"] for p in again["points"]}, {"reused"})
        with self.assertRaises(tessera.InputError) as cm:
            tessera.sweep("scenarios/neuroncore/mlp.json", {"run.stpes": [1, 2]}, out=out)
        self.assertIn("every point", str(cm.exception))
        # A listed set with a grid over it: 2 sets x 2 precisions.
        ls = tessera.sweep("scenarios/neuroncore/mlp.json", {"precision.compute": ["bf16", "fp32"]}, out=out,
                           points=[{"target.params.dma.engine_bandwidth": "8.5GB/s", "target.params.hbm.bandwidth": "205GB/s"},
                                   {"target.params.dma.engine_bandwidth": "17GB/s", "target.params.hbm.bandwidth": "410GB/s"}])
        self.assertEqual(len(ls["points"]), 4)
        self.assertEqual(ls["points"][3]["params"], {"target.params.dma.engine_bandwidth": "17GB/s", "target.params.hbm.bandwidth": "410GB/s",
                                                     "precision.compute": "fp32"})

    def test_version(self):
        cli = subprocess.run([BIN, "version"], capture_output=True, text=True, check=True).stdout
        self.assertIn("tessera " + tessera.__version__ + "\n", cli)
        self.assertIn("commit: " + tessera.__commit__ + "\n", cli)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    unittest.main(verbosity=2)
