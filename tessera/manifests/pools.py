"""The pools ConfigMap: every `shared` pool's sharing settings in one JSON document.

Why one ConfigMap, mounted as a volume and not passed as flags or env: a policy edit in stack
config (binpack -> spread, best-effort -> fixed-share) then changes exactly this object (plus the
pool's node labels, which the node pool component owns). No pod template changes, so nothing
restarts; kubelet refreshes the mounted file and the extender and agents reload it. Render-diff
tests hold the builders to that.
"""
from __future__ import annotations

import json
from typing import Any, Final

from tessera.model.contract import ENV_POOLS_FILE, POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY, POOLS_FILE
from tessera.manifests.objects import KubeObject, config_map
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "platform"
VOLUME_NAME: Final = "pools"
MOUNT_DIR: Final = POOLS_FILE.rsplit("/", 1)[0]


def pools_document(settings: PlatformSettings) -> str:
    """Stable JSON (sorted keys, one pool per line) so a one-field edit is a one-line diff."""
    pools = {p.name: p.to_json() for p in sorted(settings.shared_pools, key=lambda p: p.name)}
    lines = [f"  {json.dumps(name)}: {json.dumps(body, sort_keys=True)}" for name, body in pools.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"


def build_pools_configmap(settings: PlatformSettings) -> list[KubeObject]:
    if not settings.sharing_enabled:
        return []
    return [config_map(POOLS_CONFIGMAP, COMPONENT, {POOLS_CONFIGMAP_KEY: pools_document(settings)}, settings.namespace)]


def pools_volume() -> dict[str, Any]:
    return {"name": VOLUME_NAME, "configMap": {"name": POOLS_CONFIGMAP}}


def pools_mount() -> dict[str, Any]:
    # A directory mount (not subPath): kubelet only refreshes ConfigMap files mounted as directories.
    return {"name": VOLUME_NAME, "mountPath": MOUNT_DIR, "readOnly": True}


def pools_env() -> dict[str, str]:
    return {ENV_POOLS_FILE: POOLS_FILE}
