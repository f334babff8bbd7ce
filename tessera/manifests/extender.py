"""The scheduler extender: `tessera scheduler serve` replicas behind a ClusterIP Service.

The extender's guarantee that no two pods get the same GPU capacity rests on one binder: binds
are serialised in the binder's memory. With leader election that binder is whichever replica holds
the Lease `tessera.model.contract.EXTENDER_LEASE` in Tessera's namespace, so several replicas are
safe, and more than one is what keeps shared-GPU scheduling going through restarts:

- `scheduler.extender.replicas` (default 2). Every replica lists and watches nodes and pods, so a
  standby's cache is warm; the leader alone binds and expires reservations. Every replica that has
  synced answers /healthz and /readyz, and a standby forwards kube-scheduler's calls to the
  leader's advertised `http://$(POD_IP):8888`, so the Service keeps routing to all of them.
- The flags are kube-scheduler's (`--leader-elect-*`, timing from
  `scheduler.extender.leaderElection`, Go durations; rules and defaults in
  `tessera.model.leader_election`). `POD_NAME` is the replica's identity in the Lease.
- `RollingUpdate` with maxSurge 1 and maxUnavailable 0: a new replica starts, syncs and stands by
  before an old one is stopped. The old leader's SIGTERM releases the Lease (planned handover), so
  a standby takes over within a retry period instead of a lease duration.
- `terminationGracePeriodSeconds` (`termination_grace_seconds`) covers the three waits of a
  departing leader, in order: the calls in flight (kube-scheduler gives up on them after
  `scheduler.httpTimeoutSeconds`), the Lease release (one API write, bounded by the API client's
  request timeout), and forwarding calls that still arrive through endpoints not yet updated
  until a standby leads (at most one lease duration, when the release did not land). A replica
  that finishes sooner exits sooner; the grace period only bounds the wait.
- Spread: `topologySpreadConstraints` over nodes and zones, `whenUnsatisfiable: ScheduleAnyway`.
  A required rule (DoNotSchedule, or required pod anti-affinity) would leave the second replica
  Pending on a one-node dev or kind cluster, and would stall every rolling update on a cluster with
  as many system nodes as replicas (the surge pod has no free node). Spread constraints rather than
  preferred anti-affinity: they balance 3-5 replicas over fewer nodes evenly instead of only
  avoiding occupied nodes, and `matchLabelKeys: [pod-template-hash]` spreads the new revision's
  replicas among themselves during a rollout, so old pods about to stop do not pull two new ones
  onto one node.
- PodDisruptionBudget `maxUnavailable: 1`, for every replica count: drains evict one replica at a
  time and never the last healthy one while another replica is down; with `replicas: 1` the one
  pod may still be evicted, so a drain never hangs on it (`minAvailable: 1` would block it forever).
  At 3+ replicas it also keeps all but one up, where `minAvailable: 1` would let drains take all
  but one. `unhealthyPodEvictionPolicy: AlwaysAllow` lets a drain evict a replica that is not ready.
"""
from __future__ import annotations

import math
from typing import Any, Final

from tessera.kube.client import ClientSettings
from tessera.model.contract import EXTENDER_LEASE, EXTENDER_PORT, EXTENDER_SERVICE, PRIORITY_CLASS_CRITICAL
from tessera.model.leader_election import format_go_duration
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    env,
    field_env,
    http_probe,
    metadata,
    obj,
    policy_rule,
    resources,
    restricted_security_context,
    selector_labels,
    service_account,
    tmp_mount,
    tmp_volume,
)
from tessera.manifests.pools import pools_env, pools_mount, pools_volume
from tessera.manifests.rbac import cluster_grant, namespaced_grant
from tessera.manifests.scheduler import preempt_budget_seconds
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "extender"
NAME: Final = EXTENDER_SERVICE
LEADER_ELECTION_ROLE: Final = f"{NAME}:leader-election"
# Downward-API variables the runtime reads: its identity in the Lease, its namespace, and the
# address standbys forward to while this replica leads.
POD_NAME_ENV: Final = "POD_NAME"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"
POD_IP_ENV: Final = "POD_IP"
SPREAD_TOPOLOGY_KEYS: Final = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")


def extender_command(settings: PlatformSettings) -> list[str]:
    """The container command; the listen address must be reachable from the scheduler pods and
    from the other replicas (standbys forward to the leader's pod IP)."""
    timing = settings.scheduler.extender.leader_election
    return [
        "tessera",
        "scheduler",
        "serve",
        "--bind-address",
        "0.0.0.0",
        "--port",
        str(EXTENDER_PORT),
        "--placement",
        settings.scheduler.placement,
        "--log-level",
        settings.scheduler.log_level.upper(),
        "--preempt-budget",
        str(preempt_budget_seconds(settings)),
        "--leader-elect=true",
        f"--leader-elect-lease-duration={format_go_duration(timing.lease_duration_s)}",
        f"--leader-elect-renew-deadline={format_go_duration(timing.renew_deadline_s)}",
        f"--leader-elect-retry-period={format_go_duration(timing.retry_period_s)}",
        f"--leader-elect-resource-name={EXTENDER_LEASE}",
        f"--leader-elect-resource-namespace={settings.namespace}",
        f"--advertise-address=$({POD_IP_ENV})",
    ]


