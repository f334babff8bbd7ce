"""Inference workloads of the `workloads` section: Deployment, Service, PDB, HPA and PodMonitor each.

Pure functions of a validated stack. Per workload, in its own namespace:

- a Deployment of one container, placed on its pool the way Tessera's own routing would place it:
  `nodeSelector: tessera.dev/pool=<pool>`, a toleration of each of the pool's taints (the
  `tessera.dev/gpu=<kind>` taint and the pool's extra ones, `tessera.model.labels_taints`), and on
  shared pools `schedulerName: tessera-scheduler`, which the webhook would set anyway (it then only
  adds the allocation env); on dra pools too, so that scheduler's `/dra/prioritize` entry ranks nodes. The GPU share is an extended resource in both requests and limits (they
  must be equal), named as the pool's device plugin advertises it (`tessera.model.capacity`).
  `spec.replicas` is left out when an HPA owns the count, so an apply never resets what it scaled to;
  The pod runs as its own ServiceAccount without an API token, non-root, all capabilities dropped,
  with a read-only root file system and a writable /tmp (`TMP_SIZE_LIMIT`);
- a ClusterIP (or the chosen type) Service over the declared ports, and a NetworkPolicy that
  admits traffic to those ports only (clients are the team's, so from anywhere; every other port is closed);
- a PodDisruptionBudget of one unavailable replica (drains, MIG re-partitioning);
- an autoscaling/v2 HorizontalPodAutoscaler on the Pods or External metric, whose name is the one the
  generated prometheus-adapter rule serves (`tessera.manifests.prometheus_adapter.workload_rules`);
- with a Prometheus Operator (monitoring modes kube-prometheus-stack and existing) a PodMonitor on
  the metrics port, labelled like Tessera's ServiceMonitors so the same Prometheus selects it; in mode
  none the pods carry `prometheus.io/*` annotations instead.

Namespaces the stack asks to create (`createNamespace`) go to the "platform" component, before the
quotas that may live in them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from tessera.model.capacity import pools_mig_strategy, replica_request
from tessera.model.contract import CORE_PER_GPU, DRA_DRIVER, PRIORITY_CLASS_OFFLINE, PRIORITY_CLASS_ONLINE, SCHEDULER_NAME, ANNOTATION_APP_CLASS, LABEL_POOL
from tessera.model.labels_taints import AnyPool, pool_taints
from tessera.model.pools import SharedPool
from tessera.model.workloads import EnvVar, HttpProbe, Workload
from tessera.manifests.objects import KubeObject, obj

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

COMPONENT: Final = "workloads"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
COMPONENT_VALUE: Final = "inference"
MANAGED_BY: Final = "tessera"
PRIORITY_OF_CLASS: Final = {"online": PRIORITY_CLASS_ONLINE, "offline": PRIORITY_CLASS_OFFLINE}
TMP_VOLUME: Final = "tmp"
TMP_SIZE_LIMIT: Final = "1Gi"  # scratch space beside a read-only root file system
CLAIM_REQUEST: Final = "gpu"  # the pod's claim, the claim's one request, and the container's reference


def selector(w: Workload) -> dict[str, str]:
    """The immutable labels that select the workload's pods."""
    return {LABEL_INSTANCE: w.name, LABEL_NAME: w.name}


def labels(w: Workload) -> dict[str, str]:
    return dict(sorted({**selector(w), LABEL_COMPONENT: COMPONENT_VALUE, LABEL_MANAGED_BY: MANAGED_BY}.items()))


