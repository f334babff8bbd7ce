"""Apply pause decisions to cgroups: lease first, then freeze; thaw, then drop the lease.

The colocation controller and the burst-share controller each say which containers they want
frozen; a container is frozen while either wants it. This module owns the side effects and the
bookkeeping the metrics need (frozen since, frozen seconds, freeze counts).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from tessera_node.agent.cgroups import CgroupLocator
from tessera_node.agent.freezer import Freezer, FreezeState, LeaseBook, thaw_all
from tessera_node.registry import ContainerKey, RegisteredContainer

_log = logging.getLogger(__name__)


class PauseCause(str, Enum):
    ONLINE_ACTIVE = "online-active"  # offline work yields to online work
    BURST_THROTTLE = "burst-throttle"  # burst-share time slot of another container


@dataclass
class PausedContainer:
    cgroup: Path
    since: float  # monotonic
    causes: set[PauseCause]


@dataclass
class PauseManager:
    locator: CgroupLocator
    freezer: Freezer
    leases: LeaseBook
    lease_ttl_s: float
    confirm_timeout_s: float = 0.0
    paused: dict[ContainerKey, PausedContainer] = field(default_factory=dict)
    frozen_seconds: dict[ContainerKey, float] = field(default_factory=dict)
    freeze_count: dict[ContainerKey, int] = field(default_factory=dict)
    _last_renew: float = 0.0
    _dirs: dict[tuple[ContainerKey, str | None], Path] = field(default_factory=dict)

    def _cgroup_of(self, container: RegisteredContainer) -> Path | None:
        """Cached: finding a cgroup costs several stat() calls, and the same offline containers
        are paused again at every online burst. A restarted container has a new id (new entry)."""
        slot = (container.key, container.container_id)
        found = self._dirs.get(slot)
        if found is None:
            found = self.locator.container_dir(container.pod_uid, container.container_id)
            if found is not None:
                if len(self._dirs) > 4096:  # bounded: drop everything rather than track ages
                    self._dirs.clear()
                self._dirs[slot] = found
        return found

    def apply(
        self,
        now_mono: float,
        now_wall: float,
        wanted: Mapping[ContainerKey, set[PauseCause]],
        registered: Mapping[ContainerKey, RegisteredContainer],
    ) -> tuple[list[ContainerKey], list[ContainerKey]]:
        """Make the frozen set equal `wanted`; returns (newly frozen, newly thawed)."""
        thawed = [k for k in self.paused if k not in wanted]
        released = [self._thaw(key, now_mono) for key in thawed]
        self.leases.release_many(released)

        to_freeze: list[tuple[ContainerKey, Path, str]] = []
        for key, causes in wanted.items():
            if key in self.paused:
                self.paused[key].causes = set(causes)
                continue
            container = registered.get(key)
            if container is None:
                continue
            cgroup = self._cgroup_of(container)
            if cgroup is None:
                _log.warning("no cgroup found for %s (pod %s/%s); cannot pause it", key, container.namespace, container.pod_name)
                continue
            to_freeze.append((key, cgroup, f"{container.namespace}/{container.pod_name}/{container.container}"))
        # write-ahead: the leases exist before the freezes do (one file write for the batch)
        self.leases.grant_many([(cgroup, holder) for _, cgroup, holder in to_freeze], self.lease_ttl_s, now_wall)
        frozen: list[ContainerKey] = []
        failed: list[Path] = []
        for key, cgroup, _ in to_freeze:
            if self.confirm_timeout_s > 0:
                ok = self.freezer.freeze_and_wait(cgroup, self.confirm_timeout_s) is not FreezeState.GONE
            else:
                ok = self.freezer.request(cgroup, True)
            if not ok:
                failed.append(cgroup)
                self._dirs.pop((key, registered[key].container_id), None)
                continue
            self.paused[key] = PausedContainer(cgroup, now_mono, set(wanted[key]))
            self.freeze_count[key] = self.freeze_count.get(key, 0) + 1
            frozen.append(key)
        self.leases.release_many(failed)
        return frozen, thawed

    def renew_leases(self, now_wall: float) -> None:
        """Renew when a third of the lease has passed (one file write per ttl/3, cheap to call
        every tick). A lease the guard already took (the agent stalled past its expiry) is granted
        again and the freeze re-applied, since the controller still wants the container paused."""
        if not self.paused or now_wall - self._last_renew < self.lease_ttl_s / 3:
            return
        self._last_renew = now_wall
        lost = set(self.leases.renew([p.cgroup for p in self.paused.values()], self.lease_ttl_s, now_wall))
        for key, paused in self.paused.items():
            if paused.cgroup in lost:
                _log.warning("freeze lease of %s expired before renewal; freezing it again", key)
                self.leases.grant(paused.cgroup, str(key), self.lease_ttl_s, now_wall)
                self.freezer.request(paused.cgroup, True)

    def frozen_seconds_now(self, now_mono: float) -> dict[ContainerKey, float]:
        out = dict(self.frozen_seconds)
        for key, paused in self.paused.items():
            out[key] = out.get(key, 0.0) + (now_mono - paused.since)
        return out

    def states(self) -> dict[ContainerKey, FreezeState]:
        return {k: self.freezer.state(p.cgroup) for k, p in self.paused.items()}

    def thaw_everything(self, now_mono: float, extra: Iterable[Path] = ()) -> list[str]:
        """Start and shutdown: thaw every leased cgroup (also those of a previous agent) and
        `extra` cgroups (every registered offline container, in case the lease file was lost)."""
        self.leases.release_many([self._thaw(key, now_mono) for key in list(self.paused)])
        done = thaw_all(self.leases, self.freezer)
        for cgroup in extra:
            if self.freezer.state(cgroup) in (FreezeState.FROZEN, FreezeState.FREEZING):
                self.freezer.request(cgroup, False)
                done.append(str(cgroup))
        return done

    def _thaw(self, key: ContainerKey, now_mono: float) -> Path:
        """Thaw; the caller drops the lease afterwards (batched)."""
        paused = self.paused.pop(key)
        self.freezer.request(paused.cgroup, False)
        self.frozen_seconds[key] = self.frozen_seconds.get(key, 0.0) + (now_mono - paused.since)
        return paused.cgroup
