"""tessera from Python: run scenarios on the simulated machines and read their results.

    import tessera
    r = tessera.run("scenarios/quickstart.json", out="out/py")
    print(r.predicted_s, r.simulated_s, r.outputs["y"].shape)

A run happens in a child process (SystemC elaborates once per process), with the same code and
output directory as `tessera run`; this process waits with the GIL released, and Ctrl-C stops the
run as it stops the CLI. Bad input raises InputError with the CLI's pointer and hint
(docs/python.md).
"""
import json as _json
import os as _os

from . import _tessera

__version__ = _tessera.version()
__commit__ = _tessera.commit()


class TesseraError(Exception):
    """Base of tessera's errors."""


class InputError(TesseraError):
    """Bad input: a scenario, model or input file that cannot be used as given (CLI exit 2).

    `diagnostics` lists every mistake: dicts with `where` (a JSON pointer, file, node, PE or
    instruction), `message` and `hint` (what to do); `where`, `message` and `hint` are the first's.
    """

    def __init__(self, diagnostics):
        self.diagnostics = diagnostics
        first = diagnostics[0] if diagnostics else {"where": "", "message": "", "hint": ""}
        self.where, self.message, self.hint = first["where"], first["message"], first["hint"]
        super().__init__("\n".join(d["text"] for d in diagnostics))


class CheckFailed(TesseraError):
    """A check stopped the run (an assert step closure; CLI exit 1). Failed output or latency
    checks do not raise: the run finishes and its Report has passed == False."""


class InternalError(TesseraError):
    """A bug in tessera (CLI exit 3): please report it with the scenario."""


class Report:
    """The results of a run, read from its output directory (report.json, outputs/*.npy)."""

    def __init__(self, out_dir):
        self.out_dir = _os.path.abspath(out_dir)
        with open(_os.path.join(self.out_dir, "report.json")) as f:
            self.json = _json.load(f)
        self._outputs = None

    @property
    def passed(self):
        """True when every check passed (outputs, latency, losses)."""
        return bool(self.json.get("pass", False))

    @property
    def predicted_s(self):
        return self.json["latency"]["predicted_s"]

    @property
    def simulated_s(self):
        return self.json["latency"]["simulated_s"]

    @property
    def error_pct(self):
        return self.json["latency"]["error_pct"]

    @property
    def kernels(self):
        """Per kernel: name, op, predicted_s, simulated_s, error_pct, cycles (machine targets)."""
        return self.json.get("kernels", [])

    @property
    def steps(self):
        return self.json.get("steps", [])

    @property
    def trace(self):
        """The trace's path (opens in ui.perfetto.dev), or None."""
        t = self.json.get("trace")
        f = t.get("file") if isinstance(t, dict) else None
        return _os.path.join(self.out_dir, f) if f else None

    @property
    def heatmap(self):
        """Wafer runs: the PE heatmap's path (heatmap.svg: busy, SRAM, link load per PE), or None."""
        h = self.json.get("heatmap")
        f = h.get("file") if isinstance(h, dict) else None
        return _os.path.join(self.out_dir, f) if f else None

    @property
    def outputs(self):
        """Graph outputs as numpy arrays, by name (as the machine computed them)."""
        if self._outputs is None:
            import numpy as np

            self._outputs = {}
            for o in self.json.get("outputs", []):
                f = o.get("file")
                if f and o.get("name") and not o.get("state") and o.get("against") != "reference":
                    self._outputs[o["name"]] = np.load(_os.path.join(self.out_dir, f))
        return self._outputs

    def __repr__(self):
        lat = ""
        if self.simulated_s is not None:
            lat = f", predicted {self.predicted_s}, simulated {self.simulated_s}"
        return f"<tessera.Report {self.json['scenario'].get('name')}: {'PASS' if self.passed else 'FAIL'}{lat}>"


