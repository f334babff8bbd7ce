"""GPU memory limits: a container using more GPU memory than its `tessera.dev/gpu-memory` on a GPU.

Per pool (`memoryEnforcement`): `warn` posts a Warning event once per episode (an episode ends
when the container is back under its limit); `enforce` kills the container's processes on that
GPU with SIGKILL and posts a Warning event with reason `TesseraGPUMemoryExceeded`. Killing the
GPU processes rather than deleting the pod lets the pod's restartPolicy decide what happens next,
exactly as an OOM kill of the main process would.

Memory is the sum of the container's processes on that GPU as NVML reports it (this includes
each process's CUDA context, so requests must include it; see docs/node-agent.md). A container
whose figure is incomplete (some process on the GPU may be its or a sibling's, see
`attribution.Attribution.pending`) is not checked at all until the attribution is settled: the
guard never acts on a figure that could be a guess.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from tessera_node.agent.attribution import ContainerGpuUse
from tessera_node.registry import ContainerKey, RegisteredContainer

REASON_MEMORY_EXCEEDED = "TesseraGPUMemoryExceeded"
REASON_MEMORY_WARNING = "TesseraGPUMemoryOverLimit"


class MemoryAction(str, Enum):
    WARN = "warn"
    KILL = "kill"


@dataclass(frozen=True)
class MemoryViolation:
    container: RegisteredContainer
    gpu_uuid: str
    used_mib: int
    limit_mib: int
    pids: tuple[int, ...]
    action: MemoryAction
    new_episode: bool  # first tick over the limit since it was last under: post an event

    @property
    def message(self) -> str:
        verb = "killed its GPU processes" if self.action is MemoryAction.KILL else "warning only (pool memoryEnforcement: warn)"
        return (
            f"container {self.container.container} uses {self.used_mib} MiB of GPU memory on {self.gpu_uuid}, "
            f"over its tessera.dev/gpu-memory limit of {self.limit_mib} MiB; {verb}. "
            f"Raise tessera.dev/gpu-memory (include ~500 MiB of CUDA context per process) or use less memory."
        )


@dataclass
class MemoryGuard:
    """Tracks episodes so each overshoot produces one event, not one per tick."""

    grace_mib: int = 0
    over: set[tuple[ContainerKey, str]] = field(default_factory=set)

    def check(
        self,
        containers: Iterable[RegisteredContainer],
        usage: Mapping[tuple[ContainerKey, str], ContainerGpuUse],
        pending: Collection[tuple[ContainerKey, str]] = frozenset(),
    ) -> list[MemoryViolation]:
        """Violations in `usage`; (container, gpu uuid) slots in `pending` are skipped and keep
        their episode state, so a check held back for a second neither starts nor ends one."""
        out: list[MemoryViolation] = []
        still_over: set[tuple[ContainerKey, str]] = set()
        for c in containers:
            for share in c.shares:
                if share.memory_mib <= 0:  # no limit was asked for
                    continue
                if (c.key, share.uuid) in pending:
                    if (c.key, share.uuid) in self.over:
                        still_over.add((c.key, share.uuid))
                    continue
                use = usage.get((c.key, share.uuid))
                if use is None or use.memory_mib <= share.memory_mib + self.grace_mib:
                    continue
                slot = (c.key, share.uuid)
                still_over.add(slot)
                action = MemoryAction.KILL if c.policy.memory_enforcement == "enforce" else MemoryAction.WARN
                out.append(MemoryViolation(c, share.uuid, use.memory_mib, share.memory_mib, use.pids, action, slot not in self.over))
        self.over = still_over
        return out


class ProcessKiller(Protocol):
    def kill(self, pid: int) -> bool:
        """SIGKILL one process; False when it was already gone."""
        ...


class SignalKiller:
    """Kills host processes (the agent runs with hostPID)."""

    def kill(self, pid: int) -> bool:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True


@dataclass
class RecordingKiller:
    """A `ProcessKiller` for tests and `--simulate`: records PIDs instead of killing."""

    killed: list[int] = field(default_factory=list)

    def kill(self, pid: int) -> bool:
        self.killed.append(pid)
        return True
