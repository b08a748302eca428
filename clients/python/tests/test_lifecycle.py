"""The shard lifecycle (list_shards, all_shards, describe_shard, batch_get,
delete_shard) against the real binary, blocking and asyncio, and
delete_shard's resends through a proxy that cuts its answer."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import grpc
import pytest

import rolloutd
import rolloutd.aio
from rolloutd import _retry, errors
from fakes import CuttingProxy

BIG = "x" * (200 << 10)


def fill(c: rolloutd.Client, shard: str) -> list:
    """24 records of 200 KiB: more than the server's 3 MiB BatchGet cap."""
    ids = []
    for i in range(4):
        recs = [{"id": "r-%d-%d" % (i, j), "content": BIG} for j in range(6)]
        c.append(shard, recs)
        ids += [r["id"] for r in recs]
    return ids


def test_lifecycle(server):
    prefix = "lc-" + uuid.uuid4().hex[:8]
    a, b = prefix + "/a", prefix + "/b"
    with rolloutd.Client(server.addr) as c:
        ids = fill(c, a)
        c.append(b, [{"id": "x", "content": "small"}])
        c.append(prefix + "-z/c", [{"id": "y"}])  # outside the prefix's segments

        # Page by hand: a page may be empty and still have a next one (here
        # "-z/c" stores before "/a", and is filtered out).
        pages, token = [], ""
        while True:
            page = c.list_shards(prefix, page_size=1, page_token=token)
            pages.append([s.shard for s in page.shards])
            assert all(s.summary is None for s in page.shards)
            if not page.next_page_token:
                break
            token = page.next_page_token
        assert [x for p in pages for x in p] == [a, b] and len(pages) >= 2
        listed = list(c.all_shards(prefix, page_size=1, include_summary=True))
        assert [s.shard for s in listed] == [a, b]
        assert listed[0].summary.records == 24 and listed[0].summary.last_seq == 24
        assert not listed[0].summary.deleted

        info = c.describe_shard(a)
        assert (info.shard, info.records, info.first_seq, info.last_seq) == (a, 24, 1, 24)
        assert info.bytes > 24 * len(BIG) and info.generations >= 1 and info.writer_here
        assert info.created_at is not None and info.last_commit_at is not None and info.deleted_at is None

        # Missing and repeated ids, and more than one response's worth of
        # bytes: every id answered, in request order.
        want = ["missing"] + ids + [ids[0]]
        got = c.batch_get(a, want, fields=["id", "content"])
        assert len(got) == len(want) and got[0] is None
        for rid, rec in zip(want[1:], got[1:]):
            assert rec is not None and rec.id == rid and len(rec.content) == len(BIG)
        assert [r.seq for r in got[1:4]] == [1, 2, 3]
        small = c.batch_get(b, ["x", "nope"], fields=["id"])
        assert small[0].id == "x" and small[0].content == "" and small[1] is None
        with pytest.raises(TypeError):
            c.batch_get(b, "x")
        with pytest.raises(ValueError):
            c.batch_get(b, [])

        with pytest.raises(rolloutd.SeqMismatch) as e:
            c.delete_shard(a, expected_last_seq=3)
        assert isinstance(e.value, rolloutd.FailedPrecondition) and e.value.reason == "SEQ_MISMATCH"
        assert e.value.last_seq == 24 and not e.value.may_have_taken_effect
        assert c.describe_shard(a).records == 24, "a refused delete deleted nothing"

        d = c.delete_shard(a, expected_last_seq=info.last_seq)
        assert (d.records, d.last_seq, d.already_deleted) == (24, 24, False)
        for call in (lambda: c.get(a, ids[0]), lambda: c.describe_shard(a), lambda: c.batch_get(a, ids[:2])):
            with pytest.raises(rolloutd.ShardDeleted) as e:
                call()
            assert isinstance(e.value, rolloutd.NotFound) and e.value.reason == "SHARD_DELETED"
        again = c.delete_shard(a)
        assert again.already_deleted and again.records == 0 and again.last_seq == 24
        summary = next(s.summary for s in c.all_shards(prefix, include_summary=True) if s.shard == a)
        assert summary.deleted and summary.deleted_at is not None and summary.last_seq == 24

        with pytest.raises(rolloutd.NotFound) as e:
            c.describe_shard(prefix + "/never")
        assert not isinstance(e.value, rolloutd.ShardDeleted)
        res = c.append(a, [{"id": "after"}])
        assert res[0].seq == 25, "a new incarnation continues the seqs"


