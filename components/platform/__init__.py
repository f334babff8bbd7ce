"""In-cluster platform: `TesseraPlatform` applies the objects built by `tessera.manifests`."""
from __future__ import annotations

from components.platform.component import TesseraPlatform

__all__ = ["TesseraPlatform"]
