"""The resource.k8s.io/v1 verbs of `FakeKubeApi` (the tables and their semantics: `fake_dra`)."""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

from tessera.kube.api import Conflict, KubeObject, WatchEvent, WatchEventType
from tessera.kube.fake_dra import ResourceClaimTable, ResourceSliceTable
from tessera.kube.fake_objects import deep_copy, now_rfc3339
from tessera.kube.fake_watch import Kind, WatchLog


class FakeDraApi:
    """Mixed into `FakeKubeApi`, which sets these attributes up and guards them with `_cond`."""

    _cond: threading.Condition
    _slices: ResourceSliceTable
    _claims: ResourceClaimTable
    _watch_log: WatchLog
    _revision: int
    conflicts: int

    _emit: Callable[[Kind, WatchEventType, KubeObject], None]
    _bump: Callable[[KubeObject], None]
    _is_closed: Callable[[], bool]

    def get_resource_claim(self, namespace: str, name: str) -> KubeObject:
        with self._cond:
            return deep_copy(self._claims.get(namespace, name))

    def put_resource_claim(self, body: KubeObject) -> KubeObject:
        """Test helper (not part of KubeApi): store a ResourceClaim as given, status included,
        as if created and then allocated and reserved by kube-scheduler."""
        with self._cond:
            meta = body.get("metadata") or {}
            existed = self._claims.has(str(meta.get("namespace") or "default"), str(meta.get("name")))
            stored = self._claims.put(deep_copy(body), str(uuid.uuid4()), now_rfc3339())
            self._emit(Kind.RESOURCE_CLAIM, "MODIFIED" if existed else "ADDED", stored)
            return deep_copy(stored)

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        """Test helper (not part of KubeApi)."""
        with self._cond:
            gone = self._claims.delete(namespace, name)
            self._bump(gone)
            self._emit(Kind.RESOURCE_CLAIM, "DELETED", gone)

    def list_resource_claims(self) -> list[KubeObject]:
        return self.list_resource_claims_and_version()[0]

    def list_resource_claims_and_version(self) -> tuple[list[KubeObject], str]:
        with self._cond:
            return [deep_copy(c) for c in self._claims.all()], str(self._revision)

    def list_resource_slices(self, *, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        with self._cond:
            return [deep_copy(s) for s in self._slices.select(node_name, driver)]

    def list_resource_slices_and_version(self, *, driver: str | None = None) -> tuple[list[KubeObject], str]:
        with self._cond:
            return [deep_copy(s) for s in self._slices.select(None, driver)], str(self._revision)

    def create_resource_slice(self, body: KubeObject) -> KubeObject:
        with self._cond:
            try:
                stored = self._slices.create(deep_copy(body), str(uuid.uuid4()), now_rfc3339())
            except Conflict:
                self.conflicts += 1
                raise
            self._emit(Kind.RESOURCE_SLICE, "ADDED", stored)
            return deep_copy(stored)

    def replace_resource_slice(self, name: str, body: KubeObject) -> KubeObject:
        with self._cond:
            try:
                stored = self._slices.replace(name, deep_copy(body))
            except Conflict:
                self.conflicts += 1
                raise
            self._emit(Kind.RESOURCE_SLICE, "MODIFIED", stored)
            return deep_copy(stored)

    def delete_resource_slice(self, name: str) -> None:
        with self._cond:
            gone = self._slices.delete(name)
            self._bump(gone)
            self._emit(Kind.RESOURCE_SLICE, "DELETED", gone)

    def watch_resource_slices(
        self, *, driver: str | None = None, resource_version: str | None = None, stop_after_s: float | None = None
    ) -> Iterator[WatchEvent]:
        def snapshot() -> tuple[list[KubeObject], int]:
            return [deep_copy(s) for s in self._slices.select(None, driver)], self._revision

        events = self._watch_log.stream(Kind.RESOURCE_SLICE, snapshot, resource_version, stop_after_s, self._is_closed)
        return events if driver is None else _of_driver(events, driver)

    def watch_resource_claims(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        snapshot: Callable[[], tuple[list[KubeObject], int]] = lambda: ([deep_copy(c) for c in self._claims.all()], self._revision)  # noqa: E731
        return self._watch_log.stream(Kind.RESOURCE_CLAIM, snapshot, resource_version, stop_after_s, self._is_closed)


def _of_driver(events: Iterator[WatchEvent], driver: str) -> Iterator[WatchEvent]:
    """The `spec.driver` field selector on a watch: events of other drivers' slices are not sent."""
    for event in events:
        if (event.object.get("spec") or {}).get("driver") == driver:
            yield event
