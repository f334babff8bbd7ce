"""Inference workloads (`workloads:`): the objects they become, where their pods land, the autoscaler
and the prometheus-adapter rule it reads, checked with the 1.30 schemas, Tessera's own webhook and promtool."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml
from manifests_helpers import ROOT

from tessera.model import StackConfig, load_stack_file
from tessera.model.capacity import node_capacity, pools_mig_strategy
from tessera.model.contract import SCHEDULER_NAME
from tessera.model.labels_taints import pool_taints
from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera.manifests.objects import KubeObject
from tessera.manifests.prometheus_adapter import metric_rule, prometheus_adapter_values, queue_time_rule
from tessera.manifests.render import component_file, render_files
from tessera.manifests.stack import build_stack
from tessera.manifests.workloads import TMP_VOLUME
from tessera.model.workloads import ADAPTER_METRICS, QUEUE_TIME_METRIC
from tessera.webhook.admission import mutate_pod
from tessera.webhook.settings import WebhookSettings

sys.path.insert(0, str(ROOT / "tests" / "tessera" / "monitoring"))
from promtool_helpers import run as promtool_run  # noqa: E402

EXAMPLE: Final = ROOT / "examples" / "triton" / "Pulumi.triton.yaml"
PROD: Final = ROOT / "stacks" / "Pulumi.prod.yaml"
# prometheus-operator's PodMonitor CRD (monitoring.coreos.com_podmonitors.yaml, v0.79.2 in kube-prometheus-stack
# 67.8.0, unchanged in later versions for these fields): the keys of the objects we write, per level
POD_MONITOR_SPEC: Final = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels", "sampleLimit"}
POD_METRICS_ENDPOINT: Final = {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings", "metricRelabelings"}


def _document(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _config(path: Path = EXAMPLE, **changes: Any) -> StackConfig:
    """A stack file with some `tessera:` keys replaced."""
    document = _document(path)
    document["config"].update({f"tessera:{key}": value for key, value in changes.items()})
    return from_pulumi_mapping(stack_mapping(document))


def _workloads(config: StackConfig) -> list[KubeObject]:
    return build_stack(config).get("workloads", [])


def _find(objects: list[KubeObject], kind: str, name: str) -> KubeObject:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _kinds(objects: list[KubeObject], name: str) -> list[str]:
    return [o["kind"] for o in objects if o["metadata"]["name"] == name]


@pytest.fixture(scope="module")
def example() -> StackConfig:
    return load_stack_file(EXAMPLE)


def test_each_workload_becomes_its_objects_in_apply_order(example: StackConfig) -> None:
    objects = _workloads(example)
    for name in ("tritonserver", "triton-bert"):
        assert _kinds(objects, name) == [
            "ServiceAccount", "Service", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "PodMonitor",
        ]
    assert {o["metadata"]["namespace"] for o in objects} == {"inference"}
    # the namespace is created with Tessera's own, before the quota that lives in it
    platform = build_stack(example)["platform"]
    kinds = [(o["kind"], o["metadata"].get("namespace", o["metadata"]["name"])) for o in platform]
    assert kinds.index(("Namespace", "inference")) < kinds.index(("ResourceQuota", "inference"))
    namespace = _find(platform, "Namespace", "inference")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("path", [EXAMPLE, PROD], ids=["example", "prod"])
def test_every_workload_object_validates_strictly_against_1_30(path: Path) -> None:
    config = load_stack_file(path)
    objects = _workloads(config) + [o for o in build_stack(config)["platform"] if o["kind"] == "Namespace"]
    assert objects
    for o in objects:
        if o["kind"] == "PodMonitor":
            assert set(o["spec"]) <= POD_MONITOR_SPEC
            assert all(set(e) <= POD_METRICS_ENDPOINT for e in o["spec"]["podMetricsEndpoints"])
            continue
        kubernetes_validate.validate(o, "1.30.0", strict=True)


def test_pods_land_on_their_pool_as_tessera_places_them(example: StackConfig) -> None:
    strategy = pools_mig_strategy(example.node_pools)
    for w in example.workloads:
        pool = example.pool(w.pool)
        spec = _find(_workloads(example), "Deployment", w.name)["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"tessera.dev/pool": pool.name}
        taints = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool_taints(pool)]  # type: ignore[arg-type]
        assert spec["tolerations"] == taints
        assert spec.get("schedulerName") == (SCHEDULER_NAME if pool.kind == "shared" else None)
        (container,) = spec["containers"]
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        gpu = {k: v for k, v in limits.items() if k not in ("cpu", "memory")}
        assert gpu and all(requests[k] == v for k, v in gpu.items()), "extended resources: requests equal limits"
        assert set(gpu) <= set(node_capacity(pool, strategy)), f"{w.name} asks for what pool {pool.name}'s device plugin never advertises"
    bert = _find(_workloads(example), "Deployment", "triton-bert")["spec"]["template"]
    assert bert["metadata"]["annotations"] == {"tessera.dev/app-class": "online"} and bert["spec"]["priorityClassName"] == "tessera-online"
    limits = bert["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["tessera.dev/gpu-core"], limits["tessera.dev/gpu-memory"]) == ("50", "6144")
    mig = _find(_workloads(example), "Deployment", "tritonserver")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert mig["nvidia.com/mig-1g.5gb"] == "1"


def test_tesseras_webhook_admits_the_pods_as_rendered(example: StackConfig) -> None:
    """The webhook only adds the allocation env to shared-pool pods: scheduler name and toleration are already right."""
    settings = WebhookSettings(shared_pools=frozenset(p.name for p in example.pools_of_kind("shared")))
    for w in example.workloads:
        template = _find(_workloads(example), "Deployment", w.name)["spec"]["template"]
        pod = {"metadata": {**template["metadata"], "namespace": w.namespace}, "spec": template["spec"]}
        mutation = mutate_pod(pod, request_uid="0f1e2d3c-aaaa-bbbb-cccc-000000000001", settings=settings, namespace_opted_in=False)
        paths = [op["path"] for op in mutation.patch]
        assert not any(p.startswith(("/spec/schedulerName", "/spec/tolerations")) for p in paths), paths
        assert mutation.warnings == ()
        if example.pool(w.pool).kind == "shared":
            assert any(p.endswith("/env") or "/env/" in p for p in paths), "the allocation env is injected"
        else:
            assert paths == []


def test_pods_meet_pod_security_restricted(example: StackConfig) -> None:
    for w in example.workloads:
        spec = _find(_workloads(example), "Deployment", w.name)["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["serviceAccountName"] == w.name and spec["automountServiceAccountToken"] is False
        (container,) = spec["containers"]
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"] is True
        assert {"name": TMP_VOLUME, "mountPath": "/tmp"} in container["volumeMounts"]
        assert all(set(v) - {"name"} <= {"persistentVolumeClaim", "configMap", "emptyDir"} for v in spec["volumes"])
    policy = _find(_workloads(example), "NetworkPolicy", "tritonserver")["spec"]
    assert policy["ingress"] == [{"ports": [{"port": 8000, "protocol": "TCP"}, {"port": 8001, "protocol": "TCP"}, {"port": 8002, "protocol": "TCP"}]}]


def test_the_hpa_owns_the_replica_count_and_asks_for_exactly_what_the_adapter_serves(example: StackConfig) -> None:
    values = prometheus_adapter_values(example)
    custom = {r["name"]["as"]: r for r in values["rules"]["custom"]}
    external = {r["name"]["as"]: r for r in values["rules"]["external"]}
    for w in example.workloads:
        deployment = _find(_workloads(example), "Deployment", w.name)
        assert "replicas" not in deployment["spec"], "an apply must not reset what the HPA scaled to"
        hpa = _find(_workloads(example), "HorizontalPodAutoscaler", w.name)["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name}
        assert (hpa["minReplicas"], hpa["maxReplicas"]) == (w.scaling.min_replicas, w.scaling.max_replicas)
        (metric,) = hpa["metrics"]
        if metric["type"] == "Pods":
            assert metric["pods"]["metric"]["name"] in custom
            assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "50"}
        else:
            name = metric["external"]["metric"]["name"]
            assert external[name] == metric_rule(name, "External", w.scaling.metric.query)  # type: ignore[union-attr,arg-type]
            assert metric["external"]["metric"]["selector"] == {"matchLabels": {"container": "triton-bert"}}
            assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "30"}
    # the built-in rule is one rule, however many workloads use it
    assert list(custom) == [QUEUE_TIME_METRIC] and custom[QUEUE_TIME_METRIC] == queue_time_rule()


def test_a_fixed_workload_has_replicas_and_no_hpa() -> None:
    document = _document(EXAMPLE)
    workloads = document["config"]["tessera:workloads"]
    workloads[1]["scaling"] = {"minReplicas": 3, "maxReplicas": 3}
    config = _config(workloads=workloads)
    objects = _workloads(config)
    assert _find(objects, "Deployment", "triton-bert")["spec"]["replicas"] == 3
    assert "HorizontalPodAutoscaler" not in _kinds(objects, "triton-bert")
    assert "external" not in prometheus_adapter_values(config)["rules"], "no External metric left: external.metrics.k8s.io stays unregistered"


@pytest.mark.parametrize(
    ("monitoring", "pod_monitor", "annotations"),
    [
        ({"mode": "existing", "selectorLabels": {"release": "kps"}, "prometheusAdapter": True}, {"release": "kps"}, False),
        ({"mode": "none", "prometheusAdapter": True}, None, True),
    ],
    ids=["existing operator", "mode none"],
)
def test_scraping_follows_the_monitoring_mode(monitoring: dict[str, Any], pod_monitor: dict[str, str] | None, annotations: bool) -> None:
    objects = _workloads(_config(monitoring=monitoring))
    monitors = [o for o in objects if o["kind"] == "PodMonitor" and o["metadata"]["name"] == "tritonserver"]
    template = _find(objects, "Deployment", "tritonserver")["spec"]["template"]["metadata"]
    if pod_monitor is None:
        assert monitors == []
    else:
        (monitor,) = monitors
        assert pod_monitor.items() <= monitor["metadata"]["labels"].items()
        assert monitor["spec"]["selector"]["matchLabels"] == _find(objects, "Deployment", "tritonserver")["spec"]["selector"]["matchLabels"]
        assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    scrape = {k: v for k, v in template.get("annotations", {}).items() if k.startswith("prometheus.io/")}
    assert scrape == ({"prometheus.io/scrape": "true", "prometheus.io/port": "8002", "prometheus.io/path": "/metrics"} if annotations else {})


def test_render_writes_the_workloads_last_in_their_own_file(example: StackConfig) -> None:
    files = render_files(example, EXAMPLE.name)
    assert component_file("workloads") == "08-workloads.yaml" and sorted(f for f in files if f.endswith(".yaml") and "/" not in f)[-1] == "08-workloads.yaml"
    rendered = [d for d in yaml.safe_load_all(files["08-workloads.yaml"]) if d]
    assert rendered == _workloads(example)
    adapter = yaml.safe_load(files["prometheus-adapter/values.yaml"])
    assert [r["name"]["as"] for r in adapter["rules"]["external"]] == ["triton_bert_requests_per_second"]
    assert not any(f.startswith("08-") for f in render_files(load_stack_file(ROOT / "stacks" / "Pulumi.dev.yaml"), "Pulumi.dev.yaml"))


def _instantiate(rule: dict[str, Any], matchers: str, group_by: str) -> str:
    """The query prometheus-adapter sends for one request (its Go template, filled in)."""
    query: str = rule["metricsQuery"]
    return query.replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", group_by)


def test_adapter_rules_compute_what_the_hpa_expects_with_promtool(tmp_path: Path) -> None:
    """promtool evaluates the rules' queries over Triton-like counters: queue time per request per pod
    (Pods), requests per second over one workload's pods (External)."""
    queue = _instantiate(queue_time_rule(), 'namespace="inference",pod=~"tritonserver-a|tritonserver-b"', "pod")
    rps_rule = metric_rule("triton_bert_requests_per_second", "External", load_stack_file(EXAMPLE).workloads[1].scaling.metric.query)  # type: ignore[union-attr,arg-type]
    rps = _instantiate(rps_rule, 'namespace="inference",container="triton-bert"', "")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": [{"record": "q", "expr": queue}, {"record": "r", "expr": rps}]}]}))
    series = [
        # pod a: 60 requests and 6000 µs of queue time every 15 s (100 µs each); pod b: idle
        ('nv_inference_queue_duration_us{namespace="inference",pod="tritonserver-a",container="tritonserver"}', "0+6000x12"),
        ('nv_inference_request_success{namespace="inference",pod="tritonserver-a",container="tritonserver"}', "0+60x12"),
        ('nv_inference_queue_duration_us{namespace="inference",pod="tritonserver-b",container="tritonserver"}', "0+0x12"),
        ('nv_inference_request_success{namespace="inference",pod="tritonserver-b",container="tritonserver"}', "0+0x12"),
        # triton-bert: two pods, 3 and 5 requests per second; another namespace's series must not count
        ('nv_inference_request_success{namespace="inference",pod="bert-1",container="triton-bert"}', "0+45x12"),
        ('nv_inference_request_success{namespace="inference",pod="bert-2",container="triton-bert"}', "0+75x12"),
        ('nv_inference_request_success{namespace="other",pod="bert-9",container="triton-bert"}', "0+1500x12"),
    ]
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "promql_expr_test": [
                {"expr": queue, "eval_time": "2m", "exp_samples": [{"labels": '{pod="tritonserver-a"}', "value": 100}, {"labels": '{pod="tritonserver-b"}', "value": 0}]},
                {"expr": rps, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 8}]},
            ],
        }],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = promtool_run("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # the series queries are selectors promtool accepts too
    series_rules = [{"record": f"s{i}", "expr": r["seriesQuery"]} for i, r in enumerate([queue_time_rule(), rps_rule])]
    (tmp_path / "series.yaml").write_text(yaml.safe_dump({"groups": [{"name": "series", "rules": series_rules}]}))
    checked = promtool_run("check", "rules", "series.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_built_in_metric_is_declared_once_in_the_model() -> None:
    metric_type, query = ADAPTER_METRICS[QUEUE_TIME_METRIC]
    assert metric_rule(QUEUE_TIME_METRIC, metric_type, query) == queue_time_rule()
    assert (query.series, query.divide_by, query.window) == ("nv_inference_queue_duration_us", "nv_inference_request_success", "1m")
