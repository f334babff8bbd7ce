"""burst-share: a guaranteed share that may use idle compute, throttled back under contention.

Why not MPS: an MPS client's active thread percentage is fixed when its CUDA context is created,
so it cannot be raised while the GPU is idle and lowered when a neighbour wakes up. Instead the
agent time-slices by freezing, which works on every GPU and needs no cooperation from the app:

- one burst-share container active on a GPU: it runs alone and may use 100 % (idle compute);
- two or more active: each control period is cut into exclusive slots proportional to their
  `gpu-core`; during a container's slot the other active ones are frozen. Each then gets
  core_c / sum(core) of the GPU's time, which is at least its share because the scheduler never
  gives out more than 100 % of a GPU.

"Active" is sticky for `sticky_periods` periods: a throttled container shows no utilisation while
frozen, and forgetting it would end the contention it is part of after one slot.
The period (default 2 s) bounds the slot granularity (poll interval / period) against freeze churn
(two freezer writes per throttled container per period). In-flight kernels finish before a freeze
takes effect, so a container with very long kernels overruns its slot by up to one kernel.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tessera_node.agent.index import RegistryView
from tessera_node.registry import ContainerKey, RegisteredContainer


@dataclass
class BurstController:
    period_s: float = 2.0
    sticky_periods: float = 1.5
    last_active: dict[tuple[ContainerKey, str], float] = field(default_factory=dict)
    throttle_events: dict[ContainerKey, int] = field(default_factory=dict)
    _throttled: set[ContainerKey] = field(default_factory=set)

    def step(
        self,
        now: float,
        containers: RegistryView | Iterable[RegisteredContainer],
        active: Iterable[tuple[ContainerKey, str]],
    ) -> set[ContainerKey]:
        """The burst-share containers that must be frozen right now."""
        burst = RegistryView.of(containers).burst
        if not burst and not self.last_active and not self._throttled:
            return set()
        for slot in active:
            if slot[0] in burst:
                self.last_active[slot] = now
        horizon = self.period_s * self.sticky_periods
        for slot in [s for s, t in self.last_active.items() if s[0] not in burst or now - t > horizon]:
            del self.last_active[slot]

        per_gpu: dict[str, list[RegisteredContainer]] = {}
        for (key, uuid) in self.last_active:
            per_gpu.setdefault(uuid, []).append(burst[key])
        throttled: set[ContainerKey] = set()
        for uuid, members in per_gpu.items():
            if len(members) < 2:
                continue
            running = _slot_owner(now, self.period_s, members, uuid)
            throttled.update(c.key for c in members if c.key != running)
        for key in throttled - self._throttled:
            self.throttle_events[key] = self.throttle_events.get(key, 0) + 1
        self._throttled = throttled
        return throttled


def _slot_owner(now: float, period_s: float, members: list[RegisteredContainer], uuid: str) -> ContainerKey:
    ordered = sorted(members, key=lambda c: str(c.key))
    weights = [max(1, _core_on(c, uuid)) for c in ordered]
    phase = (now % period_s) / period_s * sum(weights)
    acc = 0.0
    for c, weight in zip(ordered, weights):
        acc += weight
        if phase < acc:
            return c.key
    return ordered[-1].key


def _core_on(c: RegisteredContainer, uuid: str) -> int:
    share = c.share_on(uuid)
    return share.core if share else 0


def slot_fractions(members: Mapping[ContainerKey, int]) -> dict[ContainerKey, float]:
    """The share of GPU time each contending container gets (for docs and tests)."""
    total = sum(max(1, w) for w in members.values())
    return {k: max(1, w) / total for k, w in members.items()}
