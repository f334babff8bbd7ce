"""`tessera plan` as a user runs it: figures for every shipped stack, --json, and errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


@pytest.mark.parametrize(
    ("stack", "lines"),
    [
        (
            "dev",
            [
                "pool t4-exclusive (nvidia) on GN7.2XLARGE32: 1 x T4 (16384 MiB) per node",
                "  nodes min/desired/max: 0/1/2    GPUs: 0/1/2",
                "  tessera.dev/gpu-core: 100 per node, 100/100/400 in the pool",
                "  tessera.dev/gpu-memory: 16384 per node, 16384/16384/65536 in the pool",
                "totals (min/desired/max): nodes 1/2/6, GPUs 1/2/6",
            ],
        ),
        (
            "prod",
            [
                "pool a100-mig (mig) on GT4.8XLARGE192: 2 x A100-40GB (40960 MiB) per node",
                "  nvidia.com/mig-1g.5gb: 16 per node, 16/16/48 in the pool",
                "  8 MIG slices per node",
                "  runs: nvidia-device-plugin (time-slicing), nvidia-mig-manager, dcgm-exporter",
                "  nvidia.com/gpu: 4 per node, 0/0/8 in the pool",
                "  runs: tessera-device-plugin, tessera-node-agent, dcgm-exporter",
                "  schedule night: 0 20 * * 1-5 (Asia/Shanghai) -> whole GPUs",
                "totals (min/desired/max): nodes 4/4/17, GPUs 8/8/32",
                # the Triton workload: its slice, replicas, metric and share of the pool at maxReplicas
                "workload inference/tritonserver on pool a100-mig (mig): 1 nvidia.com/mig-1g.5gb per replica",
                "  replicas 1..8, HPA on avg_time_queue_us (Pods, adapter built-in rule), target 50 per replica (average)",
                "  at 8 replicas: 8 nvidia.com/mig-1g.5gb of the pool's 48 at maxSize (17%)",
                "  note: layout night (0 20 * * *) offers no 1g.5gb slice: its nodes are skipped while replicas use them; scale the workload down before it",
            ],
        ),
        ("local", ["pool local-shared (shared) on existing nodes (example.com/gpu-pool=local-shared): 1 x T4 (16384 MiB) per node", "totals (min/desired/max): nodes 1/1/1, GPUs 1/1/1"]),
    ],
)
def test_plan_figures(stack: str, lines: list[str]) -> None:
    result = tessera("plan", f"stacks/Pulumi.{stack}.yaml")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    for line in lines:
        assert line in out


def test_plan_json() -> None:
    result = tessera("plan", "stacks/Pulumi.prod.yaml", "--json")  # the same figures as text, as JSON
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["totals"]["nodes"] == {"min": 4, "desired": 4, "max": 17}
    assert data["totals"]["capacity"]["tessera.dev/gpu-core"] == {"min": 400, "desired": 400, "max": 1600}
    assert [p["kind"] for p in data["pools"]] == ["nvidia", "shared", "mig", "timeslice"]
    (triton,) = data["workloads"]
    assert (triton["pool"], triton["replicas"], triton["atMaxReplicas"], triton["poolCapacityAtMaxSize"]) == (
        "a100-mig", {"min": 1, "max": 8}, {"nvidia.com/mig-1g.5gb": 8}, {"nvidia.com/mig-1g.5gb": 48},
    )


def test_plan_of_invalid_stack_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  tessera:cluster: {provider: existing, name: x}\n  tessera:nodePools: []\n", encoding="utf-8")
    result = tessera("plan", str(bad))
    assert result.returncode == 2 and result.stdout == ""
    assert f"{bad}: nodePools: must not be empty" in result.stderr.splitlines()
    assert "Traceback" not in result.stderr


# --- which existing nodes join which pool -----------------------------------------------------------
LOCAL = "stacks/Pulumi.local.yaml"
TWO_POOLS = """config:
  tessera:cluster: {provider: existing, name: lab, kubernetesVersion: "1.30.0", kubeconfig: {path: ~/.kube/config}}
  tessera:nodePools:
    - {name: a, kind: shared, nodeSelector: {example.com/gpu-pool: a}, gpuModel: T4, gpuCount: 1}
    - {name: b, kind: nvidia, nodeSelector: {kubernetes.io/hostname: gpu-1}, gpuModel: T4, gpuCount: 1}
