"""Rendered workloads run real commands, on the right nodes only."""
from __future__ import annotations

import pytest
from manifests_helpers import BuiltStack

from tessera.model import labels_taints
from tessera.cli.main import build_parser
from tessera.model.contract import LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_POOL_KIND, TAINT_GPU
from tessera.manifests import extender, node


def _containers(stack: BuiltStack, kind: str, name: str) -> dict[str, dict[str, object]]:
    spec = stack.find(kind, name)["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def _shared(stack: BuiltStack) -> None:
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool in this stack")


def test_tessera_commands_are_accepted_by_the_real_cli(stack: BuiltStack) -> None:
    _shared(stack)
    commands = [_containers(stack, "Deployment", extender.NAME)["extender"]["command"]]
    commands += [c["command"] for c in _containers(stack, "DaemonSet", node.NAME).values()]
    parser = build_parser()
    for command in commands:
        assert command[0] == "tessera"  # type: ignore[index]
        args = parser.parse_args(command[1:])  # type: ignore[index]  # SystemExit on an unknown flag
        assert callable(args.handler)


def test_agent_serves_metrics_where_the_service_points(stack: BuiltStack) -> None:
    _shared(stack)
    agent = _containers(stack, "DaemonSet", node.NAME)["agent"]
    port = stack.config.monitoring.metrics_port
    assert agent["command"][-2:] == ["--metrics-port", str(port)]  # type: ignore[index]
    service = stack.find("Service", f"{node.NAME}-metrics")
    assert service["spec"]["ports"][0]["port"] == port and service["spec"]["clusterIP"] == "None"


def test_tessera_node_daemonset_runs_only_on_shared_pools(stack: BuiltStack) -> None:
    _shared(stack)
    spec = stack.find("DaemonSet", node.NAME)["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {LABEL_POOL_KIND: "shared"}
    assert "affinity" not in spec  # nothing widens the selector
    assert spec["tolerations"] == [{"key": TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}]


def test_only_shared_pools_carry_the_tessera_selector_and_lose_nvidias_plugin(stack: BuiltStack) -> None:
    for pool in stack.config.node_pools:
        labels = labels_taints.pool_labels(pool)  # type: ignore[arg-type]
        selected_by_tessera = labels.get(LABEL_POOL_KIND) == "shared"
        nvidia_plugin_off = labels.get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) == "false"
        assert selected_by_tessera is (pool.kind == "shared"), pool.name
        assert nvidia_plugin_off is (pool.kind == "shared"), pool.name


def test_gpu_operator_device_plugin_is_not_forced_onto_nodes(stack: BuiltStack) -> None:
    """gpu-operator schedules its device plugin by `nvidia.com/gpu.deploy.device-plugin`; values must
    not override that with a selector or toleration that would reach shared nodes anyway."""
    from tessera.manifests.stack import gpu_operator_release

    release = gpu_operator_release(stack.config)
    if release is None:
        pytest.skip("no gpu-operator in this stack")
    plugin = release.values.get("devicePlugin", {})
    assert "nodeSelector" not in plugin and "affinity" not in plugin


def test_control_plane_pods_stay_off_gpu_nodes(stack: BuiltStack) -> None:
    _shared(stack)
    for name in (extender.NAME, "tessera-scheduler"):
        spec = stack.find("Deployment", name)["spec"]["template"]["spec"]
        assert not any(t.get("key") == TAINT_GPU for t in spec.get("tolerations", [])), name


def _selects(selector: dict[str, object], labels: dict[str, str]) -> bool:
    match = selector.get("matchLabels", {})
    assert isinstance(match, dict)
    return all(labels.get(k) == v for k, v in match.items())


def test_every_long_running_pod_is_behind_a_network_policy(stack: BuiltStack) -> None:
    policies = [o for _, o in stack.objects() if o["kind"] == "NetworkPolicy"]
    for _, o in stack.objects():
        if o["kind"] in ("Deployment", "DaemonSet"):
            labels = o["spec"]["template"]["metadata"]["labels"]
            ns = o["metadata"]["namespace"]
            assert any(p["metadata"]["namespace"] == ns and _selects(p["spec"]["podSelector"], labels) for p in policies), o["metadata"]["name"]


def test_extender_accepts_the_scheduler_pods_on_its_port(stack: BuiltStack) -> None:
    _shared(stack)
    policy = stack.find("NetworkPolicy", extender.NAME)
    scheduler_labels = stack.find("Deployment", "tessera-scheduler")["spec"]["template"]["metadata"]["labels"]
    container_port = _containers(stack, "Deployment", extender.NAME)["extender"]["ports"][0]["containerPort"]  # type: ignore[index]
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [container_port]
    assert any("podSelector" in peer and "namespaceSelector" not in peer and _selects(peer["podSelector"], scheduler_labels) for peer in rule["from"])


def test_readiness_probe_names_the_socket_the_device_plugin_creates() -> None:
    from tessera_node.deviceplugin.plugin import DevicePluginSettings

    assert node.PLUGIN_SOCKET == DevicePluginSettings(node_name="n").endpoint
    assert node.DEVICE_PLUGIN_DIR == str(DevicePluginSettings(node_name="n").device_plugin_dir)


def test_host_paths_hold_the_node_processes_default_directories() -> None:
    from pathlib import Path

    from tessera_node.agent.settings import AgentSettings
    from tessera_node.deviceplugin.core import AllocateSettings
    from tessera_node.deviceplugin.plugin import DevicePluginSettings

    agent = AgentSettings(node_name="n")
    assert Path(node.STATE_DIR) in agent.state_dir.parents
    assert Path(node.STATE_DIR) in DevicePluginSettings(node_name="n").state_dir.parents
    assert str(agent.cgroup_root) == node.CGROUP_DIR
    assert Path(node.RUN_DIR) in Path(AllocateSettings().mps_pipe_host_dir).parents


def test_every_priority_class_a_pod_names_exists(stack: BuiltStack) -> None:
    rendered = {o["metadata"]["name"] for _, o in stack.objects() if o["kind"] == "PriorityClass"}
    builtin = {"system-cluster-critical", "system-node-critical"}
    for _, o in stack.objects():
        if o["kind"] in ("Deployment", "DaemonSet"):
            name = o["spec"]["template"]["spec"].get("priorityClassName")
            assert name is None or name in rendered | builtin, o["metadata"]["name"]
            if o["metadata"]["name"] in (extender.NAME, node.NAME, "tessera-scheduler", "tessera-webhook"):
                assert name in rendered  # our own: some clusters admit system-* only in kube-system


def test_every_serving_container_has_a_readiness_probe_and_the_checkov_skip_is_narrow(stack: BuiltStack) -> None:
    """Only the node's lease-guard (it serves nothing) goes without one; checkov's per-resource
    skip of CKV_K8S_9 sits on that DaemonSet alone."""
    without = []
    for _, o in stack.objects():
        annotations = o["metadata"].get("annotations", {})
        skips = [v for k, v in annotations.items() if k.startswith("checkov.io/skip")]
        if o["kind"] in ("Deployment", "DaemonSet"):
            containers = o["spec"]["template"]["spec"]["containers"]
            without += [(o["metadata"]["name"], c["name"]) for c in containers if "readinessProbe" not in c]
        assert all(s.startswith("CKV_K8S_9=") for s in skips), o["metadata"]["name"]
        if skips:
            assert (o["kind"], o["metadata"]["name"]) == ("DaemonSet", node.NAME)
    assert set(without) <= {(node.NAME, "lease-guard")}
