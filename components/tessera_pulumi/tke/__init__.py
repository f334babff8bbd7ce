"""Pulumi components for Tencent Cloud TKE: network, managed cluster, GPU node pools.

`TkeCluster` is the entry point (used by `tessera_pulumi.stack.TesseraStack`); the `_build_*`
functions in each module compute the provider's typed arguments and are tested directly.

May import `tessera.model` and the TKE / Kubernetes Pulumi SDKs.
"""
from __future__ import annotations

from tessera_pulumi.tke.cluster import TkeCluster
from tessera_pulumi.tke.network import TkeNetwork
from tessera_pulumi.tke.node_pool import TkeNodePool

__all__ = ["TkeNodePool", "TkeCluster", "TkeNetwork"]