"""


def _node(name: str, labels: dict[str, str], managers: dict[str, list[str]] | None = None) -> dict[str, object]:
    managed = [
        {"manager": m, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in keys}}}}
        for m, keys in (managers or {"kubelet": list(labels)}).items()
    ]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "managedFields": managed}}


def _dump(tmp_path: Path, *nodes: dict[str, object]) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes)}))
    return str(path)


def test_plan_shows_which_nodes_join_which_pool(tmp_path: Path) -> None:
    gone = _node("gpu-9", {"tessera.dev/pool": "old", "tessera.dev/pool-kind": "shared"}, {"tessera-pool-old": ["tessera.dev/pool", "tessera.dev/pool-kind"]})
    dump = _dump(tmp_path, _node("gpu-1", {"example.com/gpu-pool": "local-shared"}), _node("cpu-1", {}), gone)
    result = tessera("plan", LOCAL, "--nodes-from", dump)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3:] == [
        f"nodes (file {dump}):",
        "  pool local-shared (example.com/gpu-pool=local-shared): gpu-1",
        "  node gpu-9 leaves pool old: Tessera removes tessera.dev/pool, tessera.dev/pool-kind",
    ]
    document = json.loads(tessera("plan", LOCAL, "--nodes-from", dump, "--json").stdout)
    assert document["poolNodes"] == {"local-shared": ["gpu-1"]}
    assert document["releases"] == [{"pool": "old", "node": "gpu-9", "labels": ["tessera.dev/pool", "tessera.dev/pool-kind"], "taints": False}]


@pytest.mark.parametrize(
    ("stack", "nodes", "extra", "line"),
    [
        ("two-pools", [("gpu-1", {"example.com/gpu-pool": "a"})], [], "nodePools[1].nodeSelector: also selects node 'gpu-1', which nodePools[0] (a) selects"),
        ("dev", [("gpu-1", {})], [], "error: --kubeconfig, --context and --nodes-from show which existing nodes join which pool; this stack is provider tke"),
        ("local", [], ["--context", "x"], "error: --kubeconfig/--context read a live cluster; drop them to read a --nodes-from dump"),
    ],
    ids=["node-in-two-pools", "tke-stack", "both-sources"],
)
def test_plan_with_nodes_exits_2_with_one_line(tmp_path: Path, stack: str, nodes: list[tuple[str, dict[str, str]]], extra: list[str], line: str) -> None:
    stack_file = str(tmp_path / "Pulumi.two.yaml") if stack == "two-pools" else f"stacks/Pulumi.{stack}.yaml"
    if stack == "two-pools":
        Path(stack_file).write_text(TWO_POOLS)
    result = tessera("plan", stack_file, "--nodes-from", _dump(tmp_path, *(_node(n, labels) for n, labels in nodes)), *extra)
    assert result.returncode == 2
    expected = line if line.startswith("error: ") else f"{stack_file}: {line}"
    assert any(l.startswith(expected) for l in result.stderr.splitlines()), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_plan_names_a_kubeconfig_it_cannot_read(tmp_path: Path, where: str) -> None:
    path = tmp_path / "kubeconfig"
    if where == "directory":
        path.mkdir()
    result = tessera("plan", LOCAL, "--kubeconfig", str(path))
    assert result.returncode == 2
    problem = "no such file" if where == "missing" else "is a directory"
    assert result.stderr.splitlines() == [f"error: --kubeconfig {path}: {problem}"]


def test_plan_lists_nodes_through_a_kubeconfig(tmp_path: Path) -> None:
    import yaml
    from json_api_stand_in import serving

    items = [_node("gpu-1", {"example.com/gpu-pool": "local-shared"})]

    def handle(method: str, path: str, content_type: str, body: object) -> tuple[int, object]:
        return (200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}) if path.startswith("/api/v1/nodes") else (404, {})

    with serving(handle) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": url}}], "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        result = tessera("plan", LOCAL, "--kubeconfig", str(kubeconfig))
    assert result.returncode == 0, result.stderr
    assert "  pool local-shared (example.com/gpu-pool=local-shared): gpu-1" in result.stdout.splitlines()


def test_plan_warns_when_a_pool_matches_fewer_nodes_than_min_size(tmp_path: Path) -> None:
    result = tessera("plan", LOCAL, "--nodes-from", _dump(tmp_path, _node("cpu-1", {})))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        "  pool local-shared (example.com/gpu-pool=local-shared): no node yet",
        "  warning: pool local-shared: its selector matches 0 node(s), fewer than minSize 1",
    ]


# what each cluster component of `tessera plan` is in the output of `tessera render`
RENDERED_AS: dict[str, tuple[str, ...]] = {
    "tessera-scheduler": ("02-extender.yaml", "03-scheduler.yaml"),
    "tessera-webhook": ("05-webhook.yaml",),
    "gpu-operator": ("gpu-operator",),
    "tessera-repartition": ("06-repartition.yaml",),
    "kube-prometheus-stack": ("kube-prometheus-stack",),
    "prometheus-adapter": ("prometheus-adapter",),
}
SHIPPED = ["stacks/Pulumi.dev.yaml", "stacks/Pulumi.prod.yaml", "stacks/Pulumi.local.yaml", "examples/triton/Pulumi.triton.yaml"]


@pytest.mark.parametrize("stack_file", SHIPPED)
def test_plan_lists_exactly_the_cluster_components_render_writes(tmp_path: Path, stack_file: str) -> None:
    planned = tessera("plan", stack_file, "--json")
    assert planned.returncode == 0, planned.stderr
    components = {name.split(" ")[0] for name in json.loads(planned.stdout)["clusterComponents"]}
    rendered = tessera("render", stack_file, "-o", str(tmp_path / "out"))
    assert rendered.returncode == 0, rendered.stderr
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert components <= set(RENDERED_AS), components  # a new component joins the table above
    for component, outputs in RENDERED_AS.items():
        assert (component in components) == all(o in written for o in outputs), (component, sorted(written))
        assert (component in components) == any(o in written for o in outputs), (component, sorted(written))
