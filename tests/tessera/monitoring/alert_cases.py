"""Input series for `promtool test rules`: for every alert, series that make it fire and series
that must not. Thresholds are `Thresholds()` (the config defaults): allocation 90 %, stranded
20 %, offline paused 30 min, extender p99 0.1 s, extender errors 1 %."""
from __future__ import annotations

from dataclasses import dataclass, field

Labels = dict[str, str]


@dataclass(frozen=True)
class Case:
    alert: str
    name: str
    series: dict[str, str]  # promtool series selector -> values
    eval_time: str
    fires: tuple[Labels, ...] = ()  # labels of each expected alert (severity and alertname added by the test)
    extra: dict[str, str] = field(default_factory=dict)


AGENT = 'job="tessera-node-agent",node="n1",instance="10.0.0.1:9500"'
GPU = f'gpu_uuid="GPU-1",gpu_index="0",model="T4",{AGENT}'
GPU_LABELS: Labels = {"gpu_uuid": "GPU-1", "gpu_index": "0", "model": "T4", "job": "tessera-node-agent", "node": "n1", "instance": "10.0.0.1:9500"}
PLUGIN = 'job="tessera-device-plugin",node="n1",instance="10.0.0.1:9501"'
PLUGIN_LABELS: Labels = {"job": "tessera-device-plugin", "node": "n1", "instance": "10.0.0.1:9501"}
RES = 'resource="tessera.dev/gpu-core"'
DCGM = 'gpu="0",UUID="GPU-9",modelName="A100",Hostname="h1",job="nvidia-dcgm-exporter"'
DCGM_LABELS: Labels = {"gpu": "0", "UUID": "GPU-9", "modelName": "A100", "Hostname": "h1", "job": "nvidia-dcgm-exporter"}
CONTAINER = 'namespace="batch",pod="train",container="main",gpu_uuid="GPU-1",job="tessera-node-agent",node="n1"'


EXT1 = 'job="tessera-extender",instance="10.1.0.1:8888",pod="tessera-extender-a"'
EXT2 = 'job="tessera-extender",instance="10.1.0.2:8888",pod="tessera-extender-b"'
EXT1_LABELS: Labels = {"job": "tessera-extender", "instance": "10.1.0.1:8888", "pod": "tessera-extender-a"}


def _both(metric: str, first: str, second: str, labels: str = "") -> dict[str, str]:
    """`metric` on both extender replicas (extra `labels` on each), with their value sequences."""
    extra = f",{labels}" if labels else ""
    return {f"{metric}{{{EXT1}{extra}}}": first, f"{metric}{{{EXT2}{extra}}}": second}


_LEADER = "tessera_extender_leader"
_TRANSITIONS = "tessera_extender_leader_transitions_total"
_CONFLICTS = "tessera_extender_record_conflicts"
_AMBIGUOUS = "tessera_extender_ambiguous_writes_total"
_UP_BOTH = {f"up{{{EXT1}}}": "1x30", f"up{{{EXT2}}}": "1x30"}

