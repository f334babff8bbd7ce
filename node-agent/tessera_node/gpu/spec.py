"""Parse simulated node specs such as ``H100-80GB:8`` or ``T4:1,A10:2``.

Grammar: ``ITEM[,ITEM...]`` where ``ITEM = MODEL[:COUNT]`` and ``MODEL`` is a known model name
(``H200-141GB``, ``T4``, ...) or any ``NAME-<N>GB`` (taken as N GiB). COUNT defaults to 1. GPUs
are numbered in the order written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# Memory as NVML reports it (MiB), so simulated nodes advertise what real ones would. Unknown
# "<name>-<N>GB" models fall back to N * 1024.
KNOWN_MODELS_MIB: Final[dict[str, int]] = {
    "H200-141GB": 143771,
    "H100-80GB": 81559,
    "H100-94GB": 95830,
    "H20-96GB": 97871,
    "A100-80GB": 81920,
    "A100-40GB": 40960,
    "A800-80GB": 81920,
    "L40S": 46068,
    "L40": 46068,
    "L4": 23034,
    "A10": 23028,
    "A30": 24576,
    "T4": 15360,
    "V100-32GB": 32768,
    "V100-16GB": 16384,
}
# Streaming multiprocessors per model (NVIDIA's datasheets; the H100 figure also measured here:
# torch reports 132), as the NVML backend derives them, so simulated nodes report what real ones would.
KNOWN_MODELS_SMS: Final[dict[str, int]] = {
    "H200-141GB": 132,
    "H100-80GB": 132,
    "H100-94GB": 132,
    "H20-96GB": 78,
    "A100-80GB": 108,
    "A100-40GB": 108,
    "A800-80GB": 108,
    "L40S": 142,
    "L40": 142,
    "L4": 58,
    "A10": 72,
    "A30": 56,
    "T4": 40,
    "V100-32GB": 80,
    "V100-16GB": 80,
}
MAX_GPUS_PER_NODE: Final = 64  # sanity bound: a typo such as "H100:800" is a mistake, not a node

_SIZE_SUFFIX = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.]*)-(?P<gib>\d{1,4})GB$", re.IGNORECASE)


class SpecError(ValueError):
    """A simulate spec could not be parsed; the message shows the expected form."""


@dataclass(frozen=True)
class GpuModelSpec:
    model: str
    memory_mib: int
    sm_count: int | None = None


def _model(token: str) -> GpuModelSpec:
    for name, mib in KNOWN_MODELS_MIB.items():
        if token.upper() == name.upper():
            return GpuModelSpec(name, mib, KNOWN_MODELS_SMS.get(name))
    match = _SIZE_SUFFIX.match(token)
    if match:
        return GpuModelSpec(token, int(match.group("gib")) * 1024)
    known = ", ".join(sorted(KNOWN_MODELS_MIB))
    raise SpecError(f"unknown GPU model {token!r}: use one of {known}, or NAME-<N>GB (for example X-24GB)")


def parse_spec(spec: str) -> list[GpuModelSpec]:
    """One entry per GPU, in index order."""
    if not spec.strip():
        raise SpecError("empty GPU spec: write MODEL[:COUNT][,MODEL[:COUNT]...], for example H100-80GB:8")
    gpus: list[GpuModelSpec] = []
    for item in spec.split(","):
        item = item.strip()
        name, sep, count_text = item.partition(":")
        if sep and not count_text.isdigit():
            raise SpecError(f"bad GPU count in {item!r}: write MODEL:COUNT, for example T4:2")
        count = int(count_text) if sep else 1
        if count < 1:
            raise SpecError(f"GPU count must be at least 1 in {item!r}")
        gpus.extend([_model(name.strip())] * count)
    if len(gpus) > MAX_GPUS_PER_NODE:
        raise SpecError(f"{len(gpus)} GPUs on one node is more than {MAX_GPUS_PER_NODE}; check the spec {spec!r}")
    return gpus
