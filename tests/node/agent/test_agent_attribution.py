"""GPU processes are charged to exactly the container they run in, never to another pod, and never
to a sibling container by guess while the containers' runtime ids are unknown."""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model.contract import GpuShare
from tessera_node.agent.attribution import ProcessAttributor, possible_owners
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.index import RegistryView
from tessera_node.registry import ContainerKey, ContainerName, PodUid, RegisteredContainer
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
    use = ProcessAttributor(tree.locator()).attribute([_sample(10), _sample(11), _sample(20, mib=300), _sample(30, mib=700)], GPUS, view).usage
    got = {(k.container, uuid): (u.memory_mib, u.pids) for (k, uuid), u in use.items()}
    assert got == {("left", "GPU-0"): (200, (10, 11)), ("right", "GPU-0"): (300, (20,)), ("main", "GPU-0"): (700, (30,))}
    assert {k.pod_uid for k in (key for key, _ in use)} == {POD_A, POD_B}


def test_process_on_a_gpu_its_container_does_not_hold_is_not_charged(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    view = RegistryView.of([_rec(POD_A, "main", "1" * 64, gpu=0)])
    assert ProcessAttributor(tree.locator()).attribute([_sample(10, gpu=1)], GPUS, view).usage == {}


def test_unknown_container_id_falls_back_to_the_pods_only_container(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    view = RegistryView.of([_rec(POD_A, "main", None)])
    (key, _), = ProcessAttributor(tree.locator()).attribute([_sample(10)], GPUS, view).usage
    assert key.container == "main"


def test_a_reused_pid_is_looked_up_again(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, "1" * 64, [10])
    attributor = ProcessAttributor(tree.locator())
    view = RegistryView.of([_rec(POD_A, "main", "1" * 64), _rec(POD_B, "main", "3" * 64)])
    attributor.attribute([_sample(10)], GPUS, view)
    attributor.attribute([], GPUS, view)  # pid 10 exited
    tree.container(POD_B, "3" * 64, [10])  # and the kernel gave the number to a process of pod B
    (key, _), = attributor.attribute([_sample(10)], GPUS, view).usage
    assert key.pod_uid == POD_B


# --- containers whose runtime ids are not known yet -------------------------------------------
K_INFER = ContainerKey(PodUid(POD_A), ContainerName("infer"))
K_EMBED = ContainerKey(PodUid(POD_A), ContainerName("embed"))
ID_INFER, ID_EMBED = "1" * 64, "2" * 64


@pytest.mark.parametrize(
    ("process_id", "holders", "expected"),
    [
        # the registry knows the ids: exact match only
        (ID_INFER, [(K_INFER, ID_INFER), (K_EMBED, ID_EMBED)], (K_INFER,)),
        (ID_EMBED, [(K_INFER, ID_INFER), (K_EMBED, ID_EMBED)], (K_EMBED,)),
        # no id known: both siblings could own it (the bug: the first by name got it)
        (ID_EMBED, [(K_EMBED, None), (K_INFER, None)], (K_EMBED, K_INFER)),
        # one id known and different: the other container is the only one left (a deduction)
        (ID_EMBED, [(K_INFER, ID_INFER), (K_EMBED, None)], (K_EMBED,)),
        # the only holder of the GPU, id not known yet: a deduction
        (ID_INFER, [(K_INFER, None)], (K_INFER,)),
        # every id known and none matches: not this pod's GPU container
        ("9" * 64, [(K_INFER, ID_INFER), (K_EMBED, ID_EMBED)], ()),
        # the process's own id could not be read: every holder stays possible
        (None, [(K_INFER, ID_INFER), (K_EMBED, ID_EMBED)], (K_INFER, K_EMBED)),
        (None, [(K_INFER, ID_INFER)], (K_INFER,)),
    ],
)
def test_possible_owners(process_id: str | None, holders: list[tuple[ContainerKey, str | None]], expected: tuple[ContainerKey, ...]) -> None:
    assert possible_owners(process_id, holders) == expected


def test_siblings_with_unknown_ids_get_no_owner_until_the_ids_are_known(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, ID_INFER, [10, 11])
    tree.container(POD_A, ID_EMBED, [20])
    attributor = ProcessAttributor(tree.locator())
    samples = [_sample(10, mib=750), _sample(11, mib=750), _sample(20, mib=700)]
    before = RegistryView.of([_rec(POD_A, "infer", None), _rec(POD_A, "embed", None)])
    unsettled = attributor.attribute(samples, GPUS, before)
    assert unsettled.usage == {}, "no process is charged to a container it may not belong to"
    assert unsettled.ambiguous == {(K_INFER, "GPU-0"): (10, 11, 20), (K_EMBED, "GPU-0"): (10, 11, 20)}
    assert unsettled.pending(K_EMBED, "GPU-0") and not unsettled.pending(K_EMBED, "GPU-1")
    after = RegistryView.of([_rec(POD_A, "infer", ID_INFER), _rec(POD_A, "embed", ID_EMBED)])
    settled = attributor.attribute(samples, GPUS, after)
    assert {k.container: (u.memory_mib, u.pids) for (k, _), u in settled.usage.items()} == {"infer": (1500, (10, 11)), "embed": (700, (20,))}
    assert settled.ambiguous == {}


def test_the_fast_path_gets_no_owner_for_an_ambiguous_process(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(POD_A, ID_EMBED, [20])
    view = RegistryView.of([_rec(POD_A, "infer", None), _rec(POD_A, "embed", None)])
    attributor = ProcessAttributor(tree.locator())
    assert attributor.owner(20, 0, "GPU-0", view) is None
    assert attributor.owners_for(view)[(20, 0)] not in view.records, "the cached marker is never a registered key"


@st.composite
def _pods(draw: st.DrawFn) -> list[tuple[str, list[tuple[str, bool, int]]]]:
    """Pods of 1-4 GPU containers on GPU 0: (pod uid, [(container, id known?, processes)])."""
    pods = []
    for p in range(draw(st.integers(1, 3))):
        containers = [(f"c{c}", draw(st.booleans()), draw(st.integers(0, 3))) for c in range(draw(st.integers(1, 4)))]
        pods.append((f"{p:08d}-0000-0000-0000-000000000000", containers))
    return pods


@settings(max_examples=60, deadline=None)
@given(pods=_pods())
def test_a_process_is_charged_to_its_own_container_or_to_none(pods: list[tuple[str, list[tuple[str, bool, int]]]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        tree = CgroupTreeBuilder(Path(root))
        records, truth, samples = [], {}, []
        pid = 100
        for pod, containers in pods:
            for name, id_known, processes in containers:
                cid = hashlib.sha256(f"{pod}/{name}".encode()).hexdigest()
                pids = list(range(pid, pid + processes))
                pid += processes
                tree.container(pod, cid, pids)
                records.append(_rec(pod, name, cid if id_known else None))
                for p in pids:
                    truth[p] = ContainerKey(PodUid(pod), ContainerName(name))
                    samples.append(_sample(p))
        view = RegistryView.of(records)
        got = ProcessAttributor(tree.locator()).attribute(samples, GPUS, view)
        for (key, _), use in got.usage.items():
            assert all(truth[p] == key for p in use.pids), "never another container's process"
        charged = {p for use in got.usage.values() for p in use.pids}
        for p, key in truth.items():
            unknown_siblings = [r for r in view.by_pod[key.pod_uid] if r.container_id is None]
            if view.records[key].container_id is not None or len(unknown_siblings) == 1:
                assert p in charged, "a process that can be told apart is charged"
            else:
                assert p not in charged and got.pending(key, "GPU-0"), "an ambiguous one waits, visibly"
