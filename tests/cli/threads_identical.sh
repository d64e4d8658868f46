#!/bin/bash
# Wafer runs on several host threads give the same files as on one (docs/wafer-model.md, "Threads"):
# each scenario runs with --threads 1 and then with each count given; report.json, the trace and
# every output .npy must be byte-identical, and host.json must say how many threads ran it.
#   threads_identical.sh TESSERA OUT_ROOT "2 3" SCENARIO[@key.path=value]...  (the suffix: one --set)
set -u
tessera=$1; root=$2; counts=$3; shift 3
fail=0
mkdir -p "$root"
for arg in "$@"; do
  sc=${arg%%@*}
  sets=()
  [ "$sc" != "$arg" ] && sets=(--set "${arg#*@}")
  name=$(echo "$arg" | sed 's|/|_|g; s|\.json||; s|[@=]|_|g')
  base=$root/$name
  rm -rf "$base"
  if ! "$tessera" run "$sc" "${sets[@]}" --quiet --out "$base/t1" --threads 1 >"$base.t1.log" 2>&1; then
    echo "FAIL $arg: the run on 1 thread failed"; cat "$base.t1.log"; fail=1; continue
  fi
  files=$(cd "$base/t1" && find . -name report.json -o -name "*.pftrace" -o -name "*.npy" -o -name "*.json" -path "*/checkpoints/*" | sort)
  for n in $counts; do
    if ! "$tessera" run "$sc" "${sets[@]}" --quiet --out "$base/t$n" --threads "$n" >"$base.t$n.log" 2>&1; then
      echo "FAIL $arg: the run on $n threads failed"; cat "$base.t$n.log"; fail=1; continue
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
