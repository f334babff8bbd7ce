"""Reading Node and Pod objects: `kubectl` dumps (and every way a file can be wrong), a `KubeApi`, a kubeconfig."""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from inspect_fixtures import as_list, gpu_pod, record, shared_node, whole_node

from tessera.model.contract import NVIDIA_GPU
from tessera.inspect import SourceError, connect_and_load, load_api, load_files
from tessera.kube.api import KubeApiError
from tessera.kube.fake import FakeKubeApi

NODE = shared_node("n1")
POD = gpu_pod("p", [("main", 40, 1024)], node="n1", allocation=record("n1", {"main": [(0, 40, 1024)]}))


def _write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def _names(objects: Any) -> tuple[list[str], list[str]]:
    return [n["metadata"]["name"] for n in objects.nodes], [p["metadata"]["name"] for p in objects.pods]


def test_kubectl_list_with_kinds(tmp_path: Path) -> None:
    extra = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}}
    document = as_list([NODE], [POD])
    document["items"].append(extra)
    objects = load_files([_write(tmp_path, "dump.json", json.dumps(document))])
    assert _names(objects) == (["n1"], ["p"])
    assert objects.source.startswith("file ") and objects.source.endswith("dump.json")


def test_node_list_and_pod_list_in_two_files_items_without_kind(tmp_path: Path) -> None:
    nodes = _write(tmp_path, "nodes.json", json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": [NODE]}))
    pods = _write(tmp_path, "pods.json", json.dumps({"kind": "PodList", "apiVersion": "v1", "items": [POD]}))
    assert _names(load_files([nodes, pods])) == (["n1"], ["p"])


def test_yaml_dump_single_objects_and_later_objects_win(tmp_path: Path) -> None:
    old = _write(tmp_path, "old.yaml", yaml.safe_dump(as_list([NODE, whole_node("t4", "nvidia", "x", {NVIDIA_GPU: "1"})], [])))
    newer_node = {"kind": "Node", **shared_node("n1", gpus=4)}
    newer = _write(tmp_path, "node.json", json.dumps(newer_node))
    objects = load_files([old, newer])
    assert sorted(_names(objects)[0]) == ["n1", "t4"]
    assert "GPU-n1-3" in next(n for n in objects.nodes if n["metadata"]["name"] == "n1")["metadata"]["annotations"]["tessera.dev/gpus"]


def test_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(as_list([NODE], [POD]))))
    objects = load_files(["-"])
    assert _names(objects) == (["n1"], ["p"]) and objects.source == "file -"


DUMP = "kubectl get nodes,pods -A -o json"
BAD: list[tuple[str, Callable[[Path], str], str]] = [
    ("missing", lambda d: str(d / "nope.json"), "nope.json: no such file; create it with `" + DUMP + " > "),
    ("directory", lambda d: str(d), ": is a directory; pass the file written by `" + DUMP + "`"),
    ("not JSON", lambda d: _write(d, "f", "{ nodes: [1, 2"), "f:1:3: not valid JSON (Expecting property name enclosed in double quotes)"),
    ("JSON cut short", lambda d: _write(d, "f", '{"kind": "List",\n "items": [\n'), "f:3:1: not valid JSON (Expecting value)"),
    ("not YAML", lambda d: _write(d, "f", "kind: List\nitems: [\n  - a: b\n  c"), "f:3:3: not valid JSON or YAML (expected the node content"),
    ("binary", lambda d: _write(d, "f", b"\x80\x81\x00abc"), "f:1: not UTF-8 text (byte 0x80); expected the output of `" + DUMP + "`"),
    ("bad bytes on line 3", lambda d: _write(d, "f", b'{"kind": "List",\n "items": [\n "caf\xe9"]}'), "f:3: not UTF-8 text (byte 0xe9)"),
    ("deeply nested", lambda d: _write(d, "f", "[" * 100_000 + "]" * 100_000), "f: nested too deeply to be a kubectl dump"),
    ("a JSON array", lambda d: _write(d, "f", "[1, 2]"), "f: expected a Kubernetes List object, got a list"),
    ("a ConfigMap", lambda d: _write(d, "f", '{"kind": "ConfigMap"}'), "f: not a Kubernetes List (kind 'ConfigMap')"),
    ("items not a list", lambda d: _write(d, "f", '{"kind": "List", "items": {"a": 1}}'), "f: not a Kubernetes List (kind 'List'; items is an object, not a list)"),
    ("an item that is not an object", lambda d: _write(d, "f", '{"kind": "List", "items": [3]}'), "f: items[0]: expected an object, got the number 3"),
    ("pods only", lambda d: _write(d, "f", json.dumps(as_list([], [POD]))), "f: no Node objects; dump nodes and pods together with `" + DUMP + "`"),
    ("empty", lambda d: _write(d, "f", ""), "f: empty; expected the output of `" + DUMP + "`"),
    ("only blanks", lambda d: _write(d, "f", "\n  \n"), "f: empty; expected the output of `" + DUMP + "`"),
]


