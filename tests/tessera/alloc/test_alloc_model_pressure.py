"""Model pressure: GPU models that pods limited to them need are kept for those pods."""
from __future__ import annotations

from tessera.alloc import ContainerRequest, GpuState, NodeState, PodRequest, PodUid, WorkloadMix, static_snapshot
from tessera.alloc.model_pressure import ModelPressure
from tessera.alloc.workload import MixSettings


def _pod(uid: str, models: frozenset[str] | None = None, cpu: int = 4000) -> PodRequest:
    return PodRequest(PodUid(uid), (ContainerRequest("main", 1, 1000),), cpu, 1024, models)


def _nodes(model: str, count: int, used: int = 0) -> list[NodeState]:
    """`count` 2-GPU nodes of `model`; the first `used` GPUs (over all of them) fully allocated."""
    nodes = []
    for k in range(count):
        gpus = [GpuState(i, f"{model}-{k}-{i}", model, 16384) for i in range(2)]
        for g in gpus:
            if used > 0:
                g.used_milli, used = 1000, used - 1
        nodes.append(NodeState(f"{model}-{k}", gpus, 64000, 1 << 20))
    return nodes


T4_ONLY = frozenset({"T4"})
# 1 pod in 10 accepts only T4s: 10 % of the GPU demand
MIX = static_snapshot([_pod(f"t4-{i}", T4_ONLY) for i in range(1)] + [_pod(f"any-{i}") for i in range(9)])


def test_a_model_is_protected_once_its_free_gpus_fall_to_what_its_limited_pods_will_take() -> None:
    """T4-only pods are 10 % of the GPU demand and half of the 100 GPUs are T4s, so a T4 costs an
    any-model pod little (0.2) while T4s are plentiful; once any-model pods have taken most of
    them, the rest are kept for the T4-only pods (cost 1), until enough are free again."""
    plenty = ModelPressure(MIX, protect_factor=2.0)
    nodes = _nodes("T4", 25) + _nodes("A100", 25)  # half the GPUs are T4s: steady cost 0.2
    for node in nodes:
        plenty.track(node)
    assert plenty.cost("T4") == 0.2 and plenty.cost("A100") == 0.0
    generation = plenty.generation
    for node in nodes[:20]:
        for g in node.gpus:
            g.used_milli = 1000
        plenty.track(node)
    assert plenty.cost("T4") == 1.0, "40 of 50 T4s used: 10 free <= 2 x 10 % x 60 free GPUs"
    assert plenty.generation > generation, "cached scores must be recomputed"
    # released again only above 4 x the expected take (hysteresis)
    for node in nodes[:2]:
        for g in node.gpus:
            g.used_milli = 0
        plenty.track(node)
    assert plenty.cost("T4") == 1.0, "14 free of 64: between 2 x and 4 x, still protected"
    for node in nodes[2:20]:
        for g in node.gpus:
            g.used_milli = 0
        plenty.track(node)
    assert plenty.cost("T4") == 0.2


def test_the_default_factor_protects_a_model_while_more_of_it_is_free() -> None:
    """30 of 50 T4s used (20 free of 70 free GPUs; T4-only pods take 10 %): at the default factor
    (4: 20 <= 28) the T4s are kept for T4-only pods; at factor 2 (20 > 14) not yet."""
    nodes = _nodes("T4", 25, used=30) + _nodes("A100", 25)
    costs = {}
    for factor in (4.0, 2.0):
        pressure = ModelPressure(MIX) if factor == 4.0 else ModelPressure(MIX, protect_factor=factor)
        for node in nodes:
            pressure.track(node)
        costs[factor] = pressure.cost("T4")
    assert costs == {4.0: 1.0, 2.0: 0.2}


def test_without_limited_pods_nothing_is_protected() -> None:
    pressure = ModelPressure(static_snapshot([_pod("any")]))
    for node in _nodes("T4", 1, 2) + _nodes("A100", 1):
        pressure.track(node)
    assert not pressure and pressure.cost("T4") == 0.0 and pressure.generation == 0


def test_learned_mix_counts_the_limited_demand_of_shapes_too_rare_to_keep() -> None:
    """40 T4-only pods, each of its own rare shape (dropped from the snapshot's shapes), among
    960 common pods: the snapshot still says 4 % of the GPU demand is T4-only."""
    mix = WorkloadMix(MixSettings(half_life_pods=1e9))
    for i in range(1000):
        mix.observe(_pod(f"t4-{i}", T4_ONLY, cpu=1000 + i) if i % 25 == 0 else _pod(f"any-{i}"))
    snapshot = mix.snapshot()
    assert not any(s.gpu_models for s in snapshot.shapes)
    ((models, share),) = snapshot.limited
    assert models == T4_ONLY and abs(share - 0.04) < 1e-9
