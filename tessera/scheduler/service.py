"""Wiring: one extender = cache + binder + sync loops + HTTP server over one `KubeApi`."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tessera.alloc import DEFAULT_POLICY, Cluster, PlacementPolicy
from tessera.kube.api import KubeApi
from tessera.scheduler.binder import Binder, BindSettings
from tessera.scheduler.core import Extender, PodSink
from tessera.scheduler.http_server import ExtenderHttpServer, ServerSettings
from tessera.scheduler.metrics import ExtenderMetrics
from tessera.scheduler.preemption import PreemptSettings
from tessera.scheduler.state import SchedulerState, StateSettings
from tessera.scheduler.sync import ClusterSync, SyncSettings


@dataclass(frozen=True)
class ExtenderConfig:
    """Everything `tessera scheduler serve` can set; each part documents its defaults.

    policy: node-level placement policy; default fragmentation-aware (Tessera's best packing).
    pools_file: the mounted pools document (`tessera.model.contract.POOLS_FILE`); default None = pool
        settings from node labels only. In a cluster the CLI passes the mounted file so a
        placement, policy or sharesPerGpu edit applies without relabelling nodes.
    """

    policy: PlacementPolicy = DEFAULT_POLICY
    server: ServerSettings = field(default_factory=ServerSettings)
    state: StateSettings = field(default_factory=StateSettings)
    bind: BindSettings = field(default_factory=BindSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    pools_file: Path | None = None
    preempt: PreemptSettings = field(default_factory=PreemptSettings)


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
        self.binder = Binder(api, self.state, self.metrics, config.bind, clock=clock)
        self.sync = ClusterSync(api, self.state, self.binder, config.sync)
        self.extender = Extender(self.state, self.binder, ready=self.sync.ready, pod_sink=pod_sink, preempt=config.preempt)
        self.server = ExtenderHttpServer(self.extender, config.server, self.metrics)

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
        self.server.start()
        return ready

    def stop(self, *, join_s: float = 0.0) -> None:
        """Stop serving and syncing. The API is left open (a restarted extender may share it);
        sync threads end when their watch next returns (`SyncSettings.watch_timeout_s`)."""
        self.sync.stop()
        self.server.shutdown()
        if join_s:
            self.sync.join(join_s)