def _mutated(tmp_path: Path, kind: str, change: Callable[[dict[str, Any]], None]) -> str:
    """A valid dump (one node, one pod) with one field of its node (items[0]) or pod (items[1]) changed."""
    node, pod = json.loads(json.dumps(NODE)), json.loads(json.dumps(POD))
    change(node if kind == "node" else pod)
    return _write(tmp_path, "dump.json", json.dumps(as_list([node], [pod])))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        keys = path.split(" ")
        for key in keys[:-1]:
            obj = obj.setdefault(key, {}) if not key.isdigit() else obj[int(key)]  # type: ignore[index]
        if keys[-1].isdigit():
            obj[int(keys[-1])] = value  # type: ignore[index]
        else:
            obj[keys[-1]] = value
    return change


# (object, field to set (keys separated by spaces), value, message after "dump.json: "): every
# field inspect reads, wrong
SHAPES: list[tuple[str, str, Any, str]] = [
    ("node", "metadata", [], "items[0].metadata: expected an object, got a list"),
    ("node", "metadata name", "", "items[0].metadata.name: is empty"),
    ("node", "metadata name", 7, "items[0].metadata.name: expected a string, got the number 7"),
    ("node", "metadata labels", ["a"], "items[0].metadata.labels: expected an object, got a list"),
    ("node", "metadata labels tessera.dev/pool", 3, 'items[0].metadata.labels["tessera.dev/pool"]: expected a string, got the number 3'),
    ("node", "metadata annotations", "x", "items[0].metadata.annotations: expected an object, got the string 'x'"),
    ("node", "status", [], "items[0].status: expected an object, got a list"),
    ("node", "status allocatable", [], "items[0].status.allocatable: expected an object, got a list"),
    ("node", "status allocatable cpu", "lots", "items[0].status.allocatable.cpu: 'lots' is not a Kubernetes quantity"),
    ("node", "status allocatable nvidia.com/gpu", "-1", 'items[0].status.allocatable["nvidia.com/gpu"]: \'-1\' is negative'),
    ("node", "status capacity memory", {"Gi": 4}, "items[0].status.capacity.memory: expected a Kubernetes quantity"),
    ("node", "status allocatable cpu", float("nan"), "items[0].status.allocatable.cpu: nan is not a finite quantity"),
    ("node", "status allocatable cpu", True, "items[0].status.allocatable.cpu: expected a Kubernetes quantity such as \"8\", \"250m\" or \"16Gi\", got the boolean true"),
    ("node", "status conditions", {"type": "Ready"}, "items[0].status.conditions: expected a list, got an object"),
    ("node", "status conditions", [["Ready"]], "items[0].status.conditions[0]: expected an object, got a list"),
    ("node", "spec", {"unschedulable": "yes"}, "items[0].spec.unschedulable: expected true or false, got the string 'yes'"),
    ("pod", "metadata namespace", ["default"], "items[1].metadata.namespace: expected a string, got a list"),
    ("pod", "spec", "x", "items[1].spec: expected an object, got the string 'x'"),
    ("pod", "spec nodeName", 1, "items[1].spec.nodeName: expected a string, got the number 1"),
    ("pod", "spec containers", {"name": "main"}, "items[1].spec.containers: expected a list, got an object"),
    ("pod", "spec containers 0", "main", "items[1].spec.containers[0]: expected an object, got the string 'main'"),
    ("pod", "spec containers 0 resources", [], "items[1].spec.containers[0].resources: expected an object, got a list"),
    ("pod", "spec containers 0 resources limits", {"tessera.dev/gpu-core": "abc"},
     'items[1].spec.containers[0].resources.limits["tessera.dev/gpu-core"]: \'abc\' is not a Kubernetes quantity such as "8", "250m" or "16Gi"'),
    ("pod", "spec initContainers", [{"name": "init", "resources": {"requests": {"cpu": "1e400x"}}}],
     "items[1].spec.initContainers[0].resources.requests.cpu: '1e400x' is not a Kubernetes quantity"),
    ("pod", "spec overhead", {"cpu": []}, "items[1].spec.overhead.cpu: expected a Kubernetes quantity"),
    ("pod", "status", {"phase": 3}, "items[1].status.phase: expected a string, got the number 3"),
]


