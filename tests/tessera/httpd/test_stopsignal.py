"""SIGTERM reaches the stop event every time, even when it lands inside `Event.wait()`.

The handler every server installed before (`lambda *_: stop.set()`) deadlocked now and then: the
agent ignored SIGTERM and left a container frozen until the kubelet would have killed it (seen in
CI, 2026-11-26). The child below re-arms after each SIGTERM while its main thread spins on short
waits, the pattern of the agent's tick loop; the signals come from this process at random instants,
as the kubelet's do. With the old handler the child hangs within about fifty rounds."""
from __future__ import annotations

import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading

ROUNDS = 1500
ROUND_DEADLINE_S = 10.0  # a lost signal hangs for ever; a loaded machine answers in milliseconds


def _child(rounds: int) -> str:
    return textwrap.dedent(
        f"""
        import sys, threading
        from tessera.httpd import install_stop_handler

        for _ in range({rounds}):
            stop = threading.Event()
            install_stop_handler(stop)
            sys.stdout.write("armed\\n")
            sys.stdout.flush()
            while not stop.is_set():
                stop.wait(0.0001)
        """
    )


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_every_sigterm_stops_the_wait_loop() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _child(ROUNDS)], stdout=subprocess.PIPE, text=True)
    lines = _lines(proc)
    rng = random.Random(7)
    stopped = 0
    try:
        while True:
            try:
                line = lines.get(timeout=ROUND_DEADLINE_S)
            except queue.Empty:
                raise AssertionError(f"SIGTERM number {stopped} was lost: the process hung in its wait loop") from None
            if line is None:
                break
            threading.Event().wait(rng.random() * 0.0005)
            proc.send_signal(signal.SIGTERM)
            stopped += 1
    finally:
        proc.kill()
        proc.wait()
    assert stopped == ROUNDS


def test_sigint_stops_too_instead_of_raising_keyboardinterrupt() -> None:
    child = textwrap.dedent(
        """
        import os, signal, threading
        from tessera.httpd import install_stop_handler

        stop = threading.Event()
        install_stop_handler(stop)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(10), "SIGINT did not set the event"
        print("ok", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
