"""Checks a test runs against the API server's final state: what the cluster would actually run."""
from __future__ import annotations

from collections import defaultdict

from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_ALLOCATION_CONFIGMAP, Allocation
from tessera.kube.fake import FakeKubeApi
from tessera.model.allocation_record import configmap_name

_TERMINAL = ("Succeeded", "Failed")


def audit(api: FakeKubeApi, *, gpu_memory_mib: int) -> dict[tuple[str, str], int]:
    """Core percent recorded per (node, GPU uuid) over live pods; asserts every safety property."""
    core: dict[tuple[str, str], int] = defaultdict(int)
    memory: dict[tuple[str, str], int] = defaultdict(int)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    whole: set[tuple[str, str]] = set()
    for pod in api.list_pods():
        meta = pod["metadata"]
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        text = (meta.get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        bound = pod["spec"].get("nodeName")
        if not text:
            assert not bound, f"{meta['name']} is bound to {bound} without an allocation record"
            continue
        allocation = Allocation.from_json(text)
        assert bound in (None, allocation.node), f"{meta['name']} bound to {bound}, record names {allocation.node}"
        if bound:
            cm = api.get_configmap(meta["namespace"], configmap_name(pod))
            assert meta["annotations"][ANNOTATION_ALLOCATION_CONFIGMAP] == cm["metadata"]["name"]
            assert cm["metadata"]["ownerReferences"][0]["uid"] == meta["uid"]
        for container, shares in allocation.containers.items():
            if bound:
                assert cm["data"][f"{container}.NVIDIA_VISIBLE_DEVICES"] == ",".join(s.uuid for s in shares)
            for share in shares:
                key = (allocation.node, share.uuid)
                core[key] += share.core
                memory[key] += share.memory_mib
                holders[key].append(f"{meta['name']}/{container}")
                if share.core >= 100:
                    whole.add(key)
    for key, total in core.items():
        assert total <= 100, f"GPU {key} over-committed: {total}% held by {holders[key]}"
        assert memory[key] <= gpu_memory_mib, f"GPU {key} memory over-committed: {memory[key]} MiB by {holders[key]}"
    for key in whole:
        assert len(holders[key]) == 1, f"whole GPU {key} shared by {holders[key]}"
    return dict(core)
