"""Replicas of the extender over one API server: one leader binds, standbys pass kube-scheduler's
calls to it, a planned stop hands the Lease over, a crashed leader is replaced once its lease runs
out; no pod is ever bound twice or lost, and every GPU's records stay within the GPU."""
from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest
from audit import audit
from extender_harness import GIB, node_manifest, pod_manifest, rendered_scheduler_config, wait_until
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry, KubeSchedulerEmulator
from test_extender_write_faults import recorded_usage

from tessera.alloc import PlacementPolicy
from tessera.kube.fake import FakeKubeApi
from tessera.model.leader_election import LeaderElectionTiming
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.leader import LeaderElectionSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.sync import SyncSettings

GPU_MEMORY = 16 * GIB
TIMING = LeaderElectionTiming(lease_duration_s=2.0, renew_deadline_s=1.5, retry_period_s=0.2)


class Replicas:
    """Extender replicas over one in-memory API server, each on its own loopback port."""

    def __init__(self, api: FakeKubeApi) -> None:
        self.api = api
        self.services: list[ExtenderService] = []
        self.clients: list[ExtenderClient] = []
        self._names = itertools.count()

    def start(self) -> ExtenderService:
        config = ExtenderConfig(
            policy=PlacementPolicy.BINPACK,
            server=ServerSettings(host="127.0.0.1", port=0),
            sync=SyncSettings(watch_timeout_s=0.5, retry_backoff_s=0.1, janitor_interval_s=3600),
            leader_election=LeaderElectionSettings("tessera-system", f"replica-{next(self._names)}", "127.0.0.1", timing=TIMING),
            handover_s=3.0,
        )
        service = ExtenderService(self.api, config)
        assert service.start(wait_ready_s=10)
        self.services.append(service)
        return service

    def scheduler(self, service: ExtenderService) -> KubeSchedulerEmulator:
        entry = ExtenderEntry.from_config(rendered_scheduler_config())
        client = ExtenderClient("127.0.0.1", service.port, timeout_s=entry.http_timeout_s)
        self.clients.append(client)
        return KubeSchedulerEmulator(client, self.api, entry)

    def pair(self) -> tuple[ExtenderService, ExtenderService]:
        """Two replicas, once one of them leads: (leader, standby)."""
        first, second = self.start(), self.start()
        assert wait_until(lambda: self.leader() is not None, 10)
        leader = self.leader()
        assert leader is not None
        return leader, second if leader is first else first

    def leader(self) -> ExtenderService | None:
        leading = [s for s in self.services if s.elector is not None and s.elector.is_leader()]
        assert len(leading) <= 1, "two replicas lead at once"
        return leading[0] if leading else None

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for service in self.services:
            service.abandon()


@pytest.fixture
def replicas() -> Iterator[Replicas]:
    r = Replicas(FakeKubeApi())
    yield r
    r.close()


def _cluster(api: FakeKubeApi, nodes: int = 2) -> None:
    for i in range(nodes):
        api.create_node(node_manifest(f"n{i}", gpus=2, memory_mib=GPU_MEMORY))


def test_one_replica_leads_and_a_standby_passes_every_verb_to_it(replicas: Replicas) -> None:
    _cluster(replicas.api)
    leader, standby = replicas.pair()
    lease = replicas.api.get_lease("tessera-system", "tessera-extender")
    assert lease["spec"]["holderIdentity"] == leader.config.leader_election.identity  # type: ignore[union-attr]
    # kube-scheduler reaches the standby (the Service balances): its pods are still bound, once each
    scheduler = replicas.scheduler(standby)
    for i in range(4):
        replicas.api.create_pod(pod_manifest(f"p{i}", ("main", 60, 4 * GIB)))
        assert scheduler.schedule("default", f"p{i}").node is not None
    replicas.api.create_pod(pod_manifest("full", ("main", 60, 4 * GIB)))
    assert scheduler.schedule("default", "full").node is None  # 4 GPUs, one 60 % share each
    audit(replicas.api, gpu_memory_mib=GPU_MEMORY)
    text = replicas.clients[0].get("/metrics")[1]
    assert 'tessera_extender_forwarded_requests_total{result="ok",verb="bind"} 4.0' in text
    assert "tessera_extender_leader 0.0" in text
    # the standby's cache follows the leader's records from the watch
    assert wait_until(lambda: standby.state.counted_usage() == leader.state.counted_usage())


def test_planned_handover_loses_no_bind(replicas: Replicas) -> None:
    _cluster(replicas.api, nodes=4)
    leader, standby = replicas.pair()
    scheduler = replicas.scheduler(standby)
    errors: list[str] = []
    done = threading.Event()

    def schedule_all() -> None:
        for i in range(40):
            replicas.api.create_pod(pod_manifest(f"p{i}", ("main", 20, 1 * GIB)))
            attempt = scheduler.schedule("default", f"p{i}")
            if attempt.node is None:
                errors.append(f"p{i}: {attempt.error}")
        done.set()

    worker = threading.Thread(target=schedule_all)
    worker.start()
    assert wait_until(lambda: len(replicas.api.list_pods()) >= 10, 10)
    leader.stop()  # SIGTERM: resign, let binds finish, release the Lease
    worker.join(60)
    assert done.is_set() and not errors, errors
    assert standby.elector is not None and standby.elector.is_leader()
    lease = replicas.api.get_lease("tessera-system", "tessera-extender")
    assert lease["spec"]["leaseTransitions"] == 1
    bound = [p for p in replicas.api.list_pods() if p["spec"].get("nodeName")]
    assert len(bound) == 40
    audit(replicas.api, gpu_memory_mib=GPU_MEMORY)


def test_a_crashed_leader_is_replaced_once_its_lease_runs_out(replicas: Replicas) -> None:
    _cluster(replicas.api)
    leader, standby = replicas.pair()
    scheduler = replicas.scheduler(standby)
    replicas.api.create_pod(pod_manifest("before", ("main", 100, None)))
    assert scheduler.schedule("default", "before").node is not None
    leader.abandon()  # no release: the standby must wait the lease out
    replicas.api.create_pod(pod_manifest("during", ("main", 100, None)))
    attempt = scheduler.schedule("default", "during")
    if attempt.node is None:  # held past the hold time: kube-scheduler retries
        assert "leader" in attempt.error
    assert wait_until(lambda: standby.elector is not None and standby.elector.is_leader(), 10)
    for _ in range(3):
        if replicas.api.get_pod("default", "during")["spec"].get("nodeName"):
            break
        scheduler.schedule("default", "during")
    assert replicas.api.get_pod("default", "during")["spec"].get("nodeName")
    audit(replicas.api, gpu_memory_mib=GPU_MEMORY)
    assert wait_until(lambda: standby.state.counted_usage() == recorded_usage(replicas.api))
    assert len(recorded_usage(replicas.api)) == 2  # both whole GPUs, each counted once
