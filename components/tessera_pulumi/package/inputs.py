"""A component's inputs -> the validated StackConfig, with the problems `tessera validate` reports.

Whichever language calls, the inputs arrive as the stack file's keys (camelCase; Python callers may
use the TypedDicts' snake_case names) and go through the same pydantic model and cross-field rules
as a stack file, so a bad value gets the same `path: message` line. Three things only the package
route needs, handled before the model sees the values:

- values must be known when the component is constructed: an output of another resource (or an
  unknown value during preview) in a config field is a problem naming the field, because the
  config decides which resources exist;
- numbers cross the wire as floats (protobuf has one number type), so whole floats become ints
  again: `replicas: 4` must not fail as 4.0 in the fields typed "a count or a mapping";
- `secrets` is the one input that may hold outputs: it is handed to TesseraStack as the
  `tessera:<key>` values the stack-file program reads from the engine's config.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Any, Final

import pulumi
from pulumi.errors import InputPropertiesError
from pulumi.output import Unknown
from pydantic import ValidationError

from tessera.model.errors import problems_from_validation_error
from tessera.model.problems import PathPart, Problem, format_path
from tessera.model.secrets import named_by
from tessera.model.stack import StackConfig
from tessera_pulumi.package.spec import SECRETS_FIELD, ComponentSpec

REGION_KEY: Final = "tencentcloud:region"  # how the model names `region` in its problems (the stack file's key)
NAMESPACE: Final = "tessera"


class InputsError(InputPropertiesError):
    """Bad component inputs: one `path: message` problem per entry, as the engine shows property errors."""

    def __init__(self, component: str, problems: list[Problem]) -> None:
        count = len(problems)
        lines = "\n".join(str(p) for p in problems)
        super().__init__(
            f"{component}: the inputs have {count} problem{'s' if count != 1 else ''}; nothing was deployed:\n{lines}",
            [{"property_path": p.path, "reason": p.message} for p in problems],
        )
        self.problems = problems


def _is_late(value: Any) -> bool:
    return isinstance(value, pulumi.Output | Unknown)


def _plain(value: Any, path: tuple[PathPart, ...], problems: list[Problem]) -> Any:
    """``value`` as plain data (enums to their values, whole floats to ints); outputs are problems."""
    if _is_late(value):
        problems.append(Problem(
            format_path(path),
            "must be a plain value known when the component is created, not an output of another resource: "
            "Tessera validates the config and decides from it which resources to declare",
        ))
        return None
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _plain(item, (*path, str(key)), problems) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, (*path, i), problems) for i, item in enumerate(value)]
    return value


def _in_package_terms(problem: Problem) -> Problem:
    """The stack file calls the region `tencentcloud:region`; the package's input is `region`."""
    return Problem(problem.path.replace(REGION_KEY, "region"), problem.message.replace(REGION_KEY, "region"))


def _alias(name: str) -> str:
    info = StackConfig.model_fields[name]
    return info.alias or name


def _shape_problems(spec: ComponentSpec, inputs: Mapping[str, Any]) -> list[Problem]:
    problems = [
        Problem(key, f"unknown key {key!r}: {spec.name} does not take it (it belongs to the other component)")
        for key in dict.fromkeys(k for name in spec.stack_fields_left_out for k in (name, _alias(name)))
        if key in inputs
    ]
    cluster = inputs.get("cluster")
    if isinstance(cluster, Mapping) and "provider" in cluster:
        problems.append(Problem("cluster.provider", f"unknown key 'provider': {spec.name} is always provider {spec.provider}"))
    secrets = inputs.get(SECRETS_FIELD)
    if secrets is not None and not _is_late(secrets):
        if not isinstance(secrets, Mapping):
            problems.append(Problem(SECRETS_FIELD, "must be a mapping of key to secret value"))
        else:
            problems += [
                Problem(format_path((SECRETS_FIELD, str(key))), "must be a string")
                for key, value in secrets.items()
                if not (_is_late(value) or isinstance(value, str))
            ]
    return problems


def validate(spec: ComponentSpec, inputs: Mapping[str, Any]) -> StackConfig:
    """The stack config the inputs describe, for the component ``spec``; InputsError listing every problem."""
    shape = _shape_problems(spec, inputs)
    late: list[Problem] = []
    data = _plain({k: v for k, v in inputs.items() if k != SECRETS_FIELD}, (), late)
    if late:  # the model would only add noise about the values it could not see
        raise InputsError(spec.name, shape + late)
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        data["cluster"] = {**cluster, "provider": spec.provider}  # a `provider` the caller sent is a shape problem
    try:
        config = StackConfig.model_validate(data, by_alias=True, by_name=True)
    except ValidationError as error:
        problems = [_in_package_terms(p) for p in problems_from_validation_error(error, StackConfig)]
        raise InputsError(spec.name, shape + problems) from None
    problems = shape + _secret_problems(config, inputs.get(SECRETS_FIELD))
    if problems:
        raise InputsError(spec.name, problems)
    return config


def _secret_problems(config: StackConfig, secrets: Any) -> list[Problem]:
    """A config field that names a secret whose key `secrets` lacks (checked when the keys are known)."""
    if _is_late(secrets):
        return []  # one output: its keys are checked when it resolves (_LateSecrets)
    known = secrets if isinstance(secrets, Mapping) else {}
    return [
        Problem(field.dotted, f"names the secret {key!r}, which {SECRETS_FIELD} does not hold; add it: {SECRETS_FIELD}: {{{key}: <the secret>}}")
        for key, field in named_by(config).items()
        if key not in known
    ]


class _LateSecrets(Mapping[str, Any]):
    """`secrets` that arrived as one output (a map holding a secret is sent as one secret value): its
    keys are not known yet, so each lookup is an output that fails, naming the key, if it is missing."""

    def __init__(self, values: pulumi.Output[Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> pulumi.Output[str]:
        namespace, _, name = key.partition(":")
        if namespace != NAMESPACE or not name:
            raise KeyError(key)

        def pick(values: Mapping[str, Any]) -> str:
            if values.get(name) is None:
                raise pulumi.RunError(f"{SECRETS_FIELD}.{name}: is not set, but the config names it; add it to {SECRETS_FIELD}")
            return str(values[name])

        return pulumi.Output.secret(self._values.apply(pick))

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True  # holds values even though none can be listed yet (callers write `secrets or {}`)


def secret_values(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `secrets` input as TesseraStack reads secrets: `tessera:<key>` -> value (an output or text)."""
    secrets = inputs.get(SECRETS_FIELD)
    if secrets is None:
        return {}
    if isinstance(secrets, pulumi.Output):
        return _LateSecrets(secrets)
    return {f"{NAMESPACE}:{key}": value for key, value in secrets.items()}
