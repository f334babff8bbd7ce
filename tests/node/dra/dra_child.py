"""Run as a separate process by test_dra_checkpoint.py: a DRA plugin preparing claims as fast as
kubelet asks, printing each claim once kubelet has its answer, until it is killed."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

from dra_harness import NODE, DraNode, Grant


def main(root: str, claims: int) -> None:
    node = DraNode(root=Path(root))
    node.start_plugin()
    node.start_kubelet()
    print("serving", flush=True)
    for i in range(claims):
        claim = node.claim(f"c{i}", [Grant(NODE, i % 2, 10, 256)], pod=f"p{i}")
        node.prepare(claim)
        print("prepared", claim[2], flush=True)
    print("done", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
