"""`tessera repartition apply` as the CronJob runs it: a process, the real Kubernetes client, a
kubeconfig pointing at a loopback stand-in API server that records the patches."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from json_api_stand_in import serving

from tessera.model import contract
from tessera.repartition import PoolPlan, ScheduledLayout, layout_labels, plan_document

PLAN = PoolPlan(
    "frac",
    "shared",
    tuple(ScheduledLayout(i, cron, "UTC", layout_labels("shared", "frac", i, n), name) for i, (cron, n, name) in enumerate([("0 8 * * *", 4, "day"), ("0 20 * * *", 1, "night")])),
)


class ApiStandIn:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            name: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {contract.LABEL_POOL: pool}}}
            for name, pool in (("gpu-1", "frac"), ("gpu-2", "frac"), ("other", "infer"))
        }
        self.patches: list[tuple[str, str, Any]] = []

    def handle(self, method: str, url: str, content_type: str, body: Any) -> tuple[int, Any]:
        parsed = urlparse(url)
        if method == "GET" and parsed.path == "/api/v1/nodes":
            selector = parse_qs(parsed.query).get("labelSelector", [""])[0]
            key, _, value = selector.partition("=")
            items = [n for n in self.nodes.values() if n["metadata"]["labels"].get(key) == value]
            return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": items}
        if method == "PATCH" and parsed.path.startswith("/api/v1/nodes/"):
            name = parsed.path.rsplit("/", 1)[1]
            self.patches.append((name, content_type, body))
            self.nodes[name]["metadata"]["labels"].update(body["metadata"]["labels"])
            return 200, self.nodes[name]
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "message": f"{method} {url}"}


@pytest.fixture()
def api(tmp_path: Path) -> Iterator[tuple[ApiStandIn, Path]]:
    state = ApiStandIn()

    with serving(state.handle) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": url}}],
                    "users": [{"name": "u", "user": {"token": "test"}}],
                    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "ctx",
                }
            )
        )
        yield state, kubeconfig


def _run(plan: Path, kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tessera.cli.main", "repartition", "apply", "--plan", str(plan), "--pool", "frac", "--layout-index", "1", "--kubeconfig", str(kubeconfig), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_apply_process_relabels_the_pools_nodes_through_the_real_client(api: tuple[ApiStandIn, Path], tmp_path: Path) -> None:
    state, kubeconfig = api
    plan = tmp_path / "plan.json"
    plan.write_text(plan_document([PLAN]))

    dry = _run(plan, kubeconfig, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would relabel gpu-1" in dry.stdout and state.patches == []

    result = _run(plan, kubeconfig)
    assert result.returncode == 0, result.stderr
    assert "pool frac: layout 1 (night)" in result.stdout
    expected = {"metadata": {"labels": {contract.LABEL_LAYOUT: "1", contract.LABEL_MAX_SHARES_PER_GPU: "1"}}}
    assert state.patches == [("gpu-1", "application/merge-patch+json", expected), ("gpu-2", "application/merge-patch+json", expected)]
    assert contract.LABEL_LAYOUT not in state.nodes["other"]["metadata"]["labels"]

    again = _run(plan, kubeconfig)
    assert again.returncode == 0 and "unchanged gpu-1" in again.stdout and len(state.patches) == 2
