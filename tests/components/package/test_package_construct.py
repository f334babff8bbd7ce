"""The package's components constructed through its provider under Pulumi mocks, as the engine's
Construct call does for a program in any language: the resources a user sees, and bad input
reported with the same `path: message` lines as `tessera validate` (harness:
tests/support/pulumi_package_mocks.py).
"""
from __future__ import annotations

import copy
from typing import Any

import pulumi
import pytest
import yaml
from pulumi_package_mocks import construct, package_inputs
from pulumi_program_mocks import FAKE_KUBECONFIG_INTRANET, K8S_PROVIDER, NODE_POOL, secret_value

from tessera.model import ConfigError, from_pulumi_mapping
from tessera.model.contract import (
    LABEL_GPU_PLACEMENT,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_POOL,
    LABEL_POOL_KIND,
    LABEL_SHARING_POLICY,
    TAINT_GPU,
)
from tessera_pulumi.package.args import PoolKind, SharingPolicy
from tessera_pulumi.package.inputs import InputsError

CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
CHART = "kubernetes:helm.sh/v4:Chart"

# A TKE cluster with a shared pool and a MIG pool, as a TypeScript or YAML program would send it:
# numbers arrive as floats (protobuf has one number type).
SHARED_AND_MIG: dict[str, Any] = {
    "region": "ap-shanghai",
    "cluster": {
        "name": "gpu-lab",
        "kubernetesVersion": "1.30.0",
        "vpcCidr": "10.30.0.0/16",
        "subnets": [{"zone": "ap-shanghai-5", "cidr": "10.30.1.0/24"}],
    },
    "nodePools": [
        {
            "name": "a10-shared", "kind": "shared", "instanceType": "PNV4.14XLARGE232", "minSize": 1.0, "maxSize": 3.0,
            "sharing": {"policy": "fixed-share", "placement": "spread", "onlineOffline": True},
            "taints": [{"key": "team", "value": "vision", "effect": "NoSchedule"}],
        },
        {
            "name": "a100-mig", "kind": "mig", "instanceType": "GT4.4XLARGE96", "minSize": 1.0, "maxSize": 1.0,
            "mig": {"strategy": "single", "profile": "all-1g.5gb"},
            "timeSlicing": {"replicas": 2.0},
        },
    ],
}


@pytest.fixture(scope="module")
def lab() -> Any:
    return construct("TkeGpuCluster", copy.deepcopy(SHARED_AND_MIG), name="lab")


def _pool(run: Any, name: str) -> dict[str, Any]:
    (pool,) = [r.inputs for r in run.of_type(NODE_POOL) if r.inputs["name"] == name]
    return pool


def test_shared_pool_nodes_carry_the_sharing_labels_and_the_gpu_taint(lab: Any) -> None:
    pool = _pool(lab, "a10-shared")
    assert pool["labels"][LABEL_POOL] == "a10-shared"
    assert pool["labels"][LABEL_POOL_KIND] == "shared"
    assert pool["labels"][LABEL_SHARING_POLICY] == "fixed-share"
    assert pool["labels"][LABEL_GPU_PLACEMENT] == "spread"
    assert pool["labels"][LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY] == "false"  # Tessera's device plugin, not NVIDIA's
    assert pool["taints"] == [
        {"key": TAINT_GPU, "value": "shared", "effect": "NoSchedule"},
        {"key": "team", "value": "vision", "effect": "NoSchedule"},
    ]
    assert (pool["minSize"], pool["maxSize"], pool["enableAutoScale"]) == (1, 3, True)
    assert pool["nodeConfig"]["gpuArgs"]["migEnable"] is False


def test_mig_pool_nodes_get_mig_mode_and_their_mig_config(lab: Any) -> None:
    pool = _pool(lab, "a100-mig")
    assert pool["labels"][LABEL_POOL_KIND] == "mig"
    assert pool["labels"][LABEL_NVIDIA_MIG_CONFIG] == "tessera-a100-mig"
    assert pool["labels"][LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] == "tessera-a100-mig"
    assert pool["taints"] == [{"key": TAINT_GPU, "value": "mig", "effect": "NoSchedule"}]
    assert pool["nodeConfig"]["gpuArgs"]["migEnable"] is True
    assert pool["autoScalingConfig"]["instanceType"] == "GT4.4XLARGE96"


