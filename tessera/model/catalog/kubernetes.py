"""Kubernetes versions: the ones TKE offers, and what a version brings for Dynamic Resource Allocation.

TKE versions. TKE releases even minor versions only, each as `x.y.z-tke.n` on top of one
community patch release (Tencent Cloud, "TKE Kubernetes Version Maintenance Mechanism",
https://www.tencentcloud.com/document/product/457/47894); `cluster.kubernetesVersion` on
`provider: tke` is that community version (the provider's `cluster_version`). The records below are
the versions TKE's release notes list for new clusters ("TKE Kubernetes Revision Version History",
https://www.tencentcloud.com/document/product/457/9315; the international page's newest is
1.34.1-tke.1, the Chinese page, https://cloud.tencent.com/document/product/457/9315, already lists
1.36.2-tke.1, which is left out until the provider documents it). kube-scheduler, which Tessera
runs as `tessera-scheduler`, must match the cluster's minor version, so each record names the
upstream image tag of its community patch release.

DRA feature stages, per Kubernetes minor version, from kubernetes/kubernetes
`staging/src/k8s.io/kube-scheduler/pkg/features/kube_features.go` (the versioned specs; `pkg/features`
re-exports them): structured parameters (`DynamicResourceAllocation`, KEP-4381) are GA and on from
1.34 (`resource.k8s.io/v1`); consumable capacity (`DRAConsumableCapacity`, KEP-5075) is alpha (off)
in 1.34 and beta (on) from 1.36; extended resources backed by a DeviceClass (`DRAExtendedResource`,
KEP-5004) alpha in 1.34, beta from 1.36; partitionable devices (KEP-4815) and device taints
(KEP-5055) beta from 1.36; prioritized alternatives (KEP-4816) GA from 1.36.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

Stage = Literal["alpha", "beta", "GA"]


@dataclass(frozen=True)
class TkeVersion:
    """A Kubernetes version TKE creates clusters with."""

    version: str
    """The community version, as `cluster.kubernetesVersion` and the provider's `cluster_version` take it."""
    tke_release: str
    """The first TKE release of it in the release notes."""
    kube_scheduler_tag: str
    """registry.k8s.io/kube-scheduler tag of the same version."""

    @property
    def minor(self) -> int:
        return minor_of(self.version) or 0


TKE_VERSIONS: Final = MappingProxyType(
    {
        v.version: v
        for v in (
            TkeVersion("1.26.1", "1.26.1-tke.1", "v1.26.1"),
            TkeVersion("1.28.3", "1.28.3-tke.1", "v1.28.3"),
            TkeVersion("1.30.0", "1.30.0-tke.1", "v1.30.0"),
            TkeVersion("1.32.2", "1.32.2-tke.1", "v1.32.2"),
            TkeVersion("1.34.1", "1.34.1-tke.1", "v1.34.1"),
        )
    }
)


def tke_version(version: str) -> TkeVersion | None:
    return TKE_VERSIONS.get(version)


def nearest_tke_versions(version: str) -> list[str]:
    """The offered versions closest to `version` by minor (the same minor first), at most two."""
    minor = minor_of(version)
    if minor is None:
        return [max(TKE_VERSIONS, key=lambda v: TKE_VERSIONS[v].minor)]
    ranked = sorted(TKE_VERSIONS.values(), key=lambda v: (abs(v.minor - minor), -v.minor))
    best = abs(ranked[0].minor - minor)
    return [v.version for v in ranked if abs(v.minor - minor) == best][:2]


def newest_tke_version() -> TkeVersion:
    return max(TKE_VERSIONS.values(), key=lambda v: v.minor)


_MINOR: Final = re.compile(r"^1\.(\d+)\.\d+$")


def minor_of(version: str) -> int | None:
    match = _MINOR.match(version)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class FeatureStep:
    """From Kubernetes 1.<minor> on, the gate is at `stage`, on by default or not."""

    minor: int
    stage: Stage
    default: bool


DraFeature = Literal["DynamicResourceAllocation", "DRAConsumableCapacity", "DRAExtendedResource", "DRAPartitionableDevices", "DRADeviceTaints", "DRAPrioritizedList"]

DRA_FEATURES: Final[Mapping[DraFeature, tuple[FeatureStep, ...]]] = MappingProxyType(
    {
        "DynamicResourceAllocation": (FeatureStep(26, "alpha", False), FeatureStep(32, "beta", False), FeatureStep(34, "GA", True)),
        "DRAConsumableCapacity": (FeatureStep(34, "alpha", False), FeatureStep(36, "beta", True)),
        "DRAExtendedResource": (FeatureStep(34, "alpha", False), FeatureStep(36, "beta", True), FeatureStep(37, "GA", True)),
        "DRAPartitionableDevices": (FeatureStep(33, "alpha", False), FeatureStep(36, "beta", True)),
        "DRADeviceTaints": (FeatureStep(33, "alpha", False), FeatureStep(36, "beta", True)),
        "DRAPrioritizedList": (FeatureStep(33, "alpha", False), FeatureStep(34, "beta", True), FeatureStep(36, "GA", True)),
    }
)


def feature_step(feature: DraFeature, minor: int) -> FeatureStep | None:
    """The feature's stage at Kubernetes 1.<minor>, None before it exists."""
    steps = [s for s in DRA_FEATURES[feature] if s.minor <= minor]
    return steps[-1] if steps else None


def feature_on(feature: DraFeature, minor: int, declared: Mapping[DraFeature, bool]) -> bool:
    """Whether a 1.<minor> cluster runs with the gate on: as declared, else the default. A GA gate
    is on whatever is declared (it can no longer be switched off in practice)."""
    step = feature_step(feature, minor)
    if step is None:
        return False
    if step.stage == "GA":
        return True
    return declared.get(feature, step.default)


def first_minor_on_by_default(feature: DraFeature) -> int:
    return next(s.minor for s in DRA_FEATURES[feature] if s.default)
