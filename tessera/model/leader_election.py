"""Leader election of the scheduler extender: one Lease, its timing, and the rules that timing obeys.

The Lease is `tessera.model.contract.EXTENDER_LEASE` in Tessera's namespace. The stack config
(`scheduler.extender.leaderElection`), the rendered command line and
`tessera scheduler serve` all read the defaults and rules from here, so the three cannot drift.
Flag names and the duration syntax are kube-scheduler's (`--leader-elect-lease-duration=15s`:
Go's `time.ParseDuration`, kubernetes/component-base `config/options/leaderelectionconfig.go`);
the rules are client-go's (`tools/leaderelection/leaderelection.go`, `NewLeaderElector`:
leaseDuration > renewDeadline > JitterFactor * retryPeriod, JitterFactor = 1.2).

The defaults are shorter than kube-scheduler's 15 s / 10 s / 2 s: the extender is on the path of
every shared-GPU bind, so a crashed leader must be replaced within seconds (lease + one retry).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_LEASE_DURATION_S: Final = 4.0
DEFAULT_RENEW_DEADLINE_S: Final = 3.0
DEFAULT_RETRY_PERIOD_S: Final = 0.5
JITTER_FACTOR: Final = 1.2  # client-go's wait.JitterUntil factor for the acquire/renew loop

_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string (`4s`, `500ms`, `1m30s`, `0`); ValueError naming the
    problem otherwise. Negative durations are refused: no timing here may be negative."""
    if text == "0":
        return 0.0
    if not text or text.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: expected a positive Go duration such as 4s, 500ms or 1m30s")
    body = text[1:] if text.startswith("+") else text
    total, position = 0.0, 0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected a Go duration such as 4s, 500ms or 1m30s (units ns, us, ms, s, m, h)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position == 0:
        raise ValueError(f"invalid duration {text!r}: expected a Go duration such as 4s, 500ms or 1m30s")
    return total


def format_go_duration(seconds: float) -> str:
    """The shortest Go duration string for `seconds` at millisecond precision (`4s`, `500ms`, `1.5s`)."""
    millis = round(seconds * 1000)
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    if millis < 1000:
        return f"{millis}ms"
    return f"{millis / 1000:g}s"


@dataclass(frozen=True)
class LeaderElectionTiming:
    """How long a lease lasts, how long the leader keeps trying to renew it, how often everyone tries.

    lease_duration_s: a standby takes over a lease not renewed for this long (its own clock,
        from when it last saw the lease change, so clock skew between nodes does not matter).
    renew_deadline_s: the leader stops acting as leader when it could not renew for this long;
        shorter than the lease, so it has stopped binding before anyone else may start.
    retry_period_s: the leader renews, and standbys look at the lease, this often.
    """

    lease_duration_s: float = DEFAULT_LEASE_DURATION_S
    renew_deadline_s: float = DEFAULT_RENEW_DEADLINE_S
    retry_period_s: float = DEFAULT_RETRY_PERIOD_S

    def problems(self) -> list[tuple[str, str]]:
        """(field, message) for every rule the timing breaks; empty when it is valid."""
        out: list[tuple[str, str]] = []
        for name, value in (("leaseDuration", self.lease_duration_s), ("renewDeadline", self.renew_deadline_s), ("retryPeriod", self.retry_period_s)):
            if not value > 0:
                out.append((name, f"must be more than 0, got {format_go_duration(value)}"))
        if out:
            return out
        if self.lease_duration_s != int(self.lease_duration_s):
            out.append(("leaseDuration", f"must be a whole number of seconds (the Lease stores spec.leaseDurationSeconds), got {format_go_duration(self.lease_duration_s)}"))
        if not self.lease_duration_s > self.renew_deadline_s:
            out.append((
                "leaseDuration",
                f"must be longer than renewDeadline ({format_go_duration(self.lease_duration_s)} <= {format_go_duration(self.renew_deadline_s)}): "
                "the leader must stop binding before a standby may take the lease",
            ))
        if not self.renew_deadline_s > JITTER_FACTOR * self.retry_period_s:
            out.append((
                "renewDeadline",
                f"must be longer than {JITTER_FACTOR} x retryPeriod ({format_go_duration(self.renew_deadline_s)} <= "
                f"{JITTER_FACTOR} x {format_go_duration(self.retry_period_s)}): the leader needs more than one try to renew",
            ))
        return out
