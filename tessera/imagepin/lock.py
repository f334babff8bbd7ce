"""The image lock: digests a release resolved from the registries, and which refs the stacks need.

`stacks/images.lock.json` is written by the release workflow only (`tessera images lock`), from
digests the registries report for the image it just pushed and for the upstream images the stacks
deploy. `tessera images pin` then writes them into the stacks. No digest is ever typed by a person.

Format (schemaVersion 1)::

    {"schemaVersion": 1, "release": "v0.2.0",
     "tessera": "ghcr.io/acme/tessera:0.2.0",
     "digests": {"ghcr.io/acme/tessera:0.2.0": "sha256:...",
                 "registry.k8s.io/kube-scheduler:v1.30.0": "sha256:..."}}
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from tessera.model import ImageRef
from tessera.model.values import made_up_digest_reason

if TYPE_CHECKING:
    from tessera.model import StackConfig

SCHEMA_VERSION: Final = 1
NOTE: Final = "Written by the release workflow (tessera images lock); do not edit. `tessera images pin` writes these digests into the stacks."


class LockError(ValueError):
    """Something wrong with a lock or a ref; `lines` are `where: message` texts."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Ref:
    """repository:tag, without a digest: what a lock maps to a digest."""

    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.repository}:{self.tag}"


def parse_ref(text: str) -> Ref:
    """`repository:tag` (the tag is after the last ':' that follows the last '/'); LockError if not one."""
    repository, sep, tag = text.rpartition(":")
    if not sep or "/" in tag or "@" in text:
        raise LockError([f"{text!r} is not an image reference repository:tag (no digest)"])
    try:
        ImageRef(repository=repository, tag=tag)
    except ValidationError as error:
        raise LockError([f"{text!r}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors()]) from None
    return Ref(repository, tag)


def stack_refs(config: StackConfig, tessera: Ref | None = None) -> list[Ref]:
    """The images a stack deploys, tags resolved as the manifests resolve them; `tessera` replaces ours.
    Workload images (`workloads[].image`) are included while they have no digest."""
    version = config.cluster.kubernetes_version
    scheduler = config.images.kube_scheduler
    out = [tessera or Ref(config.images.tessera.repository, config.images.tessera.tag or "latest")]
    scheduler_tag = scheduler.tag or (f"v{version}" if version else None)
    if scheduler_tag is None:
        raise LockError(["images.kubeScheduler.tag: is needed to pin the image (or set cluster.kubernetesVersion)"])
    out.append(Ref(scheduler.repository, scheduler_tag))
    return out + workload_refs(config)


def workload_refs(config: StackConfig) -> list[Ref]:
    """The workloads' images still to pin: those with a tag and no digest (a digest the team wrote
    stays theirs)."""
    return [Ref(w.image.repository, w.image.tag) for w in config.workloads if w.image.tag is not None and w.image.digest is None]


def check_digest(ref: str, digest: str) -> str | None:
    """Why `digest` is not a digest a registry could have reported for `ref`, or None."""
    hex_digits = digest.removeprefix("sha256:")
    if not digest.startswith("sha256:") or len(hex_digits) != 64 or any(c not in "0123456789abcdef" for c in hex_digits):
        return f"{ref}: {digest!r} is not a sha256 digest"
    reason = made_up_digest_reason(hex_digits)
    return f"{ref}: {digest[:19]}... looks made up: it {reason}" if reason else None


@dataclass(frozen=True)
class ImageLock:
    tessera: Ref
    digests: dict[str, str] = field(default_factory=dict)
    release: str | None = None

    def digest(self, ref: Ref) -> str:
        try:
            return self.digests[str(ref)]
        except KeyError:
            raise LockError([f"the lock has no digest for {ref}; run the release again after adding it to a stack"]) from None

    def to_json(self) -> str:
        data: dict[str, Any] = {"schemaVersion": SCHEMA_VERSION, "note": NOTE}
        if self.release:
            data["release"] = self.release
        data["tessera"] = str(self.tessera)
        data["digests"] = dict(sorted(self.digests.items()))
        return json.dumps(data, indent=2) + "\n"


def build_lock(tessera: Ref, refs: Iterable[Ref], resolve: Callable[[str], str], release: str | None = None) -> ImageLock:
    """Resolve every ref once (`resolve` asks the registry) and check what comes back."""
    digests: dict[str, str] = {}
    problems: list[str] = []
    for ref in sorted({str(r) for r in (tessera, *refs)}):
        digest = resolve(ref).strip()
        problem = check_digest(ref, digest)
        if problem:
            problems.append(problem)
        digests[ref] = digest
    if problems:
        raise LockError(problems)
    return ImageLock(tessera, digests, release)


def parse_lock(text: str) -> ImageLock:
    """A lock file's content; LockError with `key: message` lines for anything off."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise LockError([f"line {error.lineno}: not JSON: {error.msg}"]) from None
    if not isinstance(data, dict):
        raise LockError(["not a JSON object"])
    problems: list[str] = []
    unknown = sorted(set(data) - {"schemaVersion", "note", "release", "tessera", "digests"})
    problems += [f"{key}: unknown key" for key in unknown]
    if data.get("schemaVersion") != SCHEMA_VERSION:
        problems.append(f"schemaVersion: must be {SCHEMA_VERSION}, got {data.get('schemaVersion')!r}")
    digests = data.get("digests")
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        problems.append("digests: must map repository:tag to sha256:... digests")
        digests = {}
    for ref, digest in digests.items():
        try:
            parse_ref(ref)
        except LockError as error:
            problems += [f"digests: {line}" for line in error.lines]
        problem = check_digest(ref, digest)
        if problem:
            problems.append(f"digests: {problem}")
    tessera: Ref | None = None
    try:
        tessera = parse_ref(str(data.get("tessera", "")))
    except LockError as error:
        problems += [f"tessera: {line}" for line in error.lines]
    if tessera is not None and str(tessera) not in digests:
        problems.append(f"tessera: {tessera} has no entry in digests")
    release = data.get("release")
    if release is not None and not isinstance(release, str):
        problems.append("release: must be a string")
    if problems or tessera is None:
        raise LockError(problems)
    return ImageLock(tessera, dict(digests), release)
