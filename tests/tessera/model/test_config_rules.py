"""Every validation rule: a good/bad table; each bad case names the exact path and the key part of the message."""
from __future__ import annotations

from typing import Any

import pytest
from config_cases import DELETE, EXISTING_BASE, TKE_BASE, edit

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping

MIXED = {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}

# (base, path, value, expected problem path, expected message fragment)
BAD: list[tuple[dict[str, Any], str, Any, str, str]] = [
    # MIG: profiles, layouts, fit, strategy, capability
    (TKE_BASE, "nodePools[2].mig.profile", {"3g.25gb": 1}, "nodePools[2].mig.profile", "'3g.25gb' is not a MIG profile of A100-40GB (valid: 1g.5gb, "),
    (TKE_BASE, "nodePools[2].mig.profile", "all-1g.20gb", "nodePools[2].mig.profile", "'all-1g.20gb' is not a named MIG layout of A100-40GB"),
    (TKE_BASE, "nodePools[2].mig.profile", {"3g.20gb": 3}, "nodePools[2].mig.profile", "'3g.20gb' fits at most 2 time(s) on one A100-40GB"),
    (TKE_BASE, "nodePools[2].mig.profile", {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}, "nodePools[2].mig.profile", "uses 8 compute slices; A100-40GB has 7"),
    (TKE_BASE, "nodePools[2].mig.profile", {"3g.20gb": 2, "1g.5gb": 1}, "nodePools[2].mig.profile", "uses 9 memory slices; A100-40GB has 8"),
    (TKE_BASE, "nodePools[2].mig.profile", {"1g.5gb+me": 2}, "nodePools[2].mig.profile", "'1g.5gb+me' fits at most 1"),
    (TKE_BASE, "nodePools[2].mig.profile", {"1g.5gb": 0}, "nodePools[2].mig.profile", "count of '1g.5gb' must be at least 1"),
    (TKE_BASE, "nodePools[2].mig.profile", 7, "nodePools[2].mig.profile", "must be a named MIG layout such as all-1g.5gb"),
    (TKE_BASE, "nodePools[2].mig.strategy", "single", "nodePools[2].mig.strategy", "single needs one profile on every GPU"),
    (TKE_BASE, "nodePools[2].mig.strategy", "both", "nodePools[2].mig.strategy", "'both' is not valid (valid: single, mixed)"),
    (TKE_BASE, "nodePools[2].instanceType", "GN7.2XLARGE32", "nodePools[2].instanceType", "T4 does not support MIG; a mig pool needs one of A30, A100-40GB"),
    (TKE_BASE, "nodePools[2].mig", DELETE, "nodePools[2].mig", "is required"),
    # time-slicing
    (TKE_BASE, "nodePools[3].timeSlicing.replicas", 1, "nodePools[3].timeSlicing.replicas", "must be at least 2"),
    (TKE_BASE, "nodePools[3].timeSlicing.replicas", {"nvidia.com/mig-1g.5gb": 2}, 'nodePools[3].timeSlicing.replicas["nvidia.com/mig-1g.5gb"]', "is not a resource of this pool (valid: nvidia.com/gpu)"),
    (TKE_BASE, "nodePools[3].timeSlicing.replicas", "many", "nodePools[3].timeSlicing.replicas", "must be a whole number of replicas"),
    (TKE_BASE, "nodePools[3].timeSlicing", DELETE, "nodePools[3].timeSlicing", "is required"),
    (TKE_BASE, "nodePools[2].timeSlicing.replicas", {"nvidia.com/mig-7g.40gb": 2}, 'nodePools[2].timeSlicing.replicas["nvidia.com/mig-7g.40gb"]', "valid: nvidia.com/mig-3g.20gb, nvidia.com/mig-2g.10gb, nvidia.com/mig-1g.5gb"),
    (TKE_BASE, "nodePools[2].timeSlicing.replicas", {"nvidia.com/mig-1g.5gb": 1}, 'nodePools[2].timeSlicing.replicas["nvidia.com/mig-1g.5gb"]', "must be at least 2"),
    # kind-specific keys and kinds
    (TKE_BASE, "nodePools[0].sharing", {"qgpuAliases": True}, "nodePools[0].sharing", "'sharing' is only for pools of kind shared"),
    (TKE_BASE, "nodePools[0].timeSlicing", {"replicas": 2}, "nodePools[0].timeSlicing", "'timeSlicing' is only for pools of kind mig or timeslice"),
    (TKE_BASE, "nodePools[1].sharing.policy", "strict", "nodePools[1].sharing.policy", "'strict' is not valid (valid: best-effort, fixed-share, burst-share)"),
    (TKE_BASE, "nodePools[1].sharing.placement", "pack", "nodePools[1].sharing.placement", "(valid: binpack, spread)"),
    (TKE_BASE, "nodePools[1].sharing.sharesPerGpu", 0, "nodePools[1].sharing.sharesPerGpu", "must be >= 1"),
    (TKE_BASE, "nodePools[1].sharing.onlineOffline", "maybe", "nodePools[1].sharing.onlineOffline", "must be true or false"),
    (TKE_BASE, "nodePools[0].kind", "gpu", "nodePools[0].kind", "'gpu' is not a pool kind (valid: nvidia, shared, mig, timeslice)"),
    (TKE_BASE, "nodePools[0].kind", DELETE, "nodePools[0].kind", "is required: one of nvidia, shared, mig, timeslice"),
    # sizes and names
    (TKE_BASE, "nodePools[0].minSize", 3, "nodePools[0].maxSize", "must be at least minSize (3), got 2"),
    (TKE_BASE, "nodePools[0].desiredSize", 5, "nodePools[0].desiredSize", "must be between minSize (0) and maxSize (2), got 5"),
    (TKE_BASE, "nodePools[0].minSize", -1, "nodePools[0].minSize", "must be >= 0"),
    (TKE_BASE, "nodePools[0].maxSize", "two", "nodePools[0].maxSize", "must be a whole number (got 'two')"),
    (TKE_BASE, "nodePools[1].name", "t4", "nodePools[1].name", "duplicate pool name 't4' (also nodePools[0])"),
    (TKE_BASE, "nodePools[0].name", "T4_Pool", "nodePools[0].name", "is not a DNS label"),
    (TKE_BASE, "nodePools", [], "nodePools", "must not be empty"),
    (TKE_BASE, "nodePools", DELETE, "nodePools", "is required"),
    # unknown keys
    (TKE_BASE, "nodePools[0].minsize", 1, "nodePools[0].minsize", "unknown key 'minsize' (did you mean 'minSize'?"),
    (TKE_BASE, "bogus", 1, "bogus", "unknown key 'bogus'"),
    (TKE_BASE, "cluster.vpc", "10.0.0.0/16", "cluster.vpc", "unknown key 'vpc'"),
    (TKE_BASE, "node_pools", [], "node_pools", "unknown key 'node_pools'"),
    # instance types and the escape hatch
    (TKE_BASE, "nodePools[0].instanceType", "GN7.3XLARGE", "nodePools[0].instanceType", "'GN7.3XLARGE' is not a known TKE GPU instance type (known GN7 sizes: GN7.2XLARGE32"),
    (TKE_BASE, "nodePools[0].instanceType", DELETE, "nodePools[0].instanceType", "is required on provider tke"),
    (edit(TKE_BASE, "nodePools[0].instanceType", "GN99.8XLARGE"), "nodePools[0].customInstanceType", True, "nodePools[0].gpuModel", "is required with customInstanceType"),
    (edit(TKE_BASE, "nodePools[0].instanceType", "GN99.8XLARGE"), "nodePools[0].customInstanceType", True, "nodePools[0].gpuCount", "is required with customInstanceType"),
    (TKE_BASE, "nodePools[0].gpuModel", "A10", "nodePools[0].gpuModel", "GN7.2XLARGE32 has T4 GPUs, not A10"),
    (TKE_BASE, "nodePools[0].gpuCount", 2, "nodePools[0].gpuCount", "GN7.2XLARGE32 has 1 GPU(s) per node, not 2"),
    (TKE_BASE, "nodePools[0].gpuModel", "T5", "nodePools[0].gpuModel", "'T5' is not a known GPU model"),
    # network
    (TKE_BASE, "cluster.vpcCidr", "10.0.0.0/33", "cluster.vpcCidr", "is not an IPv4 CIDR"),
    (TKE_BASE, "cluster.vpcCidr", "10.0.0.1/16", "cluster.vpcCidr", "has host bits set; did you mean 10.0.0.0/16?"),
    (TKE_BASE, "cluster.vpcCidr", "8.8.0.0/16", "cluster.vpcCidr", "8.8.0.0/16 is not a private range"),
    (TKE_BASE, "cluster.vpcCidr", "10.0.0.0/8", "cluster.vpcCidr", "prefix length is 12 to 28, got /8"),
    (TKE_BASE, "cluster.podCidr", "100.64.0.0/16", "cluster.podCidr", "is not a private range"),
    (TKE_BASE, "cluster.subnets[0].cidr", "10.1.1.0/24", "cluster.subnets[0].cidr", "10.1.1.0/24 is outside vpcCidr 10.0.0.0/16"),
    (TKE_BASE, "cluster.subnets", [{"zone": "ap-guangzhou-3", "cidr": "10.0.1.0/24"}, {"zone": "ap-guangzhou-4", "cidr": "10.0.1.128/25"}], "cluster.subnets[1].cidr", "overlaps cluster.subnets[0].cidr (10.0.1.0/24)"),
    (TKE_BASE, "cluster.subnets[0].zone", "ap-shanghai-2", "cluster.subnets[0].zone", "is not a zone of region ap-guangzhou"),
    (TKE_BASE, "cluster.subnets", [], "cluster.subnets", "needs at least one subnet"),
    (TKE_BASE, "cluster.subnets", [{"zone": "ap-guangzhou-3", "cidr": "10.0.1.0/24"}, {"zone": "ap-guangzhou-3", "cidr": "10.0.2.0/24"}], "cluster.subnets[1].zone", "already has a subnet (cluster.subnets[0])"),
    (TKE_BASE, "nodePools[0].name", "a-pool-name-of-26-letters1", "nodePools[0].name", "at most 25 characters"),
    (TKE_BASE, "cluster.podCidr", "10.0.0.0/14", "cluster.podCidr", "overlaps vpcCidr 10.0.0.0/16"),
    (TKE_BASE, "cluster.serviceCidr", "172.16.0.0/20", "cluster.serviceCidr", "overlaps podCidr 172.16.0.0/16"),
    (TKE_BASE, "cluster.endpoint.allowedCidrs", [], "cluster.endpoint.allowedCidrs", "is required when public is true"),
    (TKE_BASE, "cluster.endpoint.allowedCidrs", ["0.0.0.0/0"], "cluster.endpoint.allowedCidrs[0]", "opens the Kubernetes API to the whole internet"),
    (TKE_BASE, "cluster.endpoint.public", False, "cluster.endpoint.allowedCidrs", "only applies with public: true"),
    (TKE_BASE, "nodePools[0].zones", ["ap-guangzhou-6"], "nodePools[0].zones[0]", "'ap-guangzhou-6' has no subnet in cluster.subnets"),
    (TKE_BASE, "cluster.systemNodes", {"instanceType": "GN7.2XLARGE32"}, "cluster.systemNodes.instanceType", "is a GPU instance type"),
    (TKE_BASE, "cluster.level", "L5", "cluster.level", "L5 manages at most 5 nodes, but the pools can grow to 8 including system nodes; use L20"),
    # provider tke required fields, existing-only fields
    (TKE_BASE, "region", DELETE, "tencentcloud:region", "is required for provider tke"),
    (TKE_BASE, "cluster.kubernetesVersion", DELETE, "cluster.kubernetesVersion", "is required for provider tke"),
    (TKE_BASE, "cluster.kubernetesVersion", "v1.30", "cluster.kubernetesVersion", "is not a Kubernetes version like \"1.30.0\""),
    (TKE_BASE, "cluster.kubernetesVersion", 1.3, "cluster.kubernetesVersion", "must be a quoted string"),
    (TKE_BASE, "cluster.vpcCidr", DELETE, "cluster.vpcCidr", "is required for provider tke"),
    (TKE_BASE, "cluster.kubeconfig", {"path": "~/.kube/config"}, "cluster.kubeconfig", "only applies to provider existing"),
    (TKE_BASE, "cluster.provider", "gke", "cluster.provider", "'gke' is not valid (valid: tke, existing)"),
    (TKE_BASE, "nodePools[0].nodeSelector", {"a": "b"}, "nodePools[0].nodeSelector", "only applies to provider existing"),
    # existing clusters
    (EXISTING_BASE, "cluster.kubeconfig", DELETE, "cluster.kubeconfig", "is required for provider existing"),
    (EXISTING_BASE, "cluster.kubeconfig", {"path": "a", "env": "KUBECONFIG"}, "cluster.kubeconfig", "set exactly one of path, env, secret (got path, env)"),
    (EXISTING_BASE, "cluster.kubeconfig", {"env": "1BAD"}, "cluster.kubeconfig.env", "is not an environment variable name"),
    (EXISTING_BASE, "cluster.vpcCidr", "10.0.0.0/16", "cluster.vpcCidr", "only applies to provider tke"),
    (EXISTING_BASE, "cluster.endpoint", {"public": False}, "cluster.endpoint", "only applies to provider tke"),
    (EXISTING_BASE, "cluster.kubernetesVersion", DELETE, "cluster.kubernetesVersion", "is required on provider existing unless images.kubeScheduler.tag is set"),
    (EXISTING_BASE, "nodePools[0].instanceType", "GN7.2XLARGE32", "nodePools[0].instanceType", "only applies to provider tke"),
    (EXISTING_BASE, "nodePools[0].nodeSelector", DELETE, "nodePools[0].nodeSelector", "is required on provider existing"),
    (EXISTING_BASE, "nodePools[0].gpuCount", DELETE, "nodePools[0].gpuCount", "is required on provider existing"),
    (EXISTING_BASE, "nodePools[0].gpuModel", DELETE, "nodePools[0].gpuModel", "is required on provider existing"),
    # labels and taints
    (TKE_BASE, "nodePools[0].labels", {"tessera.dev/pool": "x"}, 'nodePools[0].labels["tessera.dev/pool"]', "is set by Tessera"),
    (TKE_BASE, "nodePools[0].labels", {"gputype": "x"}, "nodePools[0].labels.gputype", "is set by Tessera"),
    (TKE_BASE, "nodePools[0].labels", {"bad key": "x"}, "nodePools[0].labels", "'bad key' is not a valid label key"),
    (TKE_BASE, "nodePools[0].taints", [{"key": "tessera.dev/gpu", "effect": "NoSchedule"}], "nodePools[0].taints[0].key", "is reserved"),
    (TKE_BASE, "nodePools[0].taints", [{"key": "team", "effect": "Never"}], "nodePools[0].taints[0].effect", "(valid: NoSchedule, PreferNoSchedule, NoExecute)"),
    # re-partitioning schedules
    (TKE_BASE, "nodePools[2].repartition[0].cron", "0 8 * *", "nodePools[2].repartition[0].cron", "expected 5 fields"),
    (TKE_BASE, "nodePools[2].repartition[0].cron", "61 8 * * *", "nodePools[2].repartition[0].cron", "minute field: 61 is outside 0-59"),
    (TKE_BASE, "nodePools[2].repartition[0].cron", "0 8 * * MON-XYZ", "nodePools[2].repartition[0].cron", "day of week field: 'XYZ' is not a number"),
    (TKE_BASE, "nodePools[2].repartition[1].cron", "0 8 * * 1-5", "nodePools[2].repartition[1].cron", "same schedule as repartition[0]"),
    (TKE_BASE, "nodePools[2].repartition[1].layout", {"3g.25gb": 1}, "nodePools[2].repartition[1].layout", "'3g.25gb' is not a MIG profile of A100-40GB"),
    (TKE_BASE, "nodePools[2].repartition[1].layout", 4, "nodePools[2].repartition[1].layout", "a mig pool's layout is a MIG layout"),
    (TKE_BASE, "nodePools[2].repartition[1].timezone", "Mars/Olympus", "nodePools[2].repartition[1].timezone", "is not an IANA time zone"),
    (TKE_BASE, "nodePools[2].repartition", [{"cron": "0 8 * * *", "layout": "all-1g.5gb"}], "nodePools[2].repartition", "needs at least two entries"),
    (TKE_BASE, "nodePools[1].repartition", [{"cron": "0 8 * * *", "layout": "all-1g.5gb"}, {"cron": "0 20 * * *", "layout": 1}], "nodePools[1].repartition[0].layout", "a shared pool's layout is shares per GPU"),
    (TKE_BASE, "nodePools[1].repartition", [{"cron": "0 8 * * *", "layout": 4}, {"cron": "0 20 * * *", "layout": 101}], "nodePools[1].repartition[1].layout", "from 1 (whole GPUs) to 100"),
    (TKE_BASE, "nodePools[3].repartition", [{"cron": "0 8 * * *", "layout": 4}, {"cron": "0 20 * * *", "layout": "all-1g.5gb"}], "nodePools[3].repartition[1].layout", "a timeslice pool's layout is replicas per GPU"),
    (TKE_BASE, "nodePools[0].repartition", [{"cron": "0 8 * * *", "layout": 4}, {"cron": "0 20 * * *", "layout": 1}], "nodePools[0].repartition", "nvidia pools hand out whole GPUs"),
    # images, operator, monitoring, quotas, scheduler
    (TKE_BASE, "images", {"kubeScheduler": {"repository": "registry.k8s.io/kube-scheduler", "tag": "v1.31.0"}}, "images.kubeScheduler.tag", "kube-scheduler must be the cluster's minor version or one older"),
    (TKE_BASE, "images", {"kubeScheduler": {"repository": "registry.k8s.io/kube-scheduler", "tag": "v1.28.2"}}, "images.kubeScheduler.tag", "does not fit a 1.30.0 cluster"),
    (TKE_BASE, "region", "Guangzhou", "tencentcloud:region", "is not a Tencent Cloud region"),
    (EXISTING_BASE, "cluster.kubeconfig", {"secret": "cluster"}, "cluster.kubeconfig.secret", "is a Tessera setting"),
    (TKE_BASE, "nodePools[0].gpuDriver", {"customDriverUrl": "ftp://x/driver.run"}, "nodePools[0].gpuDriver.customDriverUrl", "is not an http(s) URL"),
    # GPU software: only whole combinations TKE offers, for the pool's GPU
    (TKE_BASE, "nodePools[0].gpuDriver", {"driver": "470.82.01", "cuda": "12.2.2"}, "nodePools[0].gpuDriver",
     "driver 470.82.01 + CUDA 12.2.2 is not a combination TKE offers; nearest: driver 470.82.01 + CUDA 11.4.3 + cuDNN 8.2.4; driver 535.161.07 + CUDA 12.2.2 + cuDNN 8.9.4 (unconfirmed)"),
    (TKE_BASE, "nodePools[0].gpuDriver", {"driver": "535.999.01"}, "nodePools[0].gpuDriver", "driver 535.999.01 is not a combination TKE offers; nearest: driver 535.161.07 + CUDA 12.2.2 + cuDNN 8.9.4 (unconfirmed)"),
    (TKE_BASE, "nodePools[0].gpuDriver", {"cuda": "11.4"}, "nodePools[0].gpuDriver", "CUDA 11.4 is not a combination TKE offers; nearest: driver 470.82.01 + CUDA 11.4.3"),
    (TKE_BASE, "nodePools[2].gpuDriver", {"driver": "450.102.04"}, "nodePools[2].gpuDriver",
     "driver 450.102.04 + CUDA 11.0.3 + cuDNN 8.1.0 does not support A100-40GB (ampere); offered for A100-40GB: driver 470.82.01"),
    (TKE_BASE, "nodePools[0].gpuDriver", {"cudnn": "8.1.0"}, "nodePools[0].gpuDriver",
     "cuDNN 8.1.0 comes as Debian packages (libcudnn8_8.1.0.77-1+cuda11.2_amd64.deb), which need a ubuntu node image, not cluster.nodeOs tlinux3.1x86_64"),
    (TKE_BASE, "nodePools[0].gpuDriver", {"driver": "470.82.01", "customDriverUrl": "https://mirror.example/d.run"}, "nodePools[0].gpuDriver.driver", "customDriverUrl replaces the catalog driver; remove driver"),
    (TKE_BASE, "images", {"requireDigests": True}, "images.tessera.digest", "is required because images.requireDigests is true"),
    (TKE_BASE, "images", {"tessera": {"repository": "ghcr.io/x/tessera", "digest": "sha256:abc"}}, "images.tessera.digest", "is not an image digest"),
    (TKE_BASE, "images", {"tessera": {"repository": "ghcr.io/x/tessera:1.0"}}, "images.tessera.repository", "is not an image repository"),
    (TKE_BASE, "gpuOperator", {"enabled": False}, "gpuOperator.enabled", "must be true: pools t4, mig, ts use NVIDIA's device plugin"),
    (edit(TKE_BASE, "nodePools", [TKE_BASE["nodePools"][1]]), "gpuOperator", {"enabled": False}, "monitoring.dcgmExporter", "dcgm-exporter is deployed by the GPU operator"),
    (TKE_BASE, "quotas", [{"namespace": "a", "gpuCore": 100}, {"namespace": "a", "nvidiaGpu": 1}], "quotas[1].namespace", "duplicate namespace 'a'"),
    (TKE_BASE, "quotas", [{"namespace": "a"}], "quotas[0]", "sets no limit"),
    (TKE_BASE, "quotas", [{"namespace": "a", "resources": {"nvidia.com/mig-7g.40gb": 1}}], 'quotas[0].resources["nvidia.com/mig-7g.40gb"]', "no pool offers nvidia.com/mig-7g.40gb"),
    (TKE_BASE, "quotas", [{"namespace": "a", "resources": {"tessera.dev/gpu-core": 1}}], 'quotas[0].resources["tessera.dev/gpu-core"]', "use quotas[0].gpuCore"),
    (TKE_BASE, "quotas", [{"namespace": "a", "gpuMemoryMib": 1}], "quotas[0].gpuMemoryMib", "did you mean 'gpuMemoryMiB'?"),
    (TKE_BASE, "scheduler", {"placement": "random"}, "scheduler.placement", "(valid: binpack, spread, fragmentation-aware)"),
    (TKE_BASE, "scheduler", {"httpTimeoutSeconds": 0}, "scheduler.httpTimeoutSeconds", "must be > 0"),
]

