#!/bin/bash
# Wafer runs on several host threads give the same files as on one (docs/wafer-model.md, "Threads"):
# each scenario runs with --threads 1 and then with each count given; report.json, the trace and
# every output .npy must be byte-identical, and host.json must say how many threads ran it. A run may
# fail its checks (a fault injected): its exit code must then be the same on every count; a run that
# stops with an error (a deadlock) writes no report: its words (--quiet: the diagnostics) must be.
#   threads_identical.sh TESSERA OUT_ROOT "2 3" SCENARIO[@key.path=value]...  (the suffix: one --set)
set -u
tessera=$1; root=$2; counts=$3; shift 3
fail=0
mkdir -p "$root"
for arg in "$@"; do
  sc=${arg%%@*}
  sets=()
  [ "$sc" != "$arg" ] && sets=(--set "${arg#*@}")
  name=$(echo "$arg" | md5sum | cut -c1-8)_$(basename "$sc" .json)
  base=$root/$name
  rm -rf "$base"
  "$tessera" run "$sc" "${sets[@]}" --quiet --out "$base/t1" --threads 1 >"$base.t1.log" 2>&1
  rc1=$?
  if [ $rc1 -gt 2 ] || { [ $rc1 -lt 2 ] && [ ! -f "$base/t1/report.json" ]; }; then
    echo "FAIL $arg: the run on 1 thread failed (exit $rc1)"; cat "$base.t1.log"; fail=1; continue
  fi
  files=$(cd "$base/t1" && find . -name report.json -o -name "*.pftrace" -o -name "*.npy" -o -name "*.json" -path "*/checkpoints/*" | sort)
  for n in $counts; do
    "$tessera" run "$sc" "${sets[@]}" --quiet --out "$base/t$n" --threads "$n" >"$base.t$n.log" 2>&1
    rc=$?
    if [ $rc != $rc1 ]; then
      echo "FAIL $arg: exit $rc on $n threads, $rc1 on one"; cat "$base.t$n.log"; fail=1; continue
    fi
    if [ $rc1 = 2 ]; then
      if cmp -s "$base.t1.log" "$base.t$n.log"; then echo "ok   $arg: the same error on $n threads"; else echo "FAIL $arg: another error on $n threads"; diff "$base.t1.log" "$base.t$n.log" | head; fail=1; fi
      continue
    fi
    used=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('threads', {}).get('used', '?'))" "$base/t$n/host.json")
    same=1
    for f in $files; do
      cmp -s "$base/t1/$f" "$base/t$n/$f" || { echo "FAIL $arg: $f differs on $n threads (used $used)"; same=0; fail=1; }
    done
    [ $same = 1 ] && echo "ok   $arg: $(echo $files | wc -w) files identical on $n threads (used $used)"
  done
done
[ $fail = 0 ] && echo "threads identical: PASS"
exit $fail
