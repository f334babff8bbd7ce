"""Metrics the node agent serves (`tessera node agent`, port 9401): per container and per GPU.

Names, types, labels and meaning are a contract with Prometheus, the dashboards and the alerts;
`tessera_node.agent.metrics` fills them from its view of the node. Labels: namespace, pod,
container, gpu_uuid (and gpu_index on per-GPU metrics), so per-pod and per-container GPU use joins
with kube-state-metrics and with dcgm-exporter's card metrics (same `gpu_uuid` value, its `UUID`).
"""
from __future__ import annotations

from typing import Final

from tessera.model.metrics.spec import MetricSpec

CONTAINER_LABELS: Final = ("namespace", "pod", "container", "gpu_uuid")
GPU_LABELS: Final = ("gpu_uuid", "gpu_index", "model")
FROZEN_LABELS: Final = (*CONTAINER_LABELS, "app_class")

CONTAINER_GPU_MEMORY_USED_BYTES: Final = MetricSpec("tessera_container_gpu_memory_used_bytes", "gauge", "GPU memory used by the container's processes on this GPU", CONTAINER_LABELS)
CONTAINER_GPU_MEMORY_LIMIT_BYTES: Final = MetricSpec("tessera_container_gpu_memory_limit_bytes", "gauge", "The container's tessera.dev/gpu-memory on this GPU (0 = no limit)", CONTAINER_LABELS)
CONTAINER_GPU_CORE_ALLOCATED_PERCENT: Final = MetricSpec("tessera_container_gpu_core_allocated_percent", "gauge", "The container's tessera.dev/gpu-core on this GPU", CONTAINER_LABELS)
CONTAINER_GPU_UTILIZATION_PERCENT: Final = MetricSpec("tessera_container_gpu_utilization_percent", "gauge", "SM utilisation of the container's processes on this GPU", CONTAINER_LABELS)
CONTAINER_GPU_ATTRIBUTION_PENDING: Final = MetricSpec("tessera_container_gpu_attribution_pending", "gauge", "1 while a GPU process may be this container's or a sibling's (runtime ids not known yet); its memory limit is not enforced meanwhile", CONTAINER_LABELS)
CONTAINER_FROZEN: Final = MetricSpec("tessera_container_frozen", "gauge", "1 while the agent keeps the container frozen (offline pause or burst throttle)", FROZEN_LABELS)
CONTAINER_FROZEN_SECONDS: Final = MetricSpec("tessera_container_frozen_seconds", "counter", "Seconds the container spent frozen", CONTAINER_LABELS)
CONTAINER_FREEZES: Final = MetricSpec("tessera_container_freezes", "counter", "Times the container was frozen", CONTAINER_LABELS)
CONTAINER_THROTTLE_EVENTS: Final = MetricSpec("tessera_container_throttle_events", "counter", "Times a burst-share container was throttled back to its share", CONTAINER_LABELS)
CONTAINER_GPU_MEMORY_KILLS: Final = MetricSpec("tessera_container_gpu_memory_kills", "counter", "Times the container's GPU processes were killed for exceeding gpu-memory", CONTAINER_LABELS)
CONTAINER_GPU_MEMORY_WARNINGS: Final = MetricSpec("tessera_container_gpu_memory_warnings", "counter", "Times the container exceeded gpu-memory on a warn pool", CONTAINER_LABELS)
GPU_CORE_ALLOCATED_PERCENT: Final = MetricSpec("tessera_gpu_core_allocated_percent", "gauge", "Sum of gpu-core given to containers on this GPU (capacity: 100)", GPU_LABELS)
GPU_MEMORY_ALLOCATED_BYTES: Final = MetricSpec("tessera_gpu_memory_allocated_bytes", "gauge", "Sum of gpu-memory given to containers on this GPU", GPU_LABELS)
GPU_MEMORY_TOTAL_BYTES: Final = MetricSpec("tessera_gpu_memory_total_bytes", "gauge", "GPU memory", GPU_LABELS)
GPU_MEMORY_USED_BYTES: Final = MetricSpec("tessera_gpu_memory_used_bytes", "gauge", "GPU memory in use (all processes)", GPU_LABELS)
GPU_UTILIZATION_PERCENT: Final = MetricSpec("tessera_gpu_utilization_percent", "gauge", "Percent of time a kernel ran on the GPU", GPU_LABELS)
GPU_HEALTHY: Final = MetricSpec("tessera_gpu_healthy", "gauge", "1 when the GPU is healthy (no critical Xid, responsive)", GPU_LABELS)
GPU_XID_ERRORS: Final = MetricSpec("tessera_gpu_xid_errors", "counter", "Xid errors the driver reported for this GPU", GPU_LABELS)
GPU_MPS_DAEMON_RUNNING: Final = MetricSpec("tessera_gpu_mps_daemon_running", "gauge", "1 when this GPU's MPS control daemon runs (fixed-share pools)", GPU_LABELS)
GPU_MPS_DAEMON_RESTARTS: Final = MetricSpec("tessera_gpu_mps_daemon_restarts", "counter", "Times the agent restarted this GPU's MPS control daemon", GPU_LABELS)
TICKS: Final = MetricSpec("tessera_agent_ticks", "counter", "Control loop iterations")
TICK_SECONDS: Final = MetricSpec("tessera_agent_tick_seconds", "counter", "CPU-wall time spent inside control loop iterations")
EVENT_FAILURES: Final = MetricSpec("tessera_agent_event_post_failures", "counter", "Kubernetes events that could not be posted")
AMBIGUOUS: Final = MetricSpec("tessera_agent_ambiguous_gpu_processes", "gauge", "GPU processes that could belong to several containers of their pod (container ids not known yet)")
ONLINE_WAKES: Final = MetricSpec("tessera_agent_online_wakes", "counter", "Online containers whose CPU woke next to pausable offline work, by outcome: wake (offline paused before NVML saw GPU work), confirmed (NVML then saw it), unconfirmed (it did not; the CPU signal is muted a while)", ("outcome",))
PAUSE_SECONDS: Final = MetricSpec(
    "tessera_agent_offline_pause_seconds",
    "histogram",
    "Time from the GPU sample that saw online work active to the offline container frozen (confirmed when a freeze confirm timeout is set)",
)

CONTAINER: Final = (CONTAINER_GPU_MEMORY_USED_BYTES, CONTAINER_GPU_MEMORY_LIMIT_BYTES, CONTAINER_GPU_CORE_ALLOCATED_PERCENT, CONTAINER_GPU_UTILIZATION_PERCENT, CONTAINER_GPU_ATTRIBUTION_PENDING, CONTAINER_FROZEN, CONTAINER_FROZEN_SECONDS, CONTAINER_FREEZES, CONTAINER_THROTTLE_EVENTS, CONTAINER_GPU_MEMORY_KILLS, CONTAINER_GPU_MEMORY_WARNINGS)
GPU: Final = (GPU_CORE_ALLOCATED_PERCENT, GPU_MEMORY_ALLOCATED_BYTES, GPU_MEMORY_TOTAL_BYTES, GPU_MEMORY_USED_BYTES, GPU_UTILIZATION_PERCENT, GPU_HEALTHY, GPU_XID_ERRORS, GPU_MPS_DAEMON_RUNNING, GPU_MPS_DAEMON_RESTARTS)
METRICS: Final = (*CONTAINER, *GPU, TICKS, TICK_SECONDS, EVENT_FAILURES, AMBIGUOUS, ONLINE_WAKES, PAUSE_SECONDS)
