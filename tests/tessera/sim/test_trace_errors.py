"""Bad trace files through `tessera sim replay` as a user runs it: `file:line: message`, exit 2, no traceback.

Each row of the tables is one mistake a hand-edited or generated CSV can hold; the expected text is
what the user reads. Limits on GPUs per node and memory per GPU come from the catalog, so the test
reads them from there too.
"""
from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from tessera.model.catalog import GPU_MODELS, INSTANCE_TYPES
from tessera.cli.main import main
from tessera.sim.trace import TraceError, load_nodes, load_pods

NODE_HEAD = "sn,cpu_milli,memory_mib,gpu,model,gpu_mem_mib\n"
GOOD_NODE = "n1,64000,262144,2,T4,16384\n"
POD_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,gpu_mem_mib\n"
GOOD_POD = "p1,1000,1024,1,500,,0,\n"
MOST_GPUS = max(t.gpu_count for t in INSTANCE_TYPES.values())
MOST_MEMORY = max(m.memory_mib for m in GPU_MODELS.values())


def _replay(tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: str | bytes, pods: str | bytes) -> tuple[int, str, str]:
    for name, content in (("nodes.csv", nodes), ("pods.csv", pods)):
        path = tmp_path / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    code = main(["sim", "replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


BAD_NODES: list[tuple[str, str | bytes, str]] = [
    ("not UTF-8", NODE_HEAD.encode() + b"n1,64000,262144,2,T\xff4,\n", "nodes.csv:2: not UTF-8 text (byte 0xff"),
    ("NUL byte", NODE_HEAD + "n1,64000,262144,2,T4\x00,\n", "nodes.csv:2: a NUL byte at byte 21 of the line; is this a CSV text file?"),
    ("inf GPUs", NODE_HEAD + "n1,64000,262144,inf,T4,\n", "nodes.csv:2: gpu='inf' is not a finite number"),
    ("nan CPU", NODE_HEAD + "n1,nan,262144,2,T4,\n", "nodes.csv:2: cpu_milli='nan' is not a finite number"),
    ("negative memory", NODE_HEAD + "n1,64000,-5,2,T4,\n", "nodes.csv:2: memory_mib='-5' is negative"),
    ("fractional GPUs", NODE_HEAD + "n1,64000,262144,1.5,T4,\n", "nodes.csv:2: gpu='1.5' is fractional"),
    ("more GPUs than any catalog node", NODE_HEAD + f"n1,64000,262144,{MOST_GPUS + 1},T4,\n",
     f"nodes.csv:2: gpu='{MOST_GPUS + 1}' is more than {MOST_GPUS} (no GPU node in the catalog has more"),
    ("a million GPUs", NODE_HEAD + "n1,64000,262144,1e6,T4,\n", f"nodes.csv:2: gpu='1e6' is more than {MOST_GPUS}"),
    ("more GPU memory than any catalog GPU", NODE_HEAD + f"n1,64000,262144,2,T4,{MOST_MEMORY + 1}\n",
     f"nodes.csv:2: gpu_mem_mib='{MOST_MEMORY + 1}' is more than {MOST_MEMORY} (no GPU in the catalog has more memory"),
    ("zero GPU memory", NODE_HEAD + "n1,64000,262144,2,T4,0\n", "nodes.csv:2: gpu_mem_mib='0': a GPU has memory"),
    ("a word for a number", NODE_HEAD + "n1,lots,262144,2,T4,\n", "nodes.csv:2: cpu_milli='lots' is not a number"),
    ("an empty cell", NODE_HEAD + "n1,,262144,2,T4,\n", "nodes.csv:2: column cpu_milli is empty"),
    ("no model on a GPU node", NODE_HEAD + "n1,64000,262144,2,,\n", "nodes.csv:2: column model is empty on a node with 2 GPU(s)"),
    ("duplicate node", NODE_HEAD + GOOD_NODE + GOOD_NODE, "nodes.csv:3: node 'n1' is already on line 2"),
    ("a short row", NODE_HEAD + "n1,64000,262144,2\n", "nodes.csv:2: 4 fields, but the header has 6"),
    ("a missing column", "sn,cpu_milli,memory_mib,gpu\nn1,64000,262144,2\n", "nodes.csv:1: missing column(s) model"),
    ("a column twice", "sn,cpu_milli,memory_mib,gpu,model,gpu\n", "nodes.csv:1: column gpu appears twice in the header"),
    ("an empty file", "", "nodes.csv: empty file; expected a header line naming at least sn,cpu_milli,memory_mib,gpu,model"),
    ("only a header", NODE_HEAD, "nodes.csv: no node with GPUs"),
    ("only CPU nodes", NODE_HEAD + "c1,64000,262144,0,,\n", "nodes.csv: no node with GPUs"),
]

BAD_PODS: list[tuple[str, str | bytes, str]] = [
    ("not UTF-8", POD_HEAD.encode() + b"p\xc3(,1000,1024,1,500,,0,\n", "pods.csv:2: not UTF-8 text (byte 0xc3"),
    ("fractional GPU count", POD_HEAD + "p1,1000,1024,1.5,1000,,0,\n", "pods.csv:2: num_gpu='1.5' is fractional"),
    ("more GPUs than any catalog node", POD_HEAD + f"p1,1000,1024,{MOST_GPUS * 2},1000,,0,\n", f"is more than {MOST_GPUS}"),
    ("more than a whole GPU", POD_HEAD + "p1,1000,1024,1,1500,,0,\n", "pods.csv:2: gpu_milli='1500' is more than 1000 (1000 is one whole GPU)"),
    ("a share spread over GPUs", POD_HEAD + "p1,1000,1024,2,500,,0,\n", "pods.csv:2: num_gpu=2, gpu_milli=500: more than one GPU must be whole GPUs"),
    ("a GPU share without a GPU", POD_HEAD + "p1,1000,1024,0,500,,0,\n", "pods.csv:2: num_gpu=0, gpu_milli=500: GPU memory or compute without a GPU"),
    ("negative share", POD_HEAD + "p1,1000,1024,1,-1,,0,\n", "pods.csv:2: gpu_milli='-1' is negative"),
    ("inf CPU", POD_HEAD + "p1,inf,1024,1,500,,0,\n", "pods.csv:2: cpu_milli='inf' is not a finite number"),
    ("nan memory", POD_HEAD + "p1,1000,NaN,1,500,,0,\n", "pods.csv:2: memory_mib='NaN' is not a finite number"),
    ("too much GPU memory", POD_HEAD + f"p1,1000,1024,1,500,,0,{MOST_MEMORY * 2}\n", f"is more than {MOST_MEMORY}"),
    ("negative creation time", POD_HEAD + "p1,1000,1024,1,500,,-3,\n", "pods.csv:2: creation_time='-3' is negative"),
    ("empty model in gpu_spec", POD_HEAD + "p1,1000,1024,1,500,V100M16||T4,0,\n", "pods.csv:2: gpu_spec='V100M16||T4' has an empty model name"),
    ("no name", POD_HEAD + ",1000,1024,1,500,,0,\n", "pods.csv:2: column name is empty; every pod needs a name"),
    ("duplicate pod", POD_HEAD + GOOD_POD + "x,1,1,0,0,,0,\n" + GOOD_POD, "pods.csv:4: pod 'p1' is already on line 2"),
    ("a long row", POD_HEAD + "p1,1000,1024,1,500,,0,,extra\n", "pods.csv:2: 9 fields, but the header has 8"),
    ("a missing column", "name,cpu_milli,memory_mib,num_gpu\np1,1,1,0\n", "pods.csv:1: missing column(s) gpu_milli"),
    ("an empty file", b"", "pods.csv: empty file"),
    ("only a header", POD_HEAD, "pods.csv: no pods (the file has a header but no rows)"),
]


@pytest.mark.parametrize(("nodes", "message"), [(n, m) for _, n, m in BAD_NODES], ids=[c[0] for c in BAD_NODES])
def test_a_bad_node_file_is_file_line_message_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: str | bytes, message: str) -> None:
    code, out, err = _replay(tmp_path, capsys, nodes, POD_HEAD + GOOD_POD)
    assert code == 2 and out == ""
    assert err.startswith(f"{tmp_path}/{message}"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(("pods", "message"), [(p, m) for _, p, m in BAD_PODS], ids=[c[0] for c in BAD_PODS])
def test_a_bad_pod_file_is_file_line_message_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], pods: str | bytes, message: str) -> None:
    code, out, err = _replay(tmp_path, capsys, NODE_HEAD + GOOD_NODE, pods)
    assert code == 2 and out == ""
    assert message in err and err.startswith(f"{tmp_path}/pods.csv"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_every_bad_line_of_both_files_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = NODE_HEAD + "n1,64000,262144,2.5,T4,\n" + GOOD_NODE.replace("n1", "n2") + "n3,-1,262144,2,T4,\n"
    pods = POD_HEAD + "p1,1000,1024,1,1001,,0,\n"
    code, _, err = _replay(tmp_path, capsys, nodes, pods)
    assert code == 2
    assert [line.split(": ", 1)[0] for line in err.splitlines()] == [
        f"{tmp_path}/nodes.csv:2", f"{tmp_path}/nodes.csv:4", f"{tmp_path}/pods.csv:2",
    ]


def test_a_file_full_of_mistakes_stops_after_twenty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = POD_HEAD + "".join(f"p{i},x,1024,1,500,,0,\n" for i in range(500))
    code, _, err = _replay(tmp_path, capsys, NODE_HEAD + GOOD_NODE, pods)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 21 and lines[-1] == "(stopped after 20 problems)"
    assert lines[19].startswith(f"{tmp_path}/pods.csv:21: cpu_milli='x' is not a number")


def test_a_missing_file_and_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pods.csv").write_text(POD_HEAD + GOOD_POD)
    code = main(["sim", "replay", "--nodes", str(tmp_path / "nope.csv"), "--pods", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"{tmp_path}/nope.csv: cannot read it (No such file or directory); check the path",
        f"{tmp_path}: cannot read it (a directory); pass the CSV file",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--inflate", "1e9"], "must be > 0 and at most 10"),
        (["--inflate", "nan"], "must be > 0 and at most 10"),
        (["--inflate", "0"], "must be > 0 and at most 10"),
    ],
)
def test_flags_that_would_run_forever_are_refused(tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "n.csv").write_text(NODE_HEAD + GOOD_NODE)
    run = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "sim", "replay", "--nodes", str(tmp_path / "n.csv"), "--pods", str(tmp_path / "n.csv"), *argv],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("seeds", "message"),
    [("51-42", "seed range '51-42' is empty"), ("0-100000000", "has more than 1000 seeds"), (",", "no seeds given")],
)
def test_compare_refuses_empty_or_endless_seed_lists(tmp_path: Path, seeds: str, message: str) -> None:
    (tmp_path / "n.csv").write_text(NODE_HEAD + GOOD_NODE)
    run = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "sim", "compare", "--nodes", str(tmp_path / "n.csv"), "--pods", str(tmp_path / "n.csv"),
         "--seeds", seeds, "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_through_a_real_process_a_binary_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "pods.csv").write_text(POD_HEAD + GOOD_POD)
    run = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "sim", "replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == f"{tmp_path}/nodes.csv:1: not UTF-8 text (byte 0x89 at byte 1 of the line); save the file as UTF-8\n"


