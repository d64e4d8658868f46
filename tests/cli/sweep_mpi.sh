#!/usr/bin/env bash
# sweep_mpi.sh TESSERA MPIRUN OUT: the same sweep (3 parameters x 3 values of the quickstart MLP on
# trn1) on one machine and under `mpirun -n 2 --oversubscribe` gives the same table, csv and plot,
# and rank 1 ran some of the points (docs/sweep.md).
set -euo pipefail
tessera=$1 mpirun=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
grid=(--grid 'target.params.dma.engine_bandwidth=[8.5GB/s,17GB/s,27GB/s]' --grid 'target.params.hbm.bandwidth=[205GB/s,410GB/s,820GB/s]'
      --grid 'precision.compute=[bf16,fp16,fp32]')
"$tessera" sweep scenarios/neuroncore/mlp.json "${grid[@]}" --out "$out/runs" --jobs 2 --format csv --plot "$out/local.svg" -q > "$out/local.csv"
# The same out directory, run again (--rerun): the csv's report paths are the same.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$mpirun" -n 2 --oversubscribe "$tessera" sweep scenarios/neuroncore/mlp.json "${grid[@]}" --out "$out/runs" --rerun --format csv \
  --plot "$out/mpi.svg" -v > "$out/mpi.csv" 2> "$out/mpi.log"
diff "$out/local.csv" "$out/mpi.csv"
cmp "$out/local.svg" "$out/mpi.svg"
[ "$(wc -l < "$out/local.csv")" = 28 ] || { echo "expected 27 points"; exit 1; }
grep -q "to rank 1" "$out/mpi.log" || { echo "rank 1 ran no point"; cat "$out/mpi.log"; exit 1; }
grep -c ",ok," "$out/mpi.csv" | grep -qx 27 || { echo "not every point ran ok"; exit 1; }
echo sweep-mpi-ok
