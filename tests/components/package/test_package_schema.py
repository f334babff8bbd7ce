"""The package schema is complete: every stack config key of a component is an input, documented,
with its default, and every kind or policy is an enum of exactly the model's values.

The schema is read from the committed snapshot (test_package_generated.py holds it equal to what the
provider serves); the model side is walked here independently of the generator.
"""
from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tessera.model.cluster import ClusterConfig
from tessera.model.stack import StackConfig
from tessera_pulumi.package.spec import COMPONENT_SPECS, SECRETS_FIELD, ComponentSpec

ROOT = Path(__file__).resolve().parents[3]
SCHEMA: dict[str, Any] = json.loads((ROOT / "components" / "schema.json").read_text(encoding="utf-8"))
TYPES: dict[str, Any] = SCHEMA["types"]
SPECS = {spec.name: spec for spec in COMPONENT_SPECS}


def _ref_type(prop: dict[str, Any]) -> dict[str, Any] | None:
    ref = prop.get("$ref", "")
    return TYPES[ref.removeprefix("#/types/")] if ref.startswith("#/types/") else None


def schema_properties(props: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(config path, property) for every property reachable from ``props``; [] marks a list item, {} a map value."""
    for name, prop in props.items():
        path = f"{prefix}.{name}" if prefix else name
        yield path, prop
        node, suffix = prop, ""
        if node.get("type") == "array":
            node, suffix = node["items"], "[]"
        elif node.get("type") == "object" and "additionalProperties" in node:
            node, suffix = node["additionalProperties"], "{}"
        target = _ref_type(node)
        if target is not None and "properties" in target:
            yield from schema_properties(target["properties"], path + suffix)


def _strip(tp: Any) -> Any:
    while get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _strip(members[0])
    return tp


def model_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo, Any]]:
    """(config path, field, its type without Annotated/Optional) for every key of the model's tree;
    a union of sections (the pool kinds) contributes every member's keys."""
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}" if prefix else (info.alias or name)
        tp = _strip(info.annotation)
        yield path, info, tp
        suffix = ""
        if get_origin(tp) is list:
            tp, suffix = _strip(get_args(tp)[0]), "[]"
        elif get_origin(tp) is dict:
            tp, suffix = _strip(get_args(tp)[1]), "{}"
        members = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
        for member in members:
            if isinstance(member, type) and issubclass(member, BaseModel):
                yield from model_fields(member, path + suffix)


def _left_out(spec: ComponentSpec) -> set[str]:
    stack = {StackConfig.model_fields[n].alias or n for n in spec.stack_fields_left_out}
    cluster = {f"cluster.{ClusterConfig.model_fields[n].alias or n}" for n in spec.cluster_fields_left_out}
    return stack | cluster


def _expected_paths(spec: ComponentSpec) -> dict[str, list[tuple[FieldInfo, Any]]]:
    left_out = _left_out(spec)
    found: dict[str, list[tuple[FieldInfo, Any]]] = {}
    for path, info, tp in model_fields(StackConfig):
        if not any(path == p or path.startswith((p + ".", p + "[", p + "{")) for p in left_out):
            found.setdefault(path, []).append((info, tp))
    return found


def _inputs(spec: ComponentSpec) -> dict[str, dict[str, Any]]:
    resource = SCHEMA["resources"][spec.type_token]
    return dict(schema_properties(resource["inputProperties"]))


@pytest.mark.parametrize("spec", COMPONENT_SPECS, ids=[s.name for s in COMPONENT_SPECS])
def test_every_key_of_the_components_config_is_an_input_and_nothing_else(spec: ComponentSpec) -> None:
    expected = set(_expected_paths(spec)) | {SECRETS_FIELD}
    assert set(_inputs(spec)) == expected


def test_each_component_takes_only_its_providers_cluster_keys() -> None:
    tke, existing = _inputs(SPECS["TkeGpuCluster"]), _inputs(SPECS["ExistingClusterPlatform"])
    assert {"region", "cluster.vpcCidr", "cluster.subnets", "cluster.systemNodes.count"} <= set(tke)
    assert not {"cluster.kubeconfig", "cluster.context", "cluster.provider"} & set(tke)
    assert {"cluster.kubeconfig.secret", "cluster.context", "nodePools[].nodeSelector"} <= set(existing)
    assert not {"region", "cluster.vpcCidr", "cluster.level", "cluster.provider"} & set(existing)


def _documented(props: dict[str, Any], where: str) -> list[str]:
    return [f"{where}.{name}" for name, prop in props.items() if not str(prop.get("description") or "").strip()]


def test_every_input_output_and_type_property_has_a_description() -> None:
    missing: list[str] = []
    for token, resource in SCHEMA["resources"].items():
        assert resource["description"].strip(), token
        missing += _documented(resource["inputProperties"], f"{token} input")
        missing += _documented(resource["properties"], f"{token} output")
    for token, typ in TYPES.items():
        assert str(typ.get("description") or "").strip(), token
        missing += _documented(typ.get("properties", {}), token)
    assert missing == []


