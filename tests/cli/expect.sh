#!/usr/bin/env bash
# expect.sh EXIT_CODE REGEX COMMAND...: runs COMMAND, passes when it exits with EXIT_CODE and its
# combined stdout+stderr (newlines folded to spaces) matches the extended REGEX.
set -u
want=$1; regex=$2; shift 2
out=$("$@" 2>&1); got=$?
flat=$(printf '%s' "$out" | tr '\n' ' ')
printf '%s\n' "$out"
if [ "$got" != "$want" ]; then echo "FAIL: exit code $got, expected $want"; exit 1; fi
if ! printf '%s' "$flat" | grep -Eq -- "$regex"; then echo "FAIL: output does not match: $regex"; exit 1; fi
echo "PASS"
