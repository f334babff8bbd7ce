"""The extender as a stack deploys it for high availability: replicas and rollout, the runtime's
command line, spread, disruption budget, the Lease's RBAC and the network path between replicas.

Stacks go through `tessera render` (a real process, as a release pipeline runs it). Where the
outcome depends on what Kubernetes does with an object (how a budget counts, how RBAC matches a
request, which peers a NetworkPolicy admits), the test emulates that logic, cited at each helper.
"""
from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml
from manifests_helpers import ROOT

from tessera.kube.api import KubeApi
from tessera.kube.client import ClientSettings
from tessera.model.contract import EXTENDER_LEASE, EXTENDER_PORT
from tessera.model.leader_election import DEFAULT_LEASE_DURATION_S

NAME: Final = "tessera-extender"
NAMESPACE: Final = "tessera-system"
STACK: Final = """config:
  tessera:cluster: {provider: existing, name: kind, kubernetesVersion: "1.30.0", kubeconfig: {path: ~/.kube/config}}
  tessera:nodePools:
    - {name: local, kind: shared, nodeSelector: {example.com/gpu-pool: local}, gpuModel: T4, gpuCount: 1, minSize: 1, maxSize: 1}
"""

Objects = dict[tuple[str, str], dict[str, Any]]


def _render(tmp_path: Path, extra: dict[str, Any]) -> Objects:
    """`tessera render` of a one-pool stack with `extra` stack keys (JSON is YAML flow syntax)."""
    stack = tmp_path / "Pulumi.ha.yaml"
    stack.write_text(STACK + "".join(f"  tessera:{key}: {json.dumps(value)}\n" for key, value in extra.items()))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "render", str(stack), "-o", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )
    assert result.returncode == 0, result.stderr
    objects: Objects = {}
    for path in sorted(out.glob("*.yaml")):
        for o in yaml.safe_load_all(path.read_text()):
            if o:
                objects[(o["kind"], o["metadata"]["name"])] = o
    return objects


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any]], Objects]:
    """Renders once per distinct set of stack keys in this module (each render is a process)."""
    done: dict[str, Objects] = {}

    def rendered(extra: dict[str, Any]) -> Objects:
        key = json.dumps(extra, sort_keys=True)
        if key not in done:
            done[key] = _render(tmp_path_factory.mktemp("stack"), extra)
        return done[key]

    return rendered


@pytest.fixture(scope="module")
def default_render(render: Callable[[dict[str, Any]], Objects]) -> Objects:
    return render({})


# --- Deployment: replicas, rollout, the runtime's command line ---

RUNTIME_FLAGS: Final[tuple[tuple[dict[str, Any], int, tuple[str, str, str]], ...]] = (
    # (stack scheduler section, replicas, the leader-election flags the runtime must get)
    ({}, 2, ("4s", "3s", "500ms")),
    ({"extender": {"replicas": 1}}, 1, ("4s", "3s", "500ms")),
    ({"extender": {"replicas": 5, "leaderElection": {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}}}, 5, ("15s", "10s", "2s")),
    ({"httpTimeoutSeconds": 10, "extender": {"leaderElection": {"leaseDurationSeconds": 2, "renewDeadlineSeconds": 1.5, "retryPeriodSeconds": 0.25}}}, 2, ("2s", "1.5s", "250ms")),
)


@pytest.mark.parametrize(("scheduler", "replicas", "durations"), RUNTIME_FLAGS, ids=["defaults", "one replica", "kube-scheduler timing", "short lease"])
def test_rendered_deployment_runs_the_configured_replicas_with_the_leader_election_contract(
    render: Callable[[dict[str, Any]], Objects], scheduler: dict[str, Any], replicas: int, durations: tuple[str, str, str]
) -> None:
    objects = render({"scheduler": scheduler} if scheduler else {})
    deployment = objects[("Deployment", NAME)]
    assert deployment["spec"]["replicas"] == replicas
    # a new replica syncs and stands by before an old one stops
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    lease, renew, retry = durations
    assert container["command"][-7:] == [
        "--leader-elect=true",
        f"--leader-elect-lease-duration={lease}",
        f"--leader-elect-renew-deadline={renew}",
        f"--leader-elect-retry-period={retry}",
        f"--leader-elect-resource-name={EXTENDER_LEASE}",
        f"--leader-elect-resource-namespace={NAMESPACE}",
        "--advertise-address=$(POD_IP)",
    ]
    assert container["command"][:3] == ["tessera", "scheduler", "serve"]
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert downward == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_IP": "status.podIP"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for o in objects.values():
        if not o["apiVersion"].startswith("monitoring.coreos.com"):
            kubernetes_validate.validate(o, "1.30.0", strict=True)


