#!/usr/bin/env bash
# Weak and strong scaling of the distributed device CG on 1, 2 (and 4) GPUs, the serial CLI
# beside, in one call:
#   RANKS="1 2 4" ROUNDS=2 [TRANSPORTS="nccl ipc"] bash bakeoff/par_scaling.sh [OUTDIR]
#   (CuPy with NCCL, mpiexec; default RANKS "1 2", ROUNDS 2, TRANSPORTS "auto": each
#   distributed run once per transport, named in its JSON line)
# weak: BP3 p = 4 and 6 at about 5e7 DOFs per GPU; strong: BP3 p = 6 at 3e5..1.6e7 DOFs
# per GPU (the per-iteration floor at 3e5); serial: the CLI's device CG at the same sizes.
# The rank counts alternate with the serial runs, round by round.
set -uo pipefail
out=${1:-/tmp/par_scaling}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
ranks=${RANKS:-1 2}
bench() {  # ranks p iterations dofs-per-rank...
    local n=$1 p=$2 it=$3 t
    shift 3
    for t in ${TRANSPORTS:-auto}; do
        timeout 300 mpiexec -n "$n" "$py" -m hofem.bakeoff bench-parallel --bp bp3 -p "$p" \
            --dofs "$@" --per-rank --ceed /gpu/cuda/gen --iterations "$it" --transport "$t" \
            | grep '^{' >>"$out/parallel.jsonl"
    done
}
serial() {  # p elements...
    local p=$1
    shift
    for e in "$@"; do
        "$py" -m hofem.bakeoff bp3 -p "$p" -n "$e" --ceed /gpu/cuda/gen --rtol 1e-8 | tail -n 1 >>"$out/serial.jsonl"
    done
}
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
for _ in $(seq "${ROUNDS:-2}"); do
    serial 4 92
    serial 6 61 11 21 26 42
    for n in $ranks; do
        bench "$n" 4 200 5e7
        bench "$n" 6 200 5e7
        bench "$n" 6 1000 3e5 2e6 4e6 1.6e7
    done
done
"$py" "$(dirname "$0")/par_summary.py" "$out"
