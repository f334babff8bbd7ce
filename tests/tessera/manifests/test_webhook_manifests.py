"""The webhook's Deployment, RBAC and MutatingWebhookConfiguration: scoped fail-closed admission."""
from __future__ import annotations

import json
from typing import Any

import celpy
import pytest
from nvidia_stack_helpers import find, pool, stack, validate_all, validate_all_for

from tessera.model import StackConfig
from tessera.model import contract
from tessera.cli.main import build_parser
from tessera.manifests.webhook import HOOK_NAME, NAME, QGPU_HOOK_NAME, TLS_SECRET, build_webhook_objects
from tessera.webhook.settings import WebhookSettings


def _config(aliases: bool = False, policy: str = "best-effort", **top: Any) -> StackConfig:
    return stack(
        pool("frac", "shared", sharing={"qgpuAliases": aliases, "policy": policy}),
        pool("frac-b", "shared"),
        pool("whole", "nvidia"),
        **top,
    )


def _hooks(config: StackConfig) -> dict[str, dict[str, Any]]:
    mwc = find(build_webhook_objects(config), "MutatingWebhookConfiguration", NAME)
    return {h["name"]: h for h in mwc["webhooks"]}


def _matches(hook: dict[str, Any], pod_spec: dict[str, Any]) -> bool:
    env = celpy.Environment()
    (condition,) = hook["matchConditions"]
    program = env.program(env.compile(condition["expression"]))
    return bool(program.evaluate({"object": celpy.json_to_cel({"spec": pod_spec})}))


def _container(resources: dict[str, Any] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if resources is not None:
        c["resources"] = resources
    return c


def test_objects_are_schema_valid() -> None:
    validate_all(build_webhook_objects(_config(aliases=True)))


def test_no_shared_pool_no_webhook() -> None:
    assert build_webhook_objects(stack(pool("whole", "nvidia"))) == []


@pytest.mark.parametrize(
    ("spec", "plain_hook", "plain_hook_with_aliases", "qgpu_hook"),
    [
        ({"containers": [_container({"limits": {contract.GPU_CORE: "10"}})]}, True, True, True),
        ({"containers": [_container({"requests": {contract.GPU_MEMORY: "10"}})]}, True, True, True),
        ({"containers": [_container()], "initContainers": [_container({"limits": {contract.GPU_CORE: "5"}})]}, True, True, True),
        ({"containers": [_container({"limits": {contract.QGPU_CORE: "10"}})]}, False, True, True),
        ({"containers": [_container({"limits": {"cpu": "1", contract.NVIDIA_GPU: "1"}})]}, False, False, False),
        ({"containers": [_container()]}, False, False, False),
    ],
    ids=["tessera-limits", "tessera-requests", "init-container", "qgpu", "nvidia-gpu", "no-resources"],
)
def test_only_pods_asking_for_gpu_shares_reach_the_webhook(
    spec: dict[str, Any], plain_hook: bool, plain_hook_with_aliases: bool, qgpu_hook: bool
) -> None:
    without, with_aliases = _hooks(_config(aliases=False)), _hooks(_config(aliases=True))
    assert _matches(without[HOOK_NAME], spec) is plain_hook
    assert _matches(with_aliases[HOOK_NAME], spec) is plain_hook_with_aliases
    assert _matches(with_aliases[QGPU_HOOK_NAME], spec) is qgpu_hook


def test_fail_closed_but_never_for_system_namespaces() -> None:
    hooks = _hooks(_config(webhook={"failurePolicy": "Fail", "timeoutSeconds": 7}))
    for hook in hooks.values():
        assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"], hook["timeoutSeconds"]) == ("Fail", "None", ["v1"], 7)
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", contract.TESSERA_NAMESPACE, "gpu-operator"} <= set(excluded["values"])
        assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}]
    # the two entries split namespaces by the qGPU opt-in label, so no pod is mutated twice
    opt_in = {name: h["namespaceSelector"]["matchExpressions"][1] for name, h in hooks.items()}
    assert opt_in[HOOK_NAME] == {"key": contract.LABEL_NAMESPACE_QGPU_ALIASES, "operator": "NotIn", "values": ["true"]}
    assert opt_in[QGPU_HOOK_NAME] == {"key": contract.LABEL_NAMESPACE_QGPU_ALIASES, "operator": "In", "values": ["true"]}
    assert hooks[HOOK_NAME]["clientConfig"]["service"]["path"] == "/mutate"
    assert hooks[QGPU_HOOK_NAME]["clientConfig"]["service"]["path"] == "/mutate/qgpu"