GOOD: list[tuple[str, dict[str, Any]]] = [
    ("tke base", TKE_BASE),
    ("existing base", EXISTING_BASE),
    ("named balanced layout", edit(TKE_BASE, "nodePools[2].mig.profile", "all-balanced")),
    ("single strategy, one profile, int replicas", edit(edit(edit(TKE_BASE, "nodePools[2].mig", {"strategy": "single", "profile": "all-1g.5gb"}), "nodePools[2].timeSlicing", {"replicas": 2}), "nodePools[2].repartition", [])),
    ("single strategy, nvidia.com/gpu replicas", edit(edit(edit(TKE_BASE, "nodePools[2].mig", {"strategy": "single", "profile": {"2g.10gb": 3}}), "nodePools[2].timeSlicing", {"replicas": {"nvidia.com/gpu": 3}}), "nodePools[2].repartition", [])),
    ("custom H100 instance type", edit(edit(TKE_BASE, "nodePools[2].instanceType", "HCCPNV5.48XLARGE"), "nodePools[2]", {
        "name": "h100", "kind": "mig", "instanceType": "HCCPNV5.48XLARGE", "customInstanceType": True, "gpuModel": "H100-80GB", "gpuCount": 8,
        "mig": {"profile": {"3g.40gb": 1, "4g.40gb": 1}},
    })),
    ("A30 custom layout", edit(TKE_BASE, "nodePools[2]", {"name": "a30", "kind": "mig", "instanceType": "X.A30", "customInstanceType": True, "gpuModel": "A30", "gpuCount": 1, "mig": {"profile": {"2g.12gb": 1, "1g.6gb": 2}}})),
    ("shared pool schedule", edit(TKE_BASE, "nodePools[1].repartition", [{"cron": "0 8 * * MON-FRI", "timezone": "Asia/Shanghai", "layout": 4}, {"cron": "0 20 * * *", "layout": 1}])),
    ("quota on a mig resource", edit(TKE_BASE, "quotas", [{"namespace": "ml", "gpuMemoryMiB": 1024, "resources": {"nvidia.com/mig-1g.5gb": 4}}])),
    # the cluster runs `mixed` (pool "mig"), so the `single` pool's slices are nvidia.com/mig-7g.40gb
    ("quota on a single pool's slices in a mixed cluster", edit(edit(TKE_BASE, "nodePools", [
        *TKE_BASE["nodePools"],
        {"name": "mig-single", "kind": "mig", "instanceType": "GT4.4XLARGE96", "mig": {"strategy": "single", "profile": {"7g.40gb": 1}}},
    ]), "quotas", [{"namespace": "ml", "resources": {"nvidia.com/mig-7g.40gb": 2}}])),
    ("scheduler one minor older", edit(TKE_BASE, "images", {"kubeScheduler": {"repository": "registry.k8s.io/kube-scheduler", "tag": "v1.29.8"}})),
    ("existing with a secret kubeconfig", edit(EXISTING_BASE, "cluster.kubeconfig", {"secret": "kubeconfig"})),
    ("the provider's documented driver set", edit(TKE_BASE, "nodePools[0].gpuDriver", {"driver": "470.182.03", "cuda": "11.4.3", "cudnn": "8.2.4"})),
    ("Debian cuDNN on an Ubuntu image", edit(edit(TKE_BASE, "cluster.nodeOs", "ubuntu20.04x86_64"), "nodePools[0].gpuDriver", {"cudnn": "8.1.0"})),
    ("custom driver with catalog CUDA", edit(TKE_BASE, "nodePools[0].gpuDriver", {"customDriverUrl": "https://mirror.example/d.run", "cuda": "11.4.3"})),
]


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_mapping(data)
    return [(p.path, p.message) for p in caught.value.problems]


