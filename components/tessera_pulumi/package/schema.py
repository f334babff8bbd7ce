"""The package schema, as `pulumi package get-schema` would print it, and its committed snapshot.

The schema comes from the provider's own GetSchema handler, called in-process (no Pulumi CLI):

    python -m tessera_pulumi.package.schema          # rewrite components/schema.json
    python -m tessera_pulumi.package.schema --check  # exit 1 with a diff when it is stale

`python -m tessera_pulumi.package.codegen` regenerates args.py first and then runs this.
"""
from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Final

from pulumi.provider.server import ProviderServicer
from pulumi.runtime.proto import provider_pb2

from tessera_pulumi.package.provider import TesseraProvider

SCHEMA_PATH: Final = Path(__file__).resolve().parents[2] / "schema.json"
REGENERATE: Final = "python -m tessera_pulumi.package.codegen  (or: make package-schema)"


def schema() -> dict[str, Any]:
    """The schema the provider serves (GetSchema, version 0)."""
    servicer = ProviderServicer(TesseraProvider(), [], "")
    response = asyncio.run(servicer.GetSchema(provider_pb2.GetSchemaRequest(version=0), None))
    document: dict[str, Any] = json.loads(response.schema)
    return document


def render() -> str:
    """The snapshot's text: the schema, two-space indented, in the order the analyzer emits it."""
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def diff(current: str, wanted: str) -> str:
    lines = difflib.unified_diff(current.splitlines(keepends=True), wanted.splitlines(keepends=True),
                                 "components/schema.json (committed)", "components/schema.json (from the components)")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tessera_pulumi.package.schema", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when components/schema.json is stale")
    options = parser.parse_args(argv)
    wanted = render()
    current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
    if options.check:
        problem = diff(current, wanted)
        if problem:
            sys.stdout.write(problem + f"\ncomponents/schema.json is stale; run {REGENERATE}\n")
            return 1
        print("components/schema.json: up to date")
        return 0
    if current != wanted:
        SCHEMA_PATH.write_text(wanted, encoding="utf-8")
        print("wrote components/schema.json")
    else:
        print("components/schema.json: already up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
