"""kube-scheduler driving an HTTP extender, configured by a KubeSchedulerConfiguration document.

The emulator is built from the configuration the manifests render (`ExtenderEntry.from_config`)
and does with each extender field what kube-scheduler does with it, and nothing else: a verb the
configuration does not declare is never called, whatever the extender serves. What it follows,
for Kubernetes 1.30 (our stacks' version) and the newest release (1.36):

- kubernetes/kube-scheduler `config/v1/types.go` (v0.30.0, v0.36.3): the `Extender` fields;
  the configuration is decoded strictly, so an unknown field is an error.
- kubernetes/kubernetes `pkg/scheduler/apis/config/validation/validation.go`
  (`validateExtenders`): a prioritizeVerb needs a positive weight ("must have a positive weight
  applied to it"); at most one extender binds. The v1 defaulting leaves extenders alone.
- `pkg/scheduler/extender.go` (`HTTPExtender`): POST `strings.TrimRight(urlPrefix, "/") + "/" +
  verb` with a JSON body; any status but 200 is an error ("failed <verb> with extender at URL
  <url>, code <status>"); `httpTimeout` 0 means `DefaultExtenderTimeout` (5 s); `IsInterested`:
  no managedResources = every pod, else a managed resource in the requests or limits of a
  container or init container; with nodeCacheCapable the bodies carry `NodeNames` and
  `NodeNameToMetaVictims`, else a `NodeList` and `NodeNameToVictims`; the unset one is `null`.
- several extenders (`extenders[]` in order; the first is `extender`, the others `others`):
  `findNodesThatPassExtenders` asks each interested one with a filterVerb in turn, on the nodes
  the previous ones left, and skips an ignorable one that fails; `prioritizeNodes` asks each
  interested one with a prioritizeVerb and sums score × its weight × 10 over them
  (`pkg/scheduler/schedule_one.go`, `pkg/scheduler/extender.go` `IsIgnorable`/`IsInterested`).
- `pkg/scheduler/schedule_one.go`: filter plugins first, the extender only on the nodes that
  passed (`findNodesThatPassExtenders`: FailedAndUnresolvableNodes become
  UnschedulableAndUnresolvable, FailedNodes Unschedulable; a NodeNames entry that was not asked
  about is an error); a nominated node is tried alone first (`evaluateNominatedNode`); a single
  feasible node is taken without scoring; `prioritizeNodes` adds score × weight ×
  (MaxNodeScore / MaxExtenderPriority = 10) and ignores prioritize errors; the extender binds when
  it has a bindVerb and is interested, else the default binder does.
- `pkg/scheduler/framework/plugins/noderesources/fit.go` (`fitsRequest`): "Insufficient
  <resource>" for each requested resource beyond allocatable minus what the node's pods request;
  resources with `ignoredByScheduler: true` are skipped.

Preemption (PostFilter) is in `kube_scheduler_preemption.py`.
"""
from __future__ import annotations

import http.client
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final
from urllib.parse import urlparse

import yaml
from kube_scheduler_preemption import DefaultPreemption, PreemptionResult, pod_priority

from tessera.alloc import parse_quantity
from tessera.kube.api import KubeObject
from tessera.kube.fake import FakeKubeApi

SCORE_SCALE: Final = 100 // 10  # MaxNodeScore / MaxExtenderPriority
DEFAULT_EXTENDER_TIMEOUT_S: Final = 5.0
UNSCHEDULABLE: Final = "Unschedulable"
UNRESOLVABLE: Final = "UnschedulableAndUnresolvable"
EXTENDER_FIELDS: Final = frozenset(
    {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS", "tlsConfig", "httpTimeout",
     "nodeCacheCapable", "managedResources", "ignorable"}
)
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TERMINAL = ("Succeeded", "Failed")


class ConfigError(ValueError):
    """kube-scheduler would refuse to start with this configuration."""


def go_duration_seconds(text: str) -> float:
    """metav1.Duration: Go's `time.ParseDuration` ("5s", "1500ms", "1m30s")."""
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ConfigError(f"time: invalid duration {text!r}")
    return total


@dataclass(frozen=True)
class Status:
    code: str  # UNSCHEDULABLE or UNRESOLVABLE
    reasons: tuple[str, ...]


# (pod, node, pods counted on the node) -> None when the pod passes
NodeFilter = Callable[[KubeObject, KubeObject, Sequence[KubeObject]], Status | None]


