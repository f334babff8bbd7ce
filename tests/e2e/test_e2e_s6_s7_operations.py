"""S6 (scheduled re-partitioning) and S7 (any cluster: extender wiring, GPU health, quotas)."""
from __future__ import annotations

import json
import shlex
from collections.abc import Iterator

import kubernetes_validate
import pytest
import yaml
from e2e_cluster import E2ECluster, job_pod, wait_until
from e2e_stack import REPO, Rendered, runs_on, shared_pool, stack

from tessera.model.loader import load_stack_file
from tessera.cli.main import build_parser
from tessera.model.contract import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_NODE_GPUS,
    EXTENDER_PORT,
    EXTENDER_SERVICE,
    GPU_CORE,
    GPU_MEMORY,
    LABEL_LAYOUT,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_MIG_CONFIG,
    TESSERA_NAMESPACE,
    Allocation,
)
from tessera.manifests.render import render_files
from tessera.repartition import apply_layout, load_plan
from tessera.scheduler.state import is_shared_gpu_node

DAY_NIGHT = [
    {"name": "day", "cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai", "layout": 4},
    {"name": "night", "cron": "0 20 * * 1-5", "timezone": "Asia/Shanghai", "layout": 1},
]


def _gpu_index(pod: dict) -> int:  # type: ignore[type-arg]
    return Allocation.from_json(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION]).containers["main"][0].index


@pytest.fixture(scope="module")
def prod() -> Rendered:
    return Rendered(load_stack_file(REPO / "stacks" / "Pulumi.prod.yaml"))


# --- S6 -------------------------------------------------------------------------------------------
def test_s6_render_has_a_cronjob_per_layout_that_runs_a_valid_command(prod: Rendered) -> None:
    plan_text = prod.configmap_file("tessera-repartition", "plan.json")
    plans = {p["pool"]: p for p in json.loads(plan_text)["pools"]}
    cronjobs = [o for o in prod.objects("repartition") if o["kind"] == "CronJob"]
    parser = build_parser()
    for pool, plan in plans.items():
        for layout in plan["layouts"]:
            job = next(c for c in cronjobs if c["metadata"]["name"] == f"tessera-rp-{pool}-{layout['index']}")
            assert (job["spec"]["schedule"], job["spec"]["timeZone"]) == (layout["cron"], layout["timezone"])
            pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            command = pod["containers"][0]["command"] + (pod["containers"][0].get("args") or [])
            args = parser.parse_args(command[1:])  # what `tessera` will parse in the Job
            assert (args.pool, args.layout_index) == (pool, layout["index"])
            mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
            assert any(str(args.plan).startswith(m) for m in mounts), f"{shlex.join(command)}: plan file not mounted"


def test_s6_mig_layouts_exist_in_the_configs_their_labels_name(prod: Rendered) -> None:
    mig_parted = yaml.safe_load(prod.configmap_file("tessera-mig-parted-config", "config.yaml"))["mig-configs"]
    plugin_configs = prod.find("ConfigMap", "tessera-device-plugin-config")["data"]
    for plan in json.loads(prod.configmap_file("tessera-repartition", "plan.json"))["pools"]:
        for layout in plan["layouts"]:
            labels = layout["labels"]
            if LABEL_NVIDIA_MIG_CONFIG in labels:
                assert labels[LABEL_NVIDIA_MIG_CONFIG] in mig_parted, "mig-manager would not find the layout"
            if LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG in labels:
                assert labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] in plugin_configs, "NVIDIA's plugin would not find its config"


@pytest.fixture
def day_night() -> Iterator[E2ECluster]:
    cluster = E2ECluster(stack({**shared_pool(), "repartition": DAY_NIGHT}), nodes={"t4-shared": 2})
    yield cluster
    cluster.close()


def _apply(cluster: E2ECluster, index: int) -> list[str]:
    plan = load_plan(cluster.rendered.configmap_file("tessera-repartition", "plan.json"), "t4-shared")
    report = apply_layout(cluster.api, plan, index, clock=lambda: 0.0, sleep=lambda _s: None)
    assert report.ok, report.failed
    return report.changed


