"""Stepping aside for gpu-operator's MIG manager.

While a node carries `nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change`, the MIG manager
is changing MIG modes and needs every process that holds the GPUs open gone. The plugin then stops
serving (its socket disappears, so kubelet drops the resource), releases its NVML handles and
waits; when the label is removed or changed it re-reads the GPUs (the layout may have changed)
and registers again. The supervisor in `plugin.py` does the transitions; this module decides.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from tessera.model.contract import LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, PAUSED_FOR_MIG_CHANGE


class PauseTransition(enum.Enum):
    NONE = "none"
    PAUSE = "pause"
    RESUME = "resume"


def paused_by_labels(labels: Mapping[str, str]) -> bool:
    return labels.get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) == PAUSED_FOR_MIG_CHANGE


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def transition(currently_paused: bool, labels: Mapping[str, str]) -> PauseTransition:
    wanted = paused_by_labels(labels)
    if wanted and not currently_paused:
        return PauseTransition.PAUSE
    if currently_paused and not wanted:
        return PauseTransition.RESUME
    return PauseTransition.NONE
