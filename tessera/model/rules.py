"""Cross-field rules for the whole stack: cluster network, provider fields, images, operator, quotas.

`StackConfig` (stack.py) calls `check_stack` from its validator. The rules read the stack through
the `Stack` protocol instead of importing `StackConfig`, so the dependency points one way:
stack -> rules -> the parts (cluster, pools, platform, catalog).
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from tessera.model.capacity import node_capacity, pools_mig_strategy
from tessera.model.catalog import instance_type
from tessera.model.catalog.kubernetes import TKE_VERSIONS, nearest_tke_versions, newest_tke_version, tke_version
from tessera.model.cluster import EXISTING_ONLY_FIELDS, TKE_ONLY_FIELDS, ClusterConfig
from tessera.model.contract import GPU_CORE, GPU_MEMORY, NVIDIA_GPU
from tessera.model.platform import GpuOperatorConfig, ImagesConfig, MonitoringConfig, NamespaceQuota, SchedulerConfig
from tessera.model.pools import PoolBase
from tessera.model.problems import Problem, at
from tessera.model.rules_monitoring import monitoring_problems
from tessera.model.rules_dra import dra_pool_problems, feature_gate_problems
from tessera.model.rules_pools import pool_problems, unique_name_problems
from tessera.model.rules_workloads import workload_problems
from tessera.model.workloads import Workload


class Stack(Protocol):
    """The parts of a stack config the rules read (`StackConfig` is one)."""

    @property
    def region(self) -> str | None: ...
    @property
    def cluster(self) -> ClusterConfig: ...
    @property
    def node_pools(self) -> Sequence[PoolBase]: ...
    @property
    def images(self) -> ImagesConfig: ...
    @property
    def gpu_operator(self) -> GpuOperatorConfig: ...
    @property
    def monitoring(self) -> MonitoringConfig: ...
    @property
    def quotas(self) -> Sequence[NamespaceQuota]: ...
    @property
    def namespace(self) -> str: ...
    @property
    def scheduler(self) -> SchedulerConfig: ...
    @property
    def workloads(self) -> Sequence[Workload]: ...


REGION_KEY: Final = "tencentcloud:region"
_RESOURCE_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PULUMI_KEY: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_REGION: Final = re.compile(r"^[a-z]{2}-[a-z]+(-[a-z]+)?$")
_VERSION_TAG: Final = re.compile(r"^v?(\d+)\.(\d+)\.\d+")
PRIVATE_BLOCKS: Final = tuple(ipaddress.IPv4Network(b) for b in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
# nodes a managed TKE cluster of each level may hold
LEVEL_NODES: Final = {"L5": 5, "L20": 20, "L50": 50, "L100": 100, "L200": 200, "L500": 500, "L1000": 1000, "L3000": 3000, "L5000": 5000}


def _net(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(cidr)


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _tke_problems(cfg: Stack) -> list[Problem]:
    cluster = cfg.cluster
    out: list[Problem] = []
    if not cfg.region:
        out.append(Problem(REGION_KEY, "is required for provider tke, e.g. ap-guangzhou"))
    elif not _REGION.match(cfg.region):
        out.append(Problem(REGION_KEY, f"{cfg.region!r} is not a Tencent Cloud region such as ap-guangzhou"))
    for field in EXISTING_ONLY_FIELDS:
        if cluster.user_set(field):
            why = "TKE runs each version's default feature gates" if field == "feature_gates" else "a TKE cluster's kubeconfig is an output of the stack"
            out.append(Problem(at("cluster", _camel(field)), f"only applies to provider existing; {why}"))
    for field, example in (("kubernetes_version", f'"{newest_tke_version().version}"'), ("vpc_cidr", "10.0.0.0/16")):
        if getattr(cluster, field) is None:
            out.append(Problem(at("cluster", _camel(field)), f"is required for provider tke, e.g. {example}"))
    if cluster.kubernetes_version is not None and tke_version(cluster.kubernetes_version) is None:
        nearest = " or ".join(nearest_tke_versions(cluster.kubernetes_version))
        offered = ", ".join(TKE_VERSIONS)
        out.append(Problem(at("cluster", "kubernetesVersion"), f"{cluster.kubernetes_version} is not a version TKE offers (TKE releases even minor versions: {offered}); nearest: {nearest}"))
    if not cluster.subnets:
        out.append(Problem(at("cluster", "subnets"), "needs at least one subnet, e.g. [{zone: ap-guangzhou-3, cidr: 10.0.1.0/24}]"))
    out += _network_problems(cluster, cfg.region)
    out += _endpoint_problems(cluster)
    if instance_type(cluster.system_nodes.instance_type) is not None:
        out.append(Problem(at("cluster", "systemNodes", "instanceType"), f"{cluster.system_nodes.instance_type} is a GPU instance type; system nodes run add-ons and should be plain CVMs such as SA2.LARGE8"))
    nodes = sum(p.max_size for p in cfg.node_pools) + cluster.system_nodes.count
    if nodes > LEVEL_NODES[cluster.level]:
        bigger = next((lvl for lvl, n in LEVEL_NODES.items() if n >= nodes), "L5000")
        out.append(Problem(at("cluster", "level"), f"{cluster.level} manages at most {LEVEL_NODES[cluster.level]} nodes, but the pools can grow to {nodes} including system nodes; use {bigger}"))
    return out


def _network_problems(cluster: ClusterConfig, region: str | None) -> list[Problem]:
    out: list[Problem] = []
    vpc = _net(cluster.vpc_cidr) if cluster.vpc_cidr else None
    seen: list[tuple[int, ipaddress.IPv4Network]] = []
    zones: dict[str, int] = {}
    for i, subnet in enumerate(cluster.subnets):
        net = _net(subnet.cidr)
        if subnet.zone in zones:
            # subnets are declared (and named) per zone, so a second subnet in one zone would clash
            out.append(Problem(at("cluster", "subnets", i, "zone"), f"{subnet.zone!r} already has a subnet (cluster.subnets[{zones[subnet.zone]}]); use one subnet per zone"))
        zones.setdefault(subnet.zone, i)
        if region and not subnet.zone.startswith(region + "-"):
            out.append(Problem(at("cluster", "subnets", i, "zone"), f"{subnet.zone!r} is not a zone of region {region} (e.g. {region}-3)"))
        if vpc is not None and not net.subnet_of(vpc):
            out.append(Problem(at("cluster", "subnets", i, "cidr"), f"{subnet.cidr} is outside vpcCidr {vpc}"))
        for j, other in seen:
            if net.overlaps(other):
                out.append(Problem(at("cluster", "subnets", i, "cidr"), f"{subnet.cidr} overlaps cluster.subnets[{j}].cidr ({other})"))
        seen.append((i, net))
    private = [("vpcCidr", cluster.vpc_cidr), ("podCidr", cluster.pod_cidr), ("serviceCidr", cluster.service_cidr)]
    for key, cidr in private:
        if cidr and not any(_net(cidr).subnet_of(block) for block in PRIVATE_BLOCKS):
            out.append(Problem(at("cluster", key), f"{cidr} is not a private range; use one inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"))
    if vpc is not None and not 12 <= vpc.prefixlen <= 28:
        out.append(Problem(at("cluster", "vpcCidr"), f"a Tencent Cloud VPC's prefix length is 12 to 28, got /{vpc.prefixlen}"))
    pod, service = _net(cluster.pod_cidr), _net(cluster.service_cidr)
    if vpc is not None and pod.overlaps(vpc):
        out.append(Problem(at("cluster", "podCidr"), f"{pod} overlaps vpcCidr {vpc}; pods need their own range"))
    if vpc is not None and service.overlaps(vpc):
        out.append(Problem(at("cluster", "serviceCidr"), f"{service} overlaps vpcCidr {vpc}"))
    if service.overlaps(pod):
        out.append(Problem(at("cluster", "serviceCidr"), f"{service} overlaps podCidr {pod}"))
    return out


def _endpoint_problems(cluster: ClusterConfig) -> list[Problem]:
    endpoint = cluster.endpoint
    out = []
    if endpoint.public and not endpoint.allowed_cidrs:
        out.append(Problem(at("cluster", "endpoint", "allowedCidrs"), "is required when public is true (list the CIDRs of your office, VPN or CI)"))
    if not endpoint.public and endpoint.allowed_cidrs:
        out.append(Problem(at("cluster", "endpoint", "allowedCidrs"), "only applies with public: true"))
    for i, cidr in enumerate(endpoint.allowed_cidrs):
        if _net(cidr).prefixlen == 0:
            out.append(Problem(at("cluster", "endpoint", "allowedCidrs", i), "0.0.0.0/0 opens the Kubernetes API to the whole internet; list the CIDRs that need it"))
    return out


def _existing_problems(cfg: Stack, is_stack_key: Callable[[str], bool]) -> list[Problem]:
    cluster = cfg.cluster
    out = [
        Problem(at("cluster", _camel(field)), "only applies to provider tke; remove it (an existing cluster keeps its own network and nodes)")
        for field in TKE_ONLY_FIELDS
        if cluster.user_set(field)
    ]
    source = cluster.kubeconfig
    if source is None:
        out.append(Problem(at("cluster", "kubeconfig"), "is required for provider existing: {path: ~/.kube/config}, {env: KUBECONFIG} or {secret: <pulumi secret key>}"))
    else:
        chosen = [k for k, v in (("path", source.path), ("env", source.env), ("secret", source.secret)) if v]
        if len(chosen) != 1:
            out.append(Problem(at("cluster", "kubeconfig"), f"set exactly one of path, env, secret (got {', '.join(chosen) or 'none'})"))
        if source.secret and not _PULUMI_KEY.match(source.secret):
            out.append(Problem(at("cluster", "kubeconfig", "secret"), f"{source.secret!r} is not a config key name (without the tessera: prefix), e.g. kubeconfig"))
        elif source.secret and is_stack_key(source.secret):
            out.append(Problem(at("cluster", "kubeconfig", "secret"), f"{source.secret!r} is a Tessera setting; name the secret something else, e.g. kubeconfig"))
    image = cfg.images.kube_scheduler
    if cluster.kubernetes_version is None and image.tag is None and image.digest is None:
        out.append(Problem(at("cluster", "kubernetesVersion"), "is required on provider existing unless images.kubeScheduler.tag is set: give the cluster's version (kubectl version) so tessera-scheduler matches it"))
    return out


def _scheduler_skew_problems(cfg: Stack) -> list[Problem]:
    """kube-scheduler may be at most one minor version older than the API server, never newer."""
    tag, version = cfg.images.kube_scheduler.tag, cfg.cluster.kubernetes_version
    tag_match = _VERSION_TAG.match(tag) if tag else None
    cluster_match = _VERSION_TAG.match(version) if version else None
    if tag_match is None or cluster_match is None or tag_match.group(1) != cluster_match.group(1):
        return []
    skew = int(cluster_match.group(2)) - int(tag_match.group(2))
    if 0 <= skew <= 1:
        return []
    return [Problem(at("images", "kubeScheduler", "tag"), f"{tag} does not fit a {version} cluster: kube-scheduler must be the cluster's minor version or one older (leave the tag unset to follow cluster.kubernetesVersion)")]


def _leader_election_problems(scheduler: SchedulerConfig) -> list[Problem]:
    """client-go's timing rules (`LeaderElectionTiming.problems`), at the config key of each value."""
    timing = scheduler.extender.leader_election.timing()
    return [Problem(at("scheduler", "extender", "leaderElection", f"{field}Seconds"), message) for field, message in timing.problems()]


