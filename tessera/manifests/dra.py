"""The DRA route's cluster objects: a DeviceClass per dra pool, and the DRA kubelet plugin's DaemonSet
with the node agent on the nodes of dra pools (docs/dra.md).

| object | why |
| --- | --- |
| DeviceClass `<pool>.gpu.tessera.dev` | what a ResourceClaim names to get a share of the pool's GPUs: the driver's devices whose `pool` attribute is the pool |
| DaemonSet `tessera-dra` | on nodes labelled `tessera.dev/allocation=dra` only: the DRA plugin (publishes the node's ResourceSlice, prepares claims, writes CDI specs) beside the same agent and lease guard as the device-plugin route |
| ServiceAccount, ClusterRole `tessera-dra` | ResourceSlices (the plugin's), ResourceClaims (read at prepare), the node and its pods, events; nothing else |
| ValidatingAdmissionPolicy `tessera-dra-resourceslices` | RBAC cannot name "this node's slices": the policy lets the plugin's ServiceAccount write only ResourceSlices of the node its pod runs on (the node name the API server puts in a pod-bound token, `authentication.kubernetes.io/node-name`) |

Host paths of the plugin container: kubelet's plugin registration directory (its registration
socket), `/var/lib/kubelet/plugins/gpu.tessera.dev` (its DRA socket and checkpoint), `/var/run/cdi`
(the CDI specs the container runtime reads) and the state directory it shares with the agent
(the container registry). Like the device plugin it runs as uid 0 without capabilities.
"""
from __future__ import annotations

from typing import Any, Final

from tessera.model.contract import DRA_DRIVER, LABEL_ALLOCATION
from tessera.manifests.node import STATE_DIR, common_env, host_path, node_daemonset, plugin_runtime
from tessera.manifests.objects import KubeObject, metadata, obj, policy_rule, service_account, tmp_mount
from tessera.manifests.pools import pools_mount
from tessera.manifests.rbac import cluster_grant
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "node"
NAME: Final = "tessera-dra"
PLUGINS_REGISTRY_DIR: Final = "/var/lib/kubelet/plugins_registry"
PLUGIN_DIR: Final = f"/var/lib/kubelet/plugins/{DRA_DRIVER}"
CDI_DIR: Final = "/var/run/cdi"
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"


def device_class_name(pool: str) -> str:
    return f"{pool}.{DRA_DRIVER}"


def device_class(pool: str) -> KubeObject:
    expression = f'device.driver == "{DRA_DRIVER}" && device.attributes["{DRA_DRIVER}"].pool == "{pool}"'
    meta = metadata(device_class_name(pool), COMPONENT, None)
    return obj("resource.k8s.io/v1", "DeviceClass", meta, spec={"selectors": [{"cel": {"expression": expression}}]})


def dra_rules() -> list[dict[str, Any]]:
    """What the DRA plugin and the agent beside it call."""
    return [
        policy_rule(["resource.k8s.io"], ["resourceslices"], ["create", "delete", "get", "list", "update", "watch"]),
        policy_rule(["resource.k8s.io"], ["resourceclaims"], ["get"]),
        policy_rule([""], ["pods"], ["get", "list", "watch"]),
        policy_rule([""], ["nodes"], ["get"]),
        policy_rule([""], ["events"], ["create", "patch"]),
        policy_rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def _plugin_container(settings: PlatformSettings) -> dict[str, Any]:
    return {
        "name": "dra-plugin",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": ["tessera", "node", "dra-plugin"],
        "env": [
            *common_env(),
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        **plugin_runtime(f"{PLUGINS_REGISTRY_DIR}/{DRA_DRIVER}-reg.sock"),
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": PLUGINS_REGISTRY_DIR},
            {"name": "plugin", "mountPath": PLUGIN_DIR},
            {"name": "cdi", "mountPath": CDI_DIR},
            {"name": "state", "mountPath": STATE_DIR},
            pools_mount(),
            tmp_mount(),
        ],
    }


def _daemonset(settings: PlatformSettings) -> KubeObject:
    volumes = [
        host_path("plugins-registry", PLUGINS_REGISTRY_DIR, "Directory"),
        host_path("plugin", PLUGIN_DIR, "DirectoryOrCreate"),
        host_path("cdi", CDI_DIR, "DirectoryOrCreate"),
    ]
    return node_daemonset(settings, NAME, {"nodeSelector": {LABEL_ALLOCATION: "dra"}}, _plugin_container(settings), volumes)


def _slice_policy(settings: PlatformSettings) -> list[KubeObject]:
    user = f"system:serviceaccount:{settings.namespace}:{NAME}"
    policy = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        metadata(f"{NAME}-resourceslices", COMPONENT, None),
        spec={
            "failurePolicy": "Fail",
            # matchPolicy Equivalent (the default) applies it to writes through every served version
            "matchConstraints": {
                "resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["resourceslices"]}]
            },
            "matchConditions": [{"name": "tessera-dra-plugin", "expression": f'request.userInfo.username == "{user}"'}],
            "variables": [
                {"name": "userNodeName", "expression": f"request.userInfo.extra[?'{NODE_NAME_EXTRA}'][0].orValue('')"},
                {"name": "objectNodeName", "expression": "(request.operation == 'DELETE' ? oldObject : object).spec.?nodeName.orValue('')"},
            ],
            "validations": [
                {"expression": "variables.userNodeName != ''", "message": "the DRA plugin's token names no node: it must run in a pod on a node"},
                {
                    "expression": "variables.userNodeName == variables.objectNodeName",
                    "messageExpression": "'the DRA plugin on ' + variables.userNodeName + ' may only write ResourceSlices of its own node, not ' + variables.objectNodeName",
                },
            ],
        },
    )
    binding = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        metadata(f"{NAME}-resourceslices", COMPONENT, None),
        spec={"policyName": f"{NAME}-resourceslices", "validationActions": ["Deny"]},
    )
    return [policy, binding]


def build_dra_objects(settings: PlatformSettings) -> list[KubeObject]:
    """Every object of the DRA route; none when no pool is on it."""
    pools = settings.dra_pools
    if not pools:
        return []
    return [
        *(device_class(p.name) for p in pools),
        service_account(NAME, COMPONENT, settings.namespace),
        *cluster_grant(NAME, COMPONENT, dra_rules(), NAME, settings.namespace),
        _daemonset(settings),
        *_slice_policy(settings),
    ]
