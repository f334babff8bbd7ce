"""Metrics the scheduler extender serves (`/metrics` of `tessera scheduler serve`).

Names, types, labels and meaning are a contract with Prometheus, the dashboards and the alerts;
`tessera.scheduler.metrics` registers and fills them.
"""
from __future__ import annotations

from typing import Final

from tessera.model.metrics.spec import MetricSpec

POOL_LABELS: Final = ("pool", "kind")

REQUESTS: Final = MetricSpec("tessera_extender_requests", "counter", "HTTP requests by verb and status code", ("verb", "code"))
REQUEST_SECONDS: Final = MetricSpec("tessera_extender_request_seconds", "histogram", "Time to answer, by verb", ("verb",))
BINDS: Final = MetricSpec("tessera_extender_binds", "counter", "Bind results", ("outcome",))
API_CONFLICTS: Final = MetricSpec("tessera_extender_api_conflicts", "counter", "409 answers from the API server during bind (retried)")
EXPIRED: Final = MetricSpec("tessera_extender_expired_reservations", "counter", "Annotated-but-unbound reservations released after the TTL")
NODES: Final = MetricSpec("tessera_extender_nodes", "gauge", "Shared GPU nodes in the cache")
PODS: Final = MetricSpec("tessera_extender_pods", "gauge", "Pods holding GPU capacity in the cache")
GPUS: Final = MetricSpec("tessera_extender_gpus", "gauge", "GPUs in the cache")
MIX_EPOCH: Final = MetricSpec("tessera_extender_mix_epoch", "gauge", "Policy epochs so far: workload-mix snapshots, reservations switching, GPU models changing (each re-scores every node)")
ALLOCATED_GPU: Final = MetricSpec("tessera_extender_allocated_gpu", "gauge", "GPU compute allocated, in GPUs (1.0 = one whole GPU)")
POOL_CAPACITY: Final = MetricSpec("tessera_pool_gpu_capacity", "gauge", "Healthy GPUs of the pool's nodes in the extender's cache", POOL_LABELS)
POOL_ALLOCATED: Final = MetricSpec("tessera_pool_gpu_allocated", "gauge", "GPU compute allocated in the pool, in GPUs (1.0 = one whole GPU)", POOL_LABELS)
POOL_STRANDED: Final = MetricSpec(
    "tessera_pool_gpu_stranded",
    "gauge",
    "Idle GPU compute of the pool that the pods seen in the cluster could not use (FGD's expected fragmentation), in GPUs",
    POOL_LABELS,
)

LEADER: Final = MetricSpec(
    "tessera_extender_leader", "gauge", "1 on the replica that holds the leader Lease (it binds and expires reservations), 0 on a standby"
)
LEADER_TRANSITIONS: Final = MetricSpec(
    "tessera_extender_leader_transitions",
    "counter",
    "Leadership changes of this replica: acquired, released (planned handover on SIGTERM) or lost (not renewed within the renew deadline)",
    ("event",),
)
RECORD_CONFLICTS: Final = MetricSpec(
    "tessera_extender_record_conflicts",
    "gauge",
    "Pods whose allocation records conflict, by reason: overcommit (with the others on a GPU more than 100 % of it; all still counted, "
    "so nothing more lands there), unknown_gpu (a GPU the node does not report), unreadable (a record that does not parse)",
    ("reason",),
)
AMBIGUOUS_WRITES: Final = MetricSpec(
    "tessera_extender_ambiguous_writes",
    "counter",
    "API writes that got no answer or a 5xx, by write (record, strip, binding) and how reading back resolved them "
    "(applied, not_applied, unresolved: capacity kept until a later read resolves it)",
    ("write", "outcome"),
)
FORWARDED: Final = MetricSpec(
    "tessera_extender_forwarded_requests",
    "counter",
    "Requests a standby passed on to the leader, by verb and result (ok, no_leader, failed)",
    ("verb", "result"),
)

METRICS: Final = (
    REQUESTS, REQUEST_SECONDS, BINDS, API_CONFLICTS, EXPIRED, NODES, PODS, GPUS, MIX_EPOCH, ALLOCATED_GPU,
    POOL_CAPACITY, POOL_ALLOCATED, POOL_STRANDED, LEADER, LEADER_TRANSITIONS, RECORD_CONFLICTS, AMBIGUOUS_WRITES, FORWARDED,
)
