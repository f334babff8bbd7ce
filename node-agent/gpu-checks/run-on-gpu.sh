#!/usr/bin/env bash
# The one command for a lent GPU machine (no internet, PyTorch installed, a copy of this tree):
#
#   bash node-agent/gpu-checks/run-on-gpu.sh [run_gpu_checks.py options, e.g. --only mps,overhead]
#
# 1. picks a Python that imports torch ($PYTHON, else python3 / python), 3.9 or newer;
# 2. puts the repo root and node-agent/ on PYTHONPATH; installs what that Python lacks of the
#    pure-Python dependencies (nvidia-ml-py, prometheus-client) from node-agent/gpu-checks/wheels/
#    with pip --no-index into a temporary directory (never into the system), or, without pip,
#    imports them straight from the wheel files;
# 3. records the machine (nvidia-smi -L / --query-gpu / -q) and runs the checks with a budget that
#    fits in GPU_CHECKS_LIMIT_S seconds (default 480 = 8 minutes, hard limit by `timeout`);
# 4. writes gpu-checks.json (and nvidia-smi-q.txt, MPS logs, worker stderr) to $OUT when set,
#    else to out/gpu-checks/; ends with a one-line-per-check summary.
# Exit code: the script's (0 all met, 1 a check failed or broke, 2 nothing could run here),
# 124 when the hard time limit struck (the JSON written so far stays).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DEST="${OUT:-$REPO/out/gpu-checks}"
LIMIT_S="${GPU_CHECKS_LIMIT_S:-480}"
BUDGET_S=$((LIMIT_S - 45))
mkdir -p "$DEST"

has_torch() { "$1" -c "import torch" >/dev/null 2>&1; }
PY=""
for candidate in "${PYTHON:-}" python3 python; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 || continue
    if has_torch "$candidate"; then PY="$candidate"; break; fi
    [ -z "$PY" ] && FALLBACK="${FALLBACK:-$candidate}"
done
if [ -z "$PY" ]; then
    PY="${FALLBACK:-}"
    echo "run-on-gpu: no Python here imports torch; the report will say what is missing"
fi
if [ -z "$PY" ]; then
    echo "run-on-gpu: no python3 or python on PATH" >&2
    exit 2
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    echo "run-on-gpu: $PY is $("$PY" -V 2>&1); the checks need Python 3.9 or newer (set PYTHON=...)" >&2
    exit 2
fi
echo "run-on-gpu: python $PY ($("$PY" -V 2>&1)), output to $DEST"

