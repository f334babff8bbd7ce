"""The DRA plugin's checkpoint: every prepared claim, so a restarted plugin keeps them.

kubelet does not ask again after a plugin restart: a claim it prepared stays prepared until it
calls NodeUnprepareResources (and it may call NodePrepareResources again for a claim it does not
know the outcome of; both must work from the plugin's own memory). So the plugin writes the
prepared set after each change, before it answers kubelet, to `dra-checkpoint.json` in the agent's
state dir, atomically (temp file, rename: `tessera_node.registry.atomic_write_text`): a plugin
killed at any instant leaves the previous or the new checkpoint, never a mix. A checksum (SHA-256
of the canonical claims JSON, as kubelet's own checkpoints carry one) tells a damaged file from a
good one: a damaged checkpoint is an error that names the file, never silently an empty set.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Final

from tessera_node.dra.core import PreparedClaim
from tessera_node.registry import atomic_write_text

CHECKPOINT_FILE: Final = "dra-checkpoint.json"
_FORMAT_VERSION: Final = 1


class CheckpointCorrupt(Exception):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"the DRA checkpoint {path} cannot be read ({reason}); move it away and restart the plugin: "
            "kubelet then prepares its claims again (their CDI specs stay until then)"
        )


def _checksum(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


class Checkpoint:
    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / CHECKPOINT_FILE

    def load(self) -> list[PreparedClaim]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise CheckpointCorrupt(self.path, str(exc)) from exc
        if not isinstance(data, dict) or data.get("v") != _FORMAT_VERSION or not isinstance(data.get("claims"), list):
            raise CheckpointCorrupt(self.path, f"not a version {_FORMAT_VERSION} checkpoint")
        canonical = json.dumps(data["claims"], sort_keys=True, separators=(",", ":"))
        if data.get("checksum") != _checksum(canonical):
            raise CheckpointCorrupt(self.path, "checksum mismatch")
        try:
            return [PreparedClaim.from_json(c) for c in data["claims"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorrupt(self.path, f"bad claim entry: {exc}") from exc

    def save(self, claims: list[PreparedClaim]) -> None:
        entries = [c.to_json() for c in sorted(claims, key=lambda c: c.claim.uid)]
        canonical = json.dumps(entries, sort_keys=True, separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"v": _FORMAT_VERSION, "checksum": _checksum(canonical), "claims": entries}, sort_keys=True))
