"""The model package: its stack config names load on first use, so the node processes and the
allocation model, which need only the contract, start without building the pydantic models."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tessera.model


def test_importing_the_contract_and_records_loads_no_stack_config() -> None:
    code = (
        "import sys, tessera.model.contract, tessera.model.pools_file, tessera.model.allocation_record; "
        "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'yaml', 'tessera.model.stack'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("name", tessera.model.__all__)
def test_every_exported_name_is_its_modules_object(name: str) -> None:
    value = getattr(tessera.model, name)
    module = importlib.import_module(f"tessera.model.{tessera.model._MODULE_OF[name]}")
    assert value is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'StackConfg'"):
        tessera.model.StackConfg  # type: ignore[attr-defined]  # noqa: B018