@pytest.mark.parametrize(("base", "path", "value", "where", "fragment"), BAD, ids=[f"{c[1]}={c[2]!r}"[:70] for c in BAD])
def test_bad_config_is_reported_at_its_path(base: dict[str, Any], path: str, value: Any, where: str, fragment: str) -> None:
    problems = _problems(edit(base, path, value))
    matching = [message for p, message in problems if p == where]
    assert matching, f"no problem at {where}; got {problems}"
    assert any(fragment in message for message in matching), f"{fragment!r} not in {matching}"


@pytest.mark.parametrize(("name", "data"), GOOD, ids=[g[0] for g in GOOD])
def test_good_config_validates(name: str, data: dict[str, Any]) -> None:
    config = from_pulumi_mapping(data)
    assert isinstance(config, StackConfig)
    assert config.node_pools


def test_all_problems_are_reported_together() -> None:
    data = edit(edit(TKE_BASE, "nodePools[0].minSize", 5), "nodePools[2].mig.profile", {"3g.25gb": 1})
    paths = [path for path, _ in _problems(data)]
    assert paths == ["nodePools[0].maxSize", "nodePools[2].mig.profile"]


def test_config_error_text_is_one_line_per_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        from_pulumi_mapping(edit(edit(TKE_BASE, "nodePools[0].minSize", 5), "region", DELETE))
    assert str(caught.value).splitlines() == [str(p) for p in caught.value.problems]
    assert str(caught.value).splitlines()[0].startswith("tencentcloud:region: is required")


