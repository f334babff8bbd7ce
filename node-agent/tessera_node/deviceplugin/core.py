"""Pure logic of the device plugin: the gpu-core token inventory, preferred allocation and the
Allocate answer. No I/O here; `server.py` decodes gRPC, calls these, and encodes.

Advertising scheme: `tessera.dev/gpu-core` is advertised as 100 tokens per healthy GPU, with IDs
that name the GPU (`gpu3-core042`), so a GPU's health maps onto exactly its 100 tokens.
`tessera.dev/gpu-memory` is NOT advertised through the plugin (one token per MiB would need 1.15 M
devices on 8 x H200, far over kubelet's 4 MiB gRPC message limit); it is a node extended resource
patched into node status (see `publish.py`).

Tokens are accounting, not placement: kubelet picks any free tokens, while the GPU a container
uses comes from its pod's allocation record (see `prestart.py` and docs/device-plugin.md).
"""
from __future__ import annotations

import enum
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Final, NewType

from tessera.model.contract import ALLOCATION_ENV_KEYS, CORE_PER_GPU, NodeGpu

TokenId = NewType("TokenId", str)

API_VERSION: Final = "v1beta1"
_TOKEN = re.compile(r"^gpu(?P<gpu>\d{1,3})-core(?P<n>\d{3})$")


class Health(str, enum.Enum):
    """Device health strings of the device plugin API."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class TokenError(ValueError):
    """kubelet sent a device ID this plugin never advertised."""


def token_id(gpu: int, n: int) -> TokenId:
    return TokenId(f"gpu{gpu}-core{n:03d}")


@lru_cache(maxsize=4096)  # IDs repeat: GetPreferredAllocation sends every free one, each time
def token_gpu(token: str) -> int:
    """The GPU index a token belongs to."""
    match = _TOKEN.match(token)
    if not match or int(match.group("n")) >= CORE_PER_GPU:
        raise TokenError(f"{token!r} is not a tessera.dev/gpu-core device ID (expected gpuN-coreNNN)")
    return int(match.group("gpu"))


@dataclass(frozen=True)
class Inventory:
    """The GPUs this plugin advertises, with their health. Immutable; updates return a new one."""

    gpus: tuple[NodeGpu, ...]

    @staticmethod
    def of(gpus: Iterable[NodeGpu]) -> Inventory:
        return Inventory(tuple(sorted(gpus, key=lambda g: g.index)))

    def devices(self) -> list[tuple[TokenId, Health]]:
        """Every token with its health, in a stable order (kubelet diffs successive lists)."""
        return [
            (token_id(g.index, n), Health.HEALTHY if g.healthy else Health.UNHEALTHY)
            for g in self.gpus
            for n in range(CORE_PER_GPU)
        ]

    def gpu(self, index: int) -> NodeGpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def by_uuid(self, uuid: str) -> NodeGpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def with_health(self, health: Mapping[int, bool]) -> Inventory:
        return Inventory(tuple(replace(g, healthy=health.get(g.index, g.healthy)) for g in self.gpus))

    def all_unhealthy(self) -> Inventory:
        return Inventory(tuple(replace(g, healthy=False) for g in self.gpus))

    @property
    def healthy_memory_mib(self) -> int:
        """What the node advertises as `tessera.dev/gpu-memory` capacity."""
        return sum(g.memory_mib for g in self.gpus if g.healthy)

    @cached_property
    def _advertised(self) -> frozenset[str]:
        # Every token ID, healthy or not (kubelet may still hold tokens of a GPU that failed).
        return frozenset(token for token, _ in self.devices())

    def advertises(self, tokens: Iterable[str]) -> bool:
        """Whether every token is one this inventory advertises: a set lookup per token, so
        Allocate does not parse IDs on the container start path."""
        return self._advertised.issuperset(tokens)

    def check_tokens(self, tokens: Iterable[str]) -> None:
        for token in tokens:
            if self.gpu(token_gpu(token)) is None:
                raise TokenError(f"{token!r} names GPU {token_gpu(token)}, which this node does not have")


def preferred_tokens(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """Which `size` tokens to suggest to kubelet: whole GPUs' worth from as few GPUs as possible.

    Kubelet's own choice is arbitrary across GPUs; suggesting tokens of one GPU per share keeps
    kubelet's bookkeeping (and therefore PodResources and the per-GPU token counts an operator
    sees) aligned with how shares really land, and lets a whole-GPU request (100 tokens) take one
    GPU's tokens. Within the remaining need, the GPU with the fewest free tokens that still fits
    wins (best fit), so fully free GPUs stay whole for whole-GPU requests.
    """
    chosen: list[str] = list(dict.fromkeys(must_include))[:size]
    taken = set(chosen)
    free: dict[int, list[str]] = defaultdict(list)
    for token in available:
        if token not in taken:
            free[token_gpu(token)].append(token)
    for tokens in free.values():
        tokens.sort()
    need = size - len(chosen)
    preferred_gpus = {token_gpu(t) for t in chosen}
    while need > 0 and free:
        fitting = [g for g, tokens in free.items() if len(tokens) >= need]
        if fitting:
            gpu = min(fitting, key=lambda g: (g not in preferred_gpus, len(free[g]), g))
        else:
            gpu = max(free, key=lambda g: (len(free[g]), -g))  # largest first: fewest GPUs in total
        take = free.pop(gpu)[:need]
        chosen.extend(take)
        need -= len(take)
    return chosen


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerAllocation:
    """What Allocate tells kubelet for one container."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()


