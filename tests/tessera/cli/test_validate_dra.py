"""`nodePools[i].allocation: dra` and the Kubernetes version, as `tessera validate` reports them to a
user: which versions serve DRA, consumable capacity on TKE and on an existing cluster that declares
its gates, and the TKE versions on offer (tessera/model/catalog/kubernetes.py has the sources)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _tke(version: str, pool: str) -> str:
    return f"""config:
  tencentcloud:region: ap-guangzhou
  tessera:cluster:
    provider: tke
    name: t
    kubernetesVersion: "{version}"
    vpcCidr: 10.0.0.0/16
    subnets: [{{zone: ap-guangzhou-3, cidr: 10.0.1.0/24}}]
  tessera:nodePools:
    - {pool}
"""


def _existing(version: str, pool: str, gates: str = "") -> str:
    return f"""config:
  tessera:cluster:
    provider: existing
    name: lab
    kubernetesVersion: "{version}"
    kubeconfig: {{path: ~/.kube/config}}
{f"    featureGates: {gates}" + chr(10) if gates else ""}  tessera:nodePools:
    - {pool}
"""


SHARED = "{name: a, kind: shared, instanceType: GN7.2XLARGE32, allocation: dra}"
WHOLE = "{name: a, kind: shared, instanceType: GN7.2XLARGE32, allocation: dra, sharing: {sharesPerGpu: 1}}"
LAB = "{name: a, kind: shared, gpuModel: T4, gpuCount: 1, nodeSelector: {lab/gpu: t4}, allocation: dra}"
CC = "consumable capacity (DRAConsumableCapacity, KEP-5075)"

GOOD = [
    ("TKE 1.34, a whole GPU per claim needs no consumable capacity", _tke("1.34.1", WHOLE)),
    ("existing 1.36: consumable capacity is beta and on", _existing("1.36.0", LAB)),
    ("existing 1.34 that declares the alpha gate", _existing("1.34.2", LAB, "{DRAConsumableCapacity: true}")),
    ("spread: the plugin lists the emptiest GPU first", _existing("1.36.0", "{name: a, kind: shared, gpuModel: T4, gpuCount: 1, nodeSelector: {lab/gpu: t4}, allocation: dra, sharing: {placement: spread}}")),
    ("TKE 1.32 on the device-plugin route", _tke("1.32.2", "{name: a, kind: shared, instanceType: GN7.2XLARGE32}")),
]

BROKEN = [
    (_tke("1.30.0", SHARED), "nodePools[0].allocation: dra needs Kubernetes 1.34 or later (resource.k8s.io/v1: structured parameters went GA in 1.34, KEP-4381); cluster.kubernetesVersion is 1.30.0; TKE offers 1.34.1"),
    (_tke("1.34.1", SHARED), f"nodePools[0].allocation: dra on a shared pool lets several claims share one GPU, which needs {CC}: off by default in Kubernetes 1.34, on from 1.36; "
     "TKE runs default gates and offers up to 1.34.1: keep allocation: device-plugin, or set sharing.sharesPerGpu: 1 for a whole GPU per claim"),
    (_existing("1.34.0", LAB), f"nodePools[0].allocation: dra on a shared pool lets several claims share one GPU, which needs {CC}: off by default in Kubernetes 1.34, on from 1.36; "
     "if the cluster's API server, kube-scheduler and kubelets run with it, declare cluster.featureGates.DRAConsumableCapacity: true; else keep allocation: device-plugin, or set sharing.sharesPerGpu: 1"),
    (_existing("1.36.1", LAB, "{DRAConsumableCapacity: false}"), f"nodePools[0].allocation: dra on a shared pool lets several claims share one GPU, which needs {CC}, "
     "switched off by cluster.featureGates.DRAConsumableCapacity: keep allocation: device-plugin, or set sharing.sharesPerGpu: 1 for a whole GPU per claim"),
    (_tke("1.34.1", "{name: a, kind: nvidia, instanceType: GN7.2XLARGE32, allocation: dra}"),
     "nodePools[0].allocation: dra serves shared pools; whole GPUs and MIG through DRA need NVIDIA's DRA driver (k8s-dra-driver-gpu), which Tessera does not deploy: keep allocation: device-plugin on this nvidia pool"),
    (_tke("1.34.1", "{name: a, kind: shared, instanceType: GN7.2XLARGE32, allocation: dra, sharing: {sharesPerGpu: 1, qgpuAliases: true}}"),
     "nodePools[0].sharing.qgpuAliases: TKE qGPU resource names are translated for the device-plugin route only; remove it or keep allocation: device-plugin"),
    (_tke("1.34.1", "{name: a, kind: shared, instanceType: GN7.2XLARGE32, allocation: grpc}"), "nodePools[0].allocation: 'grpc' is not valid (valid: device-plugin, dra)"),
    (_tke("1.31.0", "{name: a, kind: nvidia, instanceType: GN7.2XLARGE32}"),
     "cluster.kubernetesVersion: 1.31.0 is not a version TKE offers (TKE releases even minor versions: 1.26.1, 1.28.3, 1.30.0, 1.32.2, 1.34.1); nearest: 1.32.2 or 1.30.0"),
    (_existing("1.32.0", "{name: a, kind: shared, gpuModel: T4, gpuCount: 1, nodeSelector: {lab/gpu: t4}}", "{DRAConsumableCapacity: true}"),
     "cluster.featureGates.DRAConsumableCapacity: does not exist in Kubernetes 1.32 (alpha from 1.34)"),
    (_existing("1.36.0", LAB, "{DynamicResourceAllocation: false}"), "cluster.featureGates.DynamicResourceAllocation: is GA in Kubernetes 1.36 and cannot be switched off"),
    (_existing("1.36.0", "{name: a, kind: shared, gpuModel: T4, gpuCount: 1, nodeSelector: {lab/gpu: t4}, allocation: dra, sharing: {sharesPerGpu: 4}}"),
     "nodePools[0].sharing.sharesPerGpu: 4 cannot be honoured with allocation: dra (DRA counts capacity, not claims per device); use 1 (a whole GPU per claim), "
     "leave it unset, or keep allocation: device-plugin"),
    (_existing("1.36.0", LAB) + "  tessera:workloads:\n    - {name: w, namespace: ml, image: {repository: example/w, tag: '1'}, pool: a, gpu: {core: 30}}\n",
     "workloads[0].gpu.memoryMiB: is required for a share on pool a (allocation: dra): a claim that names no memory takes all of the GPU's memory and shares the GPU with nobody"),
    (_existing("1.36.0", LAB, "{DRAMagic: true}"), "cluster.featureGates.DRAMagic: 'DRAMagic' is not valid (valid: DynamicResourceAllocation, DRAConsumableCapacity, DRAExtendedResource, "
     "DRAPartitionableDevices, DRADeviceTaints, DRAPrioritizedList)"),
]


def _validate(tmp_path: Path, texts: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    files = []
    for i, text in enumerate(texts):
        path = tmp_path / f"Pulumi.s{i}.yaml"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    result = subprocess.run([sys.executable, "-m", "tessera.cli.main", "validate", *files], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    return files, result


def test_stacks_the_version_can_serve_are_ok(tmp_path: Path) -> None:
    files, result = _validate(tmp_path, [text for _, text in GOOD])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{f}: ok" for f in files]


def test_what_the_version_cannot_serve_is_named_at_its_key(tmp_path: Path) -> None:
    files, result = _validate(tmp_path, [text for text, _ in BROKEN])
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{f}: {line}" for f, (_, line) in zip(files, BROKEN, strict=True)]
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("version", ["1.26.1", "1.28.3", "1.30.0", "1.32.2", "1.34.1"])
def test_every_tke_version_on_offer_validates(tmp_path: Path, version: str) -> None:
    _, result = _validate(tmp_path, [_tke(version, "{name: a, kind: nvidia, instanceType: GN7.2XLARGE32}")])
    assert result.returncode == 0, result.stdout
