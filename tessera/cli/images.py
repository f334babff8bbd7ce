"""`tessera images lock|pin|policy-config`: the release's image digests, from registry to stacks.

Wiring only. `lock` asks a registry tool (`crane digest REF` by default) for the digest of the
image the release pushed and of every upstream image the stacks deploy, checks each, and writes the
lock file. `pin` writes a lock's digests into the stacks that have a `tessera:images` section (and
turns requireDigests on). `policy-config` prints the policy pack config that matches a stack's
requireDigests, so the pack is strict exactly when validation is. Exit 0 done, 2 anything wrong
(one `where: message` line each; nothing is written then).
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, StackConfig, load_stack_file
from tessera.cli.validate import expand
from tessera.imagepin.lock import ImageLock, LockError, build_lock, parse_lock, parse_ref, stack_refs
from tessera.imagepin.stack_edit import pin_stack_text

EXIT_OK = 0
EXIT_FAILED = 2
IMAGES_POLICY = "tessera-images-pinned"
RESOLVE_TIMEOUT_S = 120


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "images",
        help="resolve image digests into a lock file and pin stacks by them (used by the release workflow)",
        description="Pin the stacks' images by the digests a release resolved. See docs/operations.md, 'Release: release.yml — images and digests'.",
    )
    actions = parser.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    lock = actions.add_parser("lock", help="resolve digests with a registry tool and write the lock file")
    lock.add_argument("stack_files", nargs="+", metavar="STACK_FILE", help="stacks whose images to resolve; a directory means its Pulumi.*.yaml")
    lock.add_argument("--tessera", required=True, metavar="REPOSITORY:TAG", help="the Tessera image the release pushed, e.g. ghcr.io/acme/tessera:0.2.0")
    lock.add_argument("--release", default=None, help="release name recorded in the lock, e.g. v0.2.0")
    lock.add_argument("--resolve-command", default="crane digest", metavar="CMD", help="prints the digest of the ref appended to it (default: 'crane digest')")
    lock.add_argument("--expect-tessera-digest", default=None, metavar="DIGEST", help="fail unless the registry reports this digest for --tessera (the one the build pushed)")
    lock.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="lock file to write, e.g. stacks/images.lock.json")
    lock.set_defaults(handler=run_lock)
    pin = actions.add_parser("pin", help="write a lock's digests into stack files (those with a tessera:images section)")
    pin.add_argument("lock_file", type=Path, metavar="LOCK_FILE")
    pin.add_argument("stack_files", nargs="+", metavar="STACK_FILE", help="a directory means its Pulumi.*.yaml")
    pin.set_defaults(handler=run_pin)
    policy = actions.add_parser("policy-config", help="print the policy pack config matching a stack's images.requireDigests")
    policy.add_argument("stack_file", type=Path, metavar="STACK_FILE")
    policy.set_defaults(handler=run_policy_config)


def _fail(lines: list[str]) -> int:
    print("\n".join(lines), file=sys.stderr)
    return EXIT_FAILED


def _load(file: str | Path) -> StackConfig:
    try:
        return load_stack_file(file)
    except ConfigError as error:
        raise LockError([f"{file}: {problem}" for problem in error.problems]) from None


def resolver(command: str) -> Any:
    """A function ref -> digest running `command ref` (the registry tool's adapter)."""
    argv = shlex.split(command)

    def resolve(ref: str) -> str:
        try:
            done = subprocess.run([*argv, ref], capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise LockError([f"{ref}: {argv[0]}: command not found (install it, or pass --resolve-command)"]) from None
        except subprocess.TimeoutExpired:
            raise LockError([f"{ref}: {command} gave no answer in {RESOLVE_TIMEOUT_S} s"]) from None
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise LockError([f"{ref}: {command} failed: {reason}"])
        return done.stdout

    return resolve


def run_lock(args: argparse.Namespace) -> int:
    try:
        tessera = parse_ref(args.tessera)
        refs = [ref for file in expand(args.stack_files) for ref in stack_refs(_load(file), tessera)]
        lock = build_lock(tessera, refs, resolver(args.resolve_command), args.release)
        expected = args.expect_tessera_digest
        if expected is not None and lock.digest(tessera) != expected:
            raise LockError([f"{tessera}: the registry reports {lock.digest(tessera)}, the build pushed {expected}"])
    except LockError as error:
        return _fail(error.lines)
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(lock.to_json(), encoding="utf-8")
    except OSError as error:
        return _fail([f"{args.output}: cannot write: {error.strerror or error}"])
    for ref, digest in sorted(lock.digests.items()):
        print(f"{ref}@{digest}")
    return EXIT_OK


def _read_lock(path: Path) -> ImageLock:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise LockError([f"{path}: cannot read: {error.strerror or error}"]) from None
    try:
        return parse_lock(text)
    except LockError as error:
        raise LockError([f"{path}: {line}" for line in error.lines]) from None


def run_pin(args: argparse.Namespace) -> int:
    try:
        lock = _read_lock(args.lock_file)
        pinned: dict[Path, str] = {}
        for file in map(Path, expand(args.stack_files)):
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as error:
                raise LockError([f"{file}: cannot read: {error.strerror or error}"]) from None
            _load(file)  # a stack that is already invalid is reported as such, not as a pinning problem
            try:
                new = pin_stack_text(text, lock)
            except LockError as error:
                raise LockError([f"{file}: {line}" for line in error.lines]) from None
            if new is None:
                print(f"{file}: no tessera:images section; deploys by tag, not pinned")
            else:
                pinned[file] = new
    except LockError as error:
        return _fail(error.lines)
    for file, text in pinned.items():  # only once every stack pinned cleanly
        file.write_text(text, encoding="utf-8")
        print(f"{file}: pinned {lock.tessera} and its upstream images by digest; requireDigests: true")
    return EXIT_OK


def policy_config(config: StackConfig) -> dict[str, dict[str, bool]]:
    """The policy pack config for a stack: the pack requires digests exactly when the stack does."""
    return {IMAGES_POLICY: {"requireImageDigests": config.images.require_digests}}


def run_policy_config(args: argparse.Namespace) -> int:
    try:
        config = _load(args.stack_file)
    except LockError as error:
        return _fail(error.lines)
    print(json.dumps(policy_config(config), indent=2))
    return EXIT_OK
