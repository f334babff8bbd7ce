"""TesseraPlatform under Pulumi mocks: which ConfigGroups and Chart it declares, with which provider and values."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi.runtime
import pulumi_kubernetes as k8s
import pytest
import yaml
from pulumi.runtime.mocks import MockResourceArgs
from pulumi_program_mocks import RecordingMonitor, secret_value, start_mocks

from tessera.model import StackConfig, load_stack_file
from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera_pulumi.platform import TesseraPlatform
from tessera.manifests.objects import object_id
from tessera.model.contract import POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY
from tessera.manifests.stack import build_stack, gpu_operator_release, prometheus_adapter_release

ROOT = Path(__file__).resolve().parents[3]
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
CHART = "kubernetes:helm.sh/v4:Chart"
SECRET = "kubernetes:core/v1:Secret"
MUTATING_WEBHOOK_CONFIGURATION = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
PLATFORM = "tessera:index:TesseraPlatform"
K8S_PROVIDER = "pulumi:providers:kubernetes"


@dataclass
class Declared:
    resources: list[MockResourceArgs]
    monitor: RecordingMonitor

    def of_type(self, typ: str) -> list[MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, name: str) -> MockResourceArgs:
        return next(r for r in self.resources if r.name == name)

    def depends_on(self, name: str) -> set[str]:
        urns = self.monitor.deps[self.monitor.names[name]]
        by_urn = {urn: n for n, urn in self.monitor.names.items()}
        return {by_urn[u] for u in urns if u in by_urn}


# the engine's config values: prod's Grafana admin password (monitoring.kubePrometheusStack.grafana.adminPasswordSecret)
SECRETS: Final = {"tessera:grafanaAdminPassword": "test-only-password"}


def declare(config: StackConfig, secrets: dict[str, str] | None = None) -> Declared:
    mocks, monitor = start_mocks()

    @pulumi.runtime.test
    def run() -> None:
        provider = k8s.Provider("kubeconfig-provider", kubeconfig="apiVersion: v1\nkind: Config\n")
        TesseraPlatform("p", config, opts=pulumi.ResourceOptions(provider=provider), secrets=SECRETS if secrets is None else secrets)

    run()
    return Declared(list(mocks.resources), monitor)


def _stack(name: str) -> StackConfig:
    return load_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml")


@pytest.fixture(scope="module", params=sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def declared(request: pytest.FixtureRequest) -> tuple[StackConfig, Declared]:
    config = _stack(request.param)
    return config, declare(config)


def test_one_config_group_per_component_with_exactly_the_built_objects(declared: tuple[StackConfig, Declared]) -> None:
    config, d = declared
    built = build_stack(config)
    groups = {r.name.removeprefix("p-"): r for r in d.of_type(CONFIG_GROUP)}
    assert set(groups) == set(built)
    typed = [r.inputs for r in d.of_type(SECRET) + d.of_type(MUTATING_WEBHOOK_CONFIGURATION) if r.name != "p-grafana-admin"]
    for component, objects in built.items():
        declared_objects = groups[component].inputs["objs"] + (typed if component == "webhook" else [])
        # nothing lost or changed on the way into Pulumi (the typed ones field by field)
        assert sorted(declared_objects, key=object_id) == sorted(objects, key=object_id), component


def test_runtime_written_webhook_fields_are_ignored_by_pulumi(declared: tuple[StackConfig, Declared]) -> None:
    """The webhook fills its Secret's data and the caBundle; an update must not clear them."""
    config, d = declared
    secrets, configurations = [s for s in d.of_type(SECRET) if s.name == "p-webhook-tls"], d.of_type(MUTATING_WEBHOOK_CONFIGURATION)
    if "webhook" not in build_stack(config):
        assert secrets == [] and configurations == []
        return
    (secret,) = secrets
    (configuration,) = configurations
    assert secret.inputs["metadata"]["name"] == "tessera-webhook-tls" and "data" not in secret.inputs
    assert d.monitor.ignore_changes[secret.name] == ["data"]
    assert d.monitor.ignore_changes[configuration.name] == ["webhooks[*].clientConfig.caBundle"]
    assert all("caBundle" not in h["clientConfig"] for h in configuration.inputs["webhooks"])
    # the ConfigGroups keep no copy of either object (two owners would fight)
    kinds = {o["kind"] for g in d.of_type(CONFIG_GROUP) for o in g.inputs["objs"]}
    assert "MutatingWebhookConfiguration" not in kinds
    assert not any(o["kind"] == "Secret" for o in d.named("p-webhook").inputs["objs"])
    # Secret before the replicas that read it; the configuration once they are ready
    assert "p-webhook-tls" in d.depends_on("p-webhook")
    assert {"p-webhook", "p-platform"} <= d.depends_on(configuration.name)
    for typed in (secret, configuration):
        assert typed.provider is not None and typed.provider.startswith(d.monitor.names["kubeconfig-provider"])
        assert d.monitor.parents[d.monitor.names[typed.name]] == d.monitor.names["p"]


