"""In-cluster platform: `TesseraPlatform` applies the objects built by `tessera.manifests`.

May import `tessera.model`, `tessera.manifests` and the Kubernetes Pulumi SDK.
"""
from __future__ import annotations

from tessera_pulumi.platform.component import TesseraPlatform

__all__ = ["TesseraPlatform"]
