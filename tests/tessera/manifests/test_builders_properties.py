"""Properties of the sharing-stack builders over generated settings (hypothesis).

For any set of shared pools and scheduler settings: object identities are unique, the pools
ConfigMap round-trips every pool's settings, and editing one pool's sharing settings changes
exactly one line of one object.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pool_policy_strategies import pool_policies

from tessera.model.contract import POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY
from tessera.manifests import extender, network, node, platform, scheduler
from tessera.manifests.objects import KubeObject, object_id
from tessera.manifests.settings import PlatformSettings, SchedulerSettings, SharedPool
from tessera.model.pool_policy import policy_from_entry

pool_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
shared_pool = st.builds(
    SharedPool,
    name=pool_names,
    policy=pool_policies,
    shares_from_labels=st.booleans(),
)
platforms = st.builds(
    PlatformSettings,
    kubernetes_version=st.just("1.30.0"),
    tessera_image=st.just("ghcr.io/tessera-gpu/tessera:0.1.0"),
    kube_scheduler_image=st.just("registry.k8s.io/kube-scheduler:v1.30.0"),
    shared_pools=st.lists(shared_pool, min_size=1, max_size=4, unique_by=lambda p: p.name).map(tuple),
    scheduler=st.builds(
        SchedulerSettings,
        placement=st.sampled_from(["binpack", "spread", "fragmentation-aware"]),
        replicas=st.integers(min_value=1, max_value=5),
        weight=st.integers(min_value=1, max_value=100),
        http_timeout_seconds=st.sampled_from([0.5, 1.0, 5.0, 30.0]),
    ),
)
edits: st.SearchStrategy[tuple[str, list[Any]]] = st.sampled_from(
    [
        ("sharing", ["best-effort", "fixed-share", "burst-share"]),
        ("placement", ["binpack", "spread"]),
        ("online_offline", [True, False]),
        ("memory_enforcement", ["warn", "enforce"]),
    ]
)


def _objects(s: PlatformSettings) -> dict[str, KubeObject]:
    objs: list[KubeObject] = [
        *platform.build_platform_objects(s),
        *extender.build_extender_objects(s),
        *scheduler.build_scheduler_objects(s),
        *node.build_node_objects(s),
    ]
    for policies in network.build_network_policies(s).values():
        objs.extend(policies)
    ids = [object_id(o) for o in objs]
    assert len(ids) == len(set(ids)), "duplicate object identity"
    return dict(zip(ids, objs, strict=True))


def _pools_doc(objs: dict[str, KubeObject]) -> str:
    cm = next(o for oid, o in objs.items() if oid.startswith("ConfigMap/") and oid.endswith(f"/{POOLS_CONFIGMAP}"))
    text: str = cm["data"][POOLS_CONFIGMAP_KEY]
    return text


@settings(max_examples=40, deadline=None)
@given(platforms)
def test_pools_configmap_round_trips_every_pool(s: PlatformSettings) -> None:
    doc = json.loads(_pools_doc(_objects(s)))
    assert {name: policy_from_entry(entry) for name, entry in doc.items()} == {
        p.name: p.policy if not p.shares_from_labels else dataclasses.replace(p.policy, shares_per_gpu=None) for p in s.shared_pools
    }
    assert all(("sharesPerGpu" in doc[p.name]) is not p.shares_from_labels for p in s.shared_pools), "re-partitioned pools leave it to the label"


@settings(max_examples=40, deadline=None)
@given(platforms, st.data())
def test_editing_one_pool_changes_one_line_of_one_object(s: PlatformSettings, data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(s.shared_pools) - 1))
    field, values = data.draw(edits)
    pool = s.shared_pools[index]
    new_value: Any = data.draw(st.sampled_from([v for v in values if v != getattr(pool.policy, field)]))
    edited_pools = list(s.shared_pools)
    edited_pools[index] = dataclasses.replace(pool, policy=dataclasses.replace(pool.policy, **{field: new_value}))
    before, after = _objects(s), _objects(dataclasses.replace(s, shared_pools=tuple(edited_pools)))
    assert before.keys() == after.keys()
    changed = [oid for oid in before if before[oid] != after[oid]]
    assert len(changed) == 1 and changed[0].endswith(f"/{POOLS_CONFIGMAP}")
    old_lines, new_lines = _pools_doc(before).splitlines(), _pools_doc(after).splitlines()
    assert sum(a != b for a, b in zip(old_lines, new_lines, strict=True)) == 1


@settings(max_examples=25, deadline=None)
@given(platforms)
def test_scheduler_settings_reach_the_extender_entry(s: PlatformSettings) -> None:
    cfg = scheduler.scheduler_configuration(s)
    (ext,) = cfg["extenders"]
    assert ext["weight"] == s.scheduler.weight
    assert ext["httpTimeout"] in (scheduler.go_duration(s.scheduler.http_timeout_seconds),)
    deployment = _objects(s)[f"Deployment/{s.namespace}/{scheduler.NAME}"]
    assert deployment["spec"]["replicas"] == s.scheduler.replicas
    command = _objects(s)[f"Deployment/{s.namespace}/{extender.NAME}"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--placement") + 1] == s.scheduler.placement
