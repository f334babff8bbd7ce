"""Shared fixtures for config tests: a valid TKE stack, a valid existing-cluster stack, and `edit`."""
from __future__ import annotations

import copy
import re
from typing import Any, Final

DELETE: Final = object()  # edit() removes the key

TKE_BASE: Final[dict[str, Any]] = {
    "region": "ap-guangzhou",
    "cluster": {
        "provider": "tke",
        "name": "gpu-test",
        "kubernetesVersion": "1.30.0",
        "vpcCidr": "10.0.0.0/16",
        "subnets": [{"zone": "ap-guangzhou-3", "cidr": "10.0.1.0/24"}],
        "endpoint": {"public": True, "allowedCidrs": ["203.0.113.0/24"]},
    },
    "nodePools": [
        {"name": "t4", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "maxSize": 2},
        {"name": "shared", "kind": "shared", "instanceType": "GN7.10XLARGE160", "maxSize": 2, "sharing": {"policy": "fixed-share"}},
        {
            "name": "mig",
            "kind": "mig",
            "instanceType": "GT4.4XLARGE96",
            "mig": {"strategy": "mixed", "profile": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}},
            "timeSlicing": {"replicas": {"nvidia.com/mig-1g.5gb": 4}},
            "repartition": [
                {"name": "day", "cron": "0 8 * * 1-5", "layout": "all-1g.5gb"},
                {"name": "night", "cron": "0 20 * * 1-5", "layout": "all-7g.40gb"},
            ],
        },
        {"name": "ts", "kind": "timeslice", "instanceType": "GN7.2XLARGE32", "timeSlicing": {"replicas": 4}},
    ],
}

EXISTING_BASE: Final[dict[str, Any]] = {
    "cluster": {"provider": "existing", "name": "kind", "kubernetesVersion": "1.30.0", "kubeconfig": {"path": "~/.kube/config"}},
    "nodePools": [
        {"name": "local", "kind": "shared", "nodeSelector": {"example.com/gpu-pool": "local"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 1, "maxSize": 1},
    ],
}

_PART: Final = re.compile(r'\.?([A-Za-z_:][A-Za-z0-9_:]*)|\[(\d+)\]|\["([^"]+)"\]')


def _parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name, index, quoted in _PART.findall(path):
        parts.append(int(index) if index else (name or quoted))
    return parts


def edit(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``path`` (same syntax as problem paths) set to ``value`` (or removed)."""
    data = copy.deepcopy(base)
    *parents, last = _parts(path)
    node: Any = data
    for part in parents:
        node = node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return data
