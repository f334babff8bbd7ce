"""The GPU software TKE installs on a node pool: driver / CUDA / cuDNN as whole records.

TKE takes each package by version *and* by the installer file name in its mirror
(`node_config.gpu_args`: `driver {version, name}`, `cuda {version, name}`, `cudnn {version, name,
doc_name, dev_name}`; the TKE API's `GPUArgs`/`DriverVersion`/`CUDNN`). Those names are NVIDIA's
own file names, which cannot be derived from the version: a CUDA runfile carries the driver it
bundles (`cuda_11.4.3_470.82.01_linux.run`), a cuDNN archive carries its build number and CUDA
line (`cudnn-11.4-linux-x64-v8.2.4.15.tgz`), and the Debian form of cuDNN comes as three packages
(runtime `name`, samples `doc_name`, headers `dev_name`). So the catalog keeps every record whole,
as TKE's menu offers it, and a pool picks one of them.

Sources, per record (`source`):

- tencentcloudstack/terraform-provider-tencentcloud, the node pool acceptance test that creates a
  GPU pool with `gpu_args` (`tencentcloud/services/tke/resource_tc_kubernetes_node_pool_test.go`,
  and the same set in `resource_tc_kubernetes_scale_worker_test.go`), at the commits named below.
  `website/docs/r/kubernetes_node_pool.html.markdown` documents the map keys.
- Records marked ``confirmed=False`` follow NVIDIA's published file names for that driver branch
  but were not found in the provider's docs or examples; TKE's live menu for an instance type and
  OS is what its `DescribeGPUInfo` API (tke 2022-05-01) returns. `tessera plan` marks them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tessera.model.catalog.gpus import GpuModelSpec

_PROVIDER: Final = "tencentcloudstack/terraform-provider-tencentcloud"


@dataclass(frozen=True)
class GpuPackage:
    """A driver or CUDA package: the version TKE reports and the installer file it installs."""

    version: str
    name: str


@dataclass(frozen=True)
class CudnnPackage:
    """cuDNN: one archive (`name`), or the Debian runtime/samples/headers packages."""

    version: str
    name: str
    doc_name: str | None = None
    dev_name: str | None = None


@dataclass(frozen=True)
class GpuSoftware:
    """One driver + CUDA + cuDNN combination TKE offers, whole."""

    driver: GpuPackage
    cuda: GpuPackage
    cudnn: CudnnPackage
    architectures: frozenset[str]
    """GPU architectures the driver branch supports (catalog.gpus architecture names)."""
    source: str
    confirmed: bool = True
    node_os_prefix: str | None = None
    """Debian packages install only on Debian-family node images (e.g. ubuntu...)."""

    @property
    def branch(self) -> int:
        """The driver branch, e.g. 535 for 535.161.07."""
        return int(self.driver.version.split(".")[0])

    @property
    def driver_key(self) -> tuple[int, ...]:
        """The driver version as numbers, for ordering (470.182.03 after 470.82.01)."""
        return _version_key(self.driver.version)

    def label(self) -> str:
        return f"driver {self.driver.version} + CUDA {self.cuda.version} + cuDNN {self.cudnn.version}"

    def supports(self, model: GpuModelSpec) -> bool:
        return model.architecture in self.architectures and self.branch >= MIN_DRIVER_BRANCH.get(model.name, 0)


# Newer GPUs of an architecture need a newer branch than the architecture's first one (NVIDIA data
# center driver release notes: L20, L40S and H20 from R535, H200 from R550).
MIN_DRIVER_BRANCH: Final = {"L20": 535, "L40S": 535, "H20": 535, "H200": 550}

_TURING_TO_AMPERE: Final = frozenset({"pascal", "volta", "turing", "ampere"})
_ALL: Final = frozenset({"pascal", "volta", "turing", "ampere", "ada", "hopper"})

R450_DEB: Final = GpuSoftware(
    GpuPackage("450.102.04", "NVIDIA-Linux-x86_64-450.102.04.run"),
    GpuPackage("11.0.3", "cuda_11.0.3_450.51.06_linux.run"),
    CudnnPackage(
        "8.1.0",
        "libcudnn8_8.1.0.77-1+cuda11.2_amd64.deb",
        doc_name="libcudnn8-samples_8.1.0.77-1+cuda11.2_amd64.deb",
        dev_name="libcudnn8-dev_8.1.0.77-1+cuda11.2_amd64.deb",
    ),
    frozenset({"pascal", "volta", "turing"}),
    f"{_PROVIDER} 786ae0994 (2023-03-08) tencentcloud/resource_tc_kubernetes_node_pool_test.go",
    node_os_prefix="ubuntu",
)
R470_82: Final = GpuSoftware(
    GpuPackage("470.82.01", "NVIDIA-Linux-x86_64-470.82.01.run"),
    GpuPackage("11.4.3", "cuda_11.4.3_470.82.01_linux.run"),
    CudnnPackage("8.2.4", "cudnn-11.4-linux-x64-v8.2.4.15.tgz"),
    _TURING_TO_AMPERE,
    f"{_PROVIDER} df747fca5 (2023-03-15) tencentcloud/resource_tc_kubernetes_node_pool_test.go",
)
R470_182: Final = GpuSoftware(
    GpuPackage("470.182.03", "NVIDIA-Linux-x86_64-470.182.03.run"),
    GpuPackage("11.4.3", "cuda_11.4.3_470.82.01_linux.run"),
    CudnnPackage("8.2.4", "cudnn-11.4-linux-x64-v8.2.4.15.tgz"),
    _TURING_TO_AMPERE,
    f"{_PROVIDER} b6cb89e9c (2023-08-08), unchanged at f6970a900: tencentcloud/services/tke/resource_tc_kubernetes_node_pool_test.go",
)
R525: Final = GpuSoftware(
    GpuPackage("525.105.17", "NVIDIA-Linux-x86_64-525.105.17.run"),
    GpuPackage("12.0.1", "cuda_12.0.1_525.85.12_linux.run"),
    CudnnPackage("8.8.0", "cudnn-linux-x86_64-8.8.0.121_cuda12-archive.tar.xz"),
    _ALL,
    "NVIDIA file names for R525 / CUDA 12.0.1 / cuDNN 8.8.0; not in the provider's docs or examples",
    confirmed=False,
)
R535: Final = GpuSoftware(
    GpuPackage("535.161.07", "NVIDIA-Linux-x86_64-535.161.07.run"),
    GpuPackage("12.2.2", "cuda_12.2.2_535.104.05_linux.run"),
    CudnnPackage("8.9.4", "cudnn-linux-x86_64-8.9.4.25_cuda12-archive.tar.xz"),
    _ALL,
    "NVIDIA file names for R535 / CUDA 12.2.2 / cuDNN 8.9.4; not in the provider's docs or examples",
    confirmed=False,
)
R550: Final = GpuSoftware(
    GpuPackage("550.54.15", "NVIDIA-Linux-x86_64-550.54.15.run"),
    GpuPackage("12.4.1", "cuda_12.4.1_550.54.15_linux.run"),
    CudnnPackage("9.1.0", "cudnn-linux-x86_64-9.1.0.70_cuda12-archive.tar.xz"),
    _ALL,
    "NVIDIA file names for R550 / CUDA 12.4.1 / cuDNN 9.1.0; not in the provider's docs or examples",
    confirmed=False,
)

# Every combination a pool may ask for, oldest first.
GPU_SOFTWARE: Final[tuple[GpuSoftware, ...]] = (R450_DEB, R470_82, R470_182, R525, R535, R550)

# What a pool gets when it sets no gpuDriver: per architecture, the first record that supports the
# GPU model. CUDA 12 images need R525 or newer, so the R470 records are opt-in.
_DEFAULT_PREFERENCE: Final[dict[str, tuple[GpuSoftware, ...]]] = {
    "pascal": (R470_82,),
    "volta": (R525,),
    "turing": (R525,),
    "ampere": (R525,),
    "ada": (R535,),
    "hopper": (R535, R550),
}


def default_gpu_software(model: GpuModelSpec) -> GpuSoftware:
    """The combination TKE installs on a node of this GPU model unless the pool picks another."""
    for record in _DEFAULT_PREFERENCE[model.architecture]:
        if record.supports(model):
            return record
    return next(r for r in reversed(GPU_SOFTWARE) if r.supports(model))


def matching_software(driver: str | None, cuda: str | None, cudnn: str | None) -> list[GpuSoftware]:
    """Records that agree with every version given (None: any)."""
    return [
        r
        for r in GPU_SOFTWARE
        if driver in (None, r.driver.version) and cuda in (None, r.cuda.version) and cudnn in (None, r.cudnn.version)
    ]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _distance(record: GpuSoftware, driver: str | None, cuda: str | None, cudnn: str | None) -> tuple[int, int]:
    """(fields that differ, how far the first differing version is) - smaller is nearer."""
    wanted = ((driver, record.driver.version), (cuda, record.cuda.version), (cudnn, record.cudnn.version))
    misses = [(w, have) for w, have in wanted if w is not None and w != have]
    gap = 0
    if misses:
        a, b = _version_key(misses[0][0] or ""), _version_key(misses[0][1])
        gap = abs((a[0] if a else 0) - (b[0] if b else 0)) * 1000 + abs((a[1] if len(a) > 1 else 0) - (b[1] if len(b) > 1 else 0))
    return len(misses), gap


def nearest_software(driver: str | None, cuda: str | None, cudnn: str | None, candidates: tuple[GpuSoftware, ...] = GPU_SOFTWARE, n: int = 3) -> list[GpuSoftware]:
    """The ``n`` offered records closest to what was asked for."""
    return sorted(candidates, key=lambda r: _distance(r, driver, cuda, cudnn))[:n]
