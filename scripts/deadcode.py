"""Dead code in production code: functions, classes, methods, properties and imports that nothing
uses, and unreachable code, as vulture (pinned in requirements.txt) finds them. Unused variables
and attributes are left out: at vulture's confidence they are mostly enum members, dataclass and
NamedTuple fields and attributes a framework reads (http.server's `protocol_version`), noise that
would teach people to ignore the check. Every use counts: the
tests, the benchmarks and the GPU checks are scanned too, so a test fake's helper that a test
calls is alive; a production function that only a test calls shows up in review, not here.

    python scripts/deadcode.py [ROOT]     # exit 0: none; exit 1: one `path:line: message` each

Names that a framework calls by name (gRPC servicer methods, pydantic validators, http.server
hooks, the Pulumi provider's hooks, PEP 562 module `__getattr__`) are in ALLOWED, each with why.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from vulture import Vulture

PRODUCTION: Final = ("tessera", "node-agent/tessera_node", "components/tessera_pulumi", "components/__main__.py", "__main__.py")
USERS: Final = ("tests", "bench", "node-agent/gpu-checks", "policies")
EXCLUDE: Final = ["*/package/args/*", "*_pb2.py", "*_pb2_grpc.py", "*/.venv/*"]  # generated code
MIN_CONFIDENCE: Final = 60
KINDS: Final = frozenset({"function", "class", "method", "property", "import", "unreachable_code"})

# (path, name): why nothing in the tree calls it by name
ALLOWED: Final = {
    ("components/tessera_pulumi/package/provider.py", "map_inputs"): "pulumi.provider.Provider hook",
    ("node-agent/tessera_node/testing/kubelet_podresources.py", "List"): "gRPC PodResourcesLister method",
    ("node-agent/tessera_node/testing/kubelet_podresources.py", "GetAllocatableResources"): "gRPC PodResourcesLister method",
    ("tessera/kube/loopback.py", "log_message"): "http.server.BaseHTTPRequestHandler hook",
    ("tessera/kube/loopback.py", "handle_error"): "socketserver.BaseServer hook",
    ("tessera/model/__init__.py", "__getattr__"): "PEP 562 module attribute hook",
    ("tessera/model/monitoring.py", "_moved_keys"): "pydantic model_validator",
    ("tessera/model/stack.py", "_check_semantics"): "pydantic model_validator",
}


def dead_code(root: Path) -> list[str]:
    scanner = Vulture()
    paths = [str(root / p) for p in (*PRODUCTION, *USERS) if (root / p).exists()]
    scanner.scavenge(paths, exclude=EXCLUDE)
    production = tuple(str(root / p) for p in PRODUCTION)
    found = []
    allowed_seen = set()
    for item in scanner.get_unused_code(min_confidence=MIN_CONFIDENCE, sort_by_size=False):
        path = Path(item.filename)
        if item.typ not in KINDS or not str(path).startswith(production):
            continue
        relative = path.relative_to(root).as_posix()
        if (relative, item.name) in ALLOWED:
            allowed_seen.add((relative, item.name))
            continue
        found.append(f"{relative}:{item.first_lineno}: {item.message}")
    for relative, name in sorted(set(ALLOWED) - allowed_seen):
        if (root / relative).exists():  # an allowance nothing needs any more hides the next one
            found.append(f"scripts/deadcode.py: ALLOWED names {relative}: {name!r}, which is used or gone now; drop it")
    return sorted(found)


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parents[1]
    found = dead_code(root)
    for line in found:
        print(line)
    print(f"dead code: {len(found)} unused name{'s' if len(found) != 1 else ''} in production code" if found else "dead code: none")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
