#!/usr/bin/env bash
# Quickstart wrapper behind `make preview STACK=dev` and `make up STACK=dev`.
#
#   scripts/pulumi-stack.sh preview|up|destroy STACK [extra pulumi arguments...]
#
# Order matters: the stack file is validated by `tessera validate` BEFORE Pulumi is asked to do
# anything, so a bad config never reaches the cloud (and needs no credentials to be reported).
#
# Environment:
#   PULUMI_BACKEND_URL           state backend; default: local file backend in ./.pulumi-state
#   PULUMI_CONFIG_PASSPHRASE     (or PULUMI_CONFIG_PASSPHRASE_FILE) encrypts stack secrets on file/S3 backends
#   TENCENTCLOUD_SECRET_ID/KEY   Tencent Cloud credentials (or `pulumi config set --secret tencentcloud:secretKey`)
#   TESSERA_BIN                  the tessera command; default: .venv/bin/tessera, else `tessera` on PATH
set -euo pipefail

readonly ROOT="$(cd "$(dirname "$0")/.." && pwd)"
readonly PULUMI_INSTALL_URL="https://get.pulumi.com"

usage() {
  echo "usage: $0 preview|up|destroy STACK [pulumi arguments...]" >&2
  echo "  e.g. $0 preview dev    (stack file: stacks/Pulumi.dev.yaml)" >&2
}

# The CLI version we test with is the one matching the pinned SDK (pulumi==X in requirements.txt).
pinned_pulumi_version() {
  sed -n 's/^pulumi==\([0-9][0-9.]*\)$/\1/p' "$ROOT/requirements.txt" | head -n 1
}

main() {
  if [[ $# -lt 2 ]]; then
    usage
    return 64
  fi
  local action="$1" stack="$2"
  shift 2
  case "$action" in
    preview|up|destroy) ;;
    *) echo "error: unknown action '$action'" >&2; usage; return 64 ;;
  esac
  if [[ ! "$stack" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "error: stack name '$stack' may only contain letters, digits, '.', '_' and '-'" >&2
    return 64
  fi

  local stack_file="$ROOT/stacks/Pulumi.$stack.yaml"
  if [[ ! -f "$stack_file" ]]; then
    echo "error: no stack file stacks/Pulumi.$stack.yaml; existing stacks:" >&2
    (cd "$ROOT/stacks" && ls Pulumi.*.yaml 2>/dev/null | sed 's/^Pulumi\.\(.*\)\.yaml$/  \1/') >&2 || true
    return 2
  fi

  if ! command -v pulumi >/dev/null 2>&1; then
    local version
    version="$(pinned_pulumi_version)"
    echo "error: the Pulumi CLI is not installed (or not on PATH)." >&2
    echo "install the version Tessera is tested with (${version:-see requirements.txt}):" >&2
    echo "  curl -fsSL $PULUMI_INSTALL_URL | sh -s -- --version ${version:-<version>}" >&2
    echo "  export PATH=\"\$HOME/.pulumi/bin:\$PATH\"" >&2
    echo "then run this command again." >&2
    return 127
  fi

  local tessera="${TESSERA_BIN:-}"
  if [[ -z "$tessera" ]]; then
    if [[ -x "$ROOT/.venv/bin/tessera" ]]; then
      tessera="$ROOT/.venv/bin/tessera"
    elif command -v tessera >/dev/null 2>&1; then
      tessera="tessera"
    else
      echo "error: the tessera command is missing; run 'make install' first." >&2
      return 127
    fi
  fi

  echo "==> tessera validate stacks/Pulumi.$stack.yaml"
  if ! "$tessera" validate "$stack_file"; then
    echo "error: stack '$stack' is not valid; fix the lines above, nothing was sent to Pulumi." >&2
    return 2
  fi

  # A local file backend unless the team configured one (Pulumi Cloud, or COS through s3://...).
  if [[ -z "${PULUMI_BACKEND_URL:-}" ]]; then
    mkdir -p "$ROOT/.pulumi-state"
    export PULUMI_BACKEND_URL="file://$ROOT/.pulumi-state"
    echo "==> state backend: $PULUMI_BACKEND_URL (local; set PULUMI_BACKEND_URL for a shared one)"
  else
    echo "==> state backend: $PULUMI_BACKEND_URL"
  fi
  pulumi login "$PULUMI_BACKEND_URL" >/dev/null

  # File and S3 backends encrypt secrets with a passphrase; Pulumi Cloud manages its own keys.
  case "$PULUMI_BACKEND_URL" in
    file://*|s3://*)
      if [[ -z "${PULUMI_CONFIG_PASSPHRASE+x}" && -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]]; then
        if [[ -t 0 ]]; then
          echo "note: Pulumi will ask for the passphrase that encrypts this stack's secrets;" >&2
          echo "      export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) to skip the prompt." >&2
        else
          echo "error: set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): it encrypts the" >&2
          echo "       stack's secrets (kubeconfig, cloud keys) on a $PULUMI_BACKEND_URL backend." >&2
          return 2
        fi
      fi
      ;;
  esac

  if [[ -z "${TENCENTCLOUD_SECRET_ID:-}" ]] && grep -q '^ *tessera:cluster:' "$stack_file" \
      && ! grep -q 'provider: *existing' "$stack_file"; then
    echo "note: TENCENTCLOUD_SECRET_ID is not set; Pulumi uses tencentcloud:secretId/secretKey from" >&2
    echo "      the stack config if present (see docs/operations.md)." >&2
  fi

  cd "$ROOT"
  pulumi stack select --create "$stack"
  echo "==> pulumi $action --stack $stack $*"
  pulumi "$action" --stack "$stack" "$@"
}

main "$@"
