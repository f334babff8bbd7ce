"""The DRA route on a real GPU: the isolation the agent enforces comes from what the DRA kubelet
plugin prepared.

The real plugin (`tessera_node.dra.plugin.DraPlugin`) serves its registration and DRA sockets in
the work directory over this machine's GPUs (NVML); kubelet 1.36's side is the emulator
(`tessera_node.testing.kubelet_dra`), which registers it through the plugin watcher protocol and
calls NodePrepareResources for two claims kube-scheduler would have allocated: 50 cores and 2048
MiB of GPU 0 each (ResourceClaims with consumedCapacity, in an in-memory API server). The check
verifies the CDI env a runtime would inject (the GPU's UUID, the memory limit), then runs the
memory guard (`checks_agent.memory_guard`) over the very registry records the plugin wrote: the
hog that grows past its claim's memory is killed within the target, the neighbour lives.
Needs grpcio and protobuf in the GPU machine's Python (the plugin speaks gRPC); skipped otherwise.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpucheck.analysis import FAILED
from gpucheck.checks_agent import memory_guard
from gpucheck.world import Context, new_container_id

NODE = "gpu-check-node"
LIMIT_MIB = 2048


def check_dra(ctx: Context) -> dict[str, Any]:
    from tessera.kube.fake import FakeKubeApi
    from tessera.model.contract import LABEL_MEMORY_ENFORCEMENT, LABEL_POOL, LABEL_POOL_KIND
    from tessera_node.dra.cdi import CdiSettings
    from tessera_node.dra.plugin import DraPlugin, DraPluginSettings
    from tessera_node.gpu.nvml import NvmlBackend
    from tessera_node.registry import ContainerRegistry
    from tessera_node.testing.dra_claims import Grant, allocated_claim, pod_using_claim
    from tessera_node.testing.kubelet_dra import KUBELET_1_36, KubeletDra, cdi_devices_for, resolve_cdi

    root = ctx.workdir / "dra"
    kube = FakeKubeApi()
    kube.create_node({"metadata": {"name": NODE, "labels": {LABEL_POOL_KIND: "shared", LABEL_POOL: "gpu-checks", LABEL_MEMORY_ENFORCEMENT: "enforce"}}})
    state = ctx.workdir / "agent-dra"  # the registry memory_guard's agent reads
    settings = DraPluginSettings(node_name=NODE, registry_dir=root / "reg", plugins_dir=root / "plugins", state_dir=state, cdi=CdiSettings(cdi_dir=root / "cdi"))
    registry = ContainerRegistry(state)
    plugin = DraPlugin(settings, NvmlBackend(), kube, registry)
    kubelet = KubeletDra(KUBELET_1_36, settings.registry_dir)
    plugin.start()
    try:
        kubelet.start()
        registered = kubelet.wait_registered()
        index = ctx.gpu.index
        claims = []
        for name in ("hog", "compliant"):
            pod = kube.create_pod(pod_using_claim("gpu-checks", name, f"{name}-gpu", NODE))
            body = kube.put_resource_claim(allocated_claim("gpu-checks", f"{name}-gpu", [Grant(NODE, index, 50, LIMIT_MIB)], pods=[(name, pod["metadata"]["uid"])]))
            claims.append(("gpu-checks", f"{name}-gpu", body["metadata"]["uid"]))
        results = kubelet.prepare(claims)
        envs = {c[1]: resolve_cdi(settings.cdi.cdi_dir, cdi_devices_for(results, c[2])).env for c in claims}
        records = {r.pod_name: replace(r, container_id=new_container_id()) for r in registry.all()}
    finally:
        kubelet.stop()
        plugin.stop()
    route: dict[str, Any] = {
        "kubelet": KUBELET_1_36.name, "service": registered.service, "slice_devices": [d["name"] for s in kube.list_resource_slices() for d in s["spec"]["devices"]],
        "cdi_env": {name: {k: env.get(k) for k in ("NVIDIA_VISIBLE_DEVICES", "TESSERA_GPU_MEMORY_MIB", "TESSERA_GPU_CORE")} for name, env in envs.items()},
        "registered": {name: [s.to_json() for s in r.shares] for name, r in records.items()},
    }
    env_ok = all(env.get("NVIDIA_VISIBLE_DEVICES") == ctx.gpu.uuid and env.get("TESSERA_GPU_MEMORY_MIB") == str(LIMIT_MIB) for env in envs.values())
    if set(records) != {"hog", "compliant"} or not env_ok:
        return {"status": FAILED, "error": "the DRA plugin did not prepare both claims as allocated", "dra": route}
    out = memory_guard(ctx, "dra", records["hog"], records["compliant"], LIMIT_MIB)
    out["dra"] = route
    return out