LEADERSHIP_CASES: tuple[Case, ...] = (
    Case("TesseraExtenderNoLeader", "both replicas standing by", {**_UP_BOTH, **_both(_LEADER, "0x10", "0x10")}, "5m", ({},)),
    Case("TesseraExtenderNoLeader", "replicas up, no leader series", _UP_BOTH, "5m", ({"job": "tessera-extender"},)),
    Case("TesseraExtenderNoLeader", "one leader", {**_UP_BOTH, **_both(_LEADER, "1x10", "0x10")}, "5m"),
    Case("TesseraExtenderNoLeader", "a handover shorter than a minute", {**_UP_BOTH, **_both(_LEADER, "1 1 1 0 0 0 0", "0 0 0 0 1 1 1")}, "6m"),
    Case("TesseraExtenderNoLeader", "nothing up: TesseraExtenderDown's case", {f"up{{{EXT1}}}": "0x10"}, "5m"),
    Case("TesseraExtenderSplitLeadership", "two leaders", _both(_LEADER, "1x10", "1x10"), "5m", ({},)),
    Case("TesseraExtenderSplitLeadership", "one leader", _both(_LEADER, "1x10", "0x10"), "5m"),
    Case("TesseraExtenderSplitLeadership", "one scrape of overlap in a handover", _both(_LEADER, "1 1 1 1 0 0 0", "0 0 0 1 1 1 1"), "6m"),
    Case(
        "TesseraExtenderLeaderFlapping", "a new leader every minute",
        _both(_TRANSITIONS, "0+1x20", "0+1x20", 'event="acquired"'), "16m", ({},),
    ),
    Case(
        "TesseraExtenderLeaderFlapping", "a rolling update: two handovers",
        _both(_TRANSITIONS, "0 0 1x18", "0x4 1x15", 'event="acquired"'), "16m",
    ),
    Case("TesseraExtenderLeaderFlapping", "releases do not count", _both(_TRANSITIONS, "0+1x20", "0x20", 'event="released"'), "16m"),
    Case(
        "TesseraExtenderRecordConflicts", "both replicas see an overcommit",
        _both(_CONFLICTS, "2x10", "2x10", 'reason="overcommit"'), "5m", ({"reason": "overcommit"},),
    ),
    Case("TesseraExtenderRecordConflicts", "no conflict", _both(_CONFLICTS, "0x10", "0x10", 'reason="unknown_gpu"'), "5m"),
    Case("TesseraExtenderRecordConflicts", "one scrape's blip", _both(_CONFLICTS, "0 1 0 0 0 0", "0x5", 'reason="unreadable"'), "5m"),
    Case(
        "TesseraExtenderAmbiguousWritesUnresolved", "every minute a record write stays unresolved",
        {f'{_AMBIGUOUS}{{{EXT1},write="record",outcome="unresolved"}}': "0+1x30"}, "20m", ({"write": "record"},),
    ),
    Case(
        "TesseraExtenderAmbiguousWritesUnresolved", "ambiguous writes, all resolved",
        {f'{_AMBIGUOUS}{{{EXT1},write="binding",outcome="applied"}}': "0+5x30", f'{_AMBIGUOUS}{{{EXT1},write="binding",outcome="not_applied"}}': "0+5x30"},
        "20m",
    ),
    Case(
        "TesseraExtenderAmbiguousWritesUnresolved", "one unresolved write, then none",
        {f'{_AMBIGUOUS}{{{EXT1},write="strip",outcome="unresolved"}}': "0 0 1x28"}, "20m",
    ),
)


def _bucket(verb: str, le: str, values: str) -> tuple[str, str]:
    return f'tessera_extender_request_seconds_bucket{{verb="{verb}",le="{le}",job="tessera-extender"}}', values


def _slow(verb: str) -> dict[str, str]:
    """Every request of `verb` took between 0.25 s and 1 s."""
    return dict(_bucket(verb, le, v) for le, v in (("0.05", "0+0x30"), ("0.1", "0+0x30"), ("0.25", "0+0x30"), ("1.0", "0+100x30"), ("+Inf", "0+100x30")))


def _fast(verb: str) -> dict[str, str]:
    """Every request of `verb` answered within 50 ms."""
    return dict(_bucket(verb, le, "0+100x30") for le in ("0.05", "0.1", "0.25", "1.0", "+Inf"))


