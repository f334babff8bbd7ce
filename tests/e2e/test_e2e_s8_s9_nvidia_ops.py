"""S8 (MIG and time-slicing pools) and S9 (operations: a one-line policy edit, validation)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from e2e_cluster import E2ECluster, job_pod, wait_until
from e2e_stack import REPO, Rendered, node_labels, node_taints, runs_on, shared_pool, stack

from tessera.model.loader import load_stack_file
from tessera.model.contract import (
    GPU_CORE,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_SHARING_POLICY,
)
from tessera.manifests.stack import gpu_operator_release

PROD = REPO / "stacks" / "Pulumi.prod.yaml"
TESSERA = [sys.executable, "-m", "tessera.cli.main"]


@pytest.fixture(scope="module")
def prod_config():  # type: ignore[no-untyped-def]
    return load_stack_file(PROD)


# --- S8 -------------------------------------------------------------------------------------------
def test_s8_every_gpu_node_label_names_an_existing_nvidia_config(prod_config) -> None:  # type: ignore[no-untyped-def]
    rendered = Rendered(prod_config)
    release = gpu_operator_release(prod_config)
    assert release is not None
    values = release.values
    mig_parted = rendered.find("ConfigMap", values["migManager"]["config"]["name"])
    plugin_configs = rendered.find("ConfigMap", values["devicePlugin"]["config"]["name"])
    for cm in (mig_parted, plugin_configs):
        assert cm["metadata"]["namespace"] == release.namespace, "gpu-operator reads its ConfigMaps in its own namespace"
    entries = yaml.safe_load(mig_parted["data"]["config.yaml"])["mig-configs"]
    for pool in prod_config.node_pools:
        labels = node_labels(prod_config, pool.name)
        if LABEL_NVIDIA_MIG_CONFIG in labels:
            assert labels[LABEL_NVIDIA_MIG_CONFIG] in entries, f"{pool.name}: mig-manager has no entry {labels[LABEL_NVIDIA_MIG_CONFIG]}"
        if LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG in labels:
            assert labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] in plugin_configs["data"], f"{pool.name}: no device plugin config"


def test_s8_mig_pool_profile_and_slice_replicas_reach_nvidias_configs(prod_config) -> None:  # type: ignore[no-untyped-def]
    rendered = Rendered(prod_config)
    labels = node_labels(prod_config, "a100-mig")
    entries = yaml.safe_load(rendered.configmap_file("tessera-mig-parted-config", "config.yaml"))["mig-configs"]
    layout = entries[labels[LABEL_NVIDIA_MIG_CONFIG]]
    assert layout == [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}]
    plugin = yaml.safe_load(rendered.find("ConfigMap", "tessera-device-plugin-config")["data"][labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG]])
    assert plugin["flags"]["migStrategy"] == "mixed"
    assert plugin["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.5gb", "replicas": 4}]
    timeslice = yaml.safe_load(
        rendered.find("ConfigMap", "tessera-device-plugin-config")["data"][node_labels(prod_config, "t4-timeslice")[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG]]
    )
    assert timeslice["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_s8_single_strategy_pool_is_advertised_as_nvidia_gpu() -> None:
    config = stack(
        {
            "name": "a100-single", "kind": "mig", "instanceType": "GT4.4XLARGE96", "minSize": 1, "maxSize": 1,
            "mig": {"strategy": "single", "profile": "all-1g.5gb"}, "timeSlicing": {"replicas": {"nvidia.com/gpu": 2}},
        }
    )
    rendered = Rendered(config)
    release = gpu_operator_release(config)
    assert release is not None and release.values["mig"]["strategy"] == "single"
    labels = node_labels(config, "a100-single")
    plugin = yaml.safe_load(rendered.find("ConfigMap", "tessera-device-plugin-config")["data"][labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG]])
    assert plugin["flags"]["migStrategy"] == "single"
    assert plugin["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    entries = yaml.safe_load(rendered.configmap_file("tessera-mig-parted-config", "config.yaml"))["mig-configs"]
    assert entries[labels[LABEL_NVIDIA_MIG_CONFIG]][0]["mig-devices"] == {"1g.5gb": 7}


def test_s8_mig_and_timeslice_nodes_run_nvidias_plugin_only(prod_config) -> None:  # type: ignore[no-untyped-def]
    tessera_plugin = Rendered(prod_config).pod_spec("DaemonSet", "tessera-node")
    release = gpu_operator_release(prod_config)
    assert release is not None
    for pool in ("a100-mig", "t4-timeslice"):
        labels, taints = node_labels(prod_config, pool), node_taints(prod_config, pool)
        assert not runs_on(tessera_plugin, labels, taints)
        assert labels.get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) != "false"
        assert runs_on({"tolerations": release.values["daemonsets"]["tolerations"]}, labels, taints)


# --- S9 -------------------------------------------------------------------------------------------
def _write_stack(path: Path, policy: str) -> Path:
    data = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    pool = next(p for p in data["config"]["tessera:nodePools"] if p["kind"] == "shared")
    pool["sharing"]["policy"] = policy
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _render(stack_file: Path, out: Path) -> dict[str, str]:
    done = subprocess.run([*TESSERA, "render", str(stack_file), "-o", str(out)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.yaml"))}


def test_s9_one_line_policy_edit_changes_one_line_of_the_render(tmp_path: Path) -> None:
    before = _render(_write_stack(tmp_path / "a" / "Pulumi.dev.yaml", "fixed-share"), tmp_path / "out-a")
    after = _render(_write_stack(tmp_path / "b" / "Pulumi.dev.yaml", "best-effort"), tmp_path / "out-b")
    assert before.keys() == after.keys()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"00-platform.yaml"}, "only the pools ConfigMap carries the policy"
    lines = list(zip(before["00-platform.yaml"].splitlines(), after["00-platform.yaml"].splitlines(), strict=True))
    differing = [(a, b) for a, b in lines if a != b]
    assert len(differing) == 1 and '"policy": "fixed-share"' in differing[0][0] and '"policy": "best-effort"' in differing[0][1]


def test_s9_validate_catches_a_bad_edit_with_its_path(tmp_path: Path) -> None:
    bad = _write_stack(tmp_path / "Pulumi.dev.yaml", "fixed-shares")
    done = subprocess.run([*TESSERA, "validate", str(bad)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2
    output = done.stdout + done.stderr
    assert f"{bad}: nodePools[1].sharing.policy:" in output and "fixed-share" in output
    assert "Traceback" not in output


def test_s9_policy_edit_reaches_running_nodes_without_restarts() -> None:
    """What `pulumi up` of the edit does in the cluster: the pools ConfigMap (mounted file) and the
    pool's node labels change; the device plugin and the agent pick both up while running."""
    cluster = E2ECluster(stack(shared_pool(policy="best-effort")))
    try:
        _, views = cluster.submit_and_run(job_pod("s9-before", {GPU_CORE: 30}))
        assert views["main"].env["TESSERA_SHARING_POLICY"] == "best-effort" and views["main"].mounts == ()
        edited = stack(shared_pool(policy="fixed-share"))
        cluster.pools_file.write_text(Rendered(edited).configmap_file("tessera-pools", "pools.json"))
        cluster.api.patch_node_labels("t4-shared-0", node_labels(edited, "t4-shared"))
        assert cluster.api.get_node("t4-shared-0")["metadata"]["labels"][LABEL_SHARING_POLICY] == "fixed-share"
        plugin = cluster.nodes["t4-shared-0"].plugin
        assert wait_until(lambda: plugin.state.allocate_settings.uses_mps), "the device plugin reads the new label"
        _, views = cluster.submit_and_run(job_pod("s9-after", {GPU_CORE: 30}))
        assert views["main"].env["TESSERA_SHARING_POLICY"] == "fixed-share"
        assert any(m[0] == "/run/tessera/mps" for m in views["main"].mounts)
        agent = cluster.start_agent("t4-shared-0")
        cluster.nodes["t4-shared-0"].tick(1.0)
        assert agent.build_view().gpus[0].mps_daemon_running, "the agent applies fixed-share from the pools file"
    finally:
        cluster.close()


