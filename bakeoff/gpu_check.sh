#!/usr/bin/env bash
# GPU checks from a checkout on a machine with one or more NVIDIA GPUs: the test suite's GPU
# cases, the distributed cases on the GPU, and pmg against CG on /gpu/cuda/gen.
#   bash bakeoff/gpu_check.sh [OUTDIR]      (OUTDIR default /tmp/gpu_check)
# Each part's log goes to OUTDIR; a failing part does not stop the others.
set -uo pipefail
out=${1:-/tmp/gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
part() {
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? in $((SECONDS - start)) s; $(tail -n 1 "$out/$name.log")"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
part tests timeout 420 "$py" -m pytest -q -x -p no:cacheprovider -m "gpu and not slow" tests
part mpi_equal timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py equal /gpu/cuda/gen
part mpi_pmg timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py pmg /gpu/cuda/gen
# the distributed device CG loop needs NCCL, one GPU per rank
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    part mpi_device timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py device /gpu/cuda/gen
fi
