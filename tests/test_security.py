"""TLS by default: without the launch's credentials nobody can use its scheduler."""

import socket

import pytest
from contract import square
from helpers import outsider_refused, outsiders_refused

import hpcfutures


def _scheduler_address(executor) -> str:
    return executor._session._client_side.client.scheduler.address


@pytest.fixture(scope="module")
def secured():
    executor = hpcfutures.LocalExecutor(1, timeout=60)
    yield executor
    executor.shutdown()


def test_scheduler_speaks_tls_by_default(secured):
    assert _scheduler_address(secured).startswith("tls://127.0.0.1:")
    assert secured.submit(square, 5).result(timeout=30) == 25


def test_a_dask_client_without_credentials_cannot_connect(secured):
    address = _scheduler_address(secured)
    # Neither over TLS without credentials nor over plain TCP.
    assert outsiders_refused([(address, "none"),
                              (address.replace("tls://", "tcp://"), "none")]) == [True, True]


def test_a_dask_client_with_other_credentials_cannot_connect(secured):
    assert outsider_refused(_scheduler_address(secured), "other"), \
        "a client with someone else's certificate got in"


def test_raw_tcp_garbage_runs_nothing_and_harms_nothing(secured):
    host, port = _scheduler_address(secured).removeprefix("tls://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"\x00" * 64 + b"run-function please" * 10)
        raw.settimeout(5)
        try:
            reply = raw.recv(1024)
        except (TimeoutError, ConnectionResetError):
            reply = b""
    assert b"run-function" not in reply
    assert secured.submit(square, 6).result(timeout=30) == 36


def test_nothing_is_served_over_http_without_the_dashboard(secured):
    """No HTTP server in the scheduler (its health, metrics and JSON pages would
    answer every user of the host); the ranks' side is tests/test_faults.py."""
    scheduler = secured._session._client_side.service._scheduler
    assert not hasattr(scheduler, "http_server") and scheduler.services == {}


def test_the_dashboard_listens_where_it_is_asked_to_only():
    with hpcfutures.LocalExecutor(1, dashboard=True, dashboard_address="127.0.0.1:0") as ex:
        http = ex._session._client_side.service._scheduler.http_server
        hosts = {sock.getsockname()[0] for sock in http._sockets.values()}
        assert hosts == {"127.0.0.1"}, hosts


def test_security_false_opts_out_to_plain_tcp(caplog):
    with hpcfutures.LocalExecutor(1, security=False) as executor:
        assert _scheduler_address(executor).startswith("tcp://")
        assert executor.submit(square, 7).result(timeout=30) == 49
    assert any("security=False" in r.getMessage() for r in caplog.records)
