"""S7 deployment wiring: every rendered Tessera process starts with flags the real CLI accepts, and
every path, port and shared file it uses is where the manifests put it.

These are the seams the unit tests of each part cannot see: the manifests' builder writes a
command line, the CLI's owner parses it, the device plugin and the agent meet in a hostPath.
"""
from __future__ import annotations

import argparse
import os
from pathlib import PurePosixPath
from typing import Any

import pytest
from e2e_stack import REPO, Rendered

from tessera.model.loader import load_stack_file
from tessera.cli.main import build_parser
from tessera.model.contract import ENV_POOLS_FILE, MPS_ROOT
from tessera_node.agent.settings import AgentSettings

STACKS = ["dev", "prod", "local"]
# --mps-dir is a host path handed to kubelet in Allocate, not one the plugin opens itself
PATH_ARGS = ("device_plugin_dir", "pod_resources_socket", "state_dir", "cgroup_root", "config", "pools_file", "plan")


@pytest.fixture(scope="module", params=STACKS)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return Rendered(load_stack_file(REPO / "stacks" / f"Pulumi.{request.param}.yaml"))


def _workloads(rendered: Rendered) -> list[dict[str, Any]]:
    return [o for o in rendered.objects() if o["kind"] in ("Deployment", "DaemonSet")]


def _parse(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """Parse the container's command as `tessera` would inside it (env defaults included)."""
    for var in container.get("env") or []:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    if ENV_POOLS_FILE not in {v["name"] for v in container.get("env") or []}:
        monkeypatch.delenv(ENV_POOLS_FILE, raising=False)
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    return build_parser().parse_args(argv[1:])


def _mounted(container: dict[str, Any], path: str) -> str | None:
    """The volume a path lives on inside the container, or None."""
    for mount in container.get("volumeMounts") or []:
        if PurePosixPath(path).is_relative_to(mount["mountPath"]):
            return str(mount["name"])
    return None


def _tessera_containers(rendered: Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for workload in _workloads(rendered):
        spec = workload["spec"]["template"]["spec"]
        out += [(spec, c) for c in spec["containers"] if (c.get("command") or [""])[0] == "tessera"]
    return out


def test_every_tessera_process_parses_and_finds_its_files(rendered: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    containers = _tessera_containers(rendered)
    assert containers, "the stack runs Tessera processes"
    for _spec, container in containers:
        with monkeypatch.context() as env:
            args = _parse(container, env)
        for name in PATH_ARGS:
            if name == "pools_file" and getattr(args, "lease_guard", False):
                continue  # `agent --lease-guard` only thaws expired freezes; it never reads pool settings
            value = getattr(args, name, None)
            if value is not None:
                assert _mounted(container, str(value)), f"{container['name']}: --{name.replace('_', '-')} {value} is not on a volume"


def test_device_plugin_and_agent_share_the_registry_and_mps_directories(rendered: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    node = next((o for o in _workloads(rendered) if o["metadata"]["name"] == "tessera-node"), None)
    if node is None:
        pytest.skip("this stack has no shared pool")
    spec = node["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in spec["containers"]}
    with monkeypatch.context() as env:
        plugin = _parse(by_name["device-plugin"], env)
    with monkeypatch.context() as env:
        agent = _parse(by_name["agent"], env)
    assert plugin.state_dir == agent.state_dir, "the plugin writes the registry the agent reads"
    for guard in (c for c in spec["containers"] if "--lease-guard" in (c.get("command") or []) + (c.get("args") or [])):
        with monkeypatch.context() as env:
            guard_args = _parse(guard, env)
        assert guard_args.state_dir == agent.state_dir, "the lease guard thaws the freezes the agent leased"
        assert _mounted(guard, str(guard_args.state_dir)) == _mounted(by_name["agent"], str(agent.state_dir))
    assert _mounted(by_name["device-plugin"], str(plugin.state_dir)) == _mounted(by_name["agent"], str(agent.state_dir))
    assert agent.pools_file is not None and _mounted(by_name["agent"], str(agent.pools_file)), "the agent reads the pools file"
    # Allocate mounts the *host* MPS directory into fixed-share containers; the agent creates the
    # daemons' pipes there, so the agent must see the host path at the same path.
    assert plugin.mps_dir == MPS_ROOT == str(AgentSettings(node_name="n").mps_root)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mps_volume = _mounted(by_name["agent"], MPS_ROOT)
    assert mps_volume is not None
    mount = next(m for m in by_name["agent"]["volumeMounts"] if m["name"] == mps_volume)
    assert volumes[mps_volume]["hostPath"]["path"] == mount["mountPath"], "host and container paths must agree"
    for volume in ("device-plugins", "pod-resources"):
        plugin_mount = next(m for m in by_name["device-plugin"]["volumeMounts"] if m["name"] == volume)
        assert volumes[volume]["hostPath"]["path"] == plugin_mount["mountPath"]
    assert PurePosixPath(plugin.device_plugin_dir) == PurePosixPath("/var/lib/kubelet/device-plugins")
    assert spec.get("hostPID") is True, "the agent maps NVML's host PIDs to containers"


def test_listen_ports_match_container_ports_probes_and_services(rendered: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    for _spec, container in _tessera_containers(rendered):
        with monkeypatch.context() as env:
            args = _parse(container, env)
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        listen = getattr(args, "metrics_port", None) or getattr(args, "port", None)
        if ports:
            assert listen in ports.values(), f"{container['name']} listens on {listen}, declares {ports}"
        for probe in ("readinessProbe", "livenessProbe"):
            port = ((container.get(probe) or {}).get("httpGet") or {}).get("port")
            if port is not None:
                assert (ports.get(port) if isinstance(port, str) else port) == listen, f"{container['name']} {probe}"
    for service in (o for o in rendered.objects() if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        targets = [
            c for w in _workloads(rendered) if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())
            for c in w["spec"]["template"]["spec"]["containers"]
        ]
        assert targets, f"Service {service['metadata']['name']} selects no workload"
        declared = {p.get("name") for c in targets for p in c.get("ports") or []} | {p["containerPort"] for c in targets for p in c.get("ports") or []}
        for port in service["spec"]["ports"]:
            assert port.get("targetPort", port["port"]) in declared, f"Service {service['metadata']['name']} port {port}"


def test_kube_scheduler_reads_the_rendered_configuration(rendered: Rendered) -> None:
    workload = next((o for o in _workloads(rendered) if o["metadata"]["name"] == "tessera-scheduler"), None)
    if workload is None:
        pytest.skip("this stack has no shared pool")
    spec = workload["spec"]["template"]["spec"]
    container = spec["containers"][0]
    flags = dict(a.split("=", 1) for a in container["command"] + (container.get("args") or []) if a.startswith("--") and "=" in a)
    path = PurePosixPath(flags["--config"])
    volume = _mounted(container, str(path))
    source = next(v for v in spec["volumes"] if v["name"] == volume)["configMap"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume)
    key = str(path.relative_to(mount["mountPath"]))
    configuration = rendered.configmap_file(source, key)
    assert "kind: KubeSchedulerConfiguration" in configuration
    assert rendered.scheduler_configuration()["profiles"][0]["schedulerName"] == rendered.webhook_settings().scheduler_name, (
        "the webhook sends pods to the scheduler this configuration names"
    )
    assert os.path.basename(str(path)) == key
