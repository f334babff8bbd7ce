"""What kube-scheduler does with an HTTP extender, enough to drive ours over real HTTP.

Mirrors `pkg/scheduler/framework/extender.go` and `schedule_one.go`: /filter gets NodeNames when
the extender is nodeCacheCapable, else a full NodeList; the reply is read in the same form;
/prioritize gets the surviving nodes; each score is multiplied by the extender weight and by
MaxNodeScore/MaxExtenderPriority (100/10); the best total wins, ties broken at random (seeded
here); then /bind with PodName/PodNamespace/PodUID/Node.
"""
from __future__ import annotations

import http.client
import json
import random
from dataclasses import dataclass, field
from typing import Any

from tessera.kube.api import KubeObject
from tessera.kube.fake import FakeKubeApi

_SCORE_SCALE = 100 // 10  # MaxNodeScore / MaxExtenderPriority


@dataclass
class Attempt:
    """One scheduling cycle of one pod."""

    node: str | None = None
    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    scores: dict[str, int] = field(default_factory=dict)
    error: str = ""


class ExtenderClient:
    """One keep-alive HTTP connection to the extender (kube-scheduler reuses connections too)."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self._conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    def post_raw(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        self._conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = self._conn.getresponse()
        data = resp.read()
        if resp.getheader("Connection", "").lower() == "close":
            self._conn.close()
        return resp.status, data

    def post(self, verb: str, payload: Any) -> tuple[int, Any]:
        status, data = self.post_raw("/" + verb, json.dumps(payload).encode())
        return status, json.loads(data) if data else None

    def get(self, path: str) -> tuple[int, str]:
        self._conn.request("GET", path)
        resp = self._conn.getresponse()
        return resp.status, resp.read().decode()

    def close(self) -> None:
        self._conn.close()


class KubeSchedulerEmulator:
    def __init__(
        self,
        client: ExtenderClient,
        api: FakeKubeApi,
        *,
        node_cache_capable: bool = True,
        weight: int = 1,
        seed: int = 0,
    ) -> None:
        self.client = client
        self.api = api
        self.node_cache_capable = node_cache_capable
        self.weight = weight
        self._rng = random.Random(seed)

    def _args(self, pod: KubeObject, nodes: list[KubeObject]) -> dict[str, Any]:
        if self.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"items": nodes}, "NodeNames": None}

    def schedule(self, namespace: str, name: str, *, nodes: list[KubeObject] | None = None) -> Attempt:
        pod = self.api.get_pod(namespace, name)
        candidates = nodes if nodes is not None else self.api.list_nodes()
        attempt = Attempt()
        status, result = self.client.post("filter", self._args(pod, candidates))
        if status != 200 or result.get("Error"):
            attempt.error = f"filter: {status} {result}"
            return attempt
        if self.node_cache_capable and result.get("NodeNames") is not None:
            attempt.feasible = list(result["NodeNames"])
        else:
            attempt.feasible = [n["metadata"]["name"] for n in (result.get("Nodes") or {}).get("items") or []]
        attempt.failed = dict(result.get("FailedNodes") or {})
        attempt.unresolvable = dict(result.get("FailedAndUnresolvableNodes") or {})
        if not attempt.feasible:
            return attempt
        survivors = [n for n in candidates if n["metadata"]["name"] in set(attempt.feasible)]
        status, priorities = self.client.post("prioritize", self._args(pod, survivors))
        if status != 200:
            attempt.error = f"prioritize: {status} {priorities}"
            return attempt
        attempt.scores = {p["Host"]: int(p["Score"]) for p in priorities}
        totals = {host: attempt.scores.get(host, 0) * self.weight * _SCORE_SCALE for host in attempt.feasible}
        best = max(totals.values())
        chosen = self._rng.choice(sorted(h for h, t in totals.items() if t == best))
        error = self.bind(pod, chosen)
        if error:
            attempt.error = error
        else:
            attempt.node = chosen
        return attempt

    def bind(self, pod: KubeObject, node: str) -> str:
        meta = pod["metadata"]
        status, result = self.client.post(
            "bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        )
        if status != 200:
            return f"bind: HTTP {status} {result}"
        return str(result.get("Error") or "")
