"""Online/offline co-location: the pure decision of which offline containers must be paused.

Rule, per GPU: when an online container on the GPU is active (its processes' SM utilisation is
above the activity threshold, decided by the caller), every offline container holding a share of
that GPU is frozen. They are resumed once the online work on that GPU has been idle for the pool's
`offlineResumeIdleSeconds`, or at once when no online container is left on the GPU. An offline
container that spans several GPUs is frozen while any of them demands it.

No I/O here: `ColocationController.step` takes the registry snapshot and the set of GPUs with
active online work and returns a plan; the loop applies it through the freezer. The invariant the
property tests check: a container is never left frozen unless an online container registered on
one of its GPUs was active within that container's resume window, or is waking now.

`waking` (from `wake.OnlineWakeDetector`): online containers whose CPU just woke and which NVML
has not confirmed yet. They make their GPUs hot for this step only: a wake that NVML never
confirms leaves no resume window behind, so the offline work resumes as soon as it ends.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tessera_node.agent.index import RegistryView, may_pause_for_online
from tessera_node.registry import ContainerKey, RegisteredContainer

REASON_PAUSED = "TesseraOfflinePaused"
REASON_RESUMED = "TesseraOfflineResumed"


@dataclass(frozen=True)
class FreezeOrder:
    container: RegisteredContainer
    gpu_uuid: str  # the GPU whose online work caused it
    online: tuple[str, ...]  # "namespace/pod/container" of the active online containers


@dataclass(frozen=True)
class ThawOrder:
    key: ContainerKey
    container: RegisteredContainer | None  # None when the container left the registry meanwhile
    reason: str


@dataclass(frozen=True)
class ColocationPlan:
    freeze: tuple[FreezeOrder, ...] = ()
    thaw: tuple[ThawOrder, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.freeze and not self.thaw


@dataclass
class ColocationController:
    """Remembers when each GPU last had active online work and which containers it froze."""

    last_online_active: dict[str, float] = field(default_factory=dict)
    frozen: dict[ContainerKey, float] = field(default_factory=dict)  # key -> frozen since (monotonic)
    _view: RegistryView | None = None
    _signature: tuple[tuple[float, frozenset[str]], ...] | None = None

    def step(
        self,
        now: float,
        containers: RegistryView | Iterable[RegisteredContainer],
        active_online: Mapping[str, Iterable[ContainerKey]],
        waking: Mapping[str, Iterable[ContainerKey]] | None = None,
    ) -> ColocationPlan:
        """`active_online`: GPU uuid -> keys of online containers active on it in this sample;
        `waking`: GPU uuid -> keys of online containers waking (CPU), not yet seen by NVML."""
        view = RegistryView.of(containers)
        active_names: dict[str, tuple[str, ...]] = {}
        for uuid, names in _online_names(view, active_online, "").items():
            self.last_online_active[uuid] = now
            active_names[uuid] = names
        woken = _online_names(view, waking or {}, " (waking)")
        for uuid, names in woken.items():
            active_names.setdefault(uuid, names)
        woken_gpus = frozenset(woken)
        # A GPU without online containers has nothing to protect: forget its history.
        for uuid in [u for u in self.last_online_active if u not in view.online_on_gpu]:
            del self.last_online_active[uuid]

        # The decision depends only on the registry and on which GPUs are "hot" for each resume
        # window; when neither changed there is nothing to do (the common tick).
        signature = tuple((idle, self._hot(now, idle) | woken_gpus) for idle in view.offline_idle_values)
        if view is self._view and signature == self._signature and not (self.frozen.keys() - view.records.keys()):
            return ColocationPlan()
        self._view, self._signature = view, signature

        freeze: list[FreezeOrder] = []
        thaw: list[ThawOrder] = []
        hot = dict(signature)
        for c in view.colocated_offline:
            hot_gpus = hot.get(c.policy.offline_resume_idle_s, frozenset())
            cause = next((u for u in c.gpu_uuids if u in hot_gpus), None)
            key = c.key
            if cause is not None and key not in self.frozen:
                freeze.append(FreezeOrder(c, cause, active_names.get(cause, ())))
                self.frozen[key] = now
            elif cause is None and key in self.frozen:
                thaw.append(ThawOrder(key, c, self._thaw_reason(c, view)))
                del self.frozen[key]
        for key in [k for k in self.frozen if k not in view.records or not may_pause_for_online(view.records[k])]:
            thaw.append(ThawOrder(key, view.records.get(key), "container left the registry or its pool stopped co-location"))
            del self.frozen[key]
        return ColocationPlan(tuple(freeze), tuple(thaw))

    def forget(self, key: ContainerKey) -> None:
        """The freeze could not be applied (cgroup not found): do not count the container as
        frozen. It is tried again when the registry changes (e.g. its container id is learnt)."""
        self.frozen.pop(key, None)

    def _hot(self, now: float, idle_s: float) -> frozenset[str]:
        """GPUs whose online work was active now or within `idle_s`."""
        return frozenset(u for u, last in self.last_online_active.items() if last == now or now - last < idle_s)

    def _thaw_reason(self, c: RegisteredContainer, view: RegistryView) -> str:
        if any(u in self.last_online_active for u in c.gpu_uuids):
            return f"online work idle for {c.policy.offline_resume_idle_s:g}s"
        if any(u in view.online_on_gpu for u in c.gpu_uuids):
            return "the online container's CPU woke but no GPU work followed"
        return "no online container left on its GPU"


def _online_names(view: RegistryView, by_gpu: Mapping[str, Iterable[ContainerKey]], suffix: str) -> dict[str, tuple[str, ...]]:
    """GPU uuid -> "namespace/pod/container<suffix>" of the registered online containers among
    the keys; GPUs left with none are left out."""
    out: dict[str, tuple[str, ...]] = {}
    for uuid, keys in by_gpu.items():
        live = [view.records[k] for k in keys if k in view.online_keys]
        if live:
            out[uuid] = tuple(f"{c.namespace}/{c.pod_name}/{c.container}{suffix}" for c in live)
    return out
