"""One pool policy: for random `sharing` configs, what the extender, the device plugin and the node
agent each believe about a node's pool equals the stack config model.

Each example renders a stack the way `tessera render` / the program do (the pools file and the
node pool's labels), then lets each component read them as it does in a cluster: the extender's
cache applies the node, the device plugin polls its node, the agent refreshes from the API. The
node's labels may be stale (left from another config: the pools file must win) and the pool may
be re-partitioned on a schedule (the job moves `tessera.dev/max-shares-per-gpu` on the label
only: that label must win).
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e_stack import Rendered, node_labels, pool_named, shared_pool, stack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster
from tessera.kube.fake import FakeKubeApi
from tessera.model.allocation_record import uses_mps
from tessera.model.contract import ANNOTATION_NODE_GPUS, LABEL_MAX_SHARES_PER_GPU, POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY, NodeGpu
from tessera.model.pool_policy import POLICY_LABELS, PoolPolicy
from tessera.scheduler.state import SchedulerState, StateSettings
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.simscript import SimulatedKiller
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from tessera_node.gpu.simulated import SimulatedBackend
from tessera_node.registry import ContainerRegistry

POOL = "t4-shared"
NODE = "t4-shared-0"

sharing_configs = st.fixed_dictionaries(
    {},
    optional={
        "policy": st.sampled_from(["best-effort", "fixed-share", "burst-share"]),
        "placement": st.sampled_from(["binpack", "spread"]),
        "onlineOffline": st.booleans(),
        "qgpuAliases": st.booleans(),
        "memoryEnforcement": st.sampled_from(["warn", "enforce"]),
        "offlineResumeIdleSeconds": st.sampled_from([0.5, 2.0, 7.0, 3600.0]),
        "sharesPerGpu": st.integers(min_value=1, max_value=100),
    },
)
NIGHT = [{"name": "day", "cron": "0 8 * * *", "layout": 4}, {"name": "night", "cron": "0 20 * * *", "layout": 1}]


def _config(sharing: dict[str, Any], repartition: bool) -> Any:
    pool = shared_pool(POOL)
    pool["sharing"] = sharing
    if repartition:
        pool["repartition"] = NIGHT
    return stack(pool)


def _believed_by_extender(pools_file: Path, labels: dict[str, str]) -> tuple[str | None, int | None, bool]:
    state = SchedulerState(Cluster(), StateSettings(), clock=time.time, pools_file=pools_file)
    gpus = json.dumps([NodeGpu(0, "GPU-0", "T4", 15360, True, None).to_json()])
    state.apply_node({"metadata": {"name": NODE, "labels": labels, "annotations": {ANNOTATION_NODE_GPUS: gpus}}})
    node = state.cluster.nodes[NODE]  # type: ignore[index]
    return node.gpu_placement, node.max_shares_per_gpu, uses_mps(node.labels)


def _believed_by_device_plugin(root: Path, pools_file: Path, api: FakeKubeApi) -> tuple[str, bool]:
    settings = DevicePluginSettings(
        node_name=NODE, device_plugin_dir=root / "dp", pod_resources_socket=root / "pr.sock", state_dir=root / "dp-state", pools_file=pools_file
    )
    plugin = DevicePlugin(settings, SimulatedBackend.from_spec("T4:1", node_seed=NODE), api, ContainerRegistry(settings.state_dir))
    plugin.read_node()
    allocate = plugin.state.allocate_settings
    return allocate.sharing_policy, allocate.uses_mps


def _believed_by_agent(root: Path, pools_file: Path, api: FakeKubeApi) -> PoolPolicy | None:
    settings = AgentSettings(node_name=NODE, state_dir=root / "agent", pools_file=pools_file)
    backend = SimulatedBackend.from_spec("T4:1", node_seed=NODE)
    deps = AgentDeps(
        backend=backend, registry=ContainerRegistry(settings.state_dir), locator=CgroupTreeBuilder(root / "host").locator(),
        killer=SimulatedKiller(backend), kube=api,
    )
    agent = Agent(settings, deps)
    agent.refresh_from_pods()
    return agent.node_policy


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sharing=sharing_configs,
    stale=st.one_of(st.none(), sharing_configs),
    repartition=st.booleans(),
    layout=st.sampled_from([1, 4]),
)
def test_every_component_believes_what_the_stack_config_says(
    sharing: dict[str, Any], stale: dict[str, Any] | None, repartition: bool, layout: int
) -> None:
    config = _config(sharing, repartition)
    expected = pool_named(config, POOL).sharing.pool_policy()
    labels = node_labels(config, POOL)
    if stale is not None:  # a label edit that never reached the stack (or a TKE pool not yet updated)
        for label in POLICY_LABELS.values():
            labels.pop(label, None)
        labels.update(pool_named(_config(stale, False), POOL).sharing.pool_policy().node_labels())
    if repartition:  # the schedule's job has put the node on one of its layouts
        labels[LABEL_MAX_SHARES_PER_GPU] = str(layout)
        expected = PoolPolicy(**{**expected.__dict__, "shares_per_gpu": layout})

    root = Path(tempfile.mkdtemp(prefix="pp", dir="/tmp"))
    try:
        pools_file = root / "pools.json"
        pools_file.write_text(Rendered(config).configmap_file(POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY))
        api = FakeKubeApi()
        api.create_node({"metadata": {"name": NODE, "labels": labels}})

        assert _believed_by_extender(pools_file, labels) == (expected.placement, expected.shares_per_gpu, expected.uses_mps)
        assert _believed_by_device_plugin(root, pools_file, api) == (expected.sharing, expected.uses_mps)
        assert _believed_by_agent(root, pools_file, api) == expected
    finally:
        shutil.rmtree(root, ignore_errors=True)
