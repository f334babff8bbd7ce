"""Any sequence of prepares, unprepares (also repeated, also of unknown claims) and restarts keeps
the checkpoint, the CDI spec files and the agent's registry in step with the prepared claims."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dra_harness import NODE, DraNode, Grant
from tessera_node.dra.checkpoint import Checkpoint
from tessera_node.dra.core import ClaimRef
from tessera_node.dra.plugin import DraPlugin

CLAIMS = 5


class PluginLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.node = DraNode(root=Path(tempfile.mkdtemp(prefix="dras", dir="/tmp")))
        self.claims = [self.node.claim(f"c{i}", [Grant(NODE, i % 2, 10 + i, 256 * (i + 1))], pod=f"p{i}") for i in range(CLAIMS)]
        self.plugin = self._new_plugin()
        self.prepared: dict[str, str] = {}  # uid -> CDI id kubelet was told

    def _new_plugin(self) -> DraPlugin:
        plugin = DraPlugin(self.node.settings, self.node.backend, self.node.kube, self.node.registry)
        plugin.open()
        return plugin

    def teardown(self) -> None:
        shutil.rmtree(self.node.root, ignore_errors=True)

    @rule(i=st.integers(0, CLAIMS - 1))
    def prepare(self, i: int) -> None:
        ns, name, uid = self.claims[i]
        outcome = self.plugin.prepare(ClaimRef(ns, name, uid))
        assert outcome.error == ""
        (cdi_id,) = outcome.devices[0].cdi_device_ids
        assert self.prepared.setdefault(uid, cdi_id) == cdi_id  # a repeat answers the same

    @rule(i=st.integers(0, CLAIMS - 1))
    def unprepare(self, i: int) -> None:
        ns, name, uid = self.claims[i]
        assert self.plugin.unprepare(ClaimRef(ns, name, uid)) == ""
        self.prepared.pop(uid, None)

    @rule()
    def restart(self) -> None:
        self.plugin = self._new_plugin()

    @rule()
    def lose_the_registry(self) -> None:
        """The agent's state dir lost its registry; the next restart restores it."""
        self.node.registry.replace_all([])
        self.plugin = self._new_plugin()

    @invariant()
    def everything_agrees(self) -> None:
        kept = {c.claim.uid for c in self.plugin.prepared_claims()}
        assert kept == set(self.prepared)
        assert {c.claim.uid for c in Checkpoint(self.node.settings.state_dir).load()} == kept
        assert {f.removeprefix("tessera.dev-gpu_").removesuffix(".json") for f in self.node.cdi_files()} == kept
        wanted = {r.key for c in self.plugin.prepared_claims() for r in c.containers}
        assert {r.key for r in self.node.registry.all()} == wanted


TestPluginLife = PluginLife.TestCase
TestPluginLife.settings = settings(max_examples=25, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
