"""`tessera.inspect.build`: what each GPU, node and pool shows for a given set of Node and Pod objects."""
from __future__ import annotations

from typing import Any

import pytest
from inspect_fixtures import T4_MIB, gpu_pod, nvidia_pod, record, shared_node, whole_node

from tessera.model.contract import LABEL_POOL, NVIDIA_GPU
from tessera.inspect import FilterError, Inspection, Reason, build, select
from tessera.inspect.build import node_status
from tessera.inspect.views import ResourceUse, SharedNode

N1 = "n1"
GpuRow = tuple[int, int, int, int]  # (index, core %, memory MiB, pods)


def _node(ins: Inspection, name: str) -> SharedNode:
    return next(n for n in ins.shared_nodes if n.name == name)


def _rows(ins: Inspection, name: str) -> list[GpuRow]:
    return [(g.index, g.core_allocated, g.memory_allocated_mib, g.pods) for g in _node(ins, name).gpus]


PER_GPU: list[tuple[str, list[dict[str, Any]], list[GpuRow]]] = [
    (
        "two pods share one GPU",
        [
            gpu_pod("a", [("main", 40, 4096)], node=N1, allocation=record(N1, {"main": [(0, 40, 4096)]})),
            gpu_pod("b", [("main", 30, 2048)], node=N1, allocation=record(N1, {"main": [(0, 30, 2048)]})),
        ],
        [(0, 70, 6144, 2), (1, 0, 0, 0)],
    ),
    (
        "two containers of one pod on one GPU count one pod",
        [gpu_pod("a", [("x", 30, 1024), ("y", 20, 1024)], node=N1, allocation=record(N1, {"x": [(0, 30, 1024)], "y": [(0, 20, 1024)]}))],
        [(0, 50, 2048, 1), (1, 0, 0, 0)],
    ),
    (
        "a 2-GPU container takes both GPUs whole",
        [gpu_pod("a", [("main", 200, None)], node=N1, allocation=record(N1, {"main": [(0, 100, T4_MIB), (1, 100, T4_MIB)]}))],
        [(0, 100, T4_MIB, 1), (1, 100, T4_MIB, 1)],
    ),
    (
        "containers of several pods spread over both GPUs",
        [
            gpu_pod("a", [("x", 25, 1000), ("y", 25, 1000)], node=N1, allocation=record(N1, {"x": [(0, 25, 1000)], "y": [(1, 25, 1000)]})),
            gpu_pod("b", [("main", 50, 3000)], node=N1, allocation=record(N1, {"main": [(1, 50, 3000)]})),
            gpu_pod("c", [("main", 10, None)], node=N1, allocation=record(N1, {"main": [(0, 10, 0)]})),
        ],
        [(0, 35, 1000, 2), (1, 75, 4000, 2)],
    ),
    (
        "a share without a memory limit takes no memory",
        [gpu_pod("a", [("main", 10, None)], node=N1, allocation=record(N1, {"main": [(1, 10, 0)]}))],
        [(0, 0, 0, 0), (1, 10, 0, 1)],
    ),
    (
        "Succeeded and Failed pods hold nothing",
        [
            gpu_pod("done", [("main", 40, 1)], node=N1, phase="Succeeded", allocation=record(N1, {"main": [(0, 40, 1)]})),
            gpu_pod("oom", [("main", 40, 1)], node=N1, phase="Failed", allocation=record(N1, {"main": [(1, 40, 1)]})),
        ],
        [(0, 0, 0, 0), (1, 0, 0, 0)],
    ),
    (
        "a reservation not bound yet still holds its share",
        [gpu_pod("a", [("main", 60, 512)], phase="Pending", allocation=record(N1, {"main": [(1, 60, 512)]}))],
        [(0, 0, 0, 0), (1, 60, 512, 1)],
    ),
    (
        "records that name another node, a replaced GPU or a missing GPU are not counted",
        [
            gpu_pod("moved", [("main", 40, 1)], node="n2", allocation=record(N1, {"main": [(0, 40, 1)]})),
            gpu_pod("replaced", [("main", 40, 1)], node=N1, allocation=record(N1, {"main": [(0, 40, 1)]}, uuids={0: "GPU-old"})),
            gpu_pod("missing", [("main", 40, 1)], node=N1, allocation=record(N1, {"main": [(7, 40, 1)]})),
        ],
        [(0, 0, 0, 0), (1, 0, 0, 0)],
    ),
]


