#!/usr/bin/env bash
# compare.sh TESSERA OUTDIR: `tessera compare` end to end, from the source directory.
#  1. two NeuronCore micro scenarios (simulated + published, no prediction), the MLP on the
#     reference target (no timing) and tests/cli/data/compare (a run that fails its check, a run
#     that cannot start, a JSON file that is not a scenario) with --jobs 2 and --plot: the table,
#     the error rows, exit 1, an SVG with the "no points" note, no temporary files;
#  2. again: reports are reused (except the one that never ran), --format json parses;
#  3. --rerun, --format csv and markdown; a report.json given directly.
set -u
tessera=$1; out=$2
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$1 does not match: $2"; }; }
hasnt() { ! grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$1 matches: $2"; }; }

NC=scenarios/neuroncore/micro
args=("$NC/dma_32k_4part.json" "$NC/mm_bf16_back_to_back.json" scenarios/reference/mlp.json tests/cli/data/compare
      --out "$out/runs")

# 1. First run.
"$tessera" compare "${args[@]}" --jobs 2 --plot "$out/plot.svg" >"$out/1.out" 2>"$out/1.err"
rc=$?
cat "$out/1.out" "$out/1.err"
[ "$rc" = 1 ] || fail "exit code $rc, expected 1 (a check failed, a scenario could not run)"
has "$out/1.out" "^scenario +kernel +predicted +simulated +error +published +sim vs pub +status$"
# Sorted by scenario name.
order=$(awk 'NR>1 && NF {print $1}' "$out/1.out" | head -5 | tr '\n' ' ')
[ "$order" = "compare-broken-model compare-check-fails mlp-reference nc-micro-dma-32k nc-micro-mm-bf16 " ] ||
  fail "rows not sorted by scenario name: $order"
has "$out/1.out" "^compare-broken-model +- +- +- +- +- +- +ERROR: .*truncated.onnx: not a valid ONNX model"
has "$out/1.out" "^compare-check-fails +- .* FAIL: y: 80 elements outside rtol 0.0001 atol 1e-05 \(max abs error 0.242\)$"
has "$out/1.out" "^mlp-reference +- +- +- +- +- +- +ok$"
has "$out/1.out" "^nc-micro-dma-32k +dma_32k_4part +- +1\.[0-9]{3} us +- +1\.416 us +[+-][0-9.]+% +ok$"
has "$out/1.out" "^nc-micro-mm-bf16 +mm_bf16_back_to_back +- +11\.[0-9]{2} us +- +11\.70 us +[+-][0-9.]+% +ok$"
has "$out/1.out" "^predicted vs simulated, kernels: no kernel has both a prediction and a simulation \(2 kernels\)$"
has "$out/1.out" "^predicted vs simulated, scenario totals: "
has "$out/1.out" "^simulated vs published: MAPE [0-9.]+% over 2 of 5 scenarios, worst [+-][0-9.]+% \(nc-micro-"
has "$out/1.out" "^5 scenarios: 3 ok, 1 check failed, 1 could not run$"
hasnt "$out/1.out" "not_a_scenario"
has "$out/1.err" "running 5 scenarios \(--jobs 2\)"
has "$out/1.err" "warning: --plot: no kernel has both a prediction and a simulation"
[ -f "$out/runs/nc-micro-dma-32k/report.json" ] || fail "no report for nc-micro-dma-32k"
[ -f "$out/runs/compare-broken-model/run.log" ] || fail "no run.log for the scenario that could not run"
has "$out/plot.svg" "no kernel has both a prediction and a simulation"
has "$out/plot.svg" "</svg>"
[ "$(grep -c '<circle' "$out/plot.svg")" = 0 ] || fail "the plot has points"
leftovers=$(find "$out" -name '*.tmp.*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"

# 2. Again: up-to-date reports are reused; the scenario without a report runs again.
"$tessera" compare "${args[@]}" --format json >"$out/2.json" 2>"$out/2.err"
rc=$?
cat "$out/2.err"
[ "$rc" = 1 ] || fail "exit code $rc, expected 1"
[ "$(grep -c 'reusing' "$out/2.err")" = 4 ] || fail "expected 4 reused reports"
has "$out/2.err" "running 1 scenario "
has "$out/2.json" '"schema": "tessera.compare/1"'
has "$out/2.json" '"origin": "reused"'
if command -v python3 >/dev/null; then
  python3 - "$out/2.json" "$out/plot.svg" <<'EOF' || fail "json or svg does not parse"
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
names = [s["name"] for s in j["scenarios"]]
assert names == sorted(names), names
assert j["summary"]["scenarios"] == 5 and j["summary"]["errors"] == 1 and j["summary"]["check_failed"] == 1, j["summary"]
assert j["summary"]["simulated_vs_published"]["count"] == 2
assert j["summary"]["predicted_vs_simulated"]["count"] == 0
ET.parse(sys.argv[2])
print("json and svg parse")
EOF
fi

# 3. --rerun runs everything; csv and markdown.
"$tessera" compare "${args[@]}" --rerun --jobs 2 --format csv >"$out/3.csv" 2>"$out/3.err"
cat "$out/3.csv"
hasnt "$out/3.err" "reusing"
has "$out/3.err" "running 5 scenarios"
has "$out/3.err" "simulated vs published: MAPE"  # the summary goes to stderr with csv
has "$out/3.csv" "^scenario,kernel,row,op,target,predicted_s,simulated_s,error_pct,published_s,published_error_pct,published_source,status,detail$"
has "$out/3.csv" "^nc-micro-dma-32k,dma_32k_4part,kernel,program,neuroncore/trn2,,[0-9.e-]+,,,,,pass,$"
has "$out/3.csv" "^nc-micro-dma-32k,,total,,neuroncore/trn2,,[0-9.e-]+,,1.416e-06,[0-9.e-]+,\"neuroncore.md published measurements: DMA one engine, 32 KiB"
[ "$(wc -l <"$out/3.csv")" = 8 ] || fail "csv: expected a header, 2 kernel rows and 5 total rows"
"$tessera" compare "${args[@]}" --format markdown >"$out/4.md" 2>/dev/null
has "$out/4.md" "^\| scenario \| kernel \| predicted \| simulated \| error \| published \| sim vs pub \| status \|$"
has "$out/4.md" "^\| nc-micro-dma-32k \| dma_32k_4part \| - \| 1\.[0-9]{3} us \| - \| 1\.416 us \|"
has "$out/4.md" "^- simulated vs published: MAPE"

# A report given directly is read, not run.
"$tessera" compare "$out/runs/nc-micro-dma-32k/report.json" --format json >"$out/5.json" 2>"$out/5.err"
rc=$?
[ "$rc" = 0 ] || fail "exit code $rc for a report given directly"
has "$out/5.json" '"origin": "report"'
hasnt "$out/5.err" "running"
echo "PASS"
