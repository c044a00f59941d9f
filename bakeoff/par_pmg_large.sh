#!/usr/bin/env bash
# pmg-preconditioned CG to rtol 1e-8 at scale, BP3 p = 4 on the fly, /gpu/cuda/gen:
#   bash bakeoff/par_pmg_large.sh [OUTDIR]   (4 GPUs, CuPy with NCCL, mpiexec)
# 1e8 DOFs on 1, 2 and 4 ranks (the iterations must not depend on the rank count), then
# 1e9 DOFs on 4 ranks (about 89 GB per rank by the estimate: 141 GB cards). One JSON line
# per case in OUTDIR/pmg_large.jsonl: iterations, set-up, time to solution, memory per DOF.
set -uo pipefail
out=${1:-/tmp/par_pmg_large}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
solve() {  # ranks total-dofs seconds
    local start=$SECONDS
    timeout "$3" mpiexec -n "$1" "$py" -m hofem.bakeoff bench-parallel --bp bp3 -p 4 \
        --dofs "$2" --ceed /gpu/cuda/gen --geometry on_the_fly --preconditioner pmg \
        --rtol 1e-8 --iterations 100 >"$out/pmg_$1_$2.log" 2>&1
    echo "== $1 ranks, $2 DOFs: exit $? in $((SECONDS - start)) s"
    grep '^{' "$out/pmg_$1_$2.log" >>"$out/pmg_large.jsonl" || tail -n 5 "$out/pmg_$1_$2.log"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1
for n in 4 2 1; do solve "$n" 1e8 120; done
solve 4 1e9 ${LARGE_SECONDS:-400}