def test_rbac_is_pinned_to_its_own_secret_and_webhook_configuration() -> None:
    objects = build_webhook_objects(_config())
    assert find(objects, "Role", NAME)["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "patch", "update"], "resourceNames": [TLS_SECRET]}]
    assert find(objects, "ClusterRole", NAME)["rules"] == [
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"], "verbs": ["get", "patch"], "resourceNames": [NAME]}
    ]
    assert "data" not in find(objects, "Secret", TLS_SECRET)  # filled in the cluster, never rendered


def test_settings_configmap_lists_shared_and_opted_in_pools() -> None:
    data = find(build_webhook_objects(_config(aliases=True)), "ConfigMap", NAME)["data"]["webhook.json"]
    settings = WebhookSettings.from_json(json.loads(data))
    assert settings.shared_pools == {"frac", "frac-b"}
    assert settings.qgpu_alias_pools == {"frac"}
    assert settings.tls is not None and settings.tls.dns_names()[2] == f"{NAME}.{contract.TESSERA_NAMESPACE}.svc"


def test_settings_carry_the_stack_gpu_quotas_for_quota_admission() -> None:
    quotas = [{"namespace": "team-a", "gpuCore": 200, "gpuMemoryMiB": 16384}, {"namespace": "team-b", "nvidiaGpu": 2}]
    data = find(build_webhook_objects(_config(quotas=quotas)), "ConfigMap", NAME)["data"]["webhook.json"]
    assert json.loads(data)["quotas"] == {"team-a": {contract.GPU_CORE: 200, contract.GPU_MEMORY: 16384}}  # team-b: no tessera.dev/* limit
    assert WebhookSettings.from_json(json.loads(data)).quotas == {"team-a": {contract.GPU_CORE: 200, contract.GPU_MEMORY: 16384}}


def test_deployment_command_parses_and_settings_change_rolls_the_pods() -> None:
    deployment = find(build_webhook_objects(_config()), "Deployment", NAME)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["command"][1:])
    assert (args.webhook_command, args.port) == ("serve", 8443)
    assert deployment["spec"]["replicas"] == 2
    opted_in = find(build_webhook_objects(_config(aliases=True)), "Deployment", NAME)
    assert opted_in["spec"]["template"]["metadata"]["annotations"] != deployment["spec"]["template"]["metadata"]["annotations"]


def test_isolation_policy_edit_does_not_touch_the_webhook() -> None:
    assert build_webhook_objects(_config(policy="best-effort")) == build_webhook_objects(_config(policy="fixed-share"))


def test_pdb_keeps_one_replica() -> None:
    pdb = find(build_webhook_objects(_config()), "PodDisruptionBudget", NAME)["spec"]
    assert pdb["minAvailable"] == 1


@pytest.mark.parametrize(("version", "scoped"), [("1.27.0", False), ("1.28.0", True), ("1.30.0", True)])
def test_older_clusters_without_match_conditions_fail_open(version: str, scoped: bool) -> None:
    config = stack(pool("frac", "shared"), cluster={"provider": "existing", "name": "t", "kubernetesVersion": version, "kubeconfig": {"path": "~/.kube/config"}})
    objects = build_webhook_objects(config)
    validate_all_for(objects, version)
    for hook in _hooks(config).values():
        assert ("matchConditions" in hook) is scoped
        assert hook["failurePolicy"] == ("Fail" if scoped else "Ignore")
