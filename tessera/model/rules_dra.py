"""What a pool with `allocation: dra` needs from the cluster's Kubernetes version, checked at preview.

The versions and gate stages are the catalog's (`catalog/kubernetes.py`, with their upstream
sources); the route itself is docs/dra.md. A TKE cluster runs each version's default gates, so
there only the version decides; an existing cluster may declare gates it runs with
(`cluster.featureGates`).
"""
from __future__ import annotations

from tessera.model.catalog.kubernetes import DRA_FEATURES, DraFeature, feature_on, feature_step, first_minor_on_by_default, minor_of, newest_tke_version
from tessera.model.cluster import ClusterConfig
from tessera.model.pools import PoolBase, SharedPool
from tessera.model.problems import PathPart, Problem, at

DRA_MINOR = 34  # resource.k8s.io/v1: structured parameters GA (KEP-4381)


def dra_pool_problems(pool: PoolBase, index: int, cluster: ClusterConfig) -> list[Problem]:
    """What keeps the cluster from serving this pool with allocation: dra (nothing on other routes)."""
    return _pool_problems(pool, ("nodePools", index), cluster) if pool.allocation == "dra" else []


def feature_gate_problems(cluster: ClusterConfig) -> list[Problem]:
    """Gates declared for a version that cannot have them, or GA gates switched off."""
    minor = minor_of(cluster.kubernetes_version) if cluster.kubernetes_version else None
    if minor is None:
        return []
    out: list[Problem] = []
    for gate, value in cluster.feature_gates.items():
        step = feature_step(gate, minor)
        path = at("cluster", "featureGates", gate)
        if step is None:
            out.append(Problem(path, f"does not exist in Kubernetes 1.{minor} (alpha from 1.{DRA_FEATURES[gate][0].minor})"))
        elif step.stage == "GA" and not value:
            out.append(Problem(path, f"is GA in Kubernetes 1.{minor} and cannot be switched off"))
    return out


def _pool_problems(pool: PoolBase, p: tuple[PathPart, ...], cluster: ClusterConfig) -> list[Problem]:
    route = at(*p, "allocation")
    if not isinstance(pool, SharedPool):
        return [Problem(route, f"dra serves shared pools; whole GPUs and MIG through DRA need NVIDIA's DRA driver (k8s-dra-driver-gpu), which Tessera does not deploy: keep allocation: device-plugin on this {pool.kind} pool")]
    out: list[Problem] = []
    if pool.repartition:
        out.append(Problem(at(*p, "repartition"), "scheduled re-partitioning moves a node label only the device-plugin route reads; it is not available with allocation: dra"))
    sharing = pool.sharing
    if sharing.shares_per_gpu is not None and sharing.shares_per_gpu > 1:
        out.append(Problem(at(*p, "sharing", "sharesPerGpu"), f"{sharing.shares_per_gpu} cannot be honoured with allocation: dra (DRA counts capacity, not claims per device); use 1 (a whole GPU per claim), leave it unset, or keep allocation: device-plugin"))
    if pool.sharing.qgpu_aliases:
        out.append(Problem(at(*p, "sharing", "qgpuAliases"), "TKE qGPU resource names are translated for the device-plugin route only; remove it or keep allocation: device-plugin"))
    version = cluster.kubernetes_version
    minor = minor_of(version) if version else None
    if version is None or minor is None:
        return [*out, Problem(route, f"dra needs cluster.kubernetesVersion to check that the cluster serves DRA (Kubernetes 1.{DRA_MINOR} or later)")]
    if minor < DRA_MINOR:
        offer = f"; TKE offers {newest_tke_version().version}" if not cluster.is_existing else ""
        return [*out, Problem(route, f"dra needs Kubernetes 1.{DRA_MINOR} or later (resource.k8s.io/v1: structured parameters went GA in 1.{DRA_MINOR}, KEP-4381); cluster.kubernetesVersion is {version}{offer}")]
    if pool.sharing.shares_per_gpu != 1:
        out += _consumable_capacity_problems(route, minor, cluster)
    return out


def _consumable_capacity_problems(route: str, minor: int, cluster: ClusterConfig) -> list[Problem]:
    gate: DraFeature = "DRAConsumableCapacity"
    if feature_on(gate, minor, cluster.feature_gates):
        return []
    beta = first_minor_on_by_default(gate)
    need = (
        f"dra on a shared pool lets several claims share one GPU, which needs consumable capacity ({gate}, KEP-5075): "
        f"off by default in Kubernetes 1.{minor}, on from 1.{beta}"
    )
    if not cluster.is_existing:
        return [Problem(route, f"{need}; TKE runs default gates and offers up to {newest_tke_version().version}: keep allocation: device-plugin, or set sharing.sharesPerGpu: 1 for a whole GPU per claim")]
    if cluster.feature_gates.get(gate) is False:
        return [Problem(route, f"dra on a shared pool lets several claims share one GPU, which needs consumable capacity ({gate}, KEP-5075), switched off by cluster.featureGates.{gate}: keep allocation: device-plugin, or set sharing.sharesPerGpu: 1 for a whole GPU per claim")]
    return [Problem(route, f"{need}; if the cluster's API server, kube-scheduler and kubelets run with it, declare cluster.featureGates.{gate}: true; else keep allocation: device-plugin, or set sharing.sharesPerGpu: 1")]