@dataclass(frozen=True)
class ExtenderEntry:
    """One `extenders[]` entry, as kube-scheduler reads it."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    preempt_verb: str = ""
    weight: int = 0
    node_cache_capable: bool = False
    ignorable: bool = False
    http_timeout_s: float = DEFAULT_EXTENDER_TIMEOUT_S
    managed_resources: frozenset[str] = frozenset()
    ignored_by_scheduler: frozenset[str] = frozenset()

    @staticmethod
    def from_config(document: str | Mapping[str, Any], index: int = 0) -> ExtenderEntry:
        """From a KubeSchedulerConfiguration (YAML text or the parsed document)."""
        config = yaml.safe_load(document) if isinstance(document, str) else document
        if (config.get("apiVersion"), config.get("kind")) != ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"):
            raise ConfigError(f"not a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration: {config.get('apiVersion')}/{config.get('kind')}")
        extenders = config.get("extenders") or []
        if sum(1 for e in extenders if e.get("bindVerb")) > 1:
            raise ConfigError("extenders: Invalid value: only one extender can implement bind")
        raw = dict(extenders[index])
        unknown = sorted(set(raw) - EXTENDER_FIELDS)
        if unknown:
            raise ConfigError(f'strict decoding error: unknown field "extenders[{index}].{unknown[0]}"')
        weight = int(raw.get("weight") or 0)
        if raw.get("prioritizeVerb") and weight <= 0:
            raise ConfigError(f"extenders[{index}].weight: Invalid value: {weight}: must have a positive weight applied to it")
        timeout = go_duration_seconds(str(raw.get("httpTimeout") or "0"))
        managed = list(raw.get("managedResources") or [])
        return ExtenderEntry(
            url_prefix=str(raw["urlPrefix"]),
            filter_verb=str(raw.get("filterVerb") or ""),
            prioritize_verb=str(raw.get("prioritizeVerb") or ""),
            bind_verb=str(raw.get("bindVerb") or ""),
            preempt_verb=str(raw.get("preemptVerb") or ""),
            weight=weight,
            node_cache_capable=bool(raw.get("nodeCacheCapable")),
            ignorable=bool(raw.get("ignorable")),
            http_timeout_s=timeout or DEFAULT_EXTENDER_TIMEOUT_S,
            managed_resources=frozenset(str(r["name"]) for r in managed),
            ignored_by_scheduler=frozenset(str(r["name"]) for r in managed if r.get("ignoredByScheduler")),
        )

    def url_path(self, verb: str) -> str:
        return urlparse(self.url_prefix.rstrip("/") + "/" + verb).path

    @property
    def supports_preemption(self) -> bool:
        return bool(self.preempt_verb)

    def is_interested(self, pod: KubeObject) -> bool:
        if not self.managed_resources:
            return True
        spec = pod.get("spec") or {}
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            resources = container.get("resources") or {}
            if self.managed_resources & {*(resources.get("requests") or {}), *(resources.get("limits") or {})}:
                return True
        return False


def pod_requests(pod: KubeObject) -> dict[str, Decimal]:
    """kube-scheduler's pod request: the sum over containers, or the largest init container when
    bigger, plus pod overhead; a container's request defaults to its limit (API defaulting)."""
    def container(c: Mapping[str, Any]) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {name: parse_quantity(value) for name, value in merged.items()}

    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for name, value in container(c).items():
            total[name] = total.get(name, Decimal(0)) + value
    for c in spec.get("initContainers") or []:
        for name, value in container(c).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    return total


def node_selector_fit() -> NodeFilter:
    """The nodeSelector part of the NodeAffinity filter (pkg/scheduler/framework/plugins/
    nodeaffinity, `ErrReasonPod`): a node missing a selected label is unresolvable for the pod."""

    def check(pod: KubeObject, node: KubeObject, pods: Sequence[KubeObject]) -> Status | None:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            return Status(UNRESOLVABLE, ("node(s) didn't match Pod's node affinity/selector",))
        return None

    return check


