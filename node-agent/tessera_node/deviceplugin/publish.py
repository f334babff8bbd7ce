"""What the node tells the scheduler extender: the GPU inventory annotation and gpu-memory capacity.

`tessera.dev/gpus` (JSON list of `NodeGpu`) lets the extender place shares on healthy GPUs;
`status.capacity[tessera.dev/gpu-memory]` (MiB, healthy GPUs only) lets kube-scheduler's own
resource fit count memory at 1 MiB granularity without a device per MiB.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_MEMORY
from tessera.kube.api import KubeApi
from tessera_node.deviceplugin.core import Inventory


@dataclass(frozen=True)
class NodeReport:
    annotation: str
    memory_capacity: str

    @staticmethod
    def of(inventory: Inventory) -> NodeReport:
        annotation = json.dumps([g.to_json() for g in inventory.gpus], separators=(",", ":"), sort_keys=True)
        return NodeReport(annotation, str(inventory.healthy_memory_mib))


def publish(kube: KubeApi, node_name: str, report: NodeReport) -> None:
    kube.patch_node_annotations(node_name, {ANNOTATION_NODE_GPUS: report.annotation})
    kube.patch_node_status_capacity(node_name, {GPU_MEMORY: report.memory_capacity})
