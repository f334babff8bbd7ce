"""The Pulumi program under Pulumi mocks: which resources each stack declares, with which inputs.

No Pulumi CLI and no cloud (harness: tests/support/pulumi_program_mocks.py).
"""
from __future__ import annotations

import json
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime
import pulumi_kubernetes as k8s
import pytest
import yaml
from pulumi.runtime.settings import get_root_resource
from pulumi_program_mocks import (
    CLUSTER,
    ENDPOINT,
    FAKE_KUBECONFIG,
    FAKE_KUBECONFIG_INTRANET,
    K8S_PROVIDER,
    NODE_POOL,
    ROOT,
    RULE_SET,
    STACKS,
    Declared,
    RecordingMocks,
    config_with,
    declare,
    secret_value,
    stack_config,
    start_mocks,
)

from tessera.model import StackConfig
from tessera_pulumi.program import load_config
from tessera.model.contract import LABEL_GPUTYPE, LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_POOL, LABEL_POOL_KIND, TAINT_GPU

sys.path.insert(0, str(ROOT / "policies"))  # the policy pack's package is not installed in the main venv
from tessera_policies.rules import PolicySettings, evaluate  # noqa: E402


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
        assert gpu_args["driver"] == {"version": software.driver.version, "name": software.driver.name}
        assert gpu_args["cuda"] == {"version": software.cuda.version, "name": software.cuda.name}
        assert gpu_args["cudnn"]["name"] == software.cudnn.name
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
    config, declared = tke_stack
    settings = PolicySettings(require_image_digests=config.images.require_digests)  # as `tessera images policy-config` sets it
    violations = [(r.name, v) for r in declared.resources for v in evaluate(r.typ, r.inputs, settings)]
    assert violations == []


def test_plan_output_is_tessera_plan_and_counts_gpus(tke_stack: tuple[StackConfig, Declared]) -> None:
    config, declared = tke_stack
    plan = declared.values["plan"]
    expected_max = sum(p.max_size * p.gpus_per_node() for p in config.node_pools)
    assert plan["totals"]["gpus"]["max"] == expected_max
    assert [p["name"] for p in plan["pools"]] == [p.name for p in config.node_pools]


def test_prod_places_pools_in_their_zones() -> None:
    config = stack_config("prod")
    declared = declare(config)
    pools = _pool_by_name(declared)
    subnet_id = {s.zone: f"tessera-cluster-network-subnet-{s.zone}-id" for s in config.cluster.subnets}
    for pool in config.node_pools:
        zones = pool.zones or [s.zone for s in config.cluster.subnets]
        assert pools[pool.name]["subnetIds"] == [subnet_id[z] for z in zones]


def test_private_cluster_uses_the_intranet_kubeconfig_and_opens_nothing_public() -> None:
    config = config_with("dev", lambda c: c["tessera:cluster"].update(endpoint={"public": False}))
    declared = declare(config)
    endpoint = declared.one(ENDPOINT).inputs
    assert endpoint["clusterInternet"] is False and "clusterInternetSecurityGroup" not in endpoint
    assert endpoint["clusterIntranet"] is True
    assert [r.name for r in declared.of_type(RULE_SET)] == ["tessera-cluster-network-nodes-rules"]
    assert declared.values["kubeconfig"] == FAKE_KUBECONFIG_INTRANET
    assert declared.values["kubeconfig_secret"] is True


def _cloud_inputs(declared: Declared) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.typ, r.name): r.inputs for r in declared.resources if not r.typ.startswith("kubernetes:")}


