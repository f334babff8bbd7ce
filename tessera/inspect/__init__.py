"""`tessera inspect`: a read-only view of GPU sharing on a cluster (pure, no I/O but `source`).

- `source`: Node and Pod objects from a live cluster (`connect_and_load`, `load_api` over any
  `KubeApi`) or from `kubectl get nodes,pods -A -o json` dumps (`load_files`); `SourceError`
  carries a one-line message.
- `build`: the picture (`views.Inspection`) from those objects, decoded with the scheduler
  extender's own code; `select` narrows it to nodes or pools (`FilterError` for unknown names).
- `render`: `render_table` for people, `render_json` / `to_document` for scripts (schema v1).

May import `tessera.model`, `tessera.alloc`, `tessera.kube` and the extender's decoding (`tessera.scheduler`).
"""
from tessera.inspect.build import build, select
from tessera.inspect.render import SCHEMA_VERSION, render_json, render_table, to_document
from tessera.inspect.source import ClusterObjects, SourceError, connect_and_load, load_api, load_files
from tessera.inspect.views import FilterError, Inspection, Reason


def inspect_objects(objects: ClusterObjects) -> Inspection:
    """The whole cluster's picture from loaded objects."""
    return build(objects.nodes, objects.pods, source=objects.source)


__all__ = [
    "SCHEMA_VERSION",
    "ClusterObjects",
    "FilterError",
    "Inspection",
    "Reason",
    "SourceError",
    "build",
    "connect_and_load",
    "inspect_objects",
    "load_api",
    "load_files",
    "render_json",
    "render_table",
    "select",
    "to_document",
]
