"""The typed webhook objects: built field by field from the rendered ones, never losing a field."""
from __future__ import annotations

import copy
from pathlib import Path

import pulumi
import pytest

from tessera.model import load_stack_file
from tessera_pulumi.platform import webhook as typed
from tessera.manifests.objects import KubeObject
from tessera.manifests.webhook import build_webhook_objects

ROOT = Path(__file__).resolve().parents[3]


def _objects() -> list[KubeObject]:
    return build_webhook_objects(load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml"))


def _one(kind: str) -> KubeObject:
    (found,) = [o for o in _objects() if o["kind"] == kind and typed.is_runtime_written(o)]
    return found


def test_exactly_the_tls_secret_and_the_configuration_are_runtime_written() -> None:
    assert sorted((o["kind"], o["metadata"]["name"]) for o in _objects() if typed.is_runtime_written(o)) == [
        ("MutatingWebhookConfiguration", "tessera-webhook"),
        ("Secret", "tessera-webhook-tls"),
    ]


def test_every_hook_field_has_a_typed_home() -> None:
    for hook in _one("MutatingWebhookConfiguration")["webhooks"]:
        args = typed.mutating_webhook(hook)
        assert args.name == hook["name"]
        assert len(args.match_conditions or []) == len(hook.get("matchConditions", []))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (("webhooks", 0), "newField"),
        (("webhooks", 0, "clientConfig"), "caBundle"),  # must never be rendered: the webhook owns it
        (("metadata",), "finalizers"),
    ],
)
def test_a_field_the_converter_does_not_know_is_an_error_not_dropped(path: tuple[object, ...], key: str) -> None:
    body = copy.deepcopy(_one("MutatingWebhookConfiguration"))
    target: object = body
    for step in path:
        target = target[step]  # type: ignore[index]
    target[key] = "x"  # type: ignore[index]
    with pytest.raises(ValueError, match=key):
        typed.webhook_configuration("c", body, pulumi.ResourceOptions())


def test_a_secret_with_data_is_refused() -> None:
    body = {**_one("Secret"), "data": {"tls.crt": "eA=="}}
    with pytest.raises(ValueError, match="data"):
        typed.tls_secret("s", body, pulumi.ResourceOptions())
