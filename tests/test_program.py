"""The Pulumi program under Pulumi mocks: which resources each stack declares, with which inputs.

No Pulumi CLI and no cloud: `pulumi.runtime.set_mocks` records every resource registration
(type token, name, inputs with the provider's camelCase keys, provider reference, URN).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs

from components.config import StackConfig, load_stack_file
from components.program import load_config, main
from components.stack import PlatformFactory, TesseraStack
from tessera.contract import LABEL_GPUTYPE, LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_POOL, LABEL_POOL_KIND, TAINT_GPU

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / "stacks"
sys.path.insert(0, str(ROOT / "policies"))  # the policy pack's package is not installed in the main venv
from tessera_policies.rules import PolicySettings, evaluate  # noqa: E402

CLUSTER = "tencentcloud:Kubernetes/cluster:Cluster"
NODE_POOL = "tencentcloud:Kubernetes/nodePool:NodePool"
ENDPOINT = "tencentcloud:Kubernetes/clusterEndpoint:ClusterEndpoint"
RULE_SET = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
K8S_PROVIDER = "pulumi:providers:kubernetes"
FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\n# public endpoint\n"
FAKE_KUBECONFIG_INTRANET = "apiVersion: v1\nkind: Config\n# intranet endpoint\n"


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every registration; the endpoint 'returns' a kubeconfig like TKE does."""

    def __init__(self) -> None:
        self.resources: list[MockResourceArgs] = []

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ == ENDPOINT:
            outputs.update(kubeConfig=FAKE_KUBECONFIG, kubeConfigIntranet=FAKE_KUBECONFIG_INTRANET)
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class RecordingMonitor(MockMonitor):
    """Also records each resource's parent URN, to check the component tree."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.parents: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        self.parents[response.urn] = request.parent
        return response


@dataclass
class Declared:
    """What one program run declared."""

    resources: list[MockResourceArgs]
    parents: dict[str, str]  # urn -> parent urn ("" for the root stack's children)
    values: dict[str, Any] = field(default_factory=dict)

    def of_type(self, typ: str) -> list[MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str) -> MockResourceArgs:
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, got {[r.name for r in found]}"
        return found[0]


def _start() -> tuple[RecordingMocks, RecordingMonitor]:
    mocks = RecordingMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="tessera", stack="test", preview=False, monitor=monitor)
    return mocks, monitor


def declare(config: StackConfig, platform: PlatformFactory | None = None) -> Declared:
    """Run TesseraStack under mocks; also resolve the kubeconfig, its secretness and the cluster id."""
    mocks, monitor = _start()
    values: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        stack = TesseraStack("tessera", config, platform=platform)
        values["plan"] = stack.plan

        async def secret() -> bool:
            return await stack.kubeconfig.is_secret()

        is_secret: pulumi.Output[bool] = pulumi.Output.from_input(secret())  # type: ignore[arg-type]
        return pulumi.Output.all(stack.kubeconfig, stack.cluster_id, is_secret).apply(
            lambda v: values.update(kubeconfig=v[0], cluster_id=v[1], kubeconfig_secret=v[2])
        )

    run()
    return Declared(list(mocks.resources), dict(monitor.parents), values)


def secret_value(value: Any) -> Any:
    """The plain value of a secret input as the mock monitor receives it; fails when it is not secret."""
    assert isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig, f"not a secret: {value!r}"
    return value["value"]


def stack_config(name: str) -> StackConfig:
    return load_stack_file(STACKS / f"Pulumi.{name}.yaml")


@pytest.fixture(scope="module", params=["dev", "prod"])
def tke_stack(request: pytest.FixtureRequest) -> tuple[StackConfig, Declared]:
    config = stack_config(request.param)
    return config, declare(config)


def _pool_by_name(declared: Declared) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs for r in declared.of_type(NODE_POOL)}


# --- TKE stacks: dev and prod ---------------------------------------------------------------------


def test_tke_stack_declares_one_cluster_and_one_node_pool_per_pool(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    cluster = declared.one(CLUSTER)
    assert cluster.inputs["clusterName"] == config.cluster.name
    assert cluster.inputs["clusterVersion"] == config.cluster.kubernetes_version
    assert cluster.inputs["clusterDeployType"] == "MANAGED_CLUSTER"
    pools = _pool_by_name(declared)
    assert set(pools) == {p.name for p in config.node_pools} | {"system"}
    for pool in config.node_pools:
        assert pools[pool.name]["autoScalingConfig"]["instanceType"] == pool.instance_type
    assert pools["system"]["autoScalingConfig"]["instanceType"] == config.cluster.system_nodes.instance_type


def test_every_node_pool_deletes_its_instances_and_keeps_its_bounds(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    pools = _pool_by_name(declared)
    assert all(p["deleteKeepInstance"] is False for p in pools.values())
    for pool in config.node_pools:
        inputs = pools[pool.name]
        assert (inputs["minSize"], inputs["desiredCapacity"], inputs["maxSize"]) == (pool.min_size, pool.desired, pool.max_size)
        assert inputs["enableAutoScale"] is (pool.max_size > pool.min_size)


def test_gpu_pools_carry_kind_labels_and_the_gpu_taint(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    pools = _pool_by_name(declared)
    for pool in config.node_pools:
        inputs = pools[pool.name]
        labels = inputs["labels"]
        assert labels[LABEL_POOL] == pool.name
        assert labels[LABEL_POOL_KIND] == pool.kind
        assert LABEL_GPUTYPE in labels
        # NVIDIA's device plugin is switched off exactly on shared pools
        assert (labels.get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) == "false") is (pool.kind == "shared")
        assert {"key": TAINT_GPU, "value": pool.kind, "effect": "NoSchedule"} in inputs["taints"]
    system = pools["system"]
    assert not system.get("taints") and LABEL_POOL_KIND not in (system.get("labels") or {})


def test_gpu_args_carry_catalog_driver_and_mig_mode(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    pools = _pool_by_name(declared)
    for pool in config.node_pools:
        gpu_args = pools[pool.name]["nodeConfig"]["gpuArgs"]
        software = pool.gpu_software()
        assert gpu_args["driver"]["version"] == software.driver
        assert gpu_args["cuda"]["version"] == software.cuda
        assert gpu_args["migEnable"] is (pool.kind == "mig")
    assert "gpuArgs" not in (pools["system"].get("nodeConfig") or {})


def test_public_endpoint_is_restricted_to_allowed_cidrs(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    endpoint = declared.one(ENDPOINT).inputs
    assert endpoint["clusterInternet"] is config.cluster.endpoint.public
    assert endpoint["clusterInternetSecurityGroup"] == "tessera-cluster-network-apiserver-id"
    api_rules = next(r for r in declared.of_type(RULE_SET) if r.inputs["securityGroupId"] == endpoint["clusterInternetSecurityGroup"])
    accepted = [(rule["cidrBlock"], rule["port"]) for rule in api_rules.inputs["ingresses"] if rule["action"] == "ACCEPT"]
    assert accepted == [(cidr, "443") for cidr in config.cluster.endpoint.allowed_cidrs]
    assert api_rules.inputs["ingresses"][-1]["action"] == "DROP"


def test_kubeconfig_comes_from_the_endpoint_and_is_secret(tke_stack: tuple[StackConfig, Declared]) -> None:
    _, declared = tke_stack
    assert declared.values["kubeconfig"] == FAKE_KUBECONFIG  # public endpoint in dev and prod
    assert declared.values["kubeconfig_secret"] is True
    assert declared.values["cluster_id"] == "tessera-cluster-id"
    provider = declared.one(K8S_PROVIDER)
    assert secret_value(provider.inputs["kubeconfig"]) == FAKE_KUBECONFIG


def test_every_resource_is_a_child_of_the_one_top_level_component(tke_stack: tuple[StackConfig, Declared]) -> None:
    _, declared = tke_stack
    tops = [urn for urn in declared.parents if urn.split("::")[-2].endswith("tessera:index:TesseraStack")]
    assert len(tops) == 1
    for urn in declared.parents:
        if urn.split("::")[-2] == "pulumi:pulumi:Stack":
            continue
        chain = [urn]
        while chain[-1] != tops[0] and declared.parents.get(chain[-1]) in declared.parents:
            chain.append(declared.parents[chain[-1]])
        assert chain[-1] == tops[0], f"{urn} is not under TesseraStack"


def test_declared_resources_pass_the_policy_pack(tke_stack: tuple[StackConfig, Declared]) -> None:
    _, declared = tke_stack
    violations = [(r.name, v) for r in declared.resources for v in evaluate(r.typ, r.inputs, PolicySettings())]
    assert violations == []


def test_plan_output_counts_gpus(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    plan = declared.values["plan"]
    expected_max = sum(p.max_size * p.gpus_per_node() for p in config.node_pools)
    assert plan["totalGpus"]["max"] == expected_max
    assert [p["name"] for p in plan["pools"]] == [p.name for p in config.node_pools]


def test_prod_places_pools_in_their_zones() -> None:
    config = stack_config("prod")
    declared = declare(config)
    pools = _pool_by_name(declared)
    subnet_id = {s.zone: f"tessera-cluster-network-subnet-{s.zone}-id" for s in config.cluster.subnets}
    for pool in config.node_pools:
        zones = pool.zones or [s.zone for s in config.cluster.subnets]
        assert pools[pool.name]["subnetIds"] == [subnet_id[z] for z in zones]


# --- existing cluster --------------------------------------------------------------------------


def test_existing_cluster_declares_no_cloud_resource_and_uses_the_kubeconfig_path() -> None:
    config = stack_config("local")
    declared = declare(config)
    assert [r.typ for r in declared.resources if r.typ.startswith("tencentcloud:")] == []
    provider = declared.one(K8S_PROVIDER)
    assert secret_value(provider.inputs["kubeconfig"]) == str(Path("~/.kube/config").expanduser())
    assert declared.values["kubeconfig_secret"] is True


# --- the in-cluster platform -------------------------------------------------------------------


class _FakePlatform(pulumi.ComponentResource):
    """Stands in for components.platform.TesseraPlatform: one ConfigMap through the inherited provider."""

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tessera:index:FakePlatform", name, None, opts)
        k8s.core.v1.ConfigMap(f"{name}-probe", data={"pools": str(len(config.node_pools))}, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


def test_platform_resources_use_the_kubeconfig_provider() -> None:
    declared = declare(stack_config("dev"), platform=_FakePlatform)
    probe = declared.one("kubernetes:core/v1:ConfigMap")
    assert probe.provider is not None and "pulumi:providers:kubernetes::tessera-k8s" in probe.provider


def test_the_real_platform_component_is_wired_with_the_kubeconfig_provider() -> None:
    import components.platform as platform_package

    if not hasattr(platform_package, "TesseraPlatform"):
        pytest.fail("components.platform.TesseraPlatform is missing: the stack deploys no in-cluster platform")
    declared = declare(stack_config("dev"))
    k8s_resources = [r for r in declared.resources if r.typ.startswith("kubernetes:")]
    assert k8s_resources, "the platform declared no Kubernetes resource"
    assert all(r.provider and "pulumi:providers:kubernetes::tessera-k8s" in r.provider for r in k8s_resources)


# --- the program entry point: config -> validation -> resources ---------------------------------


def _engine_config(stack: str) -> dict[str, str]:
    """The stack file's config as the engine hands it to a program: key -> JSON text for objects."""
    import yaml

    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in document["config"].items()}


