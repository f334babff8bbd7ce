"""The generator takes a new stack config section as it comes: its keys, descriptions, defaults and
Literals reach the inputs and the schema the SDK's analyzer infers, with no hand-written step; what it
cannot express fails the generation with the field's name."""
from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pulumi.provider.experimental.analyzer import Analyzer, PropertyType
from pydantic import Field

from tessera.model.base import ConfigModel
from tessera.model.stack import StackConfig
from tessera_pulumi.package import codegen

ServiceTier = Literal["gold", "best-effort"]


class Budget(ConfigModel):
    """Spending limits of one team."""

    team: str = Field(description="Team name.")
    tier: ServiceTier = Field(default="gold", description="Service tier of the team's workloads.")
    gpu_hours: int = Field(default=100, ge=0, description="GPU hours a month.")


class Workloads(ConfigModel):
    """Workloads the platform runs for the teams."""

    budgets: list[Budget] = Field(default_factory=list, description="One budget per team.")
    namespace_prefix: str = Field(default="team-", description="Prefix of the teams' namespaces.")


class StackWithWorkloads(StackConfig):
    workloads: Workloads = Field(default_factory=Workloads, description="Team workloads.")


def _analyze(tmp_path: Path, files: dict[str, str], package: str) -> Any:
    """Write the generated ``files`` as a package plus a component taking TkeGpuClusterArgs, import
    it, run the SDK's analyzer."""
    component = textwrap.dedent('''
        import pulumi

        from .component_args import TkeGpuClusterArgs


        class Probe(pulumi.ComponentResource):
            """A component that takes the generated inputs."""

            def __init__(self, name: str, args: TkeGpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
                super().__init__("tessera:index:Probe", name, None, opts)
    ''')
    codegen.write(tmp_path / package, {**files, "probe.py": component})
    sys.path.insert(0, str(tmp_path))
    try:
        probe = importlib.import_module(f"{package}.probe").Probe
        return Analyzer("tessera").analyze([probe])
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
            sys.modules.pop(name, None)


def test_a_new_section_reaches_the_schema_with_its_docs_defaults_and_enums(tmp_path: Path) -> None:
    files = codegen.render(StackWithWorkloads)
    section = files["test_package_codegen.py"]  # the args module mirrors the model's module
    assert "class Workloads(TypedDict):" in section and "class Budget(TypedDict):" in section
    assert "Workloads" in files["__init__.py"] and "from .test_package_codegen import" in files["component_args.py"]
    result = _analyze(tmp_path, files, "generated_with_workloads")
    inputs = result["component_definitions"]["Probe"].inputs
    assert inputs["workloads"].description == "Team workloads."
    assert inputs["workloads"].optional is True
    types = result["type_definitions"]
    budget = types["Budget"].properties
    assert set(budget) == {"team", "tier", "gpuHours"}
    assert budget["gpuHours"].type == PropertyType.INTEGER and budget["gpuHours"].description == "GPU hours a month. Default: `100`."
    assert budget["tier"].ref == "#/types/tessera:index:ServiceTier"  # named as in the model
    assert [(e.name, e.value) for e in types["ServiceTier"].enum or []] == [("Gold", "gold"), ("BestEffort", "best-effort")]
    assert types["Workloads"].properties["namespacePrefix"].description == "Prefix of the teams' namespaces. Default: `team-`."


def test_todays_generated_module_is_what_the_analyzer_reads(tmp_path: Path) -> None:
    result = _analyze(tmp_path, codegen.render(), "generated_today")
    assert {"cluster", "nodePools", "secrets"} <= set(result["component_definitions"]["Probe"].inputs)


class Undocumented(ConfigModel):
    """A section with a field nobody described."""

    size: int = Field(default=1)


class StackWithUndocumented(StackConfig):
    extra: Undocumented = Field(default_factory=Undocumented, description="Extra.")


class Timed(ConfigModel):
    """A section with a type the schema has no word for."""

    at: complex = Field(default=0j, description="A complex number.")


class StackWithComplex(StackConfig):
    timed: Timed = Field(default_factory=Timed, description="Timed.")


@pytest.mark.parametrize(("stack", "message"), [
    (StackWithUndocumented, "Undocumented.size has no description"),
    (StackWithComplex, "Timed.at: no schema type for <class 'complex'>"),
])
def test_what_the_generator_cannot_express_fails_naming_the_field(stack: type[StackConfig], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        codegen.render(stack)
