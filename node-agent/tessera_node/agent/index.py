"""A read-only index of the registry, rebuilt only when the registry changes.

The fast path runs ten times a second over up to hundreds of containers; everything it derives
from the registry (who is online, which offline containers may be paused, which GPUs have online
work, the burst-share set) is computed once per registry change here, not once per tick.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tessera_node.registry import AppClass, ContainerKey, RegisteredContainer


@dataclass(frozen=True, eq=False)
class RegistryView:
    records: Mapping[ContainerKey, RegisteredContainer]
    by_pod: Mapping[str, tuple[RegisteredContainer, ...]]
    online_keys: frozenset[ContainerKey]
    online_on_gpu: Mapping[str, tuple[ContainerKey, ...]]
    colocated_offline: tuple[RegisteredContainer, ...]  # offline containers on co-location pools
    offline_idle_values: tuple[float, ...]  # distinct offlineResumeIdleSeconds among them
    burst: Mapping[ContainerKey, RegisteredContainer]

    @staticmethod
    def of(containers: RegistryView | Iterable[RegisteredContainer] | Mapping[ContainerKey, RegisteredContainer]) -> RegistryView:
        if isinstance(containers, RegistryView):
            return containers
        values = list(containers.values()) if isinstance(containers, Mapping) else list(containers)
        records = {c.key: c for c in values}
        by_pod: dict[str, list[RegisteredContainer]] = {}
        online_on_gpu: dict[str, list[ContainerKey]] = {}
        for c in values:
            by_pod.setdefault(c.pod_uid, []).append(c)
            if c.app_class is AppClass.ONLINE:
                for uuid in c.gpu_uuids:
                    online_on_gpu.setdefault(uuid, []).append(c.key)
        colocated = tuple(c for c in values if may_pause_for_online(c))
        return RegistryView(
            records=records,
            by_pod={uid: tuple(sorted(cs, key=lambda c: c.container)) for uid, cs in by_pod.items()},
            online_keys=frozenset(c.key for c in values if c.app_class is AppClass.ONLINE),
            online_on_gpu={u: tuple(keys) for u, keys in online_on_gpu.items()},
            colocated_offline=colocated,
            offline_idle_values=tuple(sorted({c.policy.offline_resume_idle_s for c in colocated})),
            burst={c.key: c for c in values if c.policy.sharing == "burst-share"},
        )

    def values(self) -> Iterable[RegisteredContainer]:
        return self.records.values()


def may_pause_for_online(c: RegisteredContainer) -> bool:
    return c.app_class is AppClass.OFFLINE and c.policy.online_offline
