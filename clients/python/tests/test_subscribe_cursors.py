"""A subscription's bookkeeping without the real server: the cursors it
resumes from, the repeats it drops, the positions a commit stores, and the
consumer generation it keeps across a resume (rolloutd._subscribe), and the
same through a scripted fake server that breaks the stream."""

from __future__ import annotations

import asyncio

import grpc
import pytest

import rolloutd
import rolloutd.aio
from fakes import FakeServer, ok, status_error
from rolloutd import _calls, errors
from rolloutd._proto.rollout.v1 import rollout_pb2
from rolloutd._subscribe import Cursors

FAST = rolloutd.RetryPolicy(first_backoff=0.01, max_backoff=0.05)


def recs(*seqs):
    return [rollout_pb2.Record(seq=s, id="id-%d" % s) for s in seqs]


def test_cursors_track_each_shard_and_drop_repeats():
    c = Cursors({"p/a": 3}, log=True)
    # Records at or below a shard's cursor are repeats: dropped, and a batch
    # that brings nothing new is no batch.
    assert c.accept("p/a", recs(2, 3), 3, False) is None
    i, got, cursor = c.accept("p/a", recs(3, 4, 5), 6, False)
    assert (i, [r.seq for r in got], cursor) == (1, [4, 5], 6)
    # A cursor never moves backwards, even when a repeat carries a new record.
    i, got, cursor = c.accept("p/a", recs(5, 7), 5, False)
    assert ([r.seq for r in got], cursor) == ([7], 6)
    # A shard never seen starts wherever the server says.
    i, got, cursor = c.accept("p/b", recs(1), 1, False)
    assert (i, cursor) == (3, 1)
    # A cursor that moves without records (filtered out) is news.
    assert c.accept("p/b", [], 9, False)[2] == 9
    # A deletion is news, even at the same cursor, but only once.
    assert c.accept("p/b", [], 9, True) is not None
    assert c.accept("p/b", [], 9, True) is None
    assert c.accept("p/b", [], 12, True) is not None
    assert c.positions() == {"p/a": 6, "p/b": 12}


def test_commit_covers_the_batches_up_to_it():
    c = Cursors({}, log=True)
    c.accept("p/a", recs(1, 2), 2, False)  # 1
    c.accept("p/b", recs(1), 1, False)  # 2
    c.accept("p/a", recs(3), 3, False)  # 3
    assert c.pending(2) == {"p/a": 2, "p/b": 1}
    assert c.pending(3) == {"p/a": 3, "p/b": 1}
    c.committed(2)
    assert c.pending(3) == {"p/a": 3}
    assert c.pending(2) == {}
    c.committed(3)
    assert c.pending(3) == {}
    # Without a consumer nothing is logged.
    n = Cursors({}, log=False)
    n.accept("p/a", recs(1), 1, False)
    assert n.pending(1) == {}


def test_generation_is_kept_across_resumes():
    c = Cursors({}, log=True)
    c.started(0, "t", "p", True)  # the consumer did not exist yet
    c.adopt(2)  # the first commit created it
    assert c.generation == 2
    c.started(2, "t", "p", True)
    with pytest.raises(rolloutd.ConsumerReset) as e:
        c.started(3, "t", "p", True)
    assert e.value.generation == 3 and e.value.reason == errors.CONSUMER_RESET
    assert isinstance(e.value, rolloutd.FailedPrecondition)
    # Deleted: a reset when the stream starts from the consumer's positions.
    with pytest.raises(rolloutd.ConsumerReset):
        c.started(0, "t", "p", True)
    c.started(0, "t", "p", False)  # from earliest or latest: its positions are not read


def test_a_consumer_created_after_the_start_may_not_be_reset_before_a_resume():
    # Started before the consumer existed: a resume may find it created
    # (generation 1), not created and reset (2), which the cursors held
    # would undo.
    c = Cursors({}, log=True)
    c.started(0, "t", "p", True)
    c.started(1, "t", "p", True)
    assert c.generation == 1
    d = Cursors({}, log=True)
    d.started(0, "t", "p", False)
    with pytest.raises(rolloutd.ConsumerReset):
        d.started(2, "t", "p", False)


def test_latest_starts_count_as_received():
    c = Cursors({"p/x": 7}, log=False)
    c.fixed({"p/a": 3, "p/x": 2, "p/e": 0})
    assert c.positions() == {"p/a": 3, "p/x": 7, "p/e": 0}
    assert c.accept("p/a", recs(3), 3, False) is None  # at or below the start: nothing new
    # With a consumer, a commit stores the starts, before any batch.
    k = Cursors({}, log=True)
    k.fixed({"p/a": 3, "p/e": 0})
    assert k.pending(0) == {"p/a": 3, "p/e": 0}


def test_request_validation():
    def req(**kw):
        base = dict(consumer=None, start=None, member=0, members=1, positions=None, rollout_id=None, role=None, include_in_training=None, fields=None)
        base.update(kw)
        return _calls.subscribe_request("p", **base)

    assert req(start="latest", member=2, members=3).start == rollout_pb2.SUBSCRIBE_START_LATEST
    for bad in (dict(member=1, members=1), dict(members=0), dict(start="newest"), dict(start="consumer"), dict(positions={"p/a": -1})):
        with pytest.raises(ValueError):
            req(**bad)
    with pytest.raises(ValueError):
        _calls.reset_consumer_request("p", "t", "latest", {"p/a": 1})


