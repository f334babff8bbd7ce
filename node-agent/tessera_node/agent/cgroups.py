"""Find a Kubernetes container's cgroup and its processes, for cgroup v2 and v1, with the systemd
and cgroupfs drivers and the containerd, CRI-O and Docker naming schemes.

Everything is rooted at a configurable cgroup root (default `/sys/fs/cgroup`) and proc root
(default `/proc`) so tests and the simulator run against a temporary tree
(`tessera_node.agent.fakecgroup.CgroupTreeBuilder`).

Layouts handled (QoS `guaranteed` pods sit directly under kubepods):

    v2 systemd : kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
    v2 cgroupfs: kubepods/burstable/pod<uid>/<id>
    v1         : the same paths below the `freezer/` controller mount
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PROC_ROOT = Path("/proc")


class CgroupVersion(str, Enum):
    V1 = "v1"
    V2 = "v2"


class CgroupDriver(str, Enum):
    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


class QosClass(str, Enum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


# runtime scope prefixes used by the systemd driver (cgroupfs uses the bare id)
_RUNTIME_PREFIXES = ("cri-containerd-", "crio-", "docker-")
_POD_UID = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


@dataclass(frozen=True)
class ProcessCgroup:
    """Where a process lives, as read from /proc/<pid>/cgroup."""

    pod_uid: str
    container_id: str | None  # None when the process sits directly in the pod cgroup


def detect_version(root: Path) -> CgroupVersion:
    """v2 when the root is the unified hierarchy (it has `cgroup.controllers`)."""
    return CgroupVersion.V2 if (root / "cgroup.controllers").exists() else CgroupVersion.V1


def detect_driver(root: Path, version: CgroupVersion) -> CgroupDriver:
    base = root if version is CgroupVersion.V2 else root / "freezer"
    return CgroupDriver.SYSTEMD if (base / "kubepods.slice").exists() else CgroupDriver.CGROUPFS


def pod_relative_paths(pod_uid: str, driver: CgroupDriver) -> list[Path]:
    """Where a pod's cgroup may be, one candidate per QoS class (relative to the hierarchy)."""
    if driver is CgroupDriver.SYSTEMD:
        uid = pod_uid.replace("-", "_")
        return [
            Path("kubepods.slice") / f"kubepods-pod{uid}.slice",
            Path("kubepods.slice") / "kubepods-burstable.slice" / f"kubepods-burstable-pod{uid}.slice",
            Path("kubepods.slice") / "kubepods-besteffort.slice" / f"kubepods-besteffort-pod{uid}.slice",
        ]
    return [
        Path("kubepods") / f"pod{pod_uid}",
        Path("kubepods") / "burstable" / f"pod{pod_uid}",
        Path("kubepods") / "besteffort" / f"pod{pod_uid}",
    ]


def container_dir_names(container_id: str, driver: CgroupDriver) -> list[str]:
    if driver is CgroupDriver.SYSTEMD:
        return [f"{prefix}{container_id}.scope" for prefix in _RUNTIME_PREFIXES]
    return [container_id]


def parse_proc_cgroup(text: str) -> ProcessCgroup | None:
    """Pod uid and container id from the content of /proc/<pid>/cgroup (v1 or v2), or None for
    a process outside kubepods. Paths may be relative to a cgroup namespace ("/../.."), so only
    the kubepods part is trusted."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        match = _POD_UID.search(path)
        if not match:
            continue
        uid = match.group(1).replace("_", "-")
        tail = path[match.end():].split("/")
        # tail[0] is the rest of the pod component (".slice" or ""), tail[1] the container
        leaf = tail[1] if len(tail) > 1 and tail[1] else None
        return ProcessCgroup(pod_uid=uid, container_id=_container_id_from_leaf(leaf) if leaf else None)
    return None


def _container_id_from_leaf(leaf: str) -> str:
    name = leaf[: -len(".scope")] if leaf.endswith(".scope") else leaf
    for prefix in _RUNTIME_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@dataclass(frozen=True)
class CgroupLocator:
    """Resolves pods and containers to cgroup directories below one root."""

    root: Path = DEFAULT_CGROUP_ROOT
    proc_root: Path = DEFAULT_PROC_ROOT
    version: CgroupVersion = CgroupVersion.V2
    driver: CgroupDriver = CgroupDriver.SYSTEMD

    @staticmethod
    def detect(root: Path = DEFAULT_CGROUP_ROOT, proc_root: Path = DEFAULT_PROC_ROOT) -> CgroupLocator:
        version = detect_version(root)
        return CgroupLocator(root, proc_root, version, detect_driver(root, version))

    @property
    def hierarchy(self) -> Path:
        """The tree holding freezer files: the unified root (v2) or the freezer controller (v1)."""
        return self.root if self.version is CgroupVersion.V2 else self.root / "freezer"

    def pod_dir(self, pod_uid: str) -> Path | None:
        for rel in pod_relative_paths(pod_uid, self.driver):
            candidate = self.hierarchy / rel
            if candidate.is_dir():
                return candidate
        return None

    def container_dir(self, pod_uid: str, container_id: str | None) -> Path | None:
        """The container's cgroup; the pod's cgroup when the container id is not known yet."""
        pod = self.pod_dir(pod_uid)
        if pod is None or container_id is None:
            return pod
        for name in container_dir_names(container_id, self.driver):
            if (pod / name).is_dir():
                return pod / name
        return None

    def pids(self, cgroup_dir: Path) -> list[int]:
        """Every process in the cgroup and its descendants."""
        out: list[int] = []
        for directory in _walk_dirs(cgroup_dir):
            try:
                text = (directory / "cgroup.procs").read_text()
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.extend(int(tok) for tok in text.split() if tok.isdigit())
        return out

    def cpu_usage_usec(self, cgroup_dir: Path) -> int | None:
        """Cumulative CPU time of the cgroup and its descendants, in microseconds; None when it
        cannot be read. v2: `usage_usec` of `cpu.stat` (present in every non-root cgroup, with or
        without the cpu controller); v1: `cpuacct.usage` (nanoseconds) of the same path below the
        cpuacct mount (`cpu,cpuacct` or `cpuacct`)."""
        if self.version is CgroupVersion.V2:
            try:
                text = (cgroup_dir / "cpu.stat").read_text()
            except OSError:
                return None
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec" and value.strip().isdigit():
                    return int(value)
            return None
        try:
            relative = cgroup_dir.relative_to(self.hierarchy)
        except ValueError:
            return None
        for mount in ("cpu,cpuacct", "cpuacct"):
            try:
                value = (self.root / mount / relative / "cpuacct.usage").read_text().strip()
            except OSError:
                continue
            return int(value) // 1000 if value.isdigit() else None
        return None

    def process_cgroup(self, pid: int) -> ProcessCgroup | None:
        try:
            return parse_proc_cgroup((self.proc_root / str(pid) / "cgroup").read_text())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return None


def _walk_dirs(top: Path) -> Iterator[Path]:
    stack = [top]
    while stack:
        current = stack.pop()
        yield current
        try:
            stack.extend(p for p in current.iterdir() if p.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            continue
