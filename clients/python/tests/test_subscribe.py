"""Subscribe against the real binary: every shard under a prefix, those
created mid-stream included; a resume across a server restart that repeats
and misses nothing; a consumer's commits that a new subscription starts
after; CONSUMER_RESET after a reset; the split between members; and the
consumer calls. The asyncio client does the same in test_aio_* below."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import uuid
from typing import Callable, Dict, List, Tuple

import pytest

import rolloutd
import rolloutd.aio
from conftest import Server


def log_entry(line: str) -> dict:
    try:
        return json.loads(line)
    except ValueError:
        return {}


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Collector:
    """Iterates a subscription in a thread, keeping what it yields."""

    def __init__(self, sub: rolloutd.Subscription) -> None:
        self.sub = sub
        self.batches: List[rolloutd.Batch] = []
        self.error: BaseException = None  # type: ignore[assignment]
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            for b in self.sub:
                self.batches.append(b)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def seqs(self) -> Dict[str, List[int]]:
        out: Dict[str, List[int]] = {}
        for b in list(self.batches):
            out.setdefault(b.shard, []).extend(r.seq for r in b.records)
        return out

    def count(self) -> int:
        return sum(len(b.records) for b in list(self.batches))

    def stop(self) -> None:
        self.sub.close()
        self._t.join(10)
        assert not self._t.is_alive()


@pytest.fixture
def prefix() -> str:
    return "sub/" + uuid.uuid4().hex[:12]


# New shards are found by listing the prefix every watch interval (5 s by
# default); a short one keeps these tests fast.
FAST_WATCH = ["--subscribe-watch-interval", "200ms"]


@pytest.fixture(scope="module")
def server(rolloutd_bin, tmp_path_factory):
    s = Server(rolloutd_bin, str(tmp_path_factory.mktemp("store")), FAST_WATCH).start()
    yield s
    s.kill()


def append(c: rolloutd.Client, shard: str, n: int, tag: str = "") -> List[int]:
    return [r.seq for r in c.append(shard, [{"content": "%s%d" % (tag, i), "rollout_id": "r"} for i in range(n)])]


def test_every_shard_under_the_prefix_and_new_ones_mid_stream(server, prefix):
    with rolloutd.Client(server.addr) as c:
        append(c, prefix + "/a", 3)
        append(c, prefix + "/b", 2)
        append(c, prefix + "x/other", 1)  # not under the prefix
        with c.subscribe(prefix, start="earliest") as sub:
            assert sub.consumer_generation == 0
            got = Collector(sub)
            assert wait_for(lambda: got.count() == 5), got.seqs()
            append(c, prefix + "/a", 2)
            append(c, prefix + "/new/c", 4)  # created mid-stream
            assert wait_for(lambda: got.count() == 11, 30), got.seqs()
            time.sleep(0.3)  # nothing more may arrive
            got.stop()
    assert got.error is None, got.error
    assert got.seqs() == {prefix + "/a": [1, 2, 3, 4, 5], prefix + "/b": [1, 2], prefix + "/new/c": [1, 2, 3, 4]}
    assert sub.positions == {prefix + "/a": 5, prefix + "/b": 2, prefix + "/new/c": 4}


def test_latest_delivers_only_what_comes_after_the_start(server, prefix):
    with rolloutd.Client(server.addr) as c:
        append(c, prefix + "/a", 3)
        with c.subscribe(prefix, start="latest") as sub:
            got = Collector(sub)
            append(c, prefix + "/a", 2)
            assert wait_for(lambda: got.count() == 2), got.seqs()
            got.stop()
    assert got.seqs() == {prefix + "/a": [4, 5]}
    # Where it started the shard came with the started message, not as a
    # batch of no records.
    assert all(b.records for b in got.batches), got.batches


def test_resume_across_a_restart_repeats_and_misses_nothing(start_server, tmp_path, prefix):
    store = str(tmp_path / "store")
    srv = start_server(store=store, args=FAST_WATCH)
    shards = [prefix + "/a", prefix + "/b"]
    with rolloutd.Client(srv.addr, timeout=30) as c:
        for s in shards:
            append(c, s, 5, "before")
        with c.subscribe(prefix, start="earliest", reconnect_timeout=30) as sub:
            got = Collector(sub)
            assert wait_for(lambda: got.count() == 10), got.seqs()
            assert srv.stop(signal.SIGTERM) == 0, "".join(srv.log[-20:])
            # Appends while the server is down are retried until it is back.
            writer = threading.Thread(target=lambda: append(c, shards[0], 1, "during"))
            writer.start()
            time.sleep(0.3)
            again = start_server(store=store, addr=srv.addr, args=FAST_WATCH)
            writer.join(30)
            for s in shards:
                append(c, s, 3, "after")
            assert wait_for(lambda: got.count() == 17, 30), got.seqs()
            time.sleep(0.3)
            got.stop()
    assert got.error is None, got.error
    assert got.seqs() == {shards[0]: list(range(1, 10)), shards[1]: list(range(1, 9))}
    contents = [r.content for b in got.batches if b.shard == shards[0] for r in b.records]
    assert contents == ["before%d" % i for i in range(5)] + ["during0"] + ["after%d" % i for i in range(3)]
    assert sub.reconnects >= 1
    # It resumed from the cursors received, not from the start again.
    resumed = [e for e in map(log_entry, again.log) if e.get("method") == "Subscribe" and e.get("msg") == "rpc started"]
    assert resumed and resumed[0]["positions"] == 2, resumed


def test_latest_resumes_a_shard_it_received_nothing_of(start_server, tmp_path, prefix):
    """start="latest", then a break before a shard's first record: the
    resumed subscription starts that shard at the cursor the first stream
    named in its started message, not at its last seq at the resume, so the record committed
    during the break is delivered."""
    store = str(tmp_path / "store")
    srv = start_server(store=store, args=FAST_WATCH)
    a, b = prefix + "/a", prefix + "/b"
    # The subscription resumes after its first backoff (>= 0.5 s), long
    # after the appends below that the restarted server takes at once.
    slow = rolloutd.RetryPolicy(first_backoff=1.0, max_backoff=1.0)
    with rolloutd.Client(srv.addr, timeout=30) as c, rolloutd.Client(srv.addr, timeout=30, retry=slow) as sc:
        append(c, a, 3)
        append(c, b, 3)
        with sc.subscribe(prefix, start="latest", reconnect_timeout=30) as sub:
            got = Collector(sub)
            append(c, b, 1)
            assert wait_for(lambda: got.count() == 1), got.seqs()
            assert srv.stop(signal.SIGTERM) == 0
            start_server(store=store, addr=srv.addr, args=FAST_WATCH)
            append(c, a, 1, "during")
            assert wait_for(lambda: sub.reconnects >= 1)
            append(c, a, 1, "after")
            assert wait_for(lambda: got.count() == 3), got.seqs()
            time.sleep(0.3)
            got.stop()
    assert got.seqs() == {a: [4, 5], b: [4]}


def test_commit_then_a_new_subscription_resumes_after_it(server, prefix):
    a, b = prefix + "/a", prefix + "/b"
    with rolloutd.Client(server.addr) as c:
        append(c, a, 4)
        append(c, b, 4)
        with c.subscribe(prefix, consumer="trainer") as sub:
            assert sub.consumer_generation == 0  # no such consumer yet: earliest
            seen: List[Tuple[str, int]] = []
            for batch in sub:
                seen.extend((batch.shard, r.seq) for r in batch.records)
                if len(seen) == 8:
                    batch.commit()
                    break
            assert sub.consumer_generation == 1  # the first commit created it
        info = c.describe_consumer(prefix, "trainer", include_positions=True)
        assert info.positions == {a: 4, b: 4} and info.generation == 1 and info.lag_records == 0
        append(c, a, 2)
        append(c, b, 1)
        assert c.describe_consumer(prefix, "trainer").lag_records == 3
        # The same consumer, default start: after the committed positions.
        with c.subscribe(prefix, consumer="trainer") as sub2:
            assert sub2.consumer_generation == 1
            got = Collector(sub2)
            assert wait_for(lambda: got.count() == 3), got.seqs()
            time.sleep(0.3)
            got.stop()
        assert got.seqs() == {a: [5, 6], b: [5]}
        # Nothing committed: a third subscription reads the same again.
        with c.subscribe(prefix, consumer="trainer", start="consumer") as sub3:
            got = Collector(sub3)
            assert wait_for(lambda: got.count() == 3), got.seqs()
            got.stop()
        assert got.seqs() == {a: [5, 6], b: [5]}


def test_consumer_reset_refuses_the_old_generation(server, prefix):
    a = prefix + "/a"
    with rolloutd.Client(server.addr) as c:
        append(c, a, 3)
        sub = c.subscribe(prefix, consumer="t")
        first = next(sub)
        first.commit()
        gen = sub.consumer_generation
        info = c.reset_consumer(prefix, "t", to="earliest")
        assert info.generation == gen + 1 and info.positions == {}
        append(c, a, 1)
        # The running member's commits cannot undo the reset.
        for b in sub:
            if any(r.seq == 4 for r in b.records):
                break
        with pytest.raises(rolloutd.ConsumerReset) as e:
            b.commit()
        assert e.value.generation == gen + 1 and e.value.reason == "CONSUMER_RESET"
        with pytest.raises(rolloutd.ConsumerReset):
            next(sub)  # the commit ended it
        assert c.describe_consumer(prefix, "t", include_positions=True).positions == {}
        # A new subscription starts at the reset positions.
        with c.subscribe(prefix, consumer="t", start="consumer") as again:
            assert again.consumer_generation == gen + 1
            assert [r.seq for r in next(again).records][:1] == [1]


def test_members_split_the_shards(server, prefix):
    shards = ["%s/actor-%d" % (prefix, i) for i in range(12)]
    with rolloutd.Client(server.addr) as c:
        for s in shards:
            append(c, s, 1)
        members = [Collector(c.subscribe(prefix, start="earliest", member=m, members=3).open()) for m in range(3)]
        assert wait_for(lambda: sum(m.count() for m in members) >= len(shards)), [m.seqs() for m in members]
        time.sleep(0.3)  # nothing more may arrive
        for m in members:
            m.stop()
        mine = [set(m.seqs()) for m in members]
    assert set().union(*mine) == set(shards)
    assert sum(len(m) for m in mine) == len(shards), "a shard was read by two members"
    assert all(mine), "a member got no shard of twelve"


def test_consumer_calls(server, prefix):
    with rolloutd.Client(server.addr) as c:
        append(c, prefix + "/a", 2)
        assert c.commit_consumer(prefix, "one", {prefix + "/a": 2}) == 1
        assert c.commit_consumer(prefix, "one", {prefix + "/a": 1}) == 1  # never backwards
        assert c.describe_consumer(prefix, "one", include_positions=True).positions == {prefix + "/a": 2}
        c.commit_consumer(prefix + "/a", "two", {prefix + "/a": 1})
        names = [(i.prefix, i.consumer) for i in c.all_consumers(prefix, page_size=1)]
        assert sorted(names) == [(prefix, "one"), (prefix + "/a", "two")]
        info = c.reset_consumer(prefix, "one", positions={prefix + "/a": 1})
        assert info.generation == 2 and info.positions == {prefix + "/a": 1}
        with pytest.raises(rolloutd.ConsumerReset) as e:
            c.commit_consumer(prefix, "one", {prefix + "/a": 2}, generation=1)
        assert e.value.generation == 2
        assert c.commit_consumer(prefix, "one", {prefix + "/a": 2}, generation=2) == 2
        c.delete_consumer(prefix, "one")
        with pytest.raises(rolloutd.NotFound):
            c.describe_consumer(prefix, "one")
        with pytest.raises(rolloutd.NotFound):
            c.delete_consumer(prefix, "one")
        with pytest.raises(rolloutd.NotFound):
            c.subscribe(prefix, consumer="one", start="consumer").open()


@pytest.mark.asyncio
async def test_aio_commit_and_resume_across_a_restart(start_server, tmp_path, prefix):
    store = str(tmp_path / "store")
    srv = start_server(store=store, args=FAST_WATCH)
    a = prefix + "/a"
    async with rolloutd.aio.Client(srv.addr, timeout=30) as c:
        await c.append(a, [{"content": str(i)} for i in range(3)])
        seen: List[int] = []
        async with c.subscribe(prefix, consumer="t", reconnect_timeout=30) as sub:

            async def consume():
                async for batch in sub:
                    seen.extend(r.seq for r in batch.records)
                    await batch.commit()

            task = asyncio.create_task(consume())
            for _ in range(500):
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.02)
            assert await asyncio.get_running_loop().run_in_executor(None, srv.stop, signal.SIGTERM) == 0
            start_server(store=store, addr=srv.addr, args=FAST_WATCH)
            await c.append(a, [{"content": str(i)} for i in range(2)])
            for _ in range(1000):
                if len(seen) == 5:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            await sub.aclose()
            await asyncio.wait_for(task, 5)
        assert seen == [1, 2, 3, 4, 5]
        assert sub.reconnects >= 1
        assert (await c.describe_consumer(prefix, "t", include_positions=True)).positions == {a: 5}
        # The reset refuses the old generation's commit (awaited).
        await c.reset_consumer(prefix, "t", positions={a: 1})
        sub = c.subscribe(prefix, consumer="t", start="earliest")
        batch = await sub.__anext__()
        await c.reset_consumer(prefix, "t", to="latest")
        with pytest.raises(rolloutd.ConsumerReset):
            await batch.commit()
        await sub.aclose()