@pytest.mark.asyncio
async def test_lifecycle_aio(server):
    prefix = "lca-" + uuid.uuid4().hex[:8]
    a = prefix + "/a"
    with rolloutd.Client(server.addr) as sync:
        ids = fill(sync, a)
    async with rolloutd.aio.Client(server.addr) as c:
        await c.append(prefix + "/b", [{"id": "x"}])
        assert [s.shard async for s in c.all_shards(prefix, page_size=1)] == [a, prefix + "/b"]
        page = await c.list_shards(prefix, include_summary=True)
        assert page.next_page_token == "" and page.shards[0].summary.records == 24
        info = await c.describe_shard(a)
        assert info.last_seq == 24
        got = await c.batch_get(a, ids + ["missing"], fields=["id", "content"])
        assert [r.id for r in got[:-1]] == ids and got[-1] is None
        assert all(len(r.content) == len(BIG) for r in got[:-1])
        with pytest.raises(rolloutd.SeqMismatch) as e:
            await c.delete_shard(a, expected_last_seq=1)
        assert e.value.last_seq == 24
        d = await c.delete_shard(a, expected_last_seq=24)
        assert d.records == 24 and not d.already_deleted
        with pytest.raises(rolloutd.ShardDeleted):
            await c.describe_shard(a)
        assert (await c.delete_shard(a)).already_deleted


def _delete_through_cut(server, proxy, shard, delete):
    """Runs delete() (through proxy, armed to cut the delete's answer after
    the server wrote the tombstone); between the cut and any resend the
    proxy holds the reconnect, and the shard is written again directly: its
    next incarnation. Returns delete's result or exception."""
    proxy.gate = threading.Event()
    proxy.armed.set()
    out = {}

    def run():
        try:
            out["result"] = delete()
        except Exception as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while proxy.cuts == 0 and t.is_alive():
        assert time.monotonic() < deadline, "the proxy cut nothing"
        time.sleep(0.005)
    assert proxy.cuts == 1, "the delete returned before the proxy cut its answer: %r" % out
    with rolloutd.Client(server.addr) as direct:
        assert direct.append(shard, [{"id": "new", "content": "written after the delete"}])[0].seq == 2
    proxy.gate.set()
    t.join(60)
    assert not t.is_alive()
    return out.get("result"), out.get("error")


def _check_new_incarnation_kept(server, shard):
    with rolloutd.Client(server.addr) as direct:
        assert direct.get(shard, "new").seq == 2, "the record appended after the delete was deleted"
        with pytest.raises(rolloutd.NotFound):
            direct.get(shard, "old")


def test_delete_without_expected_seq_is_not_resent(server, shard):
    """Its answer lost, a delete without expected_last_seq raises instead
    of resending: a resend would delete the shard's next incarnation."""
    proxy = CuttingProxy(server.addr)
    try:
        with rolloutd.Client(proxy.addr, timeout=30) as c:
            c.append(shard, [{"id": "old"}])
            res, err = _delete_through_cut(server, proxy, shard, lambda: c.delete_shard(shard))
            assert res is None and isinstance(err, rolloutd.Unavailable), (res, err)
            assert err.may_have_taken_effect and err.reason is None
        _check_new_incarnation_kept(server, shard)
    finally:
        proxy.close()


