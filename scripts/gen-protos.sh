#!/usr/bin/env bash
# Regenerate the Python gRPC bindings of the kubelet APIs the device plugin and the DRA plugin speak.
# Usage: scripts/gen-protos.sh [OUTPUT_ROOT]   (default: node-agent, i.e. in place)
# tests/node/deviceplugin/test_protos.py runs this into a temp dir and checks the committed files match.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT="${1:-node-agent}"
API=tessera_node/deviceplugin/api
DRA=tessera_node/dra/api
for proto in "$API/deviceplugin/v1beta1/api.proto" "$API/podresources/v1/api.proto" \
  "$DRA/dra/v1/api.proto" "$DRA/dra/v1beta1/api.proto" "$DRA/pluginregistration/v1/api.proto"; do
  mkdir -p "$OUT/$(dirname "$proto")"
  "$PY" -m grpc_tools.protoc -I node-agent --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" "node-agent/$proto"
done