def test_no_other_resource_ignores_changes(declared: tuple[StackConfig, Declared]) -> None:
    _, d = declared
    ignoring = {n for n, paths in d.monitor.ignore_changes.items() if paths}
    assert ignoring <= {"p-webhook-tls", "p-webhook-configuration"}


def test_prometheus_adapter_chart_only_when_asked_with_the_queue_time_rule(declared: tuple[StackConfig, Declared]) -> None:
    config, d = declared
    adapters = [c for c in d.of_type(CHART) if c.name == "p-prometheus-adapter"]
    release = prometheus_adapter_release(config)
    if not (config.monitoring.enabled and config.monitoring.prometheus_adapter):
        assert release is None and adapters == []
        return
    assert release is not None
    (chart,) = adapters
    inputs = chart.inputs
    assert (inputs["chart"], inputs["version"]) == ("prometheus-adapter", config.monitoring.prometheus_adapter_chart_version)
    assert inputs["repositoryOpts"]["repo"] == config.monitoring.prometheus_adapter_chart_repository
    assert inputs["namespace"] == config.namespace  # Tessera's own namespace, created by "platform"
    assert inputs["values"] == release.values
    assert [r["name"]["as"] for r in inputs["values"]["rules"]["custom"]] == ["avg_time_queue_us"]
    assert "p-platform" in d.depends_on(chart.name)


def test_every_child_uses_the_kubeconfig_provider(declared: tuple[StackConfig, Declared]) -> None:
    _, d = declared
    provider = d.named("kubeconfig-provider")
    assert provider.typ == K8S_PROVIDER
    children = d.of_type(CONFIG_GROUP) + d.of_type(CHART)
    assert children
    for child in children:
        assert child.provider is not None and child.provider.startswith(d.monitor.names["kubeconfig-provider"]), child.name
        assert d.monitor.parents[d.monitor.names[child.name]] == d.monitor.names["p"]
    assert d.named("p").typ == PLATFORM


def test_gpu_operator_chart_only_when_a_pool_needs_it_with_the_stack_values(declared: tuple[StackConfig, Declared]) -> None:
    config, d = declared
    charts = [c for c in d.of_type(CHART) if c.name == "p-gpu-operator"]
    release = gpu_operator_release(config)
    if release is None:
        assert charts == []
        assert all(p.kind == "shared" for p in config.node_pools) or not config.gpu_operator.enabled
        return
    (chart,) = charts
    inputs = chart.inputs
    assert inputs["chart"] == "gpu-operator"
    assert inputs["version"] == config.gpu_operator.chart_version
    assert inputs["namespace"] == config.gpu_operator.namespace
    assert inputs["repositoryOpts"]["repo"] == config.gpu_operator.chart_repository
    assert inputs["values"] == release.values
    assert inputs["values"]["driver"]["enabled"] is config.gpu_operator.install_driver  # TKE installs the driver
    assert inputs["values"]["devicePlugin"]["enabled"] is True
    # the chart waits for the ConfigMaps its values name
    assert {"p-platform", "p-nvidia"} <= d.depends_on(chart.name)