@dataclass(frozen=True)
class AllocateSettings:
    """Node-wide part of the Allocate answer.

    mps_pipe_host_dir: host directory of the MPS control daemons' pipes (one sub-directory per
        GPU, created by the node agent); default /run/tessera/mps. Mounted at the same path in the
        container so the per-pod `CUDA_MPS_PIPE_DIRECTORY` from the allocation ConfigMap resolves.
    mps_shm_host_dir: host tmpfs shared by the MPS daemons and their clients, mounted on /dev/shm;
        default None: the node agent's daemons run with the host IPC namespace's /dev/shm, so
        nothing extra is needed. Set it (e.g. /run/tessera/mps/shm) when daemons use a private tmpfs.
    uses_mps: whether this node's pool runs MPS (fixed-share pools); default False
        (best-effort pools give containers the plain GPU, nothing to mount).
    sharing_policy: the pool's sharing policy, exported as TESSERA_SHARING_POLICY for tools in the
        container; default "best-effort".
    """

    mps_pipe_host_dir: str = "/run/tessera/mps"
    mps_shm_host_dir: str | None = None
    uses_mps: bool = False
    sharing_policy: str = "best-effort"


# Allocate must never set a key that the allocation ConfigMap sets: both reach the container and
# which one wins depends on runtime ordering. Guarded here so a future edit cannot add one.
_RESERVED_ENV: Final = frozenset(ALLOCATION_ENV_KEYS)


def allocate_container(inventory: Inventory, tokens: Sequence[str], settings: AllocateSettings) -> ContainerAllocation:
    """The Allocate answer for one container. Only node-wide facts: kubelet's request carries no
    pod identity, so anything pod-specific (GPU, limits) would be a guess."""
    if not tokens:
        raise TokenError("Allocate asked for zero tessera.dev/gpu-core devices")
    inventory.check_tokens(tokens)
    envs = {"TESSERA_SHARING_POLICY": settings.sharing_policy}
    mounts: list[MountSpec] = []
    if settings.uses_mps:
        mounts.append(MountSpec(settings.mps_pipe_host_dir, settings.mps_pipe_host_dir))
        if settings.mps_shm_host_dir:
            mounts.append(MountSpec("/dev/shm", settings.mps_shm_host_dir))
    clash = _RESERVED_ENV & envs.keys()
    if clash:
        raise AssertionError(f"Allocate must not set allocation ConfigMap keys {sorted(clash)}")
    return ContainerAllocation(envs, tuple(mounts))
