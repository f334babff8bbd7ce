"""GPU health from Xid errors and responsiveness. Pure: time is passed in.

Policy (following NVIDIA's k8s-device-plugin): every Xid is critical except the ones an
application causes on its own GPU context (13 graphics engine exception, 31 GPU memory page
fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video processor exception, 109
context switch timeout) — those kill one process, not the GPU. Typical critical ones are 48
(double-bit ECC), 63/64 (row remapping), 74 (NVLink), 79 (fallen off the bus), 94/95 (contained
/ uncontained ECC).

Recovery criterion (NVIDIA's plugin never recovers; we do, conservatively): an unhealthy GPU
becomes healthy again only when (1) no critical Xid was seen for `recovery_quiet_s` and (2) the
GPU answers NVML queries. A GPU that fell off the bus fails (2) until it is reset or the node
rebooted; a one-off ECC event clears after the quiet period.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from tessera_node.gpu.backend import XidEvent

APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class HealthSettings:
    """How Xids and unresponsive GPUs map onto health.

    ignored_xids: Xids that never mark a GPU unhealthy; default the application Xids above.
    recovery_quiet_s: time without a critical Xid before an unhealthy GPU may recover; default
        300 s, long enough that a GPU throwing Xids in bursts does not flap in and out of service.
    responsiveness_check_s: how often every GPU is probed (NVML memory query); default 5 s, cheap
        and fast enough for the scheduler to stop using a GPU that vanished.
    """

    ignored_xids: frozenset[int] = APPLICATION_XIDS
    recovery_quiet_s: float = 300.0
    responsiveness_check_s: float = 5.0


@dataclass
class _GpuHealth:
    healthy: bool = True
    last_critical_at: float | None = None
    reason: str = ""


@dataclass
class HealthTracker:
    """Per-GPU health state machine."""

    settings: HealthSettings
    gpus: Iterable[int]
    _state: dict[int, _GpuHealth] = field(init=False)

    def __post_init__(self) -> None:
        self._state = {g: _GpuHealth() for g in self.gpus}

    def healthy(self, gpu: int) -> bool:
        return self._state[gpu].healthy

    def health(self) -> dict[int, bool]:
        return {g: s.healthy for g, s in self._state.items()}

    def reason(self, gpu: int) -> str:
        return self._state[gpu].reason

    def on_xids(self, events: Iterable[XidEvent], now: float) -> set[int]:
        """Apply Xid events; returns GPUs whose health changed."""
        changed: set[int] = set()
        for event in events:
            state = self._state.get(event.gpu)
            if state is None:
                if event.gpu >= 0 or event.xid in self.settings.ignored_xids:
                    continue
                # An Xid NVML could not attribute to a GPU: every GPU is suspect.
                targets = list(self._state.values())
            else:
                targets = [state]
            if event.xid in self.settings.ignored_xids:
                continue
            for target in targets:
                target.last_critical_at = now
                target.reason = f"Xid {event.xid}"
                if target.healthy:
                    target.healthy = False
                    changed.update(g for g, s in self._state.items() if s is target)
        return changed

    def on_probe(self, responsive: Callable[[int], bool], now: float) -> set[int]:
        """Probe every GPU: unresponsive ones become unhealthy; unhealthy ones that answer and had no
        critical Xid for the quiet period recover. Returns GPUs whose health changed."""
        changed: set[int] = set()
        for gpu, state in self._state.items():
            answers = responsive(gpu)
            if not answers:
                if state.healthy:
                    state.healthy = False
                    state.reason = "not responding to NVML"
                    changed.add(gpu)
                state.last_critical_at = now
                continue
            quiet = state.last_critical_at is None or now - state.last_critical_at >= self.settings.recovery_quiet_s
            if not state.healthy and quiet:
                state.healthy = True
                state.reason = ""
                changed.add(gpu)
        return changed
