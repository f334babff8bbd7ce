"""Load a StackConfig from a Pulumi stack file or from the values the Pulumi program reads.

Adapters only: decode (YAML / Pulumi config), map keys, validate with the model, report Problems.
"""
from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tessera.model.errors import problems_from_validation_error
from tessera.model.problems import ConfigError, Problem
from tessera.model.secrets import SECRET_FIELDS, SecretField, named_in
from tessera.model.stack import StackConfig

NAMESPACE: Final = "tessera"
REGION_KEY: Final = "tencentcloud:region"
# Config namespaces that are not Tessera's but belong in a stack file: the providers the program
# uses and Pulumi itself (pulumi:template, pulumi:tags, ...). Every other namespace is a mistake:
# Pulumi would hand the value to no one, so the key is reported instead of silently dropped.
PROVIDER_NAMESPACES: Final = ("tencentcloud", "kubernetes", "pulumi")
# tencentcloud provider keys that carry credentials: only ever as Pulumi secrets (or env vars)
SECRET_PROVIDER_KEYS: Final = ("tencentcloud:secretId", "tencentcloud:secretKey", "tencentcloud:securityToken")


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _maybe_json(value: Any) -> Any:
    """pulumi.Config.get returns structured values as JSON text; decode them."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def from_pulumi_mapping(mapping: Mapping[str, Any]) -> StackConfig:
    """Validate config values given without the ``tessera:`` prefix (``region`` for tencentcloud:region).

    The keys that settings name as secrets (`tessera.model.secrets`) hold the secrets themselves,
    which the program reads; they are set aside here. Any other secure value is a problem. Raises
    ConfigError listing every problem.
    """
    secret_keys = named_in(mapping)
    data = {key: _maybe_json(value) for key, value in mapping.items() if key not in secret_keys}
    problems = [Problem(key, _NOT_A_SECRET) for key, v in data.items() if _is_secure(v)]
    if problems:
        raise ConfigError(problems)
    try:
        return StackConfig.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as error:
        raise ConfigError(problems_from_validation_error(error, StackConfig)) from None


_NOT_A_SECRET: Final = "cannot be a secret: only a key that a setting names as a secret can be ({}); set this one in clear".format(
    ", ".join(field.dotted for field in SECRET_FIELDS)
)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem("", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem("", "is a directory with no Pulumi.*.yaml stack files in it")]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([Problem("", f"cannot read the file: {error}")]) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.reader.ReaderError as error:
        reason = f"character #x{error.character:04x} at position {error.position} is not allowed (is this a text file?)"
        raise ConfigError([Problem("", f"YAML syntax error: {reason}")]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        reason = " ".join(str(getattr(error, "problem", None) or error).split())  # one line per problem
        raise ConfigError([Problem("", f"YAML syntax error{where}: {reason}")]) from None


def _namespace_problem(key: str, tessera_keys: Iterable[str]) -> Problem | None:
    """Why ``key`` (as written in the stack file) is nobody's config; None when it belongs to Tessera,
    a provider or Pulumi. A misspelt namespace (``tesera:quotas``) is matched against Tessera's keys."""
    namespace, colon, name = key.partition(":")
    if colon and namespace and name and namespace in (NAMESPACE, *PROVIDER_NAMESPACES):
        return None
    if not colon or not namespace or not name:
        # Pulumi's config.ParseKey refuses these too ("configuration keys should be of the form <namespace>:<name>")
        return Problem(key, f"not a config key: write <namespace>:<name>, e.g. {NAMESPACE}:{key.strip(':') or 'nodePools'}")
    known = [f"{NAMESPACE}:{k}" for k in tessera_keys]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.8) or difflib.get_close_matches(
        namespace, [NAMESPACE, *PROVIDER_NAMESPACES], n=1, cutoff=0.6
    )
    hint = f"did you mean {close[0] if ':' in close[0] else close[0] + ':' + name!r}? " if close else ""
    allowed = ", ".join(f"{ns}:*" for ns in PROVIDER_NAMESPACES)
    return Problem(key, f"unknown config namespace {namespace!r} ({hint}Tessera reads {NAMESPACE}:*; {allowed} belong to the providers and Pulumi)")


def namespace_problems(keys: Iterable[str]) -> list[Problem]:
    """One Problem per config key outside the tessera, tencentcloud, kubernetes and pulumi namespaces."""
    tessera_keys = [info.alias or name for name, info in StackConfig.model_fields.items() if name != "region"]
    found = (_namespace_problem(str(key), tessera_keys) for key in keys)
    return [problem for problem in found if problem is not None]


def select_engine_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What `from_pulumi_mapping` takes, from every config value the Pulumi engine gave the program:
    each `tessera:*` key without its prefix (so misspelt keys are reported, not ignored) and `region`
    for `tencentcloud:region`. Keys of unknown namespaces raise ConfigError (all of them at once, with
    the problems of the Tessera keys)."""
    selected: dict[str, Any] = {}
    for key, value in sorted(raw.items()):
        if key == REGION_KEY:
            selected["region"] = value
        elif key.startswith(NAMESPACE + ":"):
            selected[key.removeprefix(NAMESPACE + ":")] = value  # JSON text is decoded by from_pulumi_mapping
    problems = namespace_problems(raw)
    if problems:
        raise ConfigError(problems + _model_problems(selected))
    return selected


def _model_problems(mapping: Mapping[str, Any]) -> list[Problem]:
    try:
        from_pulumi_mapping(mapping)
    except ConfigError as error:
        return error.problems
    return []


def stack_mapping(document: Any) -> dict[str, Any]:
    """The ``tessera:`` keys of a stack document (prefix removed) plus ``region``; ConfigError if malformed
    or when a key is in no namespace Tessera, its providers or Pulumi read."""
    if isinstance(document, dict) and {"name", "runtime"} <= set(document):
        raise ConfigError([Problem("", "a Pulumi project file (it has name: and runtime:), not a stack file; check the stack files, Pulumi.<stack>.yaml")])
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        raise ConfigError([Problem("", "not a Pulumi stack file: expected a top-level 'config:' mapping")])
    mapping: dict[str, Any] = {}
    problems: list[Problem] = namespace_problems(str(key) for key in document["config"])
    for key, value in document["config"].items():
        namespace, _, name = str(key).partition(":")
        if key == REGION_KEY:
            mapping["region"] = value
        elif key in SECRET_PROVIDER_KEYS and not _is_secure(value):
            problems.append(Problem(key, f"must be a Pulumi secret: run `pulumi config set --secret {key} ...` or use the TENCENTCLOUD_* environment variables"))
        elif namespace == NAMESPACE:
            mapping[name] = value
    for key, field in named_in(mapping).items():
        if key in mapping and not _is_secure(mapping[key]):
            problems.append(Problem(f"{NAMESPACE}:{key}", not_secret_problem(key, field)))
    if problems:
        raise ConfigError(problems + _model_problems(mapping))
    return mapping


def not_secret_problem(key: str, field: SecretField) -> str:
    """Why `tessera:<key>`, named by `field`, must not be set in clear."""
    return f"must be a Pulumi secret ({field.dotted} names it): run `{field.set_command(key)}`"


def load_stack_file(path: str | Path) -> StackConfig:
    """Read and validate a Pulumi stack file (e.g. stacks/Pulumi.dev.yaml); raise ConfigError on any problem."""
    return from_pulumi_mapping(stack_mapping(_read(Path(path))))
