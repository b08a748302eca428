"""The blocking client against the real rolloutd binary: append, get, scan,
follow, error mapping, and an Append whose answer is lost."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

import rolloutd
from fakes import CuttingProxy


def turn(i: int, **kw):
    d = {"rollout_id": "r-%d" % (i // 3), "role": "assistant", "content": "turn %d" % i, "sequence_order": i}
    d.update(kw)
    return d


def test_append_get_scan(server, shard):
    created = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    with rolloutd.Client(server.addr) as c:
        assert c.health() == rolloutd.HealthStatus.SERVING
        res = c.append(shard, [
            {"id": "t-0", "rollout_id": "r-0", "role": rolloutd.Role.USER, "content": "2+2?", "created_at": created,
             "input_tokens": [1, 2, 3], "metadata": {"k": "v"}, "relationships": [{"target_id": "x", "relation": "reply_to", "weight": 0.5}]},
            {"rollout_id": "r-0", "role": "ROLE_GRADE", "reward": 1.0, "include_in_training": True},
        ])
        assert [r.seq for r in res] == [1, 2]
        assert res[0].id == "t-0" and res[1].id and not any(r.already_present for r in res)
        got = c.get(shard, "t-0")
        assert isinstance(got.seq, int) and got.seq == 1
        assert got.role is rolloutd.Role.USER
        assert got.created_at == created and got.created_at.tzinfo is not None
        assert got.created_at_ns == int(created.timestamp()) * 10**9 + 123456000
        assert got.reward is None and got.score is None
        assert got.input_tokens == [1, 2, 3] and got.metadata == {"k": "v"}
        assert got.relationships == [rolloutd.Relationship("x", "reply_to", 0.5)]
        grade = c.get(shard, res[1].id)
        assert grade.reward == 1.0 and grade.include_in_training and grade.created_at is not None
        recs = list(c.scan(shard))
        assert [r.id for r in recs] == ["t-0", res[1].id]
        # Filters, fields and the cursor.
        s = c.scan(shard, role="grade", fields=["reward"])
        only = list(s)
        assert [r.seq for r in only] == [2] and only[0].content == "" and only[0].reward == 1.0
        assert s.cursor == 2
        s = c.scan(shard, role=rolloutd.Role.SYSTEM)
        assert list(s) == [] and s.cursor == 2, "the batch cursor passes filtered records"
        assert [r.seq for r in c.scan(shard, after_seq=1)] == [2]
        assert [r.seq for r in c.scan(shard, limit=1)] == [1]


def test_records_as_messages_and_views(server, shard):
    from rolloutd._proto.rollout.v1 import rollout_pb2

    with rolloutd.Client(server.addr) as c:
        c.append(shard, [rollout_pb2.Record(id="m", content="msg"), rolloutd.Record(id="v", content="view", score=0.25)])
        assert c.get(shard, "v").score == 0.25
        assert c.get(shard, "m").to_dict()["content"] == "msg"


def test_follow(server, shard):
    with rolloutd.Client(server.addr) as c:
        c.append(shard, [turn(0)])
        seen = []
        s = c.scan(shard, follow=True)

        def follow():
            for r in s:
                seen.append(r.seq)

        t = threading.Thread(target=follow)
        t.start()
        for i in range(1, 6):
            c.append(shard, [turn(i)])
        deadline = time.monotonic() + 10
        while len(seen) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        s.close()
        t.join(10)
        assert not t.is_alive()
        assert seen == [1, 2, 3, 4, 5, 6]
        assert s.cursor == 6


def test_error_mapping(server, shard):
    with rolloutd.Client(server.addr) as c:
        with pytest.raises(rolloutd.NotFound) as e:
            c.get(shard, "missing")
        assert "shard not found" in e.value.message and e.value.reason is None
        with pytest.raises(rolloutd.InvalidArgument):
            c.append("Not A Shard", [turn(0)])
        c.append(shard, [{"id": "same", "content": "a"}])
        with pytest.raises(rolloutd.NotFound) as e:
            c.get(shard, "missing")
        assert '"missing"' in e.value.message and isinstance(e.value, LookupError)
        with pytest.raises(rolloutd.AlreadyExists):
            c.append(shard, [{"id": "same", "content": "b"}])
        # Over the per-record limit: TOO_LARGE with a BadRequest; never retried.
        t0 = time.monotonic()
        with pytest.raises(rolloutd.ResourceExhausted) as e:
            c.append(shard, [{"content": "x" * (4 << 20)}])
        assert time.monotonic() - t0 < 2
        assert e.value.reason == "TOO_LARGE"
        assert [v.field for v in e.value.field_violations] == ["records[0]"]
        assert e.value.request_id


def test_largest_record_reads_back(server, shard):
    # The server's default --max-record-bytes is 4 MiB - 177: the client's
    # receive limit must take it back through Get and Scan.
    with rolloutd.Client(server.addr) as c:
        from rolloutd._proto.rollout.v1 import rollout_pb2

        rec = rollout_pb2.Record(id="big", binary_payload=b"")
        overhead = len(rec.SerializeToString()) + 2 + 4  # field 24: a 2-byte tag and a 4-byte length
        rec.binary_payload = b"\1" * (4194127 - overhead)
        assert len(rec.SerializeToString()) == 4194127
        c.append(shard, [rec])
        assert len(c.get(shard, "big").binary_payload) == len(rec.binary_payload)
        assert [r.id for r in c.scan(shard)] == ["big"]


def test_lost_answer_is_resent_with_the_same_request_id(server, shard):
    """The connection dies after the Append committed and before its answer
    arrived: the client resends the same request_id, and learns the records
    landed (same ids, already_present), with nothing stored twice."""
    proxy = CuttingProxy(server.addr)
    try:
        with rolloutd.Client(proxy.addr, timeout=20) as c:
            c.health()
            proxy.armed.set()
            res = c.append(shard, [turn(0), turn(1), {"id": "own", "content": "mine"}])
            assert proxy.cuts == 1, "the proxy did not cut the first answer"
            assert proxy.connections >= 2
            assert all(r.already_present for r in res), res
            assert [r.seq for r in res] == [1, 2, 3]
            assert res[2].id == "own"
        with rolloutd.Client(server.addr) as direct:
            stored = list(direct.scan(shard))
            assert [r.id for r in stored] == [r.id for r in res]
            assert stored[0].content == "turn 0"
    finally:
        proxy.close()