@pytest.mark.parametrize(
    ("scheduler", "grace"),
    [
        ({}, math.ceil(5 + ClientSettings().request_timeout_s + DEFAULT_LEASE_DURATION_S)),
        ({"httpTimeoutSeconds": 20, "extender": {"leaderElection": {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}}},
         math.ceil(20 + ClientSettings().request_timeout_s + 15)),
    ],
    ids=["defaults", "long timeouts"],
)
def test_termination_grace_covers_calls_in_flight_the_release_and_a_takeover(
    render: Callable[[dict[str, Any]], Objects], scheduler: dict[str, Any], grace: int
) -> None:
    objects = render({"scheduler": scheduler} if scheduler else {})
    assert objects[("Deployment", NAME)]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace


def test_replicas_prefer_other_nodes_and_zones_but_a_one_node_cluster_still_runs_them(default_render: Objects) -> None:
    spec = default_render[("Deployment", NAME)]["spec"]["template"]["spec"]
    constraints = spec["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in constraints} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for c in constraints:
        assert c["whenUnsatisfiable"] == "ScheduleAnyway"  # never Pending for want of a second node
        assert c["labelSelector"]["matchLabels"].items() <= default_render[("Deployment", NAME)]["spec"]["template"]["metadata"]["labels"].items()
        assert c["matchLabelKeys"] == ["pod-template-hash"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in json.dumps(spec.get("affinity", {}))


# --- PodDisruptionBudget ---


def _disruptions_allowed(pdb: dict[str, Any], scale: int, healthy: int) -> int:
    """status.disruptionsAllowed as Kubernetes' disruption controller computes it: kubernetes/kubernetes
    (commit 003e86297d18), pkg/controller/disruption/disruption.go, `getExpectedPodCount` (maxUnavailable:
    desired healthy = the controller's scale - maxUnavailable; integer minAvailable: that number) and
    `updatePdbStatus` (allowed = healthy - desired healthy, never below 0)."""
    spec = pdb["spec"]
    desired = max(scale - spec["maxUnavailable"], 0) if "maxUnavailable" in spec else spec["minAvailable"]
    return max(healthy - desired, 0)


@pytest.mark.parametrize(
    ("replicas", "healthy", "evictable"),
    [
        (1, 1, 1),  # the one replica may go: a drain never hangs on it
        (2, 2, 1),  # one at a time
        (2, 1, 0),  # the last healthy replica stays while the other is down
        (3, 3, 1),  # never more than one down, whatever the replica count
        (5, 4, 0),
    ],
)
def test_disruption_budget_lets_drains_evict_one_replica_and_never_the_last_healthy_one(
    render: Callable[[dict[str, Any]], Objects], replicas: int, healthy: int, evictable: int
) -> None:
    objects = render({"scheduler": {"extender": {"replicas": replicas}}})
    pdb = objects[("PodDisruptionBudget", NAME)]
    assert _disruptions_allowed(pdb, replicas, healthy) == evictable
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # a replica that is not ready never blocks a drain
    assert pdb["spec"]["selector"]["matchLabels"].items() <= objects[("Deployment", NAME)]["spec"]["template"]["metadata"]["labels"].items()


# --- RBAC of leader election ---


@dataclass(frozen=True)
class Request:
    """The authorization attributes of one API request (k8s.io/apiserver RequestInfo): a POST to a
    collection has no name, which is why `create` cannot be limited by resourceNames."""

    verb: str
    namespace: str
    name: str
    group: str = "coordination.k8s.io"
    resource: str = "leases"


# KubeApi method -> the request the real client sends for the extender's Lease
LEASE_CALLS: Final = {
    "get_lease": Request("get", NAMESPACE, EXTENDER_LEASE),
    "replace_lease": Request("update", NAMESPACE, EXTENDER_LEASE),
    "create_lease": Request("create", NAMESPACE, ""),
}


def _rule_allows(rule: dict[str, Any], request: Request) -> bool:
    """kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go `RuleAllows`, with
    pkg/apis/rbac/v1/evaluation_helpers.go `VerbMatches`, `APIGroupMatches`, `ResourceMatches`
    and `ResourceNameMatches` (an empty resourceNames matches every name)."""
    names = rule.get("resourceNames") or []
    return (
        bool({"*", request.verb} & set(rule["verbs"]))
        and bool({"*", request.group} & set(rule["apiGroups"]))
        and bool({"*", request.resource} & set(rule["resources"]))
        and (not names or request.name in names)
    )


def _allowed(objects: Objects, service_account: str, request: Request) -> bool:
    """Whether any binding of the ServiceAccount allows the request: a ClusterRoleBinding anywhere,
    a RoleBinding only in its own namespace (the RBAC authorizer's `VisitRulesFor`)."""
    for (kind, _), binding in objects.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == service_account and s["namespace"] == NAMESPACE for s in binding["subjects"]):
            continue
        if kind == "RoleBinding" and binding["metadata"]["namespace"] != request.namespace:
            continue
        role = objects[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        if any(_rule_allows(rule, request) for rule in role["rules"]):
            return True
    return False


def test_every_lease_call_of_the_api_seam_is_in_the_table() -> None:
    lease_methods = {name for name, _ in inspect.getmembers(KubeApi, inspect.isfunction) if "lease" in name}
    assert lease_methods == set(LEASE_CALLS)


@pytest.mark.parametrize("call", sorted(LEASE_CALLS))
def test_leader_election_calls_are_granted(default_render: Objects, call: str) -> None:
    assert _allowed(default_render, NAME, LEASE_CALLS[call])


@pytest.mark.parametrize(
    "request_",
    [
        Request("get", NAMESPACE, "tessera-scheduler"),  # another component's Lease
        Request("update", NAMESPACE, "tessera-scheduler"),
        Request("delete", NAMESPACE, EXTENDER_LEASE),
        Request("patch", NAMESPACE, EXTENDER_LEASE),
        Request("list", NAMESPACE, ""),
        Request("watch", NAMESPACE, ""),
        Request("get", "kube-system", EXTENDER_LEASE),  # the Role holds in Tessera's namespace only
        Request("create", "kube-system", ""),
        Request("update", "kube-node-lease", "node-1"),
    ],
    ids=lambda r: f"{r.verb} {r.namespace}/{r.name or '*'}",
)
def test_nothing_else_about_leases_is_granted(default_render: Objects, request_: Request) -> None:
    assert not _allowed(default_render, NAME, request_)


def test_the_lease_grant_is_a_namespaced_role(default_render: Objects) -> None:
    cluster_rules = default_render[("ClusterRole", NAME)]["rules"]
    assert not any("leases" in rule["resources"] for rule in cluster_rules)
    role = default_render[("Role", f"{NAME}:leader-election")]
    assert role["metadata"]["namespace"] == NAMESPACE


# --- NetworkPolicy: forwarding between replicas, scraping every replica ---


@dataclass(frozen=True)
class Peer:
    namespace: str
    labels: dict[str, str]


EXTENDER_POD: Final = Peer(NAMESPACE, {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "extender"})


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


def _admits(policy: dict[str, Any], peer: Peer, port: int) -> bool:
    """NetworkPolicy ingress (networking.k8s.io/v1 NetworkPolicyPeer): a podSelector alone picks pods
    in the policy's namespace; with a namespaceSelector, pods in the namespaces it picks ({} = all)."""
    for rule in policy["spec"]["ingress"]:
        if port not in {p["port"] for p in rule.get("ports", [])}:
            continue
        for source in rule["from"]:
            in_namespace = peer.namespace == policy["metadata"]["namespace"] if "namespaceSelector" not in source else True
            if in_namespace and _matches(source.get("podSelector", {}), peer.labels):
                return True
    return False


@pytest.mark.parametrize(
    ("monitoring", "peer", "admitted"),
    [
        ({}, EXTENDER_POD, True),  # a standby forwards to the leader
        ({}, Peer(NAMESPACE, {"app.kubernetes.io/name": "tessera-scheduler", "app.kubernetes.io/component": "scheduler"}), True),
        ({}, Peer("monitoring", {"app.kubernetes.io/name": "prometheus"}), True),  # scrapes every replica
        ({}, Peer(NAMESPACE, {"app.kubernetes.io/name": "tessera-webhook", "app.kubernetes.io/component": "webhook"}), False),
        ({}, Peer("default", {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "extender"}), False),  # look-alike elsewhere
        ({"mode": "none", "enabled": False}, EXTENDER_POD, True),
        ({"mode": "none", "enabled": False}, Peer("monitoring", {"app.kubernetes.io/name": "prometheus"}), False),
    ],
    ids=["replica", "scheduler", "prometheus", "webhook", "other namespace", "replica, no monitoring", "prometheus, no monitoring"],
)
def test_extender_port_admits_replicas_scheduler_and_prometheus_only(
    render: Callable[[dict[str, Any]], Objects], monitoring: dict[str, Any], peer: Peer, admitted: bool
) -> None:
    objects = render({"monitoring": monitoring} if monitoring else {})
    policy = objects[("NetworkPolicy", NAME)]
    assert _matches(policy["spec"]["podSelector"], EXTENDER_POD.labels)
    assert _admits(policy, peer, EXTENDER_PORT) is admitted