@pytest.mark.parametrize(("pods", "expected"), [(p, e) for _, p, e in PER_GPU], ids=[c[0] for c in PER_GPU])
def test_allocations_are_summed_per_gpu(pods: list[dict[str, Any]], expected: list[GpuRow]) -> None:
    ins = build([shared_node(N1), shared_node("n2")], pods)
    assert _rows(ins, N1) == expected


def test_each_container_share_is_listed_on_its_gpu() -> None:
    pod = gpu_pod(
        "infer", [("server", 30, 4096), ("tok", 20, 2048)], node=N1, app_class="online",
        allocation=record(N1, {"server": [(0, 30, 4096)], "tok": [(0, 20, 2048)]}),
    )
    gpu = _node(build([shared_node(N1)], [pod]), N1).gpus[0]
    assert [(s.namespace, s.pod, s.container, s.core, s.memory_mib, s.app_class, s.phase, s.bound) for s in gpu.shares] == [
        ("ml", "infer", "server", 30, 4096, "online", "Running", True),
        ("ml", "infer", "tok", 20, 2048, "online", "Running", True),
    ]


def test_unhealthy_gpu_is_shown_with_its_pods_but_gives_no_capacity() -> None:
    pods = [
        gpu_pod("ok", [("main", 40, 1000)], node=N1, allocation=record(N1, {"main": [(0, 40, 1000)]})),
        gpu_pod("hit", [("main", 25, 500)], node=N1, allocation=record(N1, {"main": [(1, 25, 500)]})),
    ]
    node = _node(build([shared_node(N1, unhealthy=[1])], pods), N1)
    assert [(g.index, g.healthy, g.core_allocated) for g in node.gpus] == [(0, True, 40), (1, False, 25)]
    t = node.totals
    assert (t.gpus, t.unhealthy_gpus, t.core_allocated, t.core_capacity, t.memory_allocated_mib, t.memory_capacity_mib, t.pods) == (
        2, 1, 40, 100, 1000, T4_MIB, 2,
    )


FLAGS: list[tuple[str, dict[str, Any], Reason, str]] = [
    ("unbound", gpu_pod("p", [("main", 10, None)], phase="Pending", allocation=record(N1, {"main": [(0, 10, 0)]})), Reason.UNBOUND, "not bound"),
    ("node gone", gpu_pod("p", [("main", 10, None)], node="n9", allocation=record("n9", {"main": [(0, 10, 0)]})), Reason.NODE_GONE, "not in the cluster"),
    (
        "record names a whole-GPU node",
        gpu_pod("p", [("main", 10, None)], node="t4", allocation=record("t4", {"main": [(0, 10, 0)]})),
        Reason.NODE_GONE,
        "not a shared GPU node",
    ),
    ("GPU gone", gpu_pod("p", [("main", 10, None)], node=N1, allocation=record(N1, {"main": [(5, 10, 0)]})), Reason.GPU_GONE, "GPU 5"),
    (
        "GPU replaced",
        gpu_pod("p", [("main", 10, None)], node=N1, allocation=record(N1, {"main": [(0, 10, 0)]}, uuids={0: "GPU-old"})),
        Reason.GPU_GONE,
        "GPU-old",
    ),
    ("bound elsewhere", gpu_pod("p", [("main", 10, None)], node="n2", allocation=record(N1, {"main": [(0, 10, 0)]})), Reason.NODE_MISMATCH, "bound to n2"),
    ("unreadable record", gpu_pod("p", [("main", 10, None)], node=N1, raw_record="{not json"), Reason.UNREADABLE_RECORD, "not a valid record"),
    ("no record", gpu_pod("p", [("main", 10, None)], node=N1), Reason.NO_RECORD, "device plugin will not start it"),
    ("unhealthy GPU", gpu_pod("p", [("main", 10, None)], node=N1, allocation=record(N1, {"main": [(1, 10, 0)]})), Reason.UNHEALTHY_GPU, "evicts"),
    ("invalid request", gpu_pod("p", [("main", 150, None)]), Reason.INVALID_REQUEST, "multiple of 100"),
]


