"""The agent as a real process: kill -9 while containers are frozen, restart, SIGTERM, lease guard,
and its metrics endpoint over HTTP."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tessera.model.contract import GpuShare
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.registry import AppClass, ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy
from tessera_node.gpu.simulated import simulated_uuid

NODE = "sim-node"
ONLINE_UID, OFFLINE_UID = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
ONLINE_PID, OFFLINE_PID = 501, 502
DEADLINE_S = 15.0  # generous bound for a loaded CI machine; the tests do not measure latency


@dataclass
class Node:
    root: Path
    tree: CgroupTreeBuilder
    offline_cgroup: Path
    script: Path

    def set_online_sm(self, sm_pct: int) -> None:
        rows = [
            {"pid": ONLINE_PID, "gpu": 0, "memoryMiB": 1024, "smPct": sm_pct},
            {"pid": OFFLINE_PID, "gpu": 0, "memoryMiB": 2048, "smPct": 90},
        ]
        tmp = self.script.with_suffix(".tmp")
        tmp.write_text(json.dumps({"processes": rows}))
        os.replace(tmp, self.script)

    def offline_frozen(self) -> bool:
        return self.tree.is_frozen_requested(self.offline_cgroup)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    tree = CgroupTreeBuilder(tmp_path)
    tree.container(ONLINE_UID, "a" * 64, [ONLINE_PID])
    offline_cgroup = tree.container(OFFLINE_UID, "b" * 64, [OFFLINE_PID])
    uuid = simulated_uuid(NODE, 0)
    policy = PoolPolicy(online_offline=True, offline_resume_idle_s=60.0)
    registry = ContainerRegistry(tmp_path / "state")
    for uid, name, app, cid in ((ONLINE_UID, "serve", AppClass.ONLINE, "a" * 64), (OFFLINE_UID, "train", AppClass.OFFLINE, "b" * 64)):
        registry.register(RegisteredContainer(PodUid(uid), "team-a", name, ContainerName("main"), (GpuShare(0, uuid, 50, 8192),), app, policy, cid))
    result = Node(tmp_path, tree, offline_cgroup, tmp_path / "processes.json")
    result.set_online_sm(0)
    return result


class AgentProcess:
    def __init__(self, node: Node, *extra: str) -> None:
        argv = [
            sys.executable, "-m", "tessera.cli.main", "node", "agent", "--simulate", "H100-80GB:1", "--simulate-processes", str(node.script),
            "--node-name", NODE, "--state-dir", str(node.root / "state"), "--cgroup-root", str(node.tree.cgroup_root),
            "--proc-root", str(node.tree.proc_root), "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--no-kube", *extra,
        ]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready_line = self.wait_for("ready" if "--lease-guard" not in extra else "lease guard")

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str) -> str:
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in line:
                return line
        raise AssertionError(f"agent never said {text!r} (exit code {self.proc.poll()})")

    @property
    def metrics_url(self) -> str:
        return self.ready_line.rsplit(" ", 1)[1].strip()

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(DEADLINE_S)


def eventually(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.fixture
def procs() -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(DEADLINE_S)


def test_kill_9_while_frozen_then_restart_thaws(node: Node, procs: list[AgentProcess]) -> None:
    agent = AgentProcess(node)
    procs.append(agent)
    node.set_online_sm(80)
    eventually(node.offline_frozen, "the offline container is frozen")
    agent.stop(signal.SIGKILL)
    assert node.offline_frozen(), "kill -9 gives the agent no chance to thaw"

    node.set_online_sm(0)
    again = AgentProcess(node)
    procs.append(again)
    assert "thawed 1 leftover" in again.ready_line
    assert not node.offline_frozen()


def test_sigterm_thaws_before_exit(node: Node, procs: list[AgentProcess]) -> None:
    agent = AgentProcess(node)
    procs.append(agent)
    node.set_online_sm(80)
    eventually(node.offline_frozen, "the offline container is frozen")
    assert agent.stop(signal.SIGTERM) == 0
    assert not node.offline_frozen()


def test_lease_guard_thaws_after_the_agent_dies(node: Node, procs: list[AgentProcess]) -> None:
    guard = AgentProcess(node, "--lease-guard")
    procs.append(guard)
    # a lease long enough that a loaded CI machine still renews it in time, short enough to outlive
    agent = AgentProcess(node, "--lease-ttl", "2.0")
    procs.append(agent)
    node.set_online_sm(80)
    eventually(node.offline_frozen, "the offline container is frozen")
    time.sleep(2.5)  # longer than the lease: only renewal kept it frozen
    assert node.offline_frozen(), "a live agent renews its leases"
    agent.stop(signal.SIGKILL)
    eventually(lambda: not node.offline_frozen(), "the lease guard thaws the orphaned freeze")


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_metrics_endpoint_reports_per_container_use_and_frozen_state(node: Node, procs: list[AgentProcess]) -> None:
    agent = AgentProcess(node)
    procs.append(agent)
    node.set_online_sm(80)
    eventually(node.offline_frozen, "the offline container is frozen")

    def frozen_metric() -> bool:
        rows = _scrape(agent.metrics_url).get("tessera_container_frozen", [])
        return any(labels["pod"] == "train" and value == 1.0 for labels, value in rows)

    eventually(frozen_metric, "the metrics show the offline container frozen")
    metrics = _scrape(agent.metrics_url)
    used = {labels["pod"]: value for labels, value in metrics["tessera_container_gpu_memory_used_bytes"]}
    assert used == {"serve": 1024 * 2**20, "train": 2048 * 2**20}
    limits = {labels["pod"]: value for labels, value in metrics["tessera_container_gpu_memory_limit_bytes"]}
    assert limits == {"serve": 8192 * 2**20, "train": 8192 * 2**20}
    (labels, core), = metrics["tessera_gpu_core_allocated_percent"]
    assert core == 100 and labels["gpu_uuid"] == simulated_uuid(NODE, 0) and labels["model"] == "H100-80GB"
    util = {labels["pod"]: value for labels, value in metrics["tessera_container_gpu_utilization_percent"]}
    assert util["serve"] == 80
    assert metrics["tessera_gpu_healthy"][0][1] == 1.0
    assert {labels["namespace"] for labels, _ in metrics["tessera_container_frozen"]} == {"team-a"}
