"""Nodes under server-side apply, as kube-apiserver keeps them: values plus who owns each field.

The stand-in for the API server in the node patch lifecycle tests. It models the rules of
https://kubernetes.io/docs/reference/using-api/server-side-apply/ (Kubernetes 1.30 and newest) for
the three node fields Tessera's patches touch:

- `metadata.labels` and `metadata.annotations` are maps: every key is its own field.
- `spec.taints` is `x-kubernetes-list-type: atomic` (1.30 OpenAPI): the whole list is one field.
- An apply sets the fields of its configuration and makes its manager an owner. A field whose value
  another manager owns with a *different* value is a conflict: an error, or with `force` the other
  managers lose it. Applying the same value makes the managers co-owners.
- A field the manager applied before and leaves out now loses that owner; a field with no owner
  left is removed ("Transferring ownership" / "Field management").
- Apply creates the object when it does not exist (kube-apiserver `handlers/patch.go`:
  `forceAllowCreate` for apply patches): the ghost-node hazard the node patches avoid.
- A non-apply write (`kubectl label`, `kubectl taint`, a controller's Update) takes ownership of the
  fields whose value it changes, without conflicts.

`managed_fields()` renders the ownership as `metadata.managedFields` (FieldsV1), which is what
`tessera.model.membership` reads back at the next preview.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Field = tuple[str, ...]  # ("labels", key) | ("annotations", key) | ("taints",)
TAINTS: Field = ("taints",)


class ApplyConflict(Exception):
    """Apply without force met a field another manager owns with another value."""


@dataclass
class StoredNode:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] | None = None
    owners: dict[Field, set[str]] = field(default_factory=dict)


@dataclass
class SsaNodeStore:
    nodes: dict[str, StoredNode] = field(default_factory=dict)
    created_by_apply: list[str] = field(default_factory=list)

    def add(self, name: str, labels: Mapping[str, str], taints: list[dict[str, str]] | None = None, manager: str = "kubelet") -> None:
        node = StoredNode(dict(labels), {}, copy.deepcopy(taints))
        for key in labels:
            node.owners[("labels", key)] = {manager}
        if taints:
            node.owners[TAINTS] = {manager}
        self.nodes[name] = node

    def delete(self, name: str) -> None:
        del self.nodes[name]

    @staticmethod
    def _get(node: StoredNode, f: Field) -> Any:
        if f == TAINTS:
            return node.taints
        return getattr(node, f[0]).get(f[1])

    @staticmethod
    def _set(node: StoredNode, f: Field, value: Any) -> None:
        if f == TAINTS:
            node.taints = copy.deepcopy(value)
        else:
            getattr(node, f[0])[f[1]] = value

    @staticmethod
    def _remove(node: StoredNode, f: Field) -> None:
        if f == TAINTS:
            node.taints = None
        else:
            getattr(node, f[0]).pop(f[1], None)

    def apply(self, name: str, manager: str, config: Mapping[Field, Any], *, force: bool) -> None:
        """Apply ``config`` (field -> value) as ``manager``."""
        if name not in self.nodes:
            self.nodes[name] = StoredNode()
            self.created_by_apply.append(name)
        node = self.nodes[name]
        for f, value in config.items():
            others = node.owners.get(f, set()) - {manager}
            if others and self._get(node, f) != value:
                if not force:
                    raise ApplyConflict(f"{name}: {f} is owned by {sorted(others)}")
                node.owners[f] = set()
        for f in [f for f, owners in node.owners.items() if manager in owners and f not in config]:
            node.owners[f].discard(manager)
            if not node.owners[f]:
                del node.owners[f]
                self._remove(node, f)
        for f, value in config.items():
            self._set(node, f, value)
            node.owners.setdefault(f, set()).add(manager)

    def update(self, name: str, manager: str, changes: Mapping[Field, Any]) -> None:
        """A non-apply write: takes the fields it changes."""
        node = self.nodes[name]
        for f, value in changes.items():
            if self._get(node, f) != value:
                node.owners[f] = set()
            self._set(node, f, value)
            node.owners.setdefault(f, set()).add(manager)

    def managed_fields(self, name: str) -> list[dict[str, Any]]:
        node = self.nodes[name]
        by_manager: dict[str, dict[str, Any]] = {}
        for f, owners in node.owners.items():
            for manager in owners:
                entry = by_manager.setdefault(manager, {})
                if f == TAINTS:
                    entry.setdefault("f:spec", {})["f:taints"] = {}
                else:
                    entry.setdefault("f:metadata", {}).setdefault(f"f:{f[0]}", {})[f"f:{f[1]}"] = {}
        return [{"manager": m, "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": v} for m, v in sorted(by_manager.items())]

    def objects(self) -> list[dict[str, Any]]:
        """The nodes as `kubectl get nodes -o json --show-managed-fields` lists them."""
        out = []
        for name, node in sorted(self.nodes.items()):
            spec = {"taints": copy.deepcopy(node.taints)} if node.taints else {}
            meta = {"name": name, "labels": dict(node.labels), "annotations": dict(node.annotations), "managedFields": self.managed_fields(name)}
            out.append({"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec})
        return out


def patch_config(inputs: Mapping[str, Any]) -> tuple[str, str, bool, dict[Field, Any]]:
    """(node, field manager, force, applied fields) of a declared NodePatch's inputs, as
    pulumi-kubernetes sends them (field manager and force from the pulumi.com/* annotations)."""
    meta = inputs.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    config: dict[Field, Any] = {("labels", k): v for k, v in (meta.get("labels") or {}).items()}
    config.update({("annotations", k): v for k, v in annotations.items()})
    taints = (inputs.get("spec") or {}).get("taints")
    if taints is not None:
        config[TAINTS] = [{k: v for k, v in t.items() if v is not None} for t in taints]
    return meta["name"], annotations["pulumi.com/patchFieldManager"], annotations.get("pulumi.com/patchForce") == "true", config
