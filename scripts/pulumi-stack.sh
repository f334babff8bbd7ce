#!/usr/bin/env bash
# Quickstart wrapper behind `make preview STACK=dev` and `make up STACK=dev`.
#
#   scripts/pulumi-stack.sh preview|up|destroy STACK [extra pulumi arguments...]
#
# Order matters: the stack file is validated by `tessera validate` BEFORE anything about Pulumi is
# checked or asked, so a bad config fails first with its path, never reaches the cloud, and needs
# neither the Pulumi CLI nor credentials to be reported.
#
# The Pulumi CLI: the one on PATH if any; else the project's own copy in .pulumi/bin; else the
# version pinned in requirements.txt (pulumi==X, the SDK we test with) is installed there from
# get.pulumi.com (never system-wide, never editing shell profiles). Offline, it says how to install it.
#
# Environment:
#   PULUMI_BACKEND_URL           state backend; default: local file backend in ./.pulumi-state
#   PULUMI_CONFIG_PASSPHRASE     (or PULUMI_CONFIG_PASSPHRASE_FILE) encrypts stack secrets on file/S3 backends
#   TENCENTCLOUD_SECRET_ID/KEY   Tencent Cloud credentials (or `pulumi config set --secret tencentcloud:secretKey`)
#   TESSERA_BIN                  the tessera command; default: .venv/bin/tessera, else `tessera` on PATH
#   TESSERA_PULUMI_HOME          where the project's Pulumi CLI goes; default: ./.pulumi (bin/pulumi inside)
#   TESSERA_PULUMI_INSTALL=0     never download the Pulumi CLI (just say how to install it)
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

# Download get.pulumi.com's installer and install VERSION under HOME_DIR/bin. Returns 1, having
# printed nothing, when the installer cannot be fetched (offline); 1 with the installer's output
# when it fails.
install_pulumi() {
  local version="$1" home_dir="$2" installer
  [[ "${TESSERA_PULUMI_INSTALL:-1}" != "0" && -n "$version" ]] || return 1
  command -v curl >/dev/null 2>&1 || return 1
  installer="$(mktemp)" || return 1
  if ! curl -fsSL --connect-timeout 10 --max-time 120 "$PULUMI_INSTALL_URL" -o "$installer" 2>/dev/null; then
    rm -f "$installer"
    return 1
  fi
  echo "==> installing the Pulumi CLI $version into $home_dir/bin (from $PULUMI_INSTALL_URL; for this project only)"
  if ! sh "$installer" --version "$version" --install-root "$home_dir" --no-edit-path >&2; then
    rm -f "$installer"
    echo "error: the Pulumi installer failed (its output is above)." >&2
    return 1
  fi
  rm -f "$installer"
  [[ -x "$home_dir/bin/pulumi" ]]
}

# Put a Pulumi CLI on PATH (see the header), or print how to install one and return 127.
ensure_pulumi() {
  command -v pulumi >/dev/null 2>&1 && return 0
  local version home_dir have=""
  version="$(pinned_pulumi_version)"
  home_dir="${TESSERA_PULUMI_HOME:-$ROOT/.pulumi}"
  if [[ -x "$home_dir/bin/pulumi" ]]; then
    have="$("$home_dir/bin/pulumi" version 2>/dev/null || true)"
  fi
  if [[ -n "$have" && ( -z "$version" || "$have" == "v$version" ) ]] || install_pulumi "$version" "$home_dir"; then
    export PATH="$home_dir/bin:$PATH"
    return 0
  fi
  if [[ -n "$have" ]]; then
    echo "note: using Pulumi $have from $home_dir/bin; the pinned $version could not be installed." >&2
    export PATH="$home_dir/bin:$PATH"
    return 0
  fi
  echo "error: the Pulumi CLI is not installed (or not on PATH)." >&2
  echo "install the version Tessera is tested with (${version:-see requirements.txt}):" >&2
  echo "  curl -fsSL $PULUMI_INSTALL_URL | sh -s -- --version ${version:-<version>}" >&2
  echo "  export PATH=\"\$HOME/.pulumi/bin:\$PATH\"" >&2
  echo "then run this command again." >&2
  return 127
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

  ensure_pulumi || return $?

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
