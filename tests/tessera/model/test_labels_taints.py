"""Labels and taints per pool kind: what decides which components run on a pool's nodes."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model import MigPool, NvidiaPool, SharedPool, TimeslicePool
from tessera.model.values import check_label_key, check_label_value
from tessera.model.labels_taints import GPUTYPE_BY_KIND, MIG_DISABLED, AnyPool, TaintSpec, pool_labels, pool_taints
from tessera.model.contract import (
    LABEL_GPU_PLACEMENT,
    LABEL_GPUTYPE,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_MEMORY_ENFORCEMENT,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_ONLINE_OFFLINE,
    LABEL_POOL,
    LABEL_POOL_KIND,
    LABEL_SHARING_POLICY,
    TAINT_GPU,
    device_plugin_config_name,
    mig_config_name,
)
from tessera.manifests.existing_nodes import pool_commands


def pool(data: dict[str, Any]) -> AnyPool:
    classes: dict[str, type[AnyPool]] = {"nvidia": NvidiaPool, "shared": SharedPool, "mig": MigPool, "timeslice": TimeslicePool}
    return classes[data["kind"]].model_validate(data)


T4_NVIDIA = {"name": "t4", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "maxSize": 2}
T4_SHARED = {
    "name": "t4-shared",
    "kind": "shared",
    "instanceType": "GN7.2XLARGE32",
    "sharing": {"policy": "fixed-share", "placement": "spread", "onlineOffline": True, "memoryEnforcement": "warn"},
}
A100_MIG = {"name": "a100-mig", "kind": "mig", "instanceType": "GT4.4XLARGE96", "mig": {"strategy": "single", "profile": "all-1g.5gb"}}
A100_NVIDIA = {"name": "a100", "kind": "nvidia", "instanceType": "GT4.4XLARGE96"}
T4_TIMESLICE = {"name": "t4-ts", "kind": "timeslice", "instanceType": "GN7.2XLARGE32", "timeSlicing": {"replicas": 4}}

# pool -> labels that must be present with these values / keys that must be absent
LABEL_TABLE: list[tuple[dict[str, Any], dict[str, str], set[str]]] = [
    (
        T4_NVIDIA,
        {LABEL_POOL: "t4", LABEL_POOL_KIND: "nvidia", LABEL_GPUTYPE: "nvidia"},
        {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_SHARING_POLICY, LABEL_NVIDIA_MIG_CONFIG, LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG},
    ),
    (
        T4_SHARED,
        {
            LABEL_POOL_KIND: "shared",
            LABEL_GPUTYPE: "qgpu",
            LABEL_SHARING_POLICY: "fixed-share",
            LABEL_GPU_PLACEMENT: "spread",
            LABEL_ONLINE_OFFLINE: "true",
            LABEL_MEMORY_ENFORCEMENT: "warn",
            LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: "false",
        },
        {LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG, LABEL_NVIDIA_MIG_CONFIG},
    ),
    (
        A100_MIG,
        {
            LABEL_POOL_KIND: "mig",
            LABEL_NVIDIA_MIG_CONFIG: mig_config_name("a100-mig"),
            LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: device_plugin_config_name("a100-mig"),
        },
        {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_SHARING_POLICY},
    ),
    (A100_NVIDIA, {LABEL_POOL_KIND: "nvidia", LABEL_NVIDIA_MIG_CONFIG: MIG_DISABLED}, {LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG}),
    (
        T4_TIMESLICE,
        {LABEL_POOL_KIND: "timeslice", LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: device_plugin_config_name("t4-ts")},
        {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, LABEL_NVIDIA_MIG_CONFIG},
    ),
]


@pytest.mark.parametrize(("data", "present", "absent"), LABEL_TABLE, ids=[row[0]["name"] for row in LABEL_TABLE])
def test_labels_per_pool_kind(data: dict[str, Any], present: dict[str, str], absent: set[str]) -> None:
    labels = pool_labels(pool(data))
    assert {key: labels.get(key) for key in present} == present
    assert absent.isdisjoint(labels)


def test_shared_pool_without_online_offline_says_false() -> None:
    labels = pool_labels(pool({**T4_SHARED, "sharing": {"policy": "best-effort"}}))
    assert labels[LABEL_ONLINE_OFFLINE] == "false"
    assert labels[LABEL_MEMORY_ENFORCEMENT] == "enforce"


@pytest.mark.parametrize(("shares", "label"), [(1, "1"), (4, "4"), (None, None)])
def test_shares_per_gpu_becomes_the_extenders_cap_label(shares: int | None, label: str | None) -> None:
    sharing: dict[str, Any] = {"policy": "best-effort", **({"sharesPerGpu": shares} if shares else {})}
    p = pool({**T4_SHARED, "nodeSelector": {"gpu": "t4"}, "sharing": sharing})
    assert pool_labels(p).get(LABEL_MAX_SHARES_PER_GPU) == label
    script = " ".join(pool_commands(p))  # provider existing: nodes/label-nodes.sh sets it too
    assert (f"{LABEL_MAX_SHARES_PER_GPU}={label}" in script) is (label is not None)


def test_user_labels_are_kept_next_to_tesseras() -> None:
    labels = pool_labels(pool({**T4_NVIDIA, "labels": {"team": "vision"}}))
    assert labels["team"] == "vision"
    assert labels[LABEL_POOL] == "t4"


@pytest.mark.parametrize("data", [T4_NVIDIA, T4_SHARED, A100_MIG, T4_TIMESLICE], ids=lambda d: d["kind"])
def test_every_gpu_pool_gets_the_gpu_taint_first(data: dict[str, Any]) -> None:
    taints = pool_taints(pool(data))
    assert taints[0] == TaintSpec(TAINT_GPU, data["kind"], "NoSchedule")


def test_user_taints_follow_the_gpu_taint() -> None:
    taints = pool_taints(pool({**T4_NVIDIA, "taints": [{"key": "team", "value": "vision", "effect": "NoExecute"}]}))
    assert taints == (TaintSpec(TAINT_GPU, "nvidia", "NoSchedule"), TaintSpec("team", "vision", "NoExecute"))


def test_every_kind_has_a_gputype_value() -> None:
    assert set(GPUTYPE_BY_KIND) == {"nvidia", "shared", "mig", "timeslice"}
    assert len(set(GPUTYPE_BY_KIND.values())) == 4  # a nodeSelector on gputype picks exactly one kind


# --- properties over generated pools ----------------------------------------------------------------

# TKE limits node pool names to 25 characters; DNS-label pool names within it
POOL_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,23}[a-z0-9]", fullmatch=True)
USER_LABELS = st.dictionaries(st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True), st.from_regex(r"[a-z0-9]{0,12}", fullmatch=True), max_size=3)
SHARING = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(["best-effort", "fixed-share", "burst-share"]),
        "placement": st.sampled_from(["binpack", "spread"]),
        "onlineOffline": st.booleans(),
        "memoryEnforcement": st.sampled_from(["warn", "enforce"]),
    }
)


@st.composite
def pools(draw: st.DrawFn) -> AnyPool:
    kind = draw(st.sampled_from(["nvidia", "shared", "mig", "timeslice"]))
    data: dict[str, Any] = {"name": draw(POOL_NAMES), "kind": kind, "labels": draw(USER_LABELS)}
    if kind == "mig":
        data.update(instanceType="GT4.4XLARGE96", mig={"profile": draw(st.sampled_from(["all-1g.5gb", "all-balanced"]))})
    else:
        data["instanceType"] = draw(st.sampled_from(["GN7.2XLARGE32", "GT4.4XLARGE96", "PNV4.7XLARGE116"]))
    if kind == "shared":
        data["sharing"] = draw(SHARING)
    if kind == "timeslice":
        data["timeSlicing"] = {"replicas": draw(st.integers(2, 16))}
    return pool(data)


@settings(max_examples=60, deadline=None)
@given(pools())
def test_generated_pools_get_valid_labels_that_identify_them(p: AnyPool) -> None:
    labels = pool_labels(p)
    assert [key for key in labels if check_label_key(key)] == []
    assert [value for value in labels.values() if check_label_value(value)] == []
    assert (labels[LABEL_POOL], labels[LABEL_POOL_KIND]) == (p.name, p.kind)
    assert {k: labels[k] for k in p.labels} == p.labels
    # NVIDIA's device plugin runs on a node exactly when the pool is not shared
    assert (labels.get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) != "false") is (p.kind != "shared")


@settings(max_examples=40, deadline=None)
@given(pools())
def test_generated_pools_are_tainted_for_gpu_work_only(p: AnyPool) -> None:
    taints = pool_taints(p)
    assert [t for t in taints if t.key == TAINT_GPU] == [TaintSpec(TAINT_GPU, p.kind, "NoSchedule")]
