"""The node DaemonSet: Tessera device plugin + node isolation agent, on `shared` pools only.

One pod per shared node, three containers, least privilege per container:

| container | runs | privileged | why |
| --- | --- | --- | --- |
| device-plugin | `tessera node device-plugin` | no (uid 0, all capabilities dropped) | writes its socket into the root-owned kubelet directory; NVML through the NVIDIA runtime |
| agent | `tessera node agent` | yes | cgroup freezer writes, the MPS control daemon, stopping processes of other pods |
| lease-guard | `tessera node agent --lease-guard` | yes | thaws cgroups whose freeze lease expired, so a crashed or hung agent never leaves work frozen |

`hostPID` (pod-wide) lets the agent map NVML process ids to pods through `/proc/<pid>/cgroup` and
signal them. Host paths are exactly these (nothing else of the host is visible):

- `/var/lib/kubelet/device-plugins` (device plugin, rw): kubelet.sock and the plugin's socket;
- `/var/lib/kubelet/pod-resources` (both, ro): kubelet's PodResources API socket, to find which pod
  a container belongs to (connecting to a socket works on a read-only mount);
- `/var/lib/tessera` (both, rw): the container registry the device plugin writes at
  PreStartContainer and the agent reads, and the agent's freeze leases; on the host so an upgraded
  agent finds (and thaws) what its predecessor froze;
- `/run/tessera` (agent, rw): MPS pipe/log directories per GPU; the device plugin only names this
  host path in its Allocate answers, it never opens it;
- `/sys/fs/cgroup` (agent, rw): freezer (v2 `cgroup.freeze`, v1 freezer) and per-pod accounting.

No `/dev` mount: the agent is privileged (it sees devices already) and the device plugin gets
NVML through the NVIDIA container runtime (`NVIDIA_VISIBLE_DEVICES=all`, utility capability).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

from tessera.model.contract import LABEL_ALLOCATION, LABEL_POOL_KIND, PRIORITY_CLASS_CRITICAL, TAINT_GPU
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    env,
    field_env,
    metadata,
    obj,
    policy_rule,
    resources,
    selector_labels,
    service_account,
    tmp_mount,
    tmp_volume,
)
from tessera.manifests.pools import pools_env, pools_mount, pools_volume
from tessera.manifests.rbac import cluster_grant
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "node"
NAME: Final = "tessera-node"
DEVICE_PLUGIN_DIR: Final = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_DIR: Final = "/var/lib/kubelet/pod-resources"
RUN_DIR: Final = "/run/tessera"
STATE_DIR: Final = "/var/lib/tessera"
PLUGIN_SOCKET: Final = "tessera-gpu-core.sock"  # tessera_node.deviceplugin.plugin.DevicePluginSettings.endpoint
CGROUP_DIR: Final = "/sys/fs/cgroup"
SHARED_NODE_SELECTOR: Final = MappingProxyType({LABEL_POOL_KIND: "shared"})
PLUGIN_METRICS_PORT: Final = "plugin-metrics"  # the device plugin's /metrics (the agent's port is "metrics")


def node_rules() -> list[dict[str, Any]]:
    """The API calls the device plugin and agent make (same ServiceAccount for both containers)."""
    return [
        # pods on this node (allocation records; the field selector is not expressible in RBAC)
        policy_rule([""], ["pods"], ["get", "list", "watch"]),
        # pods on a GPU that became unhealthy are evicted to be rescheduled; the Eviction API (not
        # pods delete) so PodDisruptionBudgets hold
        policy_rule([""], ["pods/eviction"], ["create"]),
        # PreStartContainer checks the allocation ConfigMap the container's env comes from
        policy_rule([""], ["configmaps"], ["get"]),
        # GPU inventory annotation on the node and gpu-memory capacity in its status
        policy_rule([""], ["nodes"], ["get", "patch"]),
        policy_rule([""], ["nodes/status"], ["patch"]),
        # "stopped for exceeding gpu-memory", "frozen for online work", "evicted: GPU unhealthy"
        policy_rule([""], ["events"], ["create", "patch"]),
        policy_rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def host_path(name: str, path: str, kind: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def common_env() -> list[dict[str, Any]]:
    return [field_env("NODE_NAME", "spec.nodeName"), *env(pools_env())]


def plugin_runtime(socket: str) -> dict[str, Any]:
    """Readiness, resources and security of a kubelet plugin container (device plugin or DRA plugin).

    Ready once its socket exists, i.e. it is registered with kubelet. No liveness probe: a plugin
    registers again within a second of a kubelet restart, and the device plugin's socket is gone on
    purpose while gpu-operator pauses device plugins for a MIG change. uid 0 only to own its sockets
    (and the DRA plugin's CDI specs) in root-owned host directories; no capability, no escalation."""
    return {
        "readinessProbe": {"exec": {"command": ["test", "-S", socket]}, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3},
        "resources": resources("50m", "64Mi", "500m", "256Mi"),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": False,
            "runAsUser": 0,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _device_plugin_container(settings: PlatformSettings) -> dict[str, Any]:
    return {
        "name": "device-plugin",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": [
            "tessera", "node", "device-plugin", "--device-plugin-dir", DEVICE_PLUGIN_DIR,
            "--metrics-port", str(settings.monitoring.device_plugin_metrics_port),
        ],
        "env": [
            *common_env(),
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "ports": [{"name": PLUGIN_METRICS_PORT, "containerPort": settings.monitoring.device_plugin_metrics_port, "protocol": "TCP"}],
        # Ready once its socket exists, i.e. it is registered with kubelet. No liveness probe: the
        # plugin re-registers itself within a second of a kubelet restart, and its socket is gone
        # on purpose while gpu-operator pauses device plugins for a MIG change.
        **plugin_runtime(f"{DEVICE_PLUGIN_DIR}/{PLUGIN_SOCKET}"),
        "volumeMounts": [
            {"name": "device-plugins", "mountPath": DEVICE_PLUGIN_DIR},
            {"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
            pools_mount(),
            tmp_mount(),
        ],
    }


def agent_container(settings: PlatformSettings) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/metrics", "port": "metrics", "scheme": "HTTP"}, "periodSeconds": 15, "timeoutSeconds": 3}
    return {
        "name": "agent",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": ["tessera", "node", "agent", "--metrics-port", str(settings.monitoring.metrics_port)],
        "env": [
            *common_env(),
            # compute for nvidia-cuda-mps-control, utility for NVML
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "ports": [{"name": "metrics", "containerPort": settings.monitoring.metrics_port, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 15, "failureThreshold": 4},
        "readinessProbe": {**probe, "failureThreshold": 2},
        "resources": resources("100m", "128Mi", "1", "512Mi"),
        "securityContext": {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "cgroup", "mountPath": CGROUP_DIR},
            {"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
            {"name": "run-tessera", "mountPath": RUN_DIR},
            pools_mount(),
            tmp_mount(),
        ],
    }


def lease_guard_container(settings: PlatformSettings) -> dict[str, Any]:
    # A separate container so that an agent killed with SIGKILL (OOM, crash) cannot take the guard
    # with it: freezes expire here even while the agent restarts.
    return {
        "name": "lease-guard",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": ["tessera", "node", "agent", "--lease-guard"],
        "env": common_env(),
        "resources": resources("10m", "32Mi", "200m", "128Mi"),
        "securityContext": {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "cgroup", "mountPath": CGROUP_DIR},
            {"name": "state", "mountPath": STATE_DIR},
            tmp_mount(),
        ],
    }


# checkov takes per-resource skips from annotations. The lease guard serves nothing (no port, no
# Service traffic), so a readiness probe would gate nothing; the device plugin and the agent have
# one (tests/tessera/manifests/test_workloads.py pins that this skip covers only the lease guard).
CHECKOV_SKIPS: Final = MappingProxyType(
    {"checkov.io/skip1": "CKV_K8S_9=the lease-guard container serves nothing; its siblings have readiness probes"}
)


def node_daemonset(
    settings: PlatformSettings, name: str, placement: dict[str, Any], plugin: dict[str, Any], plugin_volumes: list[dict[str, Any]]
) -> KubeObject:
    """A DaemonSet of a route's node side: its plugin container beside the agent and the lease
    guard, on the nodes `placement` (nodeSelector, affinity) picks. Both routes build theirs here."""
    pod_spec = {
        "serviceAccountName": name,
        "automountServiceAccountToken": True,  # the plugin and the agent are API clients
        "priorityClassName": PRIORITY_CLASS_CRITICAL,
        "hostPID": True,
        # RuntimeDefault for the plugin; the privileged agent runs unconfined regardless
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        **placement,
        # every GPU pool is tainted tessera.dev/gpu=<kind>:NoSchedule; the selector already limits the nodes
        "tolerations": [{"key": TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 30,  # the agent thaws frozen containers on SIGTERM
        **settings.pull_secrets_spec(),
        "containers": [plugin, agent_container(settings), lease_guard_container(settings)],
        "volumes": [
            *plugin_volumes,
            host_path("pod-resources", POD_RESOURCES_DIR, "Directory"),
            host_path("state", STATE_DIR, "DirectoryOrCreate"),
            host_path("run-tessera", RUN_DIR, "DirectoryOrCreate"),
            host_path("cgroup", CGROUP_DIR, "Directory"),
            pools_volume(),
            tmp_volume(),
        ],
    }
    labels = component_labels(COMPONENT, name)
    return obj(
        "apps/v1",
        "DaemonSet",
        metadata(name, COMPONENT, settings.namespace, annotations=CHECKOV_SKIPS),
        spec={
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(COMPONENT, name)},
            # one node at a time: the new agent thaws anything the old one left frozen before moving on
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": dict(sorted(labels.items()))}, "spec": pod_spec},
        },
    )


def _daemonset(settings: PlatformSettings) -> KubeObject:
    placement = {"nodeSelector": dict(SHARED_NODE_SELECTOR), **_off_dra_nodes(settings)}
    volumes = [host_path("device-plugins", DEVICE_PLUGIN_DIR, "Directory")]
    return node_daemonset(settings, NAME, placement, _device_plugin_container(settings), volumes)


def _off_dra_nodes(settings: PlatformSettings) -> dict[str, Any]:
    """Shared pools on the DRA route run Tessera's DRA plugin instead (`dra.py`); only a stack that
    has one carries the rule, so the DaemonSet of other stacks stays as it was."""
    if not settings.dra_pools:
        return {}
    term = {"matchExpressions": [{"key": LABEL_ALLOCATION, "operator": "NotIn", "values": ["dra"]}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}


def _metrics_service(settings: PlatformSettings) -> KubeObject:
    annotations = {}
    if settings.monitoring.enabled:
        annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(settings.monitoring.metrics_port), "prometheus.io/path": "/metrics"}
    return obj(
        "v1",
        "Service",
        metadata(f"{NAME}-metrics", COMPONENT, settings.namespace, annotations=annotations),
        spec={
            # headless: Prometheus scrapes every node's agent, not a load-balanced one
            "clusterIP": "None",
            "selector": selector_labels(COMPONENT, NAME),
            # the annotations name the agent's port; ServiceMonitors scrape both
            "ports": [
                {"name": "metrics", "port": settings.monitoring.metrics_port, "targetPort": "metrics", "protocol": "TCP"},
                {"name": PLUGIN_METRICS_PORT, "port": settings.monitoring.device_plugin_metrics_port, "targetPort": PLUGIN_METRICS_PORT, "protocol": "TCP"},
            ],
        },
    )


def build_node_objects(settings: PlatformSettings) -> list[KubeObject]:
    """ServiceAccount, RBAC, DaemonSet and metrics Service of the device-plugin route's node side,
    when a shared pool is on that route."""
    if len(settings.dra_pools) == len(settings.shared_pools):
        return []
    return [
        service_account(NAME, COMPONENT, settings.namespace),
        *cluster_grant(NAME, COMPONENT, node_rules(), NAME, settings.namespace),
        _daemonset(settings),
        _metrics_service(settings),
    ]