@pytest.mark.parametrize(("pod", "reason", "text"), [(p, r, t) for _, p, r, t in FLAGS], ids=[c[0] for c in FLAGS])
def test_pods_needing_attention_are_flagged(pod: dict[str, Any], reason: Reason, text: str) -> None:
    nodes = [shared_node(N1, unhealthy=[1]), shared_node("n2"), whole_node("t4", "nvidia", "t4-pool", {NVIDIA_GPU: "1"})]
    ins = build(nodes, [pod])
    assert [(f.pod, f.reason) for f in ins.flagged] == [("p", reason)]
    assert text in ins.flagged[0].detail


def test_a_pod_waiting_for_the_scheduler_is_pending_not_flagged() -> None:
    ins = build([shared_node(N1)], [gpu_pod("wait", [("a", 30, 1024), ("b", 200, None)], phase="Pending")])
    assert not ins.flagged
    assert [(p.namespace, p.pod, p.core, p.memory_mib) for p in ins.pending] == [("ml", "wait", 230, 1024)]


WHOLE: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[ResourceUse], int]] = [
    (
        "nvidia: requests of running pods against allocatable",
        whole_node("w", "nvidia", "t4-excl", {NVIDIA_GPU: "4"}),
        [nvidia_pod("a", "w", [{NVIDIA_GPU: "1"}]), nvidia_pod("b", "w", [{NVIDIA_GPU: "1"}, {NVIDIA_GPU: "1"}]), nvidia_pod("done", "w", [{NVIDIA_GPU: "1"}], phase="Succeeded")],
        [ResourceUse(NVIDIA_GPU, 4, 3)],
        2,
    ),
    (
        "an init container asking more counts instead of the sum",
        whole_node("w", "nvidia", "t4-excl", {NVIDIA_GPU: "4"}),
        [nvidia_pod("a", "w", [{NVIDIA_GPU: "1"}], init=[{NVIDIA_GPU: "2"}])],
        [ResourceUse(NVIDIA_GPU, 4, 2)],
        1,
    ),
    (
        "mig mixed strategy: one row per slice profile",
        whole_node("w", "mig", "a100-mig", {"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-3g.20gb": "1"}),
        [nvidia_pod("a", "w", [{"nvidia.com/mig-1g.5gb": "1"}]), nvidia_pod("b", "w", [{"nvidia.com/mig-1g.5gb": "2"}]), nvidia_pod("elsewhere", "x", [{"nvidia.com/mig-1g.5gb": "1"}])],
        [ResourceUse("nvidia.com/mig-1g.5gb", 4, 3), ResourceUse("nvidia.com/mig-3g.20gb", 1, 0)],
        2,
    ),
    (
        "timeslice replicas and an unlisted resource a pod still asks for",
        whole_node("w", "timeslice", "ts", {NVIDIA_GPU: "8"}),
        [nvidia_pod("a", "w", [{NVIDIA_GPU: "1", "nvidia.com/mig-1g.5gb": "1"}])],
        [ResourceUse(NVIDIA_GPU, 8, 1), ResourceUse("nvidia.com/mig-1g.5gb", 0, 1)],
        1,
    ),
    ("an unlabelled node with NVIDIA GPUs", whole_node("w", None, None, {NVIDIA_GPU: "2"}), [], [ResourceUse(NVIDIA_GPU, 2, 0)], 0),
    ("a labelled node before gpu-operator reports GPUs", whole_node("w", "nvidia", "p", {}), [], [], 0),
]