def _offered_resources(pools: list[PoolBase]) -> set[str]:
    offered = {GPU_CORE, GPU_MEMORY, NVIDIA_GPU}
    # gpu-operator runs one MIG strategy for the whole cluster: a `single` pool in a mixed cluster
    # offers nvidia.com/mig-<profile>, not nvidia.com/gpu; time-sliced resources renamed by default
    # are <name>.shared (tessera.model.capacity)
    strategy = pools_mig_strategy(pools)
    for pool in pools:
        try:
            offered.update(node_capacity(pool, strategy))
        except LookupError:
            continue
    return offered


def _platform_problems(cfg: Stack, is_stack_key: Callable[[str], bool]) -> list[Problem]:
    out: list[Problem] = []
    needs_operator = [p.name for p in cfg.node_pools if p.kind != "shared"]
    if needs_operator and not cfg.gpu_operator.enabled:
        out.append(Problem(at("gpuOperator", "enabled"), f"must be true: pools {', '.join(needs_operator)} use NVIDIA's device plugin from the GPU operator"))
    if cfg.monitoring.dcgm_exporter and cfg.monitoring.enabled and not cfg.gpu_operator.enabled:
        out.append(Problem(at("monitoring", "dcgmExporter"), "dcgm-exporter is deployed by the GPU operator; enable gpuOperator or set dcgmExporter: false"))
    if cfg.images.require_digests:
        for key in ("tessera", "kubeScheduler"):
            image = cfg.images.tessera if key == "tessera" else cfg.images.kube_scheduler
            if image.digest is None:
                out.append(Problem(at("images", key, "digest"), "is required because images.requireDigests is true (pin the image: sha256:...)"))
    out += _scheduler_skew_problems(cfg)
    out += _leader_election_problems(cfg.scheduler)
    out += _quota_problems(cfg)
    out += monitoring_problems(cfg, is_stack_key)
    return out


