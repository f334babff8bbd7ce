"""`tessera validate` as a user runs it: exit codes, one line per problem, never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STACKS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))

GOOD_HEAD = """config:
  tencentcloud:region: ap-guangzhou
  tessera:cluster:
    provider: tke
    name: t
    kubernetesVersion: "1.30.0"
    vpcCidr: 10.0.0.0/16
    subnets: [{zone: ap-guangzhou-3, cidr: 10.0.1.0/24}]
"""


def tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_shipped_stacks_are_ok() -> None:
    result = tessera("validate", *STACKS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{s}: ok" for s in STACKS]


BROKEN = [
    (
        "  tessera:nodePools:\n    - {name: a, kind: mig, instanceType: GT4.4XLARGE96, mig: {profile: {'3g.25gb': 1}}}\n",
        "nodePools[0].mig.profile: '3g.25gb' is not a MIG profile of A100-40GB (valid: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)",
    ),
    ("  tessera:nodePools:\n    - {name: a, kind: nvidia, instanceType: GN7.2XLARGE32, minSize: 3, maxSize: 1}\n", "nodePools[0].maxSize: must be at least minSize (3), got 1"),
    ("  tessera:nodePools:\n    - {name: a, kind: shared, instanceType: GN7.2XLARGE32, sharing: {policy: strict}}\n", "nodePools[0].sharing.policy: 'strict' is not valid (valid: best-effort, fixed-share, burst-share)"),
    ("  tessera:nodePools: []\n", "nodePools: must not be empty"),
    (
        "  tessera:nodePools:\n    - {name: a, kind: nvidia, instanceType: GN7.2XLARGE32, gpuDriver: {driver: '470.82.01', cuda: '12.2.2'}}\n",
        "nodePools[0].gpuDriver: driver 470.82.01 + CUDA 12.2.2 is not a combination TKE offers; nearest: driver 470.82.01 + CUDA 11.4.3 + cuDNN 8.2.4; "
        "driver 535.161.07 + CUDA 12.2.2 + cuDNN 8.9.4 (unconfirmed); driver 470.182.03 + CUDA 11.4.3 + cuDNN 8.2.4",
    ),
]


def test_each_broken_rule_exits_2_with_a_path_line(tmp_path: Path) -> None:
    files = [_file(tmp_path, f"Pulumi.bad{i}.yaml", GOOD_HEAD + pools) for i, (pools, _) in enumerate(BROKEN)]
    result = tessera("validate", *files)  # one process for all cases: each file gets its own lines
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{file}: {line}" for file, (_, line) in zip(files, BROKEN, strict=True)]
    assert "Traceback" not in result.stdout + result.stderr


def test_every_file_is_reported(tmp_path: Path) -> None:
    bad = _file(tmp_path, "Pulumi.bad.yaml", GOOD_HEAD + "  tessera:nodePools: [{name: a, kind: gpu}]\n")
    result = tessera("validate", STACKS[0], bad, str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f"{STACKS[0]}: ok",
        f"{bad}: nodePools[0].kind: 'gpu' is not a pool kind (valid: nvidia, shared, mig, timeslice)",
        f"{tmp_path / 'missing.yaml'}: no such file",
    ]


def test_garbage_never_gives_a_traceback(tmp_path: Path) -> None:
    texts = ["config: [\n", "\x00\x01binary", "config:\n  tessera:cluster: 5\n  tessera:nodePools: 7\n", "- a\n- b\n"]
    files = [_file(tmp_path, f"Pulumi.x{i}.yaml", text) for i, text in enumerate(texts)]
    result = tessera("validate", *files)
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert {line.split(":")[0] for line in result.stdout.splitlines()} == set(files)


def test_a_directory_means_its_stack_files() -> None:
    result = tessera("validate", "stacks")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"{s}: ok" for s in STACKS]


def test_empty_directory_is_reported(tmp_path: Path) -> None:
    result = tessera("validate", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [f"{tmp_path}: is a directory with no Pulumi.*.yaml stack files in it"]


def test_usage_error_without_files() -> None:
    result = tessera("validate")
    assert result.returncode == 2 and "STACK_FILE" in result.stderr


GOOD_POOLS = "  tessera:nodePools:\n    - {name: a, kind: nvidia, instanceType: GN7.2XLARGE32}\n"
# stack-file lines that nobody reads -> the one line `tessera validate` prints for each
UNREAD = [
    (
        "  tesera:quotas:\n    - {namespace: team-a, gpuCore: 200}\n",
        "tesera:quotas: unknown config namespace 'tesera' (did you mean 'tessera:quotas'? Tessera reads tessera:*; "
        "tencentcloud:*, kubernetes:*, pulumi:* belong to the providers and Pulumi)",
    ),
    ("  foo:bar: 1\n", "foo:bar: unknown config namespace 'foo' (Tessera reads tessera:*; tencentcloud:*, kubernetes:*, pulumi:* belong to the providers and Pulumi)"),
    ("  tencentclod:region: ap-guangzhou\n", "tencentclod:region: unknown config namespace 'tencentclod' (did you mean 'tencentcloud:region'? Tessera reads tessera:*; tencentcloud:*, kubernetes:*, pulumi:* belong to the providers and Pulumi)"),
    ("  quotas: []\n", "quotas: not a config key: write <namespace>:<name>, e.g. tessera:quotas"),
    ("  tessera:quota: []\n", "quota: unknown key 'quota' (did you mean 'quotas'? valid keys: tencentcloud:region, cluster, scheduler, nodePools, images, gpuOperator, quotas, monitoring, webhook, namespace, workloads)"),
    ("  tessera:scheduler: {placment: binpack}\n", "scheduler.placment: unknown key 'placment' (did you mean 'placement'? valid keys: placement, replicas, extender, weight, httpTimeoutSeconds, logLevel)"),
]


@pytest.mark.parametrize(("extra", "line"), UNREAD, ids=["misspelt-namespace", "foreign-namespace", "misspelt-provider", "no-namespace", "unknown-key", "unknown-nested-key"])
def test_config_nobody_reads_exits_2_with_its_key_and_a_did_you_mean(tmp_path: Path, extra: str, line: str) -> None:
    path = _file(tmp_path, "Pulumi.unread.yaml", GOOD_HEAD + GOOD_POOLS + extra)
    result = tessera("validate", path)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{path}: {line}"]
    assert "Traceback" not in result.stdout + result.stderr


def test_provider_and_pulumi_namespaces_stay_allowed(tmp_path: Path) -> None:
    extra = "  kubernetes:enableServerSideApply: true\n  pulumi:tags: {team: gpu}\n  tencentcloud:protocol: HTTPS\n"
    path = _file(tmp_path, "Pulumi.providers.yaml", GOOD_HEAD + GOOD_POOLS + extra)
    result = tessera("validate", path)
    assert (result.returncode, result.stdout.strip()) == (0, f"{path}: ok")


def test_a_pulumi_project_file_is_named_as_such() -> None:
    result = tessera("validate", "examples/yaml-dev/Pulumi.yaml", "Pulumi.yaml")
    assert result.returncode == 2
    said = "a Pulumi project file (it has name: and runtime:), not a stack file; check the stack files, Pulumi.<stack>.yaml"
    assert result.stdout.splitlines() == [f"examples/yaml-dev/Pulumi.yaml: {said}", f"Pulumi.yaml: {said}"]
