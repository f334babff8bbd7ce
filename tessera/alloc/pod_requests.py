"""A pod's resource request computed the way Kubernetes computes it (kube-scheduler, ResourceQuota).

Pure. One function for every resource name, so `tessera.dev/gpu-core`, `tessera.dev/gpu-memory`,
`nvidia.com/*`, cpu and memory are all counted alike. Upstream, read for this (Kubernetes 1.30 and
the newest release):

- kubernetes/kubernetes `pkg/apis/core/v1/defaults.go` `SetDefaults_Pod` (v1.30 and master): a
  container whose limits name a resource its requests do not gets the request defaulted to the
  limit, for containers and init containers. The API server does this before any admission
  plugin, so an admission webhook and ResourceQuota both see defaulted requests; `effective_requests`
  replays it for objects that did not go through the API server (dumps, tests, traces).
- `PodRequests` in `pkg/api/v1/resource/helpers.go` (v1.30, used by kube-scheduler's NodeResourcesFit
  `computePodResourceRequest` and by the ResourceQuota pod evaluator `PodUsageFunc` in
  `pkg/quota/v1/evaluator/core/pods.go`), moved to `staging/src/k8s.io/component-helpers/resource/
  helpers.go` (`PodRequests` -> `AggregateContainerRequests` -> `aggregateContainerResourcesByFn`)
  in newer releases with the same arithmetic:
    * app containers are summed;
    * a restartable init container (`restartPolicy: Always`, a sidecar, KEP-753) runs for the
      pod's whole life: it is added to the sum, and to a running total of sidecars started so far;
    * a regular init container runs alone after the sidecars before it started: it needs its own
      request plus that running total; the pod needs the largest of those;
    * the pod's request is the larger of the sum and that init peak, per resource;
    * `spec.overhead` (set by the RuntimeClass admission plugin) is added on top.
  Newer releases also honour pod-level `spec.resources` (PodLevelResources), but only for cpu,
  memory and hugepages (`supportedPodLevelResources`), so no GPU resource is affected; in-place
  resize status (`UseStatusResources`) only matters for running pods, not at admission.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tessera.alloc.quantity import parse_quantity

ResourceList = dict[str, Decimal]
RESTART_ALWAYS = "Always"


def effective_requests(container: Mapping[str, Any]) -> ResourceList:
    """The container's requests after API defaulting: a resource with only a limit requests the limit."""
    resources = container.get("resources") or {}
    out: ResourceList = {str(k): parse_quantity(v) for k, v in (resources.get("requests") or {}).items()}
    for key, value in (resources.get("limits") or {}).items():
        out.setdefault(str(key), parse_quantity(value))
    return out


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container with `restartPolicy: Always` (a native sidecar, KEP-753)."""
    return container.get("restartPolicy") == RESTART_ALWAYS


def _add(total: ResourceList, extra: Mapping[str, Decimal]) -> None:
    for key, value in extra.items():
        total[key] = total.get(key, Decimal(0)) + value


def _max(total: ResourceList, other: Mapping[str, Decimal]) -> None:
    for key, value in other.items():
        if value > total.get(key, Decimal(0)) or key not in total:
            total[key] = value


@dataclass(frozen=True)
class PodRequestBreakdown:
    """Where a pod's request comes from, per resource (for messages that say why)."""

    containers: ResourceList = field(default_factory=dict)
    """Sum over `spec.containers`."""
    sidecars: ResourceList = field(default_factory=dict)
    """Sum over restartable init containers."""
    init_peak: ResourceList = field(default_factory=dict)
    """The largest need while a regular init container runs (its request + sidecars started before it)."""
    overhead: ResourceList = field(default_factory=dict)
    """`spec.overhead`."""
    total: ResourceList = field(default_factory=dict)
    """What kube-scheduler and ResourceQuota count: max(containers + sidecars, init peak) + overhead."""

    def explain(self, resource: str) -> str:
        """e.g. "containers 60+30, init peak 40" (parts that are zero are left out)."""
        parts = []
        for label, values in (("containers", self.containers), ("sidecars", self.sidecars), ("init peak", self.init_peak), ("overhead", self.overhead)):
            value = values.get(resource, Decimal(0))
            if value:
                parts.append(f"{label} {_text(value)}")
        return ", ".join(parts) or "nothing"


def _text(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else str(value.normalize())


def pod_request_breakdown(pod: Mapping[str, Any], *, include_overhead: bool = True) -> PodRequestBreakdown:
    """Every resource of the pod, as kube-scheduler's and ResourceQuota's `PodRequests` count it."""
    spec = pod.get("spec") or {}
    containers: ResourceList = {}
    for container in spec.get("containers") or []:
        _add(containers, effective_requests(container))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in spec.get("initContainers") or []:
        requests = effective_requests(container)
        if is_sidecar(container):
            _add(sidecars, requests)
            _max(init_peak, sidecars)  # while this sidecar starts, it and the earlier ones run
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max(init_peak, running)
    total = dict(containers)
    _add(total, sidecars)
    _max(total, init_peak)
    overhead: ResourceList = {}
    if include_overhead:
        overhead = {str(k): parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()}
        _add(total, overhead)
    return PodRequestBreakdown(containers, sidecars, init_peak, overhead, total)


def pod_requests(pod: Mapping[str, Any], resources: Iterable[str] | None = None) -> ResourceList:
    """The pod's request per resource (all resources, or only ``resources``; absent ones are 0)."""
    total = pod_request_breakdown(pod).total
    if resources is None:
        return total
    return {name: total.get(name, Decimal(0)) for name in resources}
