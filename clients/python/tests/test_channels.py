"""A channel is closed only once no call runs on it: when its pod leaves the
resolver's answer, when a certificate renewal replaces it, and when the call
on it was a scan its caller walked away from; and the asyncio client closes
every channel it retires."""

from __future__ import annotations

import asyncio
import gc
import threading

import grpc
import pytest

import rolloutd
import rolloutd.aio
from rolloutd._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from rolloutd.affinity import Endpoints
from fakes import FakeServer, ok


def test_a_call_in_flight_survives_its_pod_leaving_the_resolver():
    entered, answer = threading.Event(), threading.Event()

    def slow(req, ctx):
        entered.set()
        answer.wait(30)
        return ok(req, ctx)

    a, b = FakeServer([slow]), FakeServer([ok])
    try:
        with rolloutd.Client(a.addr, affinity=rolloutd.Affinity(addresses=[a.addr])) as c:
            got = {}

            def call() -> None:
                try:
                    got["res"] = c.append("pods/a", [{"id": "r-1"}])
                except rolloutd.RolloutdError as e:
                    got["err"] = e

            th = threading.Thread(target=call)
            th.start()
            assert entered.wait(10)
            c.endpoints.set_addresses([b.addr])
            # The first call makes b's channel, the second retires a's.
            c.append("pods/b", [{"id": "r-2"}])
            c.append("pods/b", [{"id": "r-3"}])
            draining = c.endpoints.draining
            answer.set()
            th.join(10)
            assert "err" not in got, got
            assert got["res"][0].id == "id-0"
            assert draining == 1
            assert c.endpoints.draining == 0
    finally:
        answer.set()
        a.stop()
        b.stop()


def test_health_survives_a_renewal_right_after_it_looked_up_the_channels(monkeypatch):
    srv = FakeServer([ok])
    try:
        with rolloutd.Client(srv.addr) as c:
            assert c.health() == rolloutd.HealthStatus.SERVING
            # A certificate renewal in another thread, landing just after
            # health() has its channels and before it calls them.
            for name in ("channels", "hold_all"):
                orig = getattr(Endpoints, name, None)
                if orig is not None:
                    monkeypatch.setattr(Endpoints, name, lambda self, _orig=orig: (_orig(self), self.renew())[0])
            assert c.health() == rolloutd.HealthStatus.SERVING
            monkeypatch.undo()
            assert c.endpoints.draining == 0
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_asyncio_health_survives_a_renewal_during_its_first_check():
    entered, answer = threading.Event(), threading.Event()

    def slow(req, ctx):
        entered.set()
        answer.wait(10)
        return health_pb2.HealthCheckResponse.NOT_SERVING

    first, second = sorted((FakeServer([ok]), FakeServer([ok])), key=lambda s: s.addr)
    first.check = slow  # the pod health() asks first
    try:
        async with rolloutd.aio.Client(first.addr, affinity=rolloutd.Affinity(addresses=[first.addr, second.addr])) as c:
            check = asyncio.ensure_future(c.health())
            assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
            c.endpoints.renew()
            await asyncio.sleep(0.2)  # what renew closes is closed by now
            answer.set()
            assert await check == rolloutd.HealthStatus.SERVING
            assert c.endpoints.draining == 0
    finally:
        answer.set()
        first.stop()
        second.stop()


def test_an_abandoned_scan_lets_its_retired_channel_close(server, shard):
    with rolloutd.Client(server.addr) as c:
        c.append(shard, [{"id": "r-1"}])
        for rec in c.scan(shard, follow=True):
            assert rec.id == "r-1"
            c.endpoints.renew()
            assert c.endpoints.draining == 1
            break  # and never closed
        gc.collect()
        assert c.endpoints.draining == 0


@pytest.mark.asyncio
async def test_an_abandoned_asyncio_scan_lets_its_retired_channel_close(server, shard):
    async with rolloutd.aio.Client(server.addr) as c:
        await c.append(shard, [{"id": "r-1"}])
        async for rec in c.scan(shard, follow=True):
            assert rec.id == "r-1"
            c.endpoints.renew()
            assert c.endpoints.draining == 1
            break
        gc.collect()
        assert c.endpoints.draining == 0


@pytest.mark.asyncio
async def test_the_asyncio_client_closes_its_retired_channels():
    srv = FakeServer([ok])
    try:
        c = rolloutd.aio.Client(srv.addr)
        assert await c.health() == rolloutd.HealthStatus.SERVING
        [(_, first)] = c.endpoints.channels()
        c.endpoints.renew()
        [(_, second)] = c.endpoints.channels()
        # A renewal noticed off the event loop's thread.
        await asyncio.get_running_loop().run_in_executor(None, c.endpoints.renew)
        await c.close()
        assert first.channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN
        assert second.channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN
    finally:
        srv.stop()


def test_an_asyncio_channel_retired_after_its_loop_ended_is_closed():
    async def make() -> rolloutd.aio.Client:
        c = rolloutd.aio.Client("127.0.0.1:1")
        c.endpoints.channels()
        return c

    c = asyncio.run(make())
    [(_, stubs)] = c.endpoints.channels()
    c.endpoints.renew()
    assert stubs.channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN
