"""A pod's request as kube-scheduler and ResourceQuota count it (`PodRequests`), for every resource alike.

Cases follow Kubernetes' own: containers summed, the largest init container if bigger, sidecars
(init containers with restartPolicy: Always) summed with the app containers and running under every
later init container (KEP-753), overhead on top, limits standing in for missing requests (API
defaulting). A hypothesis check compares the formula with a plain timeline of what runs when.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import InvalidRequest, pod_request_from_k8s
from tessera.alloc.pod_requests import effective_requests, pod_request_breakdown, pod_requests
from tessera.model.contract import GPU_CORE, GPU_MEMORY, NVIDIA_GPU


def c(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, sidecar: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "x", "resources": {}}
    if requests is not None:
        out["resources"]["requests"] = requests
    if limits is not None:
        out["resources"]["limits"] = limits
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, overhead: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


# (case, pod, resource, expected request)
CASES = [
    ("containers are summed", pod([c("a", {GPU_CORE: "60"}), c("b", {GPU_CORE: "30"})]), GPU_CORE, "90"),
    ("gpu-memory alike", pod([c("a", {GPU_MEMORY: "6000"}), c("b", {GPU_MEMORY: "4000"})]), GPU_MEMORY, "10000"),
    ("a bigger init container wins", pod([c("a", {NVIDIA_GPU: "1"})], init=[c("i", {NVIDIA_GPU: "2"})]), NVIDIA_GPU, "2"),
    ("a smaller init container does not add", pod([c("a", {"cpu": "2"})], init=[c("i", {"cpu": "1"})]), "cpu", "2"),
    ("init containers are not summed", pod([c("a", {"cpu": "1"})], init=[c("i", {"cpu": "3"}), c("j", {"cpu": "3"})]), "cpu", "3"),
    ("a sidecar is summed with the app containers", pod([c("a", {GPU_CORE: "60"})], init=[c("s", {GPU_CORE: "30"}, sidecar=True)]), GPU_CORE, "90"),
    # the init container after a sidecar runs beside it: 50 + 10 = 60 beats containers + sidecar = 40
    ("an init container after a sidecar runs beside it", pod([c("a", {"cpu": "3"})], init=[c("s", {"cpu": "1"}, sidecar=True), c("i", {"cpu": "5"})]), "cpu", "6"),
    ("an init container before a sidecar runs alone", pod([c("a", {"cpu": "3"})], init=[c("i", {"cpu": "5"}), c("s", {"cpu": "1"}, sidecar=True)]), "cpu", "5"),
    ("overhead is added", pod([c("a", {"memory": "1Gi"})], overhead={"memory": "120Mi"}), "memory", str(1024 * 2**20 + 120 * 2**20)),
    ("overhead counts for extended resources too", pod([c("a", {GPU_CORE: "40"})], overhead={GPU_CORE: "10"}), GPU_CORE, "50"),
    ("a limit stands in for a missing request", pod([c("a", limits={GPU_CORE: "40", "cpu": "2"}, requests={"cpu": "500m"})]), GPU_CORE, "40"),
    ("a request beats its limit", pod([c("a", limits={"cpu": "2"}, requests={"cpu": "500m"})]), "cpu", "0.5"),
    ("milli quantities add exactly", pod([c("a", {"cpu": "250m"}), c("b", {"cpu": "1"})]), "cpu", "1.25"),
    ("absent resources are zero", pod([c("a", {"cpu": "1"})]), GPU_CORE, "0"),
]


@pytest.mark.parametrize(("pod_", "resource", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_pod_requests_follow_kube_scheduler(pod_: dict[str, Any], resource: str, expected: str) -> None:
    assert pod_requests(pod_, (resource,))[resource] == Decimal(expected)


def test_the_breakdown_says_where_a_gpu_request_comes_from() -> None:
    breakdown = pod_request_breakdown(pod([c("a", {GPU_CORE: "60"}), c("b", {GPU_CORE: "30"})], init=[c("s", {GPU_CORE: "5"}, sidecar=True)], overhead={GPU_CORE: "1"}))
    assert breakdown.total[GPU_CORE] == 96
    assert breakdown.explain(GPU_CORE) == "containers 90, sidecars 5, init peak 5, overhead 1"


def test_defaulting_copies_only_missing_requests() -> None:
    assert effective_requests(c("a", requests={"cpu": "1"}, limits={"cpu": "2", "memory": "1Gi"})) == {"cpu": 1, "memory": 2**30}


def test_a_bad_quantity_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="cannot read resource quantity 'lots'"):
        pod_requests(pod([c("a", {"cpu": "lots"})]))


def test_the_extender_counts_cpu_and_memory_like_kube_scheduler() -> None:
    """Init phases, sidecars and overhead count for the extender's host-resource fit too."""
    request = pod_request_from_k8s(
        pod([c("main", {"cpu": "1", "memory": "1Gi", GPU_CORE: "50"})], init=[c("prep", {"cpu": "4", "memory": "512Mi"})], overhead={"memory": "128Mi"})
    )
    assert (request.cpu_milli, request.memory_mib) == (4000, 1024 + 128)


# --- the formula against a timeline of what runs when ------------------------------------------------
_amounts = st.integers(min_value=0, max_value=1000)
_init = st.tuples(st.booleans(), _amounts)  # (sidecar?, request)


def _timeline_peak(apps: list[int], inits: list[tuple[bool, int]]) -> int:
    """Init containers start one by one; a sidecar keeps running, a regular one ends before the next
    starts; then the app containers start beside every sidecar. The pod needs the largest phase."""
    running_sidecars = 0
    peak = 0
    for sidecar, amount in inits:
        peak = max(peak, running_sidecars + amount)
        if sidecar:
            running_sidecars += amount
    return max(peak, running_sidecars + sum(apps))


@settings(max_examples=300, deadline=None)
@given(apps=st.lists(_amounts, min_size=1, max_size=4), inits=st.lists(_init, max_size=5), overhead=_amounts)
def test_pod_requests_equal_the_peak_of_the_timeline_plus_overhead(apps: list[int], inits: list[tuple[bool, int]], overhead: int) -> None:
    the_pod = pod(
        [c(f"a{i}", {GPU_CORE: str(n)}) for i, n in enumerate(apps)],
        init=[c(f"i{i}", {GPU_CORE: str(n)}, sidecar=s) for i, (s, n) in enumerate(inits)],
        overhead={GPU_CORE: str(overhead)},
    )
    assert pod_requests(the_pod, (GPU_CORE,))[GPU_CORE] == _timeline_peak(apps, inits) + overhead
