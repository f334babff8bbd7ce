"""Objects -> YAML files, byte-stable: the pure core of `tessera render`.

One file per component, numbered in apply order (`kubectl apply -f DIR` reads files in name order),
each Helm release (kube-prometheus-stack, gpu-operator, prometheus-adapter) in a sub-directory named after its chart (a
plain `kubectl apply -f DIR` does not recurse into it; Helm or Pulumi installs it), and on existing
clusters `nodes/label-nodes.sh`. Keys are written in a canonical order (apiVersion,
kind, metadata first, then sorted), so the bytes depend only on the objects, never on the order a
builder happened to insert keys in.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import yaml

from tessera.manifests.existing_nodes import label_script
from tessera.manifests.kube_prometheus_stack import CHART as KUBE_PROMETHEUS_STACK_CHART
from tessera.manifests.prometheus_adapter import RELEASE_NAME as PROMETHEUS_ADAPTER_RELEASE
from tessera.manifests.render_dir import RENDER_MARK
from tessera.manifests.stack import COMPONENT_ORDER, HelmRelease, build_stack, helm_releases

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

GPU_OPERATOR_DIR: Final = "gpu-operator"
PROMETHEUS_ADAPTER_DIR: Final = PROMETHEUS_ADAPTER_RELEASE
KUBE_PROMETHEUS_STACK_DIR: Final = KUBE_PROMETHEUS_STACK_CHART
# every directory a Helm release may be rendered into, named after its chart (render removes stale files there)
RELEASE_DIRS: Final = (GPU_OPERATOR_DIR, PROMETHEUS_ADAPTER_DIR, KUBE_PROMETHEUS_STACK_DIR)
NODES_DIR: Final = "nodes"
LABEL_SCRIPT: Final = f"{NODES_DIR}/label-nodes.sh"
VALUES_FILE: Final = f"{GPU_OPERATOR_DIR}/values.yaml"
RELEASE_FILE: Final = f"{GPU_OPERATOR_DIR}/release.yaml"
_TOP_KEYS: Final = ("apiVersion", "kind", "metadata")


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings (embedded configs) as literal blocks for readable diffs."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)


def canonical(value: Any, top: bool = False) -> Any:
    """Dicts with sorted keys (API objects: apiVersion, kind, metadata first); lists keep their order."""
    if isinstance(value, Mapping):
        keys = sorted(value, key=str)
        if top:
            keys = [k for k in _TOP_KEYS if k in value] + [k for k in keys if k not in _TOP_KEYS]
        return {k: canonical(value[k]) for k in keys}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


def dump_documents(objects: list[dict[str, Any]]) -> str:
    docs = [canonical(o, top=True) for o in objects]
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=120)


def component_file(component: str) -> str:
    return f"{COMPONENT_ORDER.index(component):02d}-{component}.yaml"


def _header(source: str, what: str) -> str:
    return f"{RENDER_MARK} from {source}: {what}. Do not edit; change the stack file.\n"


def release_dir(release: HelmRelease) -> str:
    """The sub-directory a release is rendered into: its chart's name (one of RELEASE_DIRS), which
    stays put when a stack renames the release."""
    if release.chart not in RELEASE_DIRS:
        raise ValueError(f"no render directory for Helm chart {release.chart!r}; add it to RELEASE_DIRS")
    return release.chart


def _release_files(release: HelmRelease, source: str) -> dict[str, str]:
    directory = release_dir(release)
    values_file = f"{directory}/values.yaml"
    values = _header(source, f"values for the {release.chart} Helm chart") + yaml.dump(
        canonical(release.values), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120
    )
    description = {
        "name": release.name,
        "chart": release.chart,
        "version": release.version,
        "repository": release.repository,
        "namespace": release.namespace,
        "valuesFile": "values.yaml",
        "install": release.helm_command(values_file),
    }
    text = _header(source, "the Helm release to install, from the output directory (not a Kubernetes object)") + yaml.dump(
        description, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=200
    )
    return {values_file: values, f"{directory}/release.yaml": text}


def render_files(config: StackConfig, source: str) -> dict[str, str]:
    """Relative file name -> content for one stack. `source` is the stack file's name (header only)."""
    files: dict[str, str] = {}
    for component, objects in build_stack(config).items():
        files[component_file(component)] = _header(source, f"component {component}") + dump_documents(objects)
    for release in helm_releases(config).values():
        files.update(_release_files(release, source))
    script = label_script(config, source)
    if script is not None:
        files[LABEL_SCRIPT] = script
    return dict(sorted(files.items()))
