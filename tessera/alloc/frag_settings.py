"""The fragmentation-aware policy's knobs (`FragAwareSettings`), each with the measurement that
chose its default, and the byte budgets of what the fragmentation policies remember
(`FragMemoBudget`); the policies themselves are in `frag_policy`."""
from __future__ import annotations

from dataclasses import dataclass

from tessera.alloc.fragmentation import MEASURE_BUDGET, MiB


@dataclass(frozen=True)
class FragAwareSettings:
    """Knobs of the fragmentation-aware policy (defaults are the benchmarked configuration)."""

    host_weight: float = 0.5
    """Default 0.5: weight of host stranding (`HostDemand.unfed`, milli-GPU the node's CPU and
    RAM can no longer feed) added to the fragmentation increase; 0 = FGD's measure alone.
    Measured on the default trace (seeds 42-45, 100 % arrived): 0 -> 95.19 %, 0.15 -> 95.59,
    0.3 -> 95.7, 0.5 -> 95.75, 1.0 -> more 8-GPU pods failing before 95 % arrived."""
    model_weight: float = 1.0
    """Default 1: weight of model pressure (`ModelPressure.cost`, the pods limited to a GPU model
    expected to fail because a placement uses that model) added to the increase; 0 = off. Without
    limited pods in the mix it is 0 anyway."""
    reserve_horizon_pods: float = 4000.0
    """Default 4000 arrivals: once the nodes able to host a multi-GPU shape of the mix are down to
    the pods of that shape (and of the shapes competing for the same nodes) expected in this many
    arrivals, a GPU pod that would leave one of them unable to host it ranks below every other
    placement (`Reservations`); 0 = off."""
    reserve_cpu_only: bool = True
    """Default on: pods without GPUs are held off reserved nodes and charged the scarce costs too,
    but only while CPU is plentiful (`cpu_only_headroom`). openb cpu250 (25 % CPU-only pods):
    32-core CPU-only pods no longer take the last whole 128-core nodes that 8-GPU 120-core pods
    need (seeds 42, 1001: -0.19 -> +0.00 against FGD at 90 % arrived). Charged unconditionally,
    cpu300 (30 % CPU-only pods, CPU the binding resource) fell to 84.84 % at 100 % arrived
    against FGD's 85.66 (seed 42): CPU-only pods kept off the CPU-rich reserved nodes took the
    cores of nodes whose GPUs then starved; with the CPU test 85.73. Off: no pod without GPUs
    is charged."""
    cpu_only_headroom: float = 1.0
    """Default 1: pods without GPUs are charged (`reserve_cpu_only`) only while the cluster's free
    CPU is at least this many times what its free GPUs need at the mix's GPU pods' CPU per GPU
    (`HostDemand.cpu_per_milli`); below it CPU is the binding resource and they go wherever they
    strand least. Charged again only above 1.25 times it (`reservation._CPU_HYSTERESIS`).
    Measured on openb seed 42: cpu300's ratio falls below 1 at ~71 % arrived, before any
    reservation is on (80 %); cpu250's stays >= 1.1 until the cluster is full (92 %). Neither
    the share of CPU-only pods (25 % vs 30 %) nor the whole mix's CPU per GPU against the
    cluster's (1.03 vs 1.14) separates the two. 0: always charged."""
    rare_multi_need_cpu: bool = True
    """Default on: the multi-GPU shapes kept in the mix only for reservations
    (`MixSettings.min_weight_multi`) are guarded only while CPU is plentiful
    (`cpu_only_headroom`), as CPU-only pods are charged. Held regardless, they cost cpu300 0.2 at
    100 % arrived (seed 1001: 86.20 against 86.40 without them, FGD 86.31); gated: 86.48."""
    scarce_share: float = 0.1
    """Default 0.1: a multi-GPU shape of the mix that at most this share of the nodes with its GPU
    count could ever host (openb: 8-GPU pods asking 120 cores fit only the 39 128-core nodes of
    617 8-GPU nodes) is scarce (`Reservations.scarce_loss`); 0 = none is."""
    scarce_weight: float = 0.1
    """Default 0.1: weight of the scarce shapes' GPUs a placement leaves the node unable to host,
    added to the increase at any load, not only once the reservation is on. CPU-rich nodes
    otherwise draw CPU-heavy single-GPU pods (host stranding favours them), and by the time
    the reservation switches on they are gone. Measured (openb, seeds 42 and 1001, with the
    other defaults): multigpu50 -0.13 -> +0.00 against FGD at 90 % arrived, 100 % +0.37 ->
    +0.38; cpu072 100 % +0.06 -> +0.11. 0.3 placed the same as 0.1 on cpu072 and multigpu50."""
    scarce_prior: bool = True
    """Default on: a prior for hard shapes not seen yet (pods with GPUs only, unless
    `reserve_cpu_only`). An empty node of a kind whose GPU count
    and CPU at most `scarce_share` of the nodes with as many GPUs match (openb: the 39 128-core
    8-GPU nodes of 617) costs `scarce_weight` x its GPUs to break, whatever the mix. On cpu250
    the first 8-GPU 120-core pod can arrive at 80 % arrived, after every 128-core node was
    broken, mostly by 32-core CPU-only pods (seeds 44, 1002: one such pod failed, -0.13 against
    FGD at 90 %); with the prior: +0.00 at 90 % and +0.15 to +0.25 more at 100 % (seeds 43, 44,
    1002). The inventory is tracked from the first pod, before the mix has any multi-GPU shape:
    on multigpu50 seed 43 an 8-GPU 88-core pod broke a 128-core node at 0.4 % arrived (under
    the prior mix, when nothing was tracked yet), and one 8-GPU 120-core pod more than under
    FGD failed at 89 % (-0.13 at 90 and 95 %); tracked from the start, +0.00."""
    model_protect_factor: float = 4.0
    """Default 4: a GPU model is protected for the pods limited to it (`ModelPressure`) once its
    free compute is at most this many times their expected take of the cluster's free compute.
    Measured on openb gpuspec05 (seeds 42, 1001, with the limited mix refreshed as it is seen,
    `MixSettings.limited_refresh_ratio`): 2 -> P100-only pods fail from 20-60 % arrived (the
    2-GPU P100 nodes draw any-model pods; -0.25 against FGD at 90 %); 4 -> -0.00 at 90 %,
    +0.08 at 95, +0.44 at 100; 8 -> +0.03 / +0.09 / +0.35."""
    tolerance_milli: float = 25.0
    """Default 25 milli-GPU: fragmentation increases closer than this count as equal, so the
    consolidating tie-breaks below decide (exact increases scatter pods over many nodes by noise)."""
    sigmoid_bands: bool = True
    """Default on: bands are FGD's `int(100 * sigmoid(-increase / 1000))` (coarser for large
    increases); off: fixed-width `tolerance_milli` bands."""
    multi_gpu_weighting: bool = True
    """Default on: in the fragmentation expectation an N-GPU pod shape weighs like N pods while
    multi-GPU pods are under 2 % of the mix (FGD weighs every shape by its pod count, so 8-GPU
    pods, 0.5 % of the default trace's pods but 4 % of its GPU demand, hardly count and whole
    nodes get broken up). Above 2 % (multigpu traces) the boost over-reserves whole nodes and is
    not applied (measured: -0.3 % allocation on multigpu50 with it, +0.17 % without)."""
    band_scale: float = 100.0
    """Default 100 (FGD's): number of sigmoid bands; fewer bands mean more ties for the fixed node
    ranking to consolidate."""
    node_size_preference: int = 1
    """Default +1: prefers nodes with fewer GPUs among equal bands (keeps big nodes whole; 0 = off),
    -1 prefers bigger nodes. Applied before the fixed node ranking."""
    prefer_in_use: bool = False
    """Default off (measured -0.2 to -0.3 %): when on, among equal bands a node already in use
    beats an untouched one."""
    prefer_fewer_idle: bool = False
    """Default off (measured -0.2 to -0.3 %): when on, then the node left with fewer idle GPUs."""


@dataclass(frozen=True)
class FragMemoBudget:
    """Byte budgets of what a fragmentation policy remembers (estimated as entries are added;
    a memo past its budget starts again empty, and nothing but speed depends on what it holds).

    results: default 32 MiB over all nodes together: `_evaluate` results per node version
        (`frag_simple.NodeVectors`, at most 1,024 per node version), estimated by
        `frag_simple.memo_result_bytes` (350 B for a share: ~96,000 results).
    measure: default 64 MiB: the fragmentation measure's memo and compiled rows
        (`fragmentation.MEMO_BYTES`, `ROWS_BYTES`): ~46,000 values of 8-GPU nodes.
    memo_keys: default 16 MiB of interned memo keys (GPU containers, models and class of a pod,
        `interning.approx_bytes` each; a request may name hundreds of GPU models).
    """

    results: int = 32 * MiB
    measure: int = MEASURE_BUDGET
    memo_keys: int = 16 * MiB
