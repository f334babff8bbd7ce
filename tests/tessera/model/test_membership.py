"""Which existing nodes join which pool, what blocks them, and what a pool's manager must let go."""
from __future__ import annotations

from typing import Any

import pytest
from config_cases import EXISTING_BASE, edit

from tessera.model import from_pulumi_mapping
from tessera.model.membership import pool_membership

SELECT = {"example.com/gpu-pool": "local"}


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None, managers: dict[str, dict[str, Any]] | None = None, managed: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if managed:
        meta["managedFields"] = [{"manager": m, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": f} for m, f in (managers or {"kubelet": {}}).items()]
    return {"kind": "Node", "metadata": meta, "spec": {"taints": taints or []}}


POOLS = from_pulumi_mapping(EXISTING_BASE).node_pools
OURS = {"f:metadata": {"f:labels": {"f:tessera.dev/pool": {}}}, "f:spec": {"f:taints": {}}}
FOREIGN = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]

CASES = [
    ("every selector label must match", [node("g1", SELECT), node("g2", {"example.com/gpu-pool": "other"})], ["g1"], 0, 0),
    ("the control plane's own taints are left to it", [node("g1", SELECT, [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])], ["g1"], 0, 0),
    ("a taint nobody in the stack set blocks the node", [node("g1", SELECT, FOREIGN)], ["g1"], 1, 0),
    ("a taint list a Tessera pool applied is its own", [node("g1", SELECT, FOREIGN, {"tessera-pool-old": OURS})], ["g1"], 0, 1),
    ("a dump without managedFields only warns", [node("g1", SELECT, FOREIGN, managed=False)], ["g1"], 0, 0),
]


@pytest.mark.parametrize(("nodes", "members", "problems", "releases"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_membership(nodes: list[dict[str, Any]], members: list[str], problems: int, releases: int) -> None:
    membership = pool_membership(POOLS, nodes)
    assert list(membership.nodes_of("local")) == members
    assert len(membership.problems) == problems
    assert len(membership.releases) == releases


def test_a_release_names_what_the_old_pools_manager_owns() -> None:
    (release,) = pool_membership(POOLS, [node("g9", {"tessera.dev/pool": "old"}, FOREIGN, {"tessera-pool-old": OURS})]).releases
    assert (release.pool, release.node, release.labels, release.taints) == ("old", "g9", ("tessera.dev/pool",), True)


def test_fewer_nodes_than_min_size_is_a_note() -> None:
    assert pool_membership(POOLS, []).notes == ("pool local: its selector matches 0 node(s), fewer than minSize 1",)


@pytest.mark.parametrize("key", ["tessera.dev/pool", "gputype", "example.com/team"])
def test_a_selector_on_labels_tessera_sets_is_refused(key: str) -> None:
    from tessera.model import ConfigError

    data = edit(edit(EXISTING_BASE, "nodePools[0].nodeSelector", {key: "local"}), "nodePools[0].labels", {"example.com/team": "local"})
    with pytest.raises(ConfigError) as caught:
        from_pulumi_mapping(data)
    path = f'nodePools[0].nodeSelector["{key}"]' if "/" in key else f"nodePools[0].nodeSelector.{key}"
    assert [p.path for p in caught.value.problems] == [path]
    assert "cannot also select them" in caught.value.problems[0].message
