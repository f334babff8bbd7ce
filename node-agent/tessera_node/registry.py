"""The node's record of started GPU containers: who they are, which GPU share(s) they hold, and the
pool policy that governs them.

The device plugin registers each container at PreStartContainer (`ContainerRegistry.register`);
the agent reads the registry on every tick. The registry is a JSON file in the agent's state dir
so that both processes (device plugin and agent may run as two containers of one pod) and agent
restarts see the same records. Writes take an advisory file lock, read-modify-write and replace
the file atomically (write temp, rename), so a killed writer never leaves a half-written registry.
Readers reload only when the file changed (one `stat` per read).

The registry can be rebuilt from the pods on the node (`containers_from_pods`): every pod bound by
the Tessera scheduler carries its `tessera.dev/allocation` record, so losing the state dir loses
nothing that cannot be recomputed.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, NewType

from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_APP_CLASS, Allocation, GpuShare
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, PoolPolicy, policy_from_entry

PodUid = NewType("PodUid", str)
ContainerName = NewType("ContainerName", str)

REGISTRY_FILE = "registry.json"
_FORMAT_VERSION = 1


class AppClass(str, Enum):
    """`tessera.dev/app-class`: offline work yields to online work on the same GPU."""

    ONLINE = "online"
    OFFLINE = "offline"


def _app_class(value: str | None) -> AppClass | None:
    """An unknown app class means no co-location, so a typo never stops a container."""
    try:
        return AppClass(value) if value is not None else None
    except ValueError:
        return None


def _stored_policy(data: Any) -> PoolPolicy:
    """The policy a record was registered under, in pools-entry form; registries written before
    that form name the sharing policy `sharing`."""
    if not isinstance(data, Mapping):
        return DEFAULT_POOL_POLICY
    if "sharing" in data and "policy" not in data:
        data = {**data, "policy": data["sharing"]}
    return policy_from_entry(data)


class ContainerKey(NamedTuple):
    """A container of a pod. A NamedTuple: it is hashed on every tick, and tuple hashing is C-fast."""

    pod_uid: PodUid
    container: ContainerName

    def __str__(self) -> str:
        return f"{self.pod_uid}/{self.container}"


@dataclass(frozen=True)
class RegisteredContainer:
    """One started container that holds GPU share(s) on this node."""

    pod_uid: PodUid
    namespace: str
    pod_name: str
    container: ContainerName
    shares: tuple[GpuShare, ...]
    app_class: AppClass | None = None  # None: the pod did not ask for co-location
    policy: PoolPolicy = DEFAULT_POOL_POLICY
    container_id: str | None = None  # runtime id (no "containerd://" prefix), learnt from pod status

    @cached_property
    def key(self) -> ContainerKey:
        return ContainerKey(self.pod_uid, self.container)

    @cached_property
    def gpu_uuids(self) -> tuple[str, ...]:
        return tuple(s.uuid for s in self.shares)

    def share_on(self, gpu_uuid: str) -> GpuShare | None:
        return next((s for s in self.shares if s.uuid == gpu_uuid), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "podUid": self.pod_uid,
            "namespace": self.namespace,
            "podName": self.pod_name,
            "container": self.container,
            "shares": [s.to_json() for s in self.shares],
            "appClass": self.app_class.value if self.app_class else None,
            "policy": self.policy.pools_entry(),
            "containerId": self.container_id,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RegisteredContainer:
        app_class = data.get("appClass")
        return RegisteredContainer(
            pod_uid=PodUid(str(data["podUid"])),
            namespace=str(data["namespace"]),
            pod_name=str(data["podName"]),
            container=ContainerName(str(data["container"])),
            shares=tuple(GpuShare.from_json(s) for s in data["shares"]),
            app_class=AppClass(app_class) if app_class else None,
            policy=_stored_policy(data.get("policy")),
            container_id=data.get("containerId"),
        )


class ContainerRegistry:
    """Persistent, multi-process safe registry of GPU containers on this node.

    Thread-safe within a process (a lock) and across processes (flock on `registry.json.lock`).
    """

    def __init__(self, state_dir: Path) -> None:
        self._path = Path(state_dir) / REGISTRY_FILE
        self._lock_path = Path(state_dir) / (REGISTRY_FILE + ".lock")
        self._thread_lock = threading.Lock()
        self._cache: dict[ContainerKey, RegisteredContainer] = {}
        self._cache_stamp: tuple[int, int, int] | None = None
        Path(state_dir).mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self._path

    # --- writes (device plugin, agent reconciliation) ---
    def register(self, container: RegisteredContainer) -> None:
        """Record a started container (idempotent: a re-registration replaces the record)."""
        with self._edit() as records:
            records[container.key] = container

    def register_all(self, containers: Iterable[RegisteredContainer]) -> None:
        """`register` for many records in one rewrite of the file (one write instead of N)."""
        with self._edit() as records:
            records.update({c.key: c for c in containers})

    def unregister(self, key: ContainerKey) -> bool:
        with self._edit() as records:
            return records.pop(key, None) is not None

    def remove_pod(self, pod_uid: str) -> int:
        with self._edit() as records:
            gone = [k for k in records if k.pod_uid == pod_uid]
            for key in gone:
                del records[key]
            return len(gone)

    def set_container_id(self, key: ContainerKey, container_id: str | None) -> None:
        with self._edit() as records:
            if key in records and records[key].container_id != container_id:
                records[key] = replace(records[key], container_id=container_id)

    def replace_all(self, containers: Iterable[RegisteredContainer]) -> None:
        """Make the registry exactly `containers` (used when rebuilding from pods)."""
        with self._edit() as records:
            records.clear()
            records.update({c.key: c for c in containers})

    # --- reads ---
    @property
    def stamp(self) -> tuple[int, int, int] | None:
        """Changes whenever the file changes; lets readers cache what they derive from it."""
        with self._thread_lock:
            return self._stamp()

    def get(self, key: ContainerKey) -> RegisteredContainer | None:
        return self.snapshot().get(key)

    def snapshot(self) -> dict[ContainerKey, RegisteredContainer]:
        """Current records (reloaded from disk only if another process changed the file)."""
        with self._thread_lock:
            stamp = self._stamp()
            if stamp != self._cache_stamp:
                self._cache = self._load()
                self._cache_stamp = stamp
            return dict(self._cache)

    def all(self) -> list[RegisteredContainer]:
        return sorted(self.snapshot().values(), key=lambda c: (c.namespace, c.pod_name, c.container))

    # --- internals ---
    @contextlib.contextmanager
    def _edit(self) -> Iterator[dict[ContainerKey, RegisteredContainer]]:
        with self._thread_lock, open(self._lock_path, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                # The file as we last wrote or read it is still current unless its stamp moved
                # (an atomic rename always changes the inode): skip parsing it again.
                records = dict(self._cache) if self._cache_stamp is not None and self._stamp() == self._cache_stamp else self._load()
                yield records
                self._write(records)
                self._cache = dict(records)
                self._cache_stamp = self._stamp()
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self._path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load(self) -> dict[ContainerKey, RegisteredContainer]:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, OSError) as exc:
            raise RegistryCorrupt(self._path, str(exc)) from exc
        containers = (RegisteredContainer.from_json(c) for c in data.get("containers", []))
        return {c.key: c for c in containers}

    def _write(self, records: Mapping[ContainerKey, RegisteredContainer]) -> None:
        body = {"v": _FORMAT_VERSION, "containers": [records[k].to_json() for k in sorted(records, key=str)]}
        # Compact on purpose: with `indent`, json falls back to its pure-Python encoder, which took
        # 10x longer on a dense node's registry and held the GIL the device plugin's gRPC handlers
        # need meanwhile (`python -m json.tool` pretty-prints it for people).
        atomic_write_text(self._path, json.dumps(body, separators=(",", ":"), sort_keys=True))


class RegistryCorrupt(Exception):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"the container registry {path} cannot be read ({reason}); delete it and restart the agent: "
            "it is rebuilt from the pods' tessera.dev/allocation annotations"
        )


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so readers see the old or the new content, never a mix, even if the writer
    is killed midway (write a temp file, rename over).

    No fsync, on purpose: it costs milliseconds per write on a disk (on the device plugin's
    PreStartContainer path), and it only protects against losing the machine itself. What these
    files describe does not survive a reboot either: cgroups and their freeze state are gone and
    every container restarts; the registry is rebuilt from the pods."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


# --- rebuilding from pods ---------------------------------------------------------------------
def containers_from_pods(
    pods: Iterable[Mapping[str, Any]], node_name: str, policy: PoolPolicy
) -> list[RegisteredContainer]:
    """Registry records for every running pod on `node_name` that carries an allocation record.

    Pods whose allocation names another node, finished pods and pods without a record are
    skipped: the registry only ever holds what the scheduler decided for this node.
    """
    out: list[RegisteredContainer] = []
    for pod in pods:
        meta = pod.get("metadata", {})
        annotations = meta.get("annotations") or {}
        raw = annotations.get(ANNOTATION_ALLOCATION)
        phase = (pod.get("status") or {}).get("phase", "")
        if not raw or phase in ("Succeeded", "Failed"):
            continue
        try:
            allocation = Allocation.from_json(raw)
        except (ValueError, KeyError, TypeError):
            continue
        if allocation.node != node_name:
            continue
        app_class = _app_class(annotations.get(ANNOTATION_APP_CLASS))
        ids = container_ids_from_status(pod)
        for name, shares in allocation.containers.items():
            if not shares:
                continue
            out.append(
                RegisteredContainer(
                    pod_uid=PodUid(str(meta.get("uid", ""))),
                    namespace=str(meta.get("namespace", "default")),
                    pod_name=str(meta.get("name", "")),
                    container=ContainerName(name),
                    shares=tuple(shares),
                    app_class=app_class,
                    policy=policy,
                    container_id=ids.get(name),
                )
            )
    return out


def container_ids_from_status(pod: Mapping[str, Any]) -> dict[str, str]:
    """container name -> runtime id from `status.containerStatuses[].containerID`
    ("containerd://abc" -> "abc")."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    out: dict[str, str] = {}
    for status in statuses:
        cid = status.get("containerID") or ""
        if "://" in cid:
            out[str(status.get("name"))] = cid.split("://", 1)[1]
    return out


def reconcile_with_pods(
    existing: Mapping[ContainerKey, RegisteredContainer],
    from_pods: Iterable[RegisteredContainer],
    missing_before: set[str],
) -> tuple[dict[ContainerKey, RegisteredContainer], set[str]]:
    """Merge the registry with what the pods on the node say.

    Records from pods win (they carry the container ids from pod status and the node's policy).
    A registered pod absent from the listing is dropped only when it was already absent at the
    previous reconciliation: the device plugin may register a container between the listing and
    the merge, and one missed listing must not drop it. Returns (records, pods missing now).
    """
    merged = {c.key: c for c in from_pods}
    listed = {key.pod_uid for key in merged}
    missing_now: set[str] = set()
    for key, record in existing.items():
        if key in merged:
            if merged[key].container_id is None and record.container_id is not None:
                merged[key] = replace(merged[key], container_id=record.container_id)
            continue
        if key.pod_uid in listed:
            continue
        if key.pod_uid not in missing_before:
            merged[key] = record
            missing_now.add(key.pod_uid)
    return merged, missing_now
