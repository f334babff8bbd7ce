"""`tessera inspect` as a user runs it: from a dump of pods bound by the control-plane stand-in, from a
live API server (the real client against a loopback stub), and every error as one line with exit 2."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "inspect"))

from inspect_fixtures import CLUSTER_DUMP, dump_api, shared_node  # noqa: E402
from extender_stand_in import ExtenderStandIn  # noqa: E402

from tessera.cli.main import main  # noqa: E402
from tessera.kube.fake import FakeKubeApi  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
DUMP = str(CLUSTER_DUMP.relative_to(ROOT))


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_pods_bound_by_the_control_plane_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Webhook mutation, the allocation model, the real record and ConfigMap writers, a Binding."""
    api = FakeKubeApi()
    api.create_node(shared_node("node-a", gpus=2))
    standin = ExtenderStandIn(api, "node-a")
    standin.create_and_bind("big", {"main": (100, None)})  # first: a whole GPU, then both shares fit the other
    standin.create_and_bind("train", {"main": (40, 4096)}, app_class="offline")
    standin.create_and_bind("infer", {"server": (30, 2048), "tok": (20, 1024)}, app_class="online")
    dump = str(dump_api(api, tmp_path / "dump.json"))

    code, out, err = _run(capsys, "--from", dump, "-d")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    gpu_rows = [line.split() for line in lines if line.startswith("  0    T4") or line.startswith("  1    T4")]
    assert gpu_rows == [["0", "T4", "100/100", "15360/15360", "1", "healthy"], ["1", "T4", "90/100", "7168/15360", "2", "healthy", "stranded"]]
    assert any(line.startswith("  total: gpu-core 190/200 (95%), gpu-memory 22528/30720 MiB (73%), 3 pods") for line in lines)
    shares = [line.split()[:5] + line.split()[5:6] for line in lines if line.startswith("  ") and line.rstrip().endswith("bound")]
    assert shares == [
        ["0", "default/big", "main", "100", "15360", "-"],
        ["1", "default/infer", "server", "30", "2048", "online"],
        ["1", "default/infer", "tok", "20", "1024", "online"],
        ["1", "default/train", "main", "40", "4096", "offline"],
    ]

    code, out, _ = _run(capsys, "--from", dump, "-o", "json")
    doc = json.loads(out)
    gpus = doc["sharedNodes"][0]["gpus"]
    assert [(g["coreAllocated"], g["memoryAllocatedMiB"], g["pods"]) for g in gpus] == [(100, 15360, 1), (90, 7168, 2)]
    assert doc["flaggedPods"] == []


@pytest.mark.parametrize(
    ("args", "first_lines"),
    [
        (["--node", "t4-1"], ["Source: file " + DUMP + " (only node t4-1)", "", "WHOLE-GPU NODES"]),
        (["--pool", "a100-mig", "--node", "a100-mig-1"], ["Source: file " + DUMP + " (only node a100-mig-1; pool a100-mig)", "", "WHOLE-GPU NODES"]),
        (["--pool", "a10-shared"], ["Source: file " + DUMP + " (only pool a10-shared)", "", "NODE a10-1  pool a10-shared  shared (fixed-share/binpack)  Ready"]),
    ],
)
def test_filters(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], first_lines: list[str]) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = _run(capsys, "--from", DUMP, *args)
    assert code == 0 and out.splitlines()[:3] == first_lines


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--from", "cluster.json"], "error: cluster.json: no such file; create it with `kubectl get nodes,pods -A -o json > cluster.json`"),
        (["--from", DUMP, "--node", "zz"], f"error: no GPU node named 'zz' in file {DUMP} (GPU nodes: a10-1, a10-2, a100-mig-1, t4-1)"),
        (["--from", DUMP, "--pool", "a10"], f"error: no pool named 'a10' in file {DUMP} (pools: a10-shared, a100-mig, t4-exclusive)"),
        (["--from", DUMP, "--context", "prod"], "error: --kubeconfig/--context read a live cluster; drop them to inspect a --from dump"),
        (["--from", "docs/figures/packing-default-fgd.png"], "error: docs/figures/packing-default-fgd.png:1: not UTF-8 text (byte 0x89); expected the output of `kubectl get nodes,pods -A -o json`"),
        (["--kubeconfig", "no-such-kubeconfig"], "error: cannot load Kubernetes configuration: "),
    ],
    ids=["missing dump", "unknown node", "unknown pool", "context with a dump", "not a dump", "missing kubeconfig"],
)
def test_errors_are_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], error: str) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = _run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith(error) and err.count("\n") == 1, err