def _run_main(config: dict[str, str]) -> tuple[RecordingMocks, list[str], BaseException | None]:
    mocks, _ = _start()
    errors: list[str] = []
    pulumi.runtime.set_all_config(config)
    original = pulumi.log.error
    pulumi.log.error = lambda msg, *args, **kwargs: errors.append(msg)  # type: ignore[assignment]
    failure: BaseException | None = None
    try:
        pulumi.runtime.test(main)()
    except pulumi.RunError as err:
        failure = err
    finally:
        pulumi.log.error = original
        pulumi.runtime.set_all_config({})
    return mocks, errors, failure


def test_program_reads_the_engine_config_and_declares_the_stack() -> None:
    mocks, errors, failure = _run_main(_engine_config("dev"))
    assert failure is None and errors == []
    assert len([r for r in mocks.resources if r.typ == NODE_POOL]) == len(stack_config("dev").node_pools) + 1


BAD_CONFIGS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("misspelt key", lambda c: c.update({"tessera:nodepools": c.pop("tessera:nodePools")}), "nodepools"),
    ("min above max", lambda c: c["tessera:nodePools"][0].update(minSize=3, maxSize=1), "nodePools[0].maxSize"),
    ("world-open endpoint", lambda c: c["tessera:cluster"]["endpoint"].update(allowedCidrs=["0.0.0.0/0"]), "cluster.endpoint.allowedCidrs[0]"),
]


@pytest.mark.parametrize(("case", "mutate", "path"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_stops_the_program_before_any_resource(case: str, mutate: Callable[[dict[str, Any]], None], path: str) -> None:
    import yaml

    document = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())["config"]
    mutate(document)
    mocks, errors, failure = _run_main({k: v if isinstance(v, str) else json.dumps(v) for k, v in document.items()})
    assert isinstance(failure, pulumi.RunError)
    assert mocks.resources == []
    assert any(line.startswith(path) for line in errors), errors
    assert "Traceback" not in str(failure)


def test_load_config_reports_every_problem_as_path_and_message() -> None:
    _start()
    pools = [{"name": "a", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "minSize": 2, "maxSize": 1}]
    with pytest.raises(pulumi.RunError) as caught:
        load_config({"tessera:cluster": json.dumps({"provider": "tke", "name": "x"}), "tessera:nodePools": json.dumps(pools)})
    text = str(caught.value)
    assert "cluster.kubernetesVersion: " in text and "nodePools[0].maxSize: " in text
