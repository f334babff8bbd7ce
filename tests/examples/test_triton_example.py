"""The S8 Triton example: valid manifests that fit the prod stack's MIG pool and each other."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tessera.model import MigPool, load_stack_file
from tessera.model.mig import mig_resources, resolve_layout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "triton"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLE / name).read_text()) if d]


@pytest.mark.parametrize("name", ["triton.yaml", "hpa.yaml"])
def test_manifests_are_schema_valid(name: str) -> None:
    for doc in _docs(name):
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def _deployment() -> dict[str, Any]:
    return next(d for d in _docs("triton.yaml") if d["kind"] == "Deployment")


def test_deployment_targets_a_slice_the_prod_mig_pool_offers() -> None:
    config = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    spec = _deployment()["spec"]["template"]["spec"]
    pool = config.pool(spec["nodeSelector"]["tessera.dev/pool"])
    assert isinstance(pool, MigPool)
    counts = resolve_layout(pool.gpu_spec(), pool.mig.profile)
    assert counts is not None
    offered = set(mig_resources(pool.mig.strategy, counts))
    asked = {k for k in spec["containers"][0]["resources"]["limits"] if k.startswith("nvidia.com/")}
    assert asked and asked <= offered
    assert {"key": "tessera.dev/gpu", "operator": "Equal", "value": "mig", "effect": "NoSchedule"} in spec["tolerations"]


def test_hpa_scales_the_deployment_on_the_metric_the_stacks_adapter_exposes() -> None:
    from tessera.manifests.stack import prometheus_adapter_release

    (hpa,) = _docs("hpa.yaml")
    release = prometheus_adapter_release(load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml"))
    assert release is not None, "the prod stack must install prometheus-adapter for this example"
    rules = release.values["rules"]["custom"]
    exposed = {rule["name"]["as"] for rule in rules}
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] in exposed
    assert hpa["spec"]["scaleTargetRef"]["name"] == _deployment()["metadata"]["name"]
    # the rule reads series carrying the pod's namespace and name, which the PodMonitor adds
    (monitor,) = _docs("podmonitor.yaml")
    assert monitor["spec"]["selector"]["matchLabels"] == _deployment()["spec"]["selector"]["matchLabels"]
    assert all(rule["resources"]["overrides"]["pod"] == {"resource": "pod"} for rule in rules)
    container = _deployment()["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"] for p in container["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
