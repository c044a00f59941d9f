#!/usr/bin/env bash
# The README's main job under one competing busy loop, against a quiet run and one thread:
#   bash bakeoff/cpu_busy.sh [ROUNDS] [OUTFILE]      (ARGS="-n 16": other CLI arguments)
# Each round runs, in order: default threads quiet, default busy, one thread quiet, one
# thread busy ("busy": one `python -c "while True: pass"` beside the solve). One JSON line
# per run (the CLI's, with "threads" and "busy" added) goes to OUTFILE; a median table ends.
set -uo pipefail
rounds=${1:-5}
out=${2:-/tmp/cpu_busy.jsonl}
py=${PYTHON:-python3}
run() {  # label threads busy
    local busy_pid=""
    if [ "$3" = busy ]; then
        "$py" -c "while True: pass" &
        busy_pid=$!
        sleep 0.5
    fi
    local env_threads=()
    [ "$2" = one ] && env_threads=(NUMBA_NUM_THREADS=1)
    env "${env_threads[@]}" "$py" -m hofem.bakeoff bp3 -p 4 ${ARGS:-} | tail -n 1 \
        | sed "s/^{/{\"threads\": \"$2\", \"busy\": \"$3\", \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\", /" >>"$out"
    [ -n "$busy_pid" ] && kill "$busy_pid"
}
for round in $(seq "$rounds"); do
    run r default quiet
    run r default busy
    run r one quiet
    run r one busy
done
"$py" - "$out" <<'PY'
import collections, json, statistics, sys
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    rates[(d["threads"], d["busy"])].append(d["dofs_x_iter_per_s"] / 1e6)
for key, values in sorted(rates.items()):
    print(*key, f"median {statistics.median(values):.1f} MDOF*it/s of", [round(v, 1) for v in values])
PY
