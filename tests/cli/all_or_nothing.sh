#!/usr/bin/env bash
# all_or_nothing.sh TESSERA DATA OUT: a run's outputs are all or nothing. A run that fails (bad input,
# exit 2) leaves an earlier run's directory byte for byte as it was; a run that finishes (exit 0, or
# 1 for a failed check) replaces the directory as a whole (nothing of the earlier run left beside
# it); no temporary directory is left behind; one left by a killed run is removed by the next run.
set -u
tessera=$1; data=$2; out=$3
d=$out/run
rm -rf "$out"; mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
snap() { (cd "$d" && find . -type f | sort | xargs sha256sum); }
tmps() { find "$out" -maxdepth 1 -name '.run.tessera-*'; }

"$tessera" run "$data/mlp_ref.json" -q --out "$d" || fail "the first run failed"
before=$(snap)
"$tessera" run "$data/mlp_ref.json" -q --set inputs.x.file=x_truncated.npy --out "$d"; rc=$?
[ "$rc" = 2 ] || fail "a truncated input: exit $rc, expected 2"
[ "$(snap)" = "$before" ] || fail "a run with a truncated input changed $d"
"$tessera" run "$data/mlp_nc.json" -q --set inputs.x.file=x_f64.npy --out "$d"; rc=$?
[ "$rc" = 2 ] || fail "a float64 input: exit $rc, expected 2"
[ "$(snap)" = "$before" ] || fail "a NeuronCore run with a float64 input changed $d (compile_report.txt beside the old report?)"
[ -z "$(tmps)" ] || fail "temporary directories left: $(tmps)"

"$tessera" run "$data/mlp_nc.json" -q --out "$d" || fail "the NeuronCore run failed"
[ -f "$d/compile_report.txt" ] || fail "the NeuronCore run wrote no compile_report.txt"
"$tessera" run "$data/mlp_ref.json" -q --set expect.outputs.y.file=../compare/y_wrong.npy --out "$d" 2>/dev/null; rc=$?
[ "$rc" = 1 ] || fail "a failed check: exit $rc, expected 1"
grep -q '"pass": false' "$d/report.json" || fail "the failed check's report did not replace the earlier one"
[ ! -e "$d/compile_report.txt" ] || fail "the NeuronCore run's compile_report.txt was left beside the reference run's report"
[ -f "$d/.tessera-run" ] || fail "no marker file"

mkdir -p "$out/.run.tessera-tmp.999999/outputs"   # what a killed run (no such process) leaves
"$tessera" run "$data/mlp_ref.json" -q --out "$d" || fail "the last run failed"
[ -z "$(tmps)" ] || fail "a killed run's temporary directory was not removed: $(tmps)"
echo "all-or-nothing: PASS"
