"""Cross-field rules of the `workloads` section; each returns Problems with full config paths.

What a preview refuses (docs/workloads.md): a pool that does not exist or whose kind does not fit
the GPU request; a share the pool's GPU model cannot give (memory above the GPU's, core not 1..100
or N x 100, a MIG profile outside the pool's layout); more at maxReplicas than the pool can hold
or the namespace's quota allows; min above max; a scaling metric prometheus-adapter would not
serve, or an adapter that is not installed.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Final, Protocol

from tessera.model.capacity import node_capacity, pools_mig_strategy, replica_request, timeslice_replicas
from tessera.model.contract import CORE_PER_GPU
from tessera.model.mig import MigStrategy, resolve_layout
from tessera.model.monitoring import MonitoringConfig
from tessera.model.platform import ImagesConfig, NamespaceQuota
from tessera.model.pools import MigPool, NvidiaPool, PoolBase, SharedPool, TimeslicePool
from tessera.model.problems import PathPart, Problem, at
from tessera.model.workloads import ADAPTER_METRICS, MetricQuery, MetricType, Workload

_QUANTITY: Final = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SCALE: Final = {
    None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}
_DURATION_PART: Final = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_SECONDS: Final = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_GPU_KEYS: Final = (("core", "core"), ("memory_mib", "memoryMiB"), ("mig_profile", "migProfile"), ("gpus", "gpus"))
_KEYS_OF_KIND: Final = {"shared": ("core", "memory_mib"), "mig": ("mig_profile",), "nvidia": ("gpus",), "timeslice": ("gpus",)}
SYSTEM_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease")
_HINT_OF_KIND: Final = {"shared": "gpu.core (and gpu.memoryMiB)", "mig": "gpu.migProfile", "nvidia": "gpu.gpus", "timeslice": "gpu.gpus"}


class WorkloadStack(Protocol):
    """The parts of a stack config these rules read (`StackConfig` is one)."""

    @property
    def node_pools(self) -> Sequence[PoolBase]: ...
    @property
    def quotas(self) -> Sequence[NamespaceQuota]: ...
    @property
    def monitoring(self) -> MonitoringConfig: ...
    @property
    def images(self) -> ImagesConfig: ...
    @property
    def namespace(self) -> str: ...
    @property
    def workloads(self) -> Sequence[Workload]: ...


def quantity_value(text: str) -> float:
    """A Kubernetes quantity (already validated by the model) as a number: 500m -> 0.5, 2Gi -> 2147483648."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    return float(match[1]) * _SCALE[match[2]]


