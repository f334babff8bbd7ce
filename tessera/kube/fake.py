"""An in-memory Kubernetes API server implementing `KubeApi`.

Used by tests, `tessera scheduler serve --simulate` and benchmarks. It keeps the semantics the
extender's safety depends on, so tests against it mean something:

- every write bumps one cluster-wide resourceVersion (like etcd's revision);
- a patch with a stale `resource_version` fails with `Conflict` (optimistic concurrency);
- binding an already bound pod, or a pod whose UID changed, fails with `Conflict`;
- creating an existing ConfigMap fails with `Conflict` (AlreadyExists is a 409 too);
- deleting a pod deletes the ConfigMaps it owns (what the garbage collector does);
- evicting a pod deletes it like `delete_pod`, unless a disruption budget set with
  `set_disruption_budget` has no disruption left: 429, as the Eviction API answers;
- watches replay events after a resourceVersion, or start with synthetic ADDED events of every
  object when no resourceVersion is given; a resourceVersion older than the kept history gets
  410 Gone, so clients exercise their relist path. So does an open watch whose reader fell behind
  the kept history: the stream ends with 410 instead of skipping the events it lost. Upstream
  (kubernetes/kubernetes, tag v1.30.0, staging/src/k8s.io/apiserver/pkg/storage/cacher/
  watch_cache.go, getAllEventsSinceLocked) answers `ResourceExpired` (410) "too old resource
  version: %d (%d)", and cache_watcher.go closes a watcher too slow to take its events.

All methods are thread-safe; every object handed out is a deep copy.

It is also the API server of `serve --simulate` at 10,000 nodes and ~100,000 pods, so no request
scans the store: pods are indexed by node (`list_pods(node_name=...)`, what kubelet-side readers
ask), ConfigMaps by owner (deleting a pod), a watch resumes by bisecting the event log, and copies
are pickle round trips (3x faster than `copy.deepcopy` for JSON-shaped objects, same result).
"""
from __future__ import annotations

import bisect
import pickle
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tessera.kube.api import Conflict, KubeApiError, KubeObject, NotFound, WatchEvent, WatchEventType

_DEFAULT_HISTORY = 10_000  # events kept per kind for watch resumption
_PICKLE = pickle.HIGHEST_PROTOCOL


def _copy(obj: Any) -> Any:
    """A deep copy of a JSON-shaped object (dicts, lists, strings, numbers)."""
    return pickle.loads(pickle.dumps(obj, _PICKLE))


class Kind(Enum):
    POD = "Pod"
    NODE = "Node"


@dataclass
class _DisruptionBudget:
    """A PodDisruptionBudget reduced to what eviction checks: its pods and how many may go now."""

    match_labels: dict[str, str]
    disruptions_allowed: int


@dataclass(frozen=True)
class _Logged:
    kind: Kind
    revision: int
    event: WatchEvent


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


