"""Freeze and thaw cgroups (v2 `cgroup.freeze`, v1 `freezer.state`), with leases.

A freeze is only ever applied under a LEASE recorded on disk BEFORE the freeze is written
(write-ahead), and every lease has an expiry. The agent renews the leases it still wants while it
runs. Whoever finds an expired lease (the agent itself, a restarted agent, or the lease guard
sidecar `tessera node agent --lease-guard`) thaws that cgroup. The agent also thaws every leased
cgroup on start and on SIGTERM/SIGINT. Together this means a crash, an OOM kill, an upgrade or a
hung agent never leaves a container frozen for longer than one lease.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from tessera_node.agent.cgroups import CgroupVersion
from tessera_node.registry import atomic_write_text

LEASES_FILE = "freeze-leases.json"


class FreezeState(str, Enum):
    THAWED = "thawed"
    FREEZING = "freezing"  # requested; the kernel has not stopped every task yet
    FROZEN = "frozen"
    GONE = "gone"  # the cgroup no longer exists (container exited)


@dataclass(frozen=True)
class Freezer:
    """Reads and writes the freezer files of one cgroup version."""

    version: CgroupVersion

    def request(self, cgroup_dir: Path, frozen: bool) -> bool:
        """Ask the kernel to freeze or thaw; False when the cgroup is gone."""
        if self.version is CgroupVersion.V2:
            path, value = cgroup_dir / "cgroup.freeze", b"1" if frozen else b"0"
        else:
            path, value = cgroup_dir / "freezer.state", b"FROZEN" if frozen else b"THAWED"
        try:
            # One write(2), no O_TRUNC/O_CREAT: cgroup files take a single value per write and
            # must never be created by us (a missing file means the container is gone).
            fd = os.open(path, os.O_WRONLY)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            os.write(fd, value)
        finally:
            os.close(fd)
        return True

    def state(self, cgroup_dir: Path) -> FreezeState:
        try:
            if self.version is CgroupVersion.V2:
                wanted = (cgroup_dir / "cgroup.freeze").read_text().strip() == "1"
                events = _parse_events((cgroup_dir / "cgroup.events").read_text())
                if events.get("frozen") == "1":
                    return FreezeState.FROZEN
                return FreezeState.FREEZING if wanted else FreezeState.THAWED
            text = (cgroup_dir / "freezer.state").read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return FreezeState.GONE
        return {"FROZEN": FreezeState.FROZEN, "FREEZING": FreezeState.FREEZING}.get(text, FreezeState.THAWED)

    def freeze_and_wait(self, cgroup_dir: Path, timeout_s: float, poll_s: float = 0.002) -> FreezeState:
        """Freeze and wait (bounded) until the kernel reports every task stopped."""
        if not self.request(cgroup_dir, True):
            return FreezeState.GONE
        deadline = time.monotonic() + timeout_s
        state = self.state(cgroup_dir)
        while state is FreezeState.FREEZING and time.monotonic() < deadline:
            time.sleep(poll_s)
            state = self.state(cgroup_dir)
        return state


def _parse_events(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


@dataclass(frozen=True)
class Lease:
    cgroup: str  # absolute path of the frozen cgroup directory
    holder: str  # "namespace/pod/container", for people reading the file
    expires_at: float  # wall-clock seconds (time.time()): must survive a process restart


class LeaseBook:
    """Freeze leases persisted in the state dir (one JSON file, flock + atomic replace)."""

    def __init__(self, state_dir: Path) -> None:
        self._path = Path(state_dir) / LEASES_FILE
        self._lock_path = Path(state_dir) / (LEASES_FILE + ".lock")
        Path(state_dir).mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self._path

    def grant(self, cgroup: Path, holder: str, ttl_s: float, now: float) -> None:
        self.grant_many([(cgroup, holder)], ttl_s, now)

    def grant_many(self, grants: list[tuple[Path, str]], ttl_s: float, now: float) -> None:
        """One file write for many leases (a GPU's offline containers freeze together)."""
        if not grants:
            return
        with self._edit() as leases:
            for cgroup, holder in grants:
                leases[str(cgroup)] = Lease(str(cgroup), holder, now + ttl_s)

    def renew(self, cgroups: list[Path], ttl_s: float, now: float) -> list[Path]:
        """Extend the leases; returns the cgroups whose lease was gone (a guard thawed them)."""
        lost: list[Path] = []
        with self._edit() as leases:
            for cgroup in cgroups:
                held = leases.get(str(cgroup))
                if held is None:
                    lost.append(cgroup)
                else:
                    leases[str(cgroup)] = Lease(held.cgroup, held.holder, now + ttl_s)
        return lost

    def take_expired(self, now: float) -> list[Lease]:
        """Remove and return the expired leases in one locked step, so a renewal racing with the
        guard either wins (lease kept) or sees its lease gone (and freezes again under a new one)."""
        with self._edit() as leases:
            gone = [lease for lease in leases.values() if lease.expires_at <= now]
            for lease in gone:
                del leases[lease.cgroup]
        return gone

    def release(self, cgroup: Path) -> None:
        self.release_many([cgroup])

    def release_many(self, cgroups: list[Path]) -> None:
        if not cgroups:
            return
        with self._edit() as leases:
            for cgroup in cgroups:
                leases.pop(str(cgroup), None)

    def all(self) -> list[Lease]:
        return sorted(self._load().values(), key=lambda lease: lease.cgroup)

    def expired(self, now: float) -> list[Lease]:
        return [lease for lease in self.all() if lease.expires_at <= now]

    @contextlib.contextmanager
    def _edit(self) -> Iterator[dict[str, Lease]]:
        with open(self._lock_path, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                leases = self._load()
                before = dict(leases)
                yield leases
                if leases != before:
                    body = [{"cgroup": l.cgroup, "holder": l.holder, "expiresAt": l.expires_at} for l in leases.values()]
                    atomic_write_text(self._path, json.dumps(sorted(body, key=lambda b: str(b["cgroup"])), separators=(",", ":")))
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Lease]:
        try:
            raw = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, OSError):
            # A lease file that cannot be read must not keep anything frozen: the caller thaws
            # every registered container on start anyway, so an empty book is the safe reading.
            return {}
        return {str(e["cgroup"]): Lease(str(e["cgroup"]), str(e.get("holder", "")), float(e["expiresAt"])) for e in raw}


def thaw_leases(book: LeaseBook, freezer: Freezer, leases: list[Lease]) -> list[str]:
    """Thaw the given leased cgroups and drop their leases; returns the thawed paths."""
    for lease in leases:
        freezer.request(Path(lease.cgroup), False)
    book.release_many([Path(lease.cgroup) for lease in leases])
    return [lease.cgroup for lease in leases]


def thaw_expired(book: LeaseBook, freezer: Freezer, now: float) -> list[str]:
    thawed: list[str] = []
    for lease in book.take_expired(now):
        freezer.request(Path(lease.cgroup), False)
        thawed.append(lease.cgroup)
    return thawed


def thaw_all(book: LeaseBook, freezer: Freezer) -> list[str]:
    return thaw_leases(book, freezer, book.all())


def run_lease_guard(book: LeaseBook, freezer: Freezer, interval_s: float, should_stop: StopFlag) -> None:
    """The lease guard loop: thaw whatever lease expired (the agent died or hung)."""
    while not should_stop.is_set():
        thaw_expired(book, freezer, time.time())
        should_stop.wait(interval_s)


class StopFlag(Protocol):
    """What `run_lease_guard` needs from a stop signal (threading.Event fits)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...
