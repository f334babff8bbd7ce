#!/usr/bin/env bash
# Fetch the pure-Python wheels the GPU checks need on an offline GPU machine into
# node-agent/gpu-checks/wheels/ (committed: about 120 KB; run-on-gpu.sh installs from there).
# Versions are the pins of requirements.txt. Run on a machine with access to the package index:
#
#   bash node-agent/gpu-checks/fetch-wheels.sh
#
# The wheels are py3-none-any: one file serves every Python 3 the GPU machine may have;
# --python-version 3.9 only makes pip refuse a release that dropped the oldest Python we support.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
PINS=$(grep -iE '^(nvidia-ml-py|prometheus[-_]client)==' "$REPO/requirements.txt")
mkdir -p "$HERE/wheels"
# shellcheck disable=SC2086 # PINS is a list of requirements
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.9 --dest "$HERE/wheels" $PINS
for wheel in "$HERE"/wheels/*.whl; do
    case "$(basename "$wheel")" in
        *-py3-none-any.whl|*-py2.py3-none-any.whl) ;;
        *) echo "not a pure-Python wheel: $wheel" >&2; exit 1 ;;
    esac
done
ls -l "$HERE/wheels"
