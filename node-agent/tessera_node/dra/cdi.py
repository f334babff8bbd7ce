"""CDI specs for prepared claims: one spec file per claim, one CDI device per claim.

The Container Device Interface (cncf-tags/container-device-interface, SPEC.md): a JSON file in a
spec directory the runtime watches (`/etc/cdi` static, `/var/run/cdi` dynamic: a DRA driver's),
`{"cdiVersion", "kind": "<vendor>/<class>", "devices": [{"name", "containerEdits": {"env":
["K=V"], "mounts": [{"hostPath", "containerPath", "options"}]}}]}`; a container gets a device by
its fully qualified name `<vendor>/<class>=<name>`, which is what NodePrepareResources returns in
`Device.cdi_device_ids` and kubelet passes to the runtime. The file is named as the CDI library
names transient specs (pkg/cdi/spec.go `GenerateTransientSpecName`: `<vendor>-<class>_<id>`),
here with the claim UID as the id, and written atomically (temp file, rename): a runtime never
reads half a spec.

The edits are the device plugin route's, so the agent and the workload see the same thing:
the allocation env of `tessera.model.allocation_record.container_env` (NVIDIA_VISIBLE_DEVICES,
TESSERA_GPU_CORE, TESSERA_GPU_MEMORY_MIB and, on fixed-share pools only, the CUDA_MPS_* keys with
the MPS pipe directory), TESSERA_SHARING_POLICY as Allocate sets it, and on fixed-share pools the
MPS pipe directory mounted at its own path (and the shm directory when one is configured), as the
device plugin's Allocate mounts them.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tessera.model.allocation_record import container_env
from tessera.model.contract import GpuShare, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera_node.registry import atomic_write_text

CDI_VENDOR: Final = "tessera.dev"
CDI_CLASS: Final = "gpu"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_VERSION: Final = "0.6.0"  # env + mounts in containerEdits need >= 0.3.0; 0.6.0 is what containerd 1.7 / CRI-O 1.28 read
DEFAULT_CDI_DIR: Final = Path("/var/run/cdi")
_SPEC_PREFIX: Final = f"{CDI_VENDOR}-{CDI_CLASS}_"
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")  # SPEC.md: a device name


@dataclass(frozen=True)
class CdiSettings:
    """cdi_dir: where specs go (default /var/run/cdi, the runtime's dynamic spec directory).
    mps_pipe_host_dir: host directory of the MPS pipes, mounted at the same path on fixed-share
        pools (default /run/tessera/mps, as the device plugin's Allocate).
    mps_shm_host_dir: host tmpfs mounted on /dev/shm of fixed-share containers; None: none."""

    cdi_dir: Path = DEFAULT_CDI_DIR
    mps_pipe_host_dir: str = "/run/tessera/mps"
    mps_shm_host_dir: str | None = None


def cdi_device_id(claim_uid: str) -> str:
    return f"{CDI_KIND}={claim_uid}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{_SPEC_PREFIX}{claim_uid}.json"


def claim_edits(
    shares: Sequence[GpuShare], gpus: Sequence[NodeGpu], policy: PoolPolicy, settings: CdiSettings, *, claim: str
) -> dict[str, Any]:
    """The containerEdits of a claim's CDI device."""
    memory = {g.index: g.memory_mib for g in gpus}
    sms = {g.index: g.sm_count for g in gpus}
    env = container_env(tuple(shares), memory, mps=policy.uses_mps, sm_counts=sms)
    env["TESSERA_SHARING_POLICY"] = policy.sharing
    env["TESSERA_DRA_CLAIM"] = claim
    edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in env.items()]}
    if policy.uses_mps:
        mounts = [{"hostPath": settings.mps_pipe_host_dir, "containerPath": settings.mps_pipe_host_dir, "options": ["rbind", "rw"]}]
        if settings.mps_shm_host_dir:
            mounts.append({"hostPath": settings.mps_shm_host_dir, "containerPath": "/dev/shm", "options": ["rbind", "rw"]})
        edits["mounts"] = mounts
    return edits


def spec_for(claim_uid: str, edits: Mapping[str, Any]) -> dict[str, Any]:
    if not _NAME.match(claim_uid):
        raise ValueError(f"claim uid {claim_uid!r} cannot name a CDI device")
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": [{"name": claim_uid, "containerEdits": dict(edits)}]}


class CdiSpecs:
    """The spec files of prepared claims in one directory."""

    def __init__(self, cdi_dir: Path) -> None:
        self.dir = cdi_dir

    def write(self, claim_uid: str, edits: Mapping[str, Any]) -> str:
        """Write (or rewrite) the claim's spec; returns its CDI device id."""
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(spec_path(self.dir, claim_uid), json.dumps(spec_for(claim_uid, edits), indent=2, sort_keys=True))
        return cdi_device_id(claim_uid)

    def remove(self, claim_uid: str) -> None:
        spec_path(self.dir, claim_uid).unlink(missing_ok=True)

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(spec_path(self.dir, claim_uid).read_text())
        except FileNotFoundError:
            return None
        return data

    def claim_uids(self) -> set[str]:
        """The claims that have a spec here (ours only: by file name prefix)."""
        if not self.dir.is_dir():
            return set()
        return {p.name[len(_SPEC_PREFIX):-len(".json")] for p in self.dir.glob(f"{_SPEC_PREFIX}*.json")}
