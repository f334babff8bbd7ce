"""The plugin against kubelet as each release behaves (PodResources Get gate, rate limit,
registration checks, restarts that empty the device-plugins directory), end to end over the real
unix sockets: the kubelet emulator with the release's profile, the plugin as on a node."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dp_harness import Harness, wait_until

from tessera.model.contract import ANNOTATION_ALLOCATION, GPU_CORE, Allocation
from tessera.kube.fake import FakeKubeApi
from tessera_node.deviceplugin.registration import RegistrationError, register
from tessera_node.testing.kubelet_emulator import KubeletEmulator
from tessera_node.testing.kubelet_versions import (
    CHECKPOINT_FILE,
    GET_DISABLED,
    KUBELET_1_26,
    KUBELET_1_30,
    KUBELET_1_34,
)

RELEASES = [KUBELET_1_30, KUBELET_1_34, KUBELET_1_26, KUBELET_1_30.with_gates(pod_resources_get=True)]
RELEASE_IDS = ["1.30 (pinned, Get gate off)", "1.34+ (Get on)", "1.26 (no Get)", "1.30 with --feature-gates=KubeletPodResourcesGet=true"]
REREGISTER_TARGET_S = 1.0  # the product requirement: back within a second of a kubelet restart


@pytest.fixture(params=RELEASES, ids=RELEASE_IDS)
def node(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(version=request.param)
    harness.start_plugin()
    yield harness
    harness.close()


@pytest.fixture(params=RELEASES, ids=RELEASE_IDS)
def node_without_prefetch(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The plugin without its background List after Allocate: a start then finds only what the
    previous start listed, so the paths through Get are taken."""
    harness = Harness(version=request.param, prefetch=False)
    harness.start_plugin()
    yield harness
    harness.close()