def started(gen):
    return rollout_pb2.SubscribeResponse(started=rollout_pb2.SubscribeStarted(consumer_generation=gen))


def batch(shard, seqs, cursor, deleted=False):
    return rollout_pb2.SubscribeResponse(shard=shard, records=recs(*seqs), cursor=cursor, shard_deleted=deleted)


def interrupted(ctx):
    status_error(ctx, grpc.StatusCode.UNAVAILABLE, "shutting down", reason="SCAN_INTERRUPTED")


def first_stream(req, ctx):
    yield started(3)
    yield batch("p/a", [1, 2], 2)
    yield batch("p/b", [4, 5], 5)
    interrupted(ctx)


def repeating_stream(gen):
    def stream(req, ctx):
        # A server that repeats what the client already has: the client
        # drops it all the same.
        yield started(gen)
        yield batch("p/a", [1, 2], 2)
        yield batch("p/a", [2, 3], 3)
        yield batch("p/b", [], 7, deleted=True)
        interrupted(ctx)

    return stream


def test_resume_sends_the_cursors_and_yields_no_repeat():
    srv = FakeServer([ok], subscribes=[first_stream, repeating_stream(3)])
    try:
        with rolloutd.Client(srv.addr, retry=FAST) as c:
            sub = c.subscribe("p", consumer="t", reconnect_timeout=5)
            got = []
            for b in sub:
                got.append((b.shard, [r.seq for r in b.records], b.cursor, b.deleted))
                if len(got) == 2:
                    early = b
                if b.deleted:
                    break
            assert got == [("p/a", [1, 2], 2, False), ("p/b", [4, 5], 5, False), ("p/a", [3], 3, False), ("p/b", [], 7, True)]
            assert sub.reconnects == 1 and sub.consumer_generation == 3
            first, second = srv.subscribe_requests
            assert dict(first.positions) == {} and first.consumer == "t" and first.prefix == "p"
            assert dict(second.positions) == {"p/a": 2, "p/b": 5} and second.consumer == "t"
            # A batch's commit stores the positions up to it, not later ones.
            early.commit()
            sub.commit()
            sub.commit()  # nothing new: no call
            sub.close()
        assert [dict(r.positions) for r in srv.commits] == [{"p/a": 2, "p/b": 5}, {"p/a": 3, "p/b": 7}]
        assert all(r.generation == 3 and r.consumer == "t" and r.prefix == "p" for r in srv.commits)
        assert sub.positions == {"p/a": 3, "p/b": 7}
    finally:
        srv.stop()


def test_resume_at_another_generation_raises_consumer_reset():
    srv = FakeServer([ok], subscribes=[first_stream, repeating_stream(4)])
    try:
        with rolloutd.Client(srv.addr, retry=FAST) as c:
            sub = c.subscribe("p", consumer="t", reconnect_timeout=5, timeout=10)
            with pytest.raises(rolloutd.ConsumerReset) as e:
                for _ in sub:
                    pass
            assert e.value.generation == 4
            assert sub.positions == {"p/a": 2, "p/b": 5}
            with pytest.raises(rolloutd.ConsumerReset):  # it stays ended
                next(sub)
    finally:
        srv.stop()


def test_commit_without_consumer_is_a_value_error():
    srv = FakeServer([ok], subscribes=[first_stream])
    try:
        with rolloutd.Client(srv.addr, retry=FAST) as c:
            with c.subscribe("p") as sub:
                assert sub.consumer_generation == 3
                with pytest.raises(ValueError):
                    next(sub).commit()
    finally:
        srv.stop()


def test_commit_refused_as_reset_ends_the_subscription():
    srv = FakeServer([ok], subscribes=[first_stream])
    try:
        with rolloutd.Client(srv.addr, retry=FAST) as c:
            sub = c.subscribe("p", consumer="t")
            b = next(sub)
            srv.commit_generation = 4  # reset meanwhile
            with pytest.raises(rolloutd.ConsumerReset) as e:
                b.commit()
            assert e.value.generation == 4
            with pytest.raises(rolloutd.ConsumerReset):
                next(sub)
        assert len(srv.commits) == 1, "a commit refused as CONSUMER_RESET was resent"
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_aio_resume_and_commit():
    srv = FakeServer([ok], subscribes=[first_stream, repeating_stream(3)])
    try:
        async with rolloutd.aio.Client(srv.addr, retry=FAST) as c:
            got = []
            async with c.subscribe("p", consumer="t", reconnect_timeout=5) as sub:
                assert sub.consumer_generation == 3
                async for b in sub:
                    got.append((b.shard, [r.seq for r in b.records], b.cursor))
                    if len(got) == 3:
                        await b.commit()
                        break
            assert got == [("p/a", [1, 2], 2), ("p/b", [4, 5], 5), ("p/a", [3], 3)]
            assert sub.reconnects == 1
        assert [dict(r.positions) for r in srv.commits] == [{"p/a": 3, "p/b": 5}]
    finally:
        srv.stop()
