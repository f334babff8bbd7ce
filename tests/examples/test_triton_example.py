"""The S8 Triton example, now stack config: examples/triton/Pulumi.triton.yaml (an existing cluster) and
the prod stack's `workloads:` render a Deployment, Service, HPA and the prometheus-adapter rule the HPA
reads, all valid for Kubernetes 1.30 (strict schemas), through the same CLI a team runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tessera.cli.main import main
from tessera.model import MigPool, load_stack_file
from tessera.model.mig import mig_resources, resolve_layout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "triton" / "Pulumi.triton.yaml"
PROD = ROOT / "stacks" / "Pulumi.prod.yaml"
CRDS = {("monitoring.coreos.com/v1", "PodMonitor")}  # no schema in kubernetes-validate; fields checked in tests/tessera/manifests


def _render(stack: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    """`tessera render`, as a team runs it; the objects of each written file."""
    assert main(["render", str(stack), "-o", str(out)]) == 0
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(out.glob("*.yaml"))}


def _of(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module", params=[EXAMPLE, PROD], ids=["example", "prod"])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]], Path]:
    out = tmp_path_factory.mktemp("render")
    return request.param, _render(request.param, out), out


def test_the_example_validates_and_the_old_loose_yaml_is_gone() -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert sorted(p.name for p in EXAMPLE.parent.iterdir()) == ["Pulumi.triton.yaml", "README.md"]


def test_rendered_workloads_are_schema_valid_for_1_30(rendered: tuple[Path, dict[str, list[dict[str, Any]]], Path]) -> None:
    _, files, _ = rendered
    docs = files["08-workloads.yaml"]
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodMonitor"} <= {d["kind"] for d in docs}
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) not in CRDS:
            kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_triton_takes_a_slice_its_mig_pool_offers(rendered: tuple[Path, dict[str, list[dict[str, Any]]], Path]) -> None:
    stack, files, _ = rendered
    config = load_stack_file(stack)
    spec = _of(files["08-workloads.yaml"], "Deployment", "tritonserver")["spec"]["template"]["spec"]
    pool = config.pool(spec["nodeSelector"]["tessera.dev/pool"])
    assert isinstance(pool, MigPool)
    counts = resolve_layout(pool.gpu_spec(), pool.mig.profile)
    assert counts is not None
    asked = {k for k in spec["containers"][0]["resources"]["limits"] if k.startswith("nvidia.com/")}
    assert asked == {"nvidia.com/mig-1g.5gb"} and asked <= set(mig_resources(pool.mig.strategy, counts))
    assert {"key": "tessera.dev/gpu", "operator": "Equal", "value": "mig", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["containers"][0]["volumeMounts"][-1] == {"name": "models", "mountPath": "/models", "readOnly": True}


def test_hpa_scales_the_deployment_on_a_metric_the_rendered_adapter_serves(rendered: tuple[Path, dict[str, list[dict[str, Any]]], Path]) -> None:
    _, files, out = rendered
    docs = files["08-workloads.yaml"]
    rules = yaml.safe_load((out / "prometheus-adapter" / "values.yaml").read_text())["rules"]
    served = {"Pods": {r["name"]["as"] for r in rules["custom"]}, "External": {r["name"]["as"] for r in rules.get("external", [])}}
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpas
    for hpa in hpas:
        (metric,) = hpa["spec"]["metrics"]
        source = metric["pods"] if metric["type"] == "Pods" else metric["external"]
        assert source["metric"]["name"] in served[metric["type"]]
        target = hpa["spec"]["scaleTargetRef"]["name"]
        deployment = _of(docs, "Deployment", target)
        monitor = _of(docs, "PodMonitor", target)
        # the PodMonitor scrapes the pods the HPA scales, on a port they declare
        assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
        service = _of(docs, "Service", target)
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    queue = _of(docs, "HorizontalPodAutoscaler", "tritonserver")["spec"]["metrics"][0]
    assert queue == {"type": "Pods", "pods": {"metric": {"name": "avg_time_queue_us"}, "target": {"type": "AverageValue", "averageValue": "50"}}}


def test_plan_shows_the_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "workload inference/tritonserver on pool a100-mig (mig): 1 nvidia.com/mig-1g.5gb per replica" in out
    assert "at 14 replicas: 14 nvidia.com/mig-1g.5gb of the pool's 28 at maxSize (50%)" in out
    assert "workload inference/triton-bert on pool t4-shared (shared): 50 tessera.dev/gpu-core, 6144 tessera.dev/gpu-memory per replica" in out
    assert "replicas 2..12, HPA on triton_bert_requests_per_second (External, adapter declared rule), target 30 per replica (average)" in out
