"""Hypothesis strategies for pool policies, as the stack config allows them (shared by the model's
reader tests and the builders' property tests)."""
from __future__ import annotations

from typing import get_args

from hypothesis import strategies as st

from tessera.model.contract import GpuPlacement, SharingPolicy
from tessera.model.pool_policy import MAX_OFFLINE_RESUME_IDLE_S, MAX_SHARES_PER_GPU, MemoryEnforcement, PoolPolicy

pool_policies = st.builds(
    PoolPolicy,
    sharing=st.sampled_from(get_args(SharingPolicy)),
    placement=st.sampled_from(get_args(GpuPlacement)),
    online_offline=st.booleans(),
    qgpu_aliases=st.booleans(),
    memory_enforcement=st.sampled_from(get_args(MemoryEnforcement)),
    offline_resume_idle_s=st.floats(min_value=0.001, max_value=MAX_OFFLINE_RESUME_IDLE_S),
    shares_per_gpu=st.one_of(st.none(), st.integers(min_value=1, max_value=MAX_SHARES_PER_GPU)),
)