class FakeKubeApi:
    """In-memory API server; see the module docstring for the semantics it keeps."""

    def __init__(self, *, history: int = _DEFAULT_HISTORY) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._revision = 0
        self._pods: dict[tuple[str, str], KubeObject] = {}
        self._nodes: dict[str, KubeObject] = {}
        self._configmaps: dict[tuple[str, str], KubeObject] = {}
        self._pods_on: dict[str, dict[tuple[str, str], None]] = {}  # spec.nodeName -> pods (insertion-ordered)
        self._owned: dict[str, set[tuple[str, str]]] = {}  # owner uid -> ConfigMaps naming it
        self._events: list[KubeObject] = []
        self._budgets: dict[tuple[str, str], _DisruptionBudget] = {}
        self._history = history
        self._logs: dict[Kind, list[_Logged]] = {Kind.POD: [], Kind.NODE: []}
        self._trimmed_before: dict[Kind, int] = {Kind.POD: 0, Kind.NODE: 0}
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
        log = self._logs[kind]
        log.append(_Logged(kind, self._revision, WatchEvent(event_type, _copy(obj))))
        if len(log) > self._history + max(1, self._history // 16):
            # keep the newest `history` events; older resourceVersions now get 410 Gone. Trimmed in
            # small steps: freeing `history` deep-copied objects at once stalled `serve --simulate`
            # for ~30 ms every 10,000 events.
            self._trimmed_before[kind] = log[-self._history - 1].revision
            del log[: len(log) - self._history]
        self._cond.notify_all()

    def _conflict(self, message: str) -> Conflict:
        self.conflicts += 1
        return Conflict(message)

    def _pod(self, namespace: str, name: str) -> KubeObject:
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise NotFound(f'pods "{name}" not found in namespace "{namespace}"')
        return pod

    def _node(self, name: str) -> KubeObject:
        node = self._nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found')
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

    @staticmethod
    def _new_metadata(obj: KubeObject) -> dict[str, Any]:
        meta: dict[str, Any] = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return meta

    # --- test / simulation helpers (not part of KubeApi) ----------------------------------------
    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._revision)

    def create_pod(self, body: KubeObject) -> KubeObject:
        with self._cond:
            pod = _copy(body)
            meta = self._new_metadata(pod)
            meta.setdefault("namespace", "default")
            key = (meta["namespace"], meta["name"])
            if key in self._pods:
                raise self._conflict(f'pods "{key[1]}" already exists')
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
                raise NotFound(f'pods "{name}" not found in namespace "{namespace}"')
            self._place((namespace, name), pod, -1)
            self._bump(pod)
            self._emit(Kind.POD, "DELETED", pod)
            for key in sorted(self._owned.get(pod["metadata"]["uid"], ())):
                cm = self._configmaps.pop(key)
                self._own(key, cm, -1)

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
            meta = self._new_metadata(node)
            if meta["name"] in self._nodes:
                raise self._conflict(f'nodes "{meta["name"]}" already exists')
            self._bump(node)
            self._nodes[meta["name"]] = node
            self._emit(Kind.NODE, "ADDED", node)
            return _copy(node)

    def delete_node(self, name: str) -> None:
        with self._cond:
            node = self._nodes.pop(name, None)
            if node is None:
                raise NotFound(f'nodes "{name}" not found')
            self._bump(node)
            self._emit(Kind.NODE, "DELETED", node)

    def list_configmaps(self, namespace: str | None = None) -> list[KubeObject]:
        with self._cond:
            return [_copy(cm) for (ns, _), cm in self._configmaps.items() if namespace in (None, ns)]

    def list_events(self) -> list[KubeObject]:
        with self._cond:
            return _copy(self._events)

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
            if resource_version is not None and resource_version != current:
                raise self._conflict(
                    f'Operation cannot be fulfilled on pods "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again"
                )
            _merge_map(pod["metadata"].setdefault("annotations", {}), annotations)
            self._bump(pod)
            self._emit(Kind.POD, "MODIFIED", pod)
            return _copy(pod)

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        with self._cond:
            self.bind_calls += 1
            pod = self._pod(namespace, name)
            if uid and pod["metadata"]["uid"] != uid:
                raise self._conflict(f'Precondition failed: UID in precondition: {uid}, UID in object meta: {pod["metadata"]["uid"]}')
            bound = pod.get("spec", {}).get("nodeName")
            if bound:
                raise self._conflict(f'pod {name} is already assigned to node "{bound}"')
            if node_name not in self._nodes:
                raise NotFound(f'nodes "{node_name}" not found')
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
                raise self._conflict(f'Precondition failed: UID in precondition: {uid}, UID in object meta: {pod["metadata"]["uid"]}')
            labels: dict[str, str] = pod["metadata"].get("labels") or {}
            # the API server skips the budget check for pods that finished already
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            budgets = [] if terminal else [
                b for (ns, _), b in self._budgets.items() if ns == namespace and all(labels.get(k) == v for k, v in b.match_labels.items())
            ]
            if any(b.disruptions_allowed <= 0 for b in budgets):
                self.evictions_refused += 1
                raise KubeApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
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
            meta = self._new_metadata(cm)
            meta["namespace"] = namespace
            key = (namespace, meta["name"])
            if key in self._configmaps:
                raise self._conflict(f'configmaps "{meta["name"]}" already exists')
            self._bump(cm)
            self._configmaps[key] = cm
            self._own(key, cm, +1)
            return _copy(cm)

    def replace_configmap(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        with self._cond:
            old = self._configmaps.get((namespace, name))
            if old is None:
                raise NotFound(f'configmaps "{name}" not found')
            wanted = body.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != old["metadata"]["resourceVersion"]:
                raise self._conflict(f'Operation cannot be fulfilled on configmaps "{name}": the object has been modified')
            cm = _copy(body)
            meta = cm.setdefault("metadata", {})
            meta.update({"name": name, "namespace": namespace, "uid": old["metadata"]["uid"]})
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            self._bump(cm)
            self._own((namespace, name), old, -1)
            self._configmaps[(namespace, name)] = cm
            self._own((namespace, name), cm, +1)
            return _copy(cm)

    def get_configmap(self, namespace: str, name: str) -> KubeObject:
        with self._cond:
            cm = self._configmaps.get((namespace, name))
            if cm is None:
                raise NotFound(f'configmaps "{name}" not found in namespace "{namespace}"')
            return _copy(cm)

    def create_event(self, namespace: str, body: KubeObject) -> KubeObject:
        with self._cond:
            event = _copy(body)
            self._new_metadata(event)["namespace"] = namespace
            self._bump(event)
            self._events.append(event)
            return _copy(event)

    # --- watches --------------------------------------------------------------------------------
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch(Kind.POD, resource_version, stop_after_s)

    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch(Kind.NODE, resource_version, stop_after_s)

    def _watch(self, kind: Kind, resource_version: str | None, stop_after_s: float | None) -> Iterator[WatchEvent]:
        """Events are shared between watchers: consumers must not mutate them."""
        deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        with self._cond:
            if resource_version is None:
                store: Mapping[Any, KubeObject] = self._pods if kind is Kind.POD else self._nodes
                initial = [WatchEvent("ADDED", _copy(o)) for o in store.values()]
                seen = self._revision
            else:
                seen = int(resource_version)
                if seen < self._trimmed_before[kind]:
                    raise KubeApiError(410, f"too old resource version: {seen} ({self._trimmed_before[kind]})")
                initial = []
        yield from initial
        log = self._logs[kind]
        while True:
            with self._cond:
                if seen < self._trimmed_before[kind]:
                    # the watcher fell behind the kept history: events it has not seen are gone, so
                    # the stream ends with 410 as the API server's watch cache ends a slow watcher
                    # (the client relists) instead of skipping them
                    raise KubeApiError(410, f"too old resource version: {seen} ({self._trimmed_before[kind]})")
                start = bisect.bisect_right(log, seen, key=lambda e: e.revision)
                pending = log[start:]
                if not pending:
                    if self._closed:
                        return
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        return
                    self._cond.wait(min(timeout, 1.0) if timeout is not None else 1.0)
                    continue
                seen = pending[-1].revision
            for logged in pending:
                yield logged.event
