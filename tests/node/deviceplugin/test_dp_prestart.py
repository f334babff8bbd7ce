"""PreStartContainer verification: what makes a container start, and every reason it does not."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_ALLOCATION_CONFIGMAP, Allocation, GpuShare, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera_node.deviceplugin.core import Inventory, token_id
from tessera_node.deviceplugin.podresources import TokenHolder
from tessera_node.deviceplugin.prestart import Owner, PreStartRejected, find_owner, verify

NODE = "n1"
INVENTORY = Inventory.of([NodeGpu(0, "GPU-a", "T4", 15360), NodeGpu(1, "GPU-b", "T4", 15360)])
TOKENS: list[str] = [token_id(0, n) for n in range(30)]
SHARE = GpuShare(1, "GPU-b", 30, 4096)


def _pod() -> dict[str, Any]:
    allocation = Allocation(node=NODE, assumed_at="2026-01-01T00:00:00Z", containers={"main": (SHARE,)})
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {ANNOTATION_ALLOCATION: allocation.to_json(), ANNOTATION_ALLOCATION_CONFIGMAP: "cm"}},
        "spec": {"containers": [{"name": "main", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "main.NVIDIA_VISIBLE_DEVICES"}}}]}]},
    }


def _configmaps(value: str = "GPU-b") -> Callable[[str, str], dict[str, Any]]:
    return lambda ns, name: {"data": {"main.NVIDIA_VISIBLE_DEVICES": value}}


def _verify(pod: dict[str, Any], *, tokens: list[str] = TOKENS, configmaps: Callable[[str, str], dict[str, Any]] = _configmaps(), inventory: Inventory = INVENTORY) -> Any:
    return verify(owner=Owner("ns", "p", "main"), tokens=tokens, pod=pod, get_configmap=configmaps, node_name=NODE, inventory=inventory, policy=PoolPolicy())


def test_a_container_with_a_matching_record_is_registered_with_its_own_share() -> None:
    record = _verify(_pod())
    assert (record.pod_uid, record.container, record.shares) == ("u1", "main", (SHARE,))


def _edit(path: str, value: Any) -> dict[str, Any]:
    pod = copy.deepcopy(_pod())
    target: Any = pod
    keys = path.split("|")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is None:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return pod


def _record(**changes: Any) -> str:
    base = {"node": NODE, "assumed_at": "t", "containers": {"main": (SHARE,)}}
    base.update(changes)
    return Allocation(**base).to_json()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pod", "kwargs", "reason"),
    [
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION}", None), {}, "no tessera.dev/allocation record"),
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION}", "{not json"), {}, "unreadable"),
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION}", _record(node="n2")), {}, "not on this node"),
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION}", _record(containers={"other": (SHARE,)})), {}, "has no GPU share"),
        (_pod(), {"tokens": TOKENS[:20]}, "grants 30"),
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION}", _record(containers={"main": (GpuShare(1, "GPU-zzz", 30, 0),)})), {}, "is not on this node"),
        (_pod(), {"inventory": INVENTORY.with_health({1: False})}, "unhealthy"),
        (_edit(f"metadata|annotations|{ANNOTATION_ALLOCATION_CONFIGMAP}", None), {}, "webhook did not admit"),
        (_edit("spec|containers|0|env", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), {}, "does not take NVIDIA_VISIBLE_DEVICES"),
        (_pod(), {"configmaps": _configmaps("GPU-a")}, "allocation record names GPU-b"),
    ],
    ids=["no record", "garbled record", "other node", "other container", "token count", "unknown gpu", "unhealthy gpu", "no configmap", "env not wired", "configmap disagrees"],
)
def test_containers_without_a_matching_allocation_fail_closed(pod: dict[str, Any], kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(PreStartRejected, match=reason):
        _verify(pod, **kwargs)


def test_owner_is_the_container_holding_exactly_the_tokens() -> None:
    holders = [TokenHolder("ns", "a", "main", frozenset(TOKENS[:10])), TokenHolder("ns", "b", "main", frozenset(TOKENS[10:30]))]
    assert find_owner(holders, TOKENS[10:30]) == Owner("ns", "b", "main")
    with pytest.raises(PreStartRejected, match="no container"):
        find_owner(holders, TOKENS[:5])