def test_s6_applying_a_layout_relabels_only_the_pools_nodes(day_night: E2ECluster) -> None:
    assert _apply(day_night, 1) == ["t4-shared-0", "t4-shared-1"]
    for name in ("t4-shared-0", "t4-shared-1"):
        labels = day_night.api.get_node(name)["metadata"]["labels"]
        assert (labels[LABEL_LAYOUT], labels[LABEL_MAX_SHARES_PER_GPU]) == ("1", "1")
    assert _apply(day_night, 1) == [], "applying the same layout again changes nothing"
    _apply(day_night, 0)
    assert day_night.api.get_node("t4-shared-0")["metadata"]["labels"][LABEL_MAX_SHARES_PER_GPU] == "4"


def test_s6_night_layout_gives_each_pod_a_gpu_of_its_own(day_night: E2ECluster) -> None:
    _apply(day_night, 1)
    first, _ = day_night.submit_and_run(job_pod("s6-a", {GPU_CORE: 10}))
    day_night.create(job_pod("s6-b", {GPU_CORE: 10}))
    attempt = day_night.schedule("default", "s6-b")
    assert attempt.node is not None and attempt.node != first["spec"]["nodeName"], "one share per GPU at night"


# --- S7 -------------------------------------------------------------------------------------------
def test_s7_scheduler_configuration_reaches_the_extender_service(prod: Rendered) -> None:
    entry = prod.extender_entry()
    assert entry["urlPrefix"] == f"http://{EXTENDER_SERVICE}.{TESSERA_NAMESPACE}.svc:{EXTENDER_PORT}"
    assert (entry["filterVerb"], entry["prioritizeVerb"], entry["bindVerb"], entry["preemptVerb"]) == ("filter", "prioritize", "bind", "preempt")
    assert entry["nodeCacheCapable"] is True and entry["ignorable"] is False
    assert {r["name"] for r in entry["managedResources"]} == {GPU_CORE, GPU_MEMORY}
    service = prod.find("Service", EXTENDER_SERVICE)
    assert service["metadata"]["namespace"] == TESSERA_NAMESPACE
    port = next(p for p in service["spec"]["ports"] if p["port"] == EXTENDER_PORT)
    deployment = prod.find("Deployment", EXTENDER_SERVICE)
    template = deployment["spec"]["template"]
    assert all(template["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())
    container = template["spec"]["containers"][0]
    named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    target = port.get("targetPort", EXTENDER_PORT)
    listen = int(container["command"][container["command"].index("--port") + 1])
    assert (named.get(target) if isinstance(target, str) else target) == listen
    scheduler_spec = prod.pod_spec("Deployment", "tessera-scheduler")
    assert "--config" in " ".join(scheduler_spec["containers"][0].get("command", []) + scheduler_spec["containers"][0].get("args", []))


def _run_label_script(script: str, labels: dict[str, str], taints: list[dict[str, str]]) -> None:
    """What `bash nodes/label-nodes.sh` does to one node: `kubectl label|taint nodes -l SEL ...`."""
    for line in script.splitlines():
        words = shlex.split(line)
        if words[:1] != ["kubectl"]:
            continue
        verb, selector, values = words[1], words[4], [w for w in words[5:] if w != "--overwrite"]
        if not all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(","))):
            continue
        for value in values:
            key, rest = value.split("=", 1)
            if verb == "label":
                labels[key] = rest
            else:
                taint_value, effect = rest.split(":", 1)
                taints[:] = [t for t in taints if (t["key"], t["effect"]) != (key, effect)] + [{"key": key, "value": taint_value, "effect": effect}]


def test_s7_existing_cluster_node_gets_the_tessera_device_plugin_after_the_label_script() -> None:
    config = load_stack_file(REPO / "stacks" / "Pulumi.local.yaml")
    pool = config.node_pools[0]
    labels = {"kubernetes.io/hostname": "gpu-1", **pool.node_selector}  # as the stack file tells the user
    taints: list[dict[str, str]] = []
    files = render_files(config, "Pulumi.local.yaml")
    daemonset = Rendered(config).pod_spec("DaemonSet", "tessera-node")
    assert not runs_on(daemonset, labels, taints), "before the script the node is not a Tessera node yet"
    assert "nodes/label-nodes.sh" in files, "tessera render must tell an existing cluster how to label its pool nodes"
    _run_label_script(files["nodes/label-nodes.sh"], labels, taints)
    assert runs_on(daemonset, labels, taints), "the node DaemonSet lands on the labelled node"
    assert is_shared_gpu_node({"metadata": {"labels": labels}}), "the extender treats it as a shared node"


