"""Preview of an existing cluster through the real `__main__.py`: the program lists the nodes with the
stack's kubeconfig through the real Kubernetes client (a loopback API server stand-in answers), shows
which nodes join which pool, and stops before declaring anything when the pools cannot take them."""
from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime
import pytest
import yaml
from json_api_stand_in import serving
from pulumi.runtime.settings import ROOT as ROOT_RESOURCE, get_root_resource
from pulumi_program_mocks import RecordingMocks, run_main_py

from tessera_pulumi.existing import NodeListError, ResolvedKubeconfig, list_cluster_nodes

NODE_PATCH = "kubernetes:core/v1:NodePatch"
SELECT = "example.com/gpu-pool"
POOL_A = {"name": "a", "kind": "shared", "nodeSelector": {SELECT: "a"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 1, "maxSize": 1}
POOL_B = {"name": "b", "kind": "nvidia", "nodeSelector": {SELECT: "b"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 2, "maxSize": 2}


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node as the API server lists it: kubelet registered it (and, here, owns its taints)."""
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}}
    if taints:
        fields["f:spec"] = {"f:taints": {}}
    managed = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields}]
    meta = {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "managedFields": managed}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"taints": taints} if taints else {}}


NODES = [node("gpu-1", {SELECT: "a"}), node("gpu-2", {SELECT: "b"}), node("cpu-1", {})]


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "test"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def _api(nodes: list[dict[str, Any]], status: int = 200) -> Any:
    def handle(method: str, path: str, content_type: str, body: Any) -> tuple[int, Any]:
        if method == "GET" and path.split("?")[0] == "/api/v1/nodes":
            if status != 200:
                return status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": status,
                                "message": 'nodes is forbidden: User "ci" cannot list resource "nodes" in API group "" at the cluster scope'}
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": nodes}
        return 404, {"kind": "Status", "code": 404, "message": "not found"}
    return handle


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    seen: dict[str, list[str]] = {"error": [], "info": [], "warn": []}
    for level in seen:
        monkeypatch.setattr(pulumi.log, level, lambda msg, *a, _level=level, **k: seen[_level].append(msg))
    ROOT_RESOURCE.set(None)  # a stack of its own: the poolNodes export must not leak into other tests' stacks
    yield seen
    ROOT_RESOURCE.set(None)


def _preview(kubeconfig: Path, pools: list[dict[str, Any]]) -> tuple[RecordingMocks, BaseException | None]:
    cluster = {"provider": "existing", "name": "lab", "kubernetesVersion": "1.30.0", "kubeconfig": {"path": str(kubeconfig)}}
    return run_main_py({"tessera:cluster": json.dumps(cluster), "tessera:nodePools": json.dumps(pools)})


def test_preview_lists_the_nodes_and_shows_which_join_which_pool(tmp_path: Path, logs: dict[str, list[str]]) -> None:
    with serving(_api(NODES)) as url:
        mocks, failure = _preview(_kubeconfig(tmp_path, url), [POOL_A, POOL_B])
    assert failure is None, logs["error"]
    assert "pool a (example.com/gpu-pool=a): gpu-1" in logs["info"] and "pool b (example.com/gpu-pool=b): gpu-2" in logs["info"]
    assert logs["warn"] == ["pool b: its selector matches 1 node(s), fewer than minSize 2"]
    assert not any("fewer than minSize" in line for line in logs["info"])
    stack = get_root_resource()
    assert stack is not None and stack.outputs["poolNodes"] == {"a": ["gpu-1"], "b": ["gpu-2"]}  # type: ignore[attr-defined]
    assert sorted(r.inputs["metadata"]["name"] for r in mocks.resources if r.typ == NODE_PATCH) == ["gpu-1", "gpu-2"]


TAINTED = node("gpu-1", {SELECT: "a"}, [{"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}])
BAD = [
    (
        "a node picked by two pools",
        NODES,
        [POOL_A, {**POOL_B, "nodeSelector": {"kubernetes.io/hostname": "gpu-1"}}],
        "nodePools[1].nodeSelector: also selects node 'gpu-1', which nodePools[0] (a) selects; a node belongs to one pool",
    ),
    (
        "a taint the pool does not declare",
        [TAINTED],
        [POOL_A],
        "nodePools[0].taints: node 'gpu-1' carries taint example.com/dedicated=ml:NoSchedule, which this pool does not declare; "
        "Tessera applies the pool's taints as the node's whole taint list",
    ),
]


@pytest.mark.parametrize(("nodes", "pools", "line"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_pools_that_cannot_take_their_nodes_stop_preview_before_any_resource(
    tmp_path: Path, logs: dict[str, list[str]], nodes: list[dict[str, Any]], pools: list[dict[str, Any]], line: str
) -> None:
    with serving(_api(nodes)) as url:
        mocks, failure = _preview(_kubeconfig(tmp_path, url), pools)
    assert isinstance(failure, pulumi.RunError) and "nothing was deployed" in str(failure)
    assert any(message.startswith(line) for message in logs["error"]), logs["error"]
    assert mocks.resources == []


def test_a_declared_taint_and_the_control_planes_own_taints_are_fine(tmp_path: Path, logs: dict[str, list[str]]) -> None:
    busy = node("gpu-1", {SELECT: "a"}, [
        {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    ])
    pool = {**POOL_A, "taints": [{"key": "example.com/dedicated", "value": "ml"}]}
    with serving(_api([busy])) as url:
        _, failure = _preview(_kubeconfig(tmp_path, url), [pool])
    assert failure is None, logs["error"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("status", "reachable", "message"),
    [(403, True, 'cannot list the cluster\'s nodes (403: nodes is forbidden: User "ci" cannot list resource "nodes"'), (200, False, "cannot reach the cluster to list its nodes")],
    ids=["forbidden", "unreachable"],
)
def test_nodes_that_cannot_be_listed_stop_preview_with_one_line(tmp_path: Path, logs: dict[str, list[str]], status: int, reachable: bool, message: str) -> None:
    if reachable:
        with serving(_api(NODES, status=status)) as url:
            mocks, failure = _preview(_kubeconfig(tmp_path, url), [POOL_A])
    else:
        mocks, failure = _preview(_kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}"), [POOL_A])
    assert isinstance(failure, pulumi.RunError)
    assert str(failure).startswith(message) and "Traceback" not in str(failure) and "\n" not in str(failure)
    assert mocks.resources == []


def test_the_adapter_reads_a_kubeconfig_secret_without_writing_it(tmp_path: Path) -> None:
    with serving(_api(NODES)) as url:
        text = _kubeconfig(tmp_path, url).read_text()
        (tmp_path / "kubeconfig").unlink()
        names = [n["metadata"]["name"] for n in list_cluster_nodes(ResolvedKubeconfig(text, None, from_file=False))]
    assert names == ["gpu-1", "gpu-2", "cpu-1"]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(NodeListError, match="cannot list the cluster's nodes"):
        list_cluster_nodes(ResolvedKubeconfig("just: [text", None, from_file=False))
