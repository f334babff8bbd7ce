#!/usr/bin/env bash
# Checks the policy pack against the real pulumi-policy SDK, in the pack's own virtualenv
# (.venv-policy, the one PulumiPolicy.yaml names): pulumi-policy's protobuf/grpc pins stay out of
# the program's .venv. Needs PyPI the first time. Not part of `make test` (it installs packages).
set -euo pipefail
cd "$(dirname "$0")"
if [[ ! -x .venv-policy/bin/python ]]; then
  python3 -m venv .venv-policy
  .venv-policy/bin/pip install -q -r requirements.txt
fi
.venv-policy/bin/python check_pack.py

# The pack's entry point serves the analyzer over gRPC and prints its port, as the CLI expects.
port_file="$(mktemp)"
.venv-policy/bin/python __main__.py >"$port_file" 2>&1 &
pack_pid=$!
for _ in $(seq 1 50); do
  [[ -s "$port_file" ]] && break
  sleep 0.2
done
kill "$pack_pid" 2>/dev/null || true
wait "$pack_pid" 2>/dev/null || true
if grep -qE '^[0-9]+$' "$port_file"; then
  echo "ok   policy pack starts and serves on port $(head -n 1 "$port_file")"
  rm -f "$port_file"
else
  echo "FAIL policy pack did not start:" >&2
  cat "$port_file" >&2
  rm -f "$port_file"
  exit 1
fi
