"""Image digests: a digest in a stack must be one a registry could have reported.

The rule (tessera/model/values.py `made_up_digest_reason`) as a table, checked through
`tessera validate` with the `path: message` line a user sees; and the repository's own promise:
until a release has written stacks/images.lock.json, no stack pins a digest at all.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model.values import made_up_digest_reason
from tessera.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
REAL = hashlib.sha256(b"tessera").hexdigest()

# (case, 64 hex digits, what the message says, or None when the digest is accepted)
DIGESTS: list[tuple[str, str, str | None]] = [
    ("sha256 of some bytes", REAL, None),
    ("sha256 of other bytes", hashlib.sha256(b"kube-scheduler").hexdigest(), None),
    ("all zero", "0" * 64, "repeats '0'"),
    ("all one letter", "f" * 64, "repeats 'f'"),
    ("deadbeef repeated", "deadbeef" * 8, "repeats 'deadbeef'"),
    ("0-f sequence repeated", "0123456789abcdef" * 4, "repeats '0123456789abcdef'"),
    ("two digits alternating", "ab" * 32, "repeats 'ab'"),
    ("16-digit block repeated", "1a2b3c4d5e6f7a8b" * 4, "repeats '1a2b3c4d5e6f7a8b'"),
    ("few distinct digits", ("0123456" * 10)[:63] + "1", "uses only 7 different hex digits"),
    ("no letter", "3141592653589793238462643383279502884197169399375105820974944592", "has no letter a-f"),
    ("old prod placeholder (tessera)", "4f6f1a9a3b8e1f0d2c7e5b9a0d3c6f8e1b4a7d0c3f6e9b2a5d8c1f4e7a0b3c6d", "alternates a decimal digit and a letter"),
    ("old prod placeholder (kube-scheduler)", "0b7d4c1e9a6f3b8d5e2a7c4f1d8b5e2a9c6f3d0b7e4a1c8f5d2b9e6a3c0f7d4b", "alternates a decimal digit and a letter"),
    ("real prefix, zero tail", REAL[:40] + "0" * 24, "12 or more identical digits in a row"),
    ("ascending run", REAL[:20] + "0123456789ab" + REAL[32:], "12 or more ascending digits in a row"),
    ("descending run", REAL[:20] + "fedcba987654" + REAL[32:], "12 or more descending digits in a row"),
    ("11 identical is still possible", REAL[:20] + "7" * 11 + REAL[31:], None),
]


@pytest.mark.parametrize(("case", "hex_digits", "reason"), DIGESTS, ids=[d[0] for d in DIGESTS])
def test_digest_rule_table(case: str, hex_digits: str, reason: str | None) -> None:
    assert len(hex_digits) == 64
    got = made_up_digest_reason(hex_digits)
    assert (got is None) if reason is None else (got is not None and reason in got), got


def _prod_with(tmp_path: Path, require: bool, digest: str | None) -> Path:
    data = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    images = data["config"]["tessera:images"]
    images["requireDigests"] = require
    for key in ("tessera", "kubeScheduler"):
        images[key].pop("digest", None)
    if digest is not None:
        images["tessera"]["digest"] = digest
        images["kubeScheduler"]["digest"] = "sha256:" + hashlib.sha256(b"scheduler").hexdigest()
        for workload in data["config"].get("tessera:workloads", []):  # requireDigests covers them too
            workload["image"]["digest"] = "sha256:" + hashlib.sha256(workload["name"].encode()).hexdigest()
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("require", [True, False], ids=["required", "optional"])
@pytest.mark.parametrize(("case", "hex_digits", "reason"), [d for d in DIGESTS if d[0] in ("sha256 of some bytes", "all zero", "deadbeef repeated", "old prod placeholder (tessera)")])
def test_validate_names_the_made_up_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str], require: bool, case: str, hex_digits: str, reason: str | None) -> None:
    path = _prod_with(tmp_path, require, "sha256:" + hex_digits)
    code = main(["validate", str(path)])
    out = capsys.readouterr().out.strip()
    if reason is None:
        assert (code, out) == (0, f"{path}: ok")
    else:
        assert code == 2
        assert out.startswith(f"{path}: images.tessera.digest: sha256:{hex_digits[:12]}... looks made up: it {reason}")
        assert "crane digest" in out


def test_required_digest_missing_is_reported_and_optional_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(_prod_with(tmp_path, True, None))]) == 2
    out = capsys.readouterr().out
    assert "images.tessera.digest: is required because images.requireDigests is true" in out
    assert "workloads[0].image.digest: is required because images.requireDigests is true" in out
    assert main(["validate", str(_prod_with(tmp_path, False, None))]) == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64))
def test_real_sha256_digests_are_never_refused(data: bytes) -> None:
    assert made_up_digest_reason(hashlib.sha256(data).hexdigest()) is None


def _stack_digests() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        images = yaml.safe_load(path.read_text())["config"].get("tessera:images") or {}
        out[path.name] = [images[k]["digest"] for k in ("tessera", "kubeScheduler") if isinstance(images.get(k), dict) and "digest" in images[k]]
    return out


def test_stacks_pin_only_digests_a_release_resolved() -> None:
    """No lock (no release yet): no digest anywhere and nothing requires one. With a lock: only its digests."""
    lock_path = ROOT / "stacks" / "images.lock.json"
    digests = _stack_digests()
    if not lock_path.exists():
        assert digests == {name: [] for name in digests}, "a digest in a stack before any release is made up"
        for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
            images = yaml.safe_load(path.read_text())["config"].get("tessera:images") or {}
            assert images.get("requireDigests", False) is False, f"{path.name} requires digests no release has published"
        return
    locked = set(json.loads(lock_path.read_text())["digests"].values())
    for name, found in digests.items():
        assert set(found) <= locked, f"{name} pins a digest the release did not resolve"
