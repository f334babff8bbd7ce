"""The base of every stack-config model: camelCase keys, snake_case attributes, unknown keys rejected."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    """Frozen, strict about unknown keys; YAML/Pulumi keys are camelCase, Python attributes snake_case."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
    )

    def user_set(self, field_name: str) -> bool:
        """Whether the user wrote this key (as opposed to getting the default)."""
        return field_name in self.model_fields_set
