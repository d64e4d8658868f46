#!/usr/bin/env bash
# agree.sh CODE REGEX TESSERA OUT SCENARIO [ARGS...]: `tessera validate` and `tessera run --out OUT`
# on the same scenario and arguments must agree: both exit CODE (0 or 2), print the same error lines,
# and those match the extended REGEX (newlines folded). A run that fails leaves OUT as it was (here:
# not created) and no temporary directory beside it.
set -u
code=$1; regex=$2; tessera=$3; out=$4; shift 4
rm -rf "$out"
v=$("$tessera" validate "$@" 2>&1); vc=$?
r=$("$tessera" run "$@" --out "$out" 2>&1); rc=$?
printf -- '--- validate (exit %s):\n%s\n--- run (exit %s):\n%s\n' "$vc" "$v" "$rc" "$r"
fail() { echo "FAIL: $*"; exit 1; }
[ "$vc" = "$code" ] || fail "validate exited $vc, expected $code"
[ "$rc" = "$code" ] || fail "run exited $rc, expected $code"
ve=$(printf '%s\n' "$v" | grep '^error:'); re=$(printf '%s\n' "$r" | grep '^error:')
[ "$ve" = "$re" ] || fail "validate and run print different errors"
if [ "$code" != 0 ]; then
  printf '%s' "$ve" | tr '\n' ' ' | grep -Eq -- "$regex" || fail "errors do not match: $regex"
  [ ! -e "$out" ] || fail "the failed run created $out"
  leftovers=$(find "$(dirname "$out")" -maxdepth 1 -name ".$(basename "$out").tessera-*")
  [ -z "$leftovers" ] || fail "temporary directories left: $leftovers"
else
  printf '%s' "$r" | tr '\n' ' ' | grep -Eq -- "$regex" || fail "run output does not match: $regex"
fi
echo PASS
