"""rolloutd.aio.Client against the real binary: the same surface on grpc.aio."""

from __future__ import annotations

import asyncio
import signal

import pytest

import rolloutd
import rolloutd.aio
from fakes import CuttingProxy, FakeServer, ok, status_error

import grpc


@pytest.mark.asyncio
async def test_append_get_scan_follow(server, shard):
    async with rolloutd.aio.Client(server.addr) as c:
        assert await c.health() == rolloutd.HealthStatus.SERVING
        res = await c.append(shard, [{"rollout_id": "r", "role": "user", "content": "q"}, {"rollout_id": "r", "role": "grade", "reward": 0.5}])
        assert [r.seq for r in res] == [1, 2]
        got = await c.get(shard, res[1].id)
        assert got.role is rolloutd.Role.GRADE and got.reward == 0.5
        with pytest.raises(rolloutd.NotFound):
            await c.get(shard, "nope")
        s = c.scan(shard, role="grade")
        assert [r.seq async for r in s] == [2] and s.cursor == 2

        seen = []
        follow = c.scan(shard, follow=True)

        async def consume():
            async for r in follow:
                seen.append(r.seq)

        task = asyncio.create_task(consume())
        for i in range(3):
            await c.append(shard, [{"content": str(i)}])
        for _ in range(200):
            if len(seen) == 5:
                break
            await asyncio.sleep(0.02)
        await follow.aclose()
        await asyncio.wait_for(task, 5)
        assert seen == [1, 2, 3, 4, 5]


@pytest.mark.asyncio
async def test_lost_answer_is_resent(server, shard):
    proxy = CuttingProxy(server.addr)
    try:
        async with rolloutd.aio.Client(proxy.addr) as c:
            await c.health()
            proxy.armed.set()
            res = await c.append(shard, [{"content": "a"}, {"content": "b"}])
            assert proxy.cuts == 1 and all(r.already_present for r in res)
            assert [r.seq for r in res] == [1, 2]
            assert len([r async for r in c.scan(shard)]) == 2
    finally:
        proxy.close()


@pytest.mark.asyncio
async def test_retry_by_reason():
    def backpressure(req, ctx):
        status_error(ctx, grpc.StatusCode.RESOURCE_EXHAUSTED, "full", reason="BACKPRESSURE", retry=0.2)

    def too_large(req, ctx):
        status_error(ctx, grpc.StatusCode.RESOURCE_EXHAUSTED, "big", reason="TOO_LARGE", field="records[0]")

    srv = FakeServer([backpressure, ok])
    try:
        async with rolloutd.aio.Client(srv.addr) as c:
            await c.append("s/1", [{"content": "a"}])
        assert len(srv.requests) == 2 and srv.times[1] - srv.times[0] >= 0.2
        assert srv.requests[0].request_id == srv.requests[1].request_id
    finally:
        srv.stop()
    srv = FakeServer([too_large, ok])
    try:
        async with rolloutd.aio.Client(srv.addr) as c:
            with pytest.raises(rolloutd.ResourceExhausted) as e:
                await c.append("s/1", [{"content": "a"}])
        assert e.value.reason == "TOO_LARGE" and e.value.field_violations[0].field == "records[0]"
        assert len(srv.requests) == 1
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_follow_resumes_across_a_restart(start_server, tmp_path, shard):
    store = str(tmp_path / "store")
    srv = start_server(store=store)
    async with rolloutd.aio.Client(srv.addr) as c:
        for i in range(5):
            await c.append(shard, [{"content": "before %d" % i}])
        seen = []
        follow = c.scan(shard, follow=True)

        async def consume():
            async for r in follow:
                seen.append(r.content)

        task = asyncio.create_task(consume())
        while len(seen) < 5:
            await asyncio.sleep(0.02)
        assert await asyncio.get_running_loop().run_in_executor(None, srv.stop, signal.SIGTERM) == 0
        start_server(store=store, addr=srv.addr)
        for i in range(5):
            await c.append(shard, [{"content": "after %d" % i}])
        for _ in range(500):
            if len(seen) == 10:
                break
            await asyncio.sleep(0.02)
        await follow.aclose()
        await asyncio.wait_for(task, 5)
    assert seen == ["before %d" % i for i in range(5)] + ["after %d" % i for i in range(5)]
    assert follow.reconnects >= 1