def _config_maps(run: Any, group: str) -> dict[str, dict[str, str]]:
    objects = run.named(CONFIG_GROUP, group).inputs["objs"]
    return {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}


def test_mig_layout_and_time_slicing_reach_the_gpu_operators_config(lab: Any) -> None:
    maps = _config_maps(lab, "lab-platform-nvidia")
    (parted,) = maps["tessera-mig-parted-config"].values()
    layout = yaml.safe_load(parted)["mig-configs"]["tessera-a100-mig"]
    assert layout == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]
    (plugin,) = [yaml.safe_load(v) for name, data in maps.items() if "device-plugin" in name for k, v in data.items() if k == "tessera-a100-mig"]
    assert plugin["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    chart = next(r for r in lab.of_type(CHART) if r.inputs["chart"] == "gpu-operator")
    assert chart.inputs["values"]["mig"]["strategy"] == "single"


def test_outputs_come_back_through_construct_with_the_kubeconfig_secret(lab: Any) -> None:
    assert lab.outputs["poolNames"] == ["a10-shared", "a100-mig"]
    assert lab.outputs["clusterId"] == "lab-cluster-id"
    assert lab.outputs["kubeconfig"] == FAKE_KUBECONFIG_INTRANET  # no public endpoint asked for
    assert lab.secret_outputs == {"kubeconfig"}
    assert [p["name"] for p in lab.outputs["plan"]["pools"]] == ["a10-shared", "a100-mig"]


def test_python_callers_may_pass_the_generated_enums() -> None:
    inputs = copy.deepcopy(SHARED_AND_MIG)
    inputs["nodePools"][0].update(kind=PoolKind.Shared, sharing={"policy": SharingPolicy.BurstShare})
    run = construct("TkeGpuCluster", inputs, name="lab")
    assert _pool(run, "a10-shared")["labels"][LABEL_SHARING_POLICY] == "burst-share"


def test_python_programs_can_use_the_components_with_the_typed_dicts() -> None:
    from pulumi_program_mocks import start_mocks

    from tessera_pulumi.package.args import NodePool, TkeClusterConfig, TkeGpuClusterArgs
    from tessera_pulumi.package.components import TkeGpuCluster

    cluster = TkeClusterConfig(name="gpu-lab", kubernetes_version="1.30.0", vpc_cidr="10.30.0.0/16",
                               subnets=[{"zone": "ap-shanghai-5", "cidr": "10.30.1.0/24"}])
    pool = NodePool(name="t4", kind=PoolKind.Nvidia, instance_type="GN7.2XLARGE32", max_size=2)
    mocks, _ = start_mocks()

    @pulumi.runtime.test
    def run() -> None:
        TkeGpuCluster("lab", TkeGpuClusterArgs(region="ap-shanghai", cluster=cluster, node_pools=[pool]))

    run()
    (declared,) = [r.inputs for r in mocks.resources if r.typ == NODE_POOL and r.inputs["name"] == "t4"]
    assert (declared["maxSize"], declared["labels"][LABEL_POOL_KIND]) == (2, "nvidia")


# --- bad input: the lines `tessera validate` prints, nothing declared ------------------------------


def _as_written(value: Any) -> Any:
    """A value as YAML would read it from a stack file: whole numbers are ints (the wire made them floats)."""
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _as_stack_mapping(inputs: dict[str, Any]) -> dict[str, Any]:
    """The same config as a stack file's `tessera:` keys (what `tessera validate` reads)."""
    inputs = _as_written(inputs)
    mapping = {k: v for k, v in inputs.items() if k not in ("region", "secrets")}
    mapping["cluster"] = {"provider": "tke", **inputs["cluster"]}
    return {"region": inputs["region"], **mapping}


def _validate_lines(inputs: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_mapping(_as_stack_mapping(inputs))
    return [str(p) for p in caught.value.problems]


def _construct_lines(component: str, inputs: dict[str, Any]) -> tuple[list[str], InputsError]:
    with pytest.raises(InputsError) as caught:
        construct(component, inputs)
    error = caught.value
    assert [f"{e['property_path']}: {e['reason']}" for e in error.errors or []] == [str(p) for p in error.problems]
    return [str(p) for p in error.problems], error


BAD_INPUTS = [
    ("unknown MIG layout", lambda c: c["nodePools"][1]["mig"].update(profile="all-9g.99gb"),
     "nodePools[1].mig.profile: 'all-9g.99gb' is not a named MIG layout of A100-40GB (valid: all-1g.5gb, all-1g.5gb.me, "
     "all-1g.10gb, all-2g.10gb, all-3g.20gb, all-4g.20gb, all-7g.40gb, all-balanced)"),
    ("policy outside the enum", lambda c: c["nodePools"][0]["sharing"].update(policy="fair-share"),
     "nodePools[0].sharing.policy: 'fair-share' is not valid (valid: best-effort, fixed-share, burst-share)"),
    ("misspelt key", lambda c: c["nodePools"][0].update(minsize=c["nodePools"][0].pop("minSize")),
     "nodePools[0].minsize: unknown key 'minsize' (did you mean 'minSize'?"),
    ("fraction of a node", lambda c: c["nodePools"][0].update(maxSize=1.5), "nodePools[0].maxSize: must be a whole number (got 1.5)"),
    ("kind-only section on another kind", lambda c: c["nodePools"][1].update(sharing={"policy": "fixed-share"}),
     "nodePools[1].sharing: unknown key 'sharing' ('sharing' is only for pools of kind shared;"),
    ("workload share of the wrong pool kind", lambda c: c.update(workloads=[{
        "name": "triton", "namespace": "inference", "image": {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3"},
        "pool": "a100-mig", "gpu": {"core": 50.0}}]),
     "workloads[0].gpu.core: does not apply to pool a100-mig, which is mig: use gpu.migProfile"),
]


@pytest.mark.parametrize(("case", "change", "line"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_gets_the_same_path_and_message_as_tessera_validate(case: str, change: Any, line: str) -> None:
    inputs = copy.deepcopy(SHARED_AND_MIG)
    change(inputs)
    lines, error = _construct_lines("TkeGpuCluster", inputs)
    assert lines == _validate_lines(inputs)
    assert any(text.startswith(line) for text in lines), lines
    assert line.split(": ")[0] in error.message and "Traceback" not in error.message


def test_bad_input_declares_nothing() -> None:
    from pulumi_program_mocks import start_mocks

    from tessera_pulumi.package.provider import TesseraProvider

    inputs = copy.deepcopy(SHARED_AND_MIG)
    inputs["nodePools"][1]["mig"]["profile"] = {"3g.20gb": 3}
    mocks, _ = start_mocks()
    with pytest.raises(InputsError, match=r"nodePools\[1\]\.mig\.profile: layout uses 9 compute slices; A100-40GB has 7"):
        TesseraProvider().construct("x", "tessera:index:TkeGpuCluster", inputs, pulumi.ResourceOptions())
    assert mocks.resources == []


def test_missing_region_is_named_as_the_packages_input() -> None:
    inputs = copy.deepcopy(SHARED_AND_MIG)
    del inputs["region"]
    lines, _ = _construct_lines("TkeGpuCluster", inputs)
    assert "region: is required for provider tke, e.g. ap-guangzhou" in lines


def test_an_output_where_the_config_must_be_known_is_a_problem_naming_the_field() -> None:
    inputs = copy.deepcopy(SHARED_AND_MIG)
    inputs["cluster"]["name"] = pulumi.Output.from_input("gpu-lab")
    lines, _ = _construct_lines("TkeGpuCluster", inputs)
    assert len(lines) == 1 and lines[0].startswith("cluster.name: must be a plain value known when the component is created")


def test_keys_of_the_other_component_are_refused() -> None:
    inputs = package_inputs("dev")
    lines, _ = _construct_lines("ExistingClusterPlatform", inputs)
    assert "region: unknown key 'region': ExistingClusterPlatform does not take it (it belongs to the other component)" in lines
    inputs = copy.deepcopy(SHARED_AND_MIG)
    inputs["cluster"]["provider"] = "existing"
    lines, _ = _construct_lines("TkeGpuCluster", inputs)
    assert lines == ["cluster.provider: unknown key 'provider': TkeGpuCluster is always provider tke"]


# --- an existing cluster: the kubeconfig from `secrets` ------------------------------------------

KUBECONFIG_TEXT = "apiVersion: v1\nkind: Config\n# lab cluster\n"
EXISTING: dict[str, Any] = {
    "cluster": {"name": "lab", "kubernetesVersion": "1.30.0", "kubeconfig": {"secret": "labKubeconfig"}},
    "nodePools": [{"name": "t4", "kind": "shared", "gpuModel": "T4", "gpuCount": 1.0, "minSize": 1.0, "maxSize": 1.0, "nodeSelector": {"example.com/gpu": "t4"}}],
}


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The lab cluster's nodes, as its API server would list them; records the kubeconfig each list used."""
    from tessera_pulumi import existing

    calls: list[Any] = []

    def list_nodes(resolved: existing.ResolvedKubeconfig) -> list[dict[str, Any]]:
        calls.append(resolved.kubeconfig)
        return [_node("gpu-1", {"example.com/gpu": "t4"}), _node("cpu-1", {})]

    monkeypatch.setattr(existing, "list_cluster_nodes", list_nodes)
    return calls


@pytest.mark.parametrize("form", ["map of secrets", "one secret map"])
def test_existing_cluster_takes_its_kubeconfig_from_secrets_and_keeps_it_secret(form: str, listed: list[Any]) -> None:
    inputs = copy.deepcopy(EXISTING)
    if form == "map of secrets":
        inputs["secrets"] = {"labKubeconfig": pulumi.Output.secret(KUBECONFIG_TEXT)}
    else:  # how a map holding a secret arrives from Pulumi YAML's fn::secret
        inputs["secrets"] = pulumi.Output.secret({"labKubeconfig": KUBECONFIG_TEXT})
    run = construct("ExistingClusterPlatform", inputs, name="lab")
    provider = run.named(K8S_PROVIDER, "lab-k8s")
    assert secret_value(provider.inputs["kubeconfig"]) == KUBECONFIG_TEXT
    assert run.outputs["poolNames"] == ["t4"]
    assert not run.of_type(NODE_POOL)  # no cloud resources for an existing cluster


def test_existing_cluster_without_the_named_secret_says_which_key_to_add() -> None:
    inputs = copy.deepcopy(EXISTING)
    inputs["secrets"] = {"kubeconfig": "wrong key"}
    lines, _ = _construct_lines("ExistingClusterPlatform", inputs)
    assert lines == ["cluster.kubeconfig.secret: names the secret 'labKubeconfig', which secrets does not hold; add it: secrets: {labKubeconfig: <the secret>}"]


@pytest.mark.parametrize("form", ["map of secrets", "one secret map"])
def test_grafanas_admin_password_comes_from_secrets_and_stays_secret(form: str, listed: list[Any]) -> None:
    """kube-prometheus-stack with Grafana: the password named by adminPasswordSecret reaches the
    admin Secret as the caller's secret, never as text made from an output."""
    inputs = copy.deepcopy(EXISTING)
    inputs["monitoring"] = {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"adminPasswordSecret": "grafanaAdmin"}}}
    if form == "map of secrets":
        inputs["secrets"] = {"labKubeconfig": pulumi.Output.secret(KUBECONFIG_TEXT), "grafanaAdmin": pulumi.Output.secret("s3cret-pw")}
    else:
        inputs["secrets"] = pulumi.Output.secret({"labKubeconfig": KUBECONFIG_TEXT, "grafanaAdmin": "s3cret-pw"})
    run = construct("ExistingClusterPlatform", inputs, name="lab")
    (secret,) = [r for r in run.of_type("kubernetes:core/v1:Secret") if r.name.endswith("grafana-admin")]
    assert secret_value(secret.inputs["stringData"])["admin-password"] == "s3cret-pw"


def test_grafana_without_its_password_in_secrets_says_which_key_to_add() -> None:
    inputs = copy.deepcopy(EXISTING)
    inputs["monitoring"] = {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"adminPasswordSecret": "grafanaAdmin"}}}
    inputs["secrets"] = {"labKubeconfig": KUBECONFIG_TEXT}
    lines, _ = _construct_lines("ExistingClusterPlatform", inputs)
    assert lines == [
        "monitoring.kubePrometheusStack.grafana.adminPasswordSecret: names the secret 'grafanaAdmin', which secrets does not hold; add it: secrets: {grafanaAdmin: <the secret>}"
    ]


# --- an existing cluster: the nodes a pool selects get its labels and taints ----------------------

NODE_PATCH = "kubernetes:core/v1:NodePatch"


def _patched(run: Any) -> dict[str, dict[str, str]]:
    return {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"] for r in run.of_type(NODE_PATCH)}


@pytest.mark.parametrize("source", ["path", "secret"])
def test_existing_cluster_patches_the_nodes_its_pools_select(source: str, tmp_path: Any, listed: list[Any]) -> None:
    """As the stack-file program does: the nodes are listed with the cluster's kubeconfig (a file, or
    a secret that arrives as an output) and the selected ones get the pool's labels and taints."""
    inputs = copy.deepcopy(EXISTING)
    if source == "path":
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG_TEXT, encoding="utf-8")
        inputs["cluster"]["kubeconfig"] = {"path": str(kubeconfig)}
    else:
        inputs["secrets"] = {"labKubeconfig": pulumi.Output.secret(KUBECONFIG_TEXT)}
    run = construct("ExistingClusterPlatform", inputs, name="lab")
    assert listed == [str(tmp_path / "kubeconfig") if source == "path" else KUBECONFIG_TEXT]
    patched = _patched(run)
    assert set(patched) == {"gpu-1"}
    assert patched["gpu-1"][LABEL_POOL] == "t4" and patched["gpu-1"][LABEL_POOL_KIND] == "shared"


# A Triton on the MIG pool scaled on the adapter's built-in queue time, and a half-GPU service on the
# shared pool scaled on an External metric it declares, as a YAML or TypeScript program sends them.
WORKLOADS: list[dict[str, Any]] = [
    {
        "name": "triton", "namespace": "inference", "image": {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3"},
        "ports": [{"name": "http", "port": 8000.0}, {"name": "metrics", "port": 8002.0}], "pool": "a100-mig",
        "gpu": {"migProfile": "1g.5gb"}, "metrics": {"port": "metrics"},
        "scaling": {"minReplicas": 1.0, "maxReplicas": 6.0, "metric": {"name": "avg_time_queue_us", "target": "50"}},
    },
    {
        "name": "bert", "namespace": "inference", "image": {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3"},
        "ports": [{"name": "http", "port": 8000.0}], "pool": "a10-shared", "gpu": {"core": 50.0, "memoryMiB": 8192.0},
        "scaling": {"minReplicas": 2.0, "maxReplicas": 4.0, "metric": {
            "name": "bert_requests_per_second", "type": "External", "target": "30",
            "query": {"series": "nv_inference_request_success"}}},
    },
]


def test_workloads_in_the_inputs_are_deployed_with_their_autoscaler_and_adapter_rule() -> None:
    inputs = copy.deepcopy(SHARED_AND_MIG) | {"monitoring": {"prometheusAdapter": True}, "workloads": copy.deepcopy(WORKLOADS)}
    run = construct("TkeGpuCluster", inputs, name="lab")
    objects = run.named(CONFIG_GROUP, "lab-platform-workloads").inputs["objs"]
    found = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for name in ("triton", "bert"):
        assert {("Deployment", name), ("Service", name), ("HorizontalPodAutoscaler", name)} <= found
    limits = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] for o in objects if o["kind"] == "Deployment"}
    # single strategy with time-slicing x2 and no renaming: a 1g.5gb slice is advertised as nvidia.com/gpu
    assert {k: v for k, v in limits["triton"].items() if "/" in k} == {"nvidia.com/gpu": "1"}
    assert {k: v for k, v in limits["bert"].items() if "/" in k} == {"tessera.dev/gpu-core": "50", "tessera.dev/gpu-memory": "8192"}
    adapter = next(r for r in run.of_type(CHART) if r.inputs["chart"] == "prometheus-adapter")
    rules = adapter.inputs["values"]["rules"]
    assert "avg_time_queue_us" in {r["name"]["as"] for r in rules["custom"]}
    assert [r["name"]["as"] for r in rules["external"]] == ["bert_requests_per_second"]
