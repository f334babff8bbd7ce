"""Alert rules: what a team running Tessera wants to be woken for, as PrometheusRule groups.

Thresholds come from the stack's `monitoring.alerts`; every alert carries `summary`,
`description` and `runbook_url` (a section of docs/runbooks.md, anchored by the alert's name).
Annotations use only `{{ $labels.<name> }}` templates, so a test can render them without Go.
Jobs are fixed names the ServiceMonitors set (`tessera.manifests.monitoring`), independent of
the namespace.

The extender runs several replicas, and every replica exports the gauges of its own warm state
(pools, nodes, record conflicts), so rules take `max` of them across replicas, never `sum`.
Only the leader binds: `tessera_extender_leader` says which replica that is.

Every alert is unit-tested with `promtool test rules` (tests/tessera/monitoring): input series
that make it fire, and series that must not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

Severity = Literal["critical", "warning"]

JOB_EXTENDER: Final = "tessera-extender"
JOB_NODE_AGENT: Final = "tessera-node-agent"
JOB_DEVICE_PLUGIN: Final = "tessera-device-plugin"
JOB_WEBHOOK: Final = "tessera-webhook"
DEFAULT_RUNBOOK_URL: Final = "https://github.com/tessera-gpu/tessera/blob/main/docs/runbooks.md"
GROUP_TESSERA: Final = "tessera.rules"
GROUP_DCGM: Final = "tessera-dcgm.rules"


@dataclass(frozen=True)
class Thresholds:
    """`monitoring.alerts` of the stack, as plain numbers (percent values as in the config)."""

    pool_allocation_percent: float = 90.0
    stranded_share_percent: float = 20.0
    offline_paused_minutes: int = 30
    extender_p99_seconds: float = 0.1
    extender_error_percent: float = 1.0
    runbook_url: str = DEFAULT_RUNBOOK_URL


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str

    def rule(self, runbook_url: str) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description, "runbook_url": f"{runbook_url}#{self.name.lower()}"},
        }


def _num(value: float) -> str:
    return format(value, "g")


def _health_alerts() -> list[Alert]:
    return [
        Alert(
            "TesseraGpuUnhealthy", "tessera_gpu_healthy == 0", "2m", "critical",
            "GPU {{ $labels.gpu_uuid }} on node {{ $labels.node }} is unhealthy",
            "The node agent marks the GPU unhealthy after a critical Xid or when NVML stops answering. The device plugin "
            "advertises it as unhealthy, the extender places nothing new on it and its pods are evicted to be rescheduled.",
        ),
        Alert(
            "TesseraGpuXidErrors", "increase(tessera_gpu_xid_errors_total[10m]) > 0", "0m", "warning",
            "Xid errors on GPU {{ $labels.gpu_uuid }} (node {{ $labels.node }})",
            "The driver reported Xid errors for this GPU in the last 10 minutes. Application Xids (13, 31, 43, 45, 68, 109) "
            "kill one process; any other marks the GPU unhealthy.",
        ),
        Alert(
            "TesseraGpuOvercommitted",
            "tessera_gpu_core_allocated_percent > 100 or tessera_gpu_memory_allocated_bytes > tessera_gpu_memory_total_bytes",
            "5m", "critical",
            "GPU {{ $labels.gpu_uuid }} on node {{ $labels.node }} holds more than its capacity",
            "The containers registered on this GPU together hold more than 100 gpu-core or more GPU memory than the card has. "
            "The extender never places that; this means two schedulers or a manual edit handed out the same capacity.",
        ),
    ]


def _component_alerts(t: Thresholds) -> list[Alert]:
    errors = _num(t.extender_error_percent / 100)
    return [
        Alert(
            "TesseraDevicePluginNotRegistered",
            f'(tessera_device_plugin_registered == 0 unless on (instance) tessera_device_plugin_paused == 1) or up{{job="{JOB_DEVICE_PLUGIN}"}} == 0',
            "10m", "critical",
            "Tessera device plugin on node {{ $labels.node }} is not registered with kubelet",
            "The node's device plugin is not registered with kubelet (and not paused for a MIG change), or cannot be scraped. "
            "kubelet then offers no tessera.dev/gpu-core on the node and its shared-GPU pods cannot start.",
        ),
        Alert(
            "TesseraNodeAgentDown", f'up{{job="{JOB_NODE_AGENT}"}} == 0', "5m", "critical",
            "Tessera node agent on node {{ $labels.node }} is down",
            "The node agent cannot be scraped. Without it, memory limits are not enforced, offline work is not paused for "
            "online work, and GPU health is not watched on the node.",
        ),
        Alert(
            "TesseraGpuNodesWithoutAgents",
            f'(max(tessera_extender_nodes) - (count(up{{job="{JOB_NODE_AGENT}"}} == 1) or vector(0))) > 0 '
            f"or (max(tessera_extender_nodes) - (count(tessera_device_plugin_registered == 1) or vector(0))) > 0",
            "15m", "critical",
            "Fewer Tessera node agents or device plugins answer than there are shared GPU nodes",
            "The extender knows more shared-pool GPU nodes than there are node agents answering scrapes or device plugins "
            "registered with kubelet: the tessera-node DaemonSet is missing from some node (not scheduled, crash-looping, or "
            "not scraped). Those nodes' GPUs are neither isolated nor offered.",
        ),
        Alert(
            "TesseraExtenderDown", f'sum(up{{job="{JOB_EXTENDER}"}}) == 0 or absent(up{{job="{JOB_EXTENDER}"}})', "5m", "critical",
            "Tessera scheduler extender is down: no replica answers",
            "No extender replica can be scraped. kube-scheduler's calls to the extender fail, so shared-GPU pods stay Pending "
            "(the extender is not ignorable).",
        ),
        Alert(
            "TesseraExtenderReplicaDown", f'up{{job="{JOB_EXTENDER}"}} == 0', "10m", "warning",
            "Tessera extender replica {{ $labels.pod }} is down",
            "One extender replica cannot be scraped. The others keep scheduling, but there is one standby fewer to take over "
            "from the leader.",
        ),
        Alert(
            "TesseraExtenderErrors",
            f'((sum(rate(tessera_extender_requests_total{{code=~"5.."}}[5m])) or vector(0)) + '
            f'(sum(rate(tessera_extender_binds_total{{outcome="error"}}[5m])) or vector(0))) '
            f"/ sum(rate(tessera_extender_requests_total[5m])) > {errors}",
            "10m", "critical",
            f"Tessera extender: more than {_num(t.extender_error_percent)}% of requests fail",
            "The extender answers HTTP 5xx or binds end in error. kube-scheduler retries, but shared-GPU pods are scheduled late or not at all.",
        ),
        Alert(
            "TesseraExtenderSlow",
            f'histogram_quantile(0.99, sum by (le, verb) (rate(tessera_extender_request_seconds_bucket{{verb=~"filter|prioritize"}}[5m]))) > {_num(t.extender_p99_seconds)}',
            "10m", "warning",
            f"Tessera extender {{{{ $labels.verb }}}} p99 above {_num(t.extender_p99_seconds)}s",
            "Filter or prioritize answers slower than the budget (monitoring.alerts.extenderP99Seconds); every scheduling cycle of a shared-GPU pod waits for them.",
        ),
        Alert(
            "TesseraWebhookDown", f'up{{job="{JOB_WEBHOOK}"}} == 0', "5m", "critical",
            "Tessera admission webhook replica down {{ $labels.pod }}",
            "A webhook replica cannot be scraped. With failurePolicy Fail, GPU pods are rejected once no replica answers.",
        ),
    ]


def _leadership_alerts() -> list[Alert]:
    """The extender's replicas and their records (the Lease, `tessera.model.metrics.extender`)."""
    leader = f'tessera_extender_leader{{job="{JOB_EXTENDER}"}}'
    return [
        Alert(
            "TesseraExtenderNoLeader",
            f'max({leader}) == 0 or (absent({leader}) and on () count(up{{job="{JOB_EXTENDER}"}} == 1) > 0)',
            "1m", "critical",
            "No Tessera extender replica holds the leader Lease",
            "Extender replicas answer, but none is leader, so none binds: shared-GPU pods are not being bound. Calls a "
            "standby cannot forward fail, kube-scheduler retries them, and the pods stay Pending.",
        ),
        Alert(
            "TesseraExtenderSplitLeadership", f"sum({leader}) > 1", "1m", "critical",
            "More than one Tessera extender replica reports itself leader",
            "Two replicas each believe they hold the Lease. Each would bind from its own in-memory view, which the single "
            "binder is there to prevent; the allocation records still decide what is placed, and conflicts are reported.",
        ),
        Alert(
            "TesseraExtenderLeaderFlapping",
            f'sum(increase(tessera_extender_leader_transitions_total{{job="{JOB_EXTENDER}",event="acquired"}}[15m])) > 3',
            "0m", "warning",
            "Tessera extender leadership changed more than 3 times in 15 minutes",
            "Replicas keep taking the Lease over: leaders crash, are evicted, or cannot renew within the renew deadline "
            "(slow API server, CPU throttling). Each change pauses binding briefly.",
        ),
        Alert(
            "TesseraExtenderRecordConflicts",
            f'max by (reason) (tessera_extender_record_conflicts{{job="{JOB_EXTENDER}"}}) > 0',
            "1m", "critical",
            "Tessera extender: allocation records in conflict ({{ $labels.reason }})",
            "Some pods' allocation records conflict: together more than 100 % of a GPU (overcommit), on a GPU its node no "
            "longer reports (unknown_gpu), or unreadable. The extender keeps counting every one of them, so nothing more "
            "lands there, but the GPU may be over-committed now.",
        ),
        Alert(
            "TesseraExtenderAmbiguousWritesUnresolved",
            f'sum by (write) (increase(tessera_extender_ambiguous_writes_total{{job="{JOB_EXTENDER}",outcome="unresolved"}}[5m])) > 0',
            "10m", "warning",
            "Tessera extender: {{ $labels.write }} writes stay unresolved",
            "For 10 minutes the API server has answered the extender's writes with timeouts, dropped connections or 5xx, and "
            "reading back did not settle whether they were applied. The capacity they concern stays reserved until a later "
            "read resolves them, so free GPU capacity looks smaller than it is.",
        ),
    ]


