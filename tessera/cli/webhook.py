"""`tessera webhook` (owned by the team building it; replaced as the feature lands)."""
from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("webhook", help="(in progress)")
    parser.set_defaults(handler=lambda _args: 1)
