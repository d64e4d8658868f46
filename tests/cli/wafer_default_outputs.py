"""A wafer run's default outputs (issue 23): trace.pftrace at the summary detail with flows between
the rectangles' streams, heatmap.svg whose figures agree with the run's counters; both off on
request; the same bytes on a second run. Usage: wafer_default_outputs.py TESSERA ROOT."""
import json, os, subprocess, sys, tempfile
import xml.etree.ElementTree as ET

tessera, root = sys.argv[1], sys.argv[2]
os.chdir(root)


def run(scenario, out, *sets):
    args = [tessera, "run", scenario, "-q", "--out", out]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, check=True)
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)


def summary(trace):
    return subprocess.run([tessera, "trace-summary", trace], check=True, capture_output=True, text=True).stdout


with tempfile.TemporaryDirectory() as t:
    # A compiled pipelined layer: four rectangles, three streams between them.
    a = os.path.join(t, "a")
    rep = run("scenarios/wafer/transformer/transformer_layer_pipelined.json", a)
    assert rep["trace"]["file"] == "trace.pftrace" and rep["heatmap"]["file"] == "heatmap.svg", rep.keys()
    s = summary(os.path.join(a, "trace.pftrace"))
    assert " 3 flows" in s, s
    assert "PE (" not in s, s  # no per-PE tracks at the summary detail
    for want in ("phase red0", "send c6", "recv c6", "fabric / busy PEs", "fabric / link utilisation %", "kernels (simulated)"):
        assert want in s, (want, s)
    svg = ET.parse(os.path.join(a, "heatmap.svg")).getroot()
    texts = [e.text or "" for e in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert any(x.startswith("busy") for x in texts) and any(x.startswith("SRAM") for x in texts) and any(x.startswith("links") for x in texts), texts
    titles = [e.text for e in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert len(titles) == 3 * 4, titles  # each panel outlines the four rectangles
    # Every PE runs a program in the 8 x 8 GEMV: the mean busy fraction is the run's busy cycles
    # over PEs x cycles, the busiest link at most one wavelet a cycle.
    g = os.path.join(t, "g")
    rep = run("scenarios/wafer/micro/gemv_8x8_run.json", g, "trace.detail=summary")
    st, hm = rep["stats"], rep["heatmap"]
    want = st["busy_cycles"] / (st["program_pes"] * st["cycles"])
    assert abs(hm["busy_mean"] - want) < 1e-12, (hm, st)
    assert 0 < hm["busy_max"] <= 1 and 0 < hm["link_max"] <= 1 and 0 < hm["sram_mean"] <= hm["sram_max"] * (1 + 1e-12) and hm["sram_max"] <= 1, hm
    assert hm["block"] == 1
    # The same run again: byte-identical trace and heatmap.
    a2 = os.path.join(t, "a2")
    run("scenarios/wafer/transformer/transformer_layer_pipelined.json", a2)
    for f in ("trace.pftrace", "heatmap.svg"):
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(a2, f), "rb").read(), f
    # Off on request.
    n = os.path.join(t, "n")
    rep = run("scenarios/wafer/micro/gemv_8x8_run.json", n, "trace.detail=none", "outputs.heatmap=false")
    assert "trace" not in rep and "heatmap" not in rep, rep.keys()
    assert not os.path.exists(os.path.join(n, "trace.pftrace")) and not os.path.exists(os.path.join(n, "heatmap.svg")), os.listdir(n)
print("wafer-default-outputs-ok")