def _request(scenario, set, numerics):
    sets = list(set or [])
    if not numerics:
        sets.append("run.numerics=false")
    if isinstance(scenario, dict):
        # Relative paths in a dict resolve against the current directory.
        return _json.dumps(scenario), True, _os.path.join(_os.getcwd(), "dict_scenario.json"), sets
    return _os.fspath(scenario), False, "", sets


def _raise_for(result):
    err = result.get("error")
    if err == "input":
        raise InputError(result["diagnostics"])
    if err == "interrupted":
        raise KeyboardInterrupt(result.get("message", "interrupted"))
    if err == "check":
        raise CheckFailed(result["message"])
    if err:  # "internal", or anything this package does not know
        raise InternalError(result.get("message", err) + " (please report this with the scenario)")


_stop = [False]


def stop():
    """Called inside a step closure: the run stops after this step (training runs; others run to
    their last step and warn). The report then has training.stopped_after_step."""
    _stop[0] = True


class Session:
    """A run with step closures written in Python (cerebras.pytorch's step closures, tessera's
    /step_closures in the scenario):

        s = tessera.Session("scenarios/neuroncore/train/train_mlp_sgd.json", out="out/s")
        losses = []

        @s.step_closure("loss", "step")
        def record(loss, step):
            losses.append(float(loss))

        report = s.run()

    A closure is called at the end of each activation step (run.activation_steps; a checkpoint
    closure on checkpoint steps) with the named tensors -- graph outputs as the machine holds them,
    or "step" -- as numpy arrays, in the order named. It runs here, in this interpreter (the machine
    waits for it); simulated time does not advance. An exception in a closure stops the run
    (nothing is written to `out`) and is raised from run(). A closure that calls tessera.stop()
    ends a training run after that step.
    """

    def __init__(self, scenario, *, out=None, set=None, numerics=True, quiet=False):
        self._request = _request(scenario, set, numerics)
        self._out = _os.fspath(out) if out else ""
        self._quiet = quiet
        self._closures = []

    def step_closure(self, *tensors, on_checkpoint=False):
        """Decorator: call the function with these tensors at the end of each activation step."""
        if not tensors:
            raise TypeError("step_closure names the tensors it receives, e.g. @s.step_closure('loss')")

        def register(fn):
            self._closures.append((getattr(fn, "__name__", "closure"), list(tensors), bool(on_checkpoint), fn))
            return fn

        return register

    def checkpoint_closure(self, *tensors):
        """Decorator: like step_closure, on checkpoint steps (run.checkpoint_steps)."""
        return self.step_closure(*tensors, on_checkpoint=True)

    def run(self):
        text, from_json, json_file, sets = self._request
        fns = [c[3] for c in self._closures]

        def dispatch(index, step, tensors):
            import io

            import numpy as np

            _stop[0] = False
            fns[index](*[np.load(io.BytesIO(b)) for _, b in tensors])
            stop_now, _stop[0] = _stop[0], False
            return stop_now

        result = _tessera.run(text, from_json, json_file, self._out, sets, False, self._quiet,
                              [(n, t, c) for n, t, c, _ in self._closures], dispatch)
        _raise_for(result)
        return Report(result["out_dir"])


def params(target_or_preset):
    """The hardware parameters of a target ("neuroncore", "wafer": declared defaults) or a preset
    ("trn1", "trn2", "wse2", "wse3"), as `tessera params` lists them: a list of dicts with name,
    value (SI base units; a list for lists), text ("2.8 GHz"), unit, range, description and source.
    Any of them can be overridden in a scenario under target.params, or with set=["target.params.NAME=..."]."""
    result = _tessera.params(target_or_preset)
    _raise_for(result)
    return result["params"]