def _quota_problems(cfg: Stack) -> list[Problem]:
    out: list[Problem] = []
    offered = _offered_resources(list(cfg.node_pools))
    first: dict[str, int] = {}
    named = {GPU_CORE: "gpuCore", GPU_MEMORY: "gpuMemoryMiB", NVIDIA_GPU: "nvidiaGpu"}
    for i, quota in enumerate(cfg.quotas):
        if quota.namespace in first:
            out.append(Problem(at("quotas", i, "namespace"), f"duplicate namespace {quota.namespace!r} (also quotas[{first[quota.namespace]}])"))
        first.setdefault(quota.namespace, i)
        if not quota.hard():
            out.append(Problem(at("quotas", i), "sets no limit; give gpuCore, gpuMemoryMiB, nvidiaGpu or resources"))
        for name, value in quota.resources.items():
            path = at("quotas", i, "resources", name)
            if name in named:
                out.append(Problem(path, f"use quotas[{i}].{named[name]} for {name}"))
            elif not _RESOURCE_NAME.match(name):
                out.append(Problem(path, f"{name!r} is not an extended resource name such as nvidia.com/mig-1g.5gb"))
            elif name not in offered:
                out.append(Problem(path, f"no pool offers {name} (offered: {', '.join(sorted(offered))})"))
            elif value < 0:
                out.append(Problem(path, f"must be at least 0 (got {value})"))
    return out


def check_stack(cfg: Stack, is_stack_key: Callable[[str], bool]) -> list[Problem]:
    """Every cross-field problem of a structurally valid stack config; `is_stack_key` tells the stack's
    own setting names (a kubeconfig secret must not be named like one)."""
    out = _existing_problems(cfg, is_stack_key) if cfg.cluster.is_existing else _tke_problems(cfg)
    pools: list[PoolBase] = list(cfg.node_pools)
    broken: set[str] = set()  # pools with problems of their own: the workloads on them are not judged
    for i, pool in enumerate(pools):
        problems = pool_problems(pool, i, cfg.cluster) + dra_pool_problems(pool, i, cfg.cluster)
        if problems:
            broken.add(pool.name)
        out += problems
    out += unique_name_problems(pools)
    out += feature_gate_problems(cfg.cluster)
    out += _platform_problems(cfg, is_stack_key)
    out += workload_problems(cfg, frozenset(broken))
    return out