@pytest.mark.parametrize(("node", "pods", "resources", "pod_count"), [c[1:] for c in WHOLE], ids=[c[0] for c in WHOLE])
def test_whole_gpu_nodes_show_requested_against_allocatable(
    node: dict[str, Any], pods: list[dict[str, Any]], resources: list[ResourceUse], pod_count: int
) -> None:
    ins = build([node], pods)
    assert not ins.shared_nodes
    (w,) = ins.whole_gpu_nodes
    assert (list(w.resources), w.pods) == (resources, pod_count)


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        (shared_node("s", inventory=False), "is the Tessera device plugin running"),
        ({"metadata": {"name": "s", "labels": {"tessera.dev/pool-kind": "shared"}, "annotations": {"tessera.dev/gpus": "[{]"}}}, "bad tessera.dev/gpus"),
    ],
    ids=["no inventory yet", "unreadable inventory"],
)
def test_shared_node_without_a_usable_inventory_says_why(node: dict[str, Any], problem: str) -> None:
    (shown,) = build([node], []).shared_nodes
    assert shown.gpus == () and shown.problem is not None and problem in shown.problem


def test_which_nodes_are_shown() -> None:
    nodes = [
        shared_node("labelled"),
        shared_node("unlabelled-with-inventory", pool=None, kind=None),
        {"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8"}}},
        whole_node("t4", "nvidia", "t4-excl", {NVIDIA_GPU: "1"}),
    ]
    ins = build(nodes, [])
    assert [n.name for n in ins.shared_nodes] == ["unlabelled-with-inventory", "labelled"]  # sorted by (pool, name)
    assert [n.name for n in ins.whole_gpu_nodes] == ["t4"]


def test_pools_sum_their_nodes() -> None:
    nodes = [shared_node("a"), shared_node("b", gpus=1), shared_node("c", pool="other"), whole_node("t4", "nvidia", "t4-excl", {NVIDIA_GPU: "2"})]
    pods = [
        gpu_pod("x", [("main", 40, 1000)], node="a", allocation=record("a", {"main": [(0, 40, 1000)]})),
        gpu_pod("y", [("main", 100, None)], node="b", allocation=record("b", {"main": [(0, 100, T4_MIB)]})),
        nvidia_pod("z", "t4", [{NVIDIA_GPU: "1"}]),
    ]
    ins = build(nodes, pods)
    pools = {p.name: p for p in ins.pools}
    shared = pools["t4-shared"]
    assert (shared.kind, shared.nodes, shared.pods, shared.totals.gpus, shared.totals.core_allocated, shared.totals.core_capacity) == (
        "shared", 2, 2, 3, 140, 300,
    )
    assert shared.totals.memory_allocated_mib == 1000 + T4_MIB
    assert (pools["t4-excl"].kind, list(pools["t4-excl"].resources), pools["t4-excl"].pods) == ("nvidia", [ResourceUse(NVIDIA_GPU, 2, 1)], 1)
    assert (ins.totals.gpus, ins.totals.core_allocated, ins.totals.core_capacity, ins.totals.pods) == (5, 140, 500, 2)


def _cluster() -> Inspection:
    nodes = [shared_node("a"), shared_node("b"), shared_node("c", pool="other"), whole_node("t4", "nvidia", "t4-excl", {NVIDIA_GPU: "1"})]
    pods = [
        gpu_pod("on-a", [("main", 40, 1000)], node="a", allocation=record("a", {"main": [(0, 40, 1000)]})),
        gpu_pod("stuck-c", [("main", 10, None)], phase="Pending", allocation=record("c", {"main": [(0, 10, 0)]})),
        gpu_pod("waiting", [("main", 10, None)], phase="Pending"),
    ]
    return build(nodes, pods, source="test")


