"""GPU backends: spec parsing, the simulated node and the NVML adapter's behaviour without a driver."""
from __future__ import annotations

import threading

import pytest

from tessera_node.gpu.backend import GpuBackendError, GpuIndex, MigMode, XidEvent
from tessera_node.gpu.nvml import NvmlBackend
from tessera_node.gpu.simulated import SimulatedBackend, SimulatedNodeBuilder
from tessera_node.gpu.spec import SpecError, parse_spec


@pytest.mark.parametrize(
    ("spec", "models"),
    [
        ("H100-80GB:8", [("H100-80GB", 81559)] * 8),
        ("T4:1,A10:2", [("T4", 15360), ("A10", 23028), ("A10", 23028)]),
        ("h200-141gb:2", [("H200-141GB", 143771)] * 2),
        ("Custom-24GB", [("Custom-24GB", 24576)]),
    ],
)
def test_specs_give_gpus_in_index_order(spec: str, models: list[tuple[str, int]]) -> None:
    assert [(g.model, g.memory_mib) for g in parse_spec(spec)] == models


@pytest.mark.parametrize(("spec", "message"), [("", "empty"), ("T4:x", "bad GPU count"), ("T4:0", "at least 1"), ("Q9000", "unknown GPU model"), ("T4:65", "more than 64")])
def test_bad_specs_say_how_to_write_them(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_simulated_node_keeps_stable_uuids_per_node() -> None:
    a = SimulatedBackend.from_spec("T4:2", node_seed="n1")
    b = SimulatedBackend.from_spec("T4:2", node_seed="n1")
    c = SimulatedBackend.from_spec("T4:2", node_seed="n2")
    for backend in (a, b, c):
        backend.open()
    assert [g.uuid for g in a.list_gpus()] == [g.uuid for g in b.list_gpus()]
    assert {g.uuid for g in a.list_gpus()}.isdisjoint(g.uuid for g in c.list_gpus())


def test_builder_scripts_processes_utilisation_and_mig() -> None:
    backend = SimulatedNodeBuilder().spec("A100-80GB:2").mig(1, MigMode.ENABLED).process(100, 0, 2048, 30).process(101, 0, 1024, 10).build()
    backend.open()
    backend.set_utilisation(0, 40)
    assert backend.list_gpus()[1].mig_mode is MigMode.ENABLED
    assert sorted((p.pid, p.used_memory_mib, p.sm_utilisation_pct) for p in backend.processes()) == [(100, 2048, 30), (101, 1024, 10)]
    assert backend.utilisation()[0].used_memory_mib == 3072 and backend.utilisation()[0].gpu_pct == 40
    assert backend.clocks()[0].sm_mhz == backend.clocks()[0].sm_max_mhz  # busy GPUs boost
    backend.remove_process(100)
    assert [p.pid for p in backend.processes()] == [101]


def test_xid_poll_wakes_up_when_an_event_is_injected() -> None:
    backend = SimulatedBackend.from_spec("T4:2")
    backend.open()
    assert backend.poll_xid_events(0) == []
    threading.Timer(0.05, backend.inject_xid, args=(1, 79)).start()
    assert backend.poll_xid_events(5.0) == [XidEvent(GpuIndex(1), 79)]
    assert backend.poll_xid_events(0) == []


def test_a_closed_backend_refuses_queries_so_handles_are_really_released() -> None:
    backend = SimulatedBackend.from_spec("T4")
    backend.open()
    backend.close()
    with pytest.raises(GpuBackendError, match="closed"):
        backend.list_gpus()


def test_nvml_backend_opens_on_a_gpu_node_or_says_what_to_do() -> None:
    backend = NvmlBackend()
    try:
        backend.open()
    except GpuBackendError as exc:
        assert "--simulate" in str(exc)
        return
    try:
        gpus = backend.list_gpus()
        assert gpus and all(g.uuid.startswith(("GPU-", "MIG-")) and g.memory_mib > 0 for g in gpus)
        assert len(backend.utilisation()) == len(gpus)
    finally:
        backend.close()


@pytest.mark.parametrize("spec, sm_counts", [("H100-80GB:2", [132, 132]), ("T4,A100-40GB", [40, 108]), ("X-24GB", [None])])
def test_simulated_gpus_report_their_models_sm_count(spec: str, sm_counts: list[int | None]) -> None:
    backend = SimulatedBackend.from_spec(spec, node_seed="n")
    backend.open()
    assert [g.sm_count for g in backend.list_gpus()] == sm_counts
    backend.set_mig_mode(0, MigMode.ENABLED)
    assert backend.list_gpus()[0].sm_count is None, "like NVML: no core count on a MIG-enabled GPU"
