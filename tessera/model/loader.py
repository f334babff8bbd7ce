"""Load a StackConfig from a Pulumi stack file or from the values the Pulumi program reads.

Adapters only: decode (YAML / Pulumi config), map keys, validate with the model, report Problems.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tessera.model.errors import problems_from_validation_error
from tessera.model.problems import ConfigError, Problem
from tessera.model.stack import StackConfig, is_stack_key

NAMESPACE: Final = "tessera"
REGION_KEY: Final = "tencentcloud:region"
# tencentcloud provider keys that carry credentials: only ever as Pulumi secrets (or env vars)
SECRET_PROVIDER_KEYS: Final = ("tencentcloud:secretId", "tencentcloud:secretKey", "tencentcloud:securityToken")


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _kubeconfig_secret_key(mapping: Mapping[str, Any]) -> str | None:
    cluster = mapping.get("cluster")
    if isinstance(cluster, str):
        cluster = _maybe_json(cluster)
    kubeconfig = cluster.get("kubeconfig") if isinstance(cluster, dict) else None
    secret = kubeconfig.get("secret") if isinstance(kubeconfig, dict) else None
    # a secret named like a Tessera key is reported by the model; never drop the real key for it
    return secret if isinstance(secret, str) and not is_stack_key(secret) else None


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

    The key named by ``cluster.kubeconfig.secret`` is a secret the program reads itself; it is
    skipped here. Raises ConfigError listing every problem.
    """
    secret_key = _kubeconfig_secret_key(mapping)
    data = {key: _maybe_json(value) for key, value in mapping.items() if key != secret_key}
    problems = [Problem(key, "cannot be a secret; only the kubeconfig named by cluster.kubeconfig.secret can") for key, v in data.items() if _is_secure(v)]
    if problems:
        raise ConfigError(problems)
    try:
        return StackConfig.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as error:
        raise ConfigError(problems_from_validation_error(error, StackConfig)) from None


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


def stack_mapping(document: Any) -> dict[str, Any]:
    """The ``tessera:`` keys of a stack document (prefix removed) plus ``region``; ConfigError if malformed."""
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        raise ConfigError([Problem("", "not a Pulumi stack file: expected a top-level 'config:' mapping")])
    mapping: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in document["config"].items():
        namespace, _, name = str(key).partition(":")
        if key == REGION_KEY:
            mapping["region"] = value
        elif key in SECRET_PROVIDER_KEYS and not _is_secure(value):
            problems.append(Problem(key, f"must be a Pulumi secret: run `pulumi config set --secret {key} ...` or use the TENCENTCLOUD_* environment variables"))
        elif namespace == NAMESPACE:
            mapping[name] = value
    secret_key = _kubeconfig_secret_key(mapping)
    if secret_key is not None and secret_key in mapping and not _is_secure(mapping[secret_key]):
        problems.append(Problem(f"{NAMESPACE}:{secret_key}", f"must be a Pulumi secret: run `pulumi config set --secret {NAMESPACE}:{secret_key} \"$(cat kubeconfig)\"`"))
    if problems:
        raise ConfigError(problems)
    return mapping


def load_stack_file(path: str | Path) -> StackConfig:
    """Read and validate a Pulumi stack file (e.g. stacks/Pulumi.dev.yaml); raise ConfigError on any problem."""
    return from_pulumi_mapping(stack_mapping(_read(Path(path))))
