"""Generate docs/configuration.md from the models and the catalog: `python -m tessera.model.reference`.

The reference is never edited by hand; a test checks docs/configuration.md equals this output.
"""
from __future__ import annotations

import sys
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tessera.model.catalog import GPU_MODELS, GPU_SOFTWARE, INSTANCE_TYPES, default_gpu_software
from tessera.model.cluster import ClusterConfig, Endpoint, KubeconfigSource, Subnet, SystemNodes
from tessera.model.monitoring import AlertsConfig, DashboardsConfig, GrafanaConfig, KubePrometheusStackConfig, Resources
from tessera.model.platform import (
    ExtenderConfig,
    GpuOperatorConfig,
    ImageRef,
    ImagesConfig,
    LeaderElectionConfig,
    MonitoringConfig,
    NamespaceQuota,
    SchedulerConfig,
    WebhookConfig,
)
from tessera.model.pools import (
    GpuDriverConfig,
    MigConfig,
    MigPool,
    NvidiaPool,
    PoolBase,
    RepartitionEntry,
    SharedPool,
    SharingConfig,
    SystemDisk,
    Taint,
    TimeSlicingConfig,
    TimeslicePool,
)
from tessera.model.secrets import SECRET_FIELDS
from tessera.model.stack import StackConfig
from tessera.model.workloads import (
    EnvVar,
    HttpProbe,
    KeyRef,
    MetricQuery,
    ScalingMetric,
    Workload,
    WorkloadGpu,
    WorkloadMetrics,
    WorkloadPort,
    WorkloadScaling,
    WorkloadVolume,
)

# sections in reading order: (config key or heading, model)
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("Stack keys", StackConfig),
    ("cluster", ClusterConfig),
    ("cluster.subnets[]", Subnet),
    ("cluster.endpoint", Endpoint),
    ("cluster.kubeconfig", KubeconfigSource),
    ("cluster.systemNodes", SystemNodes),
    ("nodePools[] (every kind)", PoolBase),
    ("nodePools[] kind: nvidia", NvidiaPool),
    ("nodePools[] kind: shared", SharedPool),
    ("nodePools[] kind: mig", MigPool),
    ("nodePools[] kind: timeslice", TimeslicePool),
    ("nodePools[].sharing", SharingConfig),
    ("nodePools[].mig", MigConfig),
    ("nodePools[].timeSlicing", TimeSlicingConfig),
    ("nodePools[].repartition[]", RepartitionEntry),
    ("nodePools[].gpuDriver", GpuDriverConfig),
    ("nodePools[].systemDisk", SystemDisk),
    ("nodePools[].taints[]", Taint),
    ("scheduler", SchedulerConfig),
    ("scheduler.extender", ExtenderConfig),
    ("scheduler.extender.leaderElection", LeaderElectionConfig),
    ("images", ImagesConfig),
    ("images.tessera, images.kubeScheduler", ImageRef),
    ("gpuOperator", GpuOperatorConfig),
    ("quotas[]", NamespaceQuota),
    ("monitoring", MonitoringConfig),
    ("monitoring.kubePrometheusStack", KubePrometheusStackConfig),
    ("monitoring.kubePrometheusStack.grafana", GrafanaConfig),
    ("monitoring.kubePrometheusStack.prometheusResources, grafana.resources, workloads[].resources", Resources),
    ("monitoring.dashboards", DashboardsConfig),
    ("monitoring.alerts", AlertsConfig),
    ("webhook", WebhookConfig),
    ("workloads[]", Workload),
    ("workloads[].gpu", WorkloadGpu),
    ("workloads[].scaling", WorkloadScaling),
    ("workloads[].scaling.metric", ScalingMetric),
    ("workloads[].scaling.metric.query", MetricQuery),
    ("workloads[].ports[]", WorkloadPort),
    ("workloads[].env[]", EnvVar),
    ("workloads[].env[].secret, configMap", KeyRef),
    ("workloads[].volumes[]", WorkloadVolume),
    ("workloads[].metrics", WorkloadMetrics),
    ("workloads[].readinessProbe, livenessProbe", HttpProbe),
)
_ANCHORS = {model: heading for heading, model in SECTIONS}