def _label_change(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config["tessera:nodePools"][1]["sharing"][key] = value  # dev's t4-shared pool

    return change


POLICY_EDITS = [("placement", "spread", "tessera.dev/gpu-placement"), ("policy", "best-effort", "tessera.dev/sharing-policy")]


@pytest.mark.parametrize(("key", "value", "label"), POLICY_EDITS, ids=[e[0] for e in POLICY_EDITS])
def test_a_sharing_policy_edit_changes_only_that_pools_label(key: str, value: str, label: str) -> None:
    before = _cloud_inputs(declare(stack_config("dev")))
    after = _cloud_inputs(declare(config_with("dev", _label_change(key, value))))
    assert before.keys() == after.keys()
    changed = [name for name in before if before[name] != after[name]]
    assert changed == [(NODE_POOL, "tessera-cluster-t4-shared")]
    old, new = before[changed[0]], after[changed[0]]
    assert {k for k in old if old[k] != new[k]} == {"labels"}
    assert {k for k in old["labels"] if old["labels"][k] != new["labels"][k]} == {label}
    assert new["labels"][label] == value


def test_resizing_a_pool_changes_only_its_bounds() -> None:
    before = _cloud_inputs(declare(stack_config("dev")))
    after = _cloud_inputs(declare(config_with("dev", lambda c: c["tessera:nodePools"][1].update(maxSize=6))))
    changed = {name: {k for k in before[name] if before[name][k] != after[name].get(k)} for name in before if before[name] != after[name]}
    assert changed == {(NODE_POOL, "tessera-cluster-t4-shared"): {"maxSize"}}


# --- existing cluster --------------------------------------------------------------------------


def test_existing_cluster_declares_no_cloud_resource_and_uses_the_kubeconfig_path() -> None:
    config = stack_config("local")
    declared = declare(config)
    assert [r.typ for r in declared.resources if r.typ.startswith("tencentcloud:")] == []
    provider = declared.one(K8S_PROVIDER)
    assert secret_value(provider.inputs["kubeconfig"]) == str(Path("~/.kube/config").expanduser())
    assert declared.values["kubeconfig_secret"] is True


def test_existing_cluster_reads_a_kubeconfig_secret_from_stack_config() -> None:
    config = config_with("local", lambda c: c["tessera:cluster"].update(kubeconfig={"secret": "kubeconfig"}, context="kind-tessera"))
    declared = declare(config, secrets={"tessera:kubeconfig": FAKE_KUBECONFIG})
    provider = declared.one(K8S_PROVIDER)
    assert secret_value(provider.inputs["kubeconfig"]) == FAKE_KUBECONFIG
    assert provider.inputs["context"] == "kind-tessera"


def test_existing_cluster_without_its_secret_stops_with_the_command_to_run() -> None:
    config = config_with("local", lambda c: c["tessera:cluster"].update(kubeconfig={"secret": "kubeconfig"}))
    with pytest.raises(pulumi.RunError, match="pulumi config set --secret tessera:kubeconfig"):
        declare(config)


# --- the in-cluster platform -------------------------------------------------------------------


class _FakePlatform(pulumi.ComponentResource):
    """Stands in for tessera_pulumi.platform.TesseraPlatform: one ConfigMap through the inherited provider."""

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None, secrets: Any = None) -> None:
        super().__init__("tessera:index:FakePlatform", name, None, opts)
        k8s.core.v1.ConfigMap(f"{name}-probe", data={"pools": str(len(config.node_pools))}, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


def test_platform_resources_use_the_kubeconfig_provider() -> None:
    declared = declare(stack_config("dev"), platform=_FakePlatform)
    probe = declared.one("kubernetes:core/v1:ConfigMap")
    assert probe.provider is not None and "pulumi:providers:kubernetes::tessera-k8s" in probe.provider


def test_the_real_platform_component_is_wired_with_the_kubeconfig_provider() -> None:
    declared = declare(stack_config("dev"))
    k8s_resources = [r for r in declared.resources if r.typ.startswith("kubernetes:")]
    assert k8s_resources, "the platform declared no Kubernetes resource"
    assert all(r.provider and "pulumi:providers:kubernetes::tessera-k8s" in r.provider for r in k8s_resources)


# --- the program entry point: config -> validation -> resources ---------------------------------


def _engine_config(stack: str) -> dict[str, str]:
    """The stack file's config as the engine hands it to a program: key -> JSON text for objects."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in document["config"].items()}


def _run_program_file() -> None:
    # the real __main__.py, as `pulumi up` runs it: it reads the engine config and calls main()
    runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")


def _run_main(config: dict[str, str]) -> tuple[RecordingMocks, list[str], BaseException | None]:
    mocks, _ = start_mocks()
    errors: list[str] = []
    pulumi.runtime.set_all_config(config)
    original = pulumi.log.error
    pulumi.log.error = lambda msg, *args, **kwargs: errors.append(msg)  # type: ignore[assignment]
    failure: BaseException | None = None
    try:
        pulumi.runtime.test(_run_program_file)()
    except pulumi.RunError as err:
        failure = err
    finally:
        pulumi.log.error = original
        pulumi.runtime.set_all_config({})
    return mocks, errors, failure


def test_program_reads_the_engine_config_declares_the_stack_and_exports() -> None:
    mocks, errors, failure = _run_main(_engine_config("dev"))
    assert failure is None and errors == []
    assert len([r for r in mocks.resources if r.typ == NODE_POOL]) == len(stack_config("dev").node_pools) + 1
    stack = get_root_resource()
    assert stack is not None
    outputs: dict[str, Any] = stack.outputs  # type: ignore[attr-defined]
    assert set(outputs) == {"clusterId", "kubeconfig", "poolNames", "plan"}
    assert outputs["poolNames"] == ["t4-exclusive", "t4-shared"]
    assert outputs["plan"]["cluster"] == "tessera-dev"


BAD_CONFIGS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("misspelt key", lambda c: c.update({"tessera:nodepools": c.pop("tessera:nodePools")}), "nodepools"),
    ("min above max", lambda c: c["tessera:nodePools"][0].update(minSize=3, maxSize=1), "nodePools[0].maxSize"),
    ("world-open endpoint", lambda c: c["tessera:cluster"]["endpoint"].update(allowedCidrs=["0.0.0.0/0"]), "cluster.endpoint.allowedCidrs[0]"),
    # a misspelt namespace used to drop the quotas silently while validation said ok
    ("misspelt namespace", lambda c: c.update({"tesera:quotas": c.pop("tessera:quotas")}), "tesera:quotas: unknown config namespace 'tesera' (did you mean 'tessera:quotas'?"),
    ("foreign namespace", lambda c: c.update({"foo:bar": "1"}), "foo:bar: unknown config namespace 'foo'"),
]


@pytest.mark.parametrize(("case", "mutate", "path"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_stops_the_program_before_any_resource(case: str, mutate: Callable[[dict[str, Any]], None], path: str) -> None:
    document = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())["config"]
    mutate(document)
    mocks, errors, failure = _run_main({k: v if isinstance(v, str) else json.dumps(v) for k, v in document.items()})
    assert isinstance(failure, pulumi.RunError)
    assert mocks.resources == []
    assert any(line.startswith(path) for line in errors), errors
    assert "Traceback" not in str(failure)


def test_provider_and_pulumi_config_keys_reach_no_validation_error() -> None:
    config = _engine_config("dev") | {"kubernetes:enableServerSideApply": "true", "pulumi:tags": json.dumps({"team": "gpu"})}
    mocks, errors, failure = _run_main(config)
    assert failure is None and errors == []
    assert mocks.resources


def test_load_config_logs_every_problem_as_path_and_message() -> None:
    start_mocks()
    pools = [{"name": "a", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "minSize": 2, "maxSize": 1}]
    logged: list[str] = []
    original = pulumi.log.error
    pulumi.log.error = lambda msg, *args, **kwargs: logged.append(msg)  # type: ignore[assignment]
    try:
        with pytest.raises(pulumi.RunError, match=r"\d+ problems .*tessera validate stacks/Pulumi.test.yaml"):
            load_config({"tessera:cluster": json.dumps({"provider": "tke", "name": "x"}), "tessera:nodePools": json.dumps(pools)})
    finally:
        pulumi.log.error = original
    assert any(line.startswith("cluster.kubernetesVersion: ") for line in logged)
    assert any(line.startswith("nodePools[0].maxSize: ") for line in logged)


def test_prod_hands_grafanas_password_from_its_pulumi_secret_to_the_cluster_as_a_secret() -> None:
    declared = declare(stack_config("prod"), secrets={"tessera:grafanaAdminPassword": "s3cret-from-config"})
    (secret,) = [r for r in declared.of_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == "tessera-grafana-admin"]
    assert secret_value(secret.inputs["stringData"]) == {"admin-user": "admin", "admin-password": "s3cret-from-config"}
    chart = next(r for r in declared.of_type("kubernetes:helm.sh/v4:Chart") if r.inputs["chart"] == "kube-prometheus-stack")
    assert "s3cret-from-config" not in json.dumps(chart.inputs["values"])


def test_prod_without_grafanas_password_stops_before_deploying_with_the_command_to_set_it() -> None:
    with pytest.raises(Exception, match=r"pulumi config set --secret tessera:grafanaAdminPassword"):
        declare(stack_config("prod"), secrets={})
