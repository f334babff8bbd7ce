"""Typed settings of the node agent (`tessera node agent ...`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tessera.model.contract import MPS_ROOT
from tessera_node.agent.cgroups import DEFAULT_CGROUP_ROOT, DEFAULT_PROC_ROOT
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, PoolPolicy
from tessera_node.agent.wake import WakeSettings


@dataclass(frozen=True)
class AgentSettings:
    node_name: str
    """The Kubernetes node this agent runs on (downward API `spec.nodeName`)."""

    state_dir: Path = Path("/var/lib/tessera/agent")
    """Registry and freeze leases. Default under /var/lib (a hostPath) so they outlive the pod:
    an upgraded agent finds the leases of its predecessor and thaws them."""

    cgroup_root: Path = DEFAULT_CGROUP_ROOT
    """Default /sys/fs/cgroup, the host's cgroup mount (mounted read-write into the agent)."""

    proc_root: Path = DEFAULT_PROC_ROOT
    """Default /proc: with hostPID the host's processes, as NVML reports host PIDs."""

    poll_interval_s: float = 0.1
    """Default 100 ms: online activity is seen within one interval, which keeps the
    activity -> offline frozen latency under the 200 ms target with headroom for the freeze
    itself, while 10 samples/s of NVML process data cost well under 1 % of a core."""

    slow_every: int = 10
    """Memory checks, metrics, lease renewal and MPS supervision run every N ticks (default 10,
    i.e. 1 s at the default interval): they need seconds, not milliseconds, of reaction time and
    are the expensive part of a tick."""

    activity_threshold_pct: int = 5
    """SM utilisation (percent of the GPU) above which an online container counts as active.
    Default 5: an idle CUDA process reports 0; a serving process handling requests reports far
    more; 5 ignores sampling noise without missing small requests."""

    online_wake: WakeSettings = field(default_factory=WakeSettings)
    """Pause offline work when an online container's CPU wakes, before NVML sees its GPU work
    (`wake.py`: why, and the confirm/mute rule). Default on at 25 % of a core; `--online-wake-cpu 0`
    leaves co-location to NVML alone."""

    lease_ttl_s: float = 10.0
    """Freeze lease lifetime. Default 10 s: a hung or killed agent releases offline work within
    10 s, while renewing every ttl/2 costs one small file write per 5 s."""

    lease_guard_interval_s: float = 1.0
    """How often the lease guard looks for expired leases. Default 1 s (bounded extra delay)."""

    freeze_confirm_timeout_s: float = 0.0
    """How long a freeze waits for the kernel's confirmation inside the tick. Default 0 (do not
    wait): confirmation is read on later ticks so a task stuck in the driver never stalls the loop."""

    metrics_host: str = "0.0.0.0"
    """Default all interfaces: Prometheus scrapes the pod IP. Tests pass 127.0.0.1."""

    metrics_port: int = 9401
    """Default 9401: dcgm-exporter, which exports the card-level metrics on the same nodes,
    already listens on 9400."""

    pods_refresh_every: int = 50
    """Ticks between reconciling the registry with the pods on the node (default 50 = 5 s):
    learns container ids and drops pods that ended without a PostStop hook."""

    ambiguous_refresh_interval_s: float = 1.0
    """Least time between the extra pod-status reads the agent makes while GPU processes of a
    pod cannot be told apart (its containers' runtime ids are not in the registry yet; the
    device plugin registers containers without them). Default 1 s, one slow tick: kubelet puts
    the id in the pod status as the container starts, so one read usually settles it, and while
    it does not the agent adds at most one LIST of the node's pods per second, stopping as soon
    as the ids are known. Memory limits of those containers are not enforced meanwhile."""

    pool_policy: PoolPolicy = DEFAULT_POOL_POLICY
    """Pool policy used when rebuilding records from pods; node labels override it."""

    pools_file: Path | None = None
    """The pools ConfigMap file (`TESSERA_POOLS_FILE`, mounted at /etc/tessera/pools/pools.json by
    the DaemonSet). Default None: only node labels say what the pool policy is."""

    memory_grace_mib: int = 0
    """Tolerance above a container's gpu-memory before acting. Default 0: the request is what the
    scheduler reserved; any overshoot takes memory another container was promised."""

    mps_enabled: bool = True
    """Run MPS control daemons on fixed-share pools. Default on (fixed-share needs them)."""

    mps_root: Path = Path(MPS_ROOT)
    """MPS pipe and log directories live under <root>/<gpu-uuid>/{pipe,log}; hostPath shared
    with the containers that use MPS."""
