"""Pulumi mocks harness for the component package: the provider's construct, and the real program.

`construct(component, inputs)` runs `TesseraProvider.construct` in-process under the mocks, as the
engine's Construct call would for a program in any language (the inputs are what that language's
SDK sends: the schema's camelCase keys). `run_program(config)` runs the real `__main__.py` with the
engine config a stack file gives, so the two routes can be compared resource by resource.
"""
from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi.runtime
import yaml
from pulumi.runtime.mocks import MockResourceArgs
from pulumi_program_mocks import ROOT, STACKS, start_mocks

from tessera_pulumi.package.provider import TesseraProvider

PACKAGE = "tessera"


@dataclass
class Run:
    """What one run declared: every registration (components included), each one's parent URN, and
    the component's resolved outputs (construct only)."""

    resources: list[MockResourceArgs]
    parents: dict[str, str]
    names: dict[str, str]  # resource name -> URN (the last registration of that name)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)

    def of_type(self, typ: str) -> list[MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, typ: str, name: str) -> MockResourceArgs:
        (found,) = [r for r in self.resources if r.typ == typ and r.name == name]
        return found


def construct(component: str, inputs: dict[str, Any], name: str = "tessera", options: pulumi.ResourceOptions | None = None) -> Run:
    """Construct ``component`` through the package's provider; raises what construct raises."""
    mocks, monitor = start_mocks()
    run = Run([], {}, {})

    @pulumi.runtime.test
    def body() -> pulumi.Output[Any]:
        result = TesseraProvider().construct(name, f"{PACKAGE}:index:{component}", inputs, options or pulumi.ResourceOptions())

        async def secrets() -> set[str]:
            return {k for k, v in result.state.items() if isinstance(v, pulumi.Output) and await v.is_secret()}

        def record(values: list[Any]) -> None:
            run.outputs.update(values[0])
            run.secret_outputs.update(values[1])

        secret_names: pulumi.Output[set[str]] = pulumi.Output.from_input(secrets())  # type: ignore[arg-type]
        return pulumi.Output.all(pulumi.Output.from_input(result.state), secret_names).apply(record)

    body()
    run.resources, run.parents, run.names = list(mocks.resources), dict(monitor.parents), dict(monitor.names)
    return run


def engine_config(stack: str) -> dict[str, str]:
    """The stack file's config as the engine hands it to a program: key -> JSON text for objects."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in document["config"].items()}


def run_program(config: dict[str, str]) -> Run:
    """The real `__main__.py` under the mocks, as `pulumi up` runs it with this engine config."""
    mocks, monitor = start_mocks()
    pulumi.runtime.set_all_config(config)
    try:
        pulumi.runtime.test(lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"))()
    finally:
        pulumi.runtime.set_all_config({})
    return Run(list(mocks.resources), dict(monitor.parents), dict(monitor.names))


def package_inputs(stack: str) -> dict[str, Any]:
    """A stack file's config as the package's inputs: the `tessera:` keys without the prefix,
    `region` for tencentcloud:region, and no cluster.provider (each component fixes it)."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    inputs: dict[str, Any] = {}
    for key, value in document["config"].items():
        namespace, _, name = key.partition(":")
        if key == "tencentcloud:region":
            inputs["region"] = value
        elif namespace == PACKAGE:
            inputs[name] = value
    inputs["cluster"] = {k: v for k, v in inputs["cluster"].items() if k != "provider"}
    return inputs
