"""Pulumi mocks harness for the program tests: records every registration and the component tree.

`declare(config)` runs TesseraStack under `pulumi.runtime.set_mocks` and returns what was declared
(type token, name, inputs with the provider's camelCase keys, provider reference, parent URN).
"""
from __future__ import annotations

import runpy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi.runtime
import yaml
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs

from tessera.model import StackConfig, load_stack_file
from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera.model.membership import pool_membership
from tessera_pulumi.stack import PlatformFactory, TesseraStack

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "stacks"
CLUSTER = "tencentcloud:Kubernetes/cluster:Cluster"
NODE_POOL = "tencentcloud:Kubernetes/nodePool:NodePool"
ENDPOINT = "tencentcloud:Kubernetes/clusterEndpoint:ClusterEndpoint"
RULE_SET = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
K8S_PROVIDER = "pulumi:providers:kubernetes"
FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\n# public endpoint\n"
FAKE_KUBECONFIG_INTRANET = "apiVersion: v1\nkind: Config\n# intranet endpoint\n"


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every registration; the endpoint 'returns' a kubeconfig like TKE does."""

    def __init__(self) -> None:
        self.resources: list[MockResourceArgs] = []

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ == ENDPOINT:
            outputs.update(kubeConfig=FAKE_KUBECONFIG, kubeConfigIntranet=FAKE_KUBECONFIG_INTRANET)
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class RecordingMonitor(MockMonitor):
    """Also records, per registration, the parent URN (the component tree), the dependencies, the
    name's URN and the `ignoreChanges` option."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.parents: dict[str, str] = {}
        self.deps: dict[str, list[str]] = {}
        self.names: dict[str, str] = {}
        self.ignore_changes: dict[str, list[str]] = {}
        self.retained: dict[str, bool] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        self.parents[response.urn] = request.parent
        self.deps[response.urn] = list(request.dependencies)
        self.names[request.name] = response.urn
        self.ignore_changes[request.name] = list(request.ignoreChanges)
        self.retained[request.name] = bool(request.retainOnDelete)
        return response


@dataclass
class Declared:
    """What one program run declared."""

    resources: list[MockResourceArgs]
    parents: dict[str, str]  # urn -> parent urn ("" for the root stack's children)
    values: dict[str, Any] = field(default_factory=dict)
    retained: dict[str, bool] = field(default_factory=dict)  # resource name -> retainOnDelete
    deps: dict[str, list[str]] = field(default_factory=dict)  # urn -> dependency urns

    def of_type(self, typ: str) -> list[MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str) -> MockResourceArgs:
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, got {[r.name for r in found]}"
        return found[0]


def start_mocks() -> tuple[RecordingMocks, RecordingMonitor]:
    mocks = RecordingMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="tessera", stack="test", preview=False, monitor=monitor)
    return mocks, monitor


def run_main_py(config: Mapping[str, str], secret_keys: Sequence[str] = ()) -> tuple[RecordingMocks, BaseException | None]:
    """The real `__main__.py` under mocks, as `pulumi preview` runs it with this engine config and
    these keys held as secrets; what it declared, and the RunError it stopped with, if any."""
    mocks, _ = start_mocks()
    pulumi.runtime.set_all_config(dict(config), list(secret_keys))
    try:
        pulumi.runtime.test(lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"))()
    except pulumi.RunError as err:
        return mocks, err
    finally:
        pulumi.runtime.set_all_config({}, [])
    return mocks, None


# the secret config values the stack files name (prod's Grafana admin password); `secrets=None` uses them
STACK_SECRETS: Final = {"tessera:grafanaAdminPassword": "test-only-password"}


def declare(
    config: StackConfig, platform: PlatformFactory | None = None, secrets: dict[str, str] | None = None, nodes: list[dict[str, Any]] | None = None
) -> Declared:
    """Run TesseraStack under mocks; also resolve the kubeconfig, its secretness and the cluster id.
    `nodes`: an existing cluster's Node objects, as preview would list them."""
    secrets = dict(STACK_SECRETS) if secrets is None else secrets
    mocks, monitor = start_mocks()
    values: dict[str, Any] = {}
    membership = pool_membership(config.node_pools, nodes) if nodes is not None else None

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        stack = TesseraStack("tessera", config, platform=platform, secrets=secrets, membership=membership)
        values["plan"] = stack.plan

        async def secret() -> bool:
            return await stack.kubeconfig.is_secret()

        is_secret: pulumi.Output[bool] = pulumi.Output.from_input(secret())  # type: ignore[arg-type]
        return pulumi.Output.all(stack.kubeconfig, stack.cluster_id, is_secret).apply(
            lambda v: values.update(kubeconfig=v[0], cluster_id=v[1], kubeconfig_secret=v[2])
        )

    run()
    return Declared(list(mocks.resources), dict(monitor.parents), values, dict(monitor.retained), dict(monitor.deps))


def secret_value(value: Any) -> Any:
    """The plain value of a secret input as the mock monitor receives it; fails when it is not secret."""
    assert isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig, f"not a secret: {value!r}"
    return value["value"]


def stack_config(name: str) -> StackConfig:
    return load_stack_file(STACKS / f"Pulumi.{name}.yaml")


def config_with(stack: str, change: Callable[[dict[str, Any]], None]) -> StackConfig:
    """A stack file's config with one edit, validated like the program does."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    change(document["config"])
    return from_pulumi_mapping(stack_mapping(document))
