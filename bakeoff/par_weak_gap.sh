#!/usr/bin/env bash
# Where the 2-GPU weak-scaling loss comes from (BP3 p = 4, about 5e7 DOFs per GPU):
#   bash bakeoff/par_weak_gap.sh [OUTDIR]   (2 GPUs, CuPy with NCCL, mpiexec)
# In alternating rounds: the serial CLI on GPU 0 alone; the serial CLI on both GPUs at once
# (two independent processes: what two busy GPUs of this host give without any exchange);
# bench-parallel on 2 ranks with NCCL's defaults and with NCCL_MAX_NCHANNELS=1 (fewer NCCL
# blocks beside the interior kernel).
set -uo pipefail
out=${1:-/tmp/par_weak_gap}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
serial() {  # tag, devices
    CUDA_VISIBLE_DEVICES=$2 "$py" -m hofem.bakeoff bp3 -p 4 -n 92 --ceed /gpu/cuda/gen --rtol 1e-8 \
        | tail -n 1 | sed "s/^{/{\"tag\": \"$1\", /" >>"$out/serial.jsonl"
}
parallel() {  # tag, extra env
    env $2 timeout 240 mpiexec -n 2 "$py" -m hofem.bakeoff bench-parallel --bp bp3 -p 4 \
        --dofs 5e7 --per-rank --ceed /gpu/cuda/gen --iterations 400 \
        | grep '^{' | sed "s/^{/{\"tag\": \"$1\", /" >>"$out/parallel.jsonl"
}
for round in 1 2; do
    serial alone 0
    serial both 0 & serial both 1 & wait
    parallel nccl_default ""
    parallel nccl_1channel NCCL_MAX_NCHANNELS=1
done
"$py" "$(dirname "$0")/par_summary.py" "$out"
