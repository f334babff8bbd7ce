"""What the GPU checks need and say when it is missing (gpucheck.preflight, gpucheck.cli parsing)."""
from __future__ import annotations

import gpucheck_paths  # noqa: F401 - puts node-agent/gpu-checks on sys.path
import pytest
from gpucheck.analysis import CHECK_ORDER
from gpucheck.cli import build_parser, estimate_s
from gpucheck.preflight import Environment, Gpu, fatal_reason, skip_reasons


def ready(**changes: object) -> Environment:
    """A machine on which everything can run."""
    env = Environment(python="3.11.7", uid=0, torch_version="2.5.1", torch_cuda="12.4", cuda_available=True, driver="570.86",
                      gpus=[Gpu(0, "GPU-1234", "NVIDIA H100 80GB HBM3", 81559, "disabled", "default")],
                      mps_control="/usr/bin/nvidia-cuda-mps-control", nvidia_smi="/usr/bin/nvidia-smi")
    for key, value in changes.items():
        setattr(env, key, value)
    return env


def test_a_ready_machine_runs_everything() -> None:
    env = ready()
    assert fatal_reason(env) is None
    assert skip_reasons(env, list(CHECK_ORDER)) == {}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"torch_error": "ModuleNotFoundError: No module named 'torch'", "cuda_available": False}, "install a CUDA build of torch"),
        ({"cuda_available": False}, "PyTorch sees no CUDA GPU"),
        ({"pynvml_error": "No module named 'pynvml'", "gpus": []}, "--find-links node-agent/gpu-checks/wheels nvidia-ml-py"),
        ({"nvml_error": "NVML Shared Library Not Found", "gpus": []}, "libnvidia-ml.so.1"),
        ({"gpus": []}, "NVML lists no GPU"),
        ({"gpus": [Gpu(0, "GPU-1", "H100", 81559, "enabled", "default")]}, "MIG enabled"),
        ({"gpus": [Gpu(0, "GPU-1", "H100", 81559, "disabled", "prohibited")]}, "PROHIBITED"),
    ],
)
def test_nothing_runs_without_torch_cuda_nvml_or_a_whole_gpu(changes: dict[str, object], says: str) -> None:
    reason = fatal_reason(ready(**changes))
    assert reason is not None and says in reason
    assert reason.endswith("bash node-agent/gpu-checks/run-on-gpu.sh")


def test_several_problems_are_all_named() -> None:
    reason = fatal_reason(ready(torch_error="No module named 'torch'", cuda_available=False, nvml_error="Driver Not Loaded", gpus=[]))
    assert reason is not None and "torch" in reason and "Driver Not Loaded" in reason


def test_without_prometheus_client_the_agent_checks_skip_and_say_how_to_install_it() -> None:
    skips = skip_reasons(ready(prometheus_error="No module named 'prometheus_client'"), list(CHECK_ORDER))
    assert sorted(skips) == ["burst", "colocation", "dra", "memory"]
    assert all("--find-links node-agent/gpu-checks/wheels prometheus-client" in r for r in skips.values())


def test_without_grpc_the_dra_check_skips_and_says_what_it_needs() -> None:
    skips = skip_reasons(ready(grpc_error="No module named 'grpc'"), list(CHECK_ORDER))
    assert sorted(skips) == ["dra"] and "grpcio/protobuf are missing" in skips["dra"]


def test_without_the_mps_binary_the_mps_checks_skip() -> None:
    skips = skip_reasons(ready(mps_control=None), list(CHECK_ORDER))
    assert sorted(skips) == ["mps", "overhead"]
    assert "nvidia-cuda-mps-control is not on PATH" in skips["mps"]


def test_an_exclusive_process_gpu_skips_what_needs_two_native_processes() -> None:
    env = ready(gpus=[Gpu(0, "GPU-1", "H100", 81559, "disabled", "exclusive_process")])
    assert fatal_reason(env) is None
    skips = skip_reasons(env, list(CHECK_ORDER))
    assert sorted(skips) == ["besteffort", "burst", "colocation"]
    assert "EXCLUSIVE_PROCESS" in skips["burst"] and "left as it is" in skips["burst"]


def test_skip_reasons_only_cover_the_checks_asked_for() -> None:
    assert skip_reasons(ready(mps_control=None), ["nvml", "besteffort"]) == {}


def test_arguments_defaults_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([])
    assert args.only == list(CHECK_ORDER) and args.seconds == 10.0 and args.pattern == (6.0, 4.0) and args.cycles == 3
    args = build_parser().parse_args(["--only", "burst,nvml", "--pattern", "5:5", "--budget-seconds", "100"])
    assert args.only == ["nvml", "burst"] and args.pattern == (5.0, 5.0) and args.budget_seconds == 100.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--only", "everything"])
    assert "known: nvml" in capsys.readouterr().err


def test_the_default_run_fits_the_budget_run_on_gpu_gives_it() -> None:
    args = build_parser().parse_args([])
    total = sum(estimate_s(name, args.seconds, args.pattern, args.cycles) for name in CHECK_ORDER)
    assert total < 480 - 45, f"the checks need about {total:.0f} s; run-on-gpu.sh gives them 435 s"
    # the colocation check is the longest: two runs of the burst pattern
    assert estimate_s("colocation", 10.0, (6.0, 4.0), 3) > 2 * 30.0
