#!/usr/bin/env bash
# sigint.sh TESSERA SCENARIO OUTDIR: starts `tessera run SCENARIO --out OUTDIR`, sends SIGINT after
# 0.5 s and checks that the run stops promptly with exit code 130, says it was interrupted on
# stderr, and leaves neither a report.json nor a temporary (*.tmp.*) file in OUTDIR.
set -u
tessera=$1; scenario=$2; out=$3
rm -rf "$out"
mkdir -p "$out"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "--- stderr:"; cat "$err"; echo "FAIL: $*"; exit 1; }

"$tessera" run "$scenario" --out "$out" >/dev/null 2>"$err" &
pid=$!
sleep 0.5
kill -0 "$pid" 2>/dev/null || fail "the run ended before the signal was sent (the scenario is too short)"
kill -INT "$pid"
t0=$(date +%s%N)
# The run polls the flag between simulation slices: it must stop well before it would finish.
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  fail "still running 5 s after SIGINT"
fi
wait "$pid"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "exit code $rc, stopped ${ms} ms after SIGINT"
cat "$err"
[ "$rc" = 130 ] || fail "exit code $rc, expected 130"
grep -q "interrupted" "$err" || fail "stderr does not say the run was interrupted"
[ ! -e "$out/report.json" ] || fail "$out/report.json was written"
leftovers=$(find "$out" -name '*.tmp.*')
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"
echo "PASS"
