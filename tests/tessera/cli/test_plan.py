"""`tessera plan` as a user runs it: figures for every shipped stack, --json, and errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


@pytest.mark.parametrize(
    ("stack", "lines"),
    [
        (
            "dev",
            [
                "pool t4-exclusive (nvidia) on GN7.2XLARGE32: 1 x T4 (16384 MiB) per node",
                "  nodes min/desired/max: 0/1/2    GPUs: 0/1/2",
                "  tessera.dev/gpu-core: 100 per node, 100/100/400 in the pool",
                "  tessera.dev/gpu-memory: 16384 per node, 16384/16384/65536 in the pool",
                "totals (min/desired/max): nodes 1/2/6, GPUs 1/2/6",
            ],
        ),
        (
            "prod",
            [
                "pool a100-mig (mig) on GT4.8XLARGE192: 2 x A100-40GB (40960 MiB) per node",
                "  nvidia.com/mig-1g.5gb: 16 per node, 16/16/48 in the pool",
                "  8 MIG slices per node",
                "  runs: nvidia-device-plugin (time-slicing), nvidia-mig-manager, dcgm-exporter",
                "  nvidia.com/gpu: 4 per node, 0/0/8 in the pool",
                "  runs: tessera-device-plugin, tessera-node-agent, dcgm-exporter",
                "  schedule night: 0 20 * * 1-5 (Asia/Shanghai) -> whole GPUs",
                "totals (min/desired/max): nodes 4/4/17, GPUs 8/8/32",
                # the Triton workload: its slice, replicas, metric and share of the pool at maxReplicas
                "workload inference/tritonserver on pool a100-mig (mig): 1 nvidia.com/mig-1g.5gb per replica",
                "  replicas 1..8, HPA on avg_time_queue_us (Pods, adapter built-in rule), target 50 per replica (average)",
                "  at 8 replicas: 8 nvidia.com/mig-1g.5gb of the pool's 48 at maxSize (17%)",
                "  note: layout night (0 20 * * *) offers no 1g.5gb slice: its nodes are skipped while replicas use them; scale the workload down before it",
            ],
        ),
        ("local", ["pool local-shared (shared) on existing nodes (tessera.dev/pool=local-shared): 1 x T4 (16384 MiB) per node", "totals (min/desired/max): nodes 1/1/1, GPUs 1/1/1"]),
    ],
)
def test_plan_figures(stack: str, lines: list[str]) -> None:
    result = tessera("plan", f"stacks/Pulumi.{stack}.yaml")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    for line in lines:
        assert line in out


def test_plan_json() -> None:
    result = tessera("plan", "stacks/Pulumi.prod.yaml", "--json")  # the same figures as text, as JSON
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["totals"]["nodes"] == {"min": 4, "desired": 4, "max": 17}
    assert data["totals"]["capacity"]["tessera.dev/gpu-core"] == {"min": 400, "desired": 400, "max": 1600}
    assert [p["kind"] for p in data["pools"]] == ["nvidia", "shared", "mig", "timeslice"]
    (triton,) = data["workloads"]
    assert (triton["pool"], triton["replicas"], triton["atMaxReplicas"], triton["poolCapacityAtMaxSize"]) == (
        "a100-mig", {"min": 1, "max": 8}, {"nvidia.com/mig-1g.5gb": 8}, {"nvidia.com/mig-1g.5gb": 48},
    )


def test_plan_of_invalid_stack_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  tessera:cluster: {provider: existing, name: x}\n  tessera:nodePools: []\n", encoding="utf-8")
    result = tessera("plan", str(bad))
    assert result.returncode == 2 and result.stdout == ""
    assert f"{bad}: nodePools: must not be empty" in result.stderr.splitlines()
    assert "Traceback" not in result.stderr
