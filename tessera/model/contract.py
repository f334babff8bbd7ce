"""Names shared by every Tessera component: resources, labels, annotations and the allocation record.

This module is the single source of truth for the strings that cross process boundaries (stack
config -> node labels -> scheduler extender -> pod annotations -> device plugin -> node agent).
It has no dependencies so that every part (Pulumi program, extender, node DaemonSet, webhook) can
import it.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NewType

# --- extended resources -------------------------------------------------------------------------
GPU_CORE: Final = "tessera.dev/gpu-core"  # percent of one GPU; N*100 = N whole GPUs
GPU_MEMORY: Final = "tessera.dev/gpu-memory"  # MiB per GPU the container uses
QGPU_CORE: Final = "tke.cloud.tencent.com/qgpu-core"  # alias accepted on opted-in pools (percent)
QGPU_MEMORY: Final = "tke.cloud.tencent.com/qgpu-memory"  # alias accepted on opted-in pools (GiB)
NVIDIA_GPU: Final = "nvidia.com/gpu"
CORE_PER_GPU: Final = 100

# --- node labels (set by the node pool from stack config) ---------------------------------------
LABEL_POOL: Final = "tessera.dev/pool"
LABEL_POOL_KIND: Final = "tessera.dev/pool-kind"  # nvidia | shared | mig | timeslice
LABEL_SHARING_POLICY: Final = "tessera.dev/sharing-policy"  # best-effort | fixed-share | burst-share
LABEL_GPU_PLACEMENT: Final = "tessera.dev/gpu-placement"  # binpack | spread (GPU level, per pool)
LABEL_ONLINE_OFFLINE: Final = "tessera.dev/online-offline"  # "true" | "false"
LABEL_MEMORY_ENFORCEMENT: Final = "tessera.dev/memory-enforcement"  # warn | enforce
LABEL_GPUTYPE: Final = "gputype"  # the seed's label, kept for qGPU users
TAINT_GPU: Final = "tessera.dev/gpu"  # NoSchedule taint on every GPU pool; value = pool kind
# gpu-operator's switches (see docs/architecture.md)
LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: Final = "nvidia.com/gpu.deploy.device-plugin"
LABEL_NVIDIA_MIG_CONFIG: Final = "nvidia.com/mig.config"
LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: Final = "nvidia.com/device-plugin.config"
PAUSED_FOR_MIG_CHANGE: Final = "paused-for-mig-change"

# --- node annotations (written by the node DaemonSet, read by the extender) ---------------------
ANNOTATION_NODE_GPUS: Final = "tessera.dev/gpus"  # JSON list of NodeGpu.to_json()

# --- pod annotations ----------------------------------------------------------------------------
ANNOTATION_APP_CLASS: Final = "tessera.dev/app-class"  # online | offline
ANNOTATION_ALLOCATION: Final = "tessera.dev/allocation"  # JSON Allocation, written at bind
ANNOTATION_ASSUME_TIME: Final = "tessera.dev/assume-time"  # RFC 3339, written at bind
ANNOTATION_GPU_INDEX_PREFIX: Final = "tessera.dev/gpu-index-container-"  # + container name -> "0,1"
ANNOTATION_ALLOCATION_CONFIGMAP: Final = "tessera.dev/allocation-configmap"  # set by the webhook
SCHEDULER_NAME: Final = "tessera-scheduler"

AppClass = Literal["online", "offline"]
PoolKind = Literal["nvidia", "shared", "mig", "timeslice"]
SharingPolicy = Literal["best-effort", "fixed-share", "burst-share"]
GpuPlacement = Literal["binpack", "spread"]
NodePlacement = Literal["binpack", "spread", "fragmentation-aware"]
GpuUuid = NewType("GpuUuid", str)

# env keys the extender writes into the per-pod allocation ConfigMap, one set per container under
# "<container>.<KEY>"; the webhook injects them into the container with configMapKeyRef.
ALLOCATION_ENV_KEYS: Final = (
    "NVIDIA_VISIBLE_DEVICES",
    "TESSERA_GPU_CORE",
    "TESSERA_GPU_MEMORY_MIB",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
)


@dataclass(frozen=True)
class NodeGpu:
    """One GPU as the node DaemonSet reports it on the node annotation."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    healthy: bool = True
    sm_count: int | None = None  # streaming multiprocessors, as NVML derives them; None: unknown

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "uuid": self.uuid, "model": self.model, "memoryMiB": self.memory_mib, "healthy": self.healthy}
        if self.sm_count is not None:
            out["smCount"] = self.sm_count
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> NodeGpu:
        sm = data.get("smCount")
        if sm is not None and (not isinstance(sm, int) or isinstance(sm, bool) or sm <= 0):
            raise ValueError(f"smCount must be a positive integer, not {sm!r}")
        return NodeGpu(int(data["index"]), str(data["uuid"]), str(data["model"]), int(data["memoryMiB"]), bool(data.get("healthy", True)), sm)


