#!/usr/bin/env bash
# GPU checks from a checkout on a machine with one or more NVIDIA GPUs: the test suite's GPU
# cases, the distributed cases on the GPU, and pmg against CG on /gpu/cuda/gen.
#   bash bakeoff/gpu_check.sh [OUTDIR]      (OUTDIR default /tmp/gpu_check)
# A failing part does not stop the others. Each part's log is written to a scratch folder and
# all of them land in OUTDIR as one file, gpu_check_logs.tar.gz (a device call returns few files).
set -uo pipefail
dest=${1:-/tmp/gpu_check}
mkdir -p "$dest"
out=$(mktemp -d)
trap 'tar -czf "$dest/gpu_check_logs.tar.gz" -C "$out" .' EXIT
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${PYTHON:-python3}
part() {
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? in $((SECONDS - start)) s; $(tail -n 1 "$out/$name.log")"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1
# the GPU tests in three contiguous slices per GPU (--shard), GPU g running slices g,
# g + gpus, g + 2 gpus one after the other: the slow modules (test_10_cuda) spread over GPUs
gpus=$(nvidia-smi -L | wc -l)
shards=$((3 * gpus))
start=$SECONDS
for ((g = 0; g < gpus; g++)); do
    (
        for ((i = g; i < shards; i += gpus)); do
            CUDA_VISIBLE_DEVICES=$g timeout 300 "$py" -m pytest -q -p no:cacheprovider \
                -m "gpu and not slow" --shard "$i/$shards" tests >"$out/tests_$i.log" 2>&1
        done
    ) &
done
wait
for ((i = 0; i < shards; i++)); do
    echo "== tests $i/$shards: $(tail -n 1 "$out/tests_$i.log")"
    grep -E "^(FAILED|ERROR) " "$out/tests_$i.log"  # the names, where the logs stay behind
done
echo "== tests: $((SECONDS - start)) s"
# "auto" is the copy-engine halo (ipc) for one GPU per rank on one node; nccl explicitly too
part mpi_equal timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py equal /gpu/cuda/gen
part mpi_equal_nccl timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py equal /gpu/cuda/gen nccl
part mpi_pmg timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py pmg /gpu/cuda/gen
# the distributed device CG loop needs NCCL, one GPU per rank
if [ "$gpus" -ge 2 ]; then
    part mpi_device timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py device /gpu/cuda/gen
    part mpi_device_ipc timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py device /gpu/cuda/gen ipc
    part mpi_ipc_channel timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py ipc_channel /gpu/cuda/gen
fi
if [ "$gpus" -ge 3 ]; then
    part mpi_device_3 timeout 240 mpiexec -n 3 "$py" tests/mpi/cases.py device /gpu/cuda/gen
fi
if [ "$gpus" -ge 4 ]; then
    part mpi_equal_4 timeout 240 mpiexec -n 4 "$py" tests/mpi/cases.py equal /gpu/cuda/gen
fi
part mpi_pmg_assembly timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py pmg_assembly /gpu/cuda/gen
part mpi_pmg_galerkin timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py pmg_galerkin /gpu/cuda/gen
part mpi_equal_mpi timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py equal /gpu/cuda/gen mpi
part mpi_variants timeout 240 mpiexec -n 2 "$py" tests/mpi/cases.py variants /gpu/cuda/gen
