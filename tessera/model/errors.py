"""Turn pydantic's ValidationError into Problems: config-key paths, plain messages, no union noise."""
from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from tessera.model.pools import POOL_CLASSES
from tessera.model.problems import PathPart, Problem, SemanticErrors, format_path

REGION_FIELD = "region"
REGION_KEY = "tencentcloud:region"


def _strip(tp: Any) -> Any:
    """Remove Annotated and Optional wrappers."""
    while True:
        origin = get_origin(tp)
        if origin is typing.Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
            else:
                return tp
        else:
            return tp


def _field_of(model: type[BaseModel], key: str) -> tuple[str, Any] | None:
    """(alias, annotation) of the field called ``key`` by alias or by name."""
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if key in (alias, name):
            return alias, info.annotation
    return None


def _walk(loc: tuple[int | str, ...], root: type[BaseModel]) -> list[PathPart]:
    """Clean a pydantic loc into config-key path parts (aliases; discriminator and union tags dropped)."""
    parts: list[PathPart] = []
    tp: Any = root
    for seg in loc:
        tp = _strip(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found = _field_of(tp, str(seg))
            if found is None:
                parts.append(seg)
                tp = None
            else:
                parts.append(found[0])
                tp = found[1]
            continue
        origin = get_origin(tp)
        if origin is list and isinstance(seg, int):
            parts.append(seg)
            tp = get_args(tp)[0]
        elif origin is dict:
            parts.append(seg)
            tp = get_args(tp)[1]
        elif origin in (Union, types.UnionType) and isinstance(seg, str) and seg in POOL_CLASSES:
            tp = POOL_CLASSES[seg]  # the discriminator tag is not a config key
        elif origin in (Union, types.UnionType):
            continue  # a union member tag such as 'int' or 'dict[str,int]'
        else:
            parts.append(seg)
            tp = None
    return parts


def _keys(model: type[BaseModel]) -> list[str]:
    keys = [info.alias or name for name, info in model.model_fields.items()]
    return [REGION_KEY if key == REGION_FIELD and model.__name__ == "StackConfig" else key for key in keys]


def _unknown_key(key: str, owner: type[BaseModel] | None) -> str:
    if owner is None:
        return f"unknown key {key!r}"
    keys = _keys(owner)
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    kinds = [kind for kind, cls in POOL_CLASSES.items() if key in _keys(cls) and cls is not owner]
    if kinds and owner in POOL_CLASSES.values():
        hint = f"{key!r} is only for pools of kind {' or '.join(kinds)}; "
    return f"unknown key {key!r} ({hint}valid keys: {', '.join(keys)})"


def _message(err: ErrorDetails, owner: type[BaseModel] | None) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return _unknown_key(str(err["loc"][-1]), owner)
    if kind == "union_tag_not_found":
        return f"is required: one of {', '.join(POOL_CLASSES)}"
    if kind == "union_tag_invalid":
        return f"{ctx.get('tag')!r} is not a pool kind (valid: {', '.join(POOL_CLASSES)})"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"{value!r} is not valid (valid: {expected})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number{got}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false{got}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number{got}"
    if kind == "string_type":
        return f"must be a string{got}"
    if kind == "list_type":
        return f"must be a list{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values{got}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "?")
        return f"must be {sign} {bound}{got}"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty" if not value else err["msg"].lower()
    message = err["msg"].replace("Input should be", "must be")
    return message[:1].lower() + message[1:] + got


def _region(parts: list[PathPart]) -> list[PathPart]:
    return [REGION_KEY, *parts[1:]] if parts and parts[0] == REGION_FIELD else parts


def problems_from_validation_error(error: ValidationError, root: type[BaseModel]) -> list[Problem]:
    """Every problem in ``error``, in order, duplicates removed."""
    problems: list[Problem] = []
    for err in error.errors(include_url=False):
        semantic = (err.get("ctx") or {}).get("error")
        if isinstance(semantic, SemanticErrors):
            problems.extend(semantic.problems)
            continue
        loc = tuple(err["loc"])
        if loc and loc[-1] == "[key]":  # pydantic's marker for a mapping key: the path already names the key
            loc = loc[:-1]
        # an unknown key is reported as written, not mapped to the field it resembles
        parts = [*_walk(loc[:-1], root), loc[-1]] if err["type"] == "extra_forbidden" and loc else _walk(loc, root)
        owner = _owner_at(tuple(err["loc"][:-1]), root) if err["type"] == "extra_forbidden" else None
        if err["type"] in ("union_tag_not_found", "union_tag_invalid"):
            parts = [*parts, "kind"]
        problems.append(Problem(format_path(_region(parts)), _message(err, owner)))
    return list(dict.fromkeys(problems))


def _owner_at(loc: tuple[int | str, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    """The model at ``loc`` (the object an unknown key was found in)."""
    tp: Any = root
    for seg in loc:
        tp = _strip(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found = _field_of(tp, str(seg))
            tp = found[1] if found else None
        elif get_origin(tp) is list:
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        elif get_origin(tp) in (Union, types.UnionType) and seg in POOL_CLASSES:
            tp = POOL_CLASSES[str(seg)]
        else:
            return None
    tp = _strip(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
