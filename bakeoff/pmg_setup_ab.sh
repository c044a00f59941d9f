#!/usr/bin/env bash
# pmg set-up and time to solution, two trees side by side (alternating processes):
#   bash bakeoff/pmg_setup_ab.sh OLD_TREE [OUTDIR]
#   CEED=/cpu/self/numba CASES="4 1e6;6 1e6" NUMBA_NUM_THREADS=1 bash bakeoff/pmg_setup_ab.sh OLD_TREE
# OLD_TREE holds an older ``hofem`` package (e.g. ``git archive REV hofem | tar -x -C OLD_TREE``);
# the current checkout is the other. Each process times CG and pmg on BP3 (bakeoff/pmg_measure.py);
# CASES lists "order dofs" pairs, each run old then new (default: the GPU cases).
# A change against its base commit, e.g. the level diagonals' generated kernel
# (Backend.tensor_element_diagonal) against the batched GEMMs it replaces, on the 8e7 case:
#   mkdir -p /tmp/old && git archive BASE hofem | tar -x -C /tmp/old   # BASE: before the change
#   CASES="6 8e7;6 8e7" bash bakeoff/pmg_setup_ab.sh /tmp/old /tmp/pmg_diag_ab
# and compare the "set-up" of the old and new lines (the solve and iterations should match).
set -uo pipefail
old=$1
out=${2:-/tmp/pmg_setup_ab}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
here=$(pwd)
measure() {  # tree tag p dofs
    PYTHONPATH="$1:$here:${PYTHONPATH:-}" timeout 280 "$py" bakeoff/pmg_measure.py time \
        --ceed "${CEED:-/gpu/cuda/gen}" --cells hex --orders "$3" --dofs "$4" --preconditioners none pmg \
        --out "$out/$2.jsonl" >/dev/null 2>"$out/$2_$3_$4.err" || echo "$2 p=$3 $4 failed"
}
IFS=';' read -ra cases <<<"${CASES:-6 1e7;4 1e7;6 1e7;4 1e7;6 8e7}"
for case in "${cases[@]}"; do
    set -- $case
    measure "$old" old "$1" "$2"
    measure "$here" new "$1" "$2"
done
"$py" - "$out" <<'PY'
import json, sys
for tag in ("old", "new"):
    for line in open(f"{sys.argv[1]}/{tag}.jsonl"):
        d = json.loads(line)
        extra = f" V-cycle {d['vcycle_over_apply']:.2f} applies" if "vcycle_over_apply" in d else ""
        print(tag, d["p"], f"{d['dofs']:.3g}", d["preconditioner"], d["iterations"],
              f"set-up {d['precond_setup_s']:.3f} s, solve {d['solve_s']:.3f} s, "
              f"to solution {d['time_to_solution_s']:.3f} s{extra}")
PY
