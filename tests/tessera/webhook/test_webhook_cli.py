"""`tessera webhook serve` as a process: bad input exits cleanly; good input serves HTTPS."""
from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from webhook_helpers import container, pod, review_body

from tessera.model import contract
from tessera.webhook.tls import generate_bundle

CLI = [sys.executable, "-m", "tessera.cli.main", "webhook", "serve"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def test_missing_settings_file_is_a_clear_error(tmp_path: Path) -> None:
    result = _run("--config", str(tmp_path / "absent.json"), "--cert-file", "x", "--key-file", "y")
    assert result.returncode == 2
    assert "cannot read webhook settings" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("settings", "args", "message"),
    [
        ({"sharedPools": ["a"], "qgpuAliasPools": ["b"]}, [], "not shared pools"),
        ({"sharedPools": ["a"]}, [], "--cert-file"),
        ({"sharedPools": ["a"]}, ["--cert-file", "x"], "both --cert-file and --key-file"),
        ({"sharedPools": ["a"], "quotas": {"team-a": {"tessera.dev/gpu-core": -1}}}, [], "quotas.team-a.tessera.dev/gpu-core must be a whole number >= 0"),
        ({"sharedPools": ["a"], "quotas": ["team-a"]}, [], "quotas must map namespaces"),
    ],
    ids=["alias-pool-not-shared", "no-tls-no-files", "cert-without-key", "negative-quota", "quota-list"],
)
def test_settings_mistakes_exit_2_with_a_hint(tmp_path: Path, settings: dict[str, object], args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.cli.main import main

    config = tmp_path / "webhook.json"
    config.write_text(json.dumps(settings))
    assert main(["webhook", "serve", "--config", str(config), *args]) == 2
    assert message in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serves_admission_reviews_with_given_certificate(tmp_path: Path) -> None:
    bundle = generate_bundle(("localhost",), dt.datetime.now(dt.timezone.utc))
    (tmp_path / "tls.crt").write_text(bundle.cert_pem)
    (tmp_path / "tls.key").write_text(bundle.key_pem)
    config = tmp_path / "webhook.yaml"
    config.write_text("sharedPools: [a]\nqgpuAliasPools: [a]\n")
    port = _free_port()
    proc = subprocess.Popen(
        [*CLI, "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--drain-seconds", "0.5"]
        + ["--cert-file", str(tmp_path / "tls.crt"), "--key-file", str(tmp_path / "tls.key")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    context = ssl.create_default_context(cadata=bundle.ca_pem)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
                conn.request("GET", "/readyz")
                assert conn.getresponse().status == 200
                break
            except (ConnectionRefusedError, OSError):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else b""
                assert time.monotonic() < deadline, "webhook process did not become ready"
                time.sleep(0.2)
        body = review_body(pod(container("c", {contract.QGPU_CORE: "25", contract.QGPU_MEMORY: "3"})))
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
        conn.request("POST", "/mutate", json.dumps(body), {"Content-Type": "application/json"})
        response = json.loads(conn.getresponse().read())["response"]
        patch = json.loads(base64.b64decode(response["patch"]))
        assert {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {contract.GPU_CORE: "25", contract.GPU_MEMORY: "3072"}} in patch
        proc.terminate()  # SIGTERM: drain, then exit cleanly
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
