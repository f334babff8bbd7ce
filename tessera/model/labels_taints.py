"""Node labels and taints per pool kind: what makes the right components, and only those, run on a pool.

Pure functions of the validated pool config. The TKE node pool component (`tessera_pulumi.tke`)
turns them into provider inputs; `tessera render` writes them as `kubectl label`/`taint` commands for
an existing cluster's nodes (`tessera.manifests.existing_nodes`), so both routes label alike.

| kind      | device plugin on the node                       | key labels                                                  |
| --------- | ----------------------------------------------- | ----------------------------------------------------------- |
| nvidia    | NVIDIA's (gpu-operator), whole GPUs             | pool, pool-kind, gputype=nvidia                              |
| shared    | Tessera's; NVIDIA's switched off by label       | + sharing-policy, gpu-placement, online-offline, memory-... |
|           |                                                 |   (+ max-shares-per-gpu when sharesPerGpu is set)           |
| mig       | NVIDIA's + mig-manager                          | + nvidia.com/mig.config, nvidia.com/device-plugin.config     |
| timeslice | NVIDIA's with time-slicing replicas             | + nvidia.com/device-plugin.config                            |

Every pool carries the taint `tessera.dev/gpu=<kind>:NoSchedule`, so only pods that tolerate GPU
nodes (GPU work and the node components) are scheduled there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from tessera.model.pools import MigPool, NvidiaPool, SharedPool, TimeslicePool
from tessera.model.contract import (
    LABEL_ALLOCATION,
    LABEL_GPUTYPE,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_POOL,
    LABEL_POOL_KIND,
    TAINT_GPU,
    PoolKind,
    device_plugin_config_name,
    mig_config_name,
)

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
AnyPool = NvidiaPool | SharedPool | MigPool | TimeslicePool

# The seed's `gputype` label (TKE qGPU docs: gputype=nvidia | qgpu). Shared pools keep "qgpu" so
# manifests migrated from qGPU with `nodeSelector: {gputype: qgpu}` land on them unchanged.
GPUTYPE_BY_KIND: Final[dict[PoolKind, str]] = {"nvidia": "nvidia", "shared": "qgpu", "mig": "mig", "timeslice": "timeslice"}
# mig-parted's built-in entry that turns MIG off; set on MIG-capable GPUs outside mig pools so that
# a GPU which was partitioned before (e.g. a reused node image) is handed out whole.
MIG_DISABLED: Final = "all-disabled"


@dataclass(frozen=True)
class TaintSpec:
    """One node taint, before it becomes the provider's typed taint input."""

    key: str
    value: str
    effect: TaintEffect


def pool_labels(pool: AnyPool) -> dict[str, str]:
    """All labels of the pool's nodes: the user's extra labels, then Tessera's (which win on a clash)."""
    kind: PoolKind = pool.kind
    labels = dict(pool.labels)
    labels[LABEL_POOL] = pool.name
    labels[LABEL_POOL_KIND] = kind
    labels[LABEL_GPUTYPE] = GPUTYPE_BY_KIND[kind]
    if isinstance(pool, SharedPool):
        # The extender caps containers per GPU by tessera.dev/max-shares-per-gpu (the pools file
        # carries it too); scheduled re-partitioning overwrites that label per layout.
        labels.update(pool.sharing.pool_policy().node_labels())
        if pool.allocation == "dra":
            labels[LABEL_ALLOCATION] = "dra"
        # gpu-operator skips its device plugin on nodes with this label; Tessera's serves them.
        labels[LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY] = "false"
    if isinstance(pool, MigPool):
        labels[LABEL_NVIDIA_MIG_CONFIG] = mig_config_name(pool.name)
        labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] = device_plugin_config_name(pool.name)
    elif pool.gpu_spec().mig_capable:
        labels[LABEL_NVIDIA_MIG_CONFIG] = MIG_DISABLED
    if isinstance(pool, TimeslicePool):
        labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] = device_plugin_config_name(pool.name)
    return labels


def _build_gpu_taint(kind: PoolKind) -> TaintSpec:
    return TaintSpec(TAINT_GPU, kind, "NoSchedule")


def pool_taints(pool: AnyPool) -> tuple[TaintSpec, ...]:
    """The GPU taint first, then the user's extra taints (a user taint on the same key+effect is dropped)."""
    gpu = _build_gpu_taint(pool.kind)
    extra = tuple(
        TaintSpec(t.key, t.value, t.effect) for t in pool.taints if not (t.key == gpu.key and t.effect == gpu.effect)
    )
    return (gpu, *extra)