def _meta(w: Workload, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": w.name, "namespace": w.namespace, "labels": dict(sorted({**labels(w), **(extra_labels or {})}.items()))}


def _meta_named(w: Workload, name: str) -> dict[str, Any]:
    return {**_meta(w), "name": name}


def _env(var: EnvVar) -> dict[str, Any]:
    if var.secret is not None:
        return {"name": var.name, "valueFrom": {"secretKeyRef": {"name": var.secret.name, "key": var.secret.key}}}
    if var.config_map is not None:
        return {"name": var.name, "valueFrom": {"configMapKeyRef": {"name": var.config_map.name, "key": var.config_map.key}}}
    return {"name": var.name, "value": var.value or ""}


def _probe(probe: HttpProbe) -> dict[str, Any]:
    return {
        "httpGet": {"path": probe.path, "port": probe.port, "scheme": "HTTP"},
        "initialDelaySeconds": probe.initial_delay_seconds,
        "periodSeconds": probe.period_seconds,
        "timeoutSeconds": 2,
        "failureThreshold": probe.failure_threshold,
    }


def gpu_resources(w: Workload, config: StackConfig) -> dict[str, str]:
    """The replica's GPU share as extended resources, named as the pool's device plugin advertises them."""
    pool = config.pool(w.pool)
    request = replica_request(w.gpu, pool, pools_mig_strategy(config.node_pools))
    return {name: str(amount) for name, amount in sorted(request.items())}


def _on_dra(w: Workload, config: StackConfig) -> bool:
    return config.pool(w.pool).allocation == "dra"


def claim_template_name(w: Workload) -> str:
    return f"{w.name}-gpu"


def claim_template(w: Workload, config: StackConfig) -> KubeObject:
    """On a dra pool: the ResourceClaimTemplate each replica's claim is made from. A share asks for
    capacity of one device (`cores` in percent, `memory`); N x 100 cores ask for N whole devices.
    A pool that gives a whole GPU per claim (`sharesPerGpu: 1`) asks for devices only, which needs
    no consumable capacity."""
    pool = cast(SharedPool, config.pool(w.pool))
    core = w.gpu.core or CORE_PER_GPU
    count, per_device = (core // CORE_PER_GPU, CORE_PER_GPU) if core >= CORE_PER_GPU else (1, core)
    exactly: dict[str, Any] = {"deviceClassName": f"{pool.name}.{DRA_DRIVER}", "allocationMode": "ExactCount", "count": count}
    if pool.sharing.shares_per_gpu != 1:
        requests = {"cores": str(per_device)}
        if w.gpu.memory_mib is not None:
            requests["memory"] = f"{w.gpu.memory_mib}Mi"
        exactly["capacity"] = {"requests": requests}
    spec = {"spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": exactly}]}}}
    return obj("resource.k8s.io/v1", "ResourceClaimTemplate", _meta_named(w, claim_template_name(w)), spec=spec)


def _container(w: Workload, config: StackConfig) -> dict[str, Any]:
    gpu = {} if _on_dra(w, config) else gpu_resources(w, config)
    r = w.resources
    container: dict[str, Any] = {
        "name": w.name,
        "image": w.image.ref(),
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "requests": {"cpu": r.cpu_request, "memory": r.memory_request, **gpu},
            "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit, **gpu},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
        "volumeMounts": [{"name": TMP_VOLUME, "mountPath": "/tmp"}],
    }
    if w.command:
        container["command"] = list(w.command)
    if w.args:
        container["args"] = list(w.args)
    if w.env:
        container["env"] = [_env(v) for v in w.env]
    if w.ports:
        container["ports"] = [{"name": p.name, "containerPort": p.port, "protocol": p.protocol} for p in w.ports]
    if w.readiness_probe is not None:
        container["readinessProbe"] = _probe(w.readiness_probe)
    if w.liveness_probe is not None:
        container["livenessProbe"] = _probe(w.liveness_probe)
    container["volumeMounts"] += [{"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only} for v in w.volumes]
    if _on_dra(w, config):
        container["resources"]["claims"] = [{"name": CLAIM_REQUEST}]
    return container


def _volumes(w: Workload) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}]
    for v in w.volumes:
        if v.claim_name is not None:
            out.append({"name": v.name, "persistentVolumeClaim": {"claimName": v.claim_name, "readOnly": v.read_only}})
        else:
            out.append({"name": v.name, "configMap": {"name": v.config_map}})
    return out


def _pod_annotations(w: Workload, config: StackConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    if w.app_class is not None:
        out[ANNOTATION_APP_CLASS] = w.app_class
    m = config.monitoring
    if w.metrics is not None and m.enabled and m.mode == "none":
        port = next(p.port for p in w.ports if p.name == w.metrics.port)
        out.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": w.metrics.path})
    return dict(sorted(out.items()))


def _pod_spec(w: Workload, config: StackConfig) -> dict[str, Any]:
    pool = cast(AnyPool, config.pool(w.pool))  # NodePool members are the AnyPool union
    security: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if w.run_as_user is not None:
        security.update(runAsUser=w.run_as_user, runAsGroup=w.run_as_user)
    spec: dict[str, Any] = {
        "serviceAccountName": w.name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": {LABEL_POOL: pool.name},
        "tolerations": [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in pool_taints(pool)
        ],
        "securityContext": security,
        "containers": [_container(w, config)],
        "volumes": _volumes(w),
    }
    if isinstance(pool, SharedPool) and pool.allocation == "dra":
        # kube-scheduler's DRA allocator places the claim's devices; tessera-scheduler's second
        # extender entry ranks the nodes with the pool's policy (/dra/prioritize)
        spec["resourceClaims"] = [{"name": CLAIM_REQUEST, "resourceClaimTemplateName": claim_template_name(w)}]
    if isinstance(pool, SharedPool):
        spec["schedulerName"] = SCHEDULER_NAME
    if w.app_class is not None:
        spec["priorityClassName"] = PRIORITY_OF_CLASS[w.app_class]
    return spec


def deployment(w: Workload, config: StackConfig) -> KubeObject:
    template_meta: dict[str, Any] = {"labels": labels(w)}
    annotations = _pod_annotations(w, config)
    if annotations:
        template_meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector(w)},
        "revisionHistoryLimit": 5,
        # one replica more during a rollout, never one less: the pool needs room for one more share
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {"metadata": template_meta, "spec": _pod_spec(w, config)},
    }
    if w.scaling.metric is None:
        spec["replicas"] = w.scaling.min_replicas
    return obj("apps/v1", "Deployment", _meta(w), spec=spec)


