"""An in-memory Kubernetes API server implementing `KubeApi`.

Used by tests, `tessera scheduler serve --simulate`, benchmarks and, behind HTTP,
`tessera.kube.loopback`. It keeps the semantics the extender's safety depends on, so tests against
it mean something:

- every write bumps one cluster-wide resourceVersion (like etcd's revision);
- a patch with a stale `resource_version` fails with `Conflict` (optimistic concurrency);
- binding an already bound pod, or a pod whose UID changed, fails with `Conflict`;
- creating an existing ConfigMap fails with `Conflict` (AlreadyExists is a 409 too);
- deleting a pod deletes the ConfigMaps it owns (what the garbage collector does);
- evicting a pod deletes it like `delete_pod`, unless a disruption budget set with
  `set_disruption_budget` has no disruption left: 429, as the Eviction API answers;
- Leases (coordination.k8s.io/v1) as `fake_leases` describes;
- ResourceSlices and ResourceClaims (resource.k8s.io/v1) as `fake_dra` describes;
- watches replay events after a resourceVersion, or start with synthetic ADDED events of every
  object when no resourceVersion is given, and answer 410 Gone as `fake_watch` describes.

Errors carry upstream's `Status` (reason, message, details; `fake_status`), e.g.
`pods "p" not found`, `Operation cannot be fulfilled on pods/binding "p": pod p is already
assigned to node "n1"` (kubernetes/kubernetes pkg/registry/core/pod/storage/storage.go,
`BindingREST.assignPod`). One difference is kept on purpose: binding to a node that does not exist
is `NotFound` here, where the API server binds to any name; a test that binds to a typo then
fails at once instead of leaving a pod on no node.

All methods are thread-safe; every object handed out is a deep copy.

It is also the API server of `serve --simulate` at 10,000 nodes and ~100,000 pods, so no request
scans the store: pods are indexed by node (`list_pods(node_name=...)`, what kubelet-side readers
ask), ConfigMaps by owner (deleting a pod), a watch resumes by bisecting the event log, and copies
are pickle round trips (3x faster than `copy.deepcopy` for JSON-shaped objects, same result).
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.kube.api import Conflict, KubeObject, WatchEvent, WatchEventType
from tessera.kube.fake_configmaps import ConfigMapTable
from tessera.kube.fake_dra import ResourceClaimTable, ResourceSliceTable
from tessera.kube.fake_dra_api import FakeDraApi
from tessera.kube.fake_objects import deep_copy, now_rfc3339
from tessera.kube.fake_leases import LeaseTable
from tessera.kube.fake_status import (
    NODES,
    POD_BINDING,
    PODS,
    FieldError,
    already_exists,
    conflict,
    invalid,
    not_found,
    stale,
    too_many_requests,
    uid_precondition_failed,
)
from tessera.kube.fake_watch import Kind, WatchLog

_DEFAULT_HISTORY = 10_000  # events kept per kind for watch resumption
_now = now_rfc3339
_copy = deep_copy


@dataclass
class _DisruptionBudget:
    """A PodDisruptionBudget reduced to what eviction checks: its pods and how many may go now."""

    match_labels: dict[str, str]
    disruptions_allowed: int


def _match_labels(obj: KubeObject, label_selector: str | None) -> bool:
    """Equality-based selectors only (`a=b,c!=d,e`), which is all Tessera uses."""
    if not label_selector:
        return True
    labels: dict[str, str] = obj.get("metadata", {}).get("labels") or {}
    for term in (t.strip() for t in label_selector.split(",") if t.strip()):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.strip().rstrip("=")) != value.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _merge_map(target: dict[str, Any], patch: Mapping[str, str | None]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value


class FakeKubeApi(FakeDraApi):
    """In-memory API server; see the module docstring for the semantics it keeps."""

    def __init__(self, *, history: int = _DEFAULT_HISTORY, dra_consumable_capacity: bool = True) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._revision = 0
        self._pods: dict[tuple[str, str], KubeObject] = {}
        self._nodes: dict[str, KubeObject] = {}
        self._configmaps = ConfigMapTable(self._bump)
        self._pods_on: dict[str, dict[tuple[str, str], None]] = {}  # spec.nodeName -> pods (insertion-ordered)
        self._events: list[KubeObject] = []
        self._budgets: dict[tuple[str, str], _DisruptionBudget] = {}
        self._watch_log = WatchLog(self._cond, history)
        self._leases = LeaseTable(self._bump)
        # dra_consumable_capacity: the DRAConsumableCapacity gate (off = a 1.34 API server's default)
        self._slices = ResourceSliceTable(self._bump, consumable_capacity=dra_consumable_capacity)
        self._claims = ResourceClaimTable(self._bump)
        self._closed = False
        # counters a test or benchmark can read to prove what happened
        self.bind_calls = 0
        self.conflicts = 0
        self.evicted: list[tuple[str, str]] = []  # (namespace, name) of pods evicted, in order
        self.evictions_refused = 0  # 429 answers: a disruption budget held the pod

    # --- internals ----------------------------------------------------------------------------
    def _bump(self, obj: KubeObject) -> None:
        self._revision += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._revision)

    def _emit(self, kind: Kind, event_type: WatchEventType, obj: KubeObject) -> None:
        self._watch_log.record(kind, self._revision, event_type, _copy(obj))

    def _conflict(self, error: Conflict) -> Conflict:
        self.conflicts += 1
        return error

    def _pod(self, namespace: str, name: str) -> KubeObject:
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise not_found(PODS, name)
        return pod

    def _node(self, name: str) -> KubeObject:
        node = self._nodes.get(name)
        if node is None:
            raise not_found(NODES, name)
        return node

    def _place(self, key: tuple[str, str], pod: KubeObject, sign: int) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        on = self._pods_on.setdefault(str(node), {})
        if sign > 0:
            on[key] = None
        else:
            on.pop(key, None)
            if not on:
                del self._pods_on[str(node)]

    @staticmethod
    def _new_metadata(obj: KubeObject, kind: str) -> dict[str, Any]:
        meta: dict[str, Any] = obj.setdefault("metadata", {})
        if not meta.get("name"):
            required = FieldError("metadata.name", "Required value", "name or generateName is required", cause_type="FieldValueRequired")
            raise invalid(kind, "", "", [required])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        return meta

    # --- test / simulation helpers (not part of KubeApi) ----------------------------------------
    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._revision)

    def create_pod(self, body: KubeObject) -> KubeObject:
        with self._cond:
            pod = _copy(body)
            meta = self._new_metadata(pod, "Pod")
            meta.setdefault("namespace", "default")
            key = (meta["namespace"], meta["name"])
            if key in self._pods:
                raise self._conflict(already_exists(PODS, key[1]))
            pod.setdefault("spec", {})
            pod.setdefault("status", {}).setdefault("phase", "Pending")
            self._bump(pod)
            self._pods[key] = pod
            self._place(key, pod, +1)
            self._emit(Kind.POD, "ADDED", pod)
            return _copy(pod)

    def set_disruption_budget(self, namespace: str, name: str, match_labels: Mapping[str, str], disruptions_allowed: int) -> None:
        """Create or update a PodDisruptionBudget as its controller would leave it: the pods it
        selects and `status.disruptionsAllowed`. Each eviction it allows uses one up."""
        with self._cond:
            self._budgets[(namespace, name)] = _DisruptionBudget(dict(match_labels), disruptions_allowed)

    def disruption_budgets(self) -> list[tuple[str, dict[str, str], int]]:
        """(namespace, matchLabels, status.disruptionsAllowed) of every budget, as a PDB lister
        would show them (kube-scheduler's preemption reads them)."""
        with self._cond:
            return [(ns, dict(b.match_labels), b.disruptions_allowed) for (ns, _), b in sorted(self._budgets.items())]

    def set_pod_start_time(self, namespace: str, name: str, start_time: str) -> KubeObject:
        """What kubelet writes once it starts the pod: `status.startTime` (RFC 3339)."""
        with self._cond:
            pod = self._pod(namespace, name)
            pod.setdefault("status", {})["startTime"] = start_time
            self._bump(pod)
            self._emit(Kind.POD, "MODIFIED", pod)
            return _copy(pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            pod = self._pods.pop((namespace, name), None)
            if pod is None:
                raise not_found(PODS, name)
            self._place((namespace, name), pod, -1)
            self._bump(pod)
            self._emit(Kind.POD, "DELETED", pod)
            self._configmaps.collect_owned_by(pod["metadata"]["uid"])

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> KubeObject:
        with self._cond:
            pod = self._pod(namespace, name)
            pod.setdefault("status", {})["phase"] = phase
            self._bump(pod)
            self._emit(Kind.POD, "MODIFIED", pod)
            return _copy(pod)

    def create_node(self, body: KubeObject) -> KubeObject:
        with self._cond:
            node = _copy(body)
            meta = self._new_metadata(node, "Node")
            if meta["name"] in self._nodes:
                raise self._conflict(already_exists(NODES, meta["name"]))
            self._bump(node)
            self._nodes[meta["name"]] = node
            self._emit(Kind.NODE, "ADDED", node)
            return _copy(node)

    def delete_node(self, name: str) -> None:
        with self._cond:
            node = self._nodes.pop(name, None)
            if node is None:
                raise not_found(NODES, name)
            self._bump(node)
            self._emit(Kind.NODE, "DELETED", node)

    def list_configmaps(self, namespace: str | None = None) -> list[KubeObject]:
        with self._cond:
            return [_copy(cm) for cm in self._configmaps.in_namespace(namespace)]

    def list_events(self) -> list[KubeObject]:
        with self._cond:
            return _copy(self._events)

    def store_parts(self) -> tuple[object, ...]:
        """Every container the store keeps (memory accounting: `bench/scale_memory.py`)."""
        with self._cond:
            return (
                self._pods, self._nodes, self._events, self._pods_on,
                *self._configmaps.parts(), *self._watch_log.parts(), *self._leases.parts(),
            )

    def logged_events(self) -> int:
        """How many watch events the history keeps now."""
        with self._cond:
            return len(self._watch_log)

    def close(self) -> None:
        """End every open watch stream (used on shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- pods -----------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> KubeObject:
        with self._cond:
            return _copy(self._pod(namespace, name))

    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_pods_and_version(node_name=node_name, label_selector=label_selector)[0]

    def list_pods_and_version(
        self, *, node_name: str | None = None, label_selector: str | None = None
    ) -> tuple[list[KubeObject], str]:
        with self._cond:
            found = self._pods.values() if node_name is None else (self._pods[k] for k in self._pods_on.get(node_name, ()))
            pods = [_copy(p) for p in found if _match_labels(p, label_selector)]
            return pods, str(self._revision)

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> KubeObject:
        with self._cond:
            pod = self._pod(namespace, name)
            current = pod["metadata"]["resourceVersion"]
            if resource_version not in (None, "", "0") and resource_version != current:  # "" and "0" read as unset
                raise self._conflict(stale(PODS, name))
            _merge_map(pod["metadata"].setdefault("annotations", {}), annotations)
            self._bump(pod)
            self._emit(Kind.POD, "MODIFIED", pod)
            return _copy(pod)

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        with self._cond:
            self.bind_calls += 1
            pod = self._pod(namespace, name)
            if uid and pod["metadata"]["uid"] != uid:
                raise self._conflict(uid_precondition_failed(PODS, namespace, name, uid, pod["metadata"]["uid"]))
            bound = pod.get("spec", {}).get("nodeName")
            if bound:
                raise self._conflict(conflict(POD_BINDING, name, f'pod {name} is already assigned to node "{bound}"'))
            if node_name not in self._nodes:
                raise not_found(NODES, node_name)
            pod["spec"]["nodeName"] = node_name
            self._place((namespace, name), pod, +1)
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions.append({"type": "PodScheduled", "status": "True"})
            self._bump(pod)
            self._emit(Kind.POD, "MODIFIED", pod)

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        with self._cond:
            pod = self._pod(namespace, name)
            if uid and pod["metadata"]["uid"] != uid:
                raise self._conflict(uid_precondition_failed(PODS, namespace, name, uid, pod["metadata"]["uid"]))
            labels: dict[str, str] = pod["metadata"].get("labels") or {}
            # the API server skips the budget check for pods that finished already
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            budgets = [] if terminal else [
                b for (ns, _), b in self._budgets.items() if ns == namespace and all(labels.get(k) == v for k, v in b.match_labels.items())
            ]
            if any(b.disruptions_allowed <= 0 for b in budgets):
                self.evictions_refused += 1
                # policy/v1 eviction (pkg/registry/core/pod/storage/eviction.go): NewTooManyRequests
                raise too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.")
            for budget in budgets:
                budget.disruptions_allowed -= 1
            self.evicted.append((namespace, name))
            self.delete_pod(namespace, name)

    # --- nodes ----------------------------------------------------------------------------------
    def get_node(self, name: str) -> KubeObject:
        with self._cond:
            return _copy(self._node(name))

    def list_nodes(self, *, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_nodes_and_version(label_selector=label_selector)[0]

    def list_nodes_and_version(self, *, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        with self._cond:
            nodes = [_copy(n) for n in self._nodes.values() if _match_labels(n, label_selector)]
            return nodes, str(self._revision)

    def _patch_node_map(self, name: str, field: str, values: Mapping[str, str | None]) -> KubeObject:
        with self._cond:
            node = self._node(name)
            _merge_map(node["metadata"].setdefault(field, {}), values)
            self._bump(node)
            self._emit(Kind.NODE, "MODIFIED", node)
            return _copy(node)

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> KubeObject:
        return self._patch_node_map(name, "annotations", annotations)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> KubeObject:
        return self._patch_node_map(name, "labels", labels)

    def patch_node_status_capacity(self, name: str, capacity: Mapping[str, str]) -> KubeObject:
        with self._cond:
            node = self._node(name)
            status = node.setdefault("status", {})
            status.setdefault("capacity", {}).update(capacity)
            status.setdefault("allocatable", {}).update(capacity)
            self._bump(node)
            self._emit(Kind.NODE, "MODIFIED", node)
            return _copy(node)

    # --- config maps, events --------------------------------------------------------------------
    def create_configmap(self, namespace: str, body: KubeObject) -> KubeObject:
        with self._cond:
            cm = _copy(body)
            self._new_metadata(cm, "ConfigMap")
            try:
                return _copy(self._configmaps.create(namespace, cm))
            except Conflict:
                self.conflicts += 1
                raise

    def replace_configmap(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        with self._cond:
            try:
                return _copy(self._configmaps.replace(namespace, name, _copy(body)))
            except Conflict:
                self.conflicts += 1
                raise

    def get_configmap(self, namespace: str, name: str) -> KubeObject:
        with self._cond:
            return _copy(self._configmaps.get(namespace, name))

    def create_event(self, namespace: str, body: KubeObject) -> KubeObject:
        with self._cond:
            event = _copy(body)
            self._new_metadata(event, "Event")["namespace"] = namespace
            self._bump(event)
            self._events.append(event)
            return _copy(event)

    # --- leases --------------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> KubeObject:
        with self._cond:
            return _copy(self._leases.get(namespace, name))

    def create_lease(self, namespace: str, body: KubeObject) -> KubeObject:
        with self._cond:
            return _copy(self._leases.create(namespace, _copy(body)))

    def replace_lease(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        return self.put_lease(namespace, name, body)[0]

    def put_lease(self, namespace: str, name: str, body: KubeObject) -> tuple[KubeObject, bool]:
        """`replace_lease`, and whether the PUT created the Lease (the API server answers 201)."""
        with self._cond:
            lease, created = self._leases.replace(namespace, name, _copy(body))
            return _copy(lease), created

    # --- watches --------------------------------------------------------------------------------
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch_log.stream(Kind.POD, self._snapshot(self._pods), resource_version, stop_after_s, self._is_closed)

    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch_log.stream(Kind.NODE, self._snapshot(self._nodes), resource_version, stop_after_s, self._is_closed)

    def _snapshot(self, store: Mapping[Any, KubeObject]) -> Callable[[], tuple[list[KubeObject], int]]:
        """Copies of every object of `store` and the revision they are at (called under the lock)."""
        return lambda: ([_copy(o) for o in store.values()], self._revision)

    def _is_closed(self) -> bool:
        return self._closed
