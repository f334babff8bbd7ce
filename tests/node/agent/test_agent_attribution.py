"""GPU processes are charged to exactly the container they run in, never to another pod."""
from __future__ import annotations

from pathlib import Path

from tessera.contract import GpuShare
from tessera_node.agent.attribution import ProcessAttributor
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.index import RegistryView
from tessera_node.agent.registry import ContainerName, PodUid, RegisteredContainer
from tessera_node.gpu.backend import GpuIndex, GpuInfo, Pid, ProcessSample

POD_A, POD_B = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
GPUS = [GpuInfo(GpuIndex(0), "GPU-0", "T4", 15360), GpuInfo(GpuIndex(1), "GPU-1", "T4", 15360)]


def _rec(pod: str, name: str, cid: str | None, gpu: int = 0) -> RegisteredContainer:
    return RegisteredContainer(PodUid(pod), "ns", pod[:8], ContainerName(name), (GpuShare(gpu, f"GPU-{gpu}", 50, 1024),), None, container_id=cid)


def _sample(pid: int, gpu: int = 0, mib: int = 100, sm: int = 10) -> ProcessSample:
    return ProcessSample(Pid(pid), GpuIndex(gpu), mib, sm)


def test_two_containers_of_one_pod_on_one_gpu_are_told_apart_by_container_id(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10, 11])
    tree.container(POD_A, "2" * 64, [20])
    tree.container(POD_B, "3" * 64, [30])  # identical request, other pod
    view = RegistryView.of([_rec(POD_A, "left", "1" * 64), _rec(POD_A, "right", "2" * 64), _rec(POD_B, "main", "3" * 64)])
    use = ProcessAttributor(tree.locator()).attribute([_sample(10), _sample(11), _sample(20, mib=300), _sample(30, mib=700)], GPUS, view)
    got = {(k.container, uuid): (u.memory_mib, u.pids) for (k, uuid), u in use.items()}
    assert got == {("left", "GPU-0"): (200, (10, 11)), ("right", "GPU-0"): (300, (20,)), ("main", "GPU-0"): (700, (30,))}
    assert {k.pod_uid for k in (key for key, _ in use)} == {POD_A, POD_B}


def test_process_on_a_gpu_its_container_does_not_hold_is_not_charged(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    view = RegistryView.of([_rec(POD_A, "main", "1" * 64, gpu=0)])
    assert ProcessAttributor(tree.locator()).attribute([_sample(10, gpu=1)], GPUS, view) == {}


def test_unknown_container_id_falls_back_to_the_pods_only_container(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    view = RegistryView.of([_rec(POD_A, "main", None)])
    (key, _), = ProcessAttributor(tree.locator()).attribute([_sample(10)], GPUS, view)
    assert key.container == "main"


def test_a_reused_pid_is_looked_up_again(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    attributor = ProcessAttributor(tree.locator())
    view = RegistryView.of([_rec(POD_A, "main", "1" * 64), _rec(POD_B, "main", "3" * 64)])
    attributor.attribute([_sample(10)], GPUS, view)
    attributor.attribute([], GPUS, view)  # pid 10 exited
    tree.container(POD_B, "3" * 64, [10])  # and the kernel gave the number to a process of pod B
    (key, _), = attributor.attribute([_sample(10)], GPUS, view)
    assert key.pod_uid == POD_B
