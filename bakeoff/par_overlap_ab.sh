#!/usr/bin/env bash
# The distributed device CG of two trees side by side, alternating processes:
#   bash bakeoff/par_overlap_ab.sh OLD_TREE [OUTDIR]   (2-4 GPUs, CuPy with NCCL, mpiexec)
# OLD_TREE holds an older ``hofem`` package (``git archive REV hofem | tar -x -C OLD_TREE``).
# Per rank count (RANKS, default "4 2"), two rounds of old then new: bench-parallel BP3 p = 6
# at 5e7 and 3e5 DOFs per GPU and BP3 p = 4 at 5e7, 1000 iterations each.
set -uo pipefail
old=$1
out=${2:-/tmp/par_overlap_ab}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
here=$(pwd)
bench() {  # tree tag ranks p dofs...
    local tree=$1 tag=$2 n=$3 p=$4
    shift 4
    # from OUTDIR: ``python -m`` puts the working directory first on the path
    (cd "$out" && PYTHONPATH="$tree:$here:${PYTHONPATH:-}" timeout 200 mpiexec -n "$n" "$py" \
        -m hofem.bakeoff bench-parallel --bp bp3 -p "$p" --dofs "$@" --per-rank \
        --ceed /gpu/cuda/gen --iterations 1000) \
        | grep '^{' | sed "s/^{/{\"tag\": \"$tag\", /" >>"$out/parallel.jsonl"
}
for n in ${RANKS:-4 2}; do
    for _ in 1 2; do
        for side in old new; do
            tree=$here
            [ "$side" = old ] && tree=$old
            bench "$tree" "$side" "$n" 6 5e7 3e5
            bench "$tree" "$side" "$n" 4 5e7
        done
    done
done
"$py" "$(dirname "$0")/par_summary.py" "$out"
