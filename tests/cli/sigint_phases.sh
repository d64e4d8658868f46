#!/usr/bin/env bash
# sigint_phases.sh TESSERA OUT DELAY_MS SCENARIO [ARGS...]: SIGINT in every phase of a run
# (load, inputs, compile, reference, elaborate, simulate, check, write), DELAY_MS after the phase
# begins (TESSERA_INTERRUPT_AT, isa/interrupt.hpp): each run must exit 130 within 1 s of the signal,
# say so, and leave --out (an earlier run's outputs) byte for byte as it was, with no temporary
# directory beside it. Prints one line per phase with the measured stop time. PHASES="a b:MS" picks
# phases (and a delay for one).
set -u
export TESSERA_REFERENCE_CACHE=0  # the reference phase must compute, not read a cached result
tessera=$1; out=$2; delay=$3; shift 3
d=$out/prev
rm -rf "$out"; mkdir -p "$d"
printf 'The output directory of a tessera run.\n' > "$d/.tessera-run"
printf '{"schema": "tessera.report/1", "note": "an earlier run"}\n' > "$d/report.json"
snap() { (cd "$d" && find . -type f | sort | xargs sha256sum); }
before=$(snap)
err=$(mktemp); trap 'rm -f "$err"' EXIT
fail() { echo "--- stderr:"; cat "$err"; echo "FAIL: $*"; exit 1; }
for spec in ${PHASES:-load inputs compile reference elaborate simulate check write}; do
  phase=${spec%%:*}; ms_after=$delay
  [ "$spec" = "$phase" ] || ms_after=${spec#*:}   # PHASES="reference:300 write:0": a delay per phase
  t0=$(date +%s%N)
  TESSERA_INTERRUPT_AT=$phase:$ms_after "$tessera" run "$@" --out "$d" >/dev/null 2>"$err"; rc=$?
  wall=$(( ($(date +%s%N) - t0) / 1000000 ))
  grep -q "phase $phase: sending SIGINT" "$err" || fail "$phase: the run never entered phase $phase"
  [ "$rc" = 130 ] || fail "$phase: exit $rc, expected 130"
  grep -q "interrupted (SIGINT) during" "$err" || fail "$phase: stderr does not say it was interrupted"
  ms=$(sed -n 's/.*stopped \([0-9]*\) ms after the signal.*/\1/p' "$err")
  [ -n "$ms" ] || fail "$phase: no stop time"
  [ "$ms" -lt 1000 ] || fail "$phase: stopped $ms ms after the signal (more than 1 s)"
  [ "$(snap)" = "$before" ] || fail "$phase: --out changed"
  left=$(find "$out" -maxdepth 1 -name '.prev.tessera-*')
  [ -z "$left" ] || fail "$phase: temporary directories left: $left"
  echo "$phase: exit 130, stopped $ms ms after the signal ($(grep -o 'during [a-z]*' "$err" | head -1)), run took $wall ms, --out untouched"
done
echo "sigint in every phase: PASS"