def test_s9_policy_edit_in_the_pools_file_alone_reaches_the_device_plugin() -> None:
    cluster = E2ECluster(stack(shared_pool(policy="best-effort")))
    try:
        cluster.pools_file.write_text(Rendered(stack(shared_pool(policy="fixed-share"))).configmap_file("tessera-pools", "pools.json"))
        agent = cluster.start_agent("t4-shared-0")
        _, views = cluster.submit_and_run(job_pod("s9-file-only", {GPU_CORE: 30}))
        assert wait_until(lambda: len(agent.deps.registry.all()) == 1)
        cluster.nodes["t4-shared-0"].tick(1.0)
        assert agent.build_view().gpus[0].mps_daemon_running, "the agent follows the pools file: fixed-share"
        assert views["main"].env["TESSERA_SHARING_POLICY"] == "fixed-share", "the device plugin disagrees with the agent"
    finally:
        cluster.close()


def test_s5_card_metrics_come_from_dcgm_exporter_on_shared_nodes_too(prod_config) -> None:  # type: ignore[no-untyped-def]
    release = gpu_operator_release(prod_config)
    assert release is not None and release.values["dcgmExporter"]["enabled"] is True
    shared = (node_labels(prod_config, "a10-shared"), node_taints(prod_config, "a10-shared"))
    assert runs_on({"tolerations": release.values["daemonsets"]["tolerations"]}, *shared), "dcgm-exporter tolerates shared nodes"
    agent_metrics = Rendered(prod_config).find("Service", "tessera-node-metrics")
    assert agent_metrics["spec"]["ports"][0]["port"] != 9400, "the agent's per-container series do not clash with dcgm-exporter's port"


