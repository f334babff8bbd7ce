"""A builder for fake cgroup and /proc trees on disk, for tests, `--simulate` runs and benchmarks.

The tree has the exact file names the kernel exposes (`cgroup.procs`, `cgroup.freeze`,
`cgroup.events`, `freezer.state`, v2 `cpu.stat`, v1 `cpuacct.usage`) so the agent runs unchanged
against it. Files are plain files,
so the kernel's reaction to a freeze request is emulated by `settle()` (v2 `cgroup.events`
follows `cgroup.freeze`); v1 `freezer.state` reads back what was written, as FROZEN/THAWED.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tessera_node.agent.cgroups import (
    CgroupDriver,
    CgroupLocator,
    CgroupVersion,
    QosClass,
    container_dir_names,
    pod_relative_paths,
)

_QOS_INDEX = {QosClass.GUARANTEED: 0, QosClass.BURSTABLE: 1, QosClass.BESTEFFORT: 2}


@dataclass
class CgroupTreeBuilder:
    """``CgroupTreeBuilder(tmp, CgroupVersion.V2, CgroupDriver.SYSTEMD).container(uid, cid, [pids])``."""

    root: Path
    version: CgroupVersion = CgroupVersion.V2
    driver: CgroupDriver = CgroupDriver.SYSTEMD
    runtime_prefix: str = "cri-containerd-"
    _cgroups: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cgroup_root.mkdir(parents=True, exist_ok=True)
        self.proc_root.mkdir(parents=True, exist_ok=True)
        if self.version is CgroupVersion.V2:
            (self.cgroup_root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        else:
            (self.cgroup_root / "freezer").mkdir(exist_ok=True)

    @property
    def cgroup_root(self) -> Path:
        return self.root / "cgroup"

    @property
    def proc_root(self) -> Path:
        return self.root / "proc"

    def locator(self) -> CgroupLocator:
        return CgroupLocator(self.cgroup_root, self.proc_root, self.version, self.driver)

    def _hierarchy(self) -> Path:
        return self.cgroup_root if self.version is CgroupVersion.V2 else self.cgroup_root / "freezer"

    def pod(self, pod_uid: str, qos: QosClass = QosClass.BURSTABLE) -> Path:
        path = self._hierarchy() / pod_relative_paths(pod_uid, self.driver)[_QOS_INDEX[qos]]
        self._make_cgroup(path)
        return path

    def container(
        self, pod_uid: str, container_id: str, pids: list[int], qos: QosClass = QosClass.BURSTABLE
    ) -> Path:
        """A container cgroup holding `pids`; also writes /proc/<pid>/cgroup for each pid."""
        pod = self.pod(pod_uid, qos)
        if self.driver is CgroupDriver.SYSTEMD:
            name = f"{self.runtime_prefix}{container_id}.scope"
        else:
            name = container_dir_names(container_id, self.driver)[0]
        path = pod / name
        self._make_cgroup(path, pids)
        relative = "/" + str(path.relative_to(self._hierarchy()))
        for pid in pids:
            self.add_proc(pid, relative)
        return path

    def add_proc(self, pid: int, cgroup_path: str) -> None:
        proc = self.proc_root / str(pid)
        proc.mkdir(parents=True, exist_ok=True)
        if self.version is CgroupVersion.V2:
            text = f"0::{cgroup_path}\n"
        else:
            text = f"12:freezer:{cgroup_path}\n11:memory:{cgroup_path}\n1:name=systemd:{cgroup_path}\n"
        (proc / "cgroup").write_text(text)

    def _make_cgroup(self, path: Path, pids: list[int] | None = None) -> None:
        fresh = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        if pids is not None or fresh:
            (path / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids or []))
        if fresh:
            if self.version is CgroupVersion.V2:
                (path / "cgroup.freeze").write_text("0\n")
                (path / "cgroup.events").write_text("populated 1\nfrozen 0\n")
            else:
                (path / "freezer.state").write_text("THAWED\n")
            self.set_cpu_usage(path, 0)
            self._cgroups.append(path)

    def set_cpu_usage(self, path: Path, usage_usec: int) -> None:
        """The cgroup's cumulative CPU time, where the kernel publishes it."""
        if self.version is CgroupVersion.V2:
            (path / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec {usage_usec}\nsystem_usec 0\n")
            return
        accounting = self.cgroup_root / "cpu,cpuacct" / path.relative_to(self._hierarchy())
        accounting.mkdir(parents=True, exist_ok=True)
        (accounting / "cpuacct.usage").write_text(f"{usage_usec * 1000}\n")

    def add_cpu_usage(self, path: Path, usec: int) -> None:
        self.set_cpu_usage(path, self.cpu_usage(path) + usec)

    def cpu_usage(self, path: Path) -> int:
        usage = self.locator().cpu_usage_usec(path)
        if usage is None:
            raise FileNotFoundError(f"no CPU accounting for {path}")
        return usage

    def settle(self) -> None:
        """Emulate the kernel finishing pending freezes/thaws (v2 only; v1 reads back at once)."""
        if self.version is not CgroupVersion.V2:
            return
        for path in self._cgroups:
            try:
                frozen = (path / "cgroup.freeze").read_text().strip() == "1"
            except FileNotFoundError:
                continue
            (path / "cgroup.events").write_text(f"populated 1\nfrozen {1 if frozen else 0}\n")

    def is_frozen_requested(self, path: Path) -> bool:
        """What the agent last asked for this cgroup (the file a person would `cat`)."""
        if self.version is CgroupVersion.V2:
            return (path / "cgroup.freeze").read_text().strip() == "1"
        return (path / "freezer.state").read_text().strip() in ("FROZEN", "FREEZING")
