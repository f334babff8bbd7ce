"""Any edit of a valid stack either validates or gives ConfigError problems: never another exception."""
from __future__ import annotations

from typing import Any

from config_cases import EXISTING_BASE, TKE_BASE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.model import ConfigError, from_pulumi_mapping
from tessera.model.plan import plan_stack
from value_paths import value_paths

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=False, width=32), st.sampled_from(["", "x", "all-1g.5gb", "10.0.0.0/8", "1.30.0", "nvidia.com/gpu", "0 8 * * *", "T4", "shared"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["name", "kind", "replicas", "profile", "zone", "cidr", "x", "nvidia.com/mig-1g.5gb"]), inner, max_size=3)), max_leaves=6)


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from([TKE_BASE, EXISTING_BASE]), data=st.data(), value=VALUES)
def test_edits_never_escape_as_other_exceptions(base: dict[str, Any], data: st.DataObject, value: Any) -> None:
    import copy

    mutated = copy.deepcopy(base)
    path = data.draw(st.sampled_from(value_paths(mutated)))
    _set(mutated, path, value)
    try:
        config = from_pulumi_mapping(mutated)
    except ConfigError as error:
        assert error.problems
        assert all(p.message and isinstance(p.path, str) for p in error.problems)
        return
    plan = plan_stack(config)  # a valid config always has a plan
    assert plan.gpus.min <= plan.gpus.desired <= plan.gpus.max
