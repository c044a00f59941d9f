#!/usr/bin/env bash
# The distributed device CG on 1 and 2 GPUs against the serial device CG, side by side:
#   [TRANSPORTS="nccl ipc"] bash bakeoff/par_device_cg.sh [OUTDIR]
#   (needs 2 GPUs, CuPy with NCCL, mpiexec; TRANSPORTS default "auto", i.e. NCCL)
# Checks the device group of tests/mpi/cases.py, then times BP3 p = 6 and p = 4 and BP1
# p = 6 at about 1e7 DOFs: the serial CLI, bench-parallel on one rank, and (weak) on two,
# each transport of TRANSPORTS in turn (the JSON lines name it).
set -uo pipefail
out=${1:-/tmp/par_device_cg}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
transports=${TRANSPORTS:-auto}
for t in $transports; do
    timeout 600 mpiexec -n 2 "$py" tests/mpi/cases.py device /gpu/cuda/gen "$t" 2>&1 | tail -n 12
done
for case in "bp3 6 36 1.02e7" "bp3 4 54 1.02e7" "bp1 6 36 1.02e7"; do
    set -- $case
    for round in 1 2; do
        "$py" -m hofem.bakeoff "$1" -p "$2" -n "$3" --ceed /gpu/cuda/gen --rtol 1e-8 \
            | tail -n 1 >>"$out/serial.jsonl"
        for n in 1 2; do
            for t in $transports; do
                timeout 240 mpiexec -n "$n" "$py" -m hofem.bakeoff bench-parallel --bp "$1" \
                    -p "$2" --dofs "$4" --per-rank --ceed /gpu/cuda/gen --iterations 400 \
                    --transport "$t" | grep '^{' >>"$out/parallel.jsonl"
            done
        done
    done
done
"$py" "$(dirname "$0")/par_summary.py" "$out"
