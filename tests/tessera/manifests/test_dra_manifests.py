"""The DRA route's cluster objects, rendered from stack files as `tessera render` renders them: valid
for 1.34 and 1.36, each DaemonSet on exactly its route's nodes, least privilege, and workloads on a
dra pool asking through ResourceClaimTemplates (docs/dra.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tessera.manifests.stack import build_stack
from tessera.model import StackConfig, load_stack_file
from tessera.model.contract import DRA_DRIVER, GPU_CORE, LABEL_ALLOCATION, LABEL_POOL_KIND, SCHEDULER_NAME
from tessera.model.labels_taints import pool_labels
from tessera.model.plan import TESSERA_DEVICE_PLUGIN, TESSERA_DRA_PLUGIN, plan_stack

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "dra" / "Pulumi.dra.yaml"


def _tke_whole_gpus(tmp_path: Path) -> StackConfig:
    """TKE 1.34: no consumable capacity, so a dra pool gives a whole GPU per claim."""
    text = """config:
  tencentcloud:region: ap-guangzhou
  tessera:cluster: {provider: tke, name: t, kubernetesVersion: "1.34.1", vpcCidr: 10.0.0.0/16, subnets: [{zone: ap-guangzhou-3, cidr: 10.0.1.0/24}]}
  tessera:nodePools:
    - {name: whole, kind: shared, instanceType: GN7.10XLARGE160, allocation: dra, sharing: {sharesPerGpu: 1}}
  tessera:workloads:
    - {name: trainer, namespace: ml, createNamespace: true, image: {repository: example/trainer, tag: "1"}, pool: whole, gpu: {core: 200}}
