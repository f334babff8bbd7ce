"""Memory enforcement in a pod of several GPU containers before and after the agent knows their
runtime ids. The device plugin registers containers without ids; until the agent reads them from
the pod status, a process can only be told apart from its siblings' by guessing, and the agent
must neither guess nor kill on a guess."""
from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from agent_world import NODE, World
from test_agent_metrics import scrape

from tessera.model.contract import LABEL_MEMORY_ENFORCEMENT, GpuShare
from tessera.kube.api import KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera_node.agent.memory import REASON_MEMORY_EXCEEDED
from tessera_node.agent.metrics import serve_metrics
from tessera_node.registry import ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy

LIMITS = {"infer": 2048, "embed": 1024}  # MiB of gpu-memory, both containers on GPU 0


class Kubelet(FakeKubeApi):
    """The API server as the agent sees it: container ids appear in a pod's status only once the
    kubelet has reported them (`report`); pod listings are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: dict[str, dict[str, str]] = {}
        self.pod_lists = 0

    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        self.pod_lists += 1
        pods = super().list_pods(node_name=node_name, label_selector=label_selector)
        return [
            {**pod, "status": {"phase": "Running", "containerStatuses": [
                {"name": name, "containerID": f"containerd://{cid}"} for name, cid in self.reported.get(pod["metadata"]["uid"], {}).items()
            ]}}
            for pod in pods
        ]


@dataclass
class SiblingPod:
    uid: str
    ids: dict[str, str]
    pids: dict[str, list[int]] = field(default_factory=dict)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, Kubelet, SiblingPod, str]]:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="enforce"))
    kubelet = Kubelet()
    # the pool's policy as the agent reads it from its node on every pod-status refresh
    kubelet.create_node({"metadata": {"name": NODE, "labels": {LABEL_MEMORY_ENFORCEMENT: "enforce"}}})
    world.kube = kubelet
    world.agent = world.new_agent()
    pod = SiblingPod(str(uuidlib.uuid4()), {name: uuidlib.uuid4().hex * 2 for name in LIMITS})
    for offset, (name, limit) in enumerate(LIMITS.items()):
        pod.pids[name] = [5000 + 10 * offset, 5001 + 10 * offset]
        world.tree.container(pod.uid, pod.ids[name], pod.pids[name])
        share = GpuShare(0, world.uuids[0], 20, limit)
        # as the device plugin registers it: no runtime id yet
        world.registry.register(RegisteredContainer(PodUid(pod.uid), "team-a", "pair", ContainerName(name), (share,), None, world.policy, None))
    kubelet.create_pod({
        "metadata": {"name": "pair", "namespace": "team-a", "uid": pod.uid},
        "spec": {"nodeName": NODE, "containers": [{"name": n} for n in LIMITS]},
    })
    server, _thread, port = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
    try:
        yield world, kubelet, pod, f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()


def _use(world: World, pod: SiblingPod, used_mib: Mapping[str, int]) -> None:
    for name, mib in used_mib.items():
        for pid in pod.pids[name]:
            world.sim.add_process(pid, 0, mib // 2, 10)


def _pending(url: str) -> dict[str, float]:
    return {labels["container"]: value for labels, value in scrape(url)["tessera_container_gpu_attribution_pending"]}


def _killed(world: World, pod: SiblingPod) -> set[str]:
    return {name for name, pids in pod.pids.items() if set(pids) & set(world.killer.killed)}


@pytest.mark.parametrize(
    ("used_mib", "offenders"),
    [
        ({"infer": 1500, "embed": 700}, set()),  # together over either limit, each within its own
        ({"infer": 1500, "embed": 1500}, {"embed"}),
        ({"infer": 3000, "embed": 700}, {"infer"}),
        ({"infer": 3000, "embed": 1500}, {"infer", "embed"}),
    ],
)
def test_nothing_is_killed_until_ids_are_known_then_only_the_offender(
    world: tuple[World, Kubelet, SiblingPod, str], used_mib: dict[str, int], offenders: set[str]
) -> None:
    w, kubelet, pod, url = world
    _use(w, pod, used_mib)
    for _ in range(10):  # one second of ticks; the kubelet has not reported the ids yet
        w.tick()
    assert w.killer.killed == [] and w.events(REASON_MEMORY_EXCEEDED) == []
    assert _pending(url) == {"infer": 1.0, "embed": 1.0}, "the held-back memory check is visible"
    assert scrape(url)["tessera_agent_ambiguous_gpu_processes"][0][1] == 4
    assert kubelet.pod_lists <= 3, "while ids are missing the agent reads pod status about once a second, not every tick"

    kubelet.reported[pod.uid] = dict(pod.ids)
    for _ in range(10):
        w.tick()
    assert _killed(w, pod) == offenders
    assert {e["involvedObject"]["fieldPath"] for e in w.events(REASON_MEMORY_EXCEEDED)} == {f"spec.containers{{{n}}}" for n in offenders}
    assert _pending(url) == {"infer": 0.0, "embed": 0.0}


def test_ids_are_learnt_on_the_first_slow_tick_that_sees_the_processes(world: tuple[World, Kubelet, SiblingPod, str]) -> None:
    w, kubelet, pod, url = world
    kubelet.reported[pod.uid] = dict(pod.ids)  # the kubelet knew them all along; the registry did not
    _use(w, pod, {"infer": 1500, "embed": 1500})
    w.tick()  # periodic pod refresh is 1e6 ticks away in this world: the ambiguity alone triggers it
    assert {r.container: r.container_id for r in w.registry.snapshot().values()} == pod.ids
    assert _killed(w, pod) == {"embed"}
    used = {labels["container"]: value for labels, value in scrape(url)["tessera_container_gpu_memory_used_bytes"]}
    assert used == {"infer": 1500 * 2**20, "embed": 1500 * 2**20}


def test_no_pod_status_reads_while_every_process_is_attributed(world: tuple[World, Kubelet, SiblingPod, str]) -> None:
    w, kubelet, pod, _url = world
    kubelet.reported[pod.uid] = dict(pod.ids)
    _use(w, pod, {"infer": 100, "embed": 100})
    w.tick()
    lists = kubelet.pod_lists
    for _ in range(20):
        w.tick()
    assert kubelet.pod_lists == lists