@pytest.mark.parametrize("spec", COMPONENT_SPECS, ids=[s.name for s in COMPONENT_SPECS])
def test_every_literal_in_the_model_is_an_enum_of_exactly_its_values(spec: ComponentSpec) -> None:
    inputs = _inputs(spec)
    checked = 0
    for path, fields in _expected_paths(spec).items():
        literals = [tp for _, tp in fields if get_origin(tp) is Literal]
        if not literals:
            continue
        values = {v for tp in literals for v in get_args(tp)}  # a pool kind's Literal["mig"] adds to the others
        enum = _ref_type(inputs[path])
        assert enum is not None and "enum" in enum, f"{path} is not an enum"
        assert {e["value"] for e in enum["enum"]} == values, path
        checked += 1
    assert checked >= 10


KINDS_AND_POLICIES = [
    ("nodePools[].kind", "PoolKind", {"nvidia", "shared", "mig", "timeslice"}),
    ("nodePools[].sharing.policy", "SharingPolicy", {"best-effort", "fixed-share", "burst-share"}),
    ("nodePools[].sharing.placement", "GpuPlacement", {"binpack", "spread"}),
    ("nodePools[].sharing.memoryEnforcement", "MemoryEnforcement", {"warn", "enforce"}),
    ("nodePools[].mig.strategy", "MigStrategy", {"single", "mixed"}),
    ("nodePools[].taints[].effect", "TaintEffect", {"NoSchedule", "PreferNoSchedule", "NoExecute"}),
    ("scheduler.placement", "NodePlacement", {"binpack", "spread", "fragmentation-aware"}),
    ("webhook.failurePolicy", "FailurePolicy", {"Fail", "Ignore"}),
    ("cluster.level", "ClusterLevel", {"L5", "L20", "L50", "L100", "L200", "L500", "L1000", "L3000", "L5000"}),
]


@pytest.mark.parametrize(("path", "name", "values"), KINDS_AND_POLICIES, ids=[k[0] for k in KINDS_AND_POLICIES])
def test_kinds_and_policies_are_named_enums(path: str, name: str, values: set[str]) -> None:
    prop = _inputs(SPECS["TkeGpuCluster"])[path]
    assert prop["$ref"] == f"#/types/tessera:index:{name}"
    enum = TYPES[f"tessera:index:{name}"]
    assert enum["type"] == "string"
    assert {e["value"] for e in enum["enum"]} == values
    assert all(e["name"][:1].isupper() and "-" not in e["name"] and "_" not in e["name"] for e in enum["enum"])  # PascalCase


@pytest.mark.parametrize("spec", COMPONENT_SPECS, ids=[s.name for s in COMPONENT_SPECS])
def test_every_default_of_the_stack_config_is_in_the_description(spec: ComponentSpec) -> None:
    inputs = _inputs(spec)
    checked = 0
    for path, fields in _expected_paths(spec).items():
        info = fields[0][0]
        if info.is_required():
            continue
        default = info.get_default(call_default_factory=True)
        if isinstance(default, bool):
            text = f"Default: `{str(default).lower()}`."
        elif isinstance(default, str | int | float) and default != "":
            text = f"Default: `{default}`."
        else:
            continue
        assert text in inputs[path]["description"], path
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize("spec", COMPONENT_SPECS, ids=[s.name for s in COMPONENT_SPECS])
def test_required_inputs_are_the_models_and_only_secrets_take_outputs(spec: ComponentSpec) -> None:
    resource = SCHEMA["resources"][spec.type_token]
    assert resource["requiredInputs"] == ["cluster", "nodePools"]
    for name, prop in resource["inputProperties"].items():
        assert prop.get("plain") is (None if name == SECRETS_FIELD else True), name
    assert TYPES["tessera:index:NodePool"]["required"] == ["kind", "name"]
    assert TYPES["tessera:index:MigConfig"]["required"] == ["profile"]


def test_kind_only_pool_fields_say_which_kinds_take_them() -> None:
    pool = TYPES["tessera:index:NodePool"]["properties"]
    assert pool["sharing"]["description"].startswith("Pools of kind shared only.")
    assert pool["mig"]["description"].startswith("Pools of kind mig only (required for mig).")
    assert pool["timeSlicing"]["description"].startswith("Pools of kind mig or timeslice only (required for timeslice).")


def test_outputs_and_the_components_are_documented_for_other_languages() -> None:
    tke = SCHEMA["resources"]["tessera:index:TkeGpuCluster"]
    assert set(tke["properties"]) == {"clusterId", "kubeconfig", "poolNames", "plan"}
    existing = SCHEMA["resources"]["tessera:index:ExistingClusterPlatform"]
    assert set(existing["properties"]) == {"poolNames", "plan"}
    assert SCHEMA["name"] == "tessera" and SCHEMA["version"]
