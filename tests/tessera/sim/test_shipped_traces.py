"""The openb trace shipped in bench/traces/openb: intact, documented, and what README, docs, bench
and tests point at, so a fresh clone needs nothing from outside the repository."""
from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.sim.trace import load_nodes, load_pods

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT / "bench" / "traces" / "openb"
SHIPPED = ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv")


def _sums() -> dict[str, str]:
    sums = {}
    for line in (TRACES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    return sums


def test_every_shipped_file_matches_its_checksum() -> None:
    sums = _sums()
    assert set(sums) == set(SHIPPED)
    for name, digest in sums.items():
        assert hashlib.sha256((TRACES / name).read_bytes()).hexdigest() == digest, f"{name} differs from the published trace"


def test_the_readme_states_source_license_and_checksums() -> None:
    text = (TRACES / "README.md").read_text()
    assert "https://github.com/alibaba/clusterdata" in text and "cluster-trace-gpu-v2023/csv" in text
    assert "License" in text and "research or study purpose" in text
    assert "SHA256SUMS" in text


def test_the_shipped_trace_loads_whole() -> None:
    nodes = load_nodes(TRACES / SHIPPED[0])
    pods = load_pods(TRACES / SHIPPED[1])
    assert (len(nodes), sum(len(n.gpus) for n in nodes), len(pods)) == (1213, 6212, 8152)


OUTSIDE = re.compile(r"(\.\./shared/traces|/work/shared|/work/main)")
SCANNED = ("README.md", "docs", "bench", "tests", "Makefile", "scripts", "tessera", "examples")


def test_nothing_reaches_outside_the_repository() -> None:
    found = []
    for top in SCANNED:
        paths = [ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*"))
        for path in paths:
            if path.suffix not in (".md", ".py", ".sh", ".yaml", ".yml", "") or not path.is_file() or path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _readme_trace_paths() -> list[str]:
    return sorted(set(re.findall(r"bench/traces/openb/[\w.]+\.csv", (ROOT / "README.md").read_text())))


def test_readme_names_the_shipped_files() -> None:
    paths = _readme_trace_paths()
    assert paths and all((ROOT / p).is_file() for p in paths), paths


def test_the_readme_replay_command_runs_from_the_repository(tmp_path: Path) -> None:
    """The README's capacity-planning line, on a slice of the shipped trace (the whole one takes a while)."""
    command = next(line for line in (ROOT / "README.md").read_text().splitlines() if "tessera sim replay" in line)
    assert "--nodes bench/traces/openb/openb_node_list_gpu_node.csv" in command
    pods = tmp_path / "pods.csv"
    pods.write_text("".join((TRACES / SHIPPED[1]).read_text().splitlines(keepends=True)[:200]))
    run = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "sim", "replay", "--nodes", f"bench/traces/openb/{SHIPPED[0]}", "--pods", str(pods)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    # the default --inflate 1 tops a small trace up to 100 % of capacity with sampled pods
    assert re.search(r"arrived \d+ pods \(199 from the trace \+ \d+ sampled from it to reach 1x capacity\)", run.stdout), run.stdout


@pytest.mark.parametrize("bench", ["packing.py", "packing_ablation.py", "extender.py"])
def test_benchmarks_default_to_the_shipped_trace(bench: str) -> None:
    assert "traces\" / \"openb\"" in (ROOT / "bench" / bench).read_text()
