#!/usr/bin/env bash
# What a change does to a stack's Kubernetes objects: render the stack at a git ref with THAT ref's
# code (a temporary `git worktree`), render the working tree's stack with the working tree's code,
# and compare them with `tessera diff`.
#
#   scripts/render-diff.sh <git-ref> <stack> [tessera diff options...]
#   scripts/render-diff.sh origin/main prod
#   scripts/render-diff.sh "$BASE_SHA" prod --format markdown --title "Rendered manifests: prod"
#
# Needs no cloud and no cluster. Exit codes are tessera diff's: 0 no change, 1 changes, 2 trouble
# (unknown ref or stack, a render that fails). A stack that does not exist at the ref is compared
# against nothing (every object added); one deleted in the working tree against nothing (removed).
#
# Environment:
#   PYTHON   interpreter with Tessera's dependencies; default .venv/bin/python. When the ref's
#            requirements.txt differs, its dependencies go into a scratch virtualenv first.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
readonly ROOT
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

usage() {
  echo "usage: $0 <git-ref> <stack> [tessera diff options...]" >&2
  echo "  e.g. $0 origin/main prod --format markdown" >&2
}

# tessera from a source tree, whatever is installed in the interpreter
tessera_at() {
  local tree="$1" python="$2"
  shift 2
  (cd "$tree" && PYTHONPATH="$tree:$tree/node-agent" "$python" -m tessera.cli.main "$@")
}

main() {
  if [[ $# -lt 2 ]]; then
    usage
    return 2
  fi
  local ref="$1" stack="$2"
  shift 2
  if [[ ! "$stack" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "error: stack name '$stack' may only contain letters, digits, '.', '_' and '-'" >&2
    return 2
  fi
  if [[ ! -x "$PYTHON" ]]; then
    echo "error: no Python at $PYTHON; run 'make install' or set PYTHON" >&2
    return 2
  fi
  local commit
  if ! commit="$(git -C "$ROOT" rev-parse --verify --quiet "$ref^{commit}")"; then
    echo "error: '$ref' is not a commit in this repository (in CI, check out with fetch-depth: 0)" >&2
    return 2
  fi
  local stack_path="stacks/Pulumi.$stack.yaml"
  if [[ ! -f "$ROOT/$stack_path" ]] && ! git -C "$ROOT" cat-file -e "$commit:$stack_path" 2>/dev/null; then
    echo "error: no stack '$stack' at $ref or in the working tree (no $stack_path)" >&2
    return 2
  fi

  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand now: the trap must remove this run's worktree
  trap "git -C '$ROOT' worktree remove --force '$work/tree' >/dev/null 2>&1 || true; rm -rf '$work'" EXIT
  git -C "$ROOT" worktree add --quiet --detach "$work/tree" "$commit"
  mkdir "$work/base" "$work/head"

  if [[ -f "$work/tree/$stack_path" ]]; then
    local base_python="$PYTHON"
    if ! cmp -s "$work/tree/requirements.txt" "$ROOT/requirements.txt"; then
      echo "note: requirements.txt differs at $ref; installing its dependencies into a scratch virtualenv" >&2
      python3 -m venv "$work/venv"
      "$work/venv/bin/pip" install -q -r "$work/tree/requirements.txt"
      base_python="$work/venv/bin/python"
    fi
    if ! tessera_at "$work/tree" "$base_python" render "$stack_path" -o "$work/base" >/dev/null; then
      echo "error: rendering $stack_path at $ref failed (above); cannot compare" >&2
      return 2
    fi
  else
    echo "note: $stack_path does not exist at $ref: every object is new" >&2
  fi

  local head="$work/head"
  if [[ -f "$ROOT/$stack_path" ]]; then
    head="$ROOT/$stack_path"  # rendered in memory by tessera diff, with the working tree's code
  else
    echo "note: $stack_path was deleted: every object goes" >&2
  fi
  local rc=0
  tessera_at "$ROOT" "$PYTHON" diff "$work/base" "$head" "$@" || rc=$?
  return "$rc"
}

main "$@"