CASES: tuple[Case, ...] = (
    Case("TesseraGpuUnhealthy", "unhealthy", {f"tessera_gpu_healthy{{{GPU}}}": "0x10"}, "5m", (GPU_LABELS,)),
    Case("TesseraGpuUnhealthy", "healthy", {f"tessera_gpu_healthy{{{GPU}}}": "1x10"}, "5m"),
    Case("TesseraGpuUnhealthy", "a blip shorter than 2m", {f"tessera_gpu_healthy{{{GPU}}}": "1 1 0 1 1 1 1"}, "5m"),
    Case("TesseraGpuXidErrors", "new xid", {f"tessera_gpu_xid_errors_total{{{GPU}}}": "0 0 0 1 1 1"}, "5m", (GPU_LABELS,)),
    Case("TesseraGpuXidErrors", "old xids only", {f"tessera_gpu_xid_errors_total{{{GPU}}}": "3x20"}, "15m"),
    Case("TesseraGpuOvercommitted", "core over 100", {f"tessera_gpu_core_allocated_percent{{{GPU}}}": "120x10"}, "8m", (GPU_LABELS,)),
    Case(
        "TesseraGpuOvercommitted", "memory over the card",
        {f"tessera_gpu_core_allocated_percent{{{GPU}}}": "50x10", f"tessera_gpu_memory_allocated_bytes{{{GPU}}}": "17179869185x10",
         f"tessera_gpu_memory_total_bytes{{{GPU}}}": "17179869184x10"},
        "8m", (GPU_LABELS,),
    ),
    Case(
        "TesseraGpuOvercommitted", "exactly full",
        {f"tessera_gpu_core_allocated_percent{{{GPU}}}": "100x10", f"tessera_gpu_memory_allocated_bytes{{{GPU}}}": "17179869184x10",
         f"tessera_gpu_memory_total_bytes{{{GPU}}}": "17179869184x10"},
        "8m",
    ),
    Case("TesseraGpuOvercommitted", "a moment over, while a pod terminates", {f"tessera_gpu_core_allocated_percent{{{GPU}}}": "100 130 130 100 100 100 100 100"}, "7m"),
    Case(
        "TesseraDevicePluginNotRegistered", "unregistered",
        {f"tessera_device_plugin_registered{{{RES},{PLUGIN}}}": "0x20", f"tessera_device_plugin_paused{{{PLUGIN}}}": "0x20"},
        "15m", ({"resource": "tessera.dev/gpu-core", **PLUGIN_LABELS},),
    ),
    Case("TesseraDevicePluginNotRegistered", "not scraped", {f"up{{{PLUGIN}}}": "0x20"}, "15m", (PLUGIN_LABELS,)),
    Case(
        "TesseraDevicePluginNotRegistered", "paused for a MIG change",
        {f"tessera_device_plugin_registered{{{RES},{PLUGIN}}}": "0x20", f"tessera_device_plugin_paused{{{PLUGIN}}}": "1x20", f"up{{{PLUGIN}}}": "1x20"},
        "15m",
    ),
    Case("TesseraDevicePluginNotRegistered", "registered", {f"tessera_device_plugin_registered{{{RES},{PLUGIN}}}": "1x20", f"up{{{PLUGIN}}}": "1x20"}, "15m"),
    Case("TesseraNodeAgentDown", "down", {f"up{{{AGENT}}}": "0x10"}, "8m", ({"job": "tessera-node-agent", "node": "n1", "instance": "10.0.0.1:9500"},)),
    Case("TesseraNodeAgentDown", "up", {f"up{{{AGENT}}}": "1x10"}, "8m"),
    Case(
        "TesseraGpuNodesWithoutAgents", "one node has neither",
        {'tessera_extender_nodes{job="tessera-extender"}': "2x20", f"up{{{AGENT}}}": "1x20", f"tessera_device_plugin_registered{{{RES},{PLUGIN}}}": "1x20"},
        "18m", ({},),
    ),
    Case(
        "TesseraGpuNodesWithoutAgents", "every node has both",
        {'tessera_extender_nodes{job="tessera-extender"}': "1x20", f"up{{{AGENT}}}": "1x20", f"tessera_device_plugin_registered{{{RES},{PLUGIN}}}": "1x20"},
        "18m",
    ),
    Case("TesseraExtenderDown", "every replica down", {f"up{{{EXT1}}}": "0x10", f"up{{{EXT2}}}": "0x10"}, "8m", ({},)),
    Case("TesseraExtenderDown", "never scraped", {"unrelated": "1x10"}, "8m", ({"job": "tessera-extender"},)),
    Case("TesseraExtenderDown", "one of two replicas down", {f"up{{{EXT1}}}": "0x10", f"up{{{EXT2}}}": "1x10"}, "8m"),
    Case("TesseraExtenderReplicaDown", "one of two replicas down", {f"up{{{EXT1}}}": "0x15", f"up{{{EXT2}}}": "1x15"}, "13m", (EXT1_LABELS,)),
    Case("TesseraExtenderReplicaDown", "a replica restarting for 3 minutes", {f"up{{{EXT1}}}": "1 1 0 0 0 1x10", f"up{{{EXT2}}}": "1x15"}, "13m"),
    *LEADERSHIP_CASES,
    Case(
        "TesseraExtenderErrors", "9% answered 500",
        {'tessera_extender_requests_total{verb="filter",code="200"}': "0+600x20", 'tessera_extender_requests_total{verb="bind",code="500"}': "0+60x20"},
        "17m", ({},),
    ),
    Case(
        "TesseraExtenderErrors", "binds ending in error",
        {'tessera_extender_requests_total{verb="bind",code="200"}': "0+600x20", 'tessera_extender_binds_total{outcome="error"}': "0+60x20"},
        "17m", ({},),
    ),
    Case(
        "TesseraExtenderErrors", "0.5% answered 500",
        {'tessera_extender_requests_total{verb="filter",code="200"}': "0+600x20", 'tessera_extender_requests_total{verb="filter",code="500"}': "0+3x20"},
        "17m",
    ),
    Case("TesseraExtenderSlow", "slow filter", _slow("filter"), "20m", ({"verb": "filter"},)),
    Case("TesseraExtenderSlow", "fast filter and prioritize", {**_fast("filter"), **_fast("prioritize")}, "20m"),
    Case("TesseraExtenderSlow", "slow binds are not in the budget", _slow("bind"), "20m"),
    Case("TesseraWebhookDown", "down", {'up{job="tessera-webhook",pod="w1"}': "0x10"}, "8m", ({"job": "tessera-webhook", "pod": "w1"},)),
    Case("TesseraWebhookDown", "up", {'up{job="tessera-webhook",pod="w1"}': "1x10"}, "8m"),
    Case(
        "TesseraOfflinePausedTooLong", "paused 40 minutes",
        {f'tessera_container_frozen{{{CONTAINER},app_class="offline"}}': "1x45"}, "40m", ({"namespace": "batch", "pod": "train", "container": "main"},),
    ),
    Case("TesseraOfflinePausedTooLong", "paused 20 minutes, then resumed", {f'tessera_container_frozen{{{CONTAINER},app_class="offline"}}': "1x20 0x25"}, "40m"),
    Case("TesseraOfflinePausedTooLong", "an online container throttled", {f'tessera_container_frozen{{{CONTAINER},app_class="online"}}': "1x45"}, "40m"),
    Case(
        "TesseraPoolAllocationHigh", "95% allocated",
        {'tessera_pool_gpu_allocated{pool="a",kind="shared"}': "3.8x25", 'tessera_pool_gpu_capacity{pool="a",kind="shared"}': "4x25"},
        "20m", ({"pool": "a", "kind": "shared"},),
    ),
    Case(
        "TesseraPoolAllocationHigh", "95% allocated, reported by both extender replicas",
        {**_both("tessera_pool_gpu_allocated", "3.8x25", "3.8x25", 'pool="a",kind="shared"'), **_both("tessera_pool_gpu_capacity", "4x25", "4x25", 'pool="a",kind="shared"')},
        "20m", ({"pool": "a", "kind": "shared"},),
    ),
    Case(
        "TesseraPoolAllocationHigh", "80% allocated, and an empty pool",
        {'tessera_pool_gpu_allocated{pool="a",kind="shared"}': "3.2x25", 'tessera_pool_gpu_capacity{pool="a",kind="shared"}': "4x25",
         'tessera_pool_gpu_allocated{pool="b",kind="shared"}': "0x25", 'tessera_pool_gpu_capacity{pool="b",kind="shared"}': "0x25"},
        "20m",
    ),
    Case(
        "TesseraPoolStrandedHigh", "25% stranded",
        {'tessera_pool_gpu_stranded{pool="a",kind="shared"}': "1x40", 'tessera_pool_gpu_capacity{pool="a",kind="shared"}': "4x40"},
        "35m", ({"pool": "a", "kind": "shared"},),
    ),
    Case(
        "TesseraPoolStrandedHigh", "12.5% stranded",
        {'tessera_pool_gpu_stranded{pool="a",kind="shared"}': "0.5x40", 'tessera_pool_gpu_capacity{pool="a",kind="shared"}': "4x40"},
        "35m",
    ),
    Case("TesseraDcgmXidError", "a new xid", {f"DCGM_FI_DEV_XID_ERRORS{{{DCGM}}}": "0 0 0 79 79 79"}, "5m", (DCGM_LABELS,)),
    Case("TesseraDcgmXidError", "an xid from long ago", {f"DCGM_FI_DEV_XID_ERRORS{{{DCGM}}}": "79x20"}, "15m"),
    Case("TesseraDcgmRowRemapFailure", "failed", {f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{DCGM}}}": "1x10"}, "8m", (DCGM_LABELS,)),
    Case("TesseraDcgmRowRemapFailure", "fine", {f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{DCGM}}}": "0x10"}, "8m"),
)
