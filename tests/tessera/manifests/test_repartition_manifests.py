"""Re-partitioning CronJobs, their plan, RBAC and the admission policy that narrows the RBAC."""
from __future__ import annotations

from typing import Any

import celpy
import pytest
from nvidia_stack_helpers import find, pool, stack, validate_all, validate_all_for

from tessera.model import contract
from tessera.cli.main import build_parser
from tessera.manifests.repartition import NAME, build_repartition_objects, cronjob_name
from tessera.repartition import LABEL_MIG_CONFIG_STATE, load_plan

SCHEDULE = [
    {"name": "day", "cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai", "layout": 4},
    {"name": "night", "cron": "0 20 * * 1-5", "timezone": "Asia/Shanghai", "layout": 1},
]
SHARED = pool("frac", "shared", repartition=SCHEDULE)
MIG = pool(
    "infer",
    "mig",
    "A100-40GB",
    mig={"strategy": "mixed", "profile": "all-balanced"},
    repartition=[{"cron": "0 8 * * *", "layout": "all-1g.5gb"}, {"cron": "0 20 * * *", "layout": "all-7g.40gb"}],
)
TIMESLICE = pool("t4", "timeslice", timeSlicing={"replicas": 2}, repartition=[{"cron": "0 9 * * *", "layout": 8}, {"cron": "0 21 * * *", "layout": 1}])


def _objects() -> list[dict[str, Any]]:
    return build_repartition_objects(stack(SHARED, MIG, TIMESLICE, pool("plain", "nvidia")))


def test_objects_are_schema_valid() -> None:
    validate_all(_objects())


def test_one_cronjob_per_entry_with_its_schedule_and_time_zone() -> None:
    objects = _objects()
    day = find(objects, "CronJob", "tessera-rp-frac-0")["spec"]
    assert (day["schedule"], day["timeZone"], day["concurrencyPolicy"]) == ("0 8 * * 1-5", "Asia/Shanghai", "Forbid")
    container = day["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:5] == ["tessera", "repartition", "apply", "--layout-index", "0"]
    cronjobs = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "CronJob")
    assert cronjobs == sorted(
        [f"tessera-rp-{p}-{s}" for p in ("frac", "infer", "t4") for s in ("0", "1", "reconcile")]
    )


def test_cronjob_commands_parse_with_the_real_cli() -> None:
    parser = build_parser()
    for o in _objects():
        if o["kind"] == "CronJob":
            command = o["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
            args = parser.parse_args(command[1:])
            assert args.pool == o["metadata"]["labels"][contract.LABEL_POOL]


def test_plan_carries_the_labels_each_pool_kind_reacts_to() -> None:
    text = find(_objects(), "ConfigMap", NAME)["data"]["plan.json"]
    assert load_plan(text, "frac").layout(0).labels == {contract.LABEL_LAYOUT: "0", contract.LABEL_MAX_SHARES_PER_GPU: "4"}
    assert load_plan(text, "infer").layout(1).labels == {
        contract.LABEL_LAYOUT: "1",
        contract.LABEL_NVIDIA_MIG_CONFIG: "tessera-infer.1",
        contract.LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: "tessera-infer.1",
    }
    assert load_plan(text, "t4").layout(0).labels == {contract.LABEL_LAYOUT: "0", contract.LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: "tessera-t4.0"}
    with pytest.raises(KeyError, match="plain"):
        load_plan(text, "plain")


def test_rbac_is_nodes_get_list_patch_and_pods_list_only() -> None:
    role = find(_objects(), "ClusterRole", NAME)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]


def _node(pool_name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": {contract.LABEL_POOL: pool_name, "kubernetes.io/hostname": "n1", **labels}}, "spec": {"podCIDR": "10.0.0.0/24"}}


def _policy_allows(old: dict[str, Any], new: dict[str, Any]) -> bool:
    policy = find(_objects(), "ValidatingAdmissionPolicy", NAME)["spec"]
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
    return all(bool(env.program(env.compile(v["expression"])).evaluate(activation)) for v in policy["validations"])


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        (_node("infer"), _node("infer", **{contract.LABEL_NVIDIA_MIG_CONFIG: "tessera-infer.0", LABEL_MIG_CONFIG_STATE: "pending", contract.LABEL_LAYOUT: "0"}), True),
        (_node("frac", **{contract.LABEL_MAX_SHARES_PER_GPU: "4"}), _node("frac", **{contract.LABEL_MAX_SHARES_PER_GPU: "1"}), True),
        (_node("infer"), _node("infer", team="x"), False),  # a label it does not manage
        (_node("infer"), {**_node("infer"), "metadata": {"name": "n1", "labels": {contract.LABEL_POOL: "frac"}}}, False),  # moving pools
        (_node("plain"), _node("plain", **{contract.LABEL_LAYOUT: "0"}), False),  # a pool without a schedule
        (_node("infer"), {**_node("infer"), "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": True}}, False),  # cordon
    ],
    ids=["mig-layout", "shares", "foreign-label", "pool-change", "unscheduled-pool", "cordon"],
)
def test_admission_policy_limits_the_job_to_layout_labels(old: dict[str, Any], new: dict[str, Any], allowed: bool) -> None:
    assert _policy_allows(old, new) is allowed


def test_policy_applies_only_to_the_job_identity() -> None:
    policy = find(_objects(), "ValidatingAdmissionPolicy", NAME)["spec"]
    assert policy["matchConditions"] == [
        {"name": "repartition-job-only", "expression": f"request.userInfo.username == 'system:serviceaccount:{contract.TESSERA_NAMESPACE}:{NAME}'"}
    ]
    binding = find(_objects(), "ValidatingAdmissionPolicyBinding", NAME)["spec"]
    assert binding == {"policyName": NAME, "validationActions": ["Deny"]}


def test_long_pool_names_give_valid_cronjob_names() -> None:
    long = "p" * 50
    names = {cronjob_name(long, "0"), cronjob_name(long, "reconcile"), cronjob_name(long + "x", "0")}
    assert len(names) == 3 and all(len(n) <= 52 for n in names)


def test_no_schedule_no_objects() -> None:
    assert build_repartition_objects(stack(pool("plain", "nvidia"), pool("frac", "shared"))) == []


@pytest.mark.parametrize(("version", "policy"), [("1.29.0", False), ("1.30.0", True)])
def test_admission_policy_only_where_it_is_ga(version: str, policy: bool) -> None:
    config = stack(SHARED, cluster={"provider": "existing", "name": "t", "kubernetesVersion": version, "kubeconfig": {"path": "~/.kube/config"}})
    objects = build_repartition_objects(config)
    validate_all_for(objects, version)
    assert any(o["kind"] == "ValidatingAdmissionPolicy" for o in objects) is policy
