"""Per-pool GPU figures for the extender's metrics: capacity, allocation and stranded compute.

Read from the extender's own cache (`tessera.alloc.Cluster`), so the figures are exactly the
books placement decisions are made on. Stranded compute is FGD's expected fragmentation
(`FragmentationMeasure`, the measure the fragmentation-aware policy minimises) against the mix
the policy uses; a policy without a mix (binpack, spread) is measured against the shapes of the
pods holding GPUs now, as `tessera inspect` does. Host CPU and memory are not looked at.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tessera.alloc import Cluster
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.model import MILLI_PER_GPU, UNTRACKED, NodeState
from tessera.alloc.workload import MixSnapshot, static_snapshot
from tessera.model.contract import LABEL_POOL, LABEL_POOL_KIND

PoolKey = tuple[str, str]  # (pool, kind)
PoolFigures = tuple[float, float, float]  # (capacity, allocated, stranded) in GPUs
DEFAULT_KIND = "shared"  # the extender's nodes are shared-pool nodes; an unlabelled one counts as shared


def _free(node: NodeState) -> list[GpuFree]:
    return [(max(g.free_milli, 0), max(g.free_memory_mib, 0)) for g in node.gpus if g.healthy]


@dataclass
class PoolUsageMeter:
    """Keeps one measure per mix snapshot, so its memo survives from one scrape to the next."""

    _measure: FragmentationMeasure | None = None
    _snapshot: MixSnapshot | None = field(default=None, repr=False)

    def _measure_for(self, cluster: Cluster) -> FragmentationMeasure | None:
        snapshot = cluster.policy().snapshot
        if snapshot is None:
            requests = [r for uid in cluster.allocated() if (r := cluster.pod(uid)) is not None and r.gpu_containers]
            snapshot = static_snapshot(requests) if requests else None
        if snapshot is None or not snapshot.shapes:
            return None
        if snapshot is not self._snapshot:
            self._snapshot, self._measure = snapshot, FragmentationMeasure(snapshot)
        return self._measure

    def figures(self, cluster: Cluster) -> dict[PoolKey, PoolFigures]:
        """(pool, kind) -> (healthy GPUs, allocated GPUs, stranded GPUs). Caller holds the cache lock."""
        measure = self._measure_for(cluster)
        out: dict[PoolKey, list[float]] = {}
        for node in cluster.nodes.values():
            key = (node.labels.get(LABEL_POOL, ""), node.labels.get(LABEL_POOL_KIND, DEFAULT_KIND))
            acc = out.setdefault(key, [0.0, 0.0, 0.0])
            healthy = [g for g in node.gpus if g.healthy]
            acc[0] += len(healthy)
            acc[1] += sum(g.used_milli for g in healthy) / MILLI_PER_GPU
            free = _free(node)
            if measure is not None and free:
                acc[2] += measure.of(node.models, UNTRACKED, UNTRACKED, free) / MILLI_PER_GPU
        return {k: (v[0], v[1], round(v[2], 6)) for k, v in out.items()}