def _check_sees_own(h: Harness, pod: str) -> None:
    allocation = Allocation.from_json(h.kube.get_pod("default", pod)["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    for container, shares in allocation.containers.items():
        view = h.kubelet.view("default", pod, container)
        assert view is not None, f"{pod}/{container} did not start"
        assert view.env["NVIDIA_VISIBLE_DEVICES"] == ",".join(s.uuid for s in shares), f"{pod}/{container} sees another pod's GPU"


def test_prestart_admits_every_entitled_container_in_a_burst_and_pod_by_pod(node: Harness) -> None:
    """The bug this guards: kubelet 1.30 answers Get with UNKNOWN "PodResources API Get method
    disabled", and PreStartContainer used to reject every container after that."""
    burst = [f"burst-{i}" for i in range(6)]
    for pod in burst:
        node.extender.create_and_bind(pod, {"main": (20, 2048)})
        node.allocate(pod)
    for pod in reversed(burst):
        node.start(pod)
    single = [f"single-{i}" for i in range(4)]
    for pod in single:
        node.extender.create_and_bind(pod, {"main": (15, 1024)})
        node.allocate(pod)
        node.start(pod)
    for pod in burst + single:
        _check_sees_own(node, pod)
    assert wait_until(lambda: sorted(r.pod_name for r in node.registry.all()) == sorted(burst + single))


def test_tokens_reused_after_a_pod_left_go_to_the_new_pod_on_every_release(node: Harness) -> None:
    _reuse_tokens(node)


def test_without_the_background_list_a_stale_name_is_settled_by_get_or_list(node_without_prefetch: Harness) -> None:
    """Without the List after Allocate the plugin's last List names the old pod: it must find
    the new one through Get where kubelet serves it, by List where it does not."""
    _reuse_tokens(node_without_prefetch)


def _reuse_tokens(node: Harness) -> None:
    """A deleted pod's tokens handed to a new pod start the new pod, never the old one."""
    old = node.extender.create_and_bind("old", {"main": (30, 4096)})
    node.allocate("old")
    node.start("old")
    old_tokens = node.kubelet.view("default", "old", "main").devices  # type: ignore[union-attr]
    node.kubelet.remove_pod("default", "old")
    node.kube.delete_pod("default", "old")
    node.extender.release(old)
    node.extender.create_and_bind("new", {"main": (30, 8192)})
    node.allocate("new")
    view = node.start("new")
    assert view.devices == old_tokens, "test setup: kubelet should hand the freed tokens to the new pod"
    assert wait_until(lambda: [(r.pod_name, r.shares[0].memory_mib) for r in node.registry.all()] == [("new", 8192)])
    gets = node.kubelet.pod_resources.calls["Get"]
    if node.settings.pod_resources_prefetch:
        return  # the background List after Allocate usually found the new pod already: no Get needed
    if node.version.get_enabled:
        assert gets >= 1, "kubelet serves Get: the stale name is checked with one Get"
    elif node.version.has_get:
        assert gets == 1, "Get tried once (answered 'disabled'), then the plugin stays with List"
    else:
        assert gets == 0  # the method is not there; grpc answers before kubelet counts anything


@pytest.fixture
def pinned() -> Iterator[Harness]:
    harness = Harness(version=KUBELET_1_30, prefetch=False)
    harness.start_plugin()
    yield harness
    harness.close()


def test_the_gate_off_answer_is_remembered_for_the_process(pinned: Harness) -> None:
    node = pinned
    for round_ in range(3):
        old = node.extender.create_and_bind(f"old{round_}", {"main": (40, 1024)})
        node.allocate(f"old{round_}")
        node.start(f"old{round_}")
        node.kubelet.remove_pod("default", f"old{round_}")
        node.kube.delete_pod("default", f"old{round_}")
        node.extender.release(old)
        node.extender.create_and_bind(f"new{round_}", {"main": (40, 1024)})
        node.allocate(f"new{round_}")
        node.start(f"new{round_}")
    assert node.kubelet.pod_resources.calls["Get"] == 1
    assert node.plugin is not None
    assert node.plugin._pod_resources.get_unavailable_reason == f"UNKNOWN: {GET_DISABLED}"


def test_after_a_kubelet_restart_the_plugin_is_back_within_a_second_and_no_allocation_is_lost_or_doubled(node: Harness) -> None:
    pods = [f"p{i}" for i in range(6)]
    for pod in pods:
        node.extender.create_and_bind(pod, {"main": (25, 2048)})
        node.allocate(pod)
    for pod in pods[:3]:
        node.start(pod)
    socket = node.settings.device_plugin_dir / node.settings.endpoint
    (node.settings.device_plugin_dir / "stale-plugin.sock").write_text("")  # kubelet removes others' leftovers too
    before = len(node.kubelet.registrations)
    assignments = node.kubelet.assignments(GPU_CORE)
    node.kubelet.restart(down_s=0.2)
    assert node.kubelet.wait_for(lambda: len(node.kubelet.registrations) > before, REREGISTER_TARGET_S), "not registered again within 1 s"
    assert socket.exists() and not (node.settings.device_plugin_dir / "stale-plugin.sock").exists()
    assert (node.settings.device_plugin_dir / CHECKPOINT_FILE).exists(), "kubelet keeps its checkpoint"
    assert node.kubelet.assignments(GPU_CORE) == assignments, "kubelet read its assignments back from the checkpoint"
    assert node.kubelet.wait_for(lambda: len(node.kubelet.devices(GPU_CORE)) == 400)
    for pod in pods[3:]:  # admitted before the restart, started after it
        node.allocate(pod)  # kubelet reuses the recorded assignment: no new Allocate
        node.start(pod)
    for pod in ("after-0", "after-1"):  # admitted after it
        node.extender.create_and_bind(pod, {"main": (25, 2048)})
        node.allocate(pod)
        node.start(pod)
    everyone = pods + ["after-0", "after-1"]
    for pod in everyone:
        _check_sees_own(node, pod)
    held = [t for devices in node.kubelet.assignments(GPU_CORE).values() for t in devices]
    assert len(held) == len(set(held)) == 25 * len(everyone), "a token held twice, or lost"
    assert wait_until(lambda: sorted(r.pod_name for r in node.registry.all()) == sorted(everyone)), "each container registered exactly once"
    per_gpu: dict[int, int] = {}
    for record in node.registry.all():
        for share in record.shares:
            per_gpu[share.index] = per_gpu.get(share.index, 0) + share.core
    assert all(total <= 100 for total in per_gpu.values()), f"a GPU is over-committed: {per_gpu}"


@pytest.fixture
def kubelet_only() -> Iterator[KubeletEmulator]:
    root = Path(tempfile.mkdtemp(prefix="dpreg", dir="/tmp"))
    kubelet = KubeletEmulator(root / "dp", root / "pr" / "kubelet.sock", FakeKubeApi()).start()
    yield kubelet
    kubelet.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("resource", "message"),
    [
        ("gpu-core", 'the ResourceName "gpu-core" is invalid'),
        ("kubernetes.io/gpu-core", 'the ResourceName "kubernetes.io/gpu-core" is invalid'),
        ("tessera.dev/gpu-core", "failed to dial device plugin"),
    ],
    ids=["no domain", "kubernetes.io domain", "valid name, nobody serving the endpoint"],
)
def test_kubelet_refusals_reach_the_operator_in_kubelets_words(kubelet_only: KubeletEmulator, resource: str, message: str) -> None:
    kubelet_only.dial_timeout_s = 0.3  # kubelet waits 10 s for a plugin's socket
    with pytest.raises(RegistrationError, match=message):
        register(kubelet_only.dir / "kubelet.sock", "nobody.sock", resource, timeout_s=5)
