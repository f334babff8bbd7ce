"""Where the node processes write when they run as a demo (simulated GPUs, no cluster).

On a node the paths are kubelet's and the agent's directories under /var/lib, mounted by the
DaemonSet. A demo (`device-plugin --fake-kube`, `agent --simulate`) runs as a normal user, so a
path left at its default moves under the temp directory, one directory per node name, shared by
the two processes (the plugin writes the registry the agent reads). A path given on the command
line is always used as given.
"""
from __future__ import annotations

import tempfile
from pathlib import Path


class DefaultPath(type(Path())):  # type: ignore[misc]
    """A flag's default value: a path like any other, marked as "not chosen by the user"."""


def demo_root(node_name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"tessera-{node_name}"


def resolve(value: Path, demo: bool, demo_path: Path) -> Path:
    """`value` as the user gave it; a default one moves to `demo_path` in a demo."""
    return demo_path if demo and isinstance(value, DefaultPath) else Path(value)