# --- pure-Python dependencies, offline -----------------------------------------------------------
EXTRA=""
NEED=""
"$PY" -c "import pynvml" >/dev/null 2>&1 || NEED="$NEED nvidia-ml-py"
"$PY" -c "import prometheus_client" >/dev/null 2>&1 || NEED="$NEED prometheus-client"
if [ -n "$NEED" ]; then
    if ls "$HERE"/wheels/*.whl >/dev/null 2>&1; then
        DEPS="$(mktemp -d /tmp/tessera-gpu-deps.XXXXXX)"
        # shellcheck disable=SC2086 # NEED is a list of package names
        if "$PY" -m pip --version >/dev/null 2>&1 && "$PY" -m pip install -q --disable-pip-version-check --no-index \
                --find-links "$HERE/wheels" --target "$DEPS" $NEED >"$DEST/pip.log" 2>&1; then
            EXTRA="$DEPS"
            echo "run-on-gpu: installed$NEED from $HERE/wheels into $DEPS"
        else
            # pure-Python wheels are zip files Python imports from directly
            for pkg in $NEED; do
                for wheel in "$HERE"/wheels/"$(echo "$pkg" | tr '-' '_')"-*.whl; do
                    [ -f "$wheel" ] && EXTRA="${EXTRA:+$EXTRA:}$wheel"
                done
            done
            echo "run-on-gpu: pip unavailable or failed (see $DEST/pip.log); importing$NEED from the wheel files"
        fi
    else
        echo "run-on-gpu: missing$NEED and no wheels in $HERE/wheels (node-agent/gpu-checks/fetch-wheels.sh fetches them)"
    fi
fi
export PYTHONPATH="$REPO:$REPO/node-agent${PYTHONPATH:+:$PYTHONPATH}${EXTRA:+:$EXTRA}"

# --- the machine ---------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
    {
        timeout 30 nvidia-smi -L
        timeout 30 nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,compute_mode,mig.mode.current,clocks.max.sm,power.limit --format=csv
    } >"$DEST/nvidia-smi.txt" 2>&1
    timeout 60 nvidia-smi -q >"$DEST/nvidia-smi-q.txt" 2>&1
    cat "$DEST/nvidia-smi.txt"
else
    echo "run-on-gpu: nvidia-smi is not on PATH" | tee "$DEST/nvidia-smi.txt"
fi

# --- the checks ----------------------------------------------------------------------------------
RUNNER=()
command -v timeout >/dev/null 2>&1 && RUNNER=(timeout -k 20 "$LIMIT_S")
${RUNNER[@]+"${RUNNER[@]}"} "$PY" "$HERE/run_gpu_checks.py" --budget-seconds "$BUDGET_S" --output "$DEST/gpu-checks.json" \
    --artifacts "$DEST" "$@" >"$DEST/gpu-checks.out" 2>"$DEST/gpu-checks.stderr"
CODE=$?

# MPS control daemons the checks started are stopped by them; one left by a killed run is asked to quit
if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    for pipe in /tmp/tmps-*/*/pipe; do
        [ -e "$pipe/control" ] || continue
        owner="${pipe#/tmp/tmps-}"
        kill -0 "${owner%%-*}" 2>/dev/null && continue  # its run is still going
        echo quit | CUDA_MPS_PIPE_DIRECTORY="$pipe" timeout 10 nvidia-cuda-mps-control && echo "run-on-gpu: stopped a leftover MPS daemon ($pipe)"
    done
fi

# cgroups of a killed run: thaw (a task frozen by the v1 freezer cannot even die) and remove them
for group in /sys/fs/cgroup/tessera-gpu-checks-* /sys/fs/cgroup/freezer/tessera-gpu-checks-*; do
    [ -d "$group" ] || continue
    kill -0 "${group##*-}" 2>/dev/null && continue  # its run is still going (named by its pid)
    find "$group" -name cgroup.freeze -exec sh -c 'echo 0 > "$1"' _ {} \; 2>/dev/null
    find "$group" -name freezer.state -exec sh -c 'echo THAWED > "$1"' _ {} \; 2>/dev/null
    sleep 1
    find "$group" -depth -type d -exec rmdir {} \; 2>/dev/null
    echo "run-on-gpu: cleaned up leftover cgroup $group"
done

echo "--- stderr (last 15 lines; all of it in $DEST/gpu-checks.stderr) ---"
tail -n 15 "$DEST/gpu-checks.stderr" | cut -c1-200
if [ -f "$DEST/gpu-checks.json" ]; then
    echo "--- report (compact; the file has it whole) ---"
    "$PY" - "$DEST/gpu-checks.json" <<'PYEOF'
import json, sys
text = json.dumps(json.load(open(sys.argv[1])), separators=(",", ":"), default=str)
print(text[:6000] + (" ...(cut)" if len(text) > 6000 else ""))
PYEOF
fi
if grep -q "== GPU checks summary" "$DEST/gpu-checks.out"; then
    sed -n '/== GPU checks summary/,$p' "$DEST/gpu-checks.out"
else
    echo "--- no summary (exit $CODE); last output ---"
    tail -n 40 "$DEST/gpu-checks.out"
    [ -f "$DEST/gpu-checks.json" ] && echo "partial report: $DEST/gpu-checks.json"
fi
echo "run-on-gpu: exit $CODE; report $DEST/gpu-checks.json"
exit $CODE
