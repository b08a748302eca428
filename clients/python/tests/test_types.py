"""Dict validation and the Python-facing types."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest

import rolloutd
from rolloutd._proto.rollout.v1 import rollout_pb2
from rolloutd.types import records_to_messages, to_message


def test_role_matches_the_proto():
    names = {v.name: v.number for v in rollout_pb2.Role.DESCRIPTOR.values}
    assert {"ROLE_" + r.name: int(r) for r in rolloutd.Role} == names


@pytest.mark.parametrize("value", [rolloutd.Role.GRADE, 5, "ROLE_GRADE", "grade", "Grade"])
def test_role_spellings(value):
    assert to_message({"role": value}).role == 5


@pytest.mark.parametrize("record,exc,needle", [
    ({"rolout_id": "x"}, ValueError, "'rolout_id'"),
    ({"role": "judge"}, ValueError, "'judge'"),
    ({"role": 99}, ValueError, "99"),
    ({"relationships": [{"target": "x"}]}, ValueError, "'target'"),
    ({"created_at": dt.datetime(2026, 1, 1)}, ValueError, "naive"),
    ({"reward": "high"}, TypeError, "records[0].reward"),
    ({"input_tokens": "123"}, TypeError, "records[0].input_tokens"),
    ({"sequence_order": 1.5}, TypeError, "records[0].sequence_order"),
    ({"metadata": [("a", "b")]}, TypeError, "records[0].metadata"),
])
def test_bad_dicts_name_the_problem(record, exc, needle):
    with pytest.raises(exc) as e:
        records_to_messages([record])
    assert needle in str(e.value)


def test_one_record_instead_of_a_list():
    with pytest.raises(TypeError, match="list of records"):
        records_to_messages({"content": "x"})


def test_none_means_unset():
    m = to_message({"reward": None, "content": None, "role": None})
    assert not m.HasField("reward") and m.content == "" and m.role == 0


def test_record_view():
    ts = dt.datetime(2026, 5, 6, 7, 8, 9, 999999, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    msg = to_message({"seq": 7, "created_at": ts, "reward": 0.1, "role": "tool", "loss_mask": b"\1\0"})
    msg.created_at.nanos += 123  # nanoseconds a datetime cannot hold
    r = rolloutd.Record(msg)
    assert r.seq == 7 and r.role is rolloutd.Role.TOOL
    assert r.created_at == ts and r.created_at.tzinfo == dt.timezone.utc
    assert r.created_at_ns % 1000 == 123
    assert r.reward == pytest.approx(0.1) and r.advantage is None
    assert r.loss_mask == b"\1\0"
    assert r.message is msg
    back = rolloutd.Record(**r.to_dict())
    assert back.created_at_ns == r.created_at_ns - 123, "to_dict's datetime drops the nanoseconds"
    back.message.created_at.nanos += 123
    assert back == r
    assert "role=TOOL" in repr(r)


def test_generated_classes_pickle():
    m = rollout_pb2.Record(id="x")
    assert type(m).__module__ == "rolloutd._proto.rollout.v1.rollout_pb2"
    assert pickle.loads(pickle.dumps(m)) == m


def test_listed_shard_summary_error():
    """A shard whose summary could not be read carries the server's error;
    the others keep their summaries."""
    from rolloutd._calls import shard_page
    from rolloutd._proto.rollout.v1 import rollout_pb2

    resp = rollout_pb2.ListShardsResponse(shards=[
        rollout_pb2.ListedShard(shard="exp/a", summary=rollout_pb2.ShardInfo(shard="exp/a", records=1)),
        rollout_pb2.ListedShard(shard="exp/bad", summary_error="DataLoss: stored data failed verification"),
    ])
    page = shard_page(resp)
    assert page.shards[0].summary is not None and page.shards[0].summary_error == ""
    assert page.shards[1].summary is None
    assert page.shards[1].summary_error.startswith("DataLoss")


def test_health_status_prints_its_name():
    st = rolloutd.HealthStatus.SERVING
    assert str(st) == "SERVING" and "%s" % st == "SERVING" and f"{st}" == "SERVING"
    assert repr(st) == "<HealthStatus.SERVING: 1>"
    assert st == 1 and st == rolloutd.HealthStatus(1) and int(st) == 1
    assert str(rolloutd.HealthStatus.NOT_SERVING) == "NOT_SERVING"