def test_prod_declares_the_gpu_operator_and_prometheus_adapter_charts() -> None:
    d = declare(_stack("prod"))
    assert sorted(c.name for c in d.of_type(CHART)) == ["p-gpu-operator", "p-kube-prometheus-stack", "p-prometheus-adapter"]


def test_groups_wait_for_the_platform_namespace(declared: tuple[StackConfig, Declared]) -> None:
    _, d = declared
    for group in d.of_type(CONFIG_GROUP):
        if group.name != "p-platform":
            assert "p-platform" in d.depends_on(group.name), group.name


def test_pools_configmap_carries_each_shared_pool_policy() -> None:
    import json

    config = _stack("prod")
    d = declare(config)
    platform_objs = d.named("p-platform").inputs["objs"]
    cm = next(o for o in platform_objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == POOLS_CONFIGMAP)
    pools = json.loads(cm["data"][POOLS_CONFIGMAP_KEY])
    expected = {p.name: p.sharing.policy for p in config.node_pools if p.kind == "shared"}  # type: ignore[attr-defined]
    assert {name: body["policy"] for name, body in pools.items()} == expected


def _objects_in(d: Declared, group: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = d.named(group).inputs["objs"]
    return found


def test_each_pool_gets_what_its_kind_needs_under_pulumi(declared: tuple[StackConfig, Declared]) -> None:
    import json

    from tessera.model.contract import device_plugin_config_name, mig_config_name
    from tessera.manifests.nvidia import DEVICE_PLUGIN_CONFIGMAP, MIG_PARTED_CONFIGMAP

    config, d = declared
    groups = {r.name for r in d.of_type(CONFIG_GROUP)}
    shared = [p for p in config.node_pools if p.kind == "shared"]
    if shared:
        assert {"p-extender", "p-scheduler", "p-node"} <= groups
        cm = next(o for o in _objects_in(d, "p-platform") if o["kind"] == "ConfigMap" and o["metadata"]["name"] == POOLS_CONFIGMAP)
        pools = json.loads(cm["data"][POOLS_CONFIGMAP_KEY])
        for pool in shared:
            sharing = pool.sharing  # type: ignore[attr-defined]
            assert (pools[pool.name]["policy"], pools[pool.name]["placement"]) == (sharing.policy, sharing.placement)
    else:
        assert not {"p-extender", "p-scheduler", "p-node"} & groups
    per_pool_plugin = [p for p in config.node_pools if p.kind in ("mig", "timeslice")]
    if per_pool_plugin:
        nvidia_objs = _objects_in(d, "p-nvidia")
        plugin_cm = next(o for o in nvidia_objs if o["metadata"]["name"] == DEVICE_PLUGIN_CONFIGMAP)
        assert {device_plugin_config_name(p.name) for p in per_pool_plugin} <= set(plugin_cm["data"])
        mig_pools = [p for p in per_pool_plugin if p.kind == "mig"]
        if mig_pools:
            parted = next(o for o in nvidia_objs if o["metadata"]["name"] == MIG_PARTED_CONFIGMAP)
            text = "\n".join(parted["data"].values())
            assert all(f"{mig_config_name(p.name)}:" in text for p in mig_pools)
            chart = d.named("p-gpu-operator")
            assert chart.inputs["values"]["migManager"]["enabled"] is True


# --- monitoring: kube-prometheus-stack, Grafana's admin Secret, the monitoring group -------------


def test_kube_prometheus_stack_chart_installs_with_its_admin_secret_before_gpu_operator() -> None:
    config = _stack("prod")
    d = declare(config)
    kps = config.monitoring.kube_prometheus_stack
    chart = d.named("p-kube-prometheus-stack")
    assert (chart.inputs["chart"], chart.inputs["version"], chart.inputs["namespace"]) == ("kube-prometheus-stack", kps.chart_version, kps.namespace)
    assert chart.inputs["name"] == kps.release_name
    assert chart.inputs["values"]["grafana"]["admin"]["existingSecret"] == "tessera-grafana-admin"
    secret = d.named("p-grafana-admin")
    assert secret.inputs["metadata"]["namespace"] == kps.namespace
    assert secret_value(secret.inputs["stringData"]) == {"admin-user": "admin", "admin-password": "test-only-password"}
    # the namespace (platform) and the Secret exist before the chart; gpu-operator's dcgm-exporter
    # ServiceMonitor needs the chart's CRDs; the monitoring objects need CRDs and targets
    assert {"p-platform", "p-grafana-admin"} <= d.depends_on("p-kube-prometheus-stack")
    assert "p-kube-prometheus-stack" in d.depends_on("p-gpu-operator")
    assert {"p-kube-prometheus-stack", "p-extender", "p-node", "p-webhook", "p-gpu-operator"} <= d.depends_on("p-monitoring")
    assert any(o["kind"] == "Namespace" and o["metadata"]["name"] == kps.namespace for o in _objects_in(d, "p-platform"))


def test_a_missing_grafana_password_stops_the_program_with_the_command_that_sets_it() -> None:
    with pytest.raises(Exception, match=r"tessera:grafanaAdminPassword is not set; run pulumi config set --secret tessera:grafanaAdminPassword"):
        declare(_stack("prod"), secrets={})


@pytest.mark.parametrize("mode", ["existing", "none"])
def test_no_chart_and_no_admin_secret_without_mode_kube_prometheus_stack(mode: str) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    monitoring = document["config"]["tessera:monitoring"]
    monitoring["mode"] = mode
    del monitoring["kubePrometheusStack"]
    if mode == "none":
        del monitoring["alerts"]
    config = from_pulumi_mapping(stack_mapping(document))
    d = declare(config, secrets={})
    assert "p-kube-prometheus-stack" not in {c.name for c in d.of_type(CHART)}
    assert "p-grafana-admin" not in {s.name for s in d.of_type(SECRET)}
    kinds = {o["kind"] for o in _objects_in(d, "p-monitoring")} if mode == "existing" else set()
    assert kinds == ({"ServiceMonitor", "PrometheusRule", "ConfigMap"} if mode == "existing" else set())
    assert ("p-monitoring" in {g.name for g in d.of_type(CONFIG_GROUP)}) is (mode == "existing")


# --- workloads: the stack's inference services, last -----------------------------------------------


def _example(name: str) -> StackConfig:
    return load_stack_file(ROOT / "examples" / name)


@pytest.mark.parametrize("stack", ["prod", "triton/Pulumi.triton.yaml"])
def test_workloads_are_declared_after_everything_their_pods_and_autoscaler_need(stack: str) -> None:
    config = _stack(stack) if "/" not in stack else _example(stack)
    d = declare(config)
    group = d.named("p-workloads")
    objects = group.inputs["objs"]
    assert sorted(objects, key=object_id) == sorted(build_stack(config)["workloads"], key=object_id)
    for w in config.workloads:
        kinds = {o["kind"] for o in objects if o["metadata"]["name"] == w.name and o["metadata"]["namespace"] == w.namespace}
        assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodMonitor"} <= kinds, w.name
    assert group.provider is not None and group.provider.startswith(d.monitor.names["kubeconfig-provider"])
    # a GPU pod admitted before the webhook's configuration would miss its allocation env; the HPA
    # reads prometheus-adapter; the PodMonitor needs prometheus-operator's CRDs
    wanted = {"p-platform", "p-scheduler", "p-extender", "p-node", "p-webhook", "p-webhook-configuration", "p-prometheus-adapter", "p-gpu-operator", "p-monitoring"}
    if config.monitoring.mode == "kube-prometheus-stack":
        wanted.add("p-kube-prometheus-stack")
    assert wanted <= d.depends_on("p-workloads")
