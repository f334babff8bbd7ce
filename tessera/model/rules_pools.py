"""Cross-field rules for node pools; each returns Problems with full config paths."""
from __future__ import annotations

import difflib
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tessera.model.catalog import GPU_MODELS, GPU_SOFTWARE, INSTANCE_TYPES, GpuModelSpec, GpuSoftware, gpu_model, instance_type, matching_software, nearest_software
from tessera.model.cluster import ClusterConfig
from tessera.model.mig import layout_problems, mig_resources, resolve_layout
from tessera.model.pools import GpuDriverConfig, MigPool, PoolBase, RepartitionEntry, SharedPool, TimeSlicingConfig, TimeslicePool
from tessera.model.problems import PathPart, Problem, at
from tessera.model.contract import NVIDIA_GPU

# label/taint prefixes Tessera and NVIDIA set on pool nodes; users setting them would fight the platform
RESERVED_LABEL_PREFIXES = ("tessera.dev/", "nvidia.com/")
RESERVED_LABELS = ("gputype",)


def _near(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}? " if close else ""


def _instance_problems(pool: PoolBase, p: tuple[PathPart, ...]) -> list[Problem]:
    out: list[Problem] = []
    if pool.instance_type is None:
        return [Problem(at(*p, "instanceType"), "is required on provider tke (a TKE GPU instance type, e.g. GN7.2XLARGE32)")]
    spec = instance_type(pool.instance_type)
    if spec is None:
        if not pool.custom_instance_type:
            family = pool.instance_type.split(".")[0]
            sizes = [n for n in INSTANCE_TYPES if n.split(".")[0] == family]
            hint = f"known {family} sizes: {', '.join(sizes)}; " if sizes else _near(pool.instance_type, list(INSTANCE_TYPES))
            out.append(Problem(at(*p, "instanceType"), f"{pool.instance_type!r} is not a known TKE GPU instance type ({hint}for a type the catalog lacks set customInstanceType: true with gpuModel and gpuCount)"))
        else:
            for key, value in (("gpuModel", pool.gpu_model), ("gpuCount", pool.gpu_count)):
                if value is None:
                    out.append(Problem(at(*p, key), f"is required with customInstanceType (the catalog does not know {pool.instance_type})"))
        return out
    if pool.gpu_model is not None and pool.gpu_model != spec.gpu_model:
        out.append(Problem(at(*p, "gpuModel"), f"{pool.instance_type} has {spec.gpu_model} GPUs, not {pool.gpu_model} (remove gpuModel or correct it)"))
    if pool.gpu_count is not None and pool.gpu_count != spec.gpu_count:
        out.append(Problem(at(*p, "gpuCount"), f"{pool.instance_type} has {spec.gpu_count} GPU(s) per node, not {pool.gpu_count} (remove gpuCount or correct it)"))
    return out


def _provider_problems(pool: PoolBase, p: tuple[PathPart, ...], cluster: ClusterConfig) -> list[Problem]:
    if not cluster.is_existing:
        out = _instance_problems(pool, p)
        if pool.node_selector:
            out.append(Problem(at(*p, "nodeSelector"), "only applies to provider existing; TKE pool nodes are selected by the tessera.dev/pool label"))
        zones = [s.zone for s in cluster.subnets]
        for j, zone in enumerate(pool.zones):
            if zone not in zones:
                out.append(Problem(at(*p, "zones", j), f"{zone!r} has no subnet in cluster.subnets (zones: {', '.join(zones) or 'none'})"))
        return out
    out = []
    for field, key in (("instance_type", "instanceType"), ("custom_instance_type", "customInstanceType"), ("zones", "zones"), ("gpu_driver", "gpuDriver"), ("system_disk", "systemDisk")):
        if pool.user_set(field):
            out.append(Problem(at(*p, key), "only applies to provider tke; on an existing cluster a pool selects existing nodes with nodeSelector"))
    if not pool.node_selector:
        out.append(Problem(at(*p, "nodeSelector"), "is required on provider existing: labels you own that select this pool's nodes, e.g. {node.kubernetes.io/instance-type: gn7.2xlarge32}"))
    for key in pool.node_selector:
        if _reserved(key) or key in pool.labels:
            # Tessera's node patch sets these labels itself: selecting by them would keep a node in
            # the pool after the pool is removed, and a pool could never let a node go
            out.append(Problem(at(*p, "nodeSelector", key), "is a label Tessera (or this pool's labels) sets on the pool's nodes, so it cannot also select them; select by a label you own, e.g. node.kubernetes.io/instance-type, kubernetes.io/hostname or one your provisioning sets"))
    for key, value in (("gpuModel", pool.gpu_model), ("gpuCount", pool.gpu_count)):
        if value is None:
            out.append(Problem(at(*p, key), "is required on provider existing (there is no instance type to derive it from)"))
    return out


def _model(pool: PoolBase) -> GpuModelSpec | None:
    try:
        return pool.gpu_spec()
    except LookupError:
        return None