def test_derived_values_come_from_the_catalog() -> None:
    config = from_pulumi_mapping(TKE_BASE)
    shared = config.pool("shared")
    assert (shared.gpu_spec().name, shared.gpus_per_node(), shared.desired) == ("T4", 2, 0)
    assert config.pool("mig").gpu_spec().mig_capable
    assert config.kube_scheduler_image() == "registry.k8s.io/kube-scheduler:v1.30.0"


@pytest.mark.parametrize(
    ("gpu_driver", "expected"),
    [
        ({}, ("525.105.17", "12.0.1", "8.8.0")),  # the catalog default for T4 (turing)
        ({"driver": "535.161.07"}, ("535.161.07", "12.2.2", "8.9.4")),  # one version picks its whole record
        ({"cuda": "11.4.3"}, ("470.182.03", "11.4.3", "8.2.4")),  # two records have it: the newer driver
        ({"driver": "470.82.01", "cuda": "11.4.3", "cudnn": "8.2.4"}, ("470.82.01", "11.4.3", "8.2.4")),
        ({"customDriverUrl": "https://mirror.example/d.run", "cuda": "12.2.2"}, ("535.161.07", "12.2.2", "8.9.4")),
    ],
)
def test_gpu_driver_versions_pick_one_whole_catalog_record(gpu_driver: dict[str, str], expected: tuple[str, str, str]) -> None:
    software = from_pulumi_mapping(edit(TKE_BASE, "nodePools[0].gpuDriver", gpu_driver)).pool("t4").gpu_software()
    assert (software.driver.version, software.cuda.version, software.cudnn.version) == expected


