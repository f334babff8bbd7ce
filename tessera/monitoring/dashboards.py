"""Tessera's Grafana dashboard, built with grafana-foundation-sdk (Grafana's own typed builders).

The panels are declared as data (`ROWS`: title, unit, PromQL queries) so tests can reach every
query without parsing JSON: each one is parsed by `promtool` and its metric names are checked
against what our components and dcgm-exporter export (tests/tessera/monitoring). The builder turns
the declaration into the dashboard model; `build_dashboards()` returns uid -> dashboard JSON,
which `tessera.manifests.monitoring` ships in a ConfigMap the Grafana sidecar loads.

Every extender replica exports the gauges of its own warm state, so pool queries take `max` over
the replicas of each pool before anything is summed across pools.

Queries use fixed `[5m]` windows rather than Grafana's `$__rate_interval`, so they are plain
PromQL that promtool can check; the Prometheus data source is a dashboard variable, so the
dashboard works with whatever the data source is called.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, TooltipDisplayMode
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef

UID: Final = "tessera-overview"
TITLE: Final = "Tessera: GPU sharing"
DATASOURCE_VARIABLE: Final = "datasource"
_DATASOURCE: Final = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")
_WINDOW: Final = "5m"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = 12


def _q(expr: str, legend: str) -> Query:
    return Query(expr, legend)


def _quantiles(bucket: str, by: str, selector: str = "") -> tuple[Query, ...]:
    group = f"le, {by}" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return tuple(
        _q(f"histogram_quantile({q}, sum by ({group}) (rate({bucket}{selector}[{_WINDOW}])))", f"{prefix}p{int(q * 100)}")
        for q in (0.5, 0.99)
    )


_ALLOCATION: Final = (
    PanelSpec(
        "GPU allocation per pool", "Allocated GPU compute against healthy GPUs, per pool (pools Tessera schedules).", "none",
        (_q("max by (pool, kind) (tessera_pool_gpu_allocated)", "{{pool}} ({{kind}}) allocated"),
         _q("max by (pool, kind) (tessera_pool_gpu_capacity)", "{{pool}} ({{kind}}) capacity")),
    ),
    PanelSpec(
        "Allocated share per pool kind", "Allocated GPU compute / healthy GPUs, per pool kind.", "percentunit",
        (_q("sum by (kind) (max by (pool, kind) (tessera_pool_gpu_allocated)) / sum by (kind) (max by (pool, kind) (tessera_pool_gpu_capacity) > 0)", "{{kind}}"),),
        kind="stat", width=6,
    ),
    PanelSpec(
        "NVIDIA-managed GPUs in use per node", "GPUs of nvidia, mig and timeslice pools that a pod holds (dcgm-exporter maps GPUs to pods), against all GPUs it sees.", "none",
        (_q('count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{pod!=""})', "{{Hostname}} in use"),
         _q("count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}} GPUs")),
        width=6,
    ),
)
_FRAGMENTATION: Final = (
    PanelSpec(
        "Stranded share per pool", "Idle GPU compute that the pods seen in the cluster cannot use (FGD's fragmentation), as a share of the pool.", "percentunit",
        (_q("max by (pool, kind) (tessera_pool_gpu_stranded) / max by (pool, kind) (tessera_pool_gpu_capacity > 0)", "{{pool}} ({{kind}})"),),
        width=18,
    ),
    PanelSpec("Stranded GPUs", "Stranded GPU compute over all pools, in GPUs.", "none", (_q("sum(max by (pool, kind) (tessera_pool_gpu_stranded))", "stranded"),), kind="stat", width=6),
)
_WORKLOADS: Final = (
    PanelSpec(
        "Per-container SM use against gpu-core", "SM utilisation of the container's processes next to the gpu-core it requested (percent of one GPU).", "percent",
        (_q("max by (namespace, pod, container) (tessera_container_gpu_utilization_percent)", "{{namespace}}/{{pod}}/{{container}} used"),
         _q("max by (namespace, pod, container) (tessera_container_gpu_core_allocated_percent)", "{{namespace}}/{{pod}}/{{container}} requested")),
    ),
    PanelSpec(
        "Per-pod GPU memory against gpu-memory", "GPU memory the pod's processes use next to the gpu-memory it requested.", "bytes",
        (_q("sum by (namespace, pod) (tessera_container_gpu_memory_used_bytes)", "{{namespace}}/{{pod}} used"),
         _q("sum by (namespace, pod) (tessera_container_gpu_memory_limit_bytes)", "{{namespace}}/{{pod}} requested")),
    ),
    PanelSpec(
        "Use per request, per container", "SM use divided by gpu-core requested: above 1 a burst container uses more than its share, near 0 the request is oversized.", "percentunit",
        (_q("max by (namespace, pod, container) (tessera_container_gpu_utilization_percent) / max by (namespace, pod, container) (tessera_container_gpu_core_allocated_percent > 0)",
            "{{namespace}}/{{pod}}/{{container}}"),),
    ),
    PanelSpec(
        "Whole-GPU pods (dcgm-exporter)", "GPU utilisation of pods holding whole GPUs or MIG slices (nvidia, mig, timeslice pools).", "percent",
        (_q('avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})', "{{namespace}}/{{pod}}"),),
    ),
)
_ONLINE_OFFLINE: Final = (
    PanelSpec(
        "Pause events", "Times containers were frozen (offline paused for online work, or burst throttled), per pod, per 5 minutes.", "none",
        (_q(f"sum by (namespace, pod) (increase(tessera_container_freezes_total[{_WINDOW}]))", "{{namespace}}/{{pod}}"),),
        width=8,
    ),
    PanelSpec(
        "Offline containers paused now", "Offline containers frozen right now, per node.", "none",
        (_q('sum by (node) (tessera_container_frozen{app_class="offline"})', "{{node}}"),),
        width=8,
    ),
    PanelSpec(
        "Pause latency", "From the GPU sample that saw online work active to the offline container frozen.", "s",
        _quantiles("tessera_agent_offline_pause_seconds_bucket", ""),
        width=8,
    ),
)
_EXTENDER: Final = (
    PanelSpec("Extender request latency", "Time to answer kube-scheduler, by verb.", "s", _quantiles("tessera_extender_request_seconds_bucket", "verb"), width=8),
    PanelSpec(
        "Extender requests", "Requests per second by verb and HTTP status, all replicas (a call a standby forwards counts on the standby and on the leader).", "reqps",
        (_q(f"sum by (verb, code) (rate(tessera_extender_requests_total[{_WINDOW}]))", "{{verb}} {{code}}"),),
        width=8,
    ),
    PanelSpec(
        "Binds and errors", "Bind outcomes, server errors and API conflicts per 5 minutes.", "none",
        (_q(f"sum by (outcome) (increase(tessera_extender_binds_total[{_WINDOW}]))", "bind {{outcome}}"),
         _q(f'sum(increase(tessera_extender_requests_total{{code=~"5.."}}[{_WINDOW}]))', "HTTP 5xx"),
         _q(f"sum(increase(tessera_extender_api_conflicts_total[{_WINDOW}]))", "API conflicts (retried)")),
        width=8,
    ),
)
_EXTENDER_REPLICAS: Final = (
    PanelSpec(
        "Extender leader per replica", "1 on the replica that holds the Lease and binds, 0 on standbys; exactly one line at 1 is healthy.", "none",
        (_q("max by (pod) (tessera_extender_leader)", "{{pod}}"),),
        width=8,
    ),
    PanelSpec(
        "Leadership changes", "Lease acquired, released (planned handover) and lost (not renewed in time), per 15 minutes, all replicas.", "none",
        (_q("sum by (event) (increase(tessera_extender_leader_transitions_total[15m]))", "{{event}}"),),
        width=8,
    ),
    PanelSpec(
        "Allocation records in conflict", "Pods whose records conflict, by reason; every replica counts the same records, so the panel shows the largest count.", "none",
        (_q("max by (reason) (tessera_extender_record_conflicts)", "{{reason}}"),),
        width=8,
    ),
    PanelSpec(
        "Ambiguous API writes", "Writes answered with a timeout, a dropped connection or a 5xx, by write and how reading back resolved them, per 5 minutes.", "none",
        (_q(f"sum by (write, outcome) (increase(tessera_extender_ambiguous_writes_total[{_WINDOW}]))", "{{write}} {{outcome}}"),),
    ),
    PanelSpec(
        "Requests forwarded to the leader", "Calls standbys passed on to the leader, per second, by verb and result (no_leader: none held the Lease).", "reqps",
        (_q(f"sum by (verb, result) (rate(tessera_extender_forwarded_requests_total[{_WINDOW}]))", "{{verb}} {{result}}"),),
    ),
)
_DEVICE_PLUGIN: Final = (
    PanelSpec(
        "Device plugin registered per node", "1 while the Tessera device plugin is registered with the node's kubelet.", "none",
        (_q("max by (node) (tessera_device_plugin_registered)", "{{node}}"),),
        width=8,
    ),
    PanelSpec(
        "GPUs advertised by health", "GPUs the device plugins advertise to kubelet, healthy and unhealthy.", "none",
        (_q("sum by (health) (tessera_device_plugin_gpus)", "{{health}}"),),
        width=8,
    ),
    PanelSpec(
        "Registrations and rejected starts", "Register calls to kubelet and container starts refused by PreStartContainer, per 15 minutes.", "none",
        (_q("sum by (node, result) (increase(tessera_device_plugin_registrations_total[15m]))", "{{node}} register {{result}}"),
         _q('sum by (node) (increase(tessera_device_plugin_container_starts_total{result="rejected"}[15m]))', "{{node}} rejected starts")),
        width=8,
    ),
)
_HEALTH: Final = (
    PanelSpec(
        "Xid errors (shared pools)", "Xid errors per GPU in the last hour, from the node agent.", "none",
        (_q("sum by (node, gpu_uuid) (increase(tessera_gpu_xid_errors_total[1h]))", "{{node}} {{gpu_uuid}}"),),
        width=8,
    ),
    PanelSpec(
        "Last Xid per GPU (dcgm-exporter)", "The last Xid dcgm-exporter saw per GPU (0 = none), all pools.", "none",
        (_q("max by (Hostname, UUID) (DCGM_FI_DEV_XID_ERRORS) > 0", "{{Hostname}} {{UUID}}"),),
        width=8,
    ),
    PanelSpec(
        "Unhealthy GPUs", "GPUs the node agents mark unhealthy.", "none",
        (_q("count(tessera_gpu_healthy == 0) or vector(0)", "unhealthy"),),
        kind="stat", width=4,
    ),
    PanelSpec(
        "Webhook admissions", "AdmissionReviews per second by outcome.", "reqps",
        (_q(f"sum by (outcome) (rate(tessera_webhook_admissions_total[{_WINDOW}]))", "{{outcome}}"),),
        width=4,
    ),
)

ROWS: Final[tuple[tuple[str, tuple[PanelSpec, ...]], ...]] = (
    ("GPU allocation", _ALLOCATION),
    ("Fragmentation", _FRAGMENTATION),
    ("GPU use against request", _WORKLOADS),
    ("Online/offline", _ONLINE_OFFLINE),
    ("Scheduler extender", _EXTENDER),
    ("Extender replicas and records", _EXTENDER_REPLICAS),
    ("Device plugin", _DEVICE_PLUGIN),
    ("GPU health and Xid", _HEALTH),
)


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(panel.title, q.expr) for _, panels in ROWS for panel in panels for q in panel.queries]


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel | stat.Panel:
    builder: timeseries.Panel | stat.Panel
    if spec.kind == "timeseries":
        builder = (
            timeseries.Panel()
            .legend(common_builders.VizLegendOptions().display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM).show_legend(True))
            .tooltip(common_builders.VizTooltipOptions().mode(TooltipDisplayMode.MULTI))
        )
    else:
        builder = stat.Panel().reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    builder.id(panel_id).title(spec.title).description(spec.description).unit(spec.unit).datasource(_DATASOURCE).span(spec.width).height(8)
    for i, query in enumerate(spec.queries):
        builder.with_target(prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(chr(ord("A") + i)).datasource(_DATASOURCE))
    return builder


def overview() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    board = (
        dash.Dashboard(TITLE)
        .uid(UID)
        .tags(["tessera", "gpu"])
        .description("Tessera GPU sharing: allocation and fragmentation per pool, use against request, online/offline pausing, extender and its replicas, device plugin and GPU health.")
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(dash.DatasourceVariable(DATASOURCE_VARIABLE).label("Prometheus").type("prometheus"))
    )
    panel_id = 0
    for title, panels in ROWS:
        panel_id += 1
        board.with_row(dash.Row(title).id(panel_id))
        for spec in panels:
            panel_id += 1
            board.with_panel(_panel(spec, panel_id))
    loaded: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return loaded


def build_dashboards() -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON model, for every dashboard Tessera ships."""
    return {UID: overview()}