# MPS hands a client its SMs in whole TPCs (two SMs each), rounding the percentage down: measured on
# an H100 (132 SMs, driver 580), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 80/70/60/50/40/34/30/25/20/10 gave
# 104/92/78/66/52/44/38/32/26/12 SMs, i.e. 2 * floor(percent * SMs / 200) (docs/benchmarks.md, "GPU checks").
MPS_SMS_PER_TPC: Final = 2


def mps_provisioned_sms(percentage: int, sm_count: int) -> int:
    """The SMs MPS gives a client of `percentage` on a GPU of `sm_count` SMs (at least one TPC)."""
    return max(MPS_SMS_PER_TPC, MPS_SMS_PER_TPC * (percentage * sm_count // (100 * MPS_SMS_PER_TPC)))


def mps_thread_percentage(core: int, sm_count: int | None) -> int:
    """`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for a share of `core` percent of a GPU: the smallest
    percentage whose provisioned SMs are the whole TPCs nearest to the share. Passing `core` itself
    rounds down: 60/30 on an H100 gave 78/38 SMs (59.1 %/28.8 %), and a 60/30 pair ran at 2.40:1
    where 61/31 (80/40 SMs) ran at 1.98:1. `sm_count` None (not reported): `core` unchanged."""
    core = max(1, min(CORE_PER_GPU, core))
    if not sm_count or core >= CORE_PER_GPU or sm_count >= 200:  # above 200 SMs a percent step exceeds a TPC
        return core
    tpcs = max(1, min(sm_count // MPS_SMS_PER_TPC, (core * sm_count + 100) // (100 * MPS_SMS_PER_TPC)))
    return min(CORE_PER_GPU, -(-100 * MPS_SMS_PER_TPC * tpcs // sm_count))


@dataclass(frozen=True)
class GpuShare:
    """The part of one GPU given to one container."""

    index: int
    uuid: str
    core: int  # percent of this GPU (100 for a whole GPU)
    memory_mib: int  # MiB on this GPU (0 = no memory limit was asked; whole-GPU requests get the full memory)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "core": self.core, "memoryMiB": self.memory_mib}

    @staticmethod
    def from_json(data: dict[str, Any]) -> GpuShare:
        return GpuShare(int(data["index"]), str(data["uuid"]), int(data["core"]), int(data["memoryMiB"]))


@dataclass(frozen=True)
class Allocation:
    """What the scheduler extender decided for one pod; recorded on the pod at bind.

    The state of every shared node is rebuilt from these records after a restart, and the node
    side reads them to give each container exactly its GPU(s) and limits.
    """

    node: str
    assumed_at: str  # RFC 3339
    containers: dict[str, tuple[GpuShare, ...]] = field(default_factory=dict)
    version: int = 1

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": self.version,
                "node": self.node,
                "assumedAt": self.assumed_at,
                "containers": {c: [s.to_json() for s in shares] for c, shares in sorted(self.containers.items())},
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> Allocation:
        data = json.loads(text)
        return Allocation(
            node=str(data["node"]),
            assumed_at=str(data["assumedAt"]),
            containers={str(c): tuple(GpuShare.from_json(s) for s in shares) for c, shares in data["containers"].items()},
            version=int(data.get("v", 1)),
        )

    def pod_annotations(self) -> dict[str, str]:
        """The annotations written on the pod at bind."""
        out = {ANNOTATION_ALLOCATION: self.to_json(), ANNOTATION_ASSUME_TIME: self.assumed_at}
        for container, shares in self.containers.items():
            out[ANNOTATION_GPU_INDEX_PREFIX + container] = ",".join(str(s.index) for s in shares)
        return out


# --- in-cluster deployment names (tessera/manifests; read by the webhook and docs) --------------
TESSERA_NAMESPACE: Final = "tessera-system"  # every Tessera workload runs here
PRIORITY_CLASS_ONLINE: Final = "tessera-online"
PRIORITY_CLASS_OFFLINE: Final = "tessera-offline"
EXTENDER_SERVICE: Final = "tessera-extender"  # Service in TESSERA_NAMESPACE in front of `tessera scheduler serve`
EXTENDER_PORT: Final = 8888
EXTENDER_LEASE: Final = "tessera-extender"  # the extender replicas' leader-election Lease (coordination.k8s.io/v1) in TESSERA_NAMESPACE
# Per-pool sharing settings (JSON object pool name -> settings) in TESSERA_NAMESPACE, mounted into the
# extender, the node agent and the webhook at POOLS_FILE. A policy edit changes only this ConfigMap
# (and the pool's node labels), never a pod template, so it rolls out without restarts.
POOLS_CONFIGMAP: Final = "tessera-pools"
POOLS_CONFIGMAP_KEY: Final = "pools.json"
POOLS_FILE: Final = "/etc/tessera/pools/pools.json"
ENV_POOLS_FILE: Final = "TESSERA_POOLS_FILE"


# --- per-pool config names carried by node labels (node pool sets them; tessera/manifests writes the
# matching mig-parted config entry and device-plugin config key) -------------------------------------
def mig_config_name(pool: str) -> str:
    """Value of `nvidia.com/mig.config` on a mig pool's nodes: the mig-parted config entry for the pool.

    One entry per pool (named after it) rather than a named layout such as `all-1g.5gb`, so that a
    custom profile and a named layout are handled the same way and two pools never share an entry.
    Scheduled re-partitioning relabels nodes to other entries; this is the pool's default one.
    """
    return f"tessera-{pool}"


def device_plugin_config_name(pool: str) -> str:
    """Value of `nvidia.com/device-plugin.config` on mig/timeslice nodes: the pool's key in the NVIDIA
    device plugin config map (time-slicing replicas, MIG strategy)."""
    return f"tessera-{pool}"


# --- admission webhook and scheduled re-partitioning (tessera/webhook, tessera/repartition) ------
# Namespace label: pods in a namespace labelled "true" may use qGPU names on any shared pool.
LABEL_NAMESPACE_QGPU_ALIASES: Final = "tessera.dev/qgpu-aliases"
# Node label on shared pools: most pods sharing one GPU (set by scheduled re-partitioning; absent =
# no cap beyond gpu-core capacity). The extender filters GPUs already holding this many pods.
LABEL_MAX_SHARES_PER_GPU: Final = "tessera.dev/max-shares-per-gpu"
# Node label: index of the re-partitioning layout last applied to the node ("default" = the pool's own).
LABEL_LAYOUT: Final = "tessera.dev/layout"
# Nodes of a pool with `allocation: dra`; the device plugin's DaemonSet avoids them, the DRA
# plugin's selects them, and the extender leaves them to kube-scheduler's DRA allocator.
LABEL_ALLOCATION: Final = "tessera.dev/allocation"



# --- MPS directories (extender writes them into the allocation ConfigMap; node agent creates them) --
MPS_ROOT: Final = "/run/tessera/mps"  # one control daemon per GPU under <root>/<gpu-uuid>/{pipe,log}


def mps_pipe_directory(gpu_uuid: str) -> str:
    """CUDA_MPS_PIPE_DIRECTORY of containers on the GPU `gpu_uuid`."""
    return f"{MPS_ROOT}/{gpu_uuid}/pipe"


def mps_log_directory(gpu_uuid: str) -> str:
    """CUDA_MPS_LOG_DIRECTORY of containers on the GPU `gpu_uuid`."""
    return f"{MPS_ROOT}/{gpu_uuid}/log"
# Priority of Tessera's own pods (scheduler, extender, node DaemonSet, webhook): the highest value a
# user PriorityClass may have. Not system-*-critical: some clusters (GKE) admit those only in kube-system.
PRIORITY_CLASS_CRITICAL: Final = "tessera-critical"


# --- Dynamic Resource Allocation (resource.k8s.io/v1) ---------------------------------------------
# The DRA driver name: ResourceSlices' spec.driver, DeviceClass selectors, allocation results'
# driver, the kubelet plugin's registration name (its sockets live under
# /var/lib/kubelet/plugins/<driver>/). The scheduler side writes DeviceClasses that name it; the node
# side (tessera_node.dra) publishes and prepares its devices.
DRA_DRIVER: Final = "gpu.tessera.dev"
# The consumable capacities of each GPU device (KEP-5075): compute in percent of the GPU, memory in
# bytes as a quantity (the slice says e.g. "15360Mi").
DRA_CAPACITY_CORES: Final = "cores"
DRA_CAPACITY_MEMORY: Final = "memory"


def dra_device_order(used_cores: Mapping[int, int], placement: GpuPlacement) -> list[int]:
    """The GPU indices in the order the node's ResourceSlice lists them, `used_cores` being the
    cores each holds now. kube-scheduler's allocator takes the first device in slice order that
    has room, so listing the fullest GPUs first makes its pick the device-plugin route's
    `binpack` (the fullest GPU that fits), and the emptiest first its `spread`; ties go by index,
    as `tessera.alloc`'s GPU ranking breaks them."""
    if placement == "spread":
        return sorted(used_cores, key=lambda i: (used_cores[i], i))
    return sorted(used_cores, key=lambda i: (-used_cores[i], i))
