"""The extender's view of dra pools: Tessera's ResourceSlices and the claims allocated on them, as a
`tessera.alloc.Cluster`, kept current by two watches (list, then watch: `tessera.kube.informer`).

- A node is what its slices describe (`dra_objects.node_from_slice`). A node may briefly have two
  slices (a plugin replacing its own); as kube-scheduler does, the one with the highest
  `spec.pool.generation` counts, the older is ignored until it goes.
- A claim holds the GPUs its allocation results name (`dra_objects.claim_usage`) on the node that
  publishes the result's pool. A claim whose pool is not (yet) in the view waits and is counted
  when the slice arrives; it is counted again whenever that node's devices change, and forgotten
  when the claim goes or its allocation is removed.
- A relist (the first list, and after a 410 Gone or an error) rebuilds the whole view from what it
  lists, so deletions missed while no watch was open are settled.

Every count is a function of the objects last seen: applying the same events again, or a relist
of the same objects, gives the same view (`tests/tessera/scheduler/test_dra_view.py`).

Not thread-safe: `lock` guards every call; the informers' threads and the scorer take it.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.alloc import Cluster, InvalidRequest, PlacementPolicy, PodUid, ReserveConflict
from tessera.kube.api import KubeObject, WatchEvent
from tessera.model.contract import DRA_DRIVER
from tessera.scheduler.dra_objects import NodeDevices, claim_usage, list_of, mapping_of, node_from_slice

log = logging.getLogger(__name__)


def _meta(body: KubeObject) -> Mapping[str, Any]:
    return mapping_of(body.get("metadata"))


@dataclass(frozen=True)
class _Slice:
    node: str
    pool: str
    generation: int
    body: KubeObject
    # what the devices are, not how full: the model's NodeState is mutable and is built afresh
    # from `body` each time the node enters the model
    signature: tuple[object, ...]

    def devices(self) -> NodeDevices:
        devices = node_from_slice(self.body)
        assert devices is not None  # `_slice_of` read the same body
        return devices


def _slice_of(body: KubeObject) -> _Slice | None:
    devices = node_from_slice(body)
    if devices is None:
        return None
    pool = mapping_of(mapping_of(body.get("spec")).get("pool"))
    generation = pool.get("generation")
    signature = (
        tuple((g.index, g.uuid, g.model, g.memory_mib, g.healthy) for g in devices.node.gpus),
        tuple(sorted(devices.index_of.items())),
    )
    return _Slice(devices.node.name, str(pool.get("name") or devices.node.name), generation if isinstance(generation, int) else 0, body, signature)


def _claim_uid(body: KubeObject) -> str:
    meta = _meta(body)
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _claim_pools(body: KubeObject) -> set[str]:
    """The pools a claim's Tessera allocation results name (empty: it holds no Tessera device)."""
    results = list_of(mapping_of(mapping_of(mapping_of(body.get("status")).get("allocation")).get("devices")).get("results"))
    return {str(r.get("pool")) for r in map(mapping_of, results) if r.get("driver") == DRA_DRIVER}