def test_unknown_output_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "-o", "xml"])
    assert exit_.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err


# --- a live cluster: the real kubernetes client against a loopback API server ---------------------------
class StubApiServer:
    """GET /api/v1/nodes and /api/v1/pods from the example dump; `forbid` answers 403 like RBAC does."""

    def __init__(self, forbid: bool = False) -> None:
        items = json.loads(CLUSTER_DUMP.read_text())["items"]
        lists = {
            "/api/v1/nodes": {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": [i for i in items if i["kind"] == "Node"]},
            "/api/v1/pods": {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": [i for i in items if i["kind"] == "Pod"]},
        }
        self.paths: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                stub.paths.append(path)
                body: Any
                if forbid:
                    code, body = 403, {"kind": "Status", "code": 403, "message": f'{path.rsplit("/", 1)[-1]} is forbidden: User "dev" cannot list resource'}
                else:
                    code, body = (200, lists[path]) if path in lists else (404, {"kind": "Status", "code": 404, "message": "not found"})
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return str(path)


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    server = StubApiServer()
    yield server
    server.close()


def test_a_live_cluster_shows_the_same_as_its_dump(stub: StubApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _kubeconfig(tmp_path, stub.url)
    code, live, err = _run(capsys, "--kubeconfig", kubeconfig, "-o", "json")
    assert (code, err) == (0, "")
    assert sorted(set(stub.paths)) == ["/api/v1/nodes", "/api/v1/pods"]
    code, dumped, _ = _run(capsys, "--from", str(CLUSTER_DUMP), "-o", "json")
    live_doc, dump_doc = json.loads(live), json.loads(dumped)
    assert live_doc.pop("source") == f"cluster (kubeconfig {kubeconfig})"
    dump_doc.pop("source")
    assert live_doc == dump_doc

    # the default resolution, as kubectl: $KUBECONFIG (read by the client at import, hence a new process)
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"} | {"KUBECONFIG": kubeconfig}
    command = [sys.executable, "-m", "tessera.cli.main", "inspect", "--pool", "t4-exclusive"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Source: cluster (only pool t4-exclusive)\n")


def test_rbac_refusal_says_what_is_needed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = StubApiServer(forbid=True)
    try:
        code, out, err = _run(capsys, "--kubeconfig", _kubeconfig(tmp_path, server.url))
    finally:
        server.close()
    assert (code, out) == (2, "")
    assert err.startswith("error: the API server refused to list nodes or pods (403: nodes is forbidden")
    assert "needs get/list on nodes and pods in all namespaces" in err and err.count("\n") == 1


def test_an_unreachable_api_server_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    code, out, err = _run(capsys, "--kubeconfig", _kubeconfig(tmp_path, f"https://127.0.0.1:{port}"))
    assert (code, out) == (2, "")
    assert err.startswith("error: cannot reach the Kubernetes API server (") and "Connection refused" in err
    assert err.rstrip().endswith("or inspect a dump with --from FILE") and err.count("\n") == 1


def test_console_command_reads_stdin_and_never_shows_a_traceback() -> None:
    def tessera(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tessera.cli.main", "inspect", *args]
        return subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)

    ok = tessera("--from", "-", "-o", "json", stdin=CLUSTER_DUMP.read_text())
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["source"] == "file -"
    bad = tessera("--from", "-", stdin='{"kind": "List", "items": []}')
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "error: <stdin>: no Node objects; dump nodes and pods together with `kubectl get nodes,pods -A -o json`\n"
