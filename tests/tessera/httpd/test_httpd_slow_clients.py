"""Slow and idle clients in any number above the connection cap, over real sockets: a well-behaved
client still gets its answer, and the connections closed to make room are the hostile ones that
waited longest, never a well-behaved one with a request in progress. The request timeout is 30 s
here, so only making room (not a deadline) can let anyone in."""
from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest
from httpd_toy import ToyService, get_ok, start_toy
from raw_http import Hostile, RawConnection, closed_by_peer, exchange, request_line

CAP = 4


@pytest.fixture
def capped() -> Iterator[ToyService]:
    service = start_toy(max_connections=CAP, request_timeout_s=30.0, idle_timeout_s=30.0)
    yield service
    service.release.set()
    service.server.stop(drain_s=1.0)


def _post_json(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/json", body=b'{"a": [1, 2]}', headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


_PATHS = {Hostile.NO_READ: "/big"}


@pytest.mark.parametrize("kind", [Hostile.SILENT, Hostile.HEAD, Hostile.BODY, Hostile.NO_READ, Hostile.TLS_HELLO], ids=lambda k: k.value)
def test_three_times_the_cap_of_slow_clients_never_keep_a_request_out(capped: ToyService, kind: Hostile) -> None:
    hostile = [kind.open(capped.port, path=_PATHS.get(kind, "/json")) for _ in range(3 * CAP)]
    try:
        assert get_ok(capped.port) == 200
        assert _post_json(capped.port) == (200, b'{"type":"dict","bytes":13}')
        assert closed_by_peer(hostile[0])  # the oldest made room
    finally:
        for sock in hostile:
            sock.close()


def test_the_connections_closed_to_make_room_are_the_oldest_hostile_ones(capped: ToyService) -> None:
    in_progress: list = []
    slow = threading.Thread(target=lambda: in_progress.extend(exchange(capped.port, request_line("POST", "/slow", b"{}"), half_close=False)))
    slow.start()
    assert capped.entered.wait(10)  # a well-behaved request in progress holds one of the CAP slots
    hostile = [kind.open(capped.port, path="/json") for kind in [Hostile.SILENT, Hostile.HEAD, Hostile.BODY] * 3]
    try:
        assert get_ok(capped.port) == 200  # a newcomer gets in, closing the oldest hostile one
        assert closed_by_peer(hostile[0])
        assert not closed_by_peer(hostile[-1], wait_s=1.0)  # the newest waits on (deadline: 30 s)
        capped.release.set()
        slow.join(10)
        assert [r.status for r in in_progress] == [200]  # never closed to make room
    finally:
        for sock in hostile:
            sock.close()


def test_a_kept_alive_client_reusing_its_connection_at_once_is_never_cut(capped: ToyService) -> None:
    """Bursts of reuse (kube-scheduler's filter, prioritize, bind) while hostile clients arrive."""
    kept = RawConnection.open(capped.port)
    hostile: list[socket.socket] = []
    try:
        for i in range(20):
            kept.send(request_line("GET", "/ok"))
            reply = kept.read_response()
            assert reply is not None and reply.status == 200, i
            hostile.append(Hostile.SILENT.open(capped.port))
    finally:
        kept.close()
        for sock in hostile:
            sock.close()


def test_a_longer_request_grace_keeps_connections_that_have_not_written_yet() -> None:
    service = start_toy(max_connections=CAP, request_timeout_s=30.0, idle_timeout_s=30.0, request_grace_s=5.0)
    quiet = [Hostile.SILENT.open(service.port) for _ in range(3 * CAP)]
    try:
        assert get_ok(service.port) == 200  # taken in beside them (the backlog's room)
        assert not closed_by_peer(quiet[0], wait_s=1.0)  # within its 5 s grace: not closed to make room
    finally:
        for sock in quiet:
            sock.close()
        service.server.stop(drain_s=1.0)