# --- memory -------------------------------------------------------------------------------------
def _peak(load: object, path: Path) -> int:
    tracemalloc.start()
    try:
        try:
            load(path)  # type: ignore[operator]
        except TraceError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _pods_file(path: Path, rows: int) -> Path:
    with path.open("w") as out:
        out.write(POD_HEAD)
        for i in range(rows):
            out.write(f"pod-{i:07d},{1000 + i % 7},{2048 + i % 5},1,{100 + i % 900},,{i},\n")
    return path


def test_memory_grows_linearly_with_the_pod_file(tmp_path: Path) -> None:
    small, large = _pods_file(tmp_path / "small.csv", 5_000), _pods_file(tmp_path / "large.csv", 20_000)
    small_peak, large_peak = _peak(load_pods, small), _peak(load_pods, large)
    # four times the rows: about four times the memory (a quadratic loader would take 16x)
    assert large_peak < 5 * small_peak, (small_peak, large_peak)
    # and a bounded multiple of the file itself: the parsed pods, never copies of the whole file
    assert large_peak < 40 * large.stat().st_size, (large_peak, large.stat().st_size)


def test_a_node_claiming_a_million_gpus_costs_no_memory(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODE_HEAD + "n1,64000,262144,1000000,T4,\n")
    assert _peak(load_nodes, nodes) < 1_000_000  # bytes; it used to build a million GPU objects (2.6 GB)


def test_a_file_of_one_huge_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODE_HEAD + "n1," + "9" * 5_000_000 + ",262144,2,T4,\n")
    peak = _peak(load_nodes, nodes)
    with pytest.raises(TraceError, match=r"nodes.csv:2: not a readable CSV line \(field larger than field limit"):
        load_nodes(nodes)
    assert peak < 4 * nodes.stat().st_size
