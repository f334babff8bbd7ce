"""Map GPU processes to registered containers, through the processes' cgroups.

NVML reports host PIDs; `/proc/<pid>/cgroup` names the pod uid and the container id (the agent
runs with `hostPID`). The pod uid identifies the registered pod exactly; the container id picks
the container when the registry learnt it from the pod status, otherwise the process goes to the
pod's only container holding that GPU (or, when several do, the first by name; this is logged in
the metrics as attributed, never as another pod's usage). The pid -> cgroup lookup is cached and
the cache is pruned to the PIDs NVML still reports, so each process costs one file read in its
lifetime.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tessera_node.agent.cgroups import CgroupLocator, ProcessCgroup
from tessera_node.agent.index import RegistryView
from tessera_node.agent.registry import ContainerKey, ContainerName, PodUid
from tessera_node.gpu.backend import GpuInfo, ProcessSample


@dataclass(frozen=True)
class ContainerGpuUse:
    """What one container uses on one GPU in this sample."""

    key: ContainerKey
    gpu_uuid: str
    memory_mib: int
    sm_pct: int
    pids: tuple[int, ...]


_UNKNOWN = ContainerKey(PodUid(""), ContainerName(""))  # cache marker: "looked up, no owner"


@dataclass
class ProcessAttributor:
    locator: CgroupLocator
    _where: dict[int, ProcessCgroup | None] = field(default_factory=dict)  # pid -> cgroup, for the pid's life
    _owners: dict[tuple[int, int], ContainerKey] = field(default_factory=dict)  # (pid, gpu index) -> owner, per view
    _view: RegistryView | None = None

    def owners_for(self, view: RegistryView) -> dict[tuple[int, int], ContainerKey]:
        """The (pid, gpu index) -> owner cache valid for `view`, for the fast path to read
        directly; entries for processes without an owner hold a marker that is never a
        registered key."""
        if view is not self._view:
            self._owners.clear()
            self._view = view
        return self._owners

    def owner(self, pid: int, gpu_index: int, uuid: str, view: RegistryView) -> ContainerKey | None:
        """The registered container a GPU process belongs to (cached; one /proc read per pid)."""
        if view is not self._view:
            self._owners.clear()
            self._view = view
        slot = (pid, gpu_index)
        found = self._owners.get(slot)
        if found is None:
            found = self._lookup(pid, uuid, view) or _UNKNOWN
            self._owners[slot] = found
        return None if found is _UNKNOWN else found

    def prune(self, live_pids: set[int]) -> None:
        """Forget exited processes (their pid may be reused by another container)."""
        if len(self._where) > len(live_pids):
            for pid in [p for p in self._where if p not in live_pids]:
                del self._where[pid]
            for slot in [k for k in self._owners if k[0] not in live_pids]:
                del self._owners[slot]

    def attribute(
        self,
        samples: Iterable[ProcessSample],
        gpus: Iterable[GpuInfo],
        view: RegistryView,
    ) -> dict[tuple[ContainerKey, str], ContainerGpuUse]:
        """Every container's memory, SM utilisation and PIDs per GPU."""
        uuid_of = {g.index: g.uuid for g in gpus}
        samples = list(samples)
        self.prune({s.pid for s in samples})
        memory: dict[tuple[ContainerKey, str], int] = {}
        sm: dict[tuple[ContainerKey, str], int] = {}
        pids: dict[tuple[ContainerKey, str], list[int]] = {}
        for sample in samples:
            uuid = uuid_of.get(sample.gpu)
            if uuid is None:
                continue
            owner = self.owner(sample.pid, sample.gpu, uuid, view)
            if owner is None:
                continue
            slot = (owner, uuid)
            memory[slot] = memory.get(slot, 0) + sample.used_memory_mib
            sm[slot] = min(100, sm.get(slot, 0) + sample.sm_utilisation_pct)
            pids.setdefault(slot, []).append(int(sample.pid))
        return {slot: ContainerGpuUse(slot[0], slot[1], memory[slot], sm[slot], tuple(pids[slot])) for slot in memory}

    def _lookup(self, pid: int, uuid: str, view: RegistryView) -> ContainerKey | None:
        if pid not in self._where:
            self._where[pid] = self.locator.process_cgroup(pid)
        where = self._where[pid]
        if where is None:
            return None
        candidates = [c for c in view.by_pod.get(where.pod_uid, ()) if uuid in c.gpu_uuids]
        if not candidates:
            return None
        if where.container_id is not None:
            exact = [c for c in candidates if c.container_id == where.container_id]
            if exact:
                return exact[0].key
            # the id is known for some other container of this pod: this process is not theirs
            unknown = [c for c in candidates if c.container_id is None]
            if not unknown:
                return None
            candidates = unknown
        return candidates[0].key