def node_resources_fit(ignored: frozenset[str] = frozenset()) -> NodeFilter:
    """The NodeResourcesFit filter over what the pod requests."""

    def check(pod: KubeObject, node: KubeObject, pods: Sequence[KubeObject]) -> Status | None:
        allocatable = {k: parse_quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
        used: dict[str, Decimal] = {}
        for other in pods:
            for name, value in pod_requests(other).items():
                used[name] = used.get(name, Decimal(0)) + value
        if "pods" in allocatable and len(pods) + 1 > allocatable["pods"]:
            return Status(UNSCHEDULABLE, ("Too many pods",))
        reasons = tuple(
            f"Insufficient {name}"
            for name, want in sorted(pod_requests(pod).items())
            if want > 0 and name not in ignored and want > allocatable.get(name, Decimal(0)) - used.get(name, Decimal(0))
        )
        return Status(UNSCHEDULABLE, reasons) if reasons else None

    return check


@dataclass
class Attempt:
    """One scheduling cycle of one pod."""

    node: str | None = None
    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # Unschedulable: preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)
    scores: dict[str, int] = field(default_factory=dict)
    error: str = ""
    preemption: PreemptionResult | None = None


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
        status, data = self.post_raw(verb if verb.startswith("/") else "/" + verb, json.dumps(payload).encode())
        return status, json.loads(data) if data else None

    def get(self, path: str) -> tuple[int, str]:
        self._conn.request("GET", path)
        resp = self._conn.getresponse()
        return resp.status, resp.read().decode()

    def close(self) -> None:
        self._conn.close()


class ExtenderError(Exception):
    pass


class KubeSchedulerEmulator:
    def __init__(
        self,
        client: ExtenderClient,
        api: FakeKubeApi,
        extender: ExtenderEntry,
        *,
        filters: Sequence[NodeFilter] | None = None,
        delete_pod: Callable[[KubeObject], None] | None = None,
        seed: int = 0,
        others: Sequence[ExtenderEntry] = (),
    ) -> None:
        """`filters`: kube-scheduler's own filter plugins (default NodeAffinity's nodeSelector and
        NodeResourcesFit); `delete_pod`:
        what deleting a preemption victim does (default: the API delete); `others`: the
        `extenders[]` entries after `extender`, served by the same `client`'s host."""
        self.client = client
        self.api = api
        self.extender = extender
        self.extenders = [extender, *others]
        self.filters = list(filters) if filters is not None else [node_selector_fit(), node_resources_fit(extender.ignored_by_scheduler)]
        self.delete_pod = delete_pod or (lambda pod: api.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"]))
        self.calls: list[str] = []  # verbs POSTed, in order
        self.nominated: dict[str, str] = {}  # pod uid -> status.nominatedNodeName
        self.preemption = DefaultPreemption(self)
        self._rng = random.Random(seed)

    # --- the HTTPExtender ------------------------------------------------------------------------
    def send(self, verb: str, payload: Any, ext: ExtenderEntry | None = None) -> Any:
        ext = ext or self.extender
        path = ext.url_path(verb)
        self.calls.append(verb if ext is self.extender else path)
        status, body = self.client.post(path, payload)
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {ext.url_prefix.rstrip('/')}/{verb}, code {status}")
        return body

    def _args(self, pod: KubeObject, nodes: Sequence[KubeObject], ext: ExtenderEntry | None = None) -> dict[str, Any]:
        if (ext or self.extender).node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}

    def _extender_filter(self, pod: KubeObject, nodes: list[KubeObject], statuses: dict[str, Status]) -> list[KubeObject]:
        for ext in self.extenders:
            nodes = self._one_filter(ext, pod, nodes, statuses)
        return nodes

    def _one_filter(self, ext: ExtenderEntry, pod: KubeObject, nodes: list[KubeObject], statuses: dict[str, Status]) -> list[KubeObject]:
        if not nodes or not ext.is_interested(pod) or not ext.filter_verb:
            return nodes
        try:
            result = self.send(ext.filter_verb, self._args(pod, nodes, ext), ext)
            if result.get("Error"):
                raise ExtenderError(str(result["Error"]))
        except ExtenderError:
            if ext.ignorable:
                return nodes
            raise
        by_name = {n["metadata"]["name"]: n for n in nodes}
        if ext.node_cache_capable and result.get("NodeNames") is not None:
            for name in result["NodeNames"]:
                if name not in by_name:
                    raise ExtenderError(f"extender {ext.url_prefix!r} claims a filtered node {name!r} which is not found in the input node list")
            feasible = [by_name[name] for name in result["NodeNames"]]
        elif result.get("Nodes") is not None:
            feasible = list((result["Nodes"] or {}).get("items") or [])
        else:
            feasible = []
        unresolvable = dict(result.get("FailedAndUnresolvableNodes") or {})
        for name, message in unresolvable.items():
            statuses[name] = Status(UNRESOLVABLE, (*statuses.get(name, Status(UNRESOLVABLE, ())).reasons, message))
        for name, message in (result.get("FailedNodes") or {}).items():
            if name not in unresolvable:
                statuses[name] = Status(UNSCHEDULABLE, (*statuses.get(name, Status(UNSCHEDULABLE, ())).reasons, message))
        return feasible

    # --- kube-scheduler's own view ---------------------------------------------------------------
    def pods_on(self, node_name: str) -> list[KubeObject]:
        """The pods in kube-scheduler's snapshot of a node: bound there and not finished."""
        return [p for p in self.api.list_pods(node_name=node_name) if (p.get("status") or {}).get("phase") not in _TERMINAL]

    def run_filters(self, pod: KubeObject, node: KubeObject, pods: Sequence[KubeObject]) -> Status | None:
        """RunFilterPluginsWithNominatedPods: pods nominated to the node with at least the pod's
        priority count as if they were there."""
        uid = pod["metadata"]["uid"]
        name = node["metadata"]["name"]
        nominated = [
            p for p in self.api.list_pods()
            if self.nominated.get(p["metadata"]["uid"]) == name and p["metadata"]["uid"] != uid
            and not p["spec"].get("nodeName") and pod_priority(p) >= pod_priority(pod)
        ]
        for check in self.filters:
            status = check(pod, node, [*pods, *nominated])
            if status is not None:
                return status
        return None

    def _find_feasible(self, pod: KubeObject, nodes: list[KubeObject], statuses: dict[str, Status]) -> list[KubeObject]:
        feasible = []
        for node in nodes:
            status = self.run_filters(pod, node, self.pods_on(node["metadata"]["name"]))
            if status is None:
                feasible.append(node)
            else:
                statuses[node["metadata"]["name"]] = status
        return self._extender_filter(pod, feasible, statuses)

    # --- one scheduling cycle --------------------------------------------------------------------
    def schedule(self, namespace: str, name: str) -> Attempt:
        pod, attempt, chosen = self.cycle(namespace, name)
        if chosen is None:
            return attempt
        return self.finish(pod, attempt, chosen)

    def finish(self, pod: KubeObject, attempt: Attempt, chosen: str) -> Attempt:
        """The binding cycle of a pod its scheduling cycle placed on `chosen` (kube-scheduler runs
        it in a goroutine of its own while the next pod's scheduling cycle goes on)."""
        error = self.bind(pod, chosen)
        if error:
            attempt.error = error
        else:
            attempt.node = chosen
            self.nominated.pop(pod["metadata"]["uid"], None)
        return attempt

    def cycle(self, namespace: str, name: str) -> tuple[KubeObject, Attempt, str | None]:
        """The scheduling cycle: filter, preempt or prioritize; the node chosen, or None."""
        pod = self.api.get_pod(namespace, name)
        uid = pod["metadata"]["uid"]
        attempt = Attempt()
        statuses: dict[str, Status] = {}
        nodes = self.api.list_nodes()
        try:
            feasible: list[KubeObject] = []
            nominated = self.nominated.get(uid)
            if nominated is not None:
                feasible = self._find_feasible(pod, [n for n in nodes if n["metadata"]["name"] == nominated], {})
            if not feasible:
                feasible = self._find_feasible(pod, nodes, statuses)
        except ExtenderError as exc:
            attempt.error = str(exc)
            return pod, attempt, None
        attempt.feasible = [n["metadata"]["name"] for n in feasible]
        attempt.failed = {n: "; ".join(s.reasons) for n, s in statuses.items() if s.code == UNSCHEDULABLE}
        attempt.unresolvable = {n: "; ".join(s.reasons) for n, s in statuses.items() if s.code == UNRESOLVABLE}
        if not feasible:
            attempt.preemption = self.preemption.post_filter(pod, statuses, len(nodes))
            if attempt.preemption.error:
                attempt.error = attempt.preemption.error
            if attempt.preemption.nominated:
                self.nominated[uid] = attempt.preemption.nominated
            return pod, attempt, None
        chosen = attempt.feasible[0] if len(feasible) == 1 else self._select_host(pod, feasible, attempt)
        return pod, attempt, chosen

    def _select_host(self, pod: KubeObject, feasible: list[KubeObject], attempt: Attempt) -> str:
        totals = {n["metadata"]["name"]: 0 for n in feasible}
        for ext in self.extenders:
            if not ext.prioritize_verb or not ext.is_interested(pod):
                continue
            try:
                priorities = self.send(ext.prioritize_verb, self._args(pod, feasible, ext), ext)
            except ExtenderError:
                priorities = []  # "Prioritization errors from extender can be ignored"
            scores = {p["Host"]: int(p["Score"]) for p in priorities or []}
            attempt.scores.update(scores)
            for host, score in scores.items():
                if host in totals:
                    totals[host] += score * ext.weight * SCORE_SCALE
        best = max(totals.values())
        return self._rng.choice(sorted(h for h, t in totals.items() if t == best))

    def bind(self, pod: KubeObject, node: str) -> str:
        meta = pod["metadata"]
        if self.extender.bind_verb and self.extender.is_interested(pod):
            payload = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
            try:
                result = self.send(self.extender.bind_verb, payload)
            except ExtenderError as exc:
                return f"bind: {exc}"
            return str(result.get("Error") or "")
        self.api.bind_pod(meta["namespace"], meta["name"], meta["uid"], node)
        return ""