def test_s7_a_job_runs_on_the_existing_cluster_stack() -> None:
    cluster = E2ECluster(load_stack_file(REPO / "stacks" / "Pulumi.local.yaml"))
    try:
        pod, views = cluster.submit_and_run(job_pod("s7-local", {GPU_CORE: 25, GPU_MEMORY: 2048}))
        assert pod["spec"]["nodeName"] == "local-shared-0"
        assert views["main"].env["TESSERA_GPU_MEMORY_MIB"] == "2048"
    finally:
        cluster.close()


def test_s7_xid_takes_a_gpu_out_of_scheduling_and_back() -> None:
    cluster = E2ECluster(stack(shared_pool(placement="binpack", instance_type="GN7.10XLARGE160")))
    try:
        name = "t4-shared-0"
        first, _ = cluster.submit_and_run(job_pod("s7-first", {GPU_CORE: 20}))
        bad = _gpu_index(first)
        cluster.nodes[name].backend.inject_xid(bad, 48, "double-bit ECC")
        cluster.nodes[name].backend.set_responsive(bad, False)  # held down until the test lets it recover
        kubelet = cluster.nodes[name].kubelet
        assert kubelet.wait_for(lambda: kubelet.devices(GPU_CORE).get(f"gpu{bad}-core000") == "Unhealthy"), "ListAndWatch update"
        inventory = json.loads(cluster.api.get_node(name)["metadata"]["annotations"][ANNOTATION_NODE_GPUS])
        assert [g["healthy"] for g in inventory if g["index"] == bad] == [False]
        assert cluster.api.get_node(name)["status"]["allocatable"][GPU_MEMORY] == "15360", "only the healthy GPU's memory"
        cluster.sync_node_status(name)
        assert wait_until(lambda: not cluster.extender.state.cluster.nodes[name].gpus[bad].healthy)
        second, _ = cluster.submit_and_run(job_pod("s7-second", {GPU_CORE: 30}))
        assert _gpu_index(second) != bad, "binpack would have chosen the busy GPU; it is unhealthy"
        cluster.create(job_pod("s7-third", {GPU_CORE: 75}))
        assert cluster.schedule("default", "s7-third").node is None, "70 % left on the healthy GPU, none on the bad one"
        # the GPU answers again and no Xid for the quiet period: back in service
        cluster.nodes[name].backend.set_responsive(bad, True)
        assert kubelet.wait_for(lambda: kubelet.devices(GPU_CORE).get(f"gpu{bad}-core000") == "Healthy", timeout_s=5)
        assert wait_until(lambda: cluster.extender.state.cluster.nodes[name].gpus[bad].healthy)
        cluster.sync_node_status(name)
        third = cluster.schedule("default", "s7-third")
        assert third.node == name and _gpu_index(cluster.api.get_pod("default", "s7-third")) == bad
    finally:
        cluster.close()


def test_s7_namespace_quotas_are_rendered_and_schema_valid(prod: Rendered) -> None:
    quotas = {o["metadata"]["namespace"]: o for o in prod.objects() if o["kind"] == "ResourceQuota"}
    assert quotas["inference"]["spec"]["hard"][f"requests.{GPU_CORE}"] == "800"
    assert quotas["inference"]["spec"]["hard"][f"requests.{GPU_MEMORY}"] == "98304"
    assert quotas["training"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    for quota in quotas.values():
        kubernetes_validate.validate(quota, "1.30.0", strict=True)


def test_s7_pods_on_an_unhealthy_gpu_are_evicted_for_rescheduling() -> None:
    cluster = E2ECluster(stack(shared_pool(instance_type="GN7.10XLARGE160")))
    try:
        victim, _ = cluster.submit_and_run(job_pod("s7-victim", {GPU_CORE: 20}))
        cluster.nodes["t4-shared-0"].backend.inject_xid(_gpu_index(victim), 79, "fallen off the bus")
        cluster.nodes["t4-shared-0"].backend.set_responsive(_gpu_index(victim), False)

        def evicted() -> bool:
            pods = [p for p in cluster.api.list_pods() if p["metadata"]["name"] == "s7-victim"]
            return not pods or pods[0]["status"].get("phase") == "Failed"

        assert wait_until(evicted, timeout_s=2.0)
    finally:
        cluster.close()