def _size_problems(pool: PoolBase, p: tuple[PathPart, ...]) -> list[Problem]:
    out = []
    if pool.max_size < pool.min_size:
        out.append(Problem(at(*p, "maxSize"), f"must be at least minSize ({pool.min_size}), got {pool.max_size}"))
    elif pool.desired_size is not None and not pool.min_size <= pool.desired_size <= pool.max_size:
        out.append(Problem(at(*p, "desiredSize"), f"must be between minSize ({pool.min_size}) and maxSize ({pool.max_size}), got {pool.desired_size}"))
    return out


def _reserved(key: str) -> bool:
    return key in RESERVED_LABELS or key.startswith(RESERVED_LABEL_PREFIXES)


def _label_problems(pool: PoolBase, p: tuple[PathPart, ...]) -> list[Problem]:
    out = [
        Problem(at(*p, "labels", key), "is set by Tessera from the pool kind; remove it (tessera.dev/*, nvidia.com/* and gputype are reserved)")
        for key in pool.labels
        if _reserved(key)
    ]
    out += [
        Problem(at(*p, "taints", j, "key"), f"{taint.key!r} is reserved: Tessera taints every GPU node with tessera.dev/gpu itself")
        for j, taint in enumerate(pool.taints)
        if taint.key.startswith(RESERVED_LABEL_PREFIXES)
    ]
    return out


def time_slicing_problems(ts: TimeSlicingConfig, valid: tuple[str, ...], p: tuple[PathPart, ...], minimum: int = 2) -> list[Problem]:
    """Replicas >= ``minimum`` and resource names among ``valid``."""
    if isinstance(ts.replicas, int):
        if ts.replicas < minimum:
            return [Problem(at(*p), f"must be at least {minimum} (got {ts.replicas}; fewer replicas would not share the GPU)")]
        return []
    out = []
    for name, count in ts.replicas.items():
        if name not in valid:
            out.append(Problem(at(*p, name), f"{name!r} is not a resource of this pool (valid: {', '.join(valid)})"))
        elif count < minimum:
            out.append(Problem(at(*p, name), f"must be at least {minimum} (got {count})"))
    return out


def _mig_problems(pool: MigPool, model: GpuModelSpec, p: tuple[PathPart, ...]) -> list[Problem]:
    out = [Problem(at(*p, "mig", "profile"), text) for text in layout_problems(model, pool.mig.profile)]
    counts = resolve_layout(model, pool.mig.profile)
    if out or counts is None:
        return out
    if pool.mig.strategy == "single" and len(counts) != 1:
        out.append(Problem(at(*p, "mig", "strategy"), f"single needs one profile on every GPU, the layout has {', '.join(counts)} (use strategy mixed or a single-profile layout)"))
    if pool.time_slicing is not None:
        resources = mig_resources(pool.mig.strategy, counts)
        out += time_slicing_problems(pool.time_slicing, resources, (*p, "timeSlicing", "replicas"))
    return out