def test_h200_pools_get_a_driver_branch_that_supports_them() -> None:
    data = edit(TKE_BASE, "nodePools[0]", {"name": "h200", "kind": "nvidia", "instanceType": "X.H200", "customInstanceType": True, "gpuModel": "H200", "gpuCount": 8})
    assert from_pulumi_mapping(data).pool("h200").gpu_software().branch >= 550
    problems = _problems(edit(data, "nodePools[0].gpuDriver", {"driver": "535.161.07"}))
    assert problems and problems[0][0] == "nodePools[0].gpuDriver" and "does not support H200" in problems[0][1]


def test_pulumi_json_text_values_are_decoded() -> None:
    import json

    data = {key: json.dumps(value) if isinstance(value, dict | list) else value for key, value in TKE_BASE.items()}
    assert from_pulumi_mapping(data).pool("mig").kind == "mig"


def test_python_callers_may_use_snake_case_names() -> None:
    config = StackConfig.model_validate(TKE_BASE | {"gpu_operator": {"chart_version": "v24.9.2"}})
    assert config.gpu_operator.chart_version == "v24.9.2"


def test_stack_files_must_use_camel_case_keys() -> None:
    problems = _problems(TKE_BASE | {"gpu_operator": {"chart_version": "v24.9.2"}})
    assert problems[0][0] == "gpu_operator" and "did you mean 'gpuOperator'?" in problems[0][1]
