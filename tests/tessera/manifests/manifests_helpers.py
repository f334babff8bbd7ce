"""Helpers for the manifest tests: every stack file in stacks/ and its built objects."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tessera.model import StackConfig, load_stack_file
from tessera.manifests.objects import KubeObject
from tessera.manifests.settings import platform_settings
from tessera.manifests.stack import build_stack

ROOT = Path(__file__).resolve().parents[3]
STACK_FILES = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
STACK_NAMES = [p.name.split(".")[1] for p in STACK_FILES]


@dataclass(frozen=True)
class BuiltStack:
    name: str
    path: Path
    config: StackConfig
    components: dict[str, list[KubeObject]]

    @property
    def kubernetes_version(self) -> str:
        return platform_settings(self.config).kubernetes_version

    def objects(self) -> Iterator[tuple[str, KubeObject]]:
        for component, objs in self.components.items():
            for o in objs:
                yield component, o

    def find(self, kind: str, name: str) -> KubeObject:
        found = [o for _, o in self.objects() if o["kind"] == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind}/{name} in {self.name}, got {len(found)}"
        return found[0]


def build(name: str) -> BuiltStack:
    path = ROOT / "stacks" / f"Pulumi.{name}.yaml"
    config = load_stack_file(path)
    return BuiltStack(name, path, config, build_stack(config))
