"""The pool policy of this node: the pools file (the `tessera-pools` ConfigMap mounted at
`tessera.model.contract.POOLS_FILE`) entry named by the node's `tessera.dev/pool` label, else the
policy labels on the node, else the agent's defaults.

Why the file first: a policy edit in stack config changes only that ConfigMap (kubelet refreshes
the mounted file), so agents pick it up without restarts; labels remain as the fallback for
clusters wired by hand.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera.model.contract import LABEL_POOL
from tessera.model.pools_file import read_pools_file as read_pools_file  # shared with the extender; re-exported here
from tessera_node.agent.registry import MemoryEnforcement, PoolPolicy, SharingPolicy, pool_policy_from_node_labels


def pool_policy_from_entry(entry: Mapping[str, Any], default: PoolPolicy) -> PoolPolicy:
    """One pool's JSON object from the pools file (keys as `tessera/manifests/settings.SharedPool`)."""
    def pick(kind: type[Any], value: Any, fallback: Any) -> Any:
        try:
            return kind(value) if value is not None else fallback
        except ValueError:
            return fallback

    try:
        idle = float(entry.get("offlineResumeIdleSeconds", default.offline_resume_idle_s))
    except (TypeError, ValueError):
        idle = default.offline_resume_idle_s
    return PoolPolicy(
        sharing=pick(SharingPolicy, entry.get("policy"), default.sharing),
        memory_enforcement=pick(MemoryEnforcement, entry.get("memoryEnforcement"), default.memory_enforcement),
        online_offline=bool(entry.get("onlineOffline", default.online_offline)),
        offline_resume_idle_s=idle,
    )


def pool_policy_for_node(labels: Mapping[str, str], pools: Mapping[str, Any], default: PoolPolicy) -> PoolPolicy:
    from_labels = pool_policy_from_node_labels(labels, default=default)
    entry = pools.get(labels.get(LABEL_POOL, ""))
    if isinstance(entry, Mapping):
        return pool_policy_from_entry(entry, from_labels)
    return from_labels