def _pool_alerts(t: Thresholds) -> list[Alert]:
    return [
        Alert(
            "TesseraOfflinePausedTooLong",
            'max by (namespace, pod, container) (tessera_container_frozen{app_class="offline"}) == 1',
            f"{t.offline_paused_minutes}m", "warning",
            "Offline container {{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} paused too long",
            f"The container has been frozen for online work for more than {t.offline_paused_minutes} minutes "
            "(monitoring.alerts.offlinePausedMinutes): the online work on its GPU never goes idle.",
        ),
        Alert(
            "TesseraPoolAllocationHigh",
            f"max by (pool, kind) (tessera_pool_gpu_allocated) / max by (pool, kind) (tessera_pool_gpu_capacity > 0) > {_num(t.pool_allocation_percent / 100)}",
            "15m", "warning",
            f"Pool {{{{ $labels.pool }}}} is more than {_num(t.pool_allocation_percent)}% allocated",
            "Allocated GPU compute of the pool stays above monitoring.alerts.poolAllocationPercent of its healthy GPUs; new pods may not fit. Grow the pool or move work.",
        ),
        Alert(
            "TesseraPoolStrandedHigh",
            f"max by (pool, kind) (tessera_pool_gpu_stranded) / max by (pool, kind) (tessera_pool_gpu_capacity > 0) > {_num(t.stranded_share_percent / 100)}",
            "30m", "warning",
            f"Pool {{{{ $labels.pool }}}}: more than {_num(t.stranded_share_percent)}% of its GPU compute is stranded",
            "Idle GPU compute the pods seen in the cluster cannot use (fragments) stays above monitoring.alerts.strandedSharePercent of the pool.",
        ),
    ]


