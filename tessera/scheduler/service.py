"""Wiring: one extender = cache + binder + sync loops + HTTP server over one `KubeApi`, plus, with
leader election, the elector and the router that passes a standby's requests to the leader."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tessera.alloc import DEFAULT_POLICY, Cluster, PlacementPolicy
from tessera.kube.api import KubeApi
from tessera.scheduler.binder import Binder, BindSettings
from tessera.scheduler.core import Extender, PodSink
from tessera.scheduler.dra_scores import DraScorer, DraScoreSettings
from tessera.scheduler.http_server import ExtenderHttpServer, ServerSettings
from tessera.scheduler.leader import Leader, LeaderElectionSettings, LeaderElector
from tessera.scheduler.metrics import ExtenderMetrics
from tessera.scheduler.preemption import PreemptSettings
from tessera.scheduler.routing import LeaderRouter, RoutingSettings
from tessera.scheduler.state import SchedulerState, StateSettings
from tessera.scheduler.sync import ClusterSync, SyncSettings


@dataclass(frozen=True)
class ExtenderConfig:
    """Everything `tessera scheduler serve` can set; each part documents its defaults.

    policy: node-level placement policy; default fragmentation-aware (Tessera's best packing).
    pools_file: the mounted pools document (`tessera.model.contract.POOLS_FILE`); default None = pool
        settings from node labels only. In a cluster the CLI passes the mounted file so a
        placement, policy or sharesPerGpu edit applies without relabelling nodes.
    leader_election: default None = this process is the only extender and always leads; set, it
        campaigns for the Lease once its cache is in sync, binds only while it leads, and passes
        every request to the leader while it does not (`routing`).
    handover_s: default 5 s: on a planned stop, how long the leader lets running requests finish
        before it releases the Lease, and then waits for a successor to forward to.
    dra: how `/dra/prioritize` watches ResourceSlices and claims (`dra_scores`).
    """

    policy: PlacementPolicy = DEFAULT_POLICY
    server: ServerSettings = field(default_factory=ServerSettings)
    state: StateSettings = field(default_factory=StateSettings)
    bind: BindSettings = field(default_factory=BindSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    pools_file: Path | None = None
    preempt: PreemptSettings = field(default_factory=PreemptSettings)
    leader_election: LeaderElectionSettings | None = None
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    handover_s: float = 5.0
    dra: DraScoreSettings = field(default_factory=DraScoreSettings)


def _always() -> bool:
    return True


class ExtenderService:
    def __init__(
        self,
        api: KubeApi,
        config: ExtenderConfig,
        *,
        clock: Callable[[], float] = time.time,
        pod_sink: PodSink | None = None,
    ) -> None:
        self.api = api
        self.config = config
        self.metrics = ExtenderMetrics()
        self.state = SchedulerState(Cluster(policy=config.policy), config.state, clock=clock, pools_file=config.pools_file)
        election = config.leader_election
        self.elector: LeaderElector | None = None
        leading = self._leading if election is not None else _always
        self.binder = Binder(api, self.state, self.metrics, config.bind, clock=clock, leading=leading)
        self.sync = ClusterSync(api, self.state, self.binder, config.sync, leading=leading)
        self.extender = Extender(self.state, self.binder, ready=self.sync.ready, pod_sink=pod_sink, preempt=config.preempt)
        self.router = (
            LeaderRouter(election.identity, self._serving, self._wait_for_leader, self.metrics, config.routing) if election is not None else None
        )
        self.dra = DraScorer(api, config.policy, config.dra, clock=time.monotonic)
        self.server = ExtenderHttpServer(self.extender, config.server, self.metrics, router=self.router, dra=self.dra)
        if election is not None:
            # built once the server is bound: the URL it advertises carries the real port
            self.elector = LeaderElector(
                api, election, self.metrics, url=election.url(self.server.port), on_started_leading=self._prepare_to_lead, clock=clock
            )

    def _leading(self) -> bool:
        return self.elector is not None and self.elector.is_leader()

    def _serving(self) -> bool:
        return self.elector is not None and self.elector.is_serving()

    def _wait_for_leader(self, timeout_s: float) -> Leader | None:
        return self.elector.wait_for_leader(timeout_s) if self.elector is not None else None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def start(self, *, wait_ready_s: float = 30.0, prepare: Callable[[], None] | None = None) -> bool:
        """Start syncing and serving in the background; True once the cache is in sync.
        `prepare()` runs first, before the sync threads (`--simulate-fill` loads the cluster there)."""
        if prepare is not None:
            prepare()
        self.sync.start()
        ready = self.sync.wait_ready(wait_ready_s)
        if self.elector is not None:
            self.elector.start()  # campaigns with a synced cache only
        self.server.start()
        return ready

    def _prepare_to_lead(self) -> None:
        """Before the first bind as leader: the pods' records as the API server has them now,
        including whatever the previous leader wrote last (the watch may still be behind)."""
        self.sync.relist_pods()

    def stop(self, *, join_s: float = 0.0) -> None:
        """A planned stop (SIGTERM). A leader takes no new requests, lets running ones finish (up
        to `handover_s`), releases its Lease and waits for a successor to pass the requests still
        arriving to; then serving and syncing stop. The API is left open (a restarted extender
        may share it); sync threads end when their watch next returns."""
        if self.elector is not None and self.router is not None:
            leading = self.elector.is_leader()
            self.elector.resign()
            self.router.wait_idle(self.config.handover_s)
            self.elector.release()
            if leading:
                self.elector.wait_for_leader(self.config.handover_s)
            self.elector.stop()
        self._halt(join_s)

    def abandon(self, *, join_s: float = 0.0) -> None:
        """Stop as a crash would leave things: no handover, the Lease kept until it runs out
        (tests of failover in one process)."""
        if self.elector is not None:
            self.elector.stop()
        self._halt(join_s)

    def _halt(self, join_s: float) -> None:
        self.sync.stop()
        self.dra.stop()
        self.server.shutdown()
        if self.router is not None:
            self.router.close()
        if join_s:
            self.sync.join(join_s)
            self.dra.join(join_s)
