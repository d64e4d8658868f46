#!/usr/bin/env bash
# sweep_sigint.sh TESSERA OUT: Ctrl-C during a sweep with more points than --jobs slots stops it
# (exit 130, within 2 s of the signal) instead of waiting for points it will not start.
set -u
tessera=$1 out=$2
rm -rf "$out"; mkdir -p "$out"
"$tessera" sweep scenarios/neuroncore/mlp.json --grid 'target.params.dma.engine_bandwidth=[8.5GB/s,17GB/s,27GB/s]' \
  --grid 'target.params.hbm.bandwidth=[205GB/s,410GB/s,820GB/s]' --grid 'precision.compute=[bf16,fp16,fp32]' \
  --out "$out/runs" --jobs 1 > "$out/stdout" 2> "$out/stderr" &
pid=$!
for _ in $(seq 1 300); do grep -q '^\[1/27\]' "$out/stderr" && break; sleep 0.02; done
grep -q '^\[1/27\]' "$out/stderr" || { echo "FAIL: no point finished"; kill -9 $pid; exit 1; }
t0=$(date +%s%N)
kill -INT $pid
for _ in $(seq 1 200); do kill -0 $pid 2>/dev/null || break; sleep 0.01; done
if kill -0 $pid 2>/dev/null; then echo "FAIL: still running 2 s after SIGINT"; kill -9 $pid; exit 1; fi
wait $pid; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 130 ] || { echo "FAIL: exit $rc, expected 130"; cat "$out/stderr"; exit 1; }
grep -q "interrupted (SIGINT)" "$out/stderr" || { echo "FAIL: stderr does not say it was interrupted"; exit 1; }
grep -q '^\[27/27\]' "$out/stderr" && { echo "FAIL: it ran every point"; exit 1; }
echo "sweep stopped $ms ms after SIGINT: PASS"