@pytest.mark.parametrize(("kind", "field", "value", "message"), SHAPES, ids=[f"{k}.{f.replace(' ', '.')}={v!r}" for k, f, v, _ in SHAPES])
def test_a_wrong_shape_names_its_json_path(tmp_path: Path, kind: str, field: str, value: Any, message: str) -> None:
    path = _mutated(tmp_path, kind, _set(field, value))
    with pytest.raises(SourceError) as err:
        load_files([path])
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)


def test_the_unchanged_dump_loads(tmp_path: Path) -> None:
    assert _names(load_files([_mutated(tmp_path, "node", lambda _: None)])) == (["n1"], ["p"])


def test_a_yaml_dump_reports_paths_too(tmp_path: Path) -> None:
    node = json.loads(json.dumps(NODE))
    node.setdefault("status", {}).setdefault("allocatable", {})["cpu"] = [1]
    text = yaml.safe_dump(as_list([node], [POD]))
    with pytest.raises(SourceError, match=r"items\[0\]\.status\.allocatable\.cpu: expected a Kubernetes quantity"):
        load_files([_write(tmp_path, "dump.yaml", text)])


def test_a_utf16_dump_as_powershell_writes_it_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path, "dump.json", json.dumps(as_list([NODE], [POD])).encode("utf-16"))
    assert _names(load_files([path])) == (["n1"], ["p"])


@pytest.mark.parametrize(("make", "message"), [(m, e) for _, m, e in BAD], ids=[c[0] for c in BAD])
def test_a_bad_file_is_one_line_saying_what_to_do(tmp_path: Path, make: Callable[[Path], str], message: str) -> None:
    with pytest.raises(SourceError) as err:
        load_files([make(tmp_path)])
    text = str(err.value)
    assert message in text and "\n" not in text


def test_live_objects_come_from_the_kube_api() -> None:
    api = FakeKubeApi()
    api.create_node(NODE)
    api.create_pod(gpu_pod("q", [("main", 10, None)], namespace="other"))
    objects = load_api(api)
    assert _names(objects) == (["n1"], ["q"]) and objects.source == "cluster"


class _FailingApi(FakeKubeApi):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self._error = error

    def list_nodes(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        raise self._error


def _max_retry() -> Exception:
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    return MaxRetryError(None, "/api/v1/nodes", NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (KubeApiError(403, 'nodes is forbidden: User "dev" cannot list resource "nodes"'), "refused to list nodes or pods (403: nodes is forbidden"),
        (KubeApiError(403, "x"), "inspect needs get/list on nodes and pods in all namespaces"),
        (KubeApiError(401, "Unauthorized"), "rejected the credentials (401: Unauthorized); refresh the kubeconfig's token"),
        (KubeApiError(500, "etcd\nleader changed"), "listing nodes and pods failed (500: etcd); retry, or inspect a dump with --from FILE"),
        (_max_retry(), "cannot reach the Kubernetes API server (Failed to establish a new connection: [Errno 111] Connection refused)"),
        (ConnectionRefusedError(111, "Connection refused"), "cannot reach the Kubernetes API server ([Errno 111] Connection refused)"),
    ],
    ids=["403", "403 hint", "401", "500", "urllib3", "socket"],
)
def test_api_failures_are_one_line(error: Exception, message: str) -> None:
    with pytest.raises(SourceError) as err:
        load_api(_FailingApi(error))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_programming_error_is_not_hidden() -> None:
    with pytest.raises(ZeroDivisionError):
        load_api(_FailingApi(ZeroDivisionError()))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot load Kubernetes configuration"),
        ("clusters: [", "cannot load Kubernetes configuration"),
        ("apiVersion: v1\nkind: Config\ncontexts: []\n", "cannot load Kubernetes configuration"),
    ],
    ids=["missing", "not YAML", "no context"],
)
def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(SourceError) as err:
        connect_and_load(str(path), None)
    text = str(err.value)
    assert message in text and "--from FILE" in text and "\n" not in text


def _dump_of(tmp_path: Path, name: str, pods: int) -> Path:
    path = tmp_path / name
    items = [gpu_pod(f"p{i}", [("main", 10, 512)], node="n1") for i in range(pods)]
    path.write_text(json.dumps(as_list([NODE], items)))
    return path


def test_memory_grows_linearly_with_the_dump(tmp_path: Path) -> None:
    import tracemalloc

    peaks = []
    for name, pods in (("small.json", 500), ("large.json", 2000)):
        path = _dump_of(tmp_path, name, pods)
        tracemalloc.start()
        try:
            load_files([str(path)])
            peaks.append((tracemalloc.get_traced_memory()[1], path.stat().st_size))
        finally:
            tracemalloc.stop()
    (small, _), (large, size) = peaks
    assert large < 5 * small, peaks  # four times the pods, about four times the memory
    assert large < 30 * size, peaks  # a bounded multiple of the file: parsed objects, no copies per item