def extender_rules() -> list[dict[str, Any]]:
    """Exactly the cluster-wide API calls `tessera.kube.client` makes for the extender."""
    return [
        # cache of pods (allocation records) and bind-time annotations
        policy_rule([""], ["pods"], ["get", "list", "watch", "patch"]),
        policy_rule([""], ["pods/binding"], ["create"]),
        # GPU inventory comes from the node annotation written by the node DaemonSet
        policy_rule([""], ["nodes"], ["get", "list", "watch"]),
        # the per-pod allocation ConfigMap lives in the pod's namespace; the pod owns it through an
        # ownerReference (blockOwnerDeletion unset), so garbage collection deletes it: no delete verb
        policy_rule([""], ["configmaps"], ["create", "get", "update"]),
        policy_rule([""], ["events"], ["create", "patch"]),
        policy_rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def dra_score_rules() -> list[dict[str, Any]]:
    """Only with a dra pool: /dra/prioritize lists and watches the GPU ResourceSlices and the
    ResourceClaims (their allocations are the usage) and reads the claims of the pod it scores
    (`tessera.scheduler.dra_scores`, `dra_view`). Read-only."""
    return [
        policy_rule(["resource.k8s.io"], ["resourceslices"], ["list", "watch"]),
        policy_rule(["resource.k8s.io"], ["resourceclaims"], ["get", "list", "watch"]),
    ]


def leader_election_rules() -> list[dict[str, Any]]:
    """Leader election's calls: GET, PUT and POST of the one Lease, in Tessera's namespace only
    (a Role, not a ClusterRole); no list, no watch."""
    return [
        # RBAC cannot restrict `create` by resourceNames: the object's name may not be known when the
        # request is authorized (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources).
        # The Role's namespace bounds it instead: a Lease created under another name elects nobody.
        policy_rule(["coordination.k8s.io"], ["leases"], ["create"]),
        policy_rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [EXTENDER_LEASE]),
    ]


def termination_grace_seconds(settings: PlatformSettings) -> int:
    """Calls in flight + the Lease release write + forwarding until a standby leads (module docstring)."""
    in_flight = settings.scheduler.http_timeout_seconds
    release = ClientSettings().request_timeout_s
    takeover = settings.scheduler.extender.leader_election.lease_duration_s
    return math.ceil(in_flight + release + takeover)


def _spread() -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(COMPONENT, NAME)},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key in SPREAD_TOPOLOGY_KEYS
    ]


def _deployment(settings: PlatformSettings) -> KubeObject:
    port = {"name": "http", "containerPort": EXTENDER_PORT, "protocol": "TCP"}
    downward = [
        field_env(POD_IP_ENV, "status.podIP"),
        field_env(POD_NAME_ENV, "metadata.name"),
        field_env(POD_NAMESPACE_ENV, "metadata.namespace"),
    ]
    container = {
        "name": "extender",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": extender_command(settings),
        "env": [*env(pools_env()), *downward],
        "ports": [port],
        # /healthz answers 503 until the cache is in sync: allow up to 5 minutes for a first list of a
        # large cluster before liveness applies
        "startupProbe": http_probe("/healthz", "http", period_seconds=5, failure_threshold=60),
        "livenessProbe": http_probe("/healthz", "http", failure_threshold=6),
        # a crashed replica leaves the Service's endpoints within ~4 s (2 s x 2 failures), about
        # when a standby takes its lease: kube-scheduler's connections stop reaching a dead pod
        # about when there is a new leader to forward to
        "readinessProbe": http_probe("/readyz", "http", period_seconds=2, failure_threshold=2),
        "resources": resources("200m", "256Mi", "2", "2Gi"),
        "securityContext": restricted_security_context(),
        "volumeMounts": [pools_mount(), tmp_mount()],
    }
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it is an API client
        "priorityClassName": PRIORITY_CLASS_CRITICAL,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": termination_grace_seconds(settings),
        "topologySpreadConstraints": _spread(),
        **settings.pull_secrets_spec(),
        "containers": [container],
        "volumes": [pools_volume(), tmp_volume()],
    }
    labels = component_labels(COMPONENT, NAME)
    return obj(
        "apps/v1",
        "Deployment",
        metadata(NAME, COMPONENT, settings.namespace),
        spec={
            "replicas": settings.scheduler.extender.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(COMPONENT, NAME)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": dict(sorted(labels.items()))}, "spec": pod_spec},
        },
    )


def _service(settings: PlatformSettings) -> KubeObject:
    annotations = {}
    if settings.monitoring.enabled:
        annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(EXTENDER_PORT), "prometheus.io/path": "/metrics"}
    return obj(
        "v1",
        "Service",
        metadata(NAME, COMPONENT, settings.namespace, annotations=annotations),
        spec={
            "type": "ClusterIP",
            "selector": selector_labels(COMPONENT, NAME),
            "ports": [{"name": "http", "port": EXTENDER_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    )


def _disruption_budget(settings: PlatformSettings) -> KubeObject:
    """`maxUnavailable: 1` whatever the replica count (module docstring)."""
    spec = {
        "selector": {"matchLabels": selector_labels(COMPONENT, NAME)},
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    return obj("policy/v1", "PodDisruptionBudget", metadata(NAME, COMPONENT, settings.namespace), spec=spec)


def build_extender_objects(settings: PlatformSettings) -> list[KubeObject]:
    """ServiceAccount, RBAC, Deployment, Service and disruption budget of the extender."""
    if not settings.sharing_enabled:
        return []
    return [
        service_account(NAME, COMPONENT, settings.namespace),
        *cluster_grant(NAME, COMPONENT, extender_rules() + (dra_score_rules() if settings.dra_pools else []), NAME, settings.namespace),
        *namespaced_grant(LEADER_ELECTION_ROLE, COMPONENT, leader_election_rules(), NAME, settings.namespace),
        _deployment(settings),
        _service(settings),
        _disruption_budget(settings),
    ]