def test_conditional_delete_is_resent(server, shard):
    """With expected_last_seq the delete is resent: after a write in
    between, the resend answers SEQ_MISMATCH, flagged as possibly preceded
    by a delete that landed (it was), and the new records survive; with no
    write in between, the resend finds the tombstone: already_deleted."""
    proxy = CuttingProxy(server.addr)
    try:
        with rolloutd.Client(proxy.addr, timeout=30) as c:
            c.append(shard, [{"id": "old"}])
            res, err = _delete_through_cut(server, proxy, shard, lambda: c.delete_shard(shard, expected_last_seq=1))
            assert res is None and isinstance(err, rolloutd.SeqMismatch), (res, err)
            assert err.may_have_taken_effect and err.last_seq == 2
            _check_new_incarnation_kept(server, shard)

            proxy.armed.set()
            res = c.delete_shard(shard, expected_last_seq=2)
            assert proxy.cuts == 2 and res.already_deleted and res.last_seq == 2
    finally:
        proxy.close()


@pytest.mark.asyncio
async def test_aio_delete_resends(server, shard):
    """The asyncio client follows the same rule (its answer cut, no write in
    between): not resent without expected_last_seq, resent with it."""
    proxy = CuttingProxy(server.addr)
    try:
        async with rolloutd.aio.Client(proxy.addr, timeout=30) as c:
            await c.append(shard, [{"id": "old"}])
            proxy.armed.set()
            with pytest.raises(rolloutd.Unavailable) as e:
                await c.delete_shard(shard)
            assert proxy.cuts == 1 and e.value.may_have_taken_effect
            await c.append(shard, [{"id": "new"}])
            proxy.armed.set()
            res = await c.delete_shard(shard, expected_last_seq=2)
            assert proxy.cuts == 2 and res.already_deleted and res.last_seq == 2
    finally:
        proxy.close()


U = grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("code,reason,delay,plain,conditional", [
    (U, None, None, False, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, None, None, False, True),
    (U, "NOT_COMMITTED", 0.1, True, True),
    (U, "OUTCOME_UNKNOWN", None, False, False),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED", 1.0, True, True),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED", None, False, False),
    (grpc.StatusCode.FAILED_PRECONDITION, "SEQ_MISMATCH", None, False, False),
    (grpc.StatusCode.NOT_FOUND, None, None, False, False),
    (grpc.StatusCode.CANCELLED, None, None, False, False),
])
def test_delete_retry_policy(code, reason, delay, plain, conditional):
    err = errors.from_status(code, "m", None)
    err.reason, err.retry_delay = reason, delay
    assert _retry.delete_retry(err) is plain
    assert _retry.conditional_delete_retry(err) is conditional


def test_reason_classes():
    from rolloutd._proto.rolloutd_vendor.google.rpc import error_details_pb2, status_pb2

    def trailer(code, reason, md=None):
        info = error_details_pb2.ErrorInfo(domain="rolloutd.io", reason=reason, metadata=md or {})
        st = status_pb2.Status(code=code.value[0], message="m")
        d = st.details.add()
        d.type_url, d.value = "type.googleapis.com/google.rpc.ErrorInfo", info.SerializeToString()
        return [("grpc-status-details-bin", st.SerializeToString())]

    e = errors.from_status(grpc.StatusCode.NOT_FOUND, "m", trailer(grpc.StatusCode.NOT_FOUND, "SHARD_DELETED"))
    assert type(e) is rolloutd.ShardDeleted and isinstance(e, LookupError)
    e = errors.from_status(grpc.StatusCode.FAILED_PRECONDITION, "m", trailer(grpc.StatusCode.FAILED_PRECONDITION, "SEQ_MISMATCH", {"last_seq": "7"}))
    assert type(e) is rolloutd.SeqMismatch and e.last_seq == 7
    # A reason under another code keeps the code's class.
    e = errors.from_status(grpc.StatusCode.UNAVAILABLE, "m", trailer(grpc.StatusCode.UNAVAILABLE, "SHARD_DELETED"))
    assert type(e) is rolloutd.Unavailable
