"""`serve --simulate NODES.csv --simulate-pods PODS.csv --simulate-fill 0.9`: start already loaded.

Loading a 10,000-node simulated cluster to 90 % of its GPUs through HTTP is ~100,000 scheduling
cycles, each a /filter and /prioritize over every node plus a /bind: about an hour on a 2-core
machine. This fill reaches the state those cycles reach, in the extender's own process, before it
serves:

- arrivals: the trace's GPU pods shuffled with the seed and cycled (what `bench/extender.py` and
  `bench/scale.py` send), named `<prefix>-000001`, ...; each is created in the fake API as /filter
  creates it (`ensure_pod`) and read back as the extender reads it (`pod_request_from_k8s`, GPU
  compute rounded to whole percent);
- each arrival is fed into the workload mix exactly as /filter feeds it (`observe_once`, also for
  pods that fit nowhere);
- the node is the one filter + prioritize rank first for a client that takes the highest score,
  first in node order on a tie: the policy's best key, ties to the earliest node. A mirror
  `Cluster` of the cache (same nodes in the same order, same mix, same reservations) finds it with
  the simulator's best-node index (`Cluster.schedule`) instead of scoring every node per pod;
- the bind goes through the production `Binder`: reservation in the cache, allocation ConfigMap,
  annotation patch with the pod's resourceVersion, Binding.

It runs before the sync threads start (`ExtenderService.start(prepare=...)`): the cache gets the
nodes as the node informer's first list gives them, the binds update it directly, and the pod
informer's first list then finds every record in place, as after a restart. (With the sync running,
the fill writes four watch events per pod faster than one thread applies them: the watch falls
behind the fake's kept history, gets 410 Gone and relists all pods again and again.)

`tests/tessera/scheduler/test_simulate_fill.py` checks that a fill and the same arrivals sent
through /filter, /prioritize and /bind leave identical allocations and workload mix.
"""
from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tessera.alloc import Cluster, PodRequest, pod_request_from_k8s
from tessera.alloc.model import MILLI_PER_GPU
from tessera.kube.fake import FakeKubeApi
from tessera.scheduler.binder import Binder
from tessera.scheduler.extender_types import ExtenderBindingArgs
from tessera.scheduler.simulate import ensure_pod, trace_pod_manifest
from tessera.scheduler.state import SchedulerState
from tessera.sim.trace import load_pods

FILL_NAMESPACE = "default"
FILL_PREFIX = "fill"
_GIVE_UP_AFTER = 2000  # arrivals in a row that fit nowhere: the cluster is as full as it gets


@dataclass(frozen=True)
class FillResult:
    arrivals: int  # pods sent, placed or not
    bound: int
    unplaced: int
    allocated_gpus: float
    capacity_gpus: int
    seconds: float

    @property
    def allocated_share(self) -> float:
        return self.allocated_gpus / self.capacity_gpus if self.capacity_gpus else 0.0


class FillError(Exception):
    """The fill could not do what /bind would have done (a bug, not bad input)."""


def trace_arrivals(pods_csv: Path, seed: int) -> list[PodRequest]:
    """The trace's GPU pods in arrival order (shuffled with `seed`); the fill cycles through them.
    Raises `tessera.sim.trace.TraceError` on a bad file."""
    trace = [p.request for p in load_pods(pods_csv) if p.request.gpu_milli_total > 0]
    random.Random(seed).shuffle(trace)
    return trace


def cycle(trace: Sequence[PodRequest]) -> Iterator[PodRequest]:
    while trace:
        yield from trace


@dataclass(frozen=True)
class FillProgress:
    """How far a fill has got."""

    bound: int
    allocated_share: float
    target: float
    seconds: float

    def line(self) -> str:
        return f"simulated fill: {self.bound} pods bound, {100 * self.allocated_share:.1f} % of the GPUs of {100 * self.target:.0f} %, {self.seconds:.0f} s"


def fill(
    api: FakeKubeApi,
    state: SchedulerState,
    binder: Binder,
    arrivals: Iterator[PodRequest],
    target: float,
    *,
    prefix: str = FILL_PREFIX,
    namespace: str = FILL_NAMESPACE,
    max_arrivals: int | None = None,
    on_progress: Callable[[FillProgress], None] | None = None,
    progress_every_s: float = 5.0,
) -> FillResult:
    """Bind arrivals until `target` (share of healthy GPU capacity) is allocated or nothing fits.
    No HTTP request may run meanwhile. The cache is first given the API's nodes (a no-op for
    nodes it holds already). `on_progress` hears how far it got about every `progress_every_s`."""
    started = time.perf_counter()
    reported = started
    state.replace_nodes(api.list_nodes())
    with state.lock:
        # copies carry the GPUs' and hosts' usage and the mix seen so far, so pods already placed
        # and observed count in the mirror too
        mirror = Cluster(
            [copy.deepcopy(n) for n in state.cluster.nodes.values()],
            policy=state.cluster.default_policy,
            mix=copy.deepcopy(state.cluster.mix),
        )
        capacity = state.cluster.usage()
        allocated = capacity.allocated_milli
    goal = target * capacity.capacity_milli
    sent = bound = unplaced = in_a_row = 0
    while allocated < goal and in_a_row < _GIVE_UP_AFTER and (max_arrivals is None or sent < max_arrivals):
        trace_request = next(arrivals, None)
        if trace_request is None:
            break
        sent += 1
        manifest = trace_pod_manifest(trace_request, namespace=namespace)
        manifest["metadata"]["name"] = f"{prefix}-{sent:06d}"
        stored = ensure_pod(api, manifest)
        request = pod_request_from_k8s(stored)
        with state.lock:
            state.observe_once(request)
        mirror.observe(request)
        choice = mirror.schedule(request)
        if choice is None:
            unplaced += 1
            in_a_row += 1
            continue
        in_a_row = 0
        meta = stored["metadata"]
        result = binder.bind(ExtenderBindingArgs(str(meta["name"]), namespace, str(meta["uid"]), choice.node))
        with state.lock:
            placement = state.cluster.placement(request.uid)
        if result.error or placement is None:
            raise FillError(f"bind of {meta['name']} to {choice.node} failed: {result.error or 'no reservation'}")
        mirror.reserve(request, placement)
        bound += 1
        allocated += request.gpu_milli_total
        if on_progress is not None and time.perf_counter() - reported >= progress_every_s:
            reported = time.perf_counter()
            on_progress(FillProgress(bound, allocated / max(capacity.capacity_milli, 1), target, reported - started))
    return FillResult(sent, bound, unplaced, allocated / MILLI_PER_GPU, capacity.gpus, time.perf_counter() - started)
