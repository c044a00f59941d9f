#!/usr/bin/env bash
# Weak and strong scaling of the distributed device CG on 1 and 2 GPUs, the serial CLI beside:
#   bash bakeoff/par_scaling.sh [OUTDIR]   (2 GPUs, CuPy with NCCL, mpiexec)
# weak: BP3 p = 4 and 6 at about 5e7 DOFs per GPU; strong: BP3 p = 6 at 3e5..1.6e7 DOFs
# per GPU (the per-iteration floor at 3e5); serial: the CLI's device CG at the same sizes.
set -uo pipefail
out=${1:-/tmp/par_scaling}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
bench() {  # ranks bp p dofs-per-rank iterations
    timeout 200 mpiexec -n "$1" "$py" -m hofem.bakeoff bench-parallel --bp "$2" -p "$3" \
        --dofs "$4" --per-rank --ceed /gpu/cuda/gen --iterations "$5" | grep '^{' >>"$out/parallel.jsonl"
}
serial() {  # bp p elements
    "$py" -m hofem.bakeoff "$1" -p "$2" -n "$3" --ceed /gpu/cuda/gen --rtol 1e-8 | tail -n 1 >>"$out/serial.jsonl"
}
for n in 1 2; do bench "$n" bp3 4 5e7 200; bench "$n" bp3 6 5e7 200; done
serial bp3 4 92; serial bp3 6 61
for d in 3e5 1e6 2e6 4e6 1.6e7; do for n in 1 2; do bench "$n" bp3 6 "$d" 1000; done; done
for e in 11 17 21 26 42; do serial bp3 6 "$e"; done
"$py" "$(dirname "$0")/par_summary.py" "$out"
