#!/usr/bin/env bash
# sigint.sh TESSERA SCENARIO OUTDIR [SIGNAL]: starts `tessera run SCENARIO --out OUTDIR`, sends
# SIGNAL (default INT; TERM for SIGTERM) after 0.5 s and checks that the run stops promptly with exit
# code 130 (143 for SIGTERM), says so on stderr, and leaves OUTDIR absent and no temporary directory
# beside it.
set -u
tessera=$1; scenario=$2; out=$3; sig=${4:-INT}
want=130; said="interrupted (SIGINT)"
[ "$sig" = TERM ] && { want=143; said="terminated (SIGTERM)"; }
rm -rf "$out"
mkdir -p "$(dirname "$out")"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "--- stderr:"; cat "$err"; echo "FAIL: $*"; exit 1; }

stdout=$(mktemp)
trap 'rm -f "$err" "$stdout"' EXIT
"$tessera" run "$scenario" --out "$out" >"$stdout" 2>"$err" &
pid=$!
sleep 0.5
kill -0 "$pid" 2>/dev/null || fail "the run ended before the signal was sent (the scenario is too short)"
kill -"$sig" "$pid"
t0=$(date +%s%N)
# The run polls the flag between simulation slices: it must stop well before it would finish.
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  fail "still running 5 s after SIG$sig"
fi
wait "$pid"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))

