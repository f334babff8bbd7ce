"""kube-scheduler's DRA allocator semantics in the simulator (`tessera.sim.dra`): capacity rounding,
first fit in slice order, several allocations of a shareable device, whole devices."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import ContainerRequest, FitFailure, GpuState, NodeState, PodRequest
from tessera.alloc.assign import assign, gpu_binpack
from tessera.alloc.model import PodUid
from tessera.alloc.policy import gpu_rank_for
from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU, GpuPlacement, dra_device_order
from tessera.sim.dra import (
    Capacity,
    Device,
    DeviceRequest,
    RequestPolicy,
    allocate,
    claim_request,
    consumed_quantity,
    node_devices,
    violates_policy,
)

CORES = RequestPolicy(default=100, min=1, step=1, max=100)


def _node(used: list[tuple[int, int]], memory_mib: int = 16384, labels: dict[str, str] | None = None, models: list[str] | None = None) -> NodeState:
    """`used`: (milli, MiB) per GPU in index order."""
    gpus = [
        GpuState(i, f"u{i}", (models or [])[i] if models else "T4", memory_mib, used_milli=m, used_memory_mib=mem)
        for i, (m, mem) in enumerate(used)
    ]
    return NodeState("n", gpus, 64000, 262144, labels or {})


def _share(cores: int, memory: int | None = None, models: frozenset[str] | None = None) -> DeviceRequest:
    requests = {"cores": cores} | ({"memory": memory} if memory is not None else {})
    return DeviceRequest(1, requests, models)


def test_capacity_requests_round_per_request_policy() -> None:
    assert consumed_quantity(None, Capacity(100, CORES)) == 100  # not requested: the default
    assert consumed_quantity(None, Capacity(100)) == 100  # no policy: all of it
    assert consumed_quantity(0, Capacity(100, CORES)) == 1  # below min: min
    assert consumed_quantity(37, Capacity(100, CORES)) == 37
    assert consumed_quantity(5, Capacity(100, RequestPolicy(default=100, min=4, step=4))) == 8  # min + k x step
    assert consumed_quantity(7, Capacity(100)) == 7
    assert violates_policy(101, CORES) and not violates_policy(100, CORES)
    assert violates_policy(6, RequestPolicy(default=100, min=4, step=4)) and not violates_policy(100, RequestPolicy(100, 4, 4, 50))


def test_first_fit_takes_the_first_device_in_slice_order_that_fits() -> None:
    devices = node_devices(_node([(600, 0), (0, 0), (900, 0)], memory_mib=1 << 62))
    assert [r.index for r in allocate(devices, _share(40)) or []] == [0]  # 60 used + 40 fits exactly
    assert [r.index for r in allocate(devices, _share(50)) or []] == [1]  # not the fuller GPU 2, no best fit
    assert allocate(devices, _share(50))[0].consumed == {"cores": 50}  # type: ignore[index]


def test_a_shareable_device_is_allocated_again_within_one_request() -> None:
    devices = node_devices(_node([(0, 0), (0, 0)], memory_mib=1 << 62))
    assert [r.index for r in allocate(devices, DeviceRequest(2, {"cores": 40})) or []] == [0, 0]
    assert [r.index for r in allocate(devices, DeviceRequest(3, {"cores": 40})) or []] == [0, 0, 1]


def test_whole_device_claims_need_a_device_nobody_holds() -> None:
    devices = node_devices(_node([(10, 0), (0, 0), (0, 0)], memory_mib=1 << 62))
    whole = claim_request(ContainerRequest("c", 2, 1000))
    assert [r.index for r in allocate(devices, whole) or []] == [1, 2]
    assert allocate(devices, claim_request(ContainerRequest("c", 3, 1000))) is None


def test_a_claim_without_memory_takes_all_of_a_known_gpu_memory() -> None:
    """requestPolicy.default of `memory` is the whole GPU (slices.py): such a claim shares with nobody."""
    devices = node_devices(_node([(100, 0), (0, 0)], memory_mib=16384))
    no_memory = claim_request(ContainerRequest("c", 1, 200))
    results = allocate(devices, no_memory)
    assert results is not None and results[0].index == 0 and results[0].consumed == {"cores": 20, "memory": 16384}
    held = node_devices(_node([(100, 1), (0, 0)], memory_mib=16384))
    assert [r.index for r in allocate(held, no_memory) or []] == [1]  # GPU 0 has 1 MiB taken: not all memory left
    assert [r.index for r in allocate(held, claim_request(ContainerRequest("c", 1, 200, 4096))) or []] == [0]


def test_one_claim_per_gpu_pools_and_the_gate_off_give_whole_devices() -> None:
    one = node_devices(_node([(200, 0), (0, 0)], memory_mib=1 << 62, labels={LABEL_MAX_SHARES_PER_GPU: "1"}))
    assert not any(d.multiple for d in one)
    assert [r.index for r in allocate(one, _share(10)) or []] == [1]  # GPU 0 is in use, whatever is left
    gate_off = node_devices(_node([(200, 0), (0, 0)], memory_mib=1 << 62), consumable_capacity=False)
    assert [(r.index, dict(r.consumed)) for r in allocate(gate_off, _share(10)) or []] == [(1, {})]


def test_the_model_selector_skips_other_models() -> None:
    devices = node_devices(_node([(0, 0), (0, 0)], memory_mib=1 << 62, models=["T4", "A10"]))
    assert [r.index for r in allocate(devices, _share(10, models=frozenset({"A10"}))) or []] == [1]


# --- properties -------------------------------------------------------------------------------
gpu_state = st.tuples(st.integers(0, 100), st.integers(0, 16), st.booleans())  # cores used, GiB used, healthy


@st.composite
def node_and_request(draw: st.DrawFn) -> tuple[NodeState, bool, DeviceRequest]:
    states = draw(st.lists(gpu_state, min_size=1, max_size=8))
    gpus = [GpuState(i, f"u{i}", "T4", 16384, healthy=h, used_milli=c * 10, used_memory_mib=g * 1024) for i, (c, g, h) in enumerate(states)]
    one_per_gpu = draw(st.booleans())
    node = NodeState("n", gpus, labels={LABEL_MAX_SHARES_PER_GPU: "1"} if one_per_gpu else {})
    if draw(st.booleans()):
        request = claim_request(ContainerRequest("c", draw(st.integers(1, 4)), 1000))
    else:
        memory = draw(st.none() | st.integers(0, 20000))
        request = claim_request(ContainerRequest("c", 1, draw(st.integers(1, 100)) * 10, memory))
    return node, not one_per_gpu, request


def _fits_alone(device: Device, request: DeviceRequest) -> bool:
    """An independent oracle: free capacity covers what the request consumes."""
    if not device.multiple:
        return not device.in_use
    for name, cap in device.capacity.items():
        asked = request.requests.get(name)
        need = cap.policy.default if asked is None and cap.policy else max(asked or 0, 1)
        if device.consumed.get(name, 0) + need > cap.value:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(node_and_request())
def test_first_fit_never_skips_a_fitting_device_and_never_overfills(case: tuple[NodeState, bool, DeviceRequest]) -> None:
    node, shareable, request = case
    devices = node_devices(node)
    results = allocate(devices, request)
    fitting = [d for d in devices if _fits_alone(d, request)]
    if results is None:
        assert len({d.index for d in fitting}) < request.count or not shareable
        assert request.count > 1 or not fitting
        return
    assert len(results) == request.count
    first = next(d for d in devices if d.index == results[0].index)
    assert first is fitting[0]  # the first device that fits, in slice order
    by_index = {d.index: d for d in devices}
    for index in {r.index for r in results}:
        device = by_index[index]
        taken = [r for r in results if r.index == index]
        for name, cap in device.capacity.items():
            if device.multiple:
                assert device.consumed.get(name, 0) + sum(r.consumed[name] for r in taken) <= cap.value
        if not device.multiple:
            assert len(taken) == 1 and not device.in_use  # a whole device, held by nobody else


@settings(max_examples=200, deadline=None)
@given(node_and_request())
def test_whole_device_claims_never_share(case: tuple[NodeState, bool, DeviceRequest]) -> None:
    node, _, request = case
    if request.requests.get("cores") != 100:
        return
    devices = node_devices(node)
    results = allocate(devices, request)
    for r in results or []:
        device = next(d for d in devices if d.index == r.index)
        assert not device.in_use and all(v == 0 for v in device.consumed.values())
    assert results is None or len({r.index for r in results}) == request.count


@st.composite
def node_and_share(draw: st.DrawFn) -> tuple[NodeState, PodRequest]:
    """A node whose GPUs hold whole cores and some memory (a GPU holding no cores holds no
    memory: claims take both), and a share that names its memory, as typed workloads must."""
    gpus = []
    for i in range(draw(st.integers(1, 8))):
        cores = draw(st.sampled_from([0, 0, 10, 25, 30, 50, 60, 70, 75, 90, 100]) | st.integers(0, 100))
        memory = draw(st.integers(1, 16384)) if cores else 0
        gpus.append(GpuState(i, f"u{i}", "T4", 16384, healthy=draw(st.booleans() | st.just(True)), used_milli=cores * 10, used_memory_mib=memory))
    placement = draw(st.sampled_from(["binpack", "spread"]))
    node = NodeState("n", gpus, 64000, 262144, {LABEL_GPU_PLACEMENT: placement})
    share = ContainerRequest("c", 1, draw(st.integers(1, 100)) * 10, draw(st.integers(1, 16384)))
    return node, PodRequest(PodUid("p"), (share,))


@settings(max_examples=400, deadline=None)
@given(node_and_share())
def test_first_fit_over_the_plugins_device_order_is_the_pools_gpu_placement(case: tuple[NodeState, PodRequest]) -> None:
    """The plugin lists the fullest GPUs first for binpack and the emptiest first for spread
    (`dra_device_order`): kube-scheduler's first fit then takes the GPU the device-plugin route's
    `binpack` or `spread` takes on the same node."""
    node, pod = case
    placed = assign(node, pod, gpu_rank_for(node, gpu_binpack))
    results = allocate(node_devices(node), claim_request(pod.containers[0]))
    if isinstance(placed, FitFailure):
        assert results is None
        return
    assert results is not None
    assert [r.index for r in results] == list(placed[0][0])


@pytest.mark.parametrize(
    ("used", "placement", "order"),
    [
        ({0: 0, 1: 30, 2: 70, 3: 30}, "binpack", [2, 1, 3, 0]),
        ({0: 0, 1: 30, 2: 70, 3: 30}, "spread", [0, 1, 3, 2]),
        ({0: 0, 1: 0}, "binpack", [0, 1]),
        ({0: 0, 1: 0}, "spread", [0, 1]),
    ],
)
def test_device_order_by_placement(used: dict[int, int], placement: GpuPlacement, order: list[int]) -> None:
    assert dra_device_order(used, placement) == order
