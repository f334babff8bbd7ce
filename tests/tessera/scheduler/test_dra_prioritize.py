"""`POST /dra/prioritize` over real HTTP: nodes of a dra pool ranked by the extender's policy from
ResourceSlices (as the DRA kubelet plugin publishes them) and allocated ResourceClaims; kube-scheduler
configured by the rendered KubeSchedulerConfiguration with both extender entries."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from extender_harness import Harness, node_manifest, wait_until
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry

from tessera.alloc import Cluster, ContainerPlacement, Evaluation, ContainerRequest, GpuGrant, GpuState, NodeState, Placement, PlacementPolicy, PodRequest, PodUid
from tessera.kube.api import KubeApiError, KubeObject, WatchEvent
from tessera.kube.fake import FakeKubeApi
from tessera.manifests.scheduler import scheduler_configuration
from tessera.manifests.scheduler_doc import default_settings
from tessera.manifests.settings import PlatformSettings, platform_settings
from tessera.model import load_stack_file
from tessera.model.contract import DRA_DRIVER, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera.scheduler.dra_scores import DraScorer, DraScoreSettings
from tessera.scheduler.extender_types import ExtenderArgs
from tessera_node.dra.slices import slice_body, slice_spec

GIB = 1024
DRA_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dra" / "Pulumi.dra.yaml"
CLASS = f"pool-a.{DRA_DRIVER}"
NODES = ("n1", "n2", "n3")
# (node, GPU index, cores %, memory MiB or None = whole device) already allocated
USAGE = (("n1", 0, 60, 8 * GIB), ("n1", 1, None, None), ("n2", 0, 20, 4 * GIB), ("n2", 1, 20, 4 * GIB))


def _publish(api: FakeKubeApi, node: str, gpus: int = 2) -> None:
    inventory = [NodeGpu(i, f"GPU-{node}-{i}", "T4", 16 * GIB) for i in range(gpus)]
    api.create_resource_slice(slice_body(node, slice_spec(node, inventory, PoolPolicy(), {}, 1)))


def _allocated(name: str, node: str, index: int, cores: int | None, memory: int | None) -> KubeObject:
    result: dict[str, Any] = {"request": "gpu", "driver": DRA_DRIVER, "pool": node, "device": f"gpu-{index}"}
    if cores is not None:
        result["consumedCapacity"] = {"cores": str(cores), "memory": f"{memory}Mi"}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def _claim(name: str, cores: int | None, memory: int | None = None, count: int = 1, device_class: str = CLASS) -> KubeObject:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if cores is not None:
        exactly["capacity"] = {"requests": {"cores": str(cores), **({"memory": f"{memory}Mi"} if memory else {})}}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _pod(name: str, claim: str | None, *, from_template: bool = True) -> KubeObject:
    pod: KubeObject = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": {"schedulerName": "tessera-scheduler", "containers": [{"name": "main"}]}}
    if claim is not None:
        if from_template:
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
            pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}]}
        else:
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return pod


def _expected_cluster(policy: PlacementPolicy) -> Cluster:
    """The same state written straight into the allocation model."""
    cluster = Cluster(policy=policy)
    for node in NODES:
        cluster.add_node(NodeState(node, [GpuState(i, f"GPU-{node}-{i}", "T4", 16 * GIB) for i in range(2)]))
    for i, (node, index, cores, memory) in enumerate(USAGE):
        milli = 1000 if cores is None else cores * 10
        mem = 16 * GIB if memory is None else memory
        request = PodRequest(PodUid(f"u{i}"), (ContainerRequest("c", 1, milli, None if cores is None else mem),))
        cluster.reserve(request, Placement(node, (ContainerPlacement("c", (GpuGrant(index, milli, mem),)),)))
    return cluster


@pytest.fixture
def dra_api() -> FakeKubeApi:
    api = FakeKubeApi()
    for node in NODES:
        _publish(api, node)
        api.create_node(node_manifest(node, gpus=0))  # kube-scheduler's node list; no Tessera GPU annotation
    for i, (node, index, cores, memory) in enumerate(USAGE):
        api.put_resource_claim(_allocated(f"used-{i}", node, index, cores, memory))
    return api


@pytest.fixture
def served(dra_api: FakeKubeApi) -> Iterator[tuple[Harness, ExtenderClient]]:
    harness = Harness(dra_api, policy=PlacementPolicy.FRAGMENTATION_AWARE)
    service = harness.start()
    yield harness, harness.client(service)
    harness.close()


def _scores(client: ExtenderClient, pod: KubeObject, names: list[str] | None = None) -> dict[str, int]:
    status, body = client.post("/dra/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": names or list(NODES)})
    assert status == 200, body
    return {p["Host"]: p["Score"] for p in body}


@pytest.mark.parametrize(("cores", "memory"), [(40, 8 * GIB), (30, 2 * GIB), (70, 4 * GIB), (None, None)])
def test_nodes_rank_as_the_policy_places_on_the_same_state(served: tuple[Harness, ExtenderClient], cores: int | None, memory: int | None) -> None:
    harness, client = served
    harness.api.put_resource_claim(_claim("mine", cores, memory))
    scores = _scores(client, _pod("p", "mine"))
    cluster = _expected_cluster(PlacementPolicy.FRAGMENTATION_AWARE)
    milli = 1000 if cores is None else cores * 10
    request = PodRequest(PodUid("x"), (ContainerRequest("r0", 1, milli, memory),))
    chosen = cluster.schedule(request)
    assert chosen is not None
    evaluations = {n: e for n, e in cluster.evaluate_many(request, NODES).items() if isinstance(e, Evaluation)}
    best = max(e.key for e in evaluations.values())
    assert {n for n, s in scores.items() if s == 10} == {n for n, e in evaluations.items() if e.key == best} >= {chosen.node}
    assert {n for n, s in scores.items() if s > 0} <= set(evaluations), "a node the policy finds no room on is not advised"
    by_score = sorted(evaluations, key=lambda n: evaluations[n].score)
    assert [scores[n] for n in by_score] == sorted(scores[n] for n in by_score), "the order is the policy's"


def test_a_claim_named_directly_is_scored_too(served: tuple[Harness, ExtenderClient]) -> None:
    harness, client = served
    harness.api.put_resource_claim(_claim("mine", 70, 4 * GIB))
    scores = _scores(client, _pod("p", "mine", from_template=False))
    assert scores == {"n1": 0, "n2": 10, "n3": 9}, "n1 has no GPU with 70 % free; n2 has, and the policy prefers it to the empty n3"


def test_pods_without_a_tessera_claim_and_unknown_nodes_score_zero(served: tuple[Harness, ExtenderClient]) -> None:
    harness, client = served
    harness.api.put_resource_claim(_claim("other", 50, device_class="gpu.example.com"))
    assert set(_scores(client, _pod("plain", None)).values()) == {0}
    assert set(_scores(client, _pod("other", "other")).values()) == {0}
    assert set(_scores(client, _pod("gone", "no-such-claim")).values()) == {0}
    harness.api.put_resource_claim(_claim("mine", 30, 8 * GIB))
    scores = _scores(client, _pod("p", "mine"), ["n1", "elsewhere"])
    assert scores == {"n1": 10, "elsewhere": 0}


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", json.dumps({"Pod": "x", "NodeNames": ["n1"]}).encode(), json.dumps({"Pod": {"metadata": {}}, "NodeNames": [1]}).encode()],
)
def test_hostile_bodies_get_a_4xx_with_a_json_reason(served: tuple[Harness, ExtenderClient], body: bytes) -> None:
    _, client = served
    status, raw = client.post_raw("/dra/prioritize", body)
    assert 400 <= status < 500
    assert "error" in json.loads(raw)


@pytest.mark.parametrize(
    "claim_spec",
    [{"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS, "count": "two"}}]}},
     {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS, "capacity": {"requests": {"cores": "lots"}}}}]}},
     {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS, "allocationMode": "All"}}]}},
     {"devices": "nonsense"}],
)
def test_claims_it_cannot_read_score_zero_never_5xx(served: tuple[Harness, ExtenderClient], claim_spec: Any) -> None:
    harness, client = served
    harness.api.put_resource_claim({"metadata": {"name": "odd", "namespace": "default"}, "spec": claim_spec})
    assert set(_scores(client, _pod("p", "odd")).values()) == {0}


class _Flaky(FakeKubeApi):
    """Lists of claims fail while `fail` is set, and the claim watch ends with 410 Gone once."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.lists = 0
        self.gone_once = False

    def list_resource_claims_and_version(self) -> tuple[list[KubeObject], str]:
        self.lists += 1
        if self.fail:
            raise KubeApiError(503, "list resourceclaims: unavailable")
        return super().list_resource_claims_and_version()

    def watch_resource_claims(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        if self.gone_once and resource_version is not None:
            self.gone_once = False
            raise KubeApiError(410, "too old resource version")
        return super().watch_resource_claims(resource_version=resource_version, stop_after_s=stop_after_s)


@contextmanager
def _watching(api: FakeKubeApi, cores: int, memory: int) -> Iterator[tuple[DraScorer, ExtenderArgs]]:
    """Three empty nodes, pod `p` asking `cores` % and `memory` MiB, and a scorer watching them."""
    for node in NODES:
        _publish(api, node)
    api.put_resource_claim(_claim("mine", cores, memory))
    scorer = DraScorer(api, PlacementPolicy.FRAGMENTATION_AWARE, DraScoreSettings(watch_timeout_s=0.5, retry_backoff_s=0.05, sync_wait_s=5.0))
    try:
        yield scorer, ExtenderArgs(_pod("p", "mine"), node_names=list(NODES))
    finally:
        scorer.stop()


def test_a_claim_allocated_after_a_score_counts_for_the_next_pod_at_once() -> None:
    """A burst of pods is not steered at one node: the claim kube-scheduler allocated for the
    previous pod reaches the view through the watch, not after a polling period."""
    api = FakeKubeApi()
    with _watching(api, 70, 4 * GIB) as (scorer, args):
        first = dict(scorer.prioritize(args))
        top = next(n for n, s in first.items() if s == 10)
        api.put_resource_claim(_allocated("previous", top, 0, 70, 4 * GIB))
        api.put_resource_claim(_allocated("previous-2", top, 1, 70, 4 * GIB))
        assert wait_until(lambda: dict(scorer.prioritize(args))[top] == 0), "the node the last two claims filled still ranks"


def test_the_view_survives_list_errors_and_a_410_and_ends_as_the_api_server_is() -> None:
    api = _Flaky()
    with _watching(api, 40, 8 * GIB) as (scorer, args):
        scorer.prioritize(args)
        api.fail, api.gone_once = True, True
        api.put_resource_claim(_allocated("late", "n3", 0, 60, 8 * GIB))
        assert wait_until(lambda: api.lists >= 3), "the 410 makes it list again, and again while lists fail"
        api.fail = False
        api.delete_resource_slice(api.list_resource_slices(node_name="n2")[0]["metadata"]["name"])
        expected = {"late": ("n3", ((0, 600, 8 * GIB),))}
        assert wait_until(lambda: _counted_by_name(api, scorer) == expected), _counted_by_name(api, scorer)
        assert wait_until(lambda: list(scorer.view.node_names()) == ["n1", "n3"]), "the deleted slice's node is gone"


def _counted_by_name(api: FakeKubeApi, scorer: DraScorer) -> dict[str, object]:
    names = {c["metadata"]["uid"]: c["metadata"]["name"] for c in api.list_resource_claims()}
    return {names.get(uid, uid): held for uid, held in scorer.view.counted().items()}


def _dra_settings() -> PlatformSettings:
    """The settings of the dra example stack (one shared pool on the DRA route)."""
    settings = platform_settings(load_stack_file(DRA_EXAMPLE))
    assert settings.dra_pools
    return settings


def test_kube_scheduler_sums_both_entries_and_places_a_dra_pod_by_the_policy(dra_api: FakeKubeApi) -> None:
    config = yaml.safe_dump(scheduler_configuration(_dra_settings()), sort_keys=True)
    main, dra = ExtenderEntry.from_config(config, 0), ExtenderEntry.from_config(config, 1)
    assert (dra.prioritize_verb, dra.filter_verb, dra.bind_verb, dra.preempt_verb) == ("prioritize", "", "", "")
    assert dra.ignorable and dra.node_cache_capable and not dra.managed_resources and dra.weight == main.weight
    harness = Harness(dra_api, policy=PlacementPolicy.FRAGMENTATION_AWARE)
    try:
        service = harness.start()
        scheduler = harness.scheduler(service, config=config, filters=[], others=[dra])
        dra_api.put_resource_claim(_claim("mine", 70, 4 * GIB))
        dra_api.create_pod(_pod("p", "mine"))
        attempt = scheduler.schedule("default", "p")
        assert attempt.node == "n2", attempt
        assert scheduler.calls == ["/dra/prioritize"], "the first entry is not interested in a pod without tessera.dev resources"
    finally:
        harness.close()


def test_a_down_dra_extender_does_not_block_the_pod(dra_api: FakeKubeApi) -> None:
    config = yaml.safe_dump(scheduler_configuration(_dra_settings()), sort_keys=True)
    dra = ExtenderEntry.from_config(config, 1)
    harness = Harness(dra_api, policy=PlacementPolicy.FRAGMENTATION_AWARE)
    try:
        service = harness.start()
        # the same entry, at a path that answers 404: kube-scheduler's prioritize fails
        broken = replace(dra, prioritize_verb="gone")
        scheduler = harness.scheduler(service, config=config, filters=[], others=[broken])
        dra_api.put_resource_claim(_claim("mine", 70, 4 * GIB))
        dra_api.create_pod(_pod("p", "mine"))
        attempt = scheduler.schedule("default", "p")
        assert scheduler.calls == ["/dra/gone"] and attempt.scores == {} and not attempt.error
        assert attempt.node in NODES
    finally:
        harness.close()


def test_the_second_entry_exists_only_with_a_dra_pool() -> None:
    assert len(scheduler_configuration(default_settings())["extenders"]) == 1
    main, dra = scheduler_configuration(_dra_settings())["extenders"]
    assert dra["urlPrefix"] == main["urlPrefix"] + "/dra"
    assert "managedResources" not in dra and "filterVerb" not in dra and "bindVerb" not in dra


class _Broken(FakeKubeApi):
    def list_resource_slices_and_version(self, *, driver: str | None = None) -> tuple[list[KubeObject], str]:
        raise RuntimeError("a bug of ours")

    def get_resource_claim(self, namespace: str, name: str) -> KubeObject:
        if name == "explodes":
            raise RuntimeError("another bug of ours")
        return super().get_resource_claim(namespace, name)


def test_an_unexpected_error_scores_zero_instead_of_failing_the_cycle() -> None:
    api = _Broken()
    api.put_resource_claim(_claim("mine", 40, 8 * GIB))
    scorer = DraScorer(api, PlacementPolicy.FRAGMENTATION_AWARE, DraScoreSettings(retry_backoff_s=0.05, sync_wait_s=0.2))
    try:
        assert dict(scorer.prioritize(ExtenderArgs(_pod("p", "mine"), node_names=["n1", "n2"]))) == {"n1": 0, "n2": 0}, "never listed: 0"
        assert dict(scorer.prioritize(ExtenderArgs(_pod("q", "explodes"), node_names=["n1", "n2"]))) == {"n1": 0, "n2": 0}
    finally:
        scorer.stop()
