"""Finding containers' cgroups and processes on every layout kubelet produces."""
from __future__ import annotations

from pathlib import Path

import pytest

from tessera_node.agent.cgroups import CgroupDriver, CgroupLocator, CgroupVersion, ProcessCgroup, QosClass, parse_proc_cgroup
from tessera_node.agent.fakecgroup import CgroupTreeBuilder

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CID = "9" * 64

LAYOUTS = [(v, d) for v in CgroupVersion for d in CgroupDriver]


@pytest.mark.parametrize("version, driver", LAYOUTS)
@pytest.mark.parametrize("qos", list(QosClass))
def test_container_cgroup_and_pids_are_found(tmp_path: Path, version: CgroupVersion, driver: CgroupDriver, qos: QosClass) -> None:
    tree = CgroupTreeBuilder(tmp_path, version, driver)
    path = tree.container(UID, CID, [11, 12], qos)
    tree.container(UID, "8" * 64, [13], qos)  # a sibling container of the same pod
    locator = CgroupLocator.detect(tree.cgroup_root, tree.proc_root)
    assert (locator.version, locator.driver) == (version, driver)
    assert locator.container_dir(UID, CID) == path
    assert sorted(locator.pids(path)) == [11, 12]
    assert sorted(locator.pids(locator.pod_dir(UID))) == [11, 12, 13]  # type: ignore[arg-type]
    assert locator.process_cgroup(11) == ProcessCgroup(UID, CID)


@pytest.mark.parametrize("prefix", ["cri-containerd-", "crio-", "docker-"])
def test_every_runtime_scope_name_is_recognised(tmp_path: Path, prefix: str) -> None:
    tree = CgroupTreeBuilder(tmp_path, runtime_prefix=prefix)
    path = tree.container(UID, CID, [5])
    assert tree.locator().container_dir(UID, CID) == path


def test_unknown_pod_or_container_is_none(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(UID, CID, [5])
    locator = tree.locator()
    assert locator.pod_dir("11111111-2222-3333-4444-555555555555") is None
    assert locator.container_dir(UID, "7" * 64) is None
    assert locator.process_cgroup(99999) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n", ProcessCgroup(UID, CID)),
        (f"0::/../../kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", ProcessCgroup(UID, CID)),  # cgroup namespace
        (f"12:freezer:/kubepods/besteffort/pod{UID}/{CID}\n11:memory:/kubepods/besteffort/pod{UID}/{CID}\n", ProcessCgroup(UID, CID)),
        (f"0::/kubepods/pod{UID}\n", ProcessCgroup(UID, None)),
        ("0::/system.slice/containerd.service\n", None),
        ("", None),
    ],
)
def test_parse_proc_cgroup(text: str, expected: ProcessCgroup | None) -> None:
    assert parse_proc_cgroup(text) == expected
