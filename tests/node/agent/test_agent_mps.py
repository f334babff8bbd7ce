"""MPS supervision on fixed-share pools: one daemon per GPU, limits from the shares, restarts."""
from __future__ import annotations

from pathlib import Path

from agent_world import World

from tessera.model.contract import GpuShare
from tessera_node.agent.mps import FakeProcessRunner, MpsLimits, MpsSupervisor, client_env, desired_limits
from tessera_node.registry import ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy

FIXED = PoolPolicy(sharing="fixed-share")


def _c(uid: str, *shares: GpuShare, policy: PoolPolicy = FIXED) -> RegisteredContainer:
    return RegisteredContainer(PodUid(uid), "ns", uid, ContainerName("c"), shares, None, policy)


def test_daemon_defaults_are_the_largest_share_per_gpu() -> None:
    limits = desired_limits([
        _c("a", GpuShare(0, "GPU-0", 60, 6144)),
        _c("b", GpuShare(0, "GPU-0", 30, 3072)),
        _c("c", GpuShare(1, "GPU-1", 20, 0)),  # no memory limit asked on GPU-1
        _c("d", GpuShare(2, "GPU-2", 50, 1024), policy=PoolPolicy(sharing="best-effort")),
        _c("e", GpuShare(3, "GPU-3", 100, 0), GpuShare(4, "GPU-4", 100, 0)),  # whole GPUs: exclusive, no MPS
    ])
    assert limits == {"GPU-0": MpsLimits(60, 6144), "GPU-1": MpsLimits(20, None)}


def test_daemon_defaults_and_client_env_round_to_whole_tpcs_of_the_gpu(tmp_path: Path) -> None:
    """On an H100 (132 SMs) 60 % asks MPS for 61: 80 SMs, the whole TPCs nearest to 79.2; a GPU
    whose SM count is unknown keeps the plain percent; the env matches the extender's ConfigMap."""
    limits = desired_limits([_c("a", GpuShare(0, "GPU-0", 60, 0)), _c("b", GpuShare(1, "GPU-1", 60, 0))], {"GPU-0": 132, "GPU-1": None})
    assert limits == {"GPU-0": MpsLimits(61, None), "GPU-1": MpsLimits(60, None)}
    assert client_env(tmp_path, GpuShare(0, "GPU-0", 30, 0), 132)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "31"


def test_the_agent_sends_the_rounded_default_for_the_gpus_it_found(tmp_path: Path) -> None:
    world = World(tmp_path, policy=PoolPolicy(sharing="fixed-share"), gpus="H100-80GB:1,X-24GB:1")
    world.place("a", None, gpu=0, core=60)
    world.place("b", None, gpu=1, core=60)
    world.tick()
    sent = {env["CUDA_VISIBLE_DEVICES"]: text for env, text in world.runner.commands}
    assert sent[world.uuids[0]].startswith("set_default_active_thread_percentage 61\n"), "132 SMs: 61 % gives the 80 nearest to 60 %"
    assert sent[world.uuids[1]].startswith("set_default_active_thread_percentage 60\n"), "unknown model: no SM count, plain percent"


def test_client_env_limits_the_container_to_its_own_share(tmp_path: Path) -> None:
    env = client_env(tmp_path, GpuShare(0, "GPU-0", 30, 3072))
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "GPU-0" / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "GPU-0" / "log"),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3072M",
    }


def test_one_daemon_per_gpu_with_its_own_pipe_and_limits(tmp_path: Path) -> None:
    runner = FakeProcessRunner()
    mps = MpsSupervisor(runner, tmp_path)
    mps.reconcile({"GPU-0": MpsLimits(60, 6144), "GPU-1": MpsLimits(20, None)})
    daemons = runner.running()
    assert set(daemons) == {"GPU-0", "GPU-1"}
    assert daemons["GPU-0"].argv == ["nvidia-cuda-mps-control", "-f"]
    assert daemons["GPU-0"].env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "GPU-0" / "pipe")
    assert (tmp_path / "GPU-0" / "pipe").is_dir() and (tmp_path / "GPU-1" / "log").is_dir()
    sent = {env["CUDA_VISIBLE_DEVICES"]: text for env, text in runner.commands}
    assert sent["GPU-0"] == "set_default_active_thread_percentage 60\nset_default_device_pinned_mem_limit 0 6144M\n"
    assert sent["GPU-1"] == "set_default_active_thread_percentage 20\n"


def test_dead_daemon_is_restarted_and_limits_sent_again(tmp_path: Path) -> None:
    runner = FakeProcessRunner()
    mps = MpsSupervisor(runner, tmp_path)
    desired = {"GPU-0": MpsLimits(60, 6144)}
    mps.reconcile(desired)
    mps.reconcile(desired)
    assert len(runner.started) == 1 and len(runner.commands) == 1, "a healthy daemon is left alone"
    runner.crash("GPU-0")
    mps.reconcile(desired)
    assert len(runner.started) == 2 and "GPU-0" in runner.running()
    assert mps.restarts == {"GPU-0": 1}
    assert len(runner.commands) == 2


def test_daemon_stops_when_no_fixed_share_container_is_left(tmp_path: Path) -> None:
    runner = FakeProcessRunner()
    mps = MpsSupervisor(runner, tmp_path)
    mps.reconcile({"GPU-0": MpsLimits(60, None)})
    mps.reconcile({})
    assert runner.running() == {}
    assert runner.commands[-1][1] == "quit\n"


def test_agent_runs_daemons_for_fixed_share_containers(tmp_path: Path) -> None:
    world = World(tmp_path, policy=FIXED)
    world.place("a", None, gpu=0, core=60, memory_mib=6144)
    world.place("b", None, gpu=1, core=30, memory_mib=3072)
    world.tick()
    assert set(world.runner.running()) == set(world.uuids)
    metrics = world.agent.build_view()
    assert all(g.mps_daemon_running for g in metrics.gpus)
