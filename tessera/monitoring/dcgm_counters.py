"""The fields dcgm-exporter exports, at the version the pinned gpu-operator chart deploys.

Source: NVIDIA/dcgm-exporter, tag `3.3.9-3.6.1` (the image `nvcr.io/nvidia/k8s/dcgm-exporter:
3.3.9-3.6.1-ubuntu22.04` that NVIDIA/gpu-operator `v24.9.2` names in
`deployments/gpu-operator/values.yaml`, `dcgmExporter.version`), files `etc/default-counters.csv`
(the exporter's built-in default) and `etc/dcp-metrics-included.csv` (the file gpu-operator
v24.9.2 selects with `DCGM_EXPORTER_COLLECTORS`). A query may use only a field both files
export, so it works whichever file a cluster runs. Re-check this list when
`gpuOperator.chartVersion`'s default moves (tests/tessera/monitoring pins the pairing).

Each field is exported as a series of that name with the labels `gpu`, `UUID`, `device`,
`modelName`, `Hostname` (and `pci_bus_id`), plus `namespace`, `pod` and `container` of the pod
holding the GPU (gpu-operator sets `DCGM_EXPORTER_KUBERNETES=true`). The metric type and meaning
below are as the files state them.
"""
from __future__ import annotations

from typing import Final

SOURCE_REPOSITORY: Final = "NVIDIA/dcgm-exporter"
SOURCE_TAG: Final = "3.3.9-3.6.1"
GPU_OPERATOR_CHART_VERSION: Final = "v24.9.2"
SOURCE_FILES: Final = ("etc/default-counters.csv", "etc/dcp-metrics-included.csv")

# (field, type, meaning, in default-counters.csv, in dcp-metrics-included.csv)
FIELDS: Final[tuple[tuple[str, str, str, bool, bool], ...]] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (MHz)", True, True),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (MHz)", True, True),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (C)", True, True),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C)", True, True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W)", True, True),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy consumed since boot (mJ)", True, True),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe retries", True, True),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (%)", True, True),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (%)", True, True),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (%)", True, True),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (%)", True, True),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last Xid error encountered", True, True),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB)", True, True),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB)", True, True),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink bandwidth counters, all lanes", True, True),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license status", True, True),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors", True, True),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors", True, True),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", True, True),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "counter (default) / gauge (dcp)", "PCIe bytes transmitted", True, True),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "counter (default) / gauge (dcp)", "PCIe bytes received", True, True),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active", False, True),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active", False, True),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active", False, True),
)
# DCGM_FI_DRIVER_VERSION is a label in both files, not a series.

LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "namespace", "pod", "container")


def exported_everywhere() -> frozenset[str]:
    """Series names a query may rely on: exported by both collector files."""
    return frozenset(name for name, _, _, default, dcp in FIELDS if default and dcp)
