"""The package's provider: the SDK's component provider, with Tessera's validation on the way in.

`pulumi.provider.experimental.ComponentProvider` infers the schema from the components' annotations
(analyzer) and constructs them. Before calling a component it maps the inputs itself, and that
mapping decides things Tessera must decide with the model instead: it drops keys the schema lacks
(Pulumi YAML can send them), truncates numbers in integer fields (`maxSize: 1.5` becomes 1), raises
its own message for a value outside an enum, and turns an object-typed input that is an output into
an empty object. `TesseraProvider.map_inputs` instead validates the inputs as they were sent, with
the model, and hands them on unchanged: every problem comes back as one `path: message` property
error, the lines `tessera validate` prints for the same values in a stack file. A problem raised
later, inside the component's constructor, would reach the user wrapped in a stack trace.

`serve` is the SDK's `component_provider_host` for this provider class (the SDK's host function
always builds a plain ComponentProvider).
"""
from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from pulumi.output import Inputs
from pulumi.provider import main
from pulumi.provider.experimental.analyzer import ComponentDefinition
from pulumi.provider.experimental.component import ComponentProvider

from tessera_pulumi.package.components import ExistingClusterPlatform, TkeGpuCluster
from tessera_pulumi.package.inputs import validate
from tessera_pulumi.package.spec import COMPONENT_SPECS, PACKAGE_NAME

COMPONENTS: Final = (TkeGpuCluster, ExistingClusterPlatform)
_SPECS: Final = {spec.name: spec for spec in COMPONENT_SPECS}


def package_version() -> str:
    """The package's version: the installed `tessera` distribution's (pyproject.toml)."""
    try:
        return version("tessera")
    except PackageNotFoundError:
        return "0.0.0"


class TesseraProvider(ComponentProvider):
    """Serves TkeGpuCluster and ExistingClusterPlatform; inputs are validated by the stack config model."""

    def __init__(self) -> None:
        super().__init__(list(COMPONENTS), PACKAGE_NAME, None, package_version())

    def map_inputs(self, inputs: Inputs, component_def: ComponentDefinition) -> Inputs:
        validate(_SPECS[component_def.name], inputs)  # raises InputsError, an InputPropertiesError
        return inputs


def serve(args: list[str] | None = None) -> None:
    """Run the provider for the Pulumi engine (what `components/__main__.py` does)."""
    main(TesseraProvider(), sys.argv[1:] if args is None else args)
