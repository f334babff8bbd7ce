"""The runtime image's recipe: pinned runtime dependencies from the lock, non-root, no compilers."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "images" / "Dockerfile"


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_runtime_pins_are_exactly_the_lock_versions() -> None:
    runtime, lock = _pins(ROOT / "images" / "requirements-runtime.txt"), _pins(ROOT / "requirements.txt")
    assert runtime, "no runtime requirements"
    assert {name: lock.get(name) for name in runtime} == runtime


def test_runtime_image_leaves_out_the_deployment_tooling() -> None:
    runtime = _pins(ROOT / "images" / "requirements-runtime.txt")
    assert not {"pulumi", "pulumi-kubernetes", "tencentcloud-iac-pulumi", "matplotlib", "pytest", "mypy", "grpcio-tools"} & set(runtime)


def _stages(text: str) -> list[str]:
    return re.split(r"^FROM ", text, flags=re.M)[1:]


def test_final_stage_is_non_root_without_compilers() -> None:
    final = _stages(DOCKERFILE.read_text())[-1]
    users = re.findall(r"^USER (\S+)", final, flags=re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert not re.search(r"apt-get install|gcc|build-essential|pip install", final)
    assert "COPY --from=build /opt/tessera /opt/tessera" in final


def test_wheels_only_so_no_compiler_is_ever_needed() -> None:
    build = _stages(DOCKERFILE.read_text())[0]
    assert "--only-binary=:all: -r /tmp/requirements-runtime.txt" in build
    assert "pip install --no-deps /src" in build
