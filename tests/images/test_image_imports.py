"""The modules behind the image's four commands import nothing the image does not install.

The image installs `images/requirements-runtime.txt` and then tessera with `--no-deps`, so a
third-party import added to a server module (say numpy in the allocator) would pass every other
test here and crash the extender's pod at start. Each case imports a command's modules in a fresh
interpreter where any top-level module outside the standard library, our packages and the runtime
set's distributions raises ImportError.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# what `tessera scheduler serve`, `tessera webhook serve`, `tessera node device-plugin` and
# `tessera node agent` import before serving (their handlers import these lazily)
COMMAND_MODULES = {
    "scheduler serve": ["tessera.cli.main", "tessera.cli.scheduler", "tessera.scheduler.service", "tessera.scheduler.http_server", "tessera.scheduler.simulate", "tessera.kube.client"],
    "webhook serve": ["tessera.cli.main", "tessera.webhook.server", "tessera.webhook.kube_tls"],
    "node device-plugin": ["tessera_node.cli", "tessera_node.deviceplugin.cli"],
    "node agent": ["tessera_node.cli", "tessera_node.agent.cli"],
}

_GUARD = """
import importlib, importlib.abc, json, sys
allowed = set(json.loads(sys.argv[1]))
class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
            return None
        raise ImportError(f"{name} is not in images/requirements-runtime.txt")
sys.meta_path.insert(0, Guard())
for module in json.loads(sys.argv[2]):
    importlib.import_module(module)
"""


def _runtime_modules() -> set[str]:
    names = set()
    for line in (ROOT / "images" / "requirements-runtime.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.sub(r"[-_.]+", "-", line.split("==")[0]).lower())
    provided = {top for top, dists in packages_distributions().items() if any(re.sub(r"[-_.]+", "-", d).lower() in names for d in dists)}
    return provided | {"tessera", "tessera_node"}


@pytest.mark.parametrize("command", list(COMMAND_MODULES))
def test_a_command_of_the_image_imports_only_the_runtime_set(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _GUARD, json.dumps(sorted(_runtime_modules())), json.dumps(COMMAND_MODULES[command])],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_guard_stops_a_module_outside_the_runtime_set() -> None:
    """matplotlib is installed here (plots) but not in the image: importing it must fail."""
    done = subprocess.run(
        [sys.executable, "-c", _GUARD, json.dumps(sorted(_runtime_modules())), json.dumps(["matplotlib"])],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode != 0 and "requirements-runtime.txt" in done.stderr
