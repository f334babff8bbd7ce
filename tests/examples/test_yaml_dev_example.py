"""examples/yaml-dev: a Pulumi YAML program declaring stacks/Pulumi.dev.yaml's cluster through the
component package. Its component's properties go through the package's provider under Pulumi mocks
(as the YAML runtime's Construct call would send them) and must declare what the Python program
(`__main__.py` on stacks/Pulumi.dev.yaml) declares: the same resources, names, inputs, providers and
tree, with the package's TkeGpuCluster on top. No Pulumi CLI runs here.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml
from pulumi_package_mocks import Run, construct, engine_config, package_inputs, run_program
from pulumi_program_mocks import ROOT

EXAMPLE = ROOT / "examples" / "yaml-dev" / "Pulumi.yaml"
COMPONENT = "tessera:index:TkeGpuCluster"
SCHEMA: dict[str, Any] = json.loads((ROOT / "components" / "schema.json").read_text(encoding="utf-8"))


def _program() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return document


def _component() -> tuple[str, dict[str, Any]]:
    ((name, resource),) = _program()["resources"].items()
    assert resource["type"] == COMPONENT
    return name, resource["properties"]


def test_program_is_yaml_using_the_package_of_this_repository() -> None:
    program = _program()
    assert program["runtime"] == "yaml"
    package = (EXAMPLE.parent / program["packages"]["tessera"]).resolve()
    assert package == ROOT / "components"
    assert yaml.safe_load((package / "PulumiPlugin.yaml").read_text())["runtime"]["name"] == "python"


def test_properties_are_the_dev_stacks_config() -> None:
    _, properties = _component()
    assert properties == package_inputs("dev")
    assert _program()["config"]["tencentcloud:region"] == properties["region"]


def _unknown_keys(value: Any, prop: dict[str, Any], path: str) -> list[str]:
    """Keys of ``value`` the schema does not declare at ``prop`` (what Pulumi YAML's type check rejects)."""
    if prop.get("type") == "array":
        return [k for i, item in enumerate(value) for k in _unknown_keys(item, prop["items"], f"{path}[{i}]")]
    ref = prop.get("$ref", "")
    typ = SCHEMA["types"].get(ref.removeprefix("#/types/")) if ref.startswith("#/types/") else None
    if typ is None or "properties" not in typ:
        return []
    return [k for key, item in value.items() for k in (
        [f"{path}.{key}"] if key not in typ["properties"] else _unknown_keys(item, typ["properties"][key], f"{path}.{key}")
    )]


def test_properties_are_plain_values_the_schema_declares() -> None:
    _, properties = _component()
    text = json.dumps(properties)
    assert "${" not in text and "fn::" not in text  # plain: known when the component is constructed
    inputs = SCHEMA["resources"][COMPONENT]["inputProperties"]
    unknown = [key for key in properties if key not in inputs]
    unknown += [k for key, value in properties.items() if key in inputs for k in _unknown_keys(value, inputs[key], key)]
    assert unknown == []


def test_outputs_read_the_components_outputs() -> None:
    name, _ = _component()
    declared = SCHEMA["resources"][COMPONENT]["properties"]
    for key, expression in _program()["outputs"].items():
        assert expression == f"${{{name}.{key}}}" and key in declared


@pytest.fixture(scope="module")
def both() -> tuple[Run, Run]:
    name, properties = _component()
    return construct("TkeGpuCluster", properties, name=name), run_program(engine_config("dev"))


def _keys(run: Run) -> Counter[tuple[str, str]]:
    return Counter((r.typ, r.name) for r in run.resources)


def test_the_same_resources_with_the_component_on_top(both: tuple[Run, Run]) -> None:
    package, program = both
    assert _keys(package) - _keys(program) == Counter({(COMPONENT, "tessera"): 1})
    assert _keys(program) - _keys(package) == Counter()
    assert sum(1 for r in program.resources if r.custom) >= 10  # the comparison is not vacuous


def _by_key(run: Run) -> dict[tuple[str, str], Any]:
    return {(r.typ, r.name): r for r in run.resources}


def _urn_key(urn: str) -> tuple[str, str] | None:
    if not urn:
        return None
    *_, types, name = urn.split("::")
    return types.split("$")[-1], name


def test_every_resource_gets_the_same_inputs_and_provider(both: tuple[Run, Run]) -> None:
    package, program = _by_key(both[0]), _by_key(both[1])
    for key, declared in program.items():
        twin = package[key]
        assert twin.inputs == declared.inputs, key
        assert (twin.provider or "").split("::")[-1] == (declared.provider or "").split("::")[-1], key


def test_the_tree_is_the_programs_under_the_component(both: tuple[Run, Run]) -> None:
    package = {_urn_key(urn): _urn_key(parent) for urn, parent in both[0].parents.items()}
    program = {_urn_key(urn): _urn_key(parent) for urn, parent in both[1].parents.items()}
    stack = ("pulumi:pulumi:Stack", "tessera-test")
    package.pop(stack, None)  # the root stack registers itself in one harness and not the other
    program.pop(stack, None)
    assert package.pop((COMPONENT, "tessera")) == stack
    assert package.pop(("tessera:index:TesseraStack", "tessera")) == (COMPONENT, "tessera")
    assert program.pop(("tessera:index:TesseraStack", "tessera")) == stack
    assert package == program


def test_the_component_exports_what_the_program_exports(both: tuple[Run, Run]) -> None:
    package, _ = both
    assert package.outputs["poolNames"] == ["t4-exclusive", "t4-shared"]
    assert package.outputs["plan"]["cluster"] == "tessera-dev"
    assert package.secret_outputs == {"kubeconfig"}

