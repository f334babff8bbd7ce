"""Every shipped stack and example, set up as its own comments say, through the user's entry points:
`tessera validate`, `plan` and `render` on the stack file, and the real `__main__.py` under mocks
with the config the engine hands it.

What `pulumi config set` does is emulated byte for byte where it matters:
- the stack file: `pulumi config set --secret tessera:k v` writes `tessera:k: {secure: <ciphertext>}`,
  plain `pulumi config set` writes the value itself (pulumi/pulumi sdk/go/common/resource/config:
  a secure `Value` marshals to a map with the one key `secure`);
- the program: the engine decrypts every value, hands objects over as JSON text, and lists the
  secret keys apart (the pinned SDK's `pulumi/runtime/config.py` reads them from PULUMI_CONFIG and
  PULUMI_CONFIG_SECRET_KEYS; `set_all_config(config, secret_keys)` is the same hand-over under mocks).
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi.runtime
import pytest
import yaml
from json_api_stand_in import serving
from pulumi.runtime.settings import ROOT as ROOT_RESOURCE
from pulumi_program_mocks import FAKE_KUBECONFIG, ROOT, run_main_py, secret_value

from tessera.model.secrets import named_in

SECRET_VALUES: Final = {"grafanaAdminPassword": "pw-from-pulumi-config", "kubeconfig": None}  # None: a kubeconfig of the stand-in


@dataclass(frozen=True)
class Shipped:
    path: Path
    secrets: tuple[str, ...]  # keys its settings name as secrets
    existing: bool


SHIPPED: Final = [
    Shipped(ROOT / "stacks" / "Pulumi.dev.yaml", (), existing=False),
    Shipped(ROOT / "stacks" / "Pulumi.prod.yaml", ("grafanaAdminPassword",), existing=False),
    Shipped(ROOT / "stacks" / "Pulumi.local.yaml", (), existing=True),
    Shipped(ROOT / "examples" / "triton" / "Pulumi.triton.yaml", (), existing=True),
    Shipped(ROOT / "examples" / "dra" / "Pulumi.dra.yaml", (), existing=True),
]


def _ciphertext(value: str) -> str:
    """What a passphrase secrets provider stores (`v1:<nonce>:<sealed>`); never read back here."""
    return "v1:" + base64.b64encode(os.urandom(12)).decode() + ":" + base64.b64encode(value.encode()[::-1]).decode()


@dataclass
class StackFile:
    """A stack file and the values `pulumi config set` stored in it (the engine's decrypted view)."""

    document: dict[str, Any]
    clear: dict[str, str] = field(default_factory=dict)  # key -> plain value of each secure one

    @staticmethod
    def read(path: Path) -> StackFile:
        return StackFile(yaml.safe_load(path.read_text()))

    def config_set(self, key: str, value: str, *, secret: bool) -> None:
        if secret:
            self.document["config"][key] = {"secure": _ciphertext(value)}
            self.clear[key] = value
        else:
            self.document["config"][key] = value
            self.clear.pop(key, None)

    def write(self, directory: Path, name: str) -> Path:
        path = directory / name
        path.write_text(yaml.safe_dump(self.document, sort_keys=False))
        return path

    def engine(self) -> tuple[dict[str, str], list[str]]:
        """The config and secret keys as the engine hands them to the program."""
        config: dict[str, str] = {}
        for key, value in self.document["config"].items():
            if isinstance(value, dict) and set(value) == {"secure"}:
                config[key] = self.clear[key]
            else:
                config[key] = value if isinstance(value, str) else json.dumps(value)
        return config, sorted(self.clear)


def tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


@dataclass
class ProgramRun:
    resources: list[Any]
    errors: list[str]
    failure: BaseException | None


def run_main(config: dict[str, str], secret_keys: list[str]) -> ProgramRun:
    """The real `__main__.py` under mocks, as `pulumi preview` runs it, in a stack of its own (its
    exports must not reach other tests' stacks)."""
    ROOT_RESOURCE.set(None)
    errors: list[str] = []
    original = pulumi.log.error
    pulumi.log.error = lambda msg, *args, **kwargs: errors.append(msg)  # type: ignore[assignment]
    try:
        mocks, failure = run_main_py(config, secret_keys)
    finally:
        pulumi.log.error = original
        ROOT_RESOURCE.set(None)
    return ProgramRun(list(mocks.resources), errors, failure)


def _nodes_api(method: str, path: str, content_type: str, body: Any) -> tuple[int, Any]:
    if method == "GET" and path.split("?")[0] == "/api/v1/nodes":
        return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}
    return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}


