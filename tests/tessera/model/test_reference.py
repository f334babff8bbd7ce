"""docs/configuration.md is exactly what the generator produces from the models."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tessera.model.pools import PoolBase
from tessera.model.reference import SECTIONS, render
from tessera.model.stack import StackConfig

ROOT = Path(__file__).resolve().parents[3]


def test_configuration_reference_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/configuration.md is stale: run `python -m tessera.model.reference > docs/configuration.md`"


def test_generator_runs_as_a_module() -> None:
    result = subprocess.run([sys.executable, "-m", "tessera.model.reference"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0 and result.stdout == render()


def test_every_field_is_documented() -> None:
    for _, model in SECTIONS:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
    text = render()
    for key in ("tessera:nodePools", "qgpuAliases", "timeSlicing", "repartition", "allowedCidrs", "requireDigests"):
        assert key in text
    assert StackConfig.model_fields and PoolBase.model_fields
