"""`--simulate-fill` reaches the state that the same pods sent through /filter, /prioritize and
/bind reach, and the extender serves it after its informers list it back."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_scheduler_emulator import ExtenderClient

from tessera.alloc import PodRequest
from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import ANNOTATION_ALLOCATION
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.simulate import simulated_api, trace_pod_manifest
from tessera.scheduler.simulate_fill import FILL_PREFIX, cycle, fill, trace_arrivals
from tessera.scheduler.state import StateSettings

# mixed node shapes, so the policy's choice is not "any node"; 23 GPUs in all
NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,8,G2
node-b,32000,131072,4,T4
node-c,96000,393216,8,V100M32
node-d,16000,65536,2,T4
node-e,32000,131072,1,P100
"""
# openb schema: fractional shares, whole GPUs, multi-GPU pods, a CPU-only pod (skipped by the fill)
PODS_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-share-a,4000,8192,1,250,,LS,Running,0,100,0
p-share-b,2000,4096,1,500,,LS,Running,1,100,1
p-share-c,8000,16384,1,300,,LS,Running,2,100,2
p-whole,12000,32768,1,1000,,LS,Running,3,100,3
p-two,16000,65536,2,1000,,LS,Running,4,100,4
p-four,32000,65536,4,1000,,LS,Running,5,100,5
p-v100,6000,12288,1,600,V100M32,LS,Running,6,100,6
p-cpu,4000,8192,0,0,,LS,Running,7,100,7
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES_CSV)
    pods.write_text(PODS_CSV)
    return nodes, pods


def _service(api: FakeKubeApi) -> ExtenderService:
    """What `tessera scheduler serve --simulate` builds (host resources tracked, default policy)."""
    config = ExtenderConfig(server=ServerSettings(host="127.0.0.1", port=0), state=StateSettings(track_host_resources=True))
    return ExtenderService(api, config, pod_sink=None)


@pytest.fixture
def services() -> Iterator[list[ExtenderService]]:
    started: list[ExtenderService] = []
    yield started
    for service in started:
        service.stop()


def _allocations(api: FakeKubeApi) -> dict[str, tuple[str, Any]]:
    """Pod name -> (node, allocation record) of every bound pod, as a node agent would read them."""
    out: dict[str, tuple[str, Any]] = {}
    for pod in api.list_pods():
        node = pod.get("spec", {}).get("nodeName")
        if node:
            record = json.loads(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION])
            out[pod["metadata"]["name"]] = (node, record["containers"])  # not assumedAt: a clock reading
    return out


def _send_through_http(client: ExtenderClient, api: FakeKubeApi, arrivals: list[PodRequest], names: list[str]) -> int:
    """kube-scheduler's cycle per pod: filter, prioritize, bind to the highest score (first in node
    order on a tie). Returns how many pods fitted nowhere."""
    unplaced = 0
    for i, request in enumerate(arrivals, start=1):
        pod = trace_pod_manifest(request, namespace="default")
        pod["metadata"]["name"] = f"{FILL_PREFIX}-{i:06d}"
        api.create_pod(pod)  # what `ensure_pod` does for the fill
        stored = api.get_pod("default", pod["metadata"]["name"])
        status, result = client.post("filter", {"Pod": stored, "NodeNames": names})
        assert status == 200
        feasible = result["NodeNames"] or []
        if not feasible:
            unplaced += 1
            continue
        status, scores = client.post("prioritize", {"Pod": stored, "NodeNames": feasible})
        assert status == 200
        top = max(s["Score"] for s in scores)
        node = next(s["Host"] for s in scores if s["Score"] == top)
        meta = stored["metadata"]
        status, bound = client.post("bind", {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node})
        assert status == 200 and not bound["Error"], bound
    return unplaced


def test_fill_leaves_the_allocations_and_mix_that_filter_prioritize_bind_leave(files: tuple[Path, Path], services: list[ExtenderService]) -> None:
    nodes_csv, pods_csv = files
    trace = trace_arrivals(pods_csv, seed=7)
    assert len(trace) == 7  # the CPU-only pod is not an arrival
    arrivals = [trace[i % len(trace)] for i in range(40)]  # more than fits: some fit nowhere

    filled_api = simulated_api(nodes_csv)
    filled = _service(filled_api)
    services.append(filled)
    result = fill(filled_api, filled.state, filled.binder, iter(arrivals), 1.0)
    assert filled.start(wait_ready_s=10)

    http_api = simulated_api(nodes_csv)
    served = _service(http_api)
    services.append(served)
    assert served.start(wait_ready_s=10)
    client = ExtenderClient("127.0.0.1", served.port)
    try:
        unplaced = _send_through_http(client, http_api, arrivals, [n["metadata"]["name"] for n in http_api.list_nodes()])
    finally:
        client.close()

    assert result.arrivals == 40 and result.unplaced == unplaced > 0
    assert _allocations(filled_api) == _allocations(http_api)
    assert len(_allocations(filled_api)) == result.bound
    with filled.state.lock, served.state.lock:
        assert filled.state.cluster.mix.snapshot().shapes == served.state.cluster.mix.snapshot().shapes
        assert filled.state.cluster.usage() == served.state.cluster.usage()


def test_fill_stops_at_the_target_share_and_the_informers_restore_every_record(files: tuple[Path, Path], services: list[ExtenderService]) -> None:
    nodes_csv, pods_csv = files
    api = simulated_api(nodes_csv)
    service = _service(api)
    services.append(service)
    result = fill(api, service.state, service.binder, cycle(trace_arrivals(pods_csv, seed=1)), 0.5)
    assert service.start(wait_ready_s=10)

    assert result.capacity_gpus == 23 and result.unplaced == 0
    assert 0.5 <= result.allocated_share < 0.5 + 4 / 23  # the last pod (at most 4 GPUs) crossed the target
    nodes, pods, gpus, allocated = service.state.summary()
    assert (nodes, pods, gpus) == (5, result.bound, 23)
    assert allocated == pytest.approx(result.allocated_gpus)
    assert len(api.list_configmaps()) == result.bound  # one allocation ConfigMap per bound pod


def test_a_long_fill_reports_its_progress_as_it_goes(files: tuple[Path, Path], services: list[ExtenderService]) -> None:
    nodes_csv, pods_csv = files
    api = simulated_api(nodes_csv)
    service = _service(api)
    services.append(service)
    heard: list[str] = []
    result = fill(api, service.state, service.binder, cycle(trace_arrivals(pods_csv, seed=1)), 0.5,
                  on_progress=lambda p: heard.append(p.line()), progress_every_s=0.0)
    assert len(heard) == result.bound  # every bind, at this interval
    assert heard[0].startswith("simulated fill: 1 pods bound, ") and heard[0].endswith(" s")
    assert f"simulated fill: {result.bound} pods bound, {100 * result.allocated_share:.1f} % of the GPUs of 50 %" in heard[-1]


def test_fill_gives_up_when_nothing_fits(tmp_path: Path, services: list[ExtenderService]) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nsmall,32000,131072,1,T4\n")
    two_gpus = trace_arrivals(_pods_file(tmp_path, "big,16000,65536,2,1000,,LS,Running,0,100,0"), seed=1)
    api = simulated_api(nodes)
    service = _service(api)
    services.append(service)

    result = fill(api, service.state, service.binder, cycle(two_gpus), 0.9)

    assert (result.bound, result.allocated_gpus) == (0, 0)
    assert result.unplaced == result.arrivals > 0  # it stopped by itself: the cycle never ends


def _pods_file(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(PODS_CSV.splitlines()[0] + "\n" + "\n".join(rows) + "\n")
    return path