def _type(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _type(get_args(tp)[0])
    if origin is Literal:
        return " \\| ".join(str(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in get_args(tp) if a is not type(None))
    if origin is list:
        return f"list of {_type(get_args(tp)[0])}"
    if origin is dict:
        key, value = get_args(tp)
        return f"mapping {_type(key)} → {_type(value)}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{_slug(_ANCHORS.get(tp, tp.__name__))})"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, getattr(tp, "__name__", str(tp)))


def _slug(heading: str) -> str:
    keep = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def _default(info: Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return "see section"
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    if info.default is PydanticUndefined:
        return "**required**"
    if info.default is None:
        return "unset"
    return f"`{str(info.default).lower() if isinstance(info.default, bool) else info.default}`"


def _fields(model: type[BaseModel], skip: frozenset[str]) -> list[str]:
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        key = "tencentcloud:region" if model is StackConfig and name == "region" else (info.alias or name)
        if model is StackConfig and name != "region":
            key = f"tessera:{key}"
        description = (info.description or "").replace("|", "\\|")
        rows.append(f"| `{key}` | {_type(info.annotation)} | {_default(info)} | {description} |")
    return rows


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def _catalog() -> list[str]:
    lines = ["## GPU catalog", "", "| GPU | memory MiB | MIG | default driver / CUDA / cuDNN |", "| --- | --- | --- | --- |"]
    for spec in GPU_MODELS.values():
        sw = default_gpu_software(spec)
        mig = f"{spec.mig_compute_slices} compute / {spec.mig_memory_slices} memory slices" if spec.mig_capable else "no"
        lines.append(f"| {spec.name} | {spec.memory_mib} | {mig} | {sw.driver.version} / {sw.cuda.version} / {sw.cudnn.version} |")
    lines += [
        "",
        "### GPU software (driver / CUDA / cuDNN)",
        "",
        "`gpuDriver` picks one of these whole records (TKE takes each package by version and installer file name);",
        "any other combination is refused at preview with the nearest ones. \"unconfirmed\" records use NVIDIA's file",
        "names but were not found in the TencentCloud provider's docs or examples.",
        "",
        "| driver | CUDA | cuDNN | installer files | GPU architectures | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in GPU_SOFTWARE:
        files = ", ".join(f"`{n}`" for n in (r.driver.name, r.cuda.name, r.cudnn.name, r.cudnn.doc_name, r.cudnn.dev_name) if n)
        note = r.source if r.confirmed else f"unconfirmed: {r.source}"
        if r.node_os_prefix:
            note += f"; Debian packages, needs a {r.node_os_prefix} node image"
        lines.append(f"| {r.driver.version} | {r.cuda.version} | {r.cudnn.version} | {files} | {', '.join(sorted(r.architectures))} | {note} |")
    lines += ["", "### MIG profiles", "", "| GPU | profile | compute slices | memory slices | max per GPU | memory MiB |", "| --- | --- | --- | --- | --- | --- |"]
    for spec in GPU_MODELS.values():
        lines += [f"| {spec.name} | {p.name} | {p.compute_slices} | {p.memory_slices} | {p.max_count} | {p.memory_mib} |" for p in spec.mig_profiles]
    lines += ["", "### Named MIG layouts", "", "| GPU | layout | profiles per GPU |", "| --- | --- | --- |"]
    for spec in GPU_MODELS.values():
        lines += [f"| {spec.name} | {name} | {', '.join(f'{k} x{v}' for k, v in counts.items())} |" for name, counts in spec.mig_layouts.items()]
    lines += ["", "## TKE instance types", "", "| instance type | GPU | GPUs per node | note |", "| --- | --- | --- | --- |"]
    lines += [f"| {s.name} | {s.gpu_model} | {s.gpu_count} | {'' if s.confirmed else 'unconfirmed size'} |" for s in INSTANCE_TYPES.values()]
    return lines


def render() -> str:
    """The whole reference as Markdown."""
    common = frozenset(PoolBase.model_fields) - {"kind"}
    lines = [
        "# Configuration reference",
        "",
        "<!-- generated by `python -m tessera.model.reference > docs/configuration.md`; do not edit -->",
        "",
        "Stack files live in `stacks/Pulumi.<stack>.yaml`. Keys are camelCase under the `tessera:` namespace;",
        "`tencentcloud:region` is the provider's region. Unknown keys are errors, and so are keys in any",
        "namespace other than `tessera:`, `tencentcloud:`, `kubernetes:` and `pulumi:` (a misspelt",
        "`tesera:quotas` would otherwise reach nobody); both come with a did-you-mean. Check a file with",
        "`tessera validate stacks/Pulumi.<stack>.yaml` and see what it creates with `tessera plan`.",
        "Every problem is reported as `<file>: <path>: <message>`, the path in these keys, e.g.",
        "`nodePools[2].mig.profile`.",
        "",
        "**Pool kinds.** `nvidia`: whole GPUs, exclusive (`nvidia.com/gpu`). `shared`: fractions through",
        "Tessera (`tessera.dev/gpu-core` in percent, `tessera.dev/gpu-memory` in MiB) with a per-pool",
        "isolation policy. `mig`: hardware slices (`nvidia.com/mig-<profile>` with strategy mixed,",
        "`nvidia.com/gpu` with single), optionally time-sliced. `timeslice`: whole GPUs advertised",
        "`replicas` times, no isolation.",
        "",
        "**Provider tke vs existing.** With `provider: tke` each pool is a TKE node pool: `instanceType`",
        "is required and the GPU model and count come from the catalog below (or `customInstanceType:",
        "true` with `gpuModel` and `gpuCount` for a type the catalog lacks). With `provider: existing`",
        "Tessera creates no machines: a pool is the set of existing nodes matched by `nodeSelector`,",
        "`gpuModel` and `gpuCount` describe them, and `minSize`/`maxSize`/`desiredSize` are the node",
        "counts `tessera plan` reports. Cloud-only keys are refused there. Preview lists the nodes and",
        "gives the selected ones the pool's labels and taints (node patches; `tessera plan --kubeconfig`",
        "shows which nodes join which pool; docs/deployment.md, \"Existing clusters\").",
        "",
        "**Credentials** never appear in clear in a stack file: Tencent Cloud keys come from",
        "`TENCENTCLOUD_SECRET_ID`/`TENCENTCLOUD_SECRET_KEY` or `pulumi config set --secret",
        "tencentcloud:secretKey`; an existing cluster's kubeconfig is a file path, an environment",
        "variable, or a Pulumi secret. A setting that names a secret holds only its key; the value goes",
        "in with `pulumi config set --secret`, which stores it encrypted (`tessera:<key>: {secure: ...}`):",
        "",
        "| setting | set its secret with |",
        "| --- | --- |",
        *(f"| `{field.dotted}` | `{field.set_command('<key>')}` |" for field in SECRET_FIELDS),
        "",
        "`tessera validate`, `plan` and `render`, the Pulumi program and the package's components accept",
        "these keys as secrets, and only these: any other secure value is an error, and so is a named",
        "secret set in clear (`pulumi config set` without `--secret`). A named secret that is not set",
        "stops `pulumi preview` with the command to run.",
        "",
    ]
    for heading, model in SECTIONS:
        skip = common if model in (NvidiaPool, SharedPool, MigPool, TimeslicePool) else frozenset()
        lines += [f"## {heading}", "", _doc(model), "", *_fields(model, skip), ""]
    lines += _catalog()
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
