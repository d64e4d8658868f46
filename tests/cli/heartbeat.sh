#!/usr/bin/env bash
# The heartbeat of long runs (sim/console.hpp Heartbeat) and host.json's phase times. The first line
# is due after TESSERA_HEARTBEAT_S seconds (2 by default), so short runs show it here.
# Usage: heartbeat.sh TESSERA
set -eu
tessera=$1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The wafer: simulated time, share of the prediction, hops per second, wall time, ETA.
TESSERA_HEARTBEAT_S=0.05 "$tessera" run scenarios/wafer/scaling/gemv_4096_64x64.json --out "$T/w" > /dev/null 2> "$T/w.err"
grep -Eq '^progress: simulating: [0-9.]+ us simulated \([0-9]+% of the predicted 7.141 us\), [0-9.]+ M hops/s, [0-9.]+ s' "$T/w.err" || { cat "$T/w.err"; fail "no wafer heartbeat"; }
cp "$T/w/report.json" "$T/with.json"
# -q silences it; the report does not change with it.
TESSERA_HEARTBEAT_S=0.05 "$tessera" run scenarios/wafer/scaling/gemv_4096_64x64.json -q --out "$T/w" > /dev/null 2> "$T/q.err"
! grep -q progress "$T/q.err" || fail "-q printed a heartbeat"
cmp -s "$T/w/report.json" "$T/with.json" || fail "the report changed with the heartbeat"
# The NeuronCore (between simulation slices): no work rate, the share of the prediction.
TESSERA_HEARTBEAT_S=0.005 "$tessera" run scenarios/neuroncore/nki_matmul/1_tiled.json --set "model.graph.inputs.lhsT.shape=[1024,512]" \
  --set "model.graph.inputs.rhs.shape=[1024,1024]" --out "$T/n" > /dev/null 2> "$T/n.err"
grep -Eq '^progress: simulating: [0-9.]+ us simulated \([0-9]+% of the predicted [0-9.]+ us\), [0-9.]+ s' "$T/n.err" || { cat "$T/n.err"; fail "no NeuronCore heartbeat"; }
# host.json: wall seconds per phase.
for p in load compile reference elaborate simulate check; do
  grep -Eq "\"$p\": [0-9.e-]+" "$T/n/host.json" || { cat "$T/n/host.json"; fail "host.json has no phase $p"; }
done
echo "heartbeat: PASS"
