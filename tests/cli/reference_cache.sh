#!/usr/bin/env bash
# The reference executor's result cache (sim/reference_cache.hpp): stored after a run, reused by an
# identical one with the same report, a new key for new inputs, off on request, a damaged entry
# recomputed, the size bound enforced; on both machines. Usage: reference_cache.sh TESSERA
set -eu
tessera=$1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export TESSERA_CACHE_DIR="$T/cache" TESSERA_REFERENCE_CACHE_MIN_S=0
fail() { echo "FAIL: $*"; exit 1; }
cache_of() { sed -nE 's/.*"reference_cache": "([a-z]+)".*/\1/p' "$1/host.json"; }
nki=(scenarios/neuroncore/nki_matmul/1_tiled.json --set "model.graph.inputs.lhsT.shape=[512,256]" --set "model.graph.inputs.rhs.shape=[512,512]" --set expect.latency_error_pct=100)
"$tessera" run "${nki[@]}" -q --out "$T/a"
[ "$(cache_of "$T/a")" = stored ] || fail "first run: $(cache_of "$T/a")"
[ "$(ls "$T/cache/reference" | wc -l)" = 1 ] || fail "one entry expected"
"$tessera" run "${nki[@]}" -q --out "$T/a2"
[ "$(cache_of "$T/a2")" = hit ] || fail "second run: $(cache_of "$T/a2")"
sed "s|$T/a2|$T/a|g" "$T/a2/report.json" | cmp -s - "$T/a/report.json" || fail "the report changed with a cached reference"
# Other inputs: another key.
"$tessera" run "${nki[@]}" --set inputs.lhsT.random.seed=7 -q --out "$T/b"
[ "$(cache_of "$T/b")" = stored ] || fail "new inputs: $(cache_of "$T/b")"
[ "$(ls "$T/cache/reference" | wc -l)" = 2 ] || fail "two entries expected"
# Off on request.
TESSERA_REFERENCE_CACHE=0 "$tessera" run "${nki[@]}" -q --out "$T/c"
[ "$(cache_of "$T/c")" = off ] || fail "off: $(cache_of "$T/c")"
# A damaged entry is computed again, with the same report.
for f in "$T"/cache/reference/*/out_0.npy; do : > "$f"; done
"$tessera" run "${nki[@]}" -q --out "$T/d"
[ "$(cache_of "$T/d")" = stored ] || fail "damaged: $(cache_of "$T/d")"
sed "s|$T/d|$T/a|g" "$T/d/report.json" | cmp -s - "$T/a/report.json" || fail "the report changed after recomputing"
# The size bound: entries beyond it are dropped, least recently used first.
TESSERA_REFERENCE_CACHE_MAX_BYTES=1 "$tessera" run "${nki[@]}" --set inputs.lhsT.random.seed=8 -q --out "$T/e"
[ "$(ls "$T/cache/reference" | wc -l)" = 0 ] || fail "the size bound left $(ls "$T/cache/reference" | wc -l) entries"
# The wafer's reference check goes through the same cache.
"$tessera" run scenarios/wafer/transformer/transformer_layer_pipelined.json -q --out "$T/w"
"$tessera" run scenarios/wafer/transformer/transformer_layer_pipelined.json -q --out "$T/w2"
[ "$(cache_of "$T/w")" = stored ] && [ "$(cache_of "$T/w2")" = hit ] || fail "wafer: $(cache_of "$T/w") $(cache_of "$T/w2")"
echo "reference cache: PASS"
