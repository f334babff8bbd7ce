"""The pool policy's one reader: the pools file entry wins where it states a setting, then the
node's label, then the defaults, which are the stack config's; unreadable values are skipped and
named. (What each component makes of it: tests/e2e/test_e2e_pool_policy.py.)"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given
from pool_policy_strategies import pool_policies
from hypothesis import strategies as st

from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU, LABEL_MEMORY_ENFORCEMENT, LABEL_ONLINE_OFFLINE, LABEL_POOL, LABEL_SHARING_POLICY
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, PoolPolicy, policy_from_entry, read_pool_policy
from tessera.model.pools import SharingConfig

POOL = "p"
NODE = {LABEL_POOL: POOL}

# (what the pools file says for the pool, the node's labels besides the pool, the policy believed, problems)
RULE: list[tuple[str, dict[str, Any] | None, dict[str, str], PoolPolicy, list[str]]] = [
    ("nothing said: the stack config's defaults", None, {}, DEFAULT_POOL_POLICY, []),
    ("labels alone", None, {LABEL_SHARING_POLICY: "fixed-share", LABEL_MEMORY_ENFORCEMENT: "warn", LABEL_ONLINE_OFFLINE: "true"},
     PoolPolicy(sharing="fixed-share", memory_enforcement="warn", online_offline=True), []),
    ("the file wins over a stale label", {"placement": "spread"}, {LABEL_GPU_PLACEMENT: "binpack"}, PoolPolicy(placement="spread"), []),
    ("the file states no cap: a stale cap label loses", {"sharesPerGpu": None}, {LABEL_MAX_SHARES_PER_GPU: "2"}, PoolPolicy(shares_per_gpu=None), []),
    ("the file leaves shares out (re-partitioned): the label decides", {"policy": "burst-share"}, {LABEL_MAX_SHARES_PER_GPU: "1"},
     PoolPolicy(sharing="burst-share", shares_per_gpu=1), []),
    ("settings only the file carries", {"qgpuAliases": True, "offlineResumeIdleSeconds": 7}, {}, PoolPolicy(qgpu_aliases=True, offline_resume_idle_s=7.0), []),
    ("an unreadable file value falls through to the label", {"policy": "fixed"}, {LABEL_SHARING_POLICY: "fixed-share"}, PoolPolicy(sharing="fixed-share"),
     ["pools file p.policy: expected one of best-effort, fixed-share, burst-share, found 'fixed'"]),
    ("an unreadable label falls through to the default", None, {LABEL_ONLINE_OFFLINE: "yes", LABEL_MAX_SHARES_PER_GPU: "0"}, DEFAULT_POOL_POLICY,
     ['label tessera.dev/online-offline: expected "true" or "false", found \'yes\'', "label tessera.dev/max-shares-per-gpu: expected a whole number 1-100, found '0'"]),
    ("JSON types are checked, not coerced", {"onlineOffline": "true", "sharesPerGpu": 2.5, "offlineResumeIdleSeconds": True}, {}, DEFAULT_POOL_POLICY,
     ["pools file p.onlineOffline: expected true or false, found 'true'", "pools file p.offlineResumeIdleSeconds: expected seconds in (0, 3600], found True",
      "pools file p.sharesPerGpu: expected null or a whole number 1-100, found 2.5"]),
]


@pytest.mark.parametrize(("entry", "labels", "expected", "problems"), [r[1:] for r in RULE], ids=[r[0] for r in RULE])
def test_the_rule(entry: dict[str, Any] | None, labels: dict[str, str], expected: PoolPolicy, problems: list[str]) -> None:
    document = {POOL: entry} if entry is not None else {"another-pool": {"policy": "fixed-share"}}
    reading = read_pool_policy({**NODE, **labels}, document)
    assert reading.policy == expected
    assert sorted(reading.problems) == sorted(problems)


def test_an_entry_that_is_not_an_object_is_named_and_labels_decide() -> None:
    reading = read_pool_policy({**NODE, LABEL_SHARING_POLICY: "burst-share"}, {POOL: ["fixed-share"]})
    assert reading.policy == PoolPolicy(sharing="burst-share")
    assert reading.problems == ("pools file p: expected an object of pool settings, found list",)


def test_the_stack_configs_defaults_are_the_records() -> None:
    assert SharingConfig().pool_policy() == DEFAULT_POOL_POLICY
    assert DEFAULT_POOL_POLICY.memory_enforcement == "enforce", "what docs/configuration.md documents"


policies = pool_policies


@given(policy=policies, stale=policies)
def test_both_wire_forms_read_back_to_the_record(policy: PoolPolicy, stale: PoolPolicy) -> None:
    assert read_pool_policy({**NODE, **stale.node_labels()}, {POOL: policy.pools_entry()}).policy == policy
    assert policy_from_entry(policy.pools_entry()) == policy
    from_labels = read_pool_policy({**NODE, **policy.node_labels()}, {}).policy
    in_labels = {"sharing", "placement", "online_offline", "memory_enforcement", "shares_per_gpu"}
    assert all(getattr(from_labels, f.name) == getattr(policy if f.name in in_labels else DEFAULT_POOL_POLICY, f.name) for f in fields(PoolPolicy))


@given(policy=policies, layout=st.integers(min_value=1, max_value=100))
def test_a_re_partitioned_pools_shares_follow_its_label(policy: PoolPolicy, layout: int) -> None:
    entry = policy.pools_entry(shares_from_labels=True)
    assert "sharesPerGpu" not in entry
    reading = read_pool_policy({**NODE, **policy.node_labels(), LABEL_MAX_SHARES_PER_GPU: str(layout)}, {POOL: entry})
    assert reading.policy.shares_per_gpu == layout and reading.sources["shares_per_gpu"] == "label"
