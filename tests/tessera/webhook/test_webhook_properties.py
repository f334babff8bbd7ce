"""Properties of the pure admission decision over generated pods (the HTTP path is covered by
test_webhook_admission.py; here hypothesis explores pod shapes)."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_helpers import SETTINGS, apply_json_patch

from tessera.model import contract
from tessera.webhook.admission import PodRejected, mutate_pod

VALID_CORES = st.one_of(st.integers(min_value=1, max_value=100), st.integers(min_value=1, max_value=8).map(lambda n: n * 100))
NAMES = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def containers(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    out = []
    for name in names:
        limits: dict[str, Any] = {}
        kind = draw(st.sampled_from(["none", "tessera", "qgpu", "cpu"]))
        if kind == "tessera":
            limits[contract.GPU_CORE] = str(draw(VALID_CORES))
            if draw(st.booleans()):
                limits[contract.GPU_MEMORY] = str(draw(st.integers(min_value=1, max_value=81920)))
        elif kind == "qgpu":
            limits[contract.QGPU_CORE] = str(draw(VALID_CORES))
            if draw(st.booleans()):
                limits[contract.QGPU_MEMORY] = str(draw(st.integers(min_value=1, max_value=80)))
        elif kind == "cpu":
            limits["cpu"] = "1"
        container: dict[str, Any] = {"name": name, "image": "x"}
        if limits:
            container["resources"] = {"limits": limits}
        if draw(st.booleans()):
            container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "KEEP", "value": "1"}]
        out.append(container)
    return out


def _pod(cs: list[dict[str, Any]], pool: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": cs}
    if pool is not None:
        spec["nodeSelector"] = {contract.LABEL_POOL: pool}
    return {"metadata": {"namespace": "ns"}, "spec": spec}


@settings(max_examples=150, deadline=None)
@given(cs=containers(), pool=st.sampled_from([None, "shared-a", "shared-b"]), opted_in=st.booleans())
def test_valid_pods_are_admitted_and_only_gpu_containers_are_wired(cs: list[dict[str, Any]], pool: str | None, opted_in: bool) -> None:
    pod = _pod(cs, pool)
    mutation = mutate_pod(pod, request_uid="u-1", settings=SETTINGS, namespace_opted_in=opted_in)
    out = apply_json_patch(pod, list(mutation.patch))
    mapped = opted_in or pool == "shared-a"
    gpu_names = set()
    for before, after in zip(cs, out["spec"]["containers"], strict=True):
        limits = (before.get("resources") or {}).get("limits") or {}
        is_gpu = contract.GPU_CORE in limits or (mapped and contract.QGPU_CORE in limits)
        env = {e["name"]: e for e in after.get("env", [])}
        if is_gpu:
            gpu_names.add(before["name"])
            assert {k: env[k]["valueFrom"]["configMapKeyRef"]["key"] for k in contract.ALLOCATION_ENV_KEYS} == {
                k: f"{before['name']}.{k}" for k in contract.ALLOCATION_ENV_KEYS
            }
            assert "value" not in env["NVIDIA_VISIBLE_DEVICES"]
            after_limits = after["resources"]["limits"]
            assert contract.QGPU_CORE not in after_limits and contract.QGPU_MEMORY not in after_limits
            if contract.QGPU_MEMORY in limits:
                assert int(after_limits[contract.GPU_MEMORY]) == int(limits[contract.QGPU_MEMORY]) * 1024
        else:
            assert after == before  # untouched, including a qGPU request on a pool that did not opt in
    assert (out["spec"].get("schedulerName") == contract.SCHEDULER_NAME) is bool(gpu_names)
    has_qgpu_unmapped = not mapped and any(contract.QGPU_CORE in ((c.get("resources") or {}).get("limits") or {}) for c in cs)
    assert bool(mutation.warnings) is has_qgpu_unmapped
    # admission is idempotent: a second pass over the mutated pod changes nothing
    again = mutate_pod(out, request_uid="u-2", settings=SETTINGS, namespace_opted_in=opted_in)
    assert apply_json_patch(out, list(again.patch)) == out


@settings(max_examples=100, deadline=None)
@given(core=st.integers(min_value=-5, max_value=1000), resource=st.sampled_from([contract.GPU_CORE, contract.QGPU_CORE]))
def test_core_values_are_accepted_exactly_when_schedulable(core: int, resource: str) -> None:
    pod = _pod([{"name": "a", "image": "x", "resources": {"limits": {resource: str(core)}}}], "shared-a")
    valid = 1 <= core <= 100 or (core > 100 and core % 100 == 0)
    try:
        mutate_pod(pod, request_uid="u", settings=SETTINGS, namespace_opted_in=False)
        admitted = True
    except PodRejected:
        admitted = False
    assert admitted is valid
