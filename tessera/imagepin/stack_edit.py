"""Write a lock's digests into a stack file's text, keeping its comments and layout.

Only the `tessera:images` section and the workloads' images change: `tessera` gets the released
repository, tag and digest, `kubeScheduler` the digest of the tag it already deploys, each
`workloads[].image` without a digest the digest of its tag, and `requireDigests` becomes true. Values
are replaced where they are; missing keys are added after the last key of their mapping (block or
flow style). A stack without a `tessera:images` section is not pinned (it deploys by tag on
purpose, like dev). The edited text is validated before anyone writes it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

import yaml

from tessera.model import ConfigError, StackConfig
from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera.imagepin.lock import ImageLock, LockError, Ref, stack_refs

IMAGES_KEY: Final = "tessera:images"
WORKLOADS_KEY: Final = "tessera:workloads"


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


def _scalar(value: str | bool, quote: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # quote what YAML would not read back as this very string (tags such as 1.30 read as numbers)
    plain = not quote and yaml.safe_load(value) == value and ": " not in value and not value.startswith(("'", '"', "{", "[", "#"))
    return value if plain else json.dumps(value)


def _find(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for key_node, value_node in mapping.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def _last_scalar(node: yaml.Node) -> yaml.Node:
    """The last scalar inside a node: where its text really ends (a block's end mark runs on past comments)."""
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node


def _insert(text: str, mapping: yaml.MappingNode, key: str, value: str) -> _Edit:
    if mapping.flow_style:
        close = mapping.end_mark.index - 1
        if text[close] != "}":
            raise LockError([f"line {mapping.end_mark.line + 1}: cannot add {key}: expected '}}'"])
        return _Edit(close, close, f"{', ' if mapping.value else ''}{key}: {value}")
    indent = mapping.value[0][0].start_mark.column
    end = _last_scalar(mapping.value[-1][1]).end_mark.index
    eol = text.find("\n", end)
    if eol < 0:
        return _Edit(len(text), len(text), f"\n{' ' * indent}{key}: {value}\n")
    return _Edit(eol + 1, eol + 1, f"{' ' * indent}{key}: {value}\n")


def _set(text: str, mapping: yaml.MappingNode, key: str, value: str) -> _Edit:
    found = _find(mapping, key)
    if found is None:
        return _insert(text, mapping, key, value)
    node = found[1]
    if not isinstance(node, yaml.ScalarNode):
        raise LockError([f"line {node.start_mark.line + 1}: {key} must be a single value"])
    return _Edit(node.start_mark.index, node.end_mark.index, value)


def _workload_edits(text: str, config: StackConfig, lock: ImageLock) -> list[_Edit]:
    """A `digest:` for every workload image that has a tag and no digest."""
    root = yaml.compose(text)
    section = _find(root, "config") if isinstance(root, yaml.MappingNode) else None
    workloads = _find(section[1], WORKLOADS_KEY) if section is not None and isinstance(section[1], yaml.MappingNode) else None
    if workloads is None or not isinstance(workloads[1], yaml.SequenceNode):
        return []
    edits: list[_Edit] = []
    for workload, node in zip(config.workloads, workloads[1].value, strict=True):
        image = workload.image
        if image.tag is None or image.digest is not None:
            continue
        found = _find(node, "image") if isinstance(node, yaml.MappingNode) else None
        if found is None or not isinstance(found[1], yaml.MappingNode) or not found[1].value:
            raise LockError([f"line {node.start_mark.line + 1}: workload {workload.name}: image must be a mapping"])
        edits.append(_set(text, found[1], "digest", _scalar(lock.digest(Ref(image.repository, image.tag)))))
    return edits


def _images_node(text: str) -> yaml.MappingNode | None:
    root = yaml.compose(text)
    config = _find(root, "config") if isinstance(root, yaml.MappingNode) else None
    if config is None or not isinstance(config[1], yaml.MappingNode):
        raise LockError(["not a Pulumi stack file: expected a top-level 'config:' mapping"])
    images = _find(config[1], IMAGES_KEY)
    if images is None:
        return None
    if not isinstance(images[1], yaml.MappingNode) or not images[1].value:
        raise LockError([f"line {images[0].start_mark.line + 1}: {IMAGES_KEY} must be a mapping with at least one key"])
    return images[1]


def _config(text: str) -> StackConfig:
    try:
        return from_pulumi_mapping(stack_mapping(yaml.safe_load(text)))
    except ConfigError as error:
        raise LockError([str(p) for p in error.problems]) from None


def pin_stack_text(text: str, lock: ImageLock) -> str | None:
    """The stack text with the lock's images pinned; None when the stack has no images section."""
    images = _images_node(text)
    if images is None:
        return None
    config = _config(text)
    scheduler = stack_refs(config)[1]
    tessera = lock.tessera
    edits: list[_Edit] = [_set(text, images, "requireDigests", _scalar(True))]
    for key, wanted in (
        ("tessera", {"repository": tessera.repository, "tag": tessera.tag, "digest": lock.digest(tessera)}),
        ("kubeScheduler", {"repository": scheduler.repository, "tag": scheduler.tag, "digest": lock.digest(scheduler)}),
    ):
        found = _find(images, key)
        if found is None:
            body = ", ".join(f"{k}: {_scalar(v, quote=k == 'tag')}" for k, v in wanted.items())
            edits.append(_insert(text, images, key, "{" + body + "}"))
            continue
        if not isinstance(found[1], yaml.MappingNode) or not found[1].value:
            raise LockError([f"line {found[0].start_mark.line + 1}: images.{key} must be a mapping"])
        edits += [_set(text, found[1], k, _scalar(v, quote=k == "tag")) for k, v in wanted.items()]
    edits += _workload_edits(text, config, lock)
    out = text
    # from the end backwards so earlier offsets stay right; inserts at one place keep their order
    for _, edit in sorted(enumerate(edits), key=lambda pair: (pair[1].start, pair[0]), reverse=True):
        out = out[: edit.start] + edit.text + out[edit.end :]
    pinned = _config(out)  # the edit must give a valid stack that deploys exactly the locked images
    expected = (f"{tessera}@{lock.digest(tessera)}", f"{scheduler}@{lock.digest(scheduler)}")
    if (pinned.tessera_image(), pinned.kube_scheduler_image()) != expected or not pinned.images.require_digests:
        raise LockError([f"pinning produced {pinned.tessera_image()}, {pinned.kube_scheduler_image()}; expected {', '.join(expected)}"])
    unpinned = [w.name for w in pinned.workloads if w.image.digest is None]
    if unpinned:
        raise LockError([f"pinning left workload image(s) without a digest: {', '.join(unpinned)}"])
    return out