"""
    path = tmp_path / "Pulumi.tke.yaml"
    path.write_text(text)
    return load_stack_file(path)


def _objects(config: StackConfig) -> list[dict[str, Any]]:
    return [o for objs in build_stack(config).values() for o in objs]


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _runs_on(pod_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """kube-scheduler's nodeSelector and required node affinity (In / NotIn) for one node's labels."""
    if any(labels.get(k) != v for k, v in pod_spec.get("nodeSelector", {}).items()):
        return False
    terms = pod_spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms")
    if not terms:
        return True
    def holds(e: dict[str, Any]) -> bool:
        return (labels.get(e["key"]) in e["values"]) is (e["operator"] == "In")
    return any(all(holds(e) for e in t["matchExpressions"]) for t in terms)


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_every_object_of_a_dra_stack_is_valid_for_the_version(tmp_path: Path, version: str) -> None:
    problems = []
    for config in (load_stack_file(EXAMPLE), _tke_whole_gpus(tmp_path)):
        for o in _objects(config):
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(f"{o['kind']}/{o['metadata']['name']}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError:
                continue  # custom kinds: test_schema.py lists and justifies them
    assert problems == []


def test_each_route_runs_its_node_side_on_exactly_its_pools_nodes() -> None:
    config = load_stack_file(EXAMPLE)
    objects = _objects(config)
    dra_pods = _find(objects, "DaemonSet", "tessera-dra")["spec"]["template"]["spec"]
    plugin_pods = _find(objects, "DaemonSet", "tessera-node")["spec"]["template"]["spec"]
    for pool in config.node_pools:
        labels = pool_labels(pool)  # as the node patches / label-nodes.sh put them on the nodes
        on_dra = pool.allocation == "dra"
        assert _runs_on(dra_pods, labels) is on_dra, pool.name
        assert _runs_on(plugin_pods, labels) is (not on_dra and labels[LABEL_POOL_KIND] == "shared"), pool.name
        assert (labels.get(LABEL_ALLOCATION) == "dra") is on_dra


def test_a_device_class_selects_its_pools_devices_of_tesseras_driver() -> None:
    objects = _objects(load_stack_file(EXAMPLE))
    classes = [o for o in objects if o["kind"] == "DeviceClass"]
    assert [c["metadata"]["name"] for c in classes] == [f"l40s-dra.{DRA_DRIVER}"]
    (selector,) = classes[0]["spec"]["selectors"]
    assert selector["cel"]["expression"] == f'device.driver == "{DRA_DRIVER}" && device.attributes["{DRA_DRIVER}"].pool == "l40s-dra"'


def test_the_plugin_may_touch_only_what_it_needs_and_only_its_nodes_slices() -> None:
    objects = _objects(load_stack_file(EXAMPLE))
    rules = _find(objects, "ClusterRole", "tessera-dra")["rules"]
    assert all("*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"] for r in rules)
    by_resource = {res: set(r["verbs"]) for r in rules for res in r["resources"]}
    assert by_resource["resourceclaims"] == {"get"}, "claims are read at prepare, never written"
    assert "secrets" not in by_resource and "configmaps" not in by_resource
    policy = _find(objects, "ValidatingAdmissionPolicy", "tessera-dra-resourceslices")["spec"]
    assert policy["matchConstraints"]["resourceRules"][0]["resources"] == ["resourceslices"]
    assert policy["matchConditions"][0]["expression"] == 'request.userInfo.username == "system:serviceaccount:tessera-system:tessera-dra"'
    assert _find(objects, "ValidatingAdmissionPolicyBinding", "tessera-dra-resourceslices")["spec"]["validationActions"] == ["Deny"]


def test_a_workload_on_a_dra_pool_asks_through_a_claim_template(tmp_path: Path) -> None:
    objects = _objects(load_stack_file(EXAMPLE))
    pod = _find(objects, "Deployment", "embedder")["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "embedder-gpu"}]
    assert pod["schedulerName"] == SCHEDULER_NAME, "tessera-scheduler: its /dra/prioritize entry ranks the nodes, DRA allocates the devices"
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert GPU_CORE not in container["resources"]["limits"]
    exactly = _find(objects, "ResourceClaimTemplate", "embedder-gpu")["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {"deviceClassName": f"l40s-dra.{DRA_DRIVER}", "allocationMode": "ExactCount", "count": 1,
                       "capacity": {"requests": {"cores": "25", "memory": "8192Mi"}}}
    whole = _find(_objects(_tke_whole_gpus(tmp_path)), "ResourceClaimTemplate", "trainer-gpu")["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert whole == {"deviceClassName": f"whole.{DRA_DRIVER}", "allocationMode": "ExactCount", "count": 2}, "whole GPUs: no capacity asked"


def test_the_device_plugin_route_keeps_tesseras_scheduler() -> None:
    objects = _objects(load_stack_file(ROOT / "examples" / "triton" / "Pulumi.triton.yaml"))
    assert _find(objects, "Deployment", "triton-bert")["spec"]["template"]["spec"]["schedulerName"] == SCHEDULER_NAME
    assert not [o for o in objects if o["kind"] in ("DeviceClass", "ResourceClaimTemplate") or o["metadata"]["name"] == "tessera-dra"]


def test_plan_and_render_agree_on_what_runs_on_each_pool() -> None:
    config = load_stack_file(EXAMPLE)
    daemonsets = {o["metadata"]["name"] for o in _objects(config) if o["kind"] == "DaemonSet"}
    for pool in plan_stack(config).pools:
        expected = TESSERA_DRA_PLUGIN if pool.name == "l40s-dra" else TESSERA_DEVICE_PLUGIN
        assert expected in pool.components
    assert {"tessera-dra", "tessera-node"} <= daemonsets


def test_the_rendered_files_carry_the_dra_objects(tmp_path: Path) -> None:
    import subprocess
    import sys
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "tessera.cli.main", "render", str(EXAMPLE), "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    kinds = {d["kind"] for f in out.glob("*.yaml") for d in yaml.safe_load_all(f.read_text()) if d}
    assert {"DeviceClass", "ResourceClaimTemplate", "ValidatingAdmissionPolicy"} <= kinds
    assert "tessera.dev/allocation=dra" in (out / "nodes" / "label-nodes.sh").read_text()


def _extender_rules(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    role = _find(objects, "ClusterRole", "tessera-extender")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_tessera_scheduler_scores_dra_pods_through_a_second_extender_entry() -> None:
    objects = _objects(load_stack_file(EXAMPLE))
    config = yaml.safe_load(_find(objects, "ConfigMap", f"{SCHEDULER_NAME}-config")["data"]["config.yaml"])
    main, dra = config["extenders"]
    assert dra == {
        "urlPrefix": main["urlPrefix"] + "/dra", "prioritizeVerb": "prioritize", "weight": main["weight"], "enableHTTPS": False,
        "httpTimeout": main["httpTimeout"], "nodeCacheCapable": True, "ignorable": True,
    }
    dra_reads = {("resource.k8s.io", "resourceslices", "list"), ("resource.k8s.io", "resourceclaims", "get"), ("resource.k8s.io", "resourceclaims", "list")}
    assert dra_reads <= _extender_rules(objects)
    plain = _objects(load_stack_file(ROOT / "examples" / "triton" / "Pulumi.triton.yaml"))
    config = yaml.safe_load(_find(plain, "ConfigMap", f"{SCHEDULER_NAME}-config")["data"]["config.yaml"])
    assert len(config["extenders"]) == 1, "no dra pool: no second entry"
    assert not {r for r in _extender_rules(plain) if r[0] == "resource.k8s.io"}, "no dra pool: no DRA reads"
