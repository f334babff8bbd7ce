"""Typed stack configuration: the single source of truth for what users set in a stack file.

Public API: ``StackConfig`` and its parts, ``NodePool`` (nvidia | shared | mig | timeslice),
``load_stack_file``, ``from_pulumi_mapping``, ``ConfigError`` / ``Problem``, and ``plan_stack``.
"""
from __future__ import annotations

from components.config.cluster import ClusterConfig, Endpoint, KubeconfigSource, Subnet, SystemNodes
from components.config.loader import from_pulumi_mapping, load_stack_file
from components.config.platform import (
    GpuOperatorConfig,
    ImageRef,
    ImagesConfig,
    MonitoringConfig,
    NamespaceQuota,
    SchedulerConfig,
    WebhookConfig,
)
from components.config.pools import (
    GpuDriverConfig,
    MigConfig,
    MigPool,
    NodePool,
    NvidiaPool,
    PoolBase,
    RepartitionEntry,
    SharedPool,
    SharingConfig,
    SystemDisk,
    Taint,
    TimeSlicingConfig,
    TimeslicePool,
)
from components.config.problems import ConfigError, Problem
from components.config.stack import StackConfig

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "Endpoint",
    "GpuDriverConfig",
    "GpuOperatorConfig",
    "ImageRef",
    "ImagesConfig",
    "KubeconfigSource",
    "MigConfig",
    "MigPool",
    "MonitoringConfig",
    "NamespaceQuota",
    "NodePool",
    "NvidiaPool",
    "PoolBase",
    "Problem",
    "RepartitionEntry",
    "SchedulerConfig",
    "SharedPool",
    "SharingConfig",
    "StackConfig",
    "Subnet",
    "SystemDisk",
    "SystemNodes",
    "Taint",
    "TimeSlicingConfig",
    "TimeslicePool",
    "WebhookConfig",
    "from_pulumi_mapping",
    "load_stack_file",
]