class DraView:
    def __init__(self, policy: PlacementPolicy) -> None:
        self.lock = threading.Lock()
        self._policy = policy
        self.cluster = Cluster(policy=policy)
        self._slices: dict[str, _Slice] = {}  # slice name -> what it describes
        self._slice_names: dict[str, set[str]] = {}  # node -> its slices' names
        self._nodes: dict[str, NodeDevices] = {}  # node -> its devices in the view
        self._signatures: dict[str, tuple[object, ...]] = {}  # node -> the signature of its devices in the model
        self._pools: dict[str, str] = {}  # pool name -> node, of the slices in the view
        self._pool_of: dict[str, str] = {}  # node -> its pool in the view
        self._claims: dict[str, KubeObject] = {}  # uid -> claim holding Tessera devices
        self._claims_of_pool: dict[str, set[str]] = {}
        self.slices_synced = threading.Event()
        self.claims_synced = threading.Event()

    @property
    def synced(self) -> bool:
        return self.slices_synced.is_set() and self.claims_synced.is_set()

    # --- slices ---------------------------------------------------------------------------------
    def slice_event(self, event: WatchEvent) -> None:
        with self.lock:
            name = str(_meta(event.object).get("name") or "")
            before = self._slices.pop(name, None)
            if before is not None:
                names = self._slice_names[before.node]
                names.discard(name)
                if not names:
                    del self._slice_names[before.node]
            found = _slice_of(event.object) if event.type != "DELETED" else None
            if found is not None:
                self._add_slice(name, found)
            for node in {s.node for s in (before, found) if s is not None}:
                self._settle_node(node)

    def replace_slices(self, items: list[KubeObject], _listed_at: float = 0.0) -> None:
        with self.lock:
            self._slices, self._slice_names = {}, {}
            for body in items:
                found = _slice_of(body)
                if found is not None:
                    self._add_slice(str(_meta(body).get("name") or ""), found)
            self._rebuild()

    def _add_slice(self, name: str, found: _Slice) -> None:
        self._slices[name] = found
        self._slice_names.setdefault(found.node, set()).add(name)

    def _effective(self, node: str) -> _Slice | None:
        """The node's slice of the highest generation (kube-scheduler ignores the older ones)."""
        mine = [(self._slices[name].generation, name) for name in self._slice_names.get(node, ())]
        return self._slices[max(mine)[1]] if mine else None

    def _settle_node(self, node: str) -> None:
        """The node's slices changed: its devices in the model, and the claims on it counted again.
        The plugin rewrites its slice after every prepare (device order only): when neither the
        devices nor the pool changed there is nothing to count again."""
        effective = self._effective(node)
        old = self._signatures.get(node)
        if effective is not None and old == effective.signature and self._pool_of.get(node) == effective.pool:
            return
        touched = set()
        if (pool := self._pool_of.pop(node, None)) is not None:
            del self._pools[pool]
            touched.add(pool)
        if effective is None:
            self._nodes.pop(node, None)
            self._signatures.pop(node, None)
            if old is not None:
                self.cluster.remove_node(node)
        else:
            self._pools[effective.pool], self._pool_of[node] = node, effective.pool
            touched.add(effective.pool)
            if old != effective.signature:
                self._enter(node, effective)
        for pool in touched:
            for uid in sorted(self._claims_of_pool.get(pool, ())):
                self._count(uid)

    # --- claims ---------------------------------------------------------------------------------
    def claim_event(self, event: WatchEvent) -> None:
        with self.lock:
            uid = _claim_uid(event.object)
            self._forget(uid)
            if event.type != "DELETED":
                self._remember(uid, event.object)
                self._count(uid)

    def replace_claims(self, items: list[KubeObject], _listed_at: float = 0.0) -> None:
        with self.lock:
            self._claims, self._claims_of_pool = {}, {}
            for body in items:
                self._remember(_claim_uid(body), body)
            self._rebuild()

    def _remember(self, uid: str, body: KubeObject) -> None:
        pools = _claim_pools(body)
        if not pools:
            return
        self._claims[uid] = body
        for pool in pools:
            self._claims_of_pool.setdefault(pool, set()).add(uid)

    def _forget(self, uid: str) -> None:
        self.cluster.release(PodUid(uid))
        body = self._claims.pop(uid, None)
        if body is None:
            return
        for pool in _claim_pools(body):
            holders = self._claims_of_pool.get(pool)
            if holders is not None:
                holders.discard(uid)
                if not holders:
                    del self._claims_of_pool[pool]

    def _count(self, uid: str) -> None:
        """Count the claim's devices as its allocation names them, if its node is in the view."""
        self.cluster.release(PodUid(uid))
        body = self._claims.get(uid)
        if body is None:
            return
        meta = _meta(body)
        try:
            usage = claim_usage(body, uid, self._nodes, self._pools)
            if usage is not None:
                self.cluster.hold(*usage)  # the API server's allocation: counted as it is
        except (InvalidRequest, ReserveConflict, TypeError, ValueError, KeyError) as exc:
            log.info("dra view: claim %s/%s not counted: %s", meta.get("namespace"), meta.get("name"), exc)

    def _enter(self, node: str, effective: _Slice) -> None:
        """Put the node's devices into the model (a fresh NodeState; pods on it stay counted)."""
        devices = effective.devices()
        self._nodes[node] = devices
        self._signatures[node] = effective.signature
        self.cluster.add_node(devices.node)

    def _rebuild(self) -> None:
        self.cluster = Cluster(policy=self._policy)
        self._nodes, self._pools, self._pool_of, self._signatures = {}, {}, {}, {}
        for node in sorted(self._slice_names):
            effective = self._effective(node)
            if effective is not None:
                self._pools[effective.pool], self._pool_of[node] = node, effective.pool
                self._enter(node, effective)
        for uid in sorted(self._claims):
            self._count(uid)

    # --- what the tests compare -------------------------------------------------------------------
    def counted(self) -> dict[str, tuple[str, tuple[tuple[int, int, int], ...]]]:
        """Per claim uid counted: (node, ((GPU index, milli, MiB), ...))."""
        with self.lock:
            out = {}
            for uid, placement in self.cluster.allocated().items():
                grants = tuple(sorted((g.index, g.milli, g.memory_mib) for c in placement.containers for g in c.grants))
                out[str(uid)] = (placement.node, grants)
            return out

    def node_names(self) -> Iterable[str]:
        with self.lock:
            return sorted(self._nodes)
