"""Small stack configs for the NVIDIA-pool, re-partitioning and webhook manifest tests."""
from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import yaml

from tessera.model import StackConfig
from tessera.manifests.objects import KubeObject


def pool(name: str, kind: str, gpu: str = "T4", **fields: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "gpuModel": gpu, "gpuCount": 1, "nodeSelector": {"pool": name}, "minSize": 1, "maxSize": 2, **fields}


def stack(*pools: dict[str, Any], **top: Any) -> StackConfig:
    data = {
        "cluster": {"provider": "existing", "name": "t", "kubernetesVersion": "1.30.0", "kubeconfig": {"path": "~/.kube/config"}},
        "nodePools": list(pools),
        **top,
    }
    return StackConfig.model_validate(data)


def validate_all(objects: list[KubeObject]) -> None:
    """Every object is valid against the Kubernetes 1.30 OpenAPI schema (strict: no unknown fields)."""
    validate_all_for(objects, "1.30.0")


def validate_all_for(objects: list[KubeObject], version: str) -> None:
    for o in objects:
        kubernetes_validate.validate(o, version, strict=True)


def find(objects: list[KubeObject], kind: str, name: str) -> KubeObject:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, got {[(o['kind'], o['metadata']['name']) for o in objects]}"
    return found[0]


def configmap_yaml(cm: KubeObject, key: str) -> Any:
    return yaml.safe_load(cm["data"][key])


def b64json(text: str) -> Any:
    return json.loads(base64.b64decode(text))
