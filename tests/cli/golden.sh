#!/usr/bin/env bash
# golden.sh [--src DIR] [--build DIR] [--out-root DIR] NAME TESSERA [ARGS...]
#
# Runs `TESSERA ARGS...` in the current directory and compares what it printed with the committed
# golden file tests/cli/golden/NAME.out (tests/cli/README.md). The output compared is
#   $ tessera ARGS...
#   --- stdout
#   <stdout>
#   --- stderr
#   <stderr>
#   [exit N]
# after one filter: paths of this checkout become <OUT> (--out-root, where tests write their --out
# directories), <BUILD>, <SRC> and <TMP>, then tests/cli/golden.filter masks what changes from run
# to run (host wall times, host-memory estimates, ...). stdout and stderr are captured apart, so
# the file does not depend on how the two streams interleave.
#
# With TESSERA_UPDATE_GOLDEN=1 the golden file is written instead (tools/test --update-golden).
# An --out DIR inside --out-root is emptied first: every run starts from the same state (compare
# reuses the reports it finds there). The raw and filtered output of the last run stay in
# OUT-ROOT/golden-actual/ for inspection.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build="" out_root=""
while [ $# -gt 0 ]; do
  case $1 in
    --src) src=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out-root) out_root=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "usage: golden.sh [--src DIR] [--build DIR] [--out-root DIR] NAME TESSERA [ARGS...]" >&2; exit 2; }
name=$1 tessera=$2
shift 2
[ -n "$build" ] || build=$(cd "$(dirname "$tessera")/.." && pwd)
[ -n "$out_root" ] || out_root="$build/tests/cli"
golden="$here/golden/$name.out"
actual_dir="$out_root/golden-actual"
mkdir -p "$actual_dir"

# The same environment for every run: no colour, C locale, the scenarios of this checkout.
export LC_ALL=C NO_COLOR=1 TESSERA_HOME="$src"

# A literal path as a sed regex (ERE, '|' as the delimiter).
re() { printf '%s' "$1" | sed -e 's/[][\.*^$+?(){}|/]/\\&/g'; }
# Longest paths first: <OUT> lies in <BUILD>, which usually lies in <SRC>. Both the path as given
# and its physical form (symlinks resolved) are replaced.
path_rules=()
add_path() {
  local p=$1 tag=$2 phys
  [ -n "$p" ] || return 0
  path_rules+=(-e "s|$(re "$p")|<$tag>|g")
  phys=$(cd "$p" 2>/dev/null && pwd -P) || return 0
  [ "$phys" = "$p" ] || path_rules+=(-e "s|$(re "$phys")|<$tag>|g")
}
add_path "$out_root" OUT
add_path "$build" BUILD
add_path "$src" SRC
tmp=${TMPDIR:-/tmp}
path_rules+=(-e "s|$(re "${tmp%/}")/tmp\.[A-Za-z0-9]+|<TMP>|g")
filter() { sed -E "${path_rules[@]}" -f "$here/golden.filter"; }

# The command line as a reader would type it: arguments with spaces or shell characters quoted.
quote() {
  local a out="" q="'\\''"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./=:,+@%^-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/$q}'"; fi
  done
  printf '%s' "$out"
}

# Empty the run's --out directory when it lies in the build tree.
prev=""
for a in "$@"; do
  dir=""
  if [ "$prev" = "--out" ]; then dir=$a; elif [[ $a == --out=* ]]; then dir=${a#--out=}; fi
  if [ -n "$dir" ] && [[ $dir == "$out_root"/?* ]] && [[ $dir != *..* ]]; then rm -rf -- "$dir"; fi
  prev=$a
done

raw_out="$actual_dir/$name.stdout" raw_err="$actual_dir/$name.stderr" actual="$actual_dir/$name.out"
"$tessera" "$@" >"$raw_out" 2>"$raw_err" </dev/null
code=$?

# A stream whose last line has no newline gets one, and a note, so that the sections stay apart.
section() {
  cat "$1"
  if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then printf '\n[no newline at the end of %s]\n' "$2"; fi
}
{
  printf '$ tessera%s\n' "$(quote "$@")"
  echo "--- stdout"
  section "$raw_out" stdout
  echo "--- stderr"
  section "$raw_err" stderr
  echo "[exit $code]"
} | filter >"$actual"

rel=${golden#"$src"/}
if [ "${TESSERA_UPDATE_GOLDEN:-0}" = 1 ]; then
  mkdir -p "$(dirname "$golden")"
  if [ -f "$golden" ] && cmp -s "$golden" "$actual"; then
    echo "golden unchanged: $rel"
  else
    [ -f "$golden" ] && diff -u --label "$rel (was)" --label "$rel (now)" "$golden" "$actual"
    cp "$actual" "$golden"
    echo "golden written: $rel"
  fi
  exit 0
fi

if [ ! -f "$golden" ]; then
  cat "$actual"
  echo "FAIL: no golden file $rel; write it with: tools/test --update-golden -R '^cli\\.$name\$'"
  exit 1
fi
if ! diff -u --label "$rel (golden)" --label "$rel (this run)" "$golden" "$actual"; then
  echo "FAIL: the output differs from $rel (lines with - are the golden's, + this run's)."
  echo "If the change is intended: tools/test --update-golden -R '^cli\\.$name\$', then review git diff $rel"
  echo "(this run, filtered: $actual; unfiltered: $raw_out, $raw_err)"
  exit 1
fi
echo "PASS: output matches $rel"
