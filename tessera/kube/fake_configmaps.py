"""core/v1 ConfigMaps of `FakeKubeApi`, indexed by the pods that own them.

Create answers 409 AlreadyExists for a taken name; replace (PUT) keeps uid and creationTimestamp,
answers 404 for a missing ConfigMap (the ConfigMap strategy does not create on update) and 409
Conflict for a stale `metadata.resourceVersion`, and updates unconditionally without one (the
ConfigMap strategy's `AllowUnconditionalUpdate` is true; kubernetes/kubernetes
pkg/registry/core/configmap/strategy.go). Deleting a pod collects the ConfigMaps whose
ownerReferences name its UID, as the garbage collector does, without scanning the store.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tessera.kube.api import KubeObject
from tessera.kube.fake_status import CONFIGMAPS, already_exists, bad_request, not_found, stale


class ConfigMapTable:
    """Not locked: `FakeKubeApi` calls it under its lock, hands out copies and passes `bump`."""

    def __init__(self, bump: Callable[[KubeObject], None]) -> None:
        self._bump = bump
        self._configmaps: dict[tuple[str, str], KubeObject] = {}
        self._owned: dict[str, set[tuple[str, str]]] = {}  # owner uid -> ConfigMaps naming it

    def _own(self, key: tuple[str, str], cm: KubeObject, sign: int) -> None:
        for owner in (cm.get("metadata") or {}).get("ownerReferences") or []:
            uid = owner.get("uid") if isinstance(owner, dict) else None
            if not isinstance(uid, str):
                continue
            if sign > 0:
                self._owned.setdefault(uid, set()).add(key)
            elif uid in self._owned:
                self._owned[uid].discard(key)
                if not self._owned[uid]:
                    del self._owned[uid]

    def create(self, namespace: str, cm: KubeObject) -> KubeObject:
        """Store `cm` (the caller's private copy, its metadata filled in)."""
        meta: dict[str, Any] = cm["metadata"]
        meta["namespace"] = namespace
        key = (namespace, meta["name"])
        if key in self._configmaps:
            raise already_exists(CONFIGMAPS, meta["name"])
        self._bump(cm)
        self._configmaps[key] = cm
        self._own(key, cm, +1)
        return cm

    def replace(self, namespace: str, name: str, cm: KubeObject) -> KubeObject:
        """PUT `cm` (the caller's private copy) as `name`."""
        meta: dict[str, Any] = cm.setdefault("metadata", {})
        sent = meta.get("name")
        if sent is not None and sent != name:
            raise bad_request(f"the name of the object ({sent}) does not match the name on the URL ({name})")
        old = self._configmaps.get((namespace, name))
        if old is None:
            raise not_found(CONFIGMAPS, name)
        wanted = meta.get("resourceVersion")
        if wanted and wanted != "0" and wanted != old["metadata"]["resourceVersion"]:  # "0" reads as unset
            raise stale(CONFIGMAPS, name)
        meta.update({"name": name, "namespace": namespace, "uid": old["metadata"]["uid"]})
        meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
        self._bump(cm)
        self._own((namespace, name), old, -1)
        self._configmaps[(namespace, name)] = cm
        self._own((namespace, name), cm, +1)
        return cm

    def get(self, namespace: str, name: str) -> KubeObject:
        cm = self._configmaps.get((namespace, name))
        if cm is None:
            raise not_found(CONFIGMAPS, name)
        return cm

    def in_namespace(self, namespace: str | None) -> Iterator[KubeObject]:
        return (cm for (ns, _), cm in self._configmaps.items() if namespace in (None, ns))

    def collect_owned_by(self, uid: str) -> None:
        """Delete the ConfigMaps `uid` owns (its owner was deleted)."""
        for key in sorted(self._owned.get(uid, ())):
            cm = self._configmaps.pop(key)
            self._own(key, cm, -1)

    def __len__(self) -> int:
        return len(self._configmaps)

    def parts(self) -> tuple[object, ...]:
        return (self._configmaps, self._owned)
