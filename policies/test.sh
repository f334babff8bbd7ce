#!/usr/bin/env bash
# Checks the policy pack against the real pulumi-policy SDK, in the pack's own virtualenv
# (.venv-policy, the one PulumiPolicy.yaml names): pulumi-policy's protobuf/grpc pins stay out of
# the program's .venv. Needs PyPI the first time.
set -euo pipefail
cd "$(dirname "$0")"
if [[ ! -x .venv-policy/bin/python ]]; then
  python3 -m venv .venv-policy
  .venv-policy/bin/pip install -q -r requirements.txt
fi
.venv-policy/bin/python check_pack.py