def _kubeconfig_text(server: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "test"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    })


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An existing cluster with no GPU nodes yet, reached as the stacks say: ~/.kube/config or $KUBECONFIG."""
    with serving(_nodes_api) as server:
        text = _kubeconfig_text(server)
        home = tmp_path / "home"
        (home / ".kube").mkdir(parents=True)
        (home / ".kube" / "config").write_text(text)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("KUBECONFIG", str(home / ".kube" / "config"))
        yield text


def test_the_table_names_every_secret_the_shipped_files_name() -> None:
    for shipped in SHIPPED:
        mapping = {k.removeprefix("tessera:"): v for k, v in yaml.safe_load(shipped.path.read_text())["config"].items()}
        assert sorted(named_in(mapping)) == sorted(shipped.secrets), shipped.path


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.path.name)
def test_each_shipped_file_set_up_as_documented_validates_plans_renders_and_previews(
    shipped: Shipped, tmp_path: Path, cluster: str
) -> None:
    stack = StackFile.read(shipped.path)
    for key in shipped.secrets:
        stack.config_set(f"tessera:{key}", SECRET_VALUES[key] or cluster, secret=True)
    path = stack.write(tmp_path, shipped.path.name)

    for command in (["validate", str(path)], ["plan", str(path)], ["render", str(path), "-o", str(tmp_path / "out")]):
        result = tessera(*command)
        assert result.returncode == 0, (command, result.stdout + result.stderr)
        assert "Traceback" not in result.stderr
        for key in shipped.secrets:  # a secret's value never reaches the output
            assert stack.clear[f"tessera:{key}"] not in result.stdout + result.stderr

    run = run_main(*stack.engine())
    assert run.failure is None and run.errors == [], (run.failure, run.errors)
    assert run.resources
    if "grafanaAdminPassword" in shipped.secrets:
        (admin,) = [r for r in run.resources if r.typ == "kubernetes:core/v1:Secret" and r.inputs["metadata"]["name"] == "tessera-grafana-admin"]
        assert secret_value(admin.inputs["stringData"])["admin-password"] == SECRET_VALUES["grafanaAdminPassword"]
        assert all(SECRET_VALUES["grafanaAdminPassword"] not in json.dumps(r.inputs, default=str) for r in run.resources if r is not admin)


def _local_with_kubeconfig_secret() -> StackFile:
    stack = StackFile.read(ROOT / "stacks" / "Pulumi.local.yaml")
    stack.document["config"]["tessera:cluster"]["kubeconfig"] = {"secret": "kubeconfig"}
    return stack


def test_a_kubeconfig_set_as_a_secret_reaches_the_program_and_stays_secret(tmp_path: Path, cluster: str) -> None:
    stack = _local_with_kubeconfig_secret()
    stack.config_set("tessera:kubeconfig", cluster, secret=True)
    assert tessera("validate", str(stack.write(tmp_path, "Pulumi.local.yaml"))).returncode == 0
    run = run_main(*stack.engine())
    assert run.failure is None and run.errors == [], (run.failure, run.errors)
    (provider,) = [r for r in run.resources if r.typ == "pulumi:providers:kubernetes"]
    assert secret_value(provider.inputs["kubeconfig"]) == cluster


CLEAR_SECRETS: Final = [
    ("prod", lambda: StackFile.read(ROOT / "stacks" / "Pulumi.prod.yaml"), "tessera:grafanaAdminPassword", "pw",
     "tessera:grafanaAdminPassword: must be a Pulumi secret (monitoring.kubePrometheusStack.grafana.adminPasswordSecret names it): "
     "run `pulumi config set --secret tessera:grafanaAdminPassword <password>`"),
    ("kubeconfig", _local_with_kubeconfig_secret, "tessera:kubeconfig", FAKE_KUBECONFIG,
     "tessera:kubeconfig: must be a Pulumi secret (cluster.kubeconfig.secret names it): "
     'run `pulumi config set --secret tessera:kubeconfig "$(cat kubeconfig)"`'),
]


@pytest.mark.parametrize(("case", "stack_of", "key", "value", "message"), CLEAR_SECRETS, ids=[c[0] for c in CLEAR_SECRETS])
def test_a_named_secret_set_in_clear_is_refused_on_both_routes_with_the_command_to_run(
    case: str, stack_of: Any, key: str, value: str, message: str, tmp_path: Path
) -> None:
    stack = stack_of()
    stack.config_set(key, value, secret=False)
    result = tessera("validate", str(stack.write(tmp_path, "Pulumi.x.yaml")))
    assert result.returncode == 2 and message in result.stdout, result.stdout + result.stderr
    run = run_main(*stack.engine())
    assert isinstance(run.failure, pulumi.RunError) and run.resources == []
    assert message in run.errors, run.errors


def test_a_secret_no_setting_names_is_refused_with_the_settings_that_can(tmp_path: Path) -> None:
    stack = StackFile.read(ROOT / "stacks" / "Pulumi.dev.yaml")
    stack.config_set("tessera:namespace", "tessera-system", secret=True)
    result = tessera("validate", str(stack.write(tmp_path, "Pulumi.dev.yaml")))
    assert result.returncode == 2
    assert "namespace: cannot be a secret: only a key that a setting names as a secret can be (cluster.kubeconfig.secret, " \
        "monitoring.kubePrometheusStack.grafana.adminPasswordSecret); set this one in clear" in result.stdout


def test_prod_without_its_password_previews_nothing_and_says_what_to_run() -> None:
    run = run_main(*StackFile.read(ROOT / "stacks" / "Pulumi.prod.yaml").engine())
    assert isinstance(run.failure, pulumi.RunError) and run.resources == []
    assert run.errors == [
        "monitoring.kubePrometheusStack.grafana.adminPasswordSecret: tessera:grafanaAdminPassword is not set; "
        "run `pulumi config set --secret tessera:grafanaAdminPassword <password>`"
    ]
