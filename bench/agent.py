"""Node agent benchmarks (simulated GPUs, fake cgroup tree on disk, default settings).

1. Online activity -> offline frozen latency: the agent runs its real loop at the default
   100 ms polling; at a random moment an online process on the GPU becomes busy and the bench
   measures until the offline container's `cgroup.freeze` reads 1.
2. Agent CPU: 8 GPUs x 32 containers (4 online + 28 offline per GPU, one process each, online
   work in bursts), default polling, one Prometheus scrape every 15 s; CPU time of the agent
   process over wall time, as % of one core.

    python bench/agent.py [--trials 30] [--cpu-seconds 20] [--json]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid as uuidlib
from dataclasses import replace
from pathlib import Path

from tessera.model.contract import GpuShare
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.memory import RecordingKiller
from tessera_node.agent.metrics import serve_metrics
from tessera_node.registry import AppClass, ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy
from tessera_node.agent.settings import AgentSettings
from tessera_node.gpu.simulated import SimulatedBackend

NODE = "bench-node"
# cgroupfs is an in-memory filesystem: the fake tree lives on tmpfs when there is one, so file
# writes cost what they cost on /sys/fs/cgroup rather than what a disk filesystem charges.
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None


def build(root: Path, gpus: int, per_gpu: int, online_per_gpu: int, policy: PoolPolicy) -> tuple[Agent, SimulatedBackend, dict[str, list[tuple[int, Path, AppClass]]]]:
    tree = CgroupTreeBuilder(root)
    sim = SimulatedBackend.from_spec(f"H100-80GB:{gpus}", node_seed=NODE)
    sim.open()
    registry = ContainerRegistry(root / "state")
    layout: dict[str, list[tuple[int, Path, AppClass]]] = {}
    pid = 10_000
    records = []
    for gpu in sim.list_gpus():
        for i in range(per_gpu):
            pid += 1
            app = AppClass.ONLINE if i < online_per_gpu else AppClass.OFFLINE
            uid, cid = str(uuidlib.uuid4()), uuidlib.uuid4().hex * 2
            cgroup = tree.container(uid, cid, [pid])
            share = GpuShare(gpu.index, gpu.uuid, max(1, 100 // per_gpu), 1024)
            records.append(RegisteredContainer(PodUid(uid), "bench", f"p{pid}", ContainerName("main"), (share,), app, policy, cid))
            sim.add_process(pid, gpu.index, 512, 0 if app is AppClass.ONLINE else 60)
            layout.setdefault(gpu.uuid, []).append((pid, cgroup, app))
    registry.replace_all(records)
    settings = AgentSettings(node_name=NODE, state_dir=root / "state", cgroup_root=tree.cgroup_root, proc_root=tree.proc_root)
    deps = AgentDeps(backend=sim, registry=registry, locator=tree.locator(), killer=RecordingKiller())
    agent = Agent(settings, deps)
    agent.node_policy = policy
    return agent, sim, layout


def freeze_latency(trials: int) -> dict[str, float]:
    policy = PoolPolicy(online_offline=True, offline_resume_idle_s=0.3)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        agent, sim, layout = build(Path(tmp), gpus=1, per_gpu=2, online_per_gpu=1, policy=policy)
        (online_pid, _, _), (_, offline_cgroup, _) = next(iter(layout.values()))
        agent.start()
        stop = threading.Event()
        loop = threading.Thread(target=agent.run, args=(stop,))
        loop.start()
        freeze_file = offline_cgroup / "cgroup.freeze"
        samples: list[float] = []
        rng = random.Random(7)
        try:
            for _ in range(trials):
                time.sleep(rng.uniform(0.0, 0.1))  # random phase against the polling grid
                started = time.perf_counter()
                sim.add_process(online_pid, 0, 512, 80)
                while freeze_file.read_text().strip() != "1":
                    time.sleep(0.0005)
                samples.append((time.perf_counter() - started) * 1000)
                sim.add_process(online_pid, 0, 512, 0)
                while freeze_file.read_text().strip() != "0":
                    time.sleep(0.005)
        finally:
            stop.set()
            loop.join()
            agent.shutdown()
    samples.sort()
    return {
        "trials": trials,
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 1),
        "max_ms": round(samples[-1], 1),
        "poll_interval_ms": AgentSettings(node_name="x").poll_interval_s * 1000,
    }


def agent_cpu(seconds: float) -> dict[str, float]:
    policy = PoolPolicy(online_offline=True, offline_resume_idle_s=2.0)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        agent, sim, layout = build(Path(tmp), gpus=8, per_gpu=32, online_per_gpu=4, policy=policy)
        agent.start()
        server, _thread, port = serve_metrics(agent.view.get, "127.0.0.1", 0)
        stop = threading.Event()
        rng = random.Random(11)
        onlines = [(pid, gpu_index) for gpu_index, rows in enumerate(layout.values()) for pid, _, app in rows if app is AppClass.ONLINE]

        def traffic() -> None:
            # online bursts: every second a random quarter of the online processes flip state
            while not stop.wait(1.0):
                for pid, gpu in rng.sample(onlines, len(onlines) // 4):
                    sim.add_process(pid, gpu, 512, rng.choice([0, 0, 70]))

        def scrape() -> None:
            while not stop.wait(15.0):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()

        helpers = [threading.Thread(target=traffic), threading.Thread(target=scrape)]
        loop = threading.Thread(target=agent.run, args=(stop,))
        for t in helpers:
            t.start()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        loop.start()
        time.sleep(seconds)
        stop.set()
        loop.join()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        for t in helpers:
            t.join()
        ticks = agent.counters.ticks
        frozen = len(agent.pauses.paused)
        server.shutdown()
        agent.shutdown()
    return {
        "containers": sum(len(v) for v in layout.values()),
        "gpus": len(layout),
        "seconds": round(wall, 1),
        "ticks": ticks,
        "cpu_percent_of_one_core": round(100 * cpu / wall, 2),
        "mean_tick_ms": round(1000 * agent.counters.tick_seconds / max(1, ticks), 3),
        "frozen_at_end": frozen,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--cpu-seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"freeze_latency": freeze_latency(args.trials), "agent_cpu": agent_cpu(args.cpu_seconds)}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    lat, cpu = result["freeze_latency"], result["agent_cpu"]
    print(f"online activity -> offline frozen ({lat['trials']} trials, poll {lat['poll_interval_ms']:g} ms): "
          f"p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, max {lat['max_ms']} ms (target <= 200 ms)")
    print(f"agent CPU with {cpu['gpus']} GPUs x {cpu['containers'] // cpu['gpus']} containers over {cpu['seconds']} s: "
          f"{cpu['cpu_percent_of_one_core']} % of one core (target <= 2 %), mean tick {cpu['mean_tick_ms']} ms, {cpu['ticks']} ticks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
