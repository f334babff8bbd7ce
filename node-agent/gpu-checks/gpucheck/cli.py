"""Run the GPU checks within a time budget; one JSON report, written after every check.

Exit codes: 0 every check that ran met its target; 1 a check failed or broke; 2 nothing could run
here (the report says what is missing and where to run instead).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from gpucheck.analysis import CHECK_ORDER, ERROR, SKIPPED, exit_code, parse_only, parse_pattern, skipped, summary_lines

DEFAULT_BUDGET_S = 420.0  # run-on-gpu.sh allows 8 minutes in all


class Interrupted(BaseException):
    """SIGTERM/SIGINT (the time limit of run-on-gpu.sh): stop, clean up, write what we have."""


def _argument(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows the message of an ArgumentTypeError only, so re-raise ours as one."""

    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    convert.__name__ = parse.__name__
    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_gpu_checks.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"checks, in run order: {', '.join(CHECK_ORDER)}. On a lent GPU machine run: bash node-agent/gpu-checks/run-on-gpu.sh",
    )
    parser.add_argument("--only", type=_argument(parse_only), default=list(CHECK_ORDER), help="comma-separated checks to run (default: all)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per throughput run (default 10)")
    parser.add_argument("--pattern", type=_argument(parse_pattern), default=(6.0, 4.0), help="online bursts ON:OFF seconds (default 6:4)")
    parser.add_argument("--cycles", type=int, default=3, help="online burst cycles per colocation run (default 3)")
    parser.add_argument("--budget-seconds", type=float, default=DEFAULT_BUDGET_S,
                        help="skip checks that no longer fit in this many seconds (default %(default)s)")
    parser.add_argument("--freezer", choices=("auto", "emulated"), default="auto",
                        help="auto: the kernel cgroup freezer when /sys/fs/cgroup is writable, else emulated; "
                             "emulated: cgroup files on disk applied as SIGSTOP/SIGCONT")
    parser.add_argument("--output", type=Path, help="write the JSON report here too (rewritten after every check)")
    parser.add_argument("--artifacts", type=Path, help="copy MPS logs and worker stderr here")
    return parser


def estimate_s(name: str, seconds: float, pattern: tuple[float, float], cycles: int, start_s: float = 12.0) -> float:
    """Rough wall time of a check (worker start-up `start_s` per sequential start)."""
    run = seconds + 2.0
    return {
        "nvml": start_s + max(3.0, seconds / 2) + 5,
        "overhead": 4 * (start_s + run) + 10,
        "mps": start_s + run + 10,
        "besteffort": start_s + run,
        "memory": 2 * start_s + 25,
        "colocation": 2 * (start_s + cycles * (pattern[0] + pattern[1])) + 10,
        "burst": start_s + max(6.0, 2 * seconds) + 14,
        "dra": 2 * start_s + 30,
    }[name]


def write_json(path: Path | None, report: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # once: cleanup and the report must not be cut short
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(f"signal {signum}")


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from gpucheck import procs
    from gpucheck.preflight import fatal_reason, probe_environment, skip_reasons

    started = time.monotonic()
    report: dict[str, Any] = {
        "tool": "tessera gpu-checks", "argv": sys.argv[1:] if argv is None else argv,
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {"seconds": args.seconds, "pattern": list(args.pattern), "cycles": args.cycles, "budget_s": args.budget_seconds,
                     "freezer": args.freezer},
        "checks": {},
    }
    checks: dict[str, Any] = report["checks"]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    env = probe_environment()
    report["environment"] = env.to_json()
    fatal = fatal_reason(env)
    if fatal:
        report["status"], report["reason"] = SKIPPED, fatal
        for name in args.only:
            checks[name] = skipped("nothing can run on this machine: see the report's reason")
        return _finish(report, args.output, started)

    from gpucheck.checks_agent import check_besteffort, check_burst, check_colocation, check_memory, check_nvml
    from gpucheck.checks_dra import check_dra
    from gpucheck.checks_mps import check_mps, check_overhead
    from gpucheck.world import Context

    table: dict[str, Callable[[Context], dict[str, Any]]] = {
        "nvml": check_nvml, "overhead": check_overhead, "mps": check_mps, "besteffort": check_besteffort,
        "memory": check_memory, "colocation": check_colocation, "burst": check_burst, "dra": check_dra,
    }
    skips = skip_reasons(env, args.only)
    workdir = Path(tempfile.mkdtemp(prefix="tessera-gpu-checks-"))
    ctx = Context(env=env, gpu=env.gpus[0], seconds=args.seconds, pattern=args.pattern, cycles=args.cycles,
                  workdir=workdir, artifacts=args.artifacts, deadline=started + args.budget_seconds,
                  kernel_freezer=args.freezer == "auto")
    try:
        for name in args.only:
            if name in skips:
                checks[name] = skipped(skips[name])
                continue
            start_s = max(procs.STARTS) + 2.0 if procs.STARTS else 12.0
            need = estimate_s(name, args.seconds, args.pattern, args.cycles, start_s)
            if ctx.left_s() < need:
                checks[name] = skipped(f"time budget: needs about {need:.0f} s, {ctx.left_s():.0f} s left "
                                       "(raise --budget-seconds, lower --seconds, or run it alone with --only)")
                continue
            t0 = time.monotonic()
            checks[name] = {"status": ERROR, "error": "running"}
            write_json(args.output, report)
            try:
                checks[name] = table[name](ctx)
            except Interrupted as exc:
                checks[name] = {"status": ERROR, "error": f"interrupted ({exc}) while running: time limit reached"}
                raise
            except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others' figures
                checks[name] = {"status": ERROR, "error": f"{type(exc).__name__}: {exc}",
                                "trace": traceback.format_exc(limit=6)[-2500:], **getattr(exc, "details", {})}
            finally:
                cleaned = procs.cleanup()
                if cleaned:
                    checks[name]["cleanup"] = cleaned
                checks[name]["seconds"] = round(time.monotonic() - t0, 1)
                write_json(args.output, report)
    except Interrupted:
        for name in args.only:
            checks.setdefault(name, skipped("not reached: interrupted by the time limit"))
    finally:
        procs.cleanup()
        ctx.close()
        report["cgroups"] = ctx.cgroup_note or None
        report["reference_rate"] = {"matmuls_per_s": ctx.reference_rate, "from": ctx.reference_from}
        if args.artifacts is not None:
            _copy_worker_logs(workdir, args.artifacts)
        shutil.rmtree(workdir, ignore_errors=True)
    return _finish(report, args.output, started)


def _copy_worker_logs(workdir: Path, artifacts: Path) -> None:
    logs = workdir / "workers"
    if not logs.is_dir():
        return
    dest = artifacts / "worker-stderr"
    dest.mkdir(parents=True, exist_ok=True)
    for path in logs.glob("*.stderr"):
        text = path.read_text(errors="replace")
        if text.strip():
            (dest / path.name).write_text(text[-20000:])


def _finish(report: dict[str, Any], output: Path | None, started: float) -> int:
    code = exit_code(report["checks"])
    report["exit_code"] = code
    report["duration_s"] = round(time.monotonic() - started, 1)
    write_json(output, report)
    print(json.dumps(report, indent=1, default=str))
    print("\n== GPU checks summary (exit %d) ==" % code)
    if report.get("reason"):
        print(f"reason: {report['reason']}")
    for line in summary_lines(report["checks"]):
        print(line)
    sys.stdout.flush()
    return code


def main() -> None:
    sys.exit(run())
