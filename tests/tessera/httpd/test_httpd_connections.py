"""Connections against `tessera.httpd` over real sockets: slow and silent clients cannot hold the
server, bursts beyond the thread limit wait instead of being refused, stopping drains."""
from __future__ import annotations

import http.client
import threading
import time

import pytest
from httpd_toy import ToyService, get_ok, start_toy
from raw_http import RawConnection, burst, exchange, request_line


@pytest.fixture
def small() -> ToyService:
    """Two connection slots and short timeouts, so the limits are reached with a few sockets."""
    return start_toy(max_connections=2, request_timeout_s=0.5, idle_timeout_s=30.0)


def test_a_slowloris_client_gets_408_and_is_cut_off(small: ToyService) -> None:
    conn = RawConnection.open(small.port)
    request = request_line("GET", "/ok")[:-2]  # never finishes its headers
    sent = 0
    while sent < len(request):
        try:
            conn.send(request[sent : sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += 1
        time.sleep(0.05)
        if sent == 10:
            assert get_ok(small.port) == 200  # others are served meanwhile
    reply = conn.read_response()
    assert reply is not None and reply.status == 408 and reply.json()["error"] == "request not complete within 0.5 s"
    assert conn.is_closed_by_peer()
    conn.close()


def test_silent_connections_cannot_take_every_slot(small: ToyService) -> None:
    silent = [RawConnection.open(small.port) for _ in range(4)]  # twice the slots; none says a word
    assert get_ok(small.port) == 200
    assert all(c.is_closed_by_peer() for c in silent)  # cut to make room, or after the request timeout
    for c in silent:
        c.close()


def test_idle_keep_alive_connections_make_room_for_new_clients(small: ToyService) -> None:
    kept = []
    for _ in range(3):  # the third client arrives while the other two hold both slots, idle
        conn = RawConnection.open(small.port)
        conn.send(request_line("GET", "/ok"))
        reply = conn.read_response()
        assert reply is not None and reply.status == 200 and not reply.closes
        kept.append(conn)
    # over the cap with three idle keep-alive connections (idle timeout 30 s): the longest idle
    # one makes room once its grace is over, and the newest goes on serving
    assert kept[0].is_closed_by_peer()
    kept[2].send(request_line("GET", "/ok"))
    reply = kept[2].read_response()
    assert reply is not None and reply.status == 200
    for conn in kept:
        conn.close()


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_a_burst_beyond_the_thread_limit_waits_and_is_never_refused(keep_alive: bool) -> None:
    # 96 client threads share this process with the server: one may wait past the default 0.1 s
    # between connecting and writing, and be closed to make room (test_httpd_slow_clients covers
    # that); the grace here keeps this test about the worker limit
    service = start_toy(max_connections=8, backlog=256, request_grace_s=5.0)
    try:

        def send(conn: http.client.HTTPConnection, client: int, i: int) -> int:
            conn.request("POST", "/json", body=b'{"client": %d, "i": %d}' % (client, i), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            return response.status

        result = burst(
            lambda: http.client.HTTPConnection("127.0.0.1", service.port, timeout=60),
            send,
            clients=96,
            requests_per_client=5,
            keep_alive=keep_alive,
        )
        assert result.errors == []
        assert result.statuses == [200] * (96 * 5)
    finally:
        service.server.stop(drain_s=1.0)


def test_stop_lets_requests_in_progress_finish_and_closes_idle_connections(toy: ToyService) -> None:
    idle = RawConnection.open(toy.port)
    idle.send(request_line("GET", "/ok"))
    assert idle.read_response() is not None
    replies: list = []
    slow = threading.Thread(target=lambda: replies.extend(exchange(toy.port, request_line("POST", "/slow", b"{}"), half_close=False)))
    slow.start()
    assert toy.entered.wait(10)
    stopper = threading.Thread(target=toy.server.stop, kwargs={"drain_s": 10.0})
    stopper.start()
    assert idle.is_closed_by_peer()  # the idle one is closed at once
    toy.release.set()  # the one in progress completes
    slow.join(10)
    stopper.join(15)
    assert [(r.status, r.closes) for r in replies] == [(200, True)]
    assert toy.wait_idle()
    with pytest.raises(OSError):  # and nothing new is accepted
        RawConnection.open(toy.port, timeout_s=2)
    idle.close()
