"""docs/architecture.md says what the import-linter contracts in pyproject.toml enforce: the same
contracts, the same layers in the same order, and every package of `tessera` in the drawing, the
contracts and the path table. A package added without a place in them fails here."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def _documented() -> dict[str, str]:
    """contract id -> the "says" column of the docs' contracts table."""
    section = DOC.split("### Contracts", 1)[1].split("\n### ", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^\| `([\w-]+)` \| (.+) \|$", section, re.M)}


def _layers_of(text: str) -> list[set[str]]:
    """`a \\| b` > `c` ... as [{a, b}, {c}]."""
    return [{name.strip(" `") for name in row.split("\\|")} for row in text.split(" > ")]


def _package_names() -> list[str]:
    names = [p.name for p in (ROOT / "tessera").iterdir() if (p / "__init__.py").exists()]
    names += [p.stem for p in (ROOT / "tessera").glob("*.py") if p.stem != "__init__"]
    return sorted(f"tessera.{n}" for n in names)


def test_the_docs_list_exactly_the_contracts_pyproject_declares() -> None:
    assert sorted(_documented()) == sorted(_contracts())


def test_each_layers_contract_reads_as_documented() -> None:
    documented = _documented()
    for contract_id, contract in _contracts().items():
        if contract["type"] != "layers":
            continue
        declared = [{name.strip() for name in row.split("|")} for row in contract["layers"]]
        said = documented[contract_id].split(": ", 1)[-1] if contract.get("containers") else documented[contract_id]
        said = said.split(";", 1)[0]
        assert _layers_of(said) == declared, f"{contract_id}: docs say {said!r}, pyproject.toml declares {contract['layers']}"


def test_every_package_of_tessera_has_a_layer_a_box_and_a_row() -> None:
    layered = {name for row in _contracts()["layers"]["layers"] for name in (n.strip() for n in row.split("|"))}
    drawing = DOC.split("## Layers", 1)[1].split("```", 2)[1]
    table = DOC.split("## Layers", 1)[0]
    for package in _package_names():
        assert package in layered, f"{package} is in no row of the layers contract (pyproject.toml)"
        short = package.removeprefix("tessera")
        assert package in drawing or f" {short} " in drawing or f"{short} " in drawing, f"{package} is not in the drawing of docs/architecture.md"
        path = package.replace(".", "/")
        assert f"`{path}/`" in table or f"`{path}.py`" in table, f"{path} has no row in the table of docs/architecture.md"