def _tessera_command():
    """The `tessera` command of this package: TESSERA_BIN, else beside the package in the build
    tree (BUILD/tools/tessera) or the install (PREFIX/bin/tessera), else on PATH."""
    import shutil

    here = _os.path.dirname(_os.path.abspath(__file__))
    candidates = [_os.environ.get("TESSERA_BIN", ""),
                  _os.path.join(here, "..", "..", "tools", "tessera"),
                  _os.path.join(here, "..", "..", "..", "..", "bin", "tessera")]
    for c in candidates:
        if c and _os.access(c, _os.X_OK) and _os.path.isfile(c):
            return _os.path.normpath(c)
    found = shutil.which("tessera")
    if not found:
        raise InputError([{"where": "tessera.compare", "message": "the tessera command is not found",
                           "hint": "set TESSERA_BIN to it (e.g. build/release/tools/tessera)",
                           "text": "tessera.compare: the tessera command is not found (set TESSERA_BIN to it)"}])
    return found


def _run_json(verb, args):
    """Runs the tessera command `args` (its `verb` with --format json) and returns the document it
    prints (exit 0, or 1 when a scenario failed a check or could not run: that is in the document);
    exit 2 raises InputError with its messages, 130 KeyboardInterrupt, anything else InternalError."""
    import subprocess

    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode in (0, 1) and p.stdout.strip():
        return _json.loads(p.stdout)
    if p.returncode == 130:
        raise KeyboardInterrupt(f"tessera {verb} was interrupted")
    errors = [l[len("error: "):] for l in p.stderr.splitlines() if l.startswith("error: ")]
    errors = [e for e in errors if not (e.endswith(" problems:") and e.split()[0].isdigit())]
    if p.returncode == 2 and errors:
        raise InputError([{"where": "", "message": e, "hint": "", "text": e} for e in errors])
    raise InternalError(f"tessera {verb} exited {p.returncode}: {p.stderr.strip()[-2000:]}")


def _run_options(out, rerun, set, numerics):
    """The arguments compare and sweep share: --out, --rerun, --set, --no-numerics."""
    args = ["--out", _os.fspath(out)] if out else []
    if rerun:
        args.append("--rerun")
    for kv in set or []:
        args += ["--set", kv]
    if not numerics:
        args.append("--no-numerics")
    return args


def compare(*scenarios, jobs=1, out=None, rerun=False, set=None, numerics=True):
    """`tessera compare`: runs what is not yet run (each in its own process, `jobs` at once; reports
    under `out`, default out/compare, reused when up to date) and returns the comparison as a dict
    (schema tessera.compare/1: per scenario and kernel predicted, simulated and published latency,
    status; `summary` with MAPE and worst cases). Arguments are scenario files, report.json files
    or directories. A scenario that failed a check or could not run is in the result with its
    status; bad arguments raise InputError."""
    args = [_tessera_command(), "compare", *map(_os.fspath, scenarios), "--format", "json", "--jobs", str(jobs)]
    return _run_json("compare", args + _run_options(out, rerun, set, numerics))


def sweep(scenario, grid=None, jobs=1, out=None, rerun=False, set=None, numerics=True, plot=None, scatter=None, points=None):
    """`tessera sweep`: the scenario over the cartesian product of `grid` ({key path: [values]},
    added to the scenario's own sweep.grid; a key given here replaces the file's), each point run
    in its own process (`jobs` at once; reports under `out`, default out/sweep/<name>, reused when
    up to date). Returns the tessera.sweep/1 document as a dict: `grid`, one entry per point
    (`params` and its compare `result`) and compare's `summary`. `plot` / `scatter` write the SVGs
    of `--plot` / `--scatter`. `points` ([{key path: value, ...}, ...]) is a listed set of points
    whose fields go together, each run with every grid combination (`--points`). A point that
    failed a check or could not run is in the result with
    its status; a bad grid or a point that does not validate raises InputError (nothing runs)."""
    args = [_tessera_command(), "sweep", _os.fspath(scenario), "--format", "json", "--jobs", str(jobs)]
    for key, values in (grid or {}).items():
        args += ["--grid", key + "=" + _json.dumps(list(values))]
    if points:
        args += ["--points", _json.dumps(list(points))]
    args += _run_options(out, rerun, set, numerics)
    if plot:
        args += ["--plot", _os.fspath(plot)]
    if scatter:
        args += ["--scatter", _os.fspath(scatter)]
    return _run_json("sweep", args)