def _dcgm_alerts() -> list[Alert]:
    return [
        Alert(
            "TesseraDcgmXidError", "changes(DCGM_FI_DEV_XID_ERRORS[10m]) > 0 and DCGM_FI_DEV_XID_ERRORS != 0", "0m", "warning",
            "dcgm-exporter reports an Xid on GPU {{ $labels.UUID }} ({{ $labels.Hostname }})",
            "dcgm-exporter's last-Xid field changed in the last 10 minutes on a GPU of an NVIDIA-managed pool (nvidia, mig, timeslice).",
        ),
        Alert(
            "TesseraDcgmRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "5m", "critical",
            "GPU {{ $labels.UUID }} ({{ $labels.Hostname }}) failed to remap memory rows",
            "The GPU could not remap a memory row after uncorrectable errors; it needs a reset or replacement.",
        ),
    ]


def alert_groups(t: Thresholds, *, tessera: bool, dcgm: bool) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups`: Tessera's components (shared pools) and dcgm-exporter's cards."""
    groups: list[dict[str, Any]] = []
    if tessera:
        alerts = _health_alerts() + _component_alerts(t) + _leadership_alerts() + _pool_alerts(t)
        groups.append({"name": GROUP_TESSERA, "rules": [a.rule(t.runbook_url) for a in alerts]})
    if dcgm:
        groups.append({"name": GROUP_DCGM, "rules": [a.rule(t.runbook_url) for a in _dcgm_alerts()]})
    return groups


def all_alerts(t: Thresholds | None = None) -> list[Alert]:
    """Every alert Tessera can deploy (docs and tests list them)."""
    t = t or Thresholds()
    return _health_alerts() + _component_alerts(t) + _leadership_alerts() + _pool_alerts(t) + _dcgm_alerts()
