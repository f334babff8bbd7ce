"""Map GPU processes to registered containers, through the processes' cgroups.

NVML reports host PIDs; `/proc/<pid>/cgroup` names the pod uid and the container id (the agent
runs with `hostPID`). The pod uid identifies the registered pod exactly; the container id picks
the container when the registry learnt it from the pod status. Until then the process can only
be deduced: it belongs to the pod's one container holding that GPU whose id is still unknown.
When several containers of the pod could own it the attribution is *ambiguous* and the process
gets no owner: a guess would charge one container with its siblings' memory, and the memory
guard would kill the wrong processes (see docs/node-agent.md, "Attribution"). Ambiguous
processes are reported against every container that could own them, so the loop can learn the
ids at once and hold back memory enforcement for exactly those containers until it has.

The pid -> cgroup lookup is cached and the cache is pruned to the PIDs NVML still reports, so
each process costs one file read in its lifetime.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tessera_node.agent.cgroups import CgroupLocator, ProcessCgroup
from tessera_node.agent.index import RegistryView
from tessera_node.registry import ContainerKey, ContainerName, PodUid
from tessera_node.gpu.backend import GpuInfo, ProcessSample


@dataclass(frozen=True)
class ContainerGpuUse:
    """What one container uses on one GPU in this sample."""

    key: ContainerKey
    gpu_uuid: str
    memory_mib: int
    sm_pct: int
    pids: tuple[int, ...]


@dataclass(frozen=True)
class Attribution:
    """One slow-path attribution: per-container use, and for each container the processes that
    may be its but could also be a sibling's (same pod, same GPU, ids not yet known)."""

    usage: Mapping[tuple[ContainerKey, str], ContainerGpuUse]
    ambiguous: Mapping[tuple[ContainerKey, str], tuple[int, ...]] = field(default_factory=dict)

    def pending(self, key: ContainerKey, gpu_uuid: str) -> bool:
        """True while some process on this GPU may be this container's but is not yet told
        apart from its siblings': the container's usage figure is then incomplete."""
        return (key, gpu_uuid) in self.ambiguous

    def ambiguous_pids(self) -> set[int]:
        return {pid for pids in self.ambiguous.values() for pid in pids}


# Cache markers: "looked up, no owner" and "looked up, several containers could own it".
# Neither is ever a registered key (a pod uid is never empty).
_UNKNOWN = ContainerKey(PodUid(""), ContainerName(""))
_AMBIGUOUS = ContainerKey(PodUid(""), ContainerName("?"))


@dataclass
class ProcessAttributor:
    locator: CgroupLocator
    _where: dict[int, ProcessCgroup | None] = field(default_factory=dict)  # pid -> cgroup, for the pid's life
    _owners: dict[tuple[int, int], ContainerKey] = field(default_factory=dict)  # (pid, gpu index) -> owner, per view
    _candidates: dict[tuple[int, int], tuple[ContainerKey, ...]] = field(default_factory=dict)  # ambiguous slots, per view
    _view: RegistryView | None = None

    def owners_for(self, view: RegistryView) -> dict[tuple[int, int], ContainerKey]:
        """The (pid, gpu index) -> owner cache valid for `view`, for the fast path to read
        directly; entries for processes without a single owner hold a marker that is never a
        registered key."""
        if view is not self._view:
            # A new view may carry container ids learnt since: ambiguous processes resolve.
            self._owners.clear()
            self._candidates.clear()
            self._view = view
        return self._owners

    def owner(self, pid: int, gpu_index: int, uuid: str, view: RegistryView) -> ContainerKey | None:
        """The registered container a GPU process belongs to (cached; one /proc read per pid);
        None when it belongs to none or could belong to several."""
        found = self._owner_or_marker(pid, gpu_index, uuid, view)
        return None if found is _UNKNOWN or found is _AMBIGUOUS else found

    def prune(self, live_pids: set[int]) -> None:
        """Forget exited processes (their pid may be reused by another container)."""
        if len(self._where) > len(live_pids):
            for pid in [p for p in self._where if p not in live_pids]:
                del self._where[pid]
            for slot in [k for k in self._owners if k[0] not in live_pids]:
                del self._owners[slot]
                self._candidates.pop(slot, None)

    def attribute(self, samples: Iterable[ProcessSample], gpus: Iterable[GpuInfo], view: RegistryView) -> Attribution:
        """Every container's memory, SM utilisation and PIDs per GPU, and the ambiguous processes."""
        uuid_of = {g.index: g.uuid for g in gpus}
        samples = list(samples)
        self.prune({s.pid for s in samples})
        memory: dict[tuple[ContainerKey, str], int] = {}
        sm: dict[tuple[ContainerKey, str], int] = {}
        pids: dict[tuple[ContainerKey, str], list[int]] = {}
        ambiguous: dict[tuple[ContainerKey, str], list[int]] = {}
        for sample in samples:
            uuid = uuid_of.get(sample.gpu)
            if uuid is None:
                continue
            owner = self._owner_or_marker(sample.pid, sample.gpu, uuid, view)
            if owner is _AMBIGUOUS:
                for candidate in self._candidates.get((sample.pid, sample.gpu), ()):
                    ambiguous.setdefault((candidate, uuid), []).append(int(sample.pid))
                continue
            if owner is _UNKNOWN:
                continue
            slot = (owner, uuid)
            memory[slot] = memory.get(slot, 0) + sample.used_memory_mib
            sm[slot] = min(100, sm.get(slot, 0) + sample.sm_utilisation_pct)
            pids.setdefault(slot, []).append(int(sample.pid))
        usage = {slot: ContainerGpuUse(slot[0], slot[1], memory[slot], sm[slot], tuple(pids[slot])) for slot in memory}
        return Attribution(usage, {k: tuple(v) for k, v in ambiguous.items()})

    def _owner_or_marker(self, pid: int, gpu_index: int, uuid: str, view: RegistryView) -> ContainerKey:
        owners = self.owners_for(view)
        slot = (pid, gpu_index)
        found = owners.get(slot)
        if found is None:
            possible = self._possible_owners(pid, uuid, view)
            found = _UNKNOWN if not possible else possible[0] if len(possible) == 1 else _AMBIGUOUS
            if found is _AMBIGUOUS:
                self._candidates[slot] = possible
            owners[slot] = found
        return found

    def _possible_owners(self, pid: int, uuid: str, view: RegistryView) -> tuple[ContainerKey, ...]:
        if pid not in self._where:
            self._where[pid] = self.locator.process_cgroup(pid)
        where = self._where[pid]
        if where is None:
            return ()
        holders = [(c.key, c.container_id) for c in view.by_pod.get(where.pod_uid, ()) if uuid in c.gpu_uuids]
        return possible_owners(where.container_id, holders)


def possible_owners(process_container_id: str | None, holders: list[tuple[ContainerKey, str | None]]) -> tuple[ContainerKey, ...]:
    """Pure core of the lookup: which of the pod's containers holding the GPU, given as
    (key, runtime id if known), can own a process whose cgroup names `process_container_id`.

    An exact id match settles it. Otherwise a container whose id is known (and differs) is ruled
    out, and every container whose id is unknown stays possible; a process whose own id could
    not be read rules nothing out. One possible owner is a deduction; several are ambiguous."""
    if process_container_id is not None:
        exact = tuple(key for key, cid in holders if cid == process_container_id)
        if exact:
            return exact[:1]
    return tuple(key for key, cid in holders if cid is None or process_container_id is None)
