"""An existing cluster (kind, minikube, Rancher/RKE, another cloud): no cloud resources, only a kubeconfig.

The kubeconfig comes from exactly one of: a file path, an environment variable naming a file, or a
Pulumi secret config key holding the kubeconfig text. A file path is handed to the Kubernetes
provider as a path (the provider reads it), so no cluster credential is copied into the state.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from dataclasses import dataclass

import pulumi

from tessera.model.cluster import ClusterConfig, KubeconfigSource
from tessera.model.stack import StackConfig

SecretLookup = Callable[[str], pulumi.Input[str] | None]


class KubeconfigError(Exception):
    """The stack config points at a kubeconfig that is not there; the message says what to do."""


@dataclass(frozen=True)
class ResolvedKubeconfig:
    """What the Kubernetes provider gets: kubeconfig text (maybe an output) or a path to it, and the context to use."""

    kubeconfig: pulumi.Input[str]
    context: str | None
    from_file: bool = True
    """True: `kubeconfig` is a file path; False: the kubeconfig text itself (a Pulumi secret)."""


class NodeListError(Exception):
    """The cluster's nodes could not be listed; the message is one line saying why and what to do."""


def list_cluster_nodes(resolved: ResolvedKubeconfig) -> list[dict[str, Any]]:
    """Every Node of the cluster, through Tessera's one Kubernetes adapter (`tessera.kube`).

    Preview needs them to show which nodes join which pool and to patch exactly those; it needs
    get/list on nodes with the stack's kubeconfig."""
    from urllib3.exceptions import HTTPError

    from tessera.kube.api import KubeApiError, TransportError
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    kubeconfig = resolved.kubeconfig
    if not isinstance(kubeconfig, str):  # an output: membership.load_membership never asks for these
        raise NodeListError("cannot list the cluster's nodes: its kubeconfig is an output, not known yet")
    settings = (
        ClientSettings(kubeconfig=kubeconfig, context=resolved.context)
        if resolved.from_file
        else ClientSettings(kubeconfig_text=kubeconfig, context=resolved.context)
    )
    try:
        return KubernetesClientApi.connect(settings).list_nodes()
    except TransportError as exc:  # no HTTP answer: the client names the call and the cause
        raise NodeListError(f"cannot reach the cluster to list its nodes ({' '.join(exc.message.split())[:300]})") from None
    except KubeApiError as exc:
        raise NodeListError(f"cannot list the cluster's nodes ({exc.status}: {' '.join(exc.message.split())})") from None
    except (HTTPError, OSError) as exc:  # the client does not wrap connection errors
        raise NodeListError(f"cannot reach the cluster to list its nodes ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})") from None


def _resolve_kubeconfig(source: KubeconfigSource | None, context: str | None, environ: Mapping[str, str], lookup_secret: SecretLookup) -> ResolvedKubeconfig:
    """Pure resolution of the configured source (environment and secret lookup are passed in)."""
    if source is None:
        raise KubeconfigError("cluster.kubeconfig: provider existing needs a kubeconfig (path, env or secret)")
    if source.path is not None:
        return ResolvedKubeconfig(os.path.expanduser(source.path), context)
    if source.env is not None:
        path = environ.get(source.env)
        if not path:
            raise KubeconfigError(f"cluster.kubeconfig.env: environment variable {source.env} is not set; export it with the path of your kubeconfig")
        return ResolvedKubeconfig(os.path.expanduser(path), context)
    if source.secret is not None:
        value = lookup_secret(source.secret)
        if value is None:
            raise KubeconfigError(
                f"cluster.kubeconfig.secret: tessera:{source.secret} is not set; run "
                f"pulumi config set --secret tessera:{source.secret} \"$(cat ~/.kube/config)\""
            )
        return ResolvedKubeconfig(value, context, from_file=False)
    raise KubeconfigError("cluster.kubeconfig: set one of path, env or secret")


def resolve_kubeconfig(cluster: ClusterConfig, environ: Mapping[str, str], values: Mapping[str, Any]) -> ResolvedKubeconfig:
    """The existing cluster's kubeconfig from the stack config, the environment and the engine's
    config values (for a `secret` source). Raises KubeconfigError saying what to do."""
    return _resolve_kubeconfig(cluster.kubeconfig, cluster.context, environ, _config_lookup(values))


def _config_lookup(values: Mapping[str, Any]) -> SecretLookup:
    def lookup(key: str) -> pulumi.Input[str] | None:
        value = values.get(f"tessera:{key}")
        if value is None:
            return None
        # the package's components hand secrets over as outputs (tessera_pulumi.package.inputs)
        return value if isinstance(value, pulumi.Output) else str(value)

    return lookup


class ExistingCluster(pulumi.ComponentResource):
    """Stands for a cluster Tessera does not create; exposes its kubeconfig (secret) and context."""

    cluster_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    context: str | None
    node_pools: list[pulumi.Resource]
    pool_names: list[str]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None,
                 environ: Mapping[str, str] | None = None, secrets: Mapping[str, Any] | None = None) -> None:
        """`secrets`: the engine's config values (`__main__.py` reads them); a `secret` kubeconfig
        source names the `tessera:<key>` entry there."""
        cluster: ClusterConfig = config.cluster
        try:  # resolve before registering anything, so a missing kubeconfig declares nothing
            resolved = _resolve_kubeconfig(
                cluster.kubeconfig, cluster.context, os.environ if environ is None else environ, _config_lookup(secrets or {})
            )
        except KubeconfigError as err:
            raise pulumi.RunError(str(err)) from None
        super().__init__("tessera:index:ExistingCluster", name, None, opts)
        self.cluster_id = pulumi.Output.from_input(cluster.name)
        self.kubeconfig = pulumi.Output.secret(resolved.kubeconfig)
        self.context = resolved.context
        self.node_pools = []
        self.pool_names = [pool.name for pool in config.node_pools]
        self.register_outputs({"clusterId": self.cluster_id, "kubeconfig": self.kubeconfig})
