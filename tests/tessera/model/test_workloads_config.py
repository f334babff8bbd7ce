"""The `workloads` section: what a preview refuses, at which path, and what `tessera plan` shows."""
from __future__ import annotations

import copy
from typing import Any, Final

import pytest
from config_cases import DELETE, TKE_BASE, edit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping
from tessera.model.capacity import node_capacity, pools_mig_strategy, replica_request
from tessera.model.plan import plan_stack
from tessera.model.rules_workloads import duration_seconds, quantity_value
from value_paths import value_paths

TRITON: Final = {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3"}
PORTS: Final = [{"name": "http", "port": 8000}, {"name": "metrics", "port": 8002}]
QUEUE: Final = {"name": "avg_time_queue_us", "target": "50"}

# TKE_BASE's pools: t4 (nvidia, 1 x T4, maxSize 2), shared (2 x T4, maxSize 2), mig (1 x A100-40GB,
# 3g.20gb + 2g.10gb + 2 x 1g.5gb, 1g.5gb time-sliced x4, maxSize 1), ts (1 x T4 x4 replicas, maxSize 1)
WL_BASE: Final[dict[str, Any]] = copy.deepcopy(TKE_BASE) | {
    "monitoring": {"prometheusAdapter": True},
    "quotas": [{"namespace": "inference", "gpuCore": 400, "resources": {"nvidia.com/mig-1g.5gb": 8}}],
    "workloads": [
        {
            "name": "triton-mig", "namespace": "inference", "image": TRITON, "ports": PORTS, "pool": "mig", "gpu": {"migProfile": "1g.5gb"},
            "metrics": {"port": "metrics"}, "readinessProbe": {"path": "/v2/health/ready", "port": "http"},
            "scaling": {"minReplicas": 1, "maxReplicas": 8, "metric": QUEUE},
        },
        {
            "name": "bert", "namespace": "inference", "image": TRITON, "ports": PORTS, "pool": "shared", "gpu": {"core": 50, "memoryMiB": 4096},
            "metrics": {"port": "metrics"},
            "scaling": {"minReplicas": 2, "maxReplicas": 8, "metric": {
                "name": "bert_rps", "type": "External", "target": "30", "selector": {"container": "bert"},
                "query": {"series": "nv_inference_request_success"},
            }},
        },
        {"name": "whole", "namespace": "batch", "image": TRITON, "pool": "t4", "gpu": {"gpus": 1}, "scaling": {"minReplicas": 2, "maxReplicas": 2}},
        {"name": "sliced", "namespace": "batch", "image": TRITON, "pool": "ts", "gpu": {"gpus": 1}, "scaling": {"minReplicas": 3, "maxReplicas": 3}},
    ],
}

BAD: Final[list[tuple[str, Any, str, str]]] = [
    # the pool exists and its kind fits the request
    ("workloads[0].pool", "a100", "workloads[0].pool", "no pool named 'a100'"),
    ("workloads[0].pool", "migg", "workloads[0].pool", "did you mean mig?"),
    ("workloads[0].gpu", {"core": 50}, "workloads[0].gpu.core", "does not apply to pool mig, which is mig: use gpu.migProfile"),
    ("workloads[0].gpu", {"core": 50}, "workloads[0].gpu.migProfile", "is required on pool mig (mig)"),
    ("workloads[1].gpu", {"migProfile": "1g.5gb"}, "workloads[1].gpu.migProfile", "does not apply to pool shared, which is shared: use gpu.core"),
    ("workloads[1].gpu", {"gpus": 1}, "workloads[1].gpu.gpus", "use gpu.core (and gpu.memoryMiB)"),
    ("workloads[2].gpu", {"core": 100}, "workloads[2].gpu.core", "does not apply to pool t4, which is nvidia: use gpu.gpus"),
    ("workloads[2].gpu", {}, "workloads[2].gpu.gpus", "is required on pool t4 (nvidia)"),
    # the share fits the pool's GPU model
    ("workloads[1].gpu.memoryMiB", 16385, "workloads[1].gpu.memoryMiB", "16385 MiB is more than a T4 has (16384 MiB)"),
    ("workloads[1].gpu.core", 150, "workloads[1].gpu.core", "neither a share of one GPU (1..100) nor whole GPUs"),
    ("workloads[1].gpu.core", 300, "workloads[1].gpu.core", "300 is 3 GPUs; a node of pool shared has 2"),
    ("workloads[1].gpu.core", 0, "workloads[1].gpu.core", "must be >= 1"),
    ("workloads[1].gpu", {"memoryMiB": 1024}, "workloads[1].gpu.core", "is required with memoryMiB"),
    ("workloads[0].gpu.migProfile", "1g.6gb", "workloads[0].gpu.migProfile", "not a MIG profile of A100-40GB; did you mean 1g.5gb?"),
    ("workloads[0].gpu.migProfile", "7g.40gb", "workloads[0].gpu.migProfile", "not in pool mig's MIG layout (it offers 3g.20gb, 2g.10gb, 1g.5gb)"),
    ("workloads[2].gpu.gpus", 2, "workloads[2].gpu.gpus", "2 is more than a node of pool t4 offers (1)"),
    ("workloads[3].gpu.gpus", 5, "workloads[3].gpu.gpus", "5 is more than a node of pool ts offers (4)"),
    ("workloads[1].appClass", "online", "workloads[1].appClass", "only applies on a shared pool with sharing.onlineOffline: true"),
    ("workloads[0].appClass", "offline", "workloads[0].appClass", "pool mig does not co-locate"),
    # what the pool holds at maxSize, and what the quota allows, at maxReplicas
    ("workloads[2].scaling", {"minReplicas": 3, "maxReplicas": 3}, "workloads[2].scaling.maxReplicas", "3 replicas x 1 nvidia.com/gpu = 3, more than pool t4 offers at maxSize 2 (2)"),
    ("workloads[0].scaling.maxReplicas", 9, "workloads[0].scaling.maxReplicas", "more than pool mig offers at maxSize 1 (8)"),
    ("quotas[0].resources", {"nvidia.com/mig-1g.5gb": 7}, "workloads[0].scaling.maxReplicas", "namespace inference would use 8 nvidia.com/mig-1g.5gb at maxReplicas (workloads[0] 8 x 1), above its quota of 7 (quotas[0])"),
    ("quotas[0].gpuCore", 350, "workloads[1].scaling.maxReplicas", "would use 400 tessera.dev/gpu-core at maxReplicas (workloads[1] 8 x 50), above its quota of 350"),
    # replicas and the metric
    ("workloads[0].scaling.minReplicas", 9, "workloads[0].scaling.minReplicas", "9 is above maxReplicas 8"),
    ("workloads[0].scaling.minReplicas", 0, "workloads[0].scaling.minReplicas", "must be >= 1"),
    ("workloads[2].scaling", {"minReplicas": 1, "maxReplicas": 2}, "workloads[2].scaling.metric", "is required to scale between 1 and 2 replicas"),
    ("workloads[0].scaling.metric.name", "avg_time_queue", "workloads[0].scaling.metric.name", "not served by prometheus-adapter (it serves avg_time_queue_us, bert_rps); declare it with metric.query; did you mean avg_time_queue_us?"),
    ("workloads[0].scaling.metric.name", "queue-time", "workloads[0].scaling.metric.name", "not a Prometheus metric name"),
    ("workloads[0].scaling.metric.type", "External", "workloads[0].scaling.metric.type", "the adapter serves avg_time_queue_us as a Pods metric"),
    ("workloads[0].scaling.metric.target", "0", "workloads[0].scaling.metric.target", "must be above 0"),
    ("workloads[0].scaling.metric.target", "fifty", "workloads[0].scaling.metric.target", "not a Kubernetes quantity"),
    ("workloads[0].scaling.metric.targetType", "Value", "workloads[0].scaling.metric.targetType", "a Pods metric is always averaged"),
    ("workloads[0].scaling.metric.selector", {"model": "bert"}, "workloads[0].scaling.metric.selector", "only applies to type External"),
    ("workloads[0].metrics", DELETE, "workloads[0].metrics", "is required for the Pods metric avg_time_queue_us"),
    ("workloads[0].scaling.metric.query", {"series": "nv_inference_request_success"}, "workloads[0].scaling.metric.name", "is the adapter's built-in metric"),
    ("workloads[1].scaling.metric.query.divideBy", "nv_inference_request_success", "workloads[1].scaling.metric.query.divideBy", "always gives 1"),
    ("workloads[1].scaling.metric.query", {"series": "x", "kind": "gauge", "window": "5m"}, "workloads[1].scaling.metric.query.window", "only applies to counters"),
    ("workloads[1].scaling.metric.query.window", "20s", "workloads[1].scaling.metric.query.window", "20s holds fewer than two scrapes at metrics.intervalSeconds 15"),
    ("workloads[1].scaling.metric.query.window", "1 minute", "workloads[1].scaling.metric.query.window", "not a Prometheus duration"),
    ("monitoring", {"prometheusAdapter": False}, "workloads[0].scaling.metric", "set monitoring.prometheusAdapter: true"),
    ("monitoring", {"prometheusAdapter": True, "enabled": False}, "workloads[1].scaling.metric", "needs prometheus-adapter"),
    # the container
    ("workloads[0].image", {"repository": "nvcr.io/nvidia/tritonserver"}, "workloads[0].image", "needs a tag or a digest"),
    ("workloads[0].image.tag", "24.08 py3", "workloads[0].image.tag", "not an image tag"),
    ("images", {"requireDigests": True, "tessera": {"repository": "ghcr.io/x/t", "digest": "sha256:" + "0f1e2d3c4b5a6978" * 3 + "a1b2c3d4e5f60718"}}, "workloads[0].image.digest", "is required because images.requireDigests is true"),
    ("workloads[0].name", "9triton", "workloads[0].name", "must start with a letter"),
    ("workloads[0].name", "Triton", "workloads[0].name", "not a DNS label"),
    ("workloads[1].name", "triton-mig", "workloads[1].name", "duplicate workload 'triton-mig' in namespace inference (also workloads[0])"),
    ("workloads[0].namespace", "tessera-system", "workloads[0].namespace", "Tessera's own namespace"),
    ("workloads[0].namespace", "kube-system", "workloads[0].namespace", "belongs to Kubernetes itself"),
    ("workloads[0].ports", [{"name": "http", "port": 8000}, {"name": "http", "port": 8002}], "workloads[0].ports[1].name", "duplicate port name 'http' (also ports[0])"),
    ("workloads[0].ports", [{"name": "http", "port": 8000}, {"name": "metrics", "port": 8000}], "workloads[0].ports[1].port", "duplicate port number '8000'"),
    ("workloads[0].ports[0].name", "http--x", "workloads[0].ports[0].name", "not a port name"),
    ("workloads[0].ports[0].name", "8000", "workloads[0].ports[0].name", "at least one letter"),
    ("workloads[0].ports[0].port", 70000, "workloads[0].ports[0].port", "must be <= 65535"),
    ("workloads[0].readinessProbe.port", "grpc", "workloads[0].readinessProbe.port", "'grpc' is not one of the workload's ports (http, metrics)"),
    ("workloads[0].metrics.port", "prom", "workloads[0].metrics.port", "'prom' is not one of the workload's ports"),
    ("workloads[0].readinessProbe.path", "v2/health", "workloads[0].readinessProbe.path", "not an HTTP path"),
    ("workloads[0].env", [{"name": "A"}], "workloads[0].env[0]", "set exactly one of value, secret, configMap (got none)"),
    ("workloads[0].env", [{"name": "A", "value": "1", "secret": {"name": "s", "key": "k"}}], "workloads[0].env[0]", "(got value, secret)"),
    ("workloads[0].env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "workloads[0].env[1].name", "duplicate variable 'A'"),
    ("workloads[0].env", [{"name": "1A", "value": "1"}], "workloads[0].env[0].name", "not an environment variable name"),
    ("workloads[0].volumes", [{"name": "models", "mountPath": "/models"}], "workloads[0].volumes[0]", "set exactly one of claimName, configMap"),
    ("workloads[0].volumes", [{"name": "m", "mountPath": "models", "claimName": "c"}], "workloads[0].volumes[0].mountPath", "should match pattern"),
    ("workloads[0].resources", {"cpuRequest": "4", "memoryRequest": "1Gi", "cpuLimit": "2", "memoryLimit": "512Mi"}, "workloads[0].resources.cpuRequest", "4 is above cpuLimit 2"),
    ("workloads[0].resources", {"cpuRequest": "1", "memoryRequest": "2Gi", "cpuLimit": "2", "memoryLimit": "1500Mi"}, "workloads[0].resources.memoryRequest", "2Gi is above memoryLimit 1500Mi"),
    ("workloads[0].runAsUser", 0, "workloads[0].runAsUser", "must be >= 1"),
    ("workloads[0].replicas", 3, "workloads[0].replicas", "unknown key"),
]


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_mapping(data)
    return [(p.path, p.message) for p in caught.value.problems]


def test_the_base_is_valid() -> None:
    config = from_pulumi_mapping(WL_BASE)
    assert [w.name for w in config.workloads] == ["triton-mig", "bert", "whole", "sliced"]


@pytest.mark.parametrize(("path", "value", "where", "fragment"), BAD, ids=[f"{c[0]}={c[1]!r}"[:80] for c in BAD])
def test_bad_workload_is_reported_at_its_path(path: str, value: Any, where: str, fragment: str) -> None:
    problems = _problems(edit(WL_BASE, path, value))
    matching = [message for p, message in problems if p == where]
    assert matching, f"no problem at {where}; got {problems}"
    assert any(fragment in message for message in matching), f"{fragment!r} not in {matching}"


def test_quota_is_reported_once_at_the_workload_that_crosses_it() -> None:
    two = edit(WL_BASE, "workloads", [WL_BASE["workloads"][1], {**WL_BASE["workloads"][1], "name": "bert-2", "scaling": {"minReplicas": 1, "maxReplicas": 1}}])
    problems = _problems(edit(two, "quotas[0].gpuCore", 420))
    assert problems == [(
        "workloads[1].scaling.maxReplicas",
        "namespace inference would use 450 tessera.dev/gpu-core at maxReplicas (workloads[0] 8 x 50 + workloads[1] 1 x 50), above its quota of 420 (quotas[0])",
    )]


def test_two_workloads_may_share_a_declared_metric_only_if_they_declare_it_alike() -> None:
    bert = copy.deepcopy(WL_BASE["workloads"][1])
    second = copy.deepcopy(bert) | {"name": "bert-2"}
    second["scaling"]["maxReplicas"] = 4
    alike = edit(WL_BASE, "workloads", [bert, second])
    assert from_pulumi_mapping(edit(alike, "quotas[0].gpuCore", 600)).workloads[1].scaling.metric is not None
    other = copy.deepcopy(alike)
    other["workloads"][1]["scaling"]["metric"]["query"] = {"series": "nv_inference_exec_count"}
    assert ("workloads[1].scaling.metric.name", "workloads[0] declares bert_rps differently; the adapter serves one metric per name") in _problems(
        edit(other, "quotas[0].gpuCore", 600)
    )


@pytest.mark.parametrize(
    ("pool", "gpu", "expected"),
    [
        ("shared", {"core": 50, "memoryMiB": 4096}, {"tessera.dev/gpu-core": 50, "tessera.dev/gpu-memory": 4096}),
        ("shared", {"core": 200}, {"tessera.dev/gpu-core": 200}),
        ("mig", {"migProfile": "1g.5gb"}, {"nvidia.com/mig-1g.5gb": 1}),
        ("mig", {"migProfile": "3g.20gb"}, {"nvidia.com/mig-3g.20gb": 1}),
        ("t4", {"gpus": 1}, {"nvidia.com/gpu": 1}),
        ("ts", {"gpus": 1}, {"nvidia.com/gpu": 1}),
    ],
)
def test_a_replica_asks_for_what_the_pools_device_plugin_advertises(pool: str, gpu: dict[str, Any], expected: dict[str, int]) -> None:
    one = edit(WL_BASE, "workloads[3].scaling", {"minReplicas": 1, "maxReplicas": 1})
    config = from_pulumi_mapping(edit(edit(one, "workloads[3].pool", pool), "workloads[3].gpu", gpu))
    strategy = pools_mig_strategy(config.node_pools)
    request = replica_request(config.workloads[3].gpu, config.pool(pool), strategy)
    assert request == expected
    assert set(request) <= set(node_capacity(config.pool(pool), strategy))


def test_renamed_time_slicing_is_asked_for_as_dot_shared() -> None:
    renamed = edit(WL_BASE, "nodePools[3].timeSlicing", {"replicas": 4, "renameByDefault": True})
    config = from_pulumi_mapping(renamed)
    ts = config.pool("ts")
    assert node_capacity(ts, "mixed") == {"nvidia.com/gpu.shared": 4}
    assert replica_request(config.workloads[3].gpu, ts, "mixed") == {"nvidia.com/gpu.shared": 1}
    renamed_mig = edit(WL_BASE, "nodePools[2].timeSlicing", {"replicas": {"nvidia.com/mig-1g.5gb": 4}, "renameByDefault": True})
    # the quota must name what the pool advertises now
    assert 'quotas[0].resources["nvidia.com/mig-1g.5gb"]' in [p for p, _ in _problems(renamed_mig)]
    mig = from_pulumi_mapping(edit(renamed_mig, "quotas[0].resources", {"nvidia.com/mig-1g.5gb.shared": 8}))
    assert replica_request(mig.workloads[0].gpu, mig.pool("mig"), "mixed") == {"nvidia.com/mig-1g.5gb.shared": 1}
    # only the time-sliced profile is renamed; the others are advertised once, under their own name
    assert node_capacity(mig.pool("mig"), "mixed") == {"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-1g.5gb.shared": 8}
    assert _problems(edit(renamed, "workloads[3].gpu.gpus", 5)) == [("workloads[3].gpu.gpus", "5 is more than a node of pool ts offers (4)")]


def test_single_strategy_slices_are_nvidia_gpu() -> None:
    single = edit(edit(edit(WL_BASE, "nodePools[2].mig", {"strategy": "single", "profile": "all-1g.5gb"}), "nodePools[2].timeSlicing", DELETE), "nodePools[2].repartition", [])
    config = from_pulumi_mapping(edit(edit(single, "quotas", []), "workloads[0].scaling.maxReplicas", 7))  # all-1g.5gb: 7 per A100
    assert replica_request(config.workloads[0].gpu, config.pool("mig"), pools_mig_strategy(config.node_pools)) == {"nvidia.com/gpu": 1}


def test_plan_shows_each_workload_against_its_pool() -> None:
    plan = plan_stack(from_pulumi_mapping(WL_BASE))
    mig, bert, whole, sliced = plan.workloads
    assert (mig.pool, mig.pool_kind, mig.per_replica, mig.at_max, mig.pool_capacity) == ("mig", "mig", {"nvidia.com/mig-1g.5gb": 1}, {"nvidia.com/mig-1g.5gb": 8}, {"nvidia.com/mig-1g.5gb": 8})
    assert mig.scaling == "HPA on avg_time_queue_us (Pods, adapter built-in rule), target 50 per replica (average)"
    # the mig pool's night layout (all-7g.40gb) has no 1g.5gb slice
    assert any("layout night (0 20 * * 1-5) offers no 1g.5gb slice" in note for note in mig.notes)
    assert bert.at_max == {"tessera.dev/gpu-core": 400, "tessera.dev/gpu-memory": 32768} and bert.pool_capacity == {"tessera.dev/gpu-core": 400, "tessera.dev/gpu-memory": 65536}
    assert (whole.scaling, whole.min_replicas, whole.max_replicas) == ("fixed at 2", 2, 2)
    assert sliced.pool_capacity == {"nvidia.com/gpu": 4}
    assert plan.to_json()["workloads"][0]["atMaxReplicas"] == {"nvidia.com/mig-1g.5gb": 8}


def test_plan_notes_a_pool_that_its_workloads_overfill_together() -> None:
    two = edit(WL_BASE, "workloads[3]", {**WL_BASE["workloads"][2], "name": "whole-2"})  # t4 holds 2 GPUs at maxSize; 2 + 2 asked
    plan = plan_stack(from_pulumi_mapping(two))
    assert plan.workloads[3].notes == ("all workloads on pool t4 at maxReplicas need 4 nvidia.com/gpu, more than its 2",)


@pytest.mark.parametrize(("text", "value"), [("500m", 0.5), ("2", 2.0), ("2Gi", 2.0 * 2**30), ("1.5k", 1500.0)])
def test_quantities(text: str, value: float) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("1m30s", 90), ("2h", 7200), ("500ms", 0.5)])
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 2000), st.sampled_from(["", "x", "50", "0", "1g.5gb", "Pods", "External", "http", "mig", "shared", "/x", "1m"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.sampled_from(["name", "port", "core", "query", "series", "x"]), inner, max_size=2)), max_leaves=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=VALUES)
def test_any_workload_edit_validates_or_gives_problems(data: st.DataObject, value: Any) -> None:
    """Never another exception, and a valid result plans and builds."""
    mutated = copy.deepcopy(WL_BASE)
    path = data.draw(st.sampled_from(value_paths(mutated["workloads"], ("workloads",))))
    node: Any = mutated
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    try:
        config = from_pulumi_mapping(mutated)
    except ConfigError as error:
        assert error.problems and all(p.path or p.message for p in error.problems)
        return
    assert isinstance(config, StackConfig)
    plan_stack(config)
    from tessera.manifests.stack import build_stack

    build_stack(config)


@pytest.mark.parametrize(
    ("path", "value"),
    [("nodePools[3].timeSlicing.replicas", {"nvidia.com/mig-1g.5gb": 2}), ("nodePools[2].mig.profile", "all-9g"), ("nodePools[3].instanceType", "NOPE.1")],
)
def test_a_broken_pool_is_reported_once_not_again_through_its_workloads(path: str, value: Any) -> None:
    problems = _problems(edit(WL_BASE, path, value))
    assert problems and not [p for p, _ in problems if p.startswith("workloads")], problems
