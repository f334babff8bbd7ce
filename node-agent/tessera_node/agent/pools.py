"""The pool policy of this node: the pools file (the `tessera-pools` ConfigMap mounted at
`tessera.model.contract.POOLS_FILE`) entry named by the node's `tessera.dev/pool` label, else the
policy labels on the node, else the agent's defaults.

Why the file first: a policy edit in stack config changes only that ConfigMap (kubelet refreshes
the mounted file), so agents pick it up without restarts; labels remain as the fallback for
clusters wired by hand.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tessera.model.contract import LABEL_POOL
from tessera.model.pools_file import read_pools_file as read_pools_file  # shared with the extender; re-exported here
from tessera_node.agent.registry import MemoryEnforcement, PoolPolicy, SharingPolicy, pool_policy_from_node_labels


class PoolsFileError(ValueError):
    """The pools file named on the command line cannot be used; the message starts with its path."""


def load_pools_file(path: Path) -> dict[str, Any]:
    """The pools document, strictly: a missing, unreadable or malformed file is an error naming the
    file (`read_pools_file` instead treats all of these as "no file", for use after start)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PoolsFileError(f"{path}: no such file (the tessera-pools ConfigMap is mounted at /etc/tessera/pools; leave --pools-file out to use node labels)") from None
    except UnicodeDecodeError as exc:
        raise PoolsFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise PoolsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PoolsFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise PoolsFileError(f"{path}: expected a JSON object of pool name -> pool settings, found {type(data).__name__}")
    return data


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
