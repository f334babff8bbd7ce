"""Pulumi components for Tencent Cloud TKE: network, managed cluster, GPU node pools.

`TkeCluster` is the entry point (used by `components.stack.TesseraStack`); the `_build_*`
functions in each module compute the provider's typed arguments and are tested directly.
"""
from __future__ import annotations

from components.tke.cluster import TkeCluster
from components.tke.network import TkeNetwork
from components.tke.node_pool import TkeNodePool

__all__ = ["TkeNodePool", "TkeCluster", "TkeNetwork"]