def _two_pods_share_a_gpu(cluster: E2ECluster) -> bool:
    a, _ = cluster.submit_and_run(job_pod("s9-p1", {GPU_CORE: 20}))
    b, _ = cluster.submit_and_run(job_pod("s9-p2", {GPU_CORE: 20}))
    index = "tessera.dev/gpu-index-container-main"
    return bool(a["metadata"]["annotations"][index] == b["metadata"]["annotations"][index])


def test_s9_a_hand_edit_of_a_policy_label_gives_way_to_the_stack_config() -> None:
    """The pools file, which `pulumi up` and kubelet keep current, wins over a label edited by hand
    (docs/pool-policy.md): the same rule in the extender, the device plugin and the agent."""
    cluster = E2ECluster(stack(shared_pool(placement="binpack", instance_type="GN7.10XLARGE160")))
    try:
        edited = stack(shared_pool(placement="spread", instance_type="GN7.10XLARGE160"))
        seen = "example.com/relabelled"
        cluster.api.patch_node_labels("t4-shared-0", {**node_labels(edited, "t4-shared"), seen: "yes"})
        assert wait_until(lambda: cluster.extender.state.cluster.nodes["t4-shared-0"].labels.get(seen) == "yes"), "the extender saw the edit"
        assert cluster.extender.state.cluster.nodes["t4-shared-0"].labels.get("tessera.dev/gpu-placement") == "binpack"
        assert _two_pods_share_a_gpu(cluster), "binpack, as the stack config still says: the second pod joins the first GPU"
    finally:
        cluster.close()


def test_s9_placement_edit_in_the_pools_file_alone_reaches_the_extender() -> None:
    cluster = E2ECluster(stack(shared_pool(placement="binpack", instance_type="GN7.10XLARGE160")))
    try:
        edited = stack(shared_pool(placement="spread", instance_type="GN7.10XLARGE160"))
        cluster.pools_file.write_text(Rendered(edited).configmap_file("tessera-pools", "pools.json"))
        assert not _two_pods_share_a_gpu(cluster), "spread: the second pod takes the empty GPU"
    finally:
        cluster.close()