def _repartition_problems(pool: PoolBase, model: GpuModelSpec | None, p: tuple[PathPart, ...]) -> list[Problem]:
    entries = pool.repartition
    if not entries:
        return []
    if pool.kind == "nvidia":
        return [Problem(at(*p, "repartition"), "nvidia pools hand out whole GPUs; re-partitioning applies to shared, mig and timeslice pools")]
    out = []
    if len(entries) < 2:
        out.append(Problem(at(*p, "repartition"), "needs at least two entries (e.g. a day layout and a night layout); with one the pool never switches back"))
    seen_cron: dict[str, int] = {}
    seen_name: dict[str, int] = {}
    for j, entry in enumerate(entries):
        q = (*p, "repartition", j)
        if entry.cron in seen_cron:
            out.append(Problem(at(*q, "cron"), f"same schedule as repartition[{seen_cron[entry.cron]}]"))
        seen_cron.setdefault(entry.cron, j)
        if entry.name is not None:
            if entry.name in seen_name:
                out.append(Problem(at(*q, "name"), f"duplicate name {entry.name!r} (also repartition[{seen_name[entry.name]}])"))
            seen_name.setdefault(entry.name, j)
        try:
            ZoneInfo(entry.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            out.append(Problem(at(*q, "timezone"), f"{entry.timezone!r} is not an IANA time zone such as UTC or Asia/Shanghai"))
        out += _layout_entry_problems(pool, model, entry, (*q, "layout"))
    return out


def _layout_entry_problems(pool: PoolBase, model: GpuModelSpec | None, entry: RepartitionEntry, q: tuple[PathPart, ...]) -> list[Problem]:
    layout = entry.layout
    if isinstance(pool, SharedPool):
        if not isinstance(layout, int) or not 1 <= layout <= 100:
            return [Problem(at(*q), f"a shared pool's layout is shares per GPU, a whole number from 1 (whole GPUs) to 100, e.g. 4; got {layout!r}")]
        return []
    if isinstance(pool, TimeslicePool):
        if isinstance(layout, str):
            return [Problem(at(*q), f"a timeslice pool's layout is replicas per GPU (1 = whole GPUs), e.g. 4; got {layout!r}")]
        return time_slicing_problems(TimeSlicingConfig(replicas=layout), (NVIDIA_GPU,), q, minimum=1)
    if isinstance(pool, MigPool) and model is not None and model.mig_capable:
        if isinstance(layout, int):
            return [Problem(at(*q), f"a mig pool's layout is a MIG layout (named, e.g. all-balanced, or profile -> count); got {layout!r}")]
        out = [Problem(at(*q), text) for text in layout_problems(model, layout)]
        counts = resolve_layout(model, layout)
        if not out and counts is not None and pool.mig.strategy == "single" and len(counts) != 1:
            out.append(Problem(at(*q), f"the pool's strategy is single, which needs one profile; this layout has {', '.join(counts)}"))
        return out
    return []


def _asked(gpu: GpuDriverConfig) -> str:
    parts = [f"{what} {version}" for what, version in (("driver", gpu.driver), ("CUDA", gpu.cuda), ("cuDNN", gpu.cudnn)) if version is not None]
    return " + ".join(parts) if parts else "the catalog default"


def _choices(records: list[GpuSoftware]) -> str:
    return "; ".join(r.label() + ("" if r.confirmed else " (unconfirmed)") for r in records)


def gpu_software_problems(pool: PoolBase, model: GpuModelSpec, cluster: ClusterConfig, p: tuple[PathPart, ...]) -> list[Problem]:
    """The pool's driver/CUDA/cuDNN must be one whole catalog record that supports its GPU (provider tke)."""
    gpu = pool.gpu_driver
    q = (*p, "gpuDriver")
    if gpu.custom_driver_url and gpu.driver is not None:
        return [Problem(at(*q, "driver"), "customDriverUrl replaces the catalog driver; remove driver (CUDA and cuDNN still come from the catalog)")]
    driver = None if gpu.custom_driver_url else gpu.driver
    offered = matching_software(driver, gpu.cuda, gpu.cudnn)
    if not offered:
        nearest = nearest_software(driver, gpu.cuda, gpu.cudnn, tuple(r for r in GPU_SOFTWARE if r.supports(model)) or GPU_SOFTWARE)
        return [Problem(at(*q), f"{_asked(gpu)} is not a combination TKE offers; nearest: {_choices(nearest)}")]
    chosen = gpu.chosen(model)
    if not chosen:
        fitting = [r for r in GPU_SOFTWARE if r.supports(model)]
        nearest = nearest_software(driver, gpu.cuda, gpu.cudnn, tuple(fitting))
        return [Problem(at(*q), f"{_choices(offered)} does not support {model.name} ({model.architecture}); offered for {model.name}: {_choices(nearest)}")]
    record = chosen[0]
    if record.node_os_prefix and not cluster.node_os.startswith(record.node_os_prefix):
        others = [r for r in chosen if not r.node_os_prefix] or [r for r in GPU_SOFTWARE if r.supports(model) and not r.node_os_prefix]
        return [Problem(at(*q), f"cuDNN {record.cudnn.version} comes as Debian packages ({record.cudnn.name}), which need a {record.node_os_prefix} node image, not cluster.nodeOs {cluster.node_os}; choose {_choices(others[:3])}")]
    return []


def pool_problems(pool: PoolBase, index: int, cluster: ClusterConfig) -> list[Problem]:
    """Every problem of one pool (except uniqueness, which needs all pools)."""
    p: tuple[PathPart, ...] = ("nodePools", index)
    out = _provider_problems(pool, p, cluster)
    if pool.gpu_model is not None and gpu_model(pool.gpu_model) is None:
        out.append(Problem(at(*p, "gpuModel"), f"{pool.gpu_model!r} is not a known GPU model ({_near(pool.gpu_model, list(GPU_MODELS))}known: {', '.join(GPU_MODELS)})"))
    out += _size_problems(pool, p)
    out += _label_problems(pool, p)
    model = _model(pool)
    if isinstance(pool, MigPool) and model is not None:
        if not model.mig_capable:
            capable = ", ".join(m.name for m in GPU_MODELS.values() if m.mig_capable)
            where = "instanceType" if pool.gpu_model is None else "gpuModel"
            out.append(Problem(at(*p, where), f"{model.name} does not support MIG; a mig pool needs one of {capable}"))
        else:
            out += _mig_problems(pool, model, p)
    if isinstance(pool, TimeslicePool):
        out += time_slicing_problems(pool.time_slicing, (NVIDIA_GPU,), (*p, "timeSlicing", "replicas"))
    out += _repartition_problems(pool, model, p)
    if model is not None and not cluster.is_existing:
        out += gpu_software_problems(pool, model, cluster, p)
    return out


def unique_name_problems(pools: list[PoolBase]) -> list[Problem]:
    first: dict[str, int] = {}
    out = []
    for i, pool in enumerate(pools):
        if pool.name in first:
            out.append(Problem(at("nodePools", i, "name"), f"duplicate pool name {pool.name!r} (also nodePools[{first[pool.name]}])"))
        first.setdefault(pool.name, i)
    return out