@pytest.mark.parametrize(
    ("nodes", "pools", "shown", "pool_names", "flagged", "pending"),
    [
        ((), (), ["a", "b", "c", "t4"], ["other", "t4-excl", "t4-shared"], ["stuck-c"], ["waiting"]),
        (("a",), (), ["a"], ["t4-shared"], [], []),
        (("c", "t4"), (), ["c", "t4"], ["other", "t4-excl"], ["stuck-c"], []),
        ((), ("t4-shared",), ["a", "b"], ["t4-shared"], [], []),
        ((), ("other", "t4-excl"), ["c", "t4"], ["other", "t4-excl"], ["stuck-c"], []),
        (("a", "c"), ("t4-shared",), ["a"], ["t4-shared"], [], []),
    ],
)
def test_node_and_pool_filters(
    nodes: tuple[str, ...], pools: tuple[str, ...], shown: list[str], pool_names: list[str], flagged: list[str], pending: list[str]
) -> None:
    ins = select(_cluster(), nodes=nodes, pools=pools)
    assert sorted(n.name for n in ins.shared_nodes) + [n.name for n in ins.whole_gpu_nodes] == shown
    assert [p.name for p in ins.pools] == pool_names
    assert [f.pod for f in ins.flagged] == flagged
    assert [p.pod for p in ins.pending] == pending
    assert sum(p.totals.core_allocated for p in ins.pools) == ins.totals.core_allocated
    assert (ins.node_filter, ins.pool_filter) == (nodes, pools)


@pytest.mark.parametrize(
    ("nodes", "pools", "message"),
    [
        (("zz",), (), "no GPU node named 'zz' in test (GPU nodes: a, b, c, t4)"),
        ((), ("zz",), "no pool named 'zz' in test (pools: other, t4-excl, t4-shared)"),
    ],
)
def test_a_filter_naming_nothing_says_what_exists(nodes: tuple[str, ...], pools: tuple[str, ...], message: str) -> None:
    with pytest.raises(FilterError) as err:
        select(_cluster(), nodes=nodes, pools=pools)
    assert str(err.value) == message


def test_stranded_gpus_against_the_requests_seen() -> None:
    """Most requests ask for 30 % and 4 GiB: a GPU with 20 % left, or with compute but 1 GiB left, is stranded."""
    node = shared_node(N1, gpus=4)
    pods = [
        gpu_pod("a", [("main", 80, 1024)], node=N1, allocation=record(N1, {"main": [(0, 80, 1024)]})),
        gpu_pod("b", [("main", 30, 14336)], node=N1, allocation=record(N1, {"main": [(1, 30, 14336)]})),
        gpu_pod("c", [("main", 100, None)], node=N1, allocation=record(N1, {"main": [(2, 100, T4_MIB)]})),
        *(gpu_pod(f"w{i}", [("main", 30, 4096)], phase="Pending") for i in range(3)),
    ]
    shown = _node(build([node], pods), N1)
    assert [(g.index, g.stranded) for g in shown.gpus] == [(0, True), (1, True), (2, False), (3, False)]
    assert shown.totals.stranded_gpu is not None and shown.totals.stranded_gpu > 0.2 + 0.7 - 0.01


def test_no_gpu_pods_means_no_stranded_figure() -> None:
    shown = _node(build([shared_node(N1)], []), N1)
    assert shown.totals.stranded_gpu is None and not any(g.stranded for g in shown.gpus)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Ready"),
        ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "NotReady"),
        ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, "Unknown"),
        ({}, "Unknown"),
        ({"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Ready,SchedulingDisabled"),
    ],
)
def test_node_status_reads_like_kubectl(status: dict[str, Any], expected: str) -> None:
    assert node_status({"metadata": {"name": "n", "labels": {LABEL_POOL: "p"}}, **status}) == expected
