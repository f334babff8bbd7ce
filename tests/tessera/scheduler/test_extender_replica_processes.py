"""Two `tessera scheduler serve --leader-elect=true` processes over the loopback API server: SIGTERM
hands the Lease over at once, SIGKILL after the lease runs out; either way kube-scheduler's next
pods are bound through the survivor, once each."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from audit import audit
from extender_harness import GIB, node_manifest, pod_manifest, rendered_scheduler_config, wait_until
from json_api_stand_in import Loopback, loopback_api
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry, KubeSchedulerEmulator

from tessera.model.contract import EXTENDER_LEASE, TESSERA_NAMESPACE

ROOT: Final = Path(__file__).resolve().parents[3]
TIMING: Final = ("--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=200ms")


class Replica:
    def __init__(self, kubeconfig: Path, name: str) -> None:
        command = [
            sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--kubeconfig", str(kubeconfig), "--port", "0",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--placement", "binpack", "--leader-elect=true",
            *TIMING, "--log-level", "WARNING",
        ]
        env = {**os.environ, "POD_NAME": name, "POD_NAMESPACE": TESSERA_NAMESPACE}
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        banner = self.process.stdout.readline()
        assert " as " in banner, banner
        self.port = int(banner.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
        self.identity = banner.rsplit(" as ", 1)[1].rstrip(")\n")
        threading.Thread(target=self.process.communicate, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Loopback]:
    with loopback_api(tmp_path) as lb:
        lb.fake.create_node(node_manifest("n1", gpus=2, memory_mib=16 * GIB))
        yield lb


def _holder(loopback: Loopback) -> str:
    try:
        return str(loopback.fake.get_lease(TESSERA_NAMESPACE, EXTENDER_LEASE)["spec"].get("holderIdentity") or "")
    except Exception:
        return ""


def _scheduler(replica: Replica, loopback: Loopback) -> KubeSchedulerEmulator:
    entry = ExtenderEntry.from_config(rendered_scheduler_config())
    return KubeSchedulerEmulator(ExtenderClient("127.0.0.1", replica.port, timeout_s=entry.http_timeout_s), loopback.fake, entry)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_survivor_leads_and_binds(loopback: Loopback, how: str) -> None:
    replicas = [Replica(loopback.kubeconfig, "a"), Replica(loopback.kubeconfig, "b")]
    try:
        assert wait_until(lambda: _holder(loopback) in {r.identity for r in replicas}, 20)
        leader = next(r for r in replicas if r.identity == _holder(loopback))
        survivor = next(r for r in replicas if r is not leader)
        loopback.fake.create_pod(pod_manifest("before", ("main", 60, None)))
        assert _scheduler(survivor, loopback).schedule("default", "before").node == "n1"  # passed on to the leader
        stopped_at = time.monotonic()
        leader.process.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
        assert wait_until(lambda: _holder(loopback) == survivor.identity, 20)
        if how == "SIGTERM":
            assert leader.process.wait(30) == 0  # a clean exit, the Lease released on the way
            assert loopback.fake.get_lease(TESSERA_NAMESPACE, EXTENDER_LEASE)["spec"]["leaseTransitions"] == 1
        else:
            assert time.monotonic() - stopped_at > 1.0  # it waited for the lease to run out
        loopback.fake.create_pod(pod_manifest("after", ("main", 60, None)))
        scheduler = _scheduler(survivor, loopback)
        node = None
        for _ in range(5):  # kube-scheduler retries while the survivor finishes taking over
            node = scheduler.schedule("default", "after").node
            if node:
                break
            time.sleep(0.5)
        assert node == "n1"
        audit(loopback.fake, gpu_memory_mib=16 * GIB)
        assert not loopback.server.internal_errors()
    finally:
        for r in replicas:
            r.stop()
