"""The extender's decisions for /filter and /prioritize; /bind goes to the binder, /preempt to `preemption`.

Typed in, typed out (`extender_types`); the HTTP adapter does the JSON. Pods that ask for no
Tessera GPU pass through untouched: the extender is normally configured with `managedResources`
so kube-scheduler does not even call it for them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Final

from tessera.alloc import Evaluation, FitFailure, InvalidRequest, PodRequest, pod_request_from_k8s
from tessera.kube.api import KubeObject
from tessera.scheduler.binder import Binder
from tessera.scheduler.extender_types import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    host_priorities,
)
from tessera.scheduler.metrics import ExtenderMetrics
from tessera.scheduler.preemption import PreemptSettings, Preemptor
from tessera.scheduler.state import SchedulerState

NOT_SHARED: Final = "not a Tessera shared GPU node (no tessera.dev/gpus inventory)"
# preemption cannot help with these, so kube-scheduler should not try it
_UNRESOLVABLE: Final = frozenset({FitFailure.UNKNOWN_NODE, FitFailure.GPU_MODEL})

PodSink = Callable[[KubeObject], KubeObject]


def _message(reason: str) -> str:
    return f"tessera: {reason}"


_MESSAGES: Final = {failure: _message(failure.value) for failure in FitFailure}
_NOT_SHARED_MESSAGE: Final = _message(NOT_SHARED)
# Per failure, by identity (hashing an enum member is a Python-level call, once per failed node
# of every /filter): whether it goes to FailedAndUnresolvableNodes, and the message.
_ROUTES: Final = {
    id(failure): (failure in _UNRESOLVABLE, _NOT_SHARED_MESSAGE if failure is FitFailure.UNKNOWN_NODE else _MESSAGES[failure])
    for failure in FitFailure
}


class Extender:
    def __init__(
        self,
        state: SchedulerState,
        binder: Binder,
        *,
        ready: Callable[[], bool],
        pod_sink: PodSink | None = None,
        preempt: PreemptSettings | None = None,
    ) -> None:
        """`pod_sink`: in --simulate, makes the pod exist in the in-memory cluster and returns it."""
        self._state = state
        self._preemptor = Preemptor(state, preempt or PreemptSettings())
        self._binder = binder
        self._ready = ready
        self._pod_sink = pod_sink

    def _request(self, args: ExtenderArgs, *, sink: bool = False) -> PodRequest:
        """`sink`: only /filter creates the pod in --simulate; kube-scheduler always filters a pod
        before it prioritizes or binds it, and the copy costs as much as a warm evaluation."""
        pod = self._pod_sink(args.pod) if sink and self._pod_sink is not None else args.pod
        return pod_request_from_k8s(pod)

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        names = args.candidate_names()
        try:
            request = self._request(args, sink=True)
        except InvalidRequest as exc:
            return self._result(args, [], {}, {n: _message(str(exc)) for n in names})
        if not request.gpu_containers:
            return self._result(args, names, {}, {})
        feasible: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        with self._state.lock:
            self._state.observe_once(request)
            held = self._state.held_node(request.uid)
            evaluations = self._state.evaluations(request, names if held is None else [n for n in names if n != held])
        # This loop runs once per candidate node (1000s): identity tests and locals only.
        gpu, gpu_message, evaluation, routes, get = FitFailure.GPU, _MESSAGES[FitFailure.GPU], Evaluation, _ROUTES, evaluations.get
        for name in names:
            result = get(name)
            if result is None or result.__class__ is evaluation:
                feasible.append(name)  # None: its own reservation (rebuilt after a restart)
            elif result is gpu:
                failed[name] = gpu_message
            else:
                to_unresolvable, message = routes[id(result)]
                (unresolvable if to_unresolvable else failed)[name] = message
        return self._result(args, feasible, failed, unresolvable)

    @staticmethod
    def _result(args: ExtenderArgs, feasible: list[str], failed: dict[str, str], unresolvable: dict[str, str]) -> ExtenderFilterResult:
        if args.node_names is not None or args.nodes is None:
            return ExtenderFilterResult(node_names=feasible, failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable)
        keep = set(feasible)
        nodes = [n for n in args.nodes if n["metadata"]["name"] in keep]
        return ExtenderFilterResult(nodes=nodes, failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable)

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        names = args.candidate_names()
        try:
            request = self._request(args)
        except InvalidRequest:
            return host_priorities(names, {})
        if not request.gpu_containers:
            return host_priorities(names, {})
        with self._state.lock:
            held = self._state.held_node(request.uid)
            evaluations = self._state.evaluations(request, names if held is None else [n for n in names if n != held])
        scores = _scale(evaluations)
        if held is not None and held in names:
            # the pod already holds GPUs there (rebuilt reservation): going back re-uses them
            scores = {n: min(s, MAX_EXTENDER_PRIORITY - 1) for n, s in scores.items()}
            scores[held] = MAX_EXTENDER_PRIORITY
        return host_priorities(names, scores)

    def preempt(self, args: ExtenderPreemptionArgs, deadline: float | None = None) -> ExtenderPreemptionResult:
        """Per candidate node, the victims that free the GPU(s) the pod needs (`preemption`), by
        `deadline` (`preempt_deadline`; None: the whole budget from now)."""
        return self._preemptor.preempt(args, deadline)

    def preempt_deadline(self, received_at: float) -> float:
        """When /preempt must answer a request whose first byte arrived at `received_at`
        (`time.monotonic()`): the budget covers reading and decoding the body too."""
        return self._preemptor.deadline(received_at)

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        return self._binder.bind(args)

    def health(self) -> tuple[bool, str]:
        if not self._ready():
            return False, "syncing nodes and pods from the API server"
        nodes, pods, gpus, allocated = self._state.summary()
        return True, f"ok: {nodes} nodes, {gpus} GPUs, {pods} pods, {allocated:.2f} GPUs allocated"

    def refresh_metrics(self, metrics: ExtenderMetrics) -> None:
        self._state.refresh_metrics(metrics)


def _scale(evaluations: dict[str, Evaluation | FitFailure]) -> dict[str, int]:
    """kube-scheduler's 0..10: only the policy's best key gets 10 (so rounding can never tie
    another node with the extender's choice); the others 0..9 by min-max of the score. O(n), one
    pass per step in C where it can (a /prioritize over 500 feasible nodes runs it each cycle)."""
    scores = dict.fromkeys(evaluations, MIN_EXTENDER_PRIORITY)
    evaluation = Evaluation
    valid = [(n, e.key) for n, e in evaluations.items() if e.__class__ is evaluation]
    if not valid:
        return scores
    best = max([key for _, key in valid])
    others = [key[0] for _, key in valid if key != best]
    low, high = (min(others), max(others)) if others else (0.0, 0.0)
    span = high - low
    top = MAX_EXTENDER_PRIORITY - 1
    for name, key in valid:
        if key == best:
            scores[name] = MAX_EXTENDER_PRIORITY
        elif span > 0:
            scores[name] = int(top * (key[0] - low) / span)
        else:
            scores[name] = top
    return scores
