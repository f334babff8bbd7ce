"""The stack settings whose value is the name of a Pulumi secret, and the secrets they name.

A stack file never holds a credential in clear: a setting such as `cluster.kubeconfig.secret` names a
config key (`tessera:<name>`), and `pulumi config set --secret tessera:<name> ...` stores the value
there, encrypted (`tessera:<name>: {secure: ...}` in the stack file; the engine hands the program the
plain text and lists the key in PULUMI_CONFIG_SECRET_KEYS). The stack-file readers (`tessera
validate`, `plan`, `render`), the Pulumi program and the package's components all learn from here
which keys are secrets, so a secret that the stack names is accepted wherever the user sets it.
"""
from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from tessera.model.stack import StackConfig, is_stack_key


@dataclass(frozen=True)
class SecretField:
    """One setting that names a secret."""

    attributes: tuple[str, ...]
    """Python attribute path from StackConfig."""
    value_hint: str
    """What follows the key in `pulumi config set --secret tessera:<key> ...`."""

    @property
    def path(self) -> tuple[str, ...]:
        """The setting as the stack file spells it (aliases)."""
        return _alias_path(self.attributes)

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def set_command(self, key: str) -> str:
        return f"pulumi config set --secret tessera:{key} {self.value_hint}"


# A new setting that names a Pulumi secret joins this table (tests/tessera/model/test_secrets.py
# fails for a `PulumiKey` field left out).
SECRET_FIELDS: Final[tuple[SecretField, ...]] = (
    SecretField(("cluster", "kubeconfig", "secret"), '"$(cat kubeconfig)"'),
    SecretField(("monitoring", "kube_prometheus_stack", "grafana", "admin_password_secret"), "<password>"),
)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (through `X | None` and `Annotated`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _alias_path(attributes: tuple[str, ...]) -> tuple[str, ...]:
    model: type[BaseModel] | None = StackConfig
    path: list[str] = []
    for attribute in attributes:
        assert model is not None, f"{attributes}: {path} is not a settings object"
        info = model.model_fields[attribute]
        path.append(info.alias or attribute)
        model = _model_in(info.annotation)
    return tuple(path)


def _decoded(value: Any) -> Any:
    """The engine hands structured values to the program as JSON text."""
    if isinstance(value, str) and value.lstrip()[:1] == "{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def named_in(mapping: Mapping[str, Any]) -> dict[str, SecretField]:
    """The secret keys that raw settings name (keys without the tessera: prefix, as in a stack file
    or the engine's config) -> the setting naming each. Read before validation, so that the
    secrets themselves are set aside first. A name that is one of Tessera's own settings is left
    out (the model reports it; the setting is never dropped for it)."""
    named: dict[str, SecretField] = {}
    for field in SECRET_FIELDS:
        value: Any = mapping
        for part in field.path:
            value = _decoded(value)
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value and not is_stack_key(value):
            named.setdefault(value, field)
    return named


def named_by(config: StackConfig) -> dict[str, SecretField]:
    """The secret keys a validated stack names -> the setting naming each."""
    named: dict[str, SecretField] = {}
    for field in SECRET_FIELDS:
        value: Any = config
        for attribute in field.attributes:
            value = getattr(value, attribute, None) if value is not None else None
        if isinstance(value, str):
            named.setdefault(value, field)
    return named