def from_torch(module, example_inputs, **kwargs):
    """An nn.Module to a scenario dict for run() (needs PyTorch; see tessera.torch_export)."""
    from .torch_export import from_torch as _from_torch

    return _from_torch(module, example_inputs, **kwargs)


def run(scenario, *, out=None, set=None, numerics=True, quiet=False, ranks=1):
    """Runs a scenario (a path, or a dict in the scenario format) like `tessera run`.

    out: the output directory (default out/<name>); set: ["key.path=value", ...] overrides, validated
    like the file; numerics=False times without tensor values; quiet: print only results and errors.
    ranks > 1: a wafer scenario's fabric split over that many MPI ranks by stripes of PE rows
    (`mpirun -n RANKS tessera run`, --oversubscribe past this machine's cores; docs/sweep.md), with
    the results of one process; a path only.
    Returns a Report (report.passed is False when an output, latency or loss check failed).
    """
    if ranks > 1:
        return _run_on_ranks(scenario, out, set, numerics, quiet, ranks)
    text, from_json, json_file, sets = _request(scenario, set, numerics)
    result = _tessera.run(text, from_json, json_file, _os.fspath(out) if out else "", sets, False, quiet, [], None)
    _raise_for(result)
    return Report(result["out_dir"])


def _run_on_ranks(scenario, out, set, numerics, quiet, ranks):
    """run(ranks=N): the CLI under mpirun (one run is N processes, which the forked child of
    run() cannot be)."""
    import shutil
    import subprocess
    import sys

    def bad(message, hint):
        raise InputError([{"where": "tessera.run", "message": message, "hint": hint, "text": f"tessera.run: {message} ({hint})"}])

    if isinstance(scenario, dict):
        bad("ranks > 1 takes a scenario file, not a dict", "write the scenario to a file")
    mpirun = shutil.which("mpirun")
    if not mpirun:
        bad("mpirun is not found", "install Open MPI (tools/bootstrap does: openmpi-bin)")
    if out is None:
        with open(scenario) as f:
            name = _json.load(f).get("name") or _os.path.splitext(_os.path.basename(scenario))[0]
        out = _os.path.join("out", name)
    args = [mpirun, "-n", str(int(ranks))]
    if int(ranks) > (_os.cpu_count() or 1):
        args.append("--oversubscribe")
    args += [_tessera_command(), "run", _os.fspath(scenario), "--out", _os.fspath(out)] + _run_options(None, False, set, numerics)
    if quiet:
        args.append("--quiet")
    p = subprocess.run(args, stderr=subprocess.PIPE, text=True)
    if not quiet or p.returncode not in (0, 1):
        sys.stderr.write(p.stderr)
    if p.returncode in (0, 1):
        return Report(out)
    if p.returncode == 130:
        raise KeyboardInterrupt("tessera run was interrupted")
    errors = [l[len("error: "):] for l in p.stderr.splitlines() if l.startswith("error: ")]
    if p.returncode == 2 and errors:
        raise InputError([{"where": "", "message": e, "hint": "", "text": e} for e in errors])
    raise InternalError(f"mpirun -n {ranks} tessera run exited {p.returncode}: {p.stderr.strip()[-2000:]}")


def validate(scenario, *, set=None, numerics=True, out=None):
    """Every check `run` makes before it simulates (`tessera validate`); returns what was checked,
    raises InputError with every mistake."""
    text, from_json, json_file, sets = _request(scenario, set, numerics)
    result = _tessera.run(text, from_json, json_file, _os.fspath(out) if out else "", sets, True, True, [], None)
    _raise_for(result)
    return result.get("checked", [])
