"""`tessera scheduler serve --simulate` as a user runs it: a subprocess driven over HTTP."""
from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.model.contract import GPU_CORE

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nnode-a,32000,131072,2,T4\nnode-b,32000,131072,1,V100M32\ncpu-only,8000,16384,0,\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
PODS_CSV = POD_HEADER + "share,2000,4096,1,500,,LS,Running,0,9,0\nwhole,4000,8192,1,1000,,LS,Running,1,9,1\n"


def _tessera(*args: str) -> list[str]:
    return [sys.executable, "-m", "tessera.cli.main", *args]


def _pod(name: str, core: int, *, cpu: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}, "limits": {GPU_CORE: str(core)}}}]},
    }


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, verb: str, payload: Any) -> tuple[int, Any]:
        self.conn.request("POST", f"/{verb}", body=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read())

    def get(self, path: str) -> tuple[int, str]:
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        return resp.status, resp.read().decode()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    proc = subprocess.Popen(
        _tessera("scheduler", "serve", "--simulate", str(nodes), "--port", "0", "--placement", "binpack", "--log-level", "WARNING"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if match is None:
        proc.kill()
        pytest.fail(f"no listening line: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    assert "2 nodes, 3 GPUs" in line
    yield proc, int(match.group(1))
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_simulated_cluster_schedules_and_binds_over_http(served: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = served
    client = Client(port)
    assert client.get("/healthz")[0] == 200
    nodes = ["node-a", "node-b"]
    for name, core in (("first", 40), ("second", 30)):
        status, result = client.post("filter", {"Pod": _pod(name, core), "NodeNames": nodes})
        assert status == 200 and result["NodeNames"] == nodes
        status, scores = client.post("prioritize", {"Pod": _pod(name, core), "NodeNames": nodes})
        best = max(scores, key=lambda s: s["Score"])["Host"]
        status, result = client.post("bind", {"PodName": name, "PodNamespace": "demo", "PodUID": f"uid-{name}", "Node": best})
        assert (status, result) == (200, {"Error": ""})
    status, result = client.post("filter", {"Pod": _pod("huge", 300), "NodeNames": nodes})
    assert result["NodeNames"] == [] and set(result["FailedNodes"]) == {"node-a", "node-b"}
    metrics = client.get("/metrics")[1]
    assert 'tessera_extender_binds_total{outcome="bound"} 2.0' in metrics
    assert "tessera_extender_allocated_gpu 0.7" in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_simulated_binds_are_recorded_like_in_a_cluster(served: tuple[subprocess.Popen[str], int]) -> None:
    _, port = served
    client = Client(port)
    pod = _pod("whole", 100)
    client.post("filter", {"Pod": pod, "NodeNames": ["node-b"]})
    status, result = client.post("bind", {"PodName": "whole", "PodNamespace": "demo", "PodUID": "uid-whole", "Node": "node-b"})
    assert result == {"Error": ""}
    status, result = client.post("bind", {"PodName": "whole", "PodNamespace": "demo", "PodUID": "uid-whole", "Node": "node-b"})
    assert result == {"Error": ""}  # a retried bind is not an error
    status, result = client.post("filter", {"Pod": _pod("late", 10), "NodeNames": ["node-b"]})
    assert result["NodeNames"] == [] and "GPU" in result["FailedNodes"]["node-b"]


def test_unreachable_cluster_exits_1_with_what_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        _tessera("scheduler", "serve", "--kubeconfig", str(tmp_path / "missing-kubeconfig"), "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cannot load Kubernetes configuration" in done.stderr and "--kubeconfig" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "missing.csv"], "missing.csv: cannot read it (No such file or directory)"),
        (["--simulate", "NODES", "--placement", "tightest"], "unknown placement policy 'tightest'"),
        (["--gpu-placement", "spread"], "only applies with --simulate"),
        (["--simulate", "NODES", "--preempt-budget", "0"], "--preempt-budget must be more than 0 seconds"),
        (["--simulate-pods", "PODS", "--simulate-fill", "0.5"], "--simulate-pods and --simulate-fill only apply with --simulate"),
        (["--simulate", "NODES", "--simulate-fill", "0.5"], "--simulate-fill and --simulate-pods go together"),
        (["--simulate", "NODES", "--simulate-pods", "PODS"], "--simulate-fill and --simulate-pods go together"),
        (["--simulate", "NODES", "--simulate-pods", "PODS", "--simulate-fill", "1.5"], "--simulate-fill must be a share of the GPUs between 0 and 1, got 1.5"),
        (["--simulate", "NODES", "--simulate-pods", "PODS", "--simulate-fill", "-0.1"], "between 0 and 1, got -0.1"),
        (["--simulate", "NODES", "--simulate-pods", "PODS", "--simulate-fill", "nan"], "between 0 and 1, got nan"),
        (["--simulate", "NODES", "--simulate-pods", "PODS", "--simulate-fill", "most"], "argument --simulate-fill: invalid float value: 'most'"),
        (["--simulate", "NODES", "--simulate-pods", "missing.csv", "--simulate-fill", "0.5"], "missing.csv: cannot read it (No such file or directory)"),
        (["--simulate", "NODES", "--simulate-pods", "BAD_PODS", "--simulate-fill", "0.5"], "bad-pods.csv:4: cpu_milli='lots' is not a number"),
        (["--simulate", "NODES", "--simulate-pods", "CPU_PODS", "--simulate-fill", "0.5"], "cpu-pods.csv: no pod asks for a GPU"),
        (["--simulate", "NODES", "--pools-file", "missing.json"], "--pools-file missing.json: no such file"),
        (["--simulate", "NODES", "--pools-file", "BAD_POOLS"], "bad-pools.json: expected a JSON object of pool name -> pool settings, found list"),
    ],
)
def test_user_mistakes_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    files = {"NODES": ("nodes.csv", NODES_CSV), "PODS": ("pods.csv", PODS_CSV), "BAD_PODS": ("bad-pods.csv", PODS_CSV + "broken,lots,4096,1,500,,LS,Running,2,9,2\n"),
             "CPU_PODS": ("cpu-pods.csv", POD_HEADER + "web,2000,4096,0,0,,LS,Running,0,9,0\n"),
             "BAD_POOLS": ("bad-pools.json", '["not", "an object"]')}
    paths = {}
    for key, (name, text) in files.items():
        paths[key] = tmp_path / name
        paths[key].write_text(text)
    args = [str(paths[a]) if a in paths else a for a in args]
    done = subprocess.run(_tessera("scheduler", "serve", *args), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_simulated_fill_serves_a_loaded_cluster(tmp_path: Path) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES_CSV)
    pods.write_text(PODS_CSV)
    proc = subprocess.Popen(
        _tessera("scheduler", "serve", "--simulate", str(nodes), "--simulate-pods", str(pods), "--simulate-fill", "0.6", "--port", "0", "--log-level", "WARNING"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        fill_line, listening = proc.stdout.readline(), proc.stdout.readline()
        # 3 GPUs; the shuffled, cycled trace (half a GPU, one GPU) is bound until 60 % is allocated
        match = re.search(r"simulated fill: (\d+) pods bound, ([\d.]+) of 3 GPUs \(([\d.]+) %\), 0 fitted nowhere", fill_line)
        assert match is not None, fill_line
        port = re.search(r"http://127\.0\.0\.1:(\d+)", listening)
        assert port is not None, listening
        client = Client(int(port.group(1)))
        status, health = client.get("/healthz")
        assert status == 200 and f"{match.group(1)} pods, {float(match.group(2)):.2f} GPUs allocated" in health
        assert 60.0 <= float(match.group(3)) < 100.0
        # what the fill allocated is taken: a whole GPU no longer fits everywhere it did
        status, result = client.post("filter", {"Pod": _pod("after", 100), "NodeNames": ["node-a", "node-b"]})
        assert status == 200 and len(result["NodeNames"]) < 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


LEADER_ELECTION_ERRORS = [
    (["--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=3s"], "--leader-elect-lease-duration: must be longer than renewDeadline (3s <= 3s)"),
    (["--leader-elect-renew-deadline=1s", "--leader-elect-retry-period=1s"], "--leader-elect-renew-deadline: must be longer than 1.2 x retryPeriod"),
    (["--leader-elect-lease-duration=4500ms"], "--leader-elect-lease-duration: must be a whole number of seconds"),
    (["--leader-elect-retry-period=fast"], "argument --leader-elect-retry-period: invalid duration 'fast'"),
    (["--leader-elect=maybe"], "argument --leader-elect: invalid boolean 'maybe': use true or false"),
]


@pytest.mark.parametrize(("flags", "message"), LEADER_ELECTION_ERRORS, ids=[m.split(":")[0] + f" {i}" for i, (_, m) in enumerate(LEADER_ELECTION_ERRORS)])
def test_bad_leader_election_flags_are_refused_with_the_flag_named(tmp_path: Path, flags: list[str], message: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    result = subprocess.run(
        _tessera("scheduler", "serve", "--kubeconfig", str(kubeconfig), "--port", "0", *flags), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_leader_election_cannot_serve_a_simulated_cluster(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    result = subprocess.run(
        _tessera("scheduler", "serve", "--simulate", str(nodes), "--leader-elect", "--port", "0"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "error: --leader-elect needs a Kubernetes API server; --simulate serves an in-memory cluster alone" in result.stderr
