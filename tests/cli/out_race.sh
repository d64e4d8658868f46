#!/usr/bin/env bash
# out_race.sh TESSERA DATA WORK: runs sharing a parent of --out that none of them found there race
# each other: a failed run removes the parents it created when they are empty, while a run beside
# it has just found them. Every run must still end as it would alone: the failing ones exit 2 with
# their own error (not "--out: cannot create"), the others exit 0 with their outputs.
set -u
tessera=$1; data=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
for round in $(seq 20); do
  rm -rf "$work"
  pids=()
  for i in 1 2 3 4 5 6; do
    "$tessera" run "$data/huge_relu.json" --out "$work/shared/bad$i" >"$work.bad$i.log" 2>&1 & pids+=($!)
    "$tessera" run "$data/mlp_ref.json" --out "$work/shared/good$i" >"$work.good$i.log" 2>&1 & pids+=($!)
  done
  codes=()
  for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
  for i in 1 2 3 4 5 6; do
    grep -q "^error: /run/host_memory" "$work.bad$i.log" || { cat "$work.bad$i.log"; fail "round $round: bad$i did not fail on host memory"; }
    grep -q "^error:" "$work.good$i.log" && { cat "$work.good$i.log"; fail "round $round: good$i failed"; }
    [ -f "$work/shared/good$i/report.json" ] || fail "round $round: good$i wrote no report.json"
    [ ! -e "$work/shared/bad$i" ] || fail "round $round: the failed bad$i left its --out"
  done
  echo "round $round: exit codes ${codes[*]}"
  rm -f "$work".bad*.log "$work".good*.log
done
echo "out race: PASS"
