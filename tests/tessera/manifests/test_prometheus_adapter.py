"""prometheus-adapter: the release a stack asks for, its queue-time rule, and how render writes it."""
from __future__ import annotations

import re
import pytest
import yaml
from manifests_helpers import ROOT, build

from tessera.model import StackConfig, load_stack_file
from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera.manifests.prometheus_adapter import QUEUE_METRIC, prometheus_adapter_chart, queue_time_rule, split_prometheus_url
from tessera.manifests.render import render_files
from tessera.manifests.stack import helm_releases, prometheus_adapter_release


def _with_monitoring(**monitoring: object) -> StackConfig:
    """The prod stack with some monitoring keys (snake_case) changed."""
    config = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    return config.model_copy(update={"monitoring": config.monitoring.model_copy(update=monitoring)})


@pytest.mark.parametrize(
    ("url", "values"),
    [
        ("http://prometheus-operated.monitoring.svc:9090", {"url": "http://prometheus-operated.monitoring.svc", "port": 9090, "path": ""}),
        ("https://thanos.example.com/prometheus/", {"url": "https://thanos.example.com", "port": 443, "path": "/prometheus"}),
        ("http://vmselect.vm.svc:8481/select/0/prometheus", {"url": "http://vmselect.vm.svc", "port": 8481, "path": "/select/0/prometheus"}),
        ("http://prometheus.monitoring", {"url": "http://prometheus.monitoring", "port": 80, "path": ""}),
    ],
)
def test_prometheus_url_becomes_the_charts_url_port_and_path(url: str, values: dict[str, object]) -> None:
    assert split_prometheus_url(url) == values


@pytest.mark.parametrize(
    ("monitoring", "installed"),
    [({"prometheus_adapter": True}, True), ({"prometheus_adapter": False}, False), ({"prometheus_adapter": True, "enabled": False}, False)],
)
def test_installed_only_when_monitoring_asks_for_it(monitoring: dict[str, bool], installed: bool) -> None:
    config = _with_monitoring(**monitoring)
    assert (prometheus_adapter_chart(config) is not None) is installed
    assert ("prometheus-adapter" in helm_releases(config)) is installed
    assert any(f.startswith("prometheus-adapter/") for f in render_files(config, "Pulumi.x.yaml")) is installed


def test_release_uses_the_configured_prometheus_version_and_tessera_namespace() -> None:
    config = _with_monitoring(
        prometheus_adapter=True, prometheus_url="http://kube-prometheus-stack-prometheus.monitoring.svc:9090", prometheus_adapter_chart_version="4.10.0"
    )
    release = prometheus_adapter_release(config)
    assert release is not None
    assert (release.chart, release.version, release.namespace) == ("prometheus-adapter", "4.10.0", config.namespace)
    assert release.values["prometheus"]["url"] == "http://kube-prometheus-stack-prometheus.monitoring.svc"
    # only our rule: no generic rules, no resource metrics (metrics.k8s.io stays metrics-server's)
    assert release.values["rules"] == {"default": False, "custom": [queue_time_rule()]}
    # prod runs kube-prometheus-stack, installed first (its CRDs before gpu-operator's ServiceMonitor)
    assert list(helm_releases(config)) == ["kube-prometheus-stack", "gpu-operator", "prometheus-adapter"]


@pytest.mark.parametrize(("namespace", "url"), [("monitoring", "http://prometheus-operated.monitoring.svc"), ("observability", "http://prometheus-operated.observability.svc")])
def test_with_kube_prometheus_stack_the_adapter_queries_its_prometheus_unless_told_otherwise(namespace: str, url: str) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    document["config"]["tessera:monitoring"]["kubePrometheusStack"]["namespace"] = namespace
    config = from_pulumi_mapping(stack_mapping(document))
    release = prometheus_adapter_release(config)
    assert release is not None and release.values["prometheus"] == {"url": url, "port": 9090, "path": ""}


def test_queue_time_rule_divides_queue_time_rate_by_success_rate_per_pod() -> None:
    rule = queue_time_rule()
    assert rule["name"]["as"] == QUEUE_METRIC == "avg_time_queue_us"
    assert re.fullmatch(rule["name"]["matches"], "nv_inference_queue_duration_us")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    query = rule["metricsQuery"]
    numerator, denominator = query.split(" / ", 1)
    assert numerator.startswith("sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[")
    assert "nv_inference_request_success{<<.LabelMatchers>>}" in denominator and denominator.startswith("clamp_min(")
    assert query.count("by (<<.GroupBy>>)") == 2  # both sides per pod, so the division matches labels


def test_render_writes_values_and_release_beside_gpu_operator() -> None:
    built = build("prod")
    files = render_files(built.config, built.path.name)
    release = prometheus_adapter_release(built.config)
    assert release is not None
    values = yaml.safe_load(files["prometheus-adapter/values.yaml"])
    assert values == release.values
    description = yaml.safe_load(files["prometheus-adapter/release.yaml"])
    assert (description["chart"], description["version"], description["namespace"]) == ("prometheus-adapter", release.version, built.config.namespace)
    assert "--values prometheus-adapter/values.yaml" in description["install"]
    assert description["repository"] == "https://prometheus-community.github.io/helm-charts"
    # the namespace it goes into is one Tessera creates
    namespaces = [o["metadata"]["name"] for o in built.components["platform"] if o["kind"] == "Namespace"]
    assert release.namespace in namespaces


def test_stack_files_default_the_adapter_off_unless_asked() -> None:
    for name in ("dev", "local"):
        config = load_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml")
        assert prometheus_adapter_release(config) is None
