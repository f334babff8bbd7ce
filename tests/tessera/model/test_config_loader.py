"""Reading Pulumi stack files: YAML errors, namespaces, secrets, and the shipped stacks."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from config_cases import EXISTING_BASE, TKE_BASE

from tessera.model import ConfigError, StackConfig, load_stack_file

STACKS = Path(__file__).resolve().parents[3] / "stacks"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _stack_text(data: dict[str, object], extra: dict[str, object] | None = None) -> str:
    config: dict[str, object] = {("tencentcloud:region" if k == "region" else f"tessera:{k}"): v for k, v in data.items()}
    config.update(extra or {})
    return yaml.safe_dump({"config": config}, sort_keys=False)


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(path)
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize("name", ["dev", "prod", "local"])
def test_shipped_stacks_are_valid(name: str) -> None:
    assert isinstance(load_stack_file(STACKS / f"Pulumi.{name}.yaml"), StackConfig)


def test_stack_file_round_trip(tmp_path: Path) -> None:
    config = load_stack_file(_write(tmp_path, _stack_text(TKE_BASE)))
    assert config.region == "ap-guangzhou" and [p.name for p in config.node_pools] == ["t4", "shared", "mig", "ts"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("config:\n  tessera:cluster: {provider: tke\n", "YAML syntax error at line"),
        ("just text\n", "not a Pulumi stack file: expected a top-level 'config:' mapping"),
        ("encryptionsalt: abc\n", "not a Pulumi stack file"),
        ("\t- bad\n", "YAML syntax error"),
        ("\x00\x01", "YAML syntax error: character #x0000 at position 0 is not allowed"),
        ("config:\n  tessera:namespace: a\n  tessera:namespace: b\n", "YAML syntax error at line 3, column 3: duplicate key 'tessera:namespace'"),
    ],
)
def test_unreadable_stack_files_are_one_problem(tmp_path: Path, text: str, expected: str) -> None:
    problems = _problems(_write(tmp_path, text))
    assert len(problems) == 1 and expected in problems[0]


def test_missing_file_is_a_problem(tmp_path: Path) -> None:
    assert _problems(tmp_path / "nope.yaml") == ["no such file"]


def test_unknown_keys_and_namespaces_are_errors_provider_namespaces_are_not(tmp_path: Path) -> None:
    text = _stack_text(TKE_BASE, {"tessera:nodepools": [], "kubernetes:context": "x", "pulumi:tags": {"a": "b"}, "aws:region": "us-east-1"})
    assert _problems(_write(tmp_path, text)) == [
        "aws:region: unknown config namespace 'aws' (Tessera reads tessera:*; tencentcloud:*, kubernetes:*, pulumi:* belong to the providers and Pulumi)",
        "nodepools: unknown key 'nodepools' (did you mean 'nodePools'? valid keys: tencentcloud:region, cluster, scheduler, nodePools, images, gpuOperator, quotas, monitoring, webhook, namespace, workloads)",
    ]


def test_kubeconfig_secret_must_be_a_pulumi_secret(tmp_path: Path) -> None:
    data = EXISTING_BASE | {"cluster": EXISTING_BASE["cluster"] | {"kubeconfig": {"secret": "kubeconfig"}}}  # type: ignore[operator]
    plain = _stack_text(data, {"tessera:kubeconfig": "apiVersion: v1"})
    assert _problems(_write(tmp_path, plain)) == [
        'tessera:kubeconfig: must be a Pulumi secret (cluster.kubeconfig.secret names it): run `pulumi config set --secret tessera:kubeconfig "$(cat kubeconfig)"`'
    ]
    secure = _stack_text(data, {"tessera:kubeconfig": {"secure": "v1:abc"}})
    assert load_stack_file(_write(tmp_path, secure)).cluster.kubeconfig.secret == "kubeconfig"  # type: ignore[union-attr]


def test_provider_credentials_must_be_secrets(tmp_path: Path) -> None:
    text = _stack_text(TKE_BASE, {"tencentcloud:secretKey": "plain-text"})
    problems = _problems(_write(tmp_path, text))
    assert problems[0].startswith("tencentcloud:secretKey: must be a Pulumi secret")
    ok = _stack_text(TKE_BASE, {"tencentcloud:secretKey": {"secure": "v1:xyz"}})
    assert load_stack_file(_write(tmp_path, ok)).region == "ap-guangzhou"


def test_secure_value_on_a_model_key_is_refused(tmp_path: Path) -> None:
    text = _stack_text(TKE_BASE, {"tessera:namespace": {"secure": "v1:xyz"}})
    assert _problems(_write(tmp_path, text)) == [
        "namespace: cannot be a secret: only a key that a setting names as a secret can be "
        "(cluster.kubeconfig.secret, monitoring.kubePrometheusStack.grafana.adminPasswordSecret); set this one in clear"
    ]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80) | st.sampled_from(["config:\n  tessera:", "config: {tessera:cluster: [", "config:\n  tessera:nodePools:\n    - {", "%YAML 9\n---\n"]))
def test_any_text_is_a_config_error_of_single_lines(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "Pulumi.x.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            load_stack_file(path)
    assert all("\n" not in str(p) for p in caught.value.problems)
