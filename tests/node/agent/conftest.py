"""Fixtures for node agent tests (the harness lives in agent_world.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_world import World

from tessera.model.pool_policy import PoolPolicy


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path, policy=PoolPolicy(online_offline=True, offline_resume_idle_s=2.0))
