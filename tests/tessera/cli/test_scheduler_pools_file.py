"""`tessera scheduler serve` reads the pools file: `--pools-file`, or `$TESSERA_POOLS_FILE` as the
Deployment sets it. A subprocess driven over HTTP, as kube-scheduler drives it."""
from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tessera.model.contract import ENV_POOLS_FILE, GPU_CORE
from tessera.scheduler.simulate import SIMULATED_POOL

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nnode-a,32000,131072,1,T4\n"


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {GPU_CORE: "10"}}}]},
    }


def _post(conn: http.client.HTTPConnection, verb: str, payload: Any) -> Any:
    conn.request("POST", f"/{verb}", body=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return json.loads(resp.read())


@pytest.mark.parametrize("via", ["flag", "env"])
def test_shares_per_gpu_from_the_pools_file_caps_the_gpu(tmp_path: Path, via: str) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    pools = tmp_path / "pools.json"
    pools.write_text(json.dumps({SIMULATED_POOL: {"policy": "best-effort", "placement": "binpack", "sharesPerGpu": 1}}))
    args = [sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--simulate", str(nodes), "--port", "0", "--log-level", "WARNING"]
    env = dict(os.environ)
    env.pop(ENV_POOLS_FILE, None)
    if via == "flag":
        args += ["--pools-file", str(pools)]
    else:
        env[ENV_POOLS_FILE] = str(pools)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        conn = http.client.HTTPConnection("127.0.0.1", int(match.group(1)), timeout=30)
        assert _post(conn, "filter", {"Pod": _pod("first"), "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]
        bound = _post(conn, "bind", {"PodName": "first", "PodNamespace": "demo", "PodUID": "uid-first", "Node": "node-a"})
        assert not bound.get("Error"), bound
        second = _post(conn, "filter", {"Pod": _pod("second"), "NodeNames": ["node-a"]})
        assert not second["NodeNames"] and "node-a" in second["FailedNodes"], "one share per GPU from the pools file"
        conn.close()
    finally:
        proc.kill()
        proc.wait(10)
