"""What this machine has, and which checks can run on it (with the reason and the fix when not).

`probe_environment()` looks (PyTorch in a subprocess, so the orchestrator never creates a CUDA
context; NVML through pynvml; binaries on PATH); `fatal_reason()` and `skip_reasons()` decide,
purely, from an `Environment`, so the decisions are unit-tested without a GPU.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

WHEELS_HINT = "pip install --no-index --find-links node-agent/gpu-checks/wheels {pkg}  (run-on-gpu.sh does this)"
WHERE_HINT = "run on a machine with an NVIDIA GPU, its driver and PyTorch: bash node-agent/gpu-checks/run-on-gpu.sh"

NEEDS_AGENT = ("memory", "colocation", "burst", "dra")  # import the agent loop (prometheus_client)
NEEDS_GRPC = ("dra",)  # the DRA plugin and the kubelet emulator speak gRPC (grpcio, protobuf: binary wheels, not shipped)
NEEDS_MPS = ("mps", "overhead")  # nvidia-cuda-mps-control (memory uses it for one half)
NEEDS_TWO_NATIVE = ("besteffort", "colocation", "burst")  # two non-MPS CUDA processes at once

_TORCH_PROBE = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, 'available': ok,"
    " 'count': torch.cuda.device_count() if ok else 0}))\n"
)


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mib: int
    mig: str = "unsupported"  # enabled | disabled | unsupported
    compute_mode: str = "default"  # default | exclusive_process | prohibited | unknown


@dataclass
class Environment:
    python: str = sys.version.split()[0]
    uid: int = -1
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_error: str | None = None
    cuda_available: bool = False
    pynvml_error: str | None = None
    prometheus_error: str | None = None
    grpc_error: str | None = None
    nvml_error: str | None = None
    driver: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    mps_control: str | None = None
    nvidia_smi: str | None = None
    system_mps_pipe: bool = False  # an MPS daemon may listen on the default /tmp/nvidia-mps

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fatal_reason(env: Environment) -> str | None:
    """Why no check can run here at all (the script then exits 2), or None."""
    problems: list[str] = []
    if env.torch_error:
        problems.append(f"PyTorch is not importable by Python {env.python} ({env.torch_error}): install a CUDA build of torch")
    elif not env.cuda_available:
        problems.append("PyTorch sees no CUDA GPU (torch.cuda.is_available() is False): no NVIDIA GPU or driver here")
    if env.pynvml_error:
        problems.append(f"module pynvml is missing ({env.pynvml_error}): " + WHEELS_HINT.format(pkg="nvidia-ml-py"))
    elif env.nvml_error:
        problems.append(f"NVML cannot start ({env.nvml_error}): the NVIDIA driver (libnvidia-ml.so.1) is missing")
    elif not env.gpus:
        problems.append("NVML lists no GPU")
    else:
        gpu = env.gpus[0]
        if gpu.mig == "enabled":
            problems.append(f"GPU 0 ({gpu.uuid}) has MIG enabled; the checks need a whole GPU (MIG is left as it is on a lent machine)")
        if gpu.compute_mode == "prohibited":
            problems.append("GPU 0 is in PROHIBITED compute mode: no CUDA context can be created")
    if not problems:
        return None
    return "; ".join(problems) + "; " + WHERE_HINT


def skip_reasons(env: Environment, checks: list[str]) -> dict[str, str]:
    """check -> why it cannot run here (checks that can run are absent)."""
    out: dict[str, str] = {}
    exclusive = bool(env.gpus) and env.gpus[0].compute_mode == "exclusive_process"
    for name in checks:
        if name in NEEDS_AGENT and env.prometheus_error:
            out[name] = (f"the agent loop imports prometheus_client, which is missing ({env.prometheus_error}): "
                         + WHEELS_HINT.format(pkg="prometheus-client"))
        elif name in NEEDS_GRPC and env.grpc_error:
            out[name] = (f"the DRA plugin speaks gRPC, and grpcio/protobuf are missing here ({env.grpc_error}): "
                         "install them into the GPU machine's Python (pip install grpcio protobuf) to prove the DRA route")
        elif name in NEEDS_MPS and env.mps_control is None:
            out[name] = "nvidia-cuda-mps-control is not on PATH (the driver's MPS utilities; nvidia-utils / cuda-mps packages)"
        elif name in NEEDS_TWO_NATIVE and exclusive:
            out[name] = ("GPU 0 is in EXCLUSIVE_PROCESS compute mode, so two non-MPS processes cannot share it; "
                         "the mode is left as it is on a lent machine (nvidia-smi -c DEFAULT would allow this check)")
    return out


def probe_torch(timeout_s: float = 180.0) -> dict[str, Any]:
    """torch version and CUDA visibility, from a subprocess (no CUDA context in this process)."""
    try:
        done = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"importing torch took over {timeout_s:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit code %d" % done.returncode])[-1]
        return {"error": last[:300]}
    try:
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"error": f"unexpected output: {done.stdout[-200:]!r}"}


def _import_error(module: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except ImportError as exc:
        return str(exc)
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_nvml(env: Environment) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pynvml
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        env.nvml_error = str(exc) or type(exc).__name__
        return
    try:
        env.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        modes = {pynvml.NVML_COMPUTEMODE_DEFAULT: "default", pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "exclusive_process",
                 pynvml.NVML_COMPUTEMODE_PROHIBITED: "prohibited"}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current, _ = pynvml.nvmlDeviceGetMigMode(handle)
                mig = "enabled" if current == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"
            except Exception:
                mig = "unsupported"
            try:
                mode = modes.get(pynvml.nvmlDeviceGetComputeMode(handle), "unknown")
            except Exception:
                mode = "unknown"
            env.gpus.append(Gpu(index, _text(pynvml.nvmlDeviceGetUUID(handle)), _text(pynvml.nvmlDeviceGetName(handle)),
                                int(pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)), mig, mode))
    finally:
        pynvml.nvmlShutdown()


def probe_environment(torch_timeout_s: float = 180.0) -> Environment:
    env = Environment(uid=os.geteuid())
    torch = probe_torch(torch_timeout_s)
    env.torch_error = torch.get("error")
    env.torch_version = torch.get("version")
    env.torch_cuda = torch.get("cuda")
    env.cuda_available = bool(torch.get("available"))
    env.pynvml_error = _import_error("pynvml")
    env.prometheus_error = _import_error("prometheus_client")
    env.grpc_error = _import_error("grpc") or _import_error("google.protobuf")
    if env.pynvml_error is None:
        probe_nvml(env)
    env.mps_control = shutil.which("nvidia-cuda-mps-control")
    env.nvidia_smi = shutil.which("nvidia-smi")
    env.system_mps_pipe = os.path.exists("/tmp/nvidia-mps/control") or bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))
    return env
