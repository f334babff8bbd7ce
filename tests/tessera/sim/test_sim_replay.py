"""Trace loading and replay semantics (the paper's method), on small traces and a real slice."""
from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from tessera.alloc import PlacementPolicy
from tessera.sim.compare import compare, format_table
from tessera.sim.replay import Order, ReplaySettings, arrival_order, replay, thresholds
from tessera.sim.trace import TraceError, load_nodes, load_pods

ROOT = Path(__file__).resolve().parents[3]
OPENB = ROOT / "bench" / "traces" / "openb"  # shipped with the repository


def write_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,32000,131072,4,V100\ncpu,8000,1000,0,\n")
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    shapes = [(1, 470, ""), (1, 1000, ""), (2, 1000, ""), (1, 250, "T4"), (0, 0, ""), (1, 810, "")]
    for i, (n, m, spec) in enumerate(itertools.islice(itertools.cycle(shapes), 14)):
        rows.append(f"p{i:03d},2000,4096,{n},{m},{spec}")
    pods.write_text("\n".join(rows) + "\n")
    return nodes, pods


def test_trace_loader_keeps_milli_precision_and_skips_cpu_nodes(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    assert [n.name for n in nodes] == ["n1", "n2"] and len(nodes[1].gpus) == 4
    assert pods[0].request.gpu_milli_total == 470 and pods[3].request.gpu_models == frozenset({"T4"})


def test_missing_column_is_reported_with_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("sn,cpu_milli\nn1,1000\n")
    with pytest.raises(TraceError, match="missing column"):
        load_nodes(bad)


@pytest.mark.parametrize("policy", [PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.FGD, PlacementPolicy.SPREAD])
def test_replay_points_follow_the_paper_definitions(tmp_path: Path, policy: PlacementPolicy) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    result = replay(load_nodes(nodes_csv), load_pods(pods_csv), ReplaySettings(policy, Order.SHUFFLE, 1.3, 7))
    assert result.capacity_gpus == 6
    xs = [p.arrived_pct for p in result.points]
    assert xs[:-1] == thresholds() and xs[-1] >= 130.0
    assert 98.0 in xs
    for p in result.points:
        assert p.allocated_pct <= min(p.arrived_pct, 100.0) + 1e-9
    assert [p.allocated_pct for p in result.points] == sorted(p.allocated_pct for p in result.points)
    assert result.failed_pods == result.final.failed_pods > 0


def test_shuffle_and_inflation_are_seeded(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    pods = load_pods(pods_csv)
    a = arrival_order(pods, ReplaySettings(order=Order.SHUFFLE, inflate=1.3, seed=1), 12000)
    b = arrival_order(pods, ReplaySettings(order=Order.SHUFFLE, inflate=1.3, seed=1), 12000)
    c = arrival_order(pods, ReplaySettings(order=Order.SHUFFLE, inflate=1.3, seed=2), 12000)
    assert [p.uid for p in a] == [p.uid for p in b] != [p.uid for p in c]
    assert sum(p.gpu_milli_total for p in a) >= 1.3 * 12000 > sum(p.gpu_milli_total for p in a[:-1])


def test_compare_averages_seeds_into_a_table(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    curves = compare(load_nodes(nodes_csv), load_pods(pods_csv), [PlacementPolicy.BINPACK, PlacementPolicy.SPREAD],
                     ReplaySettings(order=Order.SHUFFLE, inflate=1.3), [1, 2])
    table = format_table(curves)
    assert "binpack" in table and "spread" in table and "100%" in table
    assert all(c.runs == 2 and c.at(100.0) is not None for c in curves)
    assert "spread across seeds" in table
    for curve in curves:
        spread, mean = curve.spread_at(100.0), curve.at(100.0)
        assert spread is not None and mean is not None
        assert spread.low <= mean <= spread.high and spread.sd <= spread.high - spread.low + 1e-9


def test_one_seed_has_no_spread_table(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    curves = compare(load_nodes(nodes_csv), load_pods(pods_csv), [PlacementPolicy.BINPACK], ReplaySettings(order=Order.SHUFFLE), [1])
    assert "spread across seeds" not in format_table(curves)
    (curve,) = curves
    assert curve.points and all(s.sd == 0.0 and s.low == s.high == y for (_, y), s in zip(curve.points, curve.spreads))


def test_real_trace_slice_replays_without_over_commit(tmp_path: Path) -> None:
    nodes_csv, pods_csv = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    with (OPENB / "openb_node_list_gpu_node.csv").open() as src:
        nodes_csv.write_text("".join(itertools.islice(src, 61)))
    with (OPENB / "openb_pod_list_default.csv").open() as src:
        pods_csv.write_text("".join(itertools.islice(src, 301)))
    nodes = load_nodes(nodes_csv)
    for policy in (PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.FGD):
        result = replay(nodes, load_pods(pods_csv), ReplaySettings(policy, Order.SHUFFLE, 1.3, 42))
        assert result.capacity_gpus == sum(len(n.gpus) for n in nodes)
        at_100 = result.allocated_at(100.0)
        assert at_100 is not None and 50.0 < at_100 <= 100.0
    assert all(g.used_milli == 0 for n in nodes for g in n.gpus), "replay must not mutate the caller's nodes"
    assert list(csv.reader(pods_csv.open()))[0][:5] == ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]