def duration_seconds(text: str) -> float:
    """A Prometheus duration (already validated by the model) in seconds: 1m30s -> 90."""
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def _near(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _unique(values: Sequence[str], base: tuple[PathPart, ...], field: str, key: str, what: str) -> list[Problem]:
    out: list[Problem] = []
    first: dict[str, int] = {}
    for j, value in enumerate(values):
        if value in first:
            out.append(Problem(at(*base, field, j, key), f"duplicate {what} {value!r} (also {field}[{first[value]}])"))
        first.setdefault(value, j)
    return out


def _container_problems(w: Workload, p: tuple[PathPart, ...], images: ImagesConfig) -> list[Problem]:
    out: list[Problem] = []
    if w.image.tag is None and w.image.digest is None:
        out.append(Problem(at(*p, "image"), "needs a tag or a digest (an image without either is whatever :latest is on the day a node pulls it)"))
    if images.require_digests and w.image.digest is None:
        out.append(Problem(at(*p, "image", "digest"), "is required because images.requireDigests is true (pin the image: sha256:...)"))
    for j, var in enumerate(w.env):
        chosen = [k for k, v in (("value", var.value), ("secret", var.secret), ("configMap", var.config_map)) if v is not None]
        if len(chosen) != 1:
            out.append(Problem(at(*p, "env", j), f"set exactly one of value, secret, configMap (got {', '.join(chosen) or 'none'})"))
    out += _unique([v.name for v in w.env], p, "env", "name", "variable")
    out += _unique([port.name for port in w.ports], p, "ports", "name", "port name")
    out += _unique([str(port.port) for port in w.ports], p, "ports", "port", "port number")
    names = [port.name for port in w.ports]
    for key, probe in (("readinessProbe", w.readiness_probe), ("livenessProbe", w.liveness_probe)):
        if probe is not None and probe.port not in names:
            out.append(Problem(at(*p, key, "port"), f"{probe.port!r} is not one of the workload's ports ({', '.join(names) or 'none declared'})"))
    if w.metrics is not None and w.metrics.port not in names:
        out.append(Problem(at(*p, "metrics", "port"), f"{w.metrics.port!r} is not one of the workload's ports ({', '.join(names) or 'none declared'})"))
    for j, volume in enumerate(w.volumes):
        chosen = [k for k, v in (("claimName", volume.claim_name), ("configMap", volume.config_map)) if v is not None]
        if len(chosen) != 1:
            out.append(Problem(at(*p, "volumes", j), f"set exactly one of claimName, configMap (got {', '.join(chosen) or 'none'})"))
    out += _unique([v.name for v in w.volumes], p, "volumes", "name", "volume")
    out += _unique([v.mount_path for v in w.volumes], p, "volumes", "mountPath", "mount path")
    r = w.resources
    for what, request, limit in (("cpu", r.cpu_request, r.cpu_limit), ("memory", r.memory_request, r.memory_limit)):
        if quantity_value(request) > quantity_value(limit):
            out.append(Problem(at(*p, "resources", f"{what}Request"), f"{request} is above {what}Limit {limit}"))
    return out


def _wrong_keys(w: Workload, p: tuple[PathPart, ...], pool: PoolBase) -> list[Problem]:
    out: list[Problem] = []
    allowed = _KEYS_OF_KIND[pool.kind]
    for field, key in _GPU_KEYS:
        if getattr(w.gpu, field) is not None and field not in allowed:
            out.append(Problem(at(*p, "gpu", key), f"does not apply to pool {pool.name}, which is {pool.kind}: use {_HINT_OF_KIND[pool.kind]}"))
    if not any(getattr(w.gpu, field) is not None for field in allowed):
        key = dict(_GPU_KEYS)[allowed[0]]
        out.append(Problem(at(*p, "gpu", key), f"is required on pool {pool.name} ({pool.kind}): one replica's {_HINT_OF_KIND[pool.kind]}"))
    return out


def _share_problems(w: Workload, p: tuple[PathPart, ...], pool: PoolBase) -> list[Problem]:
    """Does one replica's share exist on one node of the pool's GPU model?"""
    model, gpus = pool.gpu_spec(), pool.gpus_per_node()
    out: list[Problem] = []
    g = w.gpu
    if isinstance(pool, SharedPool) and g.core is not None:
        if g.core > CORE_PER_GPU and g.core % CORE_PER_GPU:
            out.append(Problem(at(*p, "gpu", "core"), f"{g.core} is neither a share of one GPU (1..100) nor whole GPUs (a multiple of 100)"))
        elif g.core // CORE_PER_GPU > gpus:
            out.append(Problem(at(*p, "gpu", "core"), f"{g.core} is {g.core // CORE_PER_GPU} GPUs; a node of pool {pool.name} has {gpus}"))
        if g.memory_mib is not None and g.memory_mib > model.memory_mib:
            out.append(Problem(at(*p, "gpu", "memoryMiB"), f"{g.memory_mib} MiB is more than a {model.name} has ({model.memory_mib} MiB)"))
    if isinstance(pool, SharedPool) and g.core is None and g.memory_mib is not None:
        out.append(Problem(at(*p, "gpu", "core"), "is required with memoryMiB (Tessera's webhook refuses gpu-memory without gpu-core)"))
    if isinstance(pool, SharedPool) and pool.allocation == "dra" and g.core is not None and g.core < CORE_PER_GPU and g.memory_mib is None and pool.sharing.shares_per_gpu != 1:
        # kube-scheduler consumes the slice's default for a capacity a claim does not name: all of the GPU's memory
        out.append(Problem(at(*p, "gpu", "memoryMiB"), f"is required for a share on pool {pool.name} (allocation: dra): a claim that names no memory takes all of the GPU's memory and shares the GPU with nobody"))
    if isinstance(pool, MigPool) and g.mig_profile is not None:
        counts = resolve_layout(model, pool.mig.profile) or {}
        if model.mig_profile(g.mig_profile) is None:
            valid = list(model.mig_profile_names())
            out.append(Problem(at(*p, "gpu", "migProfile"), f"{g.mig_profile!r} is not a MIG profile of {model.name}{_near(g.mig_profile, valid)} (valid: {', '.join(valid)})"))
        elif g.mig_profile not in counts:
            out.append(Problem(at(*p, "gpu", "migProfile"), f"{g.mig_profile!r} is not in pool {pool.name}'s MIG layout (it offers {', '.join(counts)})"))
    if isinstance(pool, NvidiaPool | TimeslicePool) and g.gpus is not None:
        per_node = gpus
        if isinstance(pool, TimeslicePool):
            per_node *= timeslice_replicas(pool)
            if pool.time_slicing.fail_requests_greater_than_one and g.gpus > 1:
                out.append(Problem(at(*p, "gpu", "gpus"), f"pool {pool.name} sets timeSlicing.failRequestsGreaterThanOne, so a replica may ask for 1, not {g.gpus}"))
        if g.gpus > per_node:
            out.append(Problem(at(*p, "gpu", "gpus"), f"{g.gpus} is more than a node of pool {pool.name} offers ({per_node})"))
    return out


def _capacity_problems(w: Workload, p: tuple[PathPart, ...], pool: PoolBase, strategy: MigStrategy) -> list[Problem]:
    """maxReplicas replicas, each its share, within what the pool offers at maxSize nodes."""
    out: list[Problem] = []
    per_node = node_capacity(pool, strategy)
    n = w.scaling.max_replicas
    for resource, amount in replica_request(w.gpu, pool, strategy).items():
        offered = per_node.get(resource, 0) * pool.max_size
        if amount * n > offered:
            out.append(Problem(
                at(*p, "scaling", "maxReplicas"),
                f"{n} replicas x {amount} {resource} = {amount * n}, more than pool {pool.name} offers at maxSize {pool.max_size} ({offered})",
            ))
    return out


def _pool_problems(w: Workload, p: tuple[PathPart, ...], pools: dict[str, PoolBase], strategy: MigStrategy, broken: frozenset[str]) -> list[Problem]:
    pool = pools.get(w.pool)
    if pool is None:
        names = list(pools)
        return [Problem(at(*p, "pool"), f"no pool named {w.pool!r}{_near(w.pool, names)} (pools: {', '.join(names)})")]
    if pool.name in broken:
        return []  # the pool's own problems are reported at nodePools[]; judging a share against them would mislead
    out = _wrong_keys(w, p, pool) + _share_problems(w, p, pool)
    if w.app_class is not None and not (isinstance(pool, SharedPool) and pool.sharing.online_offline):
        out.append(Problem(at(*p, "appClass"), f"only applies on a shared pool with sharing.onlineOffline: true; pool {pool.name} does not co-locate online and offline work"))
    if not out:
        out += _capacity_problems(w, p, pool, strategy)
    return out


def _metric_problems(
    w: Workload, p: tuple[PathPart, ...], m: MonitoringConfig, declared: dict[str, tuple[int, MetricType, MetricQuery]], i: int, served: list[str]
) -> list[Problem]:
    s = w.scaling
    metric = s.metric
    out: list[Problem] = []
    if s.min_replicas > s.max_replicas:
        out.append(Problem(at(*p, "scaling", "minReplicas"), f"{s.min_replicas} is above maxReplicas {s.max_replicas}"))
    if metric is None:
        if s.min_replicas != s.max_replicas:
            out.append(Problem(at(*p, "scaling", "metric"), f"is required to scale between {s.min_replicas} and {s.max_replicas} replicas (or set minReplicas equal to maxReplicas)"))
        return out
    mp = (*p, "scaling", "metric")
    if not (m.enabled and m.prometheus_adapter):
        out.append(Problem(at(*mp), "needs prometheus-adapter to serve the metric: set monitoring.prometheusAdapter: true (and monitoring.enabled)"))
    if quantity_value(metric.target) <= 0:
        out.append(Problem(at(*mp, "target"), f"{metric.target} must be above 0"))
    if metric.type == "Pods":
        if metric.target_type != "AverageValue":
            out.append(Problem(at(*mp, "targetType"), "a Pods metric is always averaged over the replicas: use AverageValue (or type External)"))
        if metric.selector:
            out.append(Problem(at(*mp, "selector"), "only applies to type External (a Pods metric is read per pod of the workload)"))
        if w.metrics is None:
            out.append(Problem(at(*p, "metrics"), f"is required for the Pods metric {metric.name}: it is read from the workload's own pods, so Prometheus must scrape them (e.g. {{port: metrics}})"))
    builtin = ADAPTER_METRICS.get(metric.name)
    if metric.query is None:
        if builtin is None:
            out.append(Problem(
                at(*mp, "name"),
                f"{metric.name!r} is not served by prometheus-adapter (it serves {', '.join(served)}); declare it with metric.query{_near(metric.name, served)}",
            ))
        elif builtin[0] != metric.type:
            out.append(Problem(at(*mp, "type"), f"the adapter serves {metric.name} as a {builtin[0]} metric"))
        return out
    q = metric.query
    if builtin is not None and builtin != (metric.type, q):
        out.append(Problem(at(*mp, "name"), f"{metric.name} is the adapter's built-in metric; remove metric.query to use it, or give yours another name"))
    elif metric.name in declared and declared[metric.name][1:] != (metric.type, q):
        out.append(Problem(at(*mp, "name"), f"workloads[{declared[metric.name][0]}] declares {metric.name} differently; the adapter serves one metric per name"))
    declared.setdefault(metric.name, (i, metric.type, q))
    if q.divide_by == q.series:
        out.append(Problem(at(*mp, "query", "divideBy"), f"dividing {q.series} by itself always gives 1"))
    if q.kind == "gauge" and q.user_set("window"):
        out.append(Problem(at(*mp, "query", "window"), "only applies to counters (a gauge is read as is)"))
    if q.kind == "counter" and w.metrics is not None and duration_seconds(q.window) < 2 * w.metrics.interval_seconds:
        out.append(Problem(at(*mp, "query", "window"), f"{q.window} holds fewer than two scrapes at metrics.intervalSeconds {w.metrics.interval_seconds}; rate() needs two"))
    return out


def _quota_problems(cfg: WorkloadStack, pools: dict[str, PoolBase], strategy: MigStrategy, broken: frozenset[str]) -> list[Problem]:
    """Each namespace's quota holds with every workload in it at maxReplicas."""
    out: list[Problem] = []
    quotas = {q.namespace: (i, q.hard()) for i, q in enumerate(cfg.quotas)}
    used: dict[tuple[str, str], list[str]] = {}
    totals: dict[tuple[str, str], int] = {}
    for i, w in enumerate(cfg.workloads):
        pool = pools.get(w.pool)
        if pool is None or pool.name in broken or w.namespace not in quotas:
            continue
        q_index, hard = quotas[w.namespace]
        try:
            request = replica_request(w.gpu, pool, strategy)
        except LookupError:
            continue
        for resource, amount in request.items():
            limit = hard.get(f"requests.{resource}")
            if limit is None:
                continue
            key = (w.namespace, resource)
            totals[key] = totals.get(key, 0) + amount * w.scaling.max_replicas
            used.setdefault(key, []).append(f"workloads[{i}] {w.scaling.max_replicas} x {amount}")
            if totals[key] > int(limit) >= totals[key] - amount * w.scaling.max_replicas:
                out.append(Problem(
                    at("workloads", i, "scaling", "maxReplicas"),
                    f"namespace {w.namespace} would use {totals[key]} {resource} at maxReplicas ({' + '.join(used[key])}), "
                    f"above its quota of {limit} (quotas[{q_index}])",
                ))
    return out


def _namespace_problems(w: Workload, p: tuple[PathPart, ...], cfg: WorkloadStack) -> list[Problem]:
    if w.namespace in SYSTEM_NAMESPACES:
        return [Problem(at(*p, "namespace"), f"{w.namespace!r} belongs to Kubernetes itself; run workloads in their own namespace")]
    if w.namespace == cfg.namespace:
        return [Problem(at(*p, "namespace"), f"{w.namespace!r} is Tessera's own namespace; run workloads in their own")]
    m = cfg.monitoring
    if m.mode == "kube-prometheus-stack" and w.namespace == m.kube_prometheus_stack.namespace:
        return [Problem(at(*p, "namespace"), f"{w.namespace!r} is the monitoring stack's namespace; run workloads in their own")]
    return []


def workload_problems(cfg: WorkloadStack, broken: frozenset[str] = frozenset()) -> list[Problem]:
    """Every cross-field problem of `workloads`; `broken` names pools with problems of their own."""
    pools = {pool.name: pool for pool in cfg.node_pools}
    strategy = pools_mig_strategy(cfg.node_pools)
    declared: dict[str, tuple[int, MetricType, MetricQuery]] = {}
    served = sorted({*ADAPTER_METRICS, *(w.scaling.metric.name for w in cfg.workloads if w.scaling.metric and w.scaling.metric.query)})
    out: list[Problem] = []
    seen: dict[tuple[str, str], int] = {}
    for i, w in enumerate(cfg.workloads):
        p: tuple[PathPart, ...] = ("workloads", i)
        key = (w.namespace, w.name)
        if key in seen:
            out.append(Problem(at(*p, "name"), f"duplicate workload {w.name!r} in namespace {w.namespace} (also workloads[{seen[key]}])"))
        seen.setdefault(key, i)
        out += _namespace_problems(w, p, cfg)
        out += _container_problems(w, p, cfg.images)
        out += _pool_problems(w, p, pools, strategy, broken)
        out += _metric_problems(w, p, cfg.monitoring, declared, i, served)
    out += _quota_problems(cfg, pools, strategy, broken)
    return out
