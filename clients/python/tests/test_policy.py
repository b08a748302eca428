"""The retry policy of docs/clients.md, measured: a dead address (a
listener closed, so connections are refused) fails after the policy's
attempts within its waits' bounds, saying so and logging while it retries;
a server that restarts during a call is reached within the call's budget;
and the defaults are the doc's table, which the Go client's tests check
too."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time

import grpc
import pytest

import rolloutd
import rolloutd.aio
from rolloutd import _channel, _retry
from conftest import REPO

# Waits of [25, 50], [50, 100], [100, 200] and [200, 400] ms: 0.375 s to
# 0.75 s in all.
SMALL = rolloutd.RetryPolicy(max_attempts=5, first_backoff=0.05, max_backoff=0.4)


def dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


def check_dead(err: rolloutd.RolloutdError, took: float, addr: str) -> None:
    assert isinstance(err, rolloutd.Unavailable) and err.attempts == 5, err
    assert 0.375 <= took <= 0.75 + 0.5 and err.elapsed <= took, (took, err.elapsed)
    want = "UNAVAILABLE: server unreachable at %s: 5 attempts over %.1fs: " % (addr, err.elapsed)
    assert str(err).startswith(want) and "onnection refused" in str(err), str(err)


def test_a_dead_address_fails_within_the_policy(caplog):
    addr = dead_address()
    caplog.set_level(logging.DEBUG, logger="rolloutd")
    with rolloutd.Client(addr, retry=SMALL) as c:
        t0 = time.monotonic()
        with pytest.raises(rolloutd.Unavailable) as e:
            c.get("policy/dead", "r-1")
        took = time.monotonic() - t0
    print("%s after %.3fs" % (e.value, took))
    check_dead(e.value, took, addr)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    debugs = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(warnings) == 1 and addr in warnings[0].getMessage() and "Get" in warnings[0].getMessage()
    assert len(debugs) == 4, [r.getMessage() for r in debugs]


@pytest.mark.asyncio
async def test_a_dead_address_fails_within_the_policy_aio():
    addr = dead_address()
    async with rolloutd.aio.Client(addr, retry=SMALL) as c:
        t0 = time.monotonic()
        with pytest.raises(rolloutd.Unavailable) as e:
            await c.append("policy/dead", [{"content": "x"}])
        took = time.monotonic() - t0
    check_dead(e.value, took, addr)
    # No answer: the policy keeps the append's meaning of that.
    assert e.value.may_have_been_stored


def test_a_restarted_server_is_reached_within_the_budget(start_server):
    srv = start_server()
    addr = srv.addr
    with rolloutd.Client(addr) as c:
        c.append("policy/restart", [{"id": "r-1"}])
        assert srv.stop() == 0
        got = {}
        t0 = time.monotonic()

        def call() -> None:
            try:
                got["res"] = c.append("policy/restart", [{"id": "r-2"}])
            except rolloutd.RolloutdError as e:
                got["err"] = e
            got["at"] = time.monotonic()

        th = threading.Thread(target=call)
        th.start()
        try:
            time.sleep(2)
            start_server(store=srv.store, addr=addr)
            serving = time.monotonic()
        finally:
            th.join(30)
        assert "err" not in got, got
        print("answered %.3fs after the restarted server listened, %.3fs after the call began" % (got["at"] - serving, got["at"] - t0))
        assert got["at"] - serving < 2.0


def test_defaults_match_the_doc():
    doc = {}
    for line in (REPO / "docs" / "clients.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 4 and cells[1].startswith("`"):
            doc[cells[1].strip("`")] = cells[2]

    def secs(v: str) -> float:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", v)
        assert m, v
        return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)

    p = _retry.DEFAULT_RETRY
    opts = dict(_channel.channel_options(_channel.DEFAULT_MAX_MESSAGE_BYTES, None))
    got = {
        "call_timeout": _retry.DEFAULT_TIMEOUT,
        "max_attempts": p.max_attempts,
        "first_backoff": p.first_backoff,
        "max_backoff": p.max_backoff,
        "attempt_timeout": _retry.DEFAULT_ATTEMPT_TIMEOUT,
        "reconnect_first": opts["grpc.initial_reconnect_backoff_ms"] / 1000,
        "reconnect_max": opts["grpc.max_reconnect_backoff_ms"] / 1000,
        "connect_timeout": opts["grpc.min_reconnect_backoff_ms"] / 1000,
    }
    assert set(doc) == set(got)
    for k, v in got.items():
        want = int(doc[k]) if k == "max_attempts" else secs(doc[k])
        assert v == want, "%s: the Python client has %r, docs/clients.md says %r" % (k, v, doc[k])
    assert rolloutd.Client.__init__.__kwdefaults__["timeout"] == _retry.DEFAULT_TIMEOUT
    assert rolloutd.Client.__init__.__kwdefaults__["retry"] == rolloutd.RetryPolicy()
