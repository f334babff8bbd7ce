"""The package's components: the stack-file program's TesseraStack behind typed, validated inputs.

Each component validates its inputs into a StackConfig (`inputs.validate`) before it registers
anything, then declares one TesseraStack under itself, named like the component: the resources,
their names and their inputs are those the stack-file program (`__main__.py`) declares for the same
config. Only the component on top differs (TkeGpuCluster or ExistingClusterPlatform instead of the
program's stack).

No `from __future__ import annotations` here: the SDK's analyzer reads these annotations as objects.
"""
from typing import Any

import pulumi

from tessera_pulumi.membership import load_membership
from tessera_pulumi.package.args import ExistingClusterPlatformArgs, TkeGpuClusterArgs
from tessera_pulumi.package.inputs import secret_values, validate
from tessera_pulumi.package.spec import EXISTING_CLUSTER_PLATFORM, TKE_GPU_CLUSTER
from tessera_pulumi.stack import TesseraStack


class TkeGpuCluster(pulumi.ComponentResource):
    __doc__ = TKE_GPU_CLUSTER.description

    cluster_id: pulumi.Output[str]
    """The TKE cluster's id."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig of the cluster's API endpoint (the public one when cluster.endpoint.public, else the intranet one); a secret."""
    pool_names: pulumi.Output[list[str]]
    """Names of the GPU node pools, in the order of nodePools."""
    plan: pulumi.Output[dict[str, Any]]
    """What the stack deploys, per pool and for the cluster: the document `tessera plan --json` prints."""

    def __init__(self, name: str, args: TkeGpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        config = validate(TKE_GPU_CLUSTER, args)
        super().__init__(TKE_GPU_CLUSTER.type_token, name, None, opts)
        stack = TesseraStack(name, config, opts=pulumi.ResourceOptions(parent=self), secrets=secret_values(args))
        self.cluster_id = stack.cluster_id
        self.kubeconfig = stack.kubeconfig
        self.pool_names = pulumi.Output.from_input(stack.pool_names)
        self.plan = pulumi.Output.from_input(stack.plan)
        self.register_outputs({"clusterId": self.cluster_id, "kubeconfig": self.kubeconfig, "poolNames": self.pool_names, "plan": self.plan})


class ExistingClusterPlatform(pulumi.ComponentResource):
    __doc__ = EXISTING_CLUSTER_PLATFORM.description

    pool_names: pulumi.Output[list[str]]
    """Names of the GPU node pools, in the order of nodePools."""
    plan: pulumi.Output[dict[str, Any]]
    """What the stack deploys, per pool and for the cluster: the document `tessera plan --json` prints."""

    def __init__(self, name: str, args: ExistingClusterPlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        config = validate(EXISTING_CLUSTER_PLATFORM, args)
        secrets = secret_values(args)
        # which nodes join which pool (as the stack-file program works it out; an output when the kubeconfig is one)
        membership = load_membership(config, secrets, None, "Check with `tessera plan` on the same config and `--kubeconfig`.")
        super().__init__(EXISTING_CLUSTER_PLATFORM.type_token, name, None, opts)
        stack = TesseraStack(name, config, opts=pulumi.ResourceOptions(parent=self), secrets=secrets, membership=membership)
        self.pool_names = pulumi.Output.from_input(stack.pool_names)
        self.plan = pulumi.Output.from_input(stack.plan)
        self.register_outputs({"poolNames": self.pool_names, "plan": self.plan})
