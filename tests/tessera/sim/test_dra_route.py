"""Node choice on a dra pool (`tessera.sim.dra_route`) and `tessera sim replay|compare --route`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PodRequest, PodUid
from tessera.model.contract import LABEL_MAX_SHARES_PER_GPU
from tessera.sim.dra_route import DraPlacer, Route, allocate_pod, default_score, feasible_nodes_to_find

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,64000,262144,4,A10\nn3,32000,131072,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    "a,1000,1024,1,400\nb,1000,1024,1,400\nc,1000,1024,1,1000\nd,1000,1024,4,1000\ne,500,512,0,0\nf,1000,1024,2,1000\n"
    "g,2000,2048,1,250\nh,2000,2048,1,750\n"
)


def _pod(uid: str, milli: int, count: int = 1, cpu: int = 1000, memory: int = 1024) -> PodRequest:
    return PodRequest(PodUid(uid), (ContainerRequest("c", count, milli),), cpu, memory)


def _nodes() -> list[NodeState]:
    return [
        NodeState("a", [GpuState(i, f"a{i}", "T4", 1 << 62) for i in range(4)], 64000, 262144),
        NodeState("b", [GpuState(i, f"b{i}", "T4", 1 << 62) for i in range(4)], 64000, 262144),
    ]


def test_kube_scheduler_filters_an_adaptive_share_of_large_clusters() -> None:
    assert feasible_nodes_to_find(50) == 50
    assert feasible_nodes_to_find(100) == 100  # 50 - 0 % = 50 % of 100, floor of 100 nodes
    assert feasible_nodes_to_find(1213) == 1213 * 41 // 100
    assert feasible_nodes_to_find(5000) == 500  # 50 - 40 = 10 %
    assert feasible_nodes_to_find(20000) == 1000  # floor of 5 %


def test_dra_route_takes_the_policys_node_and_first_fit_devices() -> None:
    cluster = Cluster(_nodes())
    cluster.set_tie_ranking(["a", "b"])
    placer = DraPlacer(cluster, Route.DRA, ["a", "b"])
    for uid, milli in (("p1", 300), ("p2", 500), ("p3", 300)):
        pod = _pod(uid, milli)
        policy_choice = cluster.schedule(pod)
        placement = placer.place(pod)
        assert placement is not None and policy_choice is not None
        assert placement.node == policy_choice.node  # the node is the policy's
        node = cluster.nodes[placement.node]
        first_fit = next(g.index for g in sorted(node.gpus, key=lambda g: g.index) if g.free_milli >= milli)
        assert [g.index for c in placement.containers for g in c.grants] == [first_fit]  # the device is first fit
        cluster.reserve(pod, placement)
    assert placer.fallbacks == 0


def test_dra_route_picks_again_when_the_allocator_refuses_the_policys_node() -> None:
    """A claim without memory takes all of a known GPU memory: the policy's fit is looser."""
    nodes = [NodeState(n, [GpuState(0, f"{n}0", "T4", 16384)], 64000, 262144) for n in ("a", "b")]
    cluster = Cluster(nodes)
    cluster.set_tie_ranking(["a", "b"])
    placer = DraPlacer(cluster, Route.DRA, ["a", "b"])
    first = _pod("p1", 300)
    placement = placer.place(first)
    assert placement is not None
    cluster.reserve(first, placement)
    assert placement.containers[0].grants[0].memory_mib == 16384
    second_pod = _pod("p2", 300)
    assert cluster.schedule(second_pod) is not None and cluster.schedule(second_pod).node == placement.node  # type: ignore[union-attr]
    second = placer.place(second_pod)
    assert second is not None and second.node != placement.node and placer.fallbacks == 1
    cluster.reserve(second_pod, second)
    assert placer.place(_pod("p3", 300)) is None  # both GPUs' memory is held, though 70 cores are free on each


def test_default_kube_scheduler_spreads_by_cpu_and_memory() -> None:
    cluster = Cluster(_nodes())
    placer = DraPlacer(cluster, Route.DRA_DEFAULT, ["a", "b"])
    busy = _pod("busy", 100, cpu=32000, memory=131072)
    first = placer.place(busy)
    assert first is not None and first.node == "a"  # equal scores: the ranking
    cluster.reserve(busy, first)
    pod = _pod("p", 100)
    assert default_score(cluster.nodes["b"], pod) > default_score(cluster.nodes["a"], pod)
    placed = placer.place(pod)
    assert placed is not None and placed.node == "b"  # least allocated, although node a's GPU 0 has room


def test_allocate_pod_refuses_what_no_device_serves() -> None:
    node = NodeState("n", [GpuState(0, "u", "T4", 1 << 62, used_milli=900)], 64000, 262144)
    assert allocate_pod(node, _pod("p", 200)) is None
    assert allocate_pod(node, _pod("q", 100)) is not None


def _cli(tmp_path: Path, verb: str, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    trace = ["--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--no-progress"]
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", "sim", verb, *trace, *extra], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("route", ["dra", "dra-default"])
def test_replay_on_a_dra_route_through_the_cli(tmp_path: Path, route: str) -> None:
    run = _cli(tmp_path, "replay", "--route", route, "--order", "shuffle", "--inflate", "1.3")
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert first.endswith(f"policy fragmentation-aware, shuffle order, seed 42, route {route}"), first
    assert "allocated %" in run.stdout


def test_the_default_route_is_the_device_plugin_one(tmp_path: Path) -> None:
    plain = _cli(tmp_path, "replay", "--order", "shuffle", "--inflate", "1.3")
    named = _cli(tmp_path, "replay", "--order", "shuffle", "--inflate", "1.3", "--route", "device-plugin")
    assert plain.returncode == named.returncode == 0
    assert plain.stdout == named.stdout and "route" not in plain.stdout


def test_compare_takes_a_route_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    run = _cli(tmp_path, "compare", "--route", "dra", "--policies", "fragmentation-aware,binpack", "--seeds", "1-2", "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert ", route dra" in run.stdout.splitlines()[0]
    bad = _cli(tmp_path, "replay", "--route", "csi")
    assert bad.returncode == 2 and "--route" in bad.stderr


def test_a_shares_per_gpu_cap_above_one_is_not_modelled() -> None:
    node = NodeState("capped", [GpuState(0, "u", "T4", 1 << 62)], 64000, 262144, {LABEL_MAX_SHARES_PER_GPU: "3"})
    with pytest.raises(ValueError, match="shares-per-GPU cap"):
        DraPlacer(Cluster([node]), Route.DRA, ["capped"])
    one = NodeState("one", [GpuState(0, "u", "T4", 1 << 62)], 64000, 262144, {LABEL_MAX_SHARES_PER_GPU: "1"})
    assert DraPlacer(Cluster([one]), Route.DRA, ["one"]).place(_pod("p", 100)) is not None  # one claim per GPU: whole devices
