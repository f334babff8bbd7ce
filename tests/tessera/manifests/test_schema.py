"""Every rendered object of every stack is valid for the stack's Kubernetes version (strict schemas)."""
from __future__ import annotations

import copy
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml

from tessera.model.contract import EXTENDER_PORT, EXTENDER_SERVICE, GPU_CORE, GPU_MEMORY, SCHEDULER_NAME
from tessera.manifests import scheduler

from manifests_helpers import BuiltStack

# Custom resources have no schema in kubernetes-validate; each skip names why it is still safe.
SKIPPED_KINDS: Final = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "prometheus-operator CRD; the fields used are checked in test_monitoring",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheus-operator CRD; the fields used are checked in test_monitoring, the rules by promtool",
    ("monitoring.coreos.com/v1", "PodMonitor"): "prometheus-operator CRD; the fields used are checked in test_inference_workloads",
    ("nvidia.com/v1", "ClusterPolicy"): "gpu-operator CRD, created by its Helm chart from validated values",
}
# Fields of the kube-scheduler Extender type (kubescheduler.config.k8s.io/v1, pkg/scheduler/apis/config/v1).
EXTENDER_FIELDS: Final = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
}


def test_every_object_validates_strictly(stack: BuiltStack) -> None:
    problems = []
    for component, obj in stack.objects():
        key = (obj["apiVersion"], obj["kind"])
        if key in SKIPPED_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, stack.kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{component}: {obj['kind']}/{obj['metadata']['name']}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{component}: {obj['kind']} {obj['apiVersion']}: no schema and not in SKIPPED_KINDS")
    assert problems == []


def test_only_listed_custom_kinds_are_skipped(stack: BuiltStack) -> None:
    builtin_groups = ("v1", "apps/", "autoscaling/", "batch/", "policy/", "rbac.", "scheduling.", "admissionregistration.", "coordination.", "networking.")
    custom = {(o["apiVersion"], o["kind"]) for _, o in stack.objects() if not o["apiVersion"].startswith(builtin_groups)}
    assert custom <= set(SKIPPED_KINDS)


@pytest.mark.parametrize(
    "path, value",
    [
        (("spec", "template", "spec", "containers", 0, "imagePullPolicyy"), "Always"),  # typo'd key
        (("spec", "replicas"), "one"),  # wrong type
    ],
)
def test_the_validator_catches_a_broken_deployment(all_stacks: list[BuiltStack], path: tuple[object, ...], value: object) -> None:
    built = next(s for s in all_stacks if s.config.pools_of_kind("shared"))
    deployment = copy.deepcopy(built.find("Deployment", EXTENDER_SERVICE))
    target = deployment
    for step in path[:-1]:
        target = target[step]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, built.kubernetes_version, strict=True)


def _scheduler_config(stack: BuiltStack) -> dict[str, Any]:
    cm = stack.find("ConfigMap", f"{SCHEDULER_NAME}-config")
    loaded: dict[str, Any] = yaml.safe_load(cm["data"][scheduler.CONFIG_KEY])
    return loaded


def test_kube_scheduler_configuration_wires_the_extender(stack: BuiltStack) -> None:
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool: no second scheduler")
    cfg = _scheduler_config(stack)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == [SCHEDULER_NAME]
    ext, *dra = cfg["extenders"]
    # a second entry, prioritize only, for pods on dra pools (/dra/prioritize)
    assert len(dra) == (1 if any(p.allocation == "dra" for p in stack.config.pools_of_kind("shared")) else 0)
    assert all(set(e) <= EXTENDER_FIELDS and e["urlPrefix"] == ext["urlPrefix"] + "/dra" and "managedResources" not in e for e in dra)
    assert set(ext) <= EXTENDER_FIELDS
    # without preemptVerb kube-scheduler never calls /preempt and evicts by a node-wide gpu-core sum
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"], ext["preemptVerb"]) == ("filter", "prioritize", "bind", "preempt")
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False and ext["enableHTTPS"] is False
    assert ext["weight"] == stack.config.scheduler.weight
    assert ext["httpTimeout"] == scheduler.go_duration(stack.config.scheduler.http_timeout_seconds)
    # the extender stops deciding /preempt well before kube-scheduler stops waiting for it
    deployment = stack.find("Deployment", EXTENDER_SERVICE)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    budget = float(command[command.index("--preempt-budget") + 1])
    assert 0 < budget <= 0.5 * stack.config.scheduler.http_timeout_seconds
    assert ext["managedResources"] == [
        {"name": GPU_CORE, "ignoredByScheduler": False},
        {"name": GPU_MEMORY, "ignoredByScheduler": False},
    ]
    # the URL names the rendered Service and its port
    service = stack.find("Service", EXTENDER_SERVICE)
    ns = service["metadata"]["namespace"]
    assert ext["urlPrefix"] == f"http://{EXTENDER_SERVICE}.{ns}.svc:{EXTENDER_PORT}"
    assert [p["port"] for p in service["spec"]["ports"]] == [EXTENDER_PORT]


def test_leader_election_lease_is_the_one_the_role_allows(stack: BuiltStack) -> None:
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool: no second scheduler")
    election = _scheduler_config(stack)["leaderElection"]
    assert election["leaderElect"] is True
    role = stack.find("Role", f"{SCHEDULER_NAME}:leader-election")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [election["resourceName"]]
    assert role["metadata"]["namespace"] == election["resourceNamespace"]


@pytest.mark.parametrize(("seconds", "text"), [(5.0, "5s"), (1.5, "1500ms"), (30, "30s")])
def test_http_timeout_is_a_go_duration(seconds: float, text: str) -> None:
    assert scheduler.go_duration(seconds) == text


def test_no_two_objects_share_an_identity(stack: BuiltStack) -> None:
    """Pulumi and kubectl would fight over a duplicated Kind/namespace/name."""
    from tessera.manifests.objects import object_id

    ids = [object_id(o) for _, o in stack.objects()]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []
