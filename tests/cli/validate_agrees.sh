#!/usr/bin/env bash
# validate_agrees.sh TESSERA SRC OUT_ROOT: for every golden test of `tessera run` that exits 2 (bad
# input), `tessera validate` with the same arguments must exit 2 with the same error
# lines: validate runs every check run makes before it simulates (docs/reliability.md). The tests
# whose error only a simulation can find are listed below with the reason.
set -u
tessera=$1; src=$2; out_root=$3
declare -A only_by_simulating=(
  [nc_deadlock]="a semaphore wait that no bundle satisfies: found when the core runs"
  [wafer_fault_drop_wavelet]="a deadlock caused by a dropped wavelet: found when the fabric runs"
  [wafer_stream_bad_reduce]="a port collects 32 wavelets for an 8-element tensor: counted when the fabric runs"
)
re() { printf '%s' "$1" | sed -e 's/[][\.*^$+?(){}|/]/\\&/g'; }
filter() { sed -E -e "s|$(re "$out_root")|<OUT>|g" -e "s|$(re "$src")|<SRC>|g" -f "$src/tests/cli/golden.filter"; }
checked=0 failed=0
for g in "$src"/tests/cli/golden/*.out; do
  name=$(basename "$g" .out)
  first=$(head -1 "$g")
  [[ $first == '$ tessera run '* ]] || continue
  grep -qx '\[exit 2\]' "$g" || continue
  if [ -n "${only_by_simulating[$name]+x}" ]; then
    echo "skip $name: ${only_by_simulating[$name]}"
    continue
  fi
  cmd=${first#'$ tessera run '}
  cmd=${cmd//<SRC>/$src}
  cmd=${cmd//<OUT>/$out_root}
  eval "args=($cmd)"
  # validate takes --out too (it checks that run could write there).
  v=$(cd "$src" && "$tessera" validate "${args[@]}" 2>&1); vc=$?
  want=$(grep '^error:' "$g")
  got=$(printf '%s\n' "$v" | filter | grep '^error:')
  checked=$((checked + 1))
  if [ "$vc" != 2 ] || [ "$got" != "$want" ]; then
    failed=$((failed + 1))
    echo "FAIL $name: validate exited $vc"
    diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | sed 's/^/  /'
  else
    echo "ok   $name"
  fi
done
echo "$checked bad-input runs checked, $failed where validate disagrees"
[ "$failed" = 0 ] && [ "$checked" -gt 0 ] && echo "validate agrees with run: PASS"
