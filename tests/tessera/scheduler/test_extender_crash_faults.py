"""`tessera scheduler serve` processes SIGKILLed between any two API calls of a bind.

Each extender is a real process talking to the loopback API server through the real client. The
server holds one call of a bind (pause) either before it reaches the store or after it took effect
there, the test kills the process with SIGKILL, lets the held call go on (a request already on the
wire still lands), starts a new process and lets kube-scheduler go on retrying. Whatever the point,
no GPU's records add up to more than the GPU and the new process counts exactly what they hold."""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from audit import audit
from extender_harness import GIB, node_manifest, pod_manifest, rendered_scheduler_config, wait_until
from json_api_stand_in import Loopback, loopback_api
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry, KubeSchedulerEmulator
from test_extender_write_faults import STEPS, recorded_usage

from tessera.kube.loopback_faults import Nth, Pause, PausePoint
from tessera.model.metrics.extender import ALLOCATED_GPU, PODS

GPU_MEMORY = 16 * GIB
ROOT: Final = Path(__file__).resolve().parents[3]
KILL_POINTS: Final = [(step, at) for step in STEPS for at in ("received", "applied")]


class ExtenderProcess:
    """`tessera scheduler serve --kubeconfig` as a child process on a free loopback port."""

    def __init__(self, kubeconfig: Path) -> None:
        command = [
            sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--kubeconfig", str(kubeconfig), "--port", "0",
            "--bind-address", "127.0.0.1", "--placement", "binpack", "--leader-elect=false", "--log-level", "WARNING",
        ]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        banner = self.process.stdout.readline()
        assert banner.startswith("tessera extender on http://127.0.0.1:"), banner + self.process.stderr.read() if self.process.stderr else banner
        self.port = int(banner.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
        self._drain = threading.Thread(target=self.process.communicate, daemon=True)
        self._drain.start()

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def metric(self, name: str) -> float:
        client = ExtenderClient("127.0.0.1", self.port, timeout_s=10)
        try:
            text = client.get("/metrics")[1]
        finally:
            client.close()
        return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + " ")))


def _scheduler(process: ExtenderProcess, loopback: Loopback) -> KubeSchedulerEmulator:
    entry = ExtenderEntry.from_config(rendered_scheduler_config())
    return KubeSchedulerEmulator(ExtenderClient("127.0.0.1", process.port, timeout_s=entry.http_timeout_s), loopback.fake, entry)


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Loopback]:
    with loopback_api(tmp_path) as lb:
        yield lb


@pytest.mark.parametrize(("step", "at"), KILL_POINTS, ids=[f"{step}, {at}" for step, at in KILL_POINTS])
def test_sigkill_between_any_two_steps_of_a_bind(loopback: Loopback, step: str, at: PausePoint) -> None:
    api = loopback.fake
    api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    first_process = ExtenderProcess(loopback.kubeconfig)
    try:
        api.create_pod(pod_manifest("first", ("main", 60, 6 * GIB)))
        pause = Pause(at)
        loopback.server.faults.add(pause, STEPS[step], Nth(1))
        outcome: list[str] = []

        def schedule() -> None:
            try:
                outcome.append(_scheduler(first_process, loopback).schedule("default", "first").node or "no node")
            except (OSError, http.client.HTTPException) as exc:  # the extender died under the call
                outcome.append(type(exc).__name__)

        scheduling = threading.Thread(target=schedule)
        scheduling.start()
        assert pause.wait_blocked(30), f"the bind never reached {step}"
    finally:
        first_process.kill()
    loopback.server.faults.clear()  # the held call goes on, to a client that is gone
    scheduling.join(30)
    assert outcome and outcome[0] != "n1", outcome  # kube-scheduler saw the call fail, and retries
    second_process = ExtenderProcess(loopback.kubeconfig)
    try:
        scheduler = _scheduler(second_process, loopback)
        api.create_pod(pod_manifest("second", ("main", 60, 6 * GIB)))
        scheduler.schedule("default", "second")
        for _ in range(3):
            if any(api.get_pod("default", n)["spec"].get("nodeName") for n in ("first", "second")):
                break
            scheduler.schedule("default", "first")
        bound = [n for n in ("first", "second") if api.get_pod("default", n)["spec"].get("nodeName") == "n1"]
        assert len(bound) == 1  # 60 % + 60 % > 100 %: one runs, whichever
        audit(api, gpu_memory_mib=GPU_MEMORY)
        records = recorded_usage(api)
        held = sum(milli for milli, _ in records.values()) / 1000
        assert wait_until(lambda: second_process.metric(ALLOCATED_GPU.name) == held, 10), (second_process.metric(ALLOCATED_GPU.name), records)
        assert second_process.metric(PODS.name) == sum(1 for p in api.list_pods() if (p["metadata"].get("annotations") or {}).get("tessera.dev/allocation"))
        assert not loopback.server.internal_errors()
    finally:
        second_process.kill()