def service(w: Workload) -> KubeObject:
    ports = [{"name": p.name, "port": p.port, "targetPort": p.name, "protocol": p.protocol} for p in w.ports]
    return obj("v1", "Service", _meta(w), spec={"type": w.service_type, "selector": selector(w), "ports": ports})


def service_account(w: Workload) -> KubeObject:
    """The workload's own identity; it gets no API token (inference servers do not call the API)."""
    return obj("v1", "ServiceAccount", _meta(w), automountServiceAccountToken=False)


def network_policy(w: Workload) -> KubeObject:
    """Ingress to the declared ports only (none declared: no ingress at all); egress stays open
    (model repositories, object stores)."""
    ingress = [{"ports": [{"port": p.port, "protocol": p.protocol} for p in w.ports]}] if w.ports else []
    spec = {"podSelector": {"matchLabels": selector(w)}, "policyTypes": ["Ingress"], "ingress": ingress}
    return obj("networking.k8s.io/v1", "NetworkPolicy", _meta(w), spec=spec)


def disruption_budget(w: Workload) -> KubeObject:
    spec = {"maxUnavailable": 1, "selector": {"matchLabels": selector(w)}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    return obj("policy/v1", "PodDisruptionBudget", _meta(w), spec=spec)


def autoscaler(w: Workload) -> KubeObject | None:
    """The HPA, or None for a fixed replica count."""
    s, metric = w.scaling, w.scaling.metric
    if metric is None:
        return None
    target_key = "averageValue" if metric.target_type == "AverageValue" else "value"
    target = {"type": metric.target_type, target_key: metric.target}
    source: dict[str, Any]
    if metric.type == "Pods":
        source = {"type": "Pods", "pods": {"metric": {"name": metric.name}, "target": target}}
    else:
        identifier: dict[str, Any] = {"name": metric.name}
        if metric.selector:
            identifier["selector"] = {"matchLabels": dict(sorted(metric.selector.items()))}
        source = {"type": "External", "external": {"metric": identifier, "target": target}}
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name},
        "minReplicas": s.min_replicas,
        "maxReplicas": s.max_replicas,
        "metrics": [source],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": s.scale_down_stabilization_seconds}},
    }
    return obj("autoscaling/v2", "HorizontalPodAutoscaler", _meta(w), spec=spec)


def pod_monitor(w: Workload, config: StackConfig) -> KubeObject | None:
    """The PodMonitor, when a Prometheus Operator is there to read it and the workload serves metrics."""
    if w.metrics is None or not config.monitoring.operator:
        return None
    endpoint = {"port": w.metrics.port, "path": w.metrics.path, "interval": f"{w.metrics.interval_seconds}s"}
    spec = {"selector": {"matchLabels": selector(w)}, "podMetricsEndpoints": [endpoint]}
    return obj("monitoring.coreos.com/v1", "PodMonitor", _meta(w, config.monitoring.object_labels()), spec=spec)


def workload_objects(w: Workload, config: StackConfig) -> list[KubeObject]:
    """Everything one workload is made of."""
    out = [service_account(w), deployment(w, config), disruption_budget(w), network_policy(w)]
    if _on_dra(w, config):
        out.append(claim_template(w, config))
    if w.ports:
        out.append(service(w))
    for extra in (autoscaler(w), pod_monitor(w, config)):
        if extra is not None:
            out.append(extra)
    return out


def build_workload_objects(config: StackConfig) -> list[KubeObject]:
    """Every workload's objects ([] without workloads)."""
    return [o for w in config.workloads for o in workload_objects(w, config)]


def workload_namespaces(config: StackConfig) -> list[KubeObject]:
    """Namespaces the stack creates for its workloads (Pod Security restricted: the pods above comply)."""
    names = sorted({w.namespace for w in config.workloads if w.create_namespace})
    out = []
    for name in names:
        ns_labels = {
            "kubernetes.io/metadata.name": name,
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
            LABEL_MANAGED_BY: MANAGED_BY,
        }
        out.append(obj("v1", "Namespace", {"name": name, "labels": dict(sorted(ns_labels.items()))}))
    return out
