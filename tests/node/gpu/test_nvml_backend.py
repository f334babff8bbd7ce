"""The NVML adapter over a scripted pynvml: what the agent and the device plugin get from it when
GPUs answer, when one stops answering and when the driver offers no event set."""
from __future__ import annotations

import pytest

from fake_nvml import FakeNvml
from tessera_node.gpu.backend import GpuBackendError, GpuIndex, MigMode, Pid, ProcessSample, XidEvent
from tessera_node.gpu.nvml import NvmlBackend


def _opened(fake: FakeNvml) -> NvmlBackend:
    backend = NvmlBackend(fake)
    backend.open()
    return backend


def test_gpus_are_listed_with_uuid_memory_and_mig_mode() -> None:
    fake = FakeNvml.builder().gpu(mig=None).gpu("NVIDIA A100-SXM4-40GB", 40960, mig=1).build()
    gpus = _opened(fake).list_gpus()
    assert [(g.index, g.uuid, g.memory_mib, g.mig_mode) for g in gpus] == [
        (0, "GPU-fake-0", 81559, MigMode.UNSUPPORTED),
        (1, "GPU-fake-1", 40960, MigMode.ENABLED),
    ]


@pytest.mark.parametrize("cores, capability, sm_count", [
    (16896, (9, 0), 132),  # H100 SXM
    (14592, (9, 0), 114),  # H100 PCIe
    (6912, (8, 0), 108),  # A100: 64 cores per SM
    (2560, (7, 5), 40),  # T4
    (18176, (8, 9), 142),  # L40S
    (None, (9, 0), None),  # NOT_SUPPORTED
    (16896, (99, 0), None),  # an architecture the table does not know
    (1000, (9, 0), None),  # not a whole number of SMs: do not guess
])
def test_sm_count_is_cores_over_cores_per_sm(cores: int | None, capability: tuple[int, int], sm_count: int | None) -> None:
    fake = FakeNvml.builder().gpu(cores=cores, compute_capability=capability).build()
    assert _opened(fake).list_gpus()[0].sm_count == sm_count


def test_a_mig_enabled_gpu_reports_no_sm_count() -> None:
    fake = FakeNvml.builder().gpu(mig=1).build()
    assert _opened(fake).list_gpus()[0].sm_count is None


def test_process_memory_and_newest_sm_sample_are_reported_once_per_pid() -> None:
    fake = (
        FakeNvml.builder().gpu()
        .process(0, pid=100, mib=2048).process(0, pid=200, mib=512, mps=True).process(0, pid=100, mib=2048, mps=True)
        # NVML's buffer is not ordered by time: the newest sample (timestamp 30) must win.
        .sample(0, pid=100, sm_pct=70, timestamp_us=30).sample(0, pid=100, sm_pct=5, timestamp_us=10)
        .build()
    )
    assert _opened(fake).processes() == [
        ProcessSample(Pid(100), GpuIndex(0), 2048, 70),
        ProcessSample(Pid(200), GpuIndex(0), 512, 0),
    ]


def test_only_samples_newer_than_the_last_call_count_as_activity() -> None:
    fake = FakeNvml.builder().gpu().process(0, pid=100, mib=10).sample(0, pid=100, sm_pct=90, timestamp_us=50).build()
    backend = _opened(fake)
    assert backend.processes()[0].sm_utilisation_pct == 90
    assert backend.processes()[0].sm_utilisation_pct == 0  # idle since: NVML has nothing newer


def test_a_gpu_that_stops_answering_is_left_out_while_the_others_are_still_measured() -> None:
    fake = (
        FakeNvml.builder().gpu().gpu().process(0, pid=1, mib=100).process(1, pid=2, mib=200)
        .failing("nvmlDeviceGetComputeRunningProcesses", gpu=0)
        .build()
    )
    backend = _opened(fake)
    assert backend.processes() == [ProcessSample(Pid(2), GpuIndex(1), 200, 0)]
    assert backend.is_responsive(GpuIndex(1))


@pytest.mark.parametrize(
    ("call", "method"),
    [
        ("nvmlDeviceGetComputeRunningProcesses", "processes"),  # every GPU lost
        ("nvmlDeviceGetUtilizationRates", "utilisation"),
        ("nvmlDeviceGetMemoryInfo", "list_gpus"),
        ("nvmlEventSetWait", "poll_xid_events"),
    ],
)
def test_nvml_failures_reach_callers_as_backend_errors_that_say_what_to_check(call: str, method: str) -> None:
    # The agent loop and the device plugin handle GpuBackendError only; a raw NVMLError would end them.
    backend = _opened(FakeNvml.builder().gpu().failing(call).build())
    with pytest.raises(GpuBackendError, match="nvidia-smi"):
        getattr(backend, method)(*([0] if method == "poll_xid_events" else []))


def test_an_unresponsive_gpu_reads_as_unhealthy_not_as_an_error() -> None:
    backend = _opened(FakeNvml.builder().gpu().gpu().failing("nvmlDeviceGetMemoryInfo", gpu=1).build())
    assert [backend.is_responsive(GpuIndex(i)) for i in (0, 1)] == [True, False]


def test_xid_events_are_delivered_with_the_gpu_index() -> None:
    fake = FakeNvml.builder().gpu().gpu().build()
    backend = _opened(fake)
    fake.xids = [(1, 79), (0, 48)]
    assert backend.poll_xid_events(0.01) == [XidEvent(GpuIndex(1), 79, "nvml event"), XidEvent(GpuIndex(0), 48, "nvml event")]
    assert backend.poll_xid_events(0.01) == []


@pytest.mark.parametrize("failing", ["nvmlEventSetCreate", "nvmlDeviceRegisterEvents"])
def test_without_xid_events_the_backend_still_opens_and_polls_nothing(failing: str) -> None:
    # vGPU guests and some boards offer no events: health then rests on is_responsive alone.
    fake = FakeNvml.builder().gpu().failing(failing).build()
    backend = _opened(fake)
    assert backend.poll_xid_events(0.01) == []
    assert fake.event_sets_open == 0


def test_close_releases_nvml_even_when_shutdown_complains() -> None:
    fake = FakeNvml.builder().gpu().failing("nvmlShutdown").build()
    backend = _opened(fake)
    backend.close()
    assert fake.initialised == 0 and fake.event_sets_open == 0
    with pytest.raises(GpuBackendError, match="closed"):
        backend.list_gpus()


def test_open_without_a_driver_says_what_to_do() -> None:
    with pytest.raises(GpuBackendError, match="--simulate"):
        NvmlBackend(FakeNvml.builder().gpu().failing("nvmlInit").build()).open()
