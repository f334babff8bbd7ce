"""The one table of settings that name Pulumi secrets (`tessera.model.secrets`): it covers every such
setting of the model, and what it reads from raw config agrees with the validated model."""
from __future__ import annotations

import json
import typing
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tessera.model.secrets import SECRET_FIELDS, named_by, named_in
from tessera.model.stack import StackConfig, is_stack_key
from tessera.model.values import PulumiKey


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _names_a_secret(annotation: Any) -> bool:
    return annotation == PulumiKey or any(_names_a_secret(arg) for arg in typing.get_args(annotation) if arg is not type(None))


def _secret_settings(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for name, info in model.model_fields.items():
        if _names_a_secret(info.annotation):
            found.add((*prefix, name))
        for inner in _models_in(info.annotation):
            found |= _secret_settings(inner, (*prefix, name))
    return found


def test_every_setting_that_names_a_secret_is_in_the_table() -> None:
    assert _secret_settings(StackConfig) == {field.attributes for field in SECRET_FIELDS}


def test_the_table_spells_each_setting_as_the_stack_file_does() -> None:
    assert [field.dotted for field in SECRET_FIELDS] == ["cluster.kubeconfig.secret", "monitoring.kubePrometheusStack.grafana.adminPasswordSecret"]


_KEYS = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,12}", fullmatch=True).filter(lambda key: not is_stack_key(key))  # those the model refuses


@settings(max_examples=60, deadline=None)
@given(kubeconfig=st.none() | _KEYS, grafana=st.none() | _KEYS, as_json=st.booleans())
def test_raw_config_and_the_validated_model_agree_on_the_secrets_named(kubeconfig: str | None, grafana: str | None, as_json: bool) -> None:
    cluster: dict[str, Any] = {"provider": "existing", "name": "c", "kubernetesVersion": "1.30.0"}
    cluster["kubeconfig"] = {"secret": kubeconfig} if kubeconfig else {"path": "~/.kube/config"}
    monitoring: dict[str, Any] = {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"enabled": grafana is not None}}}
    if grafana:
        monitoring["kubePrometheusStack"]["grafana"]["adminPasswordSecret"] = grafana
    pools = [{"name": "p", "kind": "shared", "nodeSelector": {"example.com/pool": "p"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 1, "maxSize": 1}]
    raw: dict[str, Any] = {"cluster": cluster, "monitoring": monitoring, "nodePools": pools}
    if as_json:  # as the engine hands objects to the program
        raw = {key: json.dumps(value) for key, value in raw.items()}
    config = StackConfig.model_validate({k: json.loads(v) if isinstance(v, str) else v for k, v in raw.items()}, by_alias=True, by_name=False)
    assert {k: f.dotted for k, f in named_in(raw).items()} == {k: f.dotted for k, f in named_by(config).items()}
