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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tessera_node.agent.cgroups import CgroupLocator, ProcessCgroup
from tessera_node.agent.registry import ContainerKey, RegisteredContainer
from tessera_node.gpu.backend import GpuInfo, ProcessSample


@dataclass(frozen=True)
class ContainerGpuUse:
    """What one container uses on one GPU in this sample."""

    key: ContainerKey
    gpu_uuid: str
    memory_mib: int
    sm_pct: int
    pids: tuple[int, ...]


@dataclass
class ProcessAttributor:
    locator: CgroupLocator
    _cache: dict[int, ProcessCgroup | None] = field(default_factory=dict)

    def attribute(
        self,
        samples: Iterable[ProcessSample],
        gpus: Iterable[GpuInfo],
        containers: Iterable[RegisteredContainer],
    ) -> dict[tuple[ContainerKey, str], ContainerGpuUse]:
        uuid_of = {g.index: g.uuid for g in gpus}
        by_pod: dict[str, list[RegisteredContainer]] = {}
        for c in containers:
            by_pod.setdefault(c.pod_uid, []).append(c)
        samples = list(samples)
        seen = {s.pid for s in samples}
        for pid in [p for p in self._cache if p not in seen]:
            del self._cache[pid]

        memory: dict[tuple[ContainerKey, str], int] = {}
        sm: dict[tuple[ContainerKey, str], int] = {}
        pids: dict[tuple[ContainerKey, str], list[int]] = {}
        for sample in samples:
            uuid = uuid_of.get(sample.gpu)
            if uuid is None:
                continue
            owner = self._owner(sample.pid, uuid, by_pod)
            if owner is None:
                continue
            slot = (owner, uuid)
            memory[slot] = memory.get(slot, 0) + sample.used_memory_mib
            sm[slot] = min(100, sm.get(slot, 0) + sample.sm_utilisation_pct)
            pids.setdefault(slot, []).append(int(sample.pid))
        return {slot: ContainerGpuUse(slot[0], slot[1], memory[slot], sm[slot], tuple(pids[slot])) for slot in memory}

    def _owner(self, pid: int, uuid: str, by_pod: Mapping[str, list[RegisteredContainer]]) -> ContainerKey | None:
        if pid not in self._cache:
            self._cache[pid] = self.locator.process_cgroup(pid)
        where = self._cache[pid]
        if where is None:
            return None
        candidates = [c for c in by_pod.get(where.pod_uid, []) if uuid in c.gpu_uuids]
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
        return sorted(candidates, key=lambda c: c.container)[0].key
