"""`scheduler.extender`: the extender's replicas and Lease timing, as a stack file sets them and
`tessera validate` reports them (a real process: exit 2 and one `file: path: message` line each)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from tessera.model import leader_election
from tessera.model.leader_election import LeaderElectionTiming
from tessera.model.loader import from_pulumi_mapping
from tessera.model.platform import SchedulerConfig

ROOT: Final = Path(__file__).resolve().parents[3]
STACK: Final = """config:
  tessera:cluster: {provider: existing, name: kind, kubernetesVersion: "1.30.0", kubeconfig: {path: ~/.kube/config}}
  tessera:nodePools:
    - {name: local, kind: shared, nodeSelector: {example.com/gpu-pool: local}, gpuModel: T4, gpuCount: 1, minSize: 1, maxSize: 1}
"""
BASE: Final[dict[str, Any]] = {
    "cluster": {"provider": "existing", "name": "kind", "kubernetesVersion": "1.30.0", "kubeconfig": {"path": "~/.kube/config"}},
    "nodePools": [{"name": "local", "kind": "shared", "nodeSelector": {"a": "b"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 1, "maxSize": 1}],
}
LE: Final = "scheduler.extender.leaderElection"


def _validate(tmp_path: Path, scheduler: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    stack = tmp_path / "Pulumi.ha.yaml"
    stack.write_text(STACK + f"  tessera:scheduler: {json.dumps(scheduler)}\n")
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "validate", str(stack)], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )


def test_defaults_are_the_runtimes_and_two_replicas() -> None:
    extender = SchedulerConfig().extender
    assert extender.replicas == 2
    assert extender.leader_election.timing() == LeaderElectionTiming()
    assert (extender.leader_election.lease_duration_seconds, extender.leader_election.renew_deadline_seconds, extender.leader_election.retry_period_seconds) == (
        leader_election.DEFAULT_LEASE_DURATION_S, leader_election.DEFAULT_RENEW_DEADLINE_S, leader_election.DEFAULT_RETRY_PERIOD_S,
    )


def test_extender_and_kube_scheduler_replicas_are_separate_settings() -> None:
    config = from_pulumi_mapping({**BASE, "scheduler": {"replicas": 3, "extender": {"replicas": 1}}})
    assert (config.scheduler.replicas, config.scheduler.extender.replicas) == (3, 1)


BAD: Final = [
    # (scheduler section, problem path, fragment of its message)
    ({"extender": {"replicas": 0}}, "scheduler.extender.replicas", "must be >= 1 (got 0)"),
    ({"extender": {"replicas": 6}}, "scheduler.extender.replicas", "must be <= 5 (got 6)"),
    ({"extender": {"leaderElection": {"leaseDurationSeconds": 3}}}, f"{LE}.leaseDurationSeconds", "must be longer than renewDeadline (3s <= 3s)"),
    ({"extender": {"leaderElection": {"renewDeadlineSeconds": 0.5}}}, f"{LE}.renewDeadlineSeconds", "must be longer than 1.2 x retryPeriod (500ms <= 1.2 x 500ms)"),
    ({"extender": {"leaderElection": {"retryPeriodSeconds": 3}}}, f"{LE}.renewDeadlineSeconds", "the leader needs more than one try to renew"),
    ({"extender": {"leaderElection": {"leaseDurationSeconds": 0}}}, f"{LE}.leaseDurationSeconds", "must be >= 0.001 (got 0)"),
    ({"extender": {"leaderElection": {"leaseDurationSeconds": 4.5}}}, f"{LE}.leaseDurationSeconds", "must be a whole number of seconds"),
    ({"extender": {"leaderElection": {"leaseDurationSeconds": 120, "renewDeadlineSeconds": 10}}}, f"{LE}.leaseDurationSeconds", "must be <= 60.0 (got 120)"),
    ({"extender": {"leaderElection": {"leaseDuration": "4s"}}}, f"{LE}.leaseDuration", "did you mean 'leaseDurationSeconds'?"),
    ({"extender": {"replica": 2}}, "scheduler.extender.replica", "did you mean 'replicas'?"),
]


@pytest.mark.parametrize(("scheduler", "path", "fragment"), BAD, ids=[f"{p.rsplit('.', 1)[1]}: {f}"[:60] for _, p, f in BAD])
def test_a_broken_extender_setting_is_reported_at_its_path(tmp_path: Path, scheduler: dict[str, Any], path: str, fragment: str) -> None:
    result = _validate(tmp_path, scheduler)
    assert result.returncode == 2, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith(f"{tmp_path / 'Pulumi.ha.yaml'}: {path}: ")]
    assert lines, result.stdout + result.stderr
    assert any(fragment in line for line in lines), lines
    assert "Traceback" not in result.stderr


def test_both_timing_rules_are_reported_together(tmp_path: Path) -> None:
    result = _validate(tmp_path, {"extender": {"leaderElection": {"leaseDurationSeconds": 3, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 2.6}}})
    assert result.returncode == 2
    paths = [line.split(": ")[1] for line in (result.stdout + result.stderr).splitlines() if ": scheduler." in line]
    assert paths == [f"{LE}.leaseDurationSeconds", f"{LE}.renewDeadlineSeconds"]


@pytest.mark.parametrize(
    "scheduler",
    [
        {"extender": {"replicas": 1}},
        {"extender": {"replicas": 5, "leaderElection": {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}}},
        {"extender": {"leaderElection": {"leaseDurationSeconds": 2, "renewDeadlineSeconds": 1, "retryPeriodSeconds": 0.25}}},
    ],
    ids=["one replica", "kube-scheduler's timing", "sub-second renewals"],
)
def test_good_extender_settings_validate(tmp_path: Path, scheduler: dict[str, Any]) -> None:
    result = _validate(tmp_path, scheduler)
    assert result.returncode == 0, result.stdout + result.stderr
