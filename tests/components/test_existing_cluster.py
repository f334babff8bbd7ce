"""Kubeconfig resolution for provider existing: path, environment variable or Pulumi secret."""
from __future__ import annotations

import os

import pytest

from tessera.model import KubeconfigSource
from tessera_pulumi.existing import KubeconfigError, _resolve_kubeconfig


def no_secret(_key: str) -> str | None:
    return None


def test_path_is_expanded_and_passed_as_a_path() -> None:
    resolved = _resolve_kubeconfig(KubeconfigSource(path="~/.kube/config"), "kind-tessera", {}, no_secret)
    assert resolved.kubeconfig == os.path.expanduser("~/.kube/config")
    assert resolved.context == "kind-tessera"


def test_env_names_the_variable_holding_the_path() -> None:
    resolved = _resolve_kubeconfig(KubeconfigSource(env="KUBECONFIG"), None, {"KUBECONFIG": "/tmp/kc"}, no_secret)
    assert resolved.kubeconfig == "/tmp/kc"


def test_secret_comes_from_the_lookup() -> None:
    resolved = _resolve_kubeconfig(KubeconfigSource(secret="kubeconfig"), None, {}, lambda key: "kubeconfig text" if key == "kubeconfig" else None)
    assert resolved.kubeconfig == "kubeconfig text"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "provider existing needs a kubeconfig"),
        (KubeconfigSource(env="MY_KUBECONFIG"), "MY_KUBECONFIG is not set"),
        (KubeconfigSource(secret="kc"), "pulumi config set --secret tessera:kc"),
        (KubeconfigSource(), "set one of path, env or secret"),
    ],
)
def test_missing_kubeconfig_says_what_to_do(source: KubeconfigSource | None, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message.replace("(", r"\(")):
        _resolve_kubeconfig(source, None, {}, no_secret)
