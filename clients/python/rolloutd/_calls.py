"""Request building and response conversion shared by both clients."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from google.protobuf import field_mask_pb2

from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from . import errors
from .types import AppendResult, ConsumerInfo, ConsumerPage, DeleteResult, ListedShard, Record, RecordLike, Role, ShardInfo, ShardPage, records_to_messages

APPEND = "/rollout.v1.RolloutService/Append"
GET = "/rollout.v1.RolloutService/Get"
SCAN = "/rollout.v1.RolloutService/Scan"
LIST_SHARDS = "/rollout.v1.RolloutService/ListShards"
DESCRIBE_SHARD = "/rollout.v1.RolloutService/DescribeShard"
BATCH_GET = "/rollout.v1.RolloutService/BatchGet"
DELETE_SHARD = "/rollout.v1.RolloutService/DeleteShard"
SUBSCRIBE = "/rollout.v1.RolloutService/Subscribe"
COMMIT_CONSUMER = "/rollout.v1.RolloutService/CommitConsumer"
DESCRIBE_CONSUMER = "/rollout.v1.RolloutService/DescribeConsumer"
LIST_CONSUMERS = "/rollout.v1.RolloutService/ListConsumers"
RESET_CONSUMER = "/rollout.v1.RolloutService/ResetConsumer"
DELETE_CONSUMER = "/rollout.v1.RolloutService/DeleteConsumer"
# Called by its real name; the vendored messages live in a private package.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVICE_NAME = "rollout.v1.RolloutService"

SERIALIZERS = {
    APPEND: (rollout_pb2.AppendRequest.SerializeToString, rollout_pb2.AppendResponse.FromString),
    GET: (rollout_pb2.GetRequest.SerializeToString, rollout_pb2.GetResponse.FromString),
    SCAN: (rollout_pb2.ScanRequest.SerializeToString, rollout_pb2.ScanResponse.FromString),
    LIST_SHARDS: (rollout_pb2.ListShardsRequest.SerializeToString, rollout_pb2.ListShardsResponse.FromString),
    DESCRIBE_SHARD: (rollout_pb2.DescribeShardRequest.SerializeToString, rollout_pb2.ShardInfo.FromString),
    BATCH_GET: (rollout_pb2.BatchGetRequest.SerializeToString, rollout_pb2.BatchGetResponse.FromString),
    DELETE_SHARD: (rollout_pb2.DeleteShardRequest.SerializeToString, rollout_pb2.DeleteShardResponse.FromString),
    SUBSCRIBE: (rollout_pb2.SubscribeRequest.SerializeToString, rollout_pb2.SubscribeResponse.FromString),
    COMMIT_CONSUMER: (rollout_pb2.CommitConsumerRequest.SerializeToString, rollout_pb2.CommitConsumerResponse.FromString),
    DESCRIBE_CONSUMER: (rollout_pb2.DescribeConsumerRequest.SerializeToString, rollout_pb2.ConsumerInfo.FromString),
    LIST_CONSUMERS: (rollout_pb2.ListConsumersRequest.SerializeToString, rollout_pb2.ListConsumersResponse.FromString),
    RESET_CONSUMER: (rollout_pb2.ResetConsumerRequest.SerializeToString, rollout_pb2.ResetConsumerResponse.FromString),
    DELETE_CONSUMER: (rollout_pb2.DeleteConsumerRequest.SerializeToString, rollout_pb2.DeleteConsumerResponse.FromString),
    HEALTH_CHECK: (health_pb2.HealthCheckRequest.SerializeToString, health_pb2.HealthCheckResponse.FromString),
}


_STREAMS = (SCAN, SUBSCRIBE)


def multi_callables(channel: Any) -> Dict[str, Any]:
    """The channel's callable of each method (grpc's or grpc.aio's)."""
    return {
        m: (channel.unary_stream if m in _STREAMS else channel.unary_unary)(m, request_serializer=s, response_deserializer=d)
        for m, (s, d) in SERIALIZERS.items()
    }


def append_request(shard: str, records: Iterable[RecordLike], request_id: str) -> rollout_pb2.AppendRequest:
    msgs = records_to_messages(records)
    if not msgs:
        raise ValueError("records: give at least one record")
    return rollout_pb2.AppendRequest(shard=shard, records=msgs, request_id=request_id)


def append_results(resp: rollout_pb2.AppendResponse) -> List[AppendResult]:
    return [AppendResult(r.id, r.seq, r.already_present, r.epoch, r.generation) for r in resp.results]


def list_shards_request(prefix: str, page_size: int, page_token: str, include_summary: bool) -> rollout_pb2.ListShardsRequest:
    if page_size < 0:
        raise ValueError("page_size: must be >= 0 (0 means the server's default, 100)")
    return rollout_pb2.ListShardsRequest(prefix=prefix, page_size=page_size, page_token=page_token, include_summary=include_summary)


def shard_page(resp: rollout_pb2.ListShardsResponse) -> ShardPage:
    return ShardPage(
        [ListedShard(s.shard, ShardInfo.from_message(s.summary) if s.HasField("summary") else None, s.summary_error) for s in resp.shards],
        resp.next_page_token,
    )


def batch_get_ids(ids: Sequence[str]) -> List[str]:
    if isinstance(ids, str):
        raise TypeError("ids: want a list of ids, got a str")
    out = list(ids)
    if not out:
        raise ValueError("ids: give at least one id")
    return out


def batch_get_firsts(ids: List[str]) -> List[int]:
    """The index of each id's first occurrence: the server answers each id
    once (a repeated id is INVALID_ARGUMENT), so a repeat is asked for once
    and answered by batch_get_repeats."""
    seen = set()
    out = []
    for i, rid in enumerate(ids):
        if rid not in seen:
            seen.add(rid)
            out.append(i)
    return out


def batch_get_repeats(out: List[Optional[Record]], ids: List[str]) -> None:
    """Copies each id's answer to its repeats in out."""
    first = {}
    for i, rid in enumerate(ids):
        if rid in first:
            out[i] = out[first[rid]]
        else:
            first[rid] = i


def batch_get_request(shard: str, ids: Sequence[str], fields: Optional[Sequence[str]]) -> rollout_pb2.BatchGetRequest:
    req = rollout_pb2.BatchGetRequest(shard=shard, ids=ids)
    if fields:
        if isinstance(fields, str):
            raise TypeError("fields: want a list of field names, got a str")
        req.fields.CopyFrom(field_mask_pb2.FieldMask(paths=list(fields)))
    return req


def batch_get_fill(out: List[Optional[Record]], todo: List[int], resp: rollout_pb2.BatchGetResponse) -> List[int]:
    """Stores resp's answers to the ids at indexes todo into out (None for
    not found), and returns the indexes still to ask for: those the server
    marked over its response limit."""
    again: List[int] = []
    for i, r in zip(todo, resp.results):
        which = r.WhichOneof("result")
        if which == "record":
            out[i] = Record(r.record)
        elif which == "over_limit":
            again.append(i)
        # not_found (or a result this client does not know): None.
    if len(resp.results) < len(todo):
        raise errors.Internal("BatchGet answered %d of %d ids" % (len(resp.results), len(todo)))
    if len(again) == len(todo):
        # The server always returns at least the first; never loop.
        raise errors.Internal("BatchGet made no progress: every id over the response limit")
    return again


def delete_shard_request(shard: str, expected_last_seq: Optional[int]) -> rollout_pb2.DeleteShardRequest:
    req = rollout_pb2.DeleteShardRequest(shard=shard)
    if expected_last_seq is not None:
        if isinstance(expected_last_seq, bool) or expected_last_seq < 0:
            raise ValueError("expected_last_seq: want a seq >= 0 (ShardInfo.last_seq), or None")
        req.expected_last_seq = expected_last_seq
    return req


def delete_result(resp: rollout_pb2.DeleteShardResponse) -> DeleteResult:
    return DeleteResult(resp.last_seq, resp.records, resp.already_deleted, resp.incarnation)


def _filters(req: Any, rollout_id: Optional[str], role: Union[None, Role, int, str], include_in_training: Optional[bool], fields: Optional[Sequence[str]]) -> None:
    """Sets Scan's filters and field mask, which Subscribe shares."""
    if rollout_id:
        req.rollout_id = rollout_id
    if role is not None:
        req.role = Role.parse(role)
    if include_in_training is not None:
        req.include_in_training = include_in_training
    if fields:
        if isinstance(fields, str):
            raise TypeError("fields: want a list of field names, got a str")
        req.fields.CopyFrom(field_mask_pb2.FieldMask(paths=list(fields)))


def scan_request(
    shard: str,
    *,
    after_seq: int,
    follow: bool,
    limit: int,
    rollout_id: Optional[str],
    role: Union[None, Role, int, str],
    include_in_training: Optional[bool],
    fields: Optional[Sequence[str]],
) -> rollout_pb2.ScanRequest:
    if after_seq < 0:
        raise ValueError("after_seq: must be >= 0")
    if limit < 0:
        raise ValueError("limit: must be >= 0 (0 means no limit)")
    req = rollout_pb2.ScanRequest(shard=shard, after_seq=after_seq, follow=follow, limit=limit)
    _filters(req, rollout_id, role, include_in_training, fields)
    return req


#: subscribe's and reset_consumer's start names, and their SubscribeStart.
STARTS = {
    None: rollout_pb2.SUBSCRIBE_START_UNSPECIFIED,
    "earliest": rollout_pb2.SUBSCRIBE_START_EARLIEST,
    "latest": rollout_pb2.SUBSCRIBE_START_LATEST,
    "consumer": rollout_pb2.SUBSCRIBE_START_CONSUMER,
}


def subscribe_start(start: Optional[str], field: str = "start") -> int:
    try:
        return STARTS[start]
    except (KeyError, TypeError):
        raise ValueError("%s %r: want 'earliest', 'latest', 'consumer' or None" % (field, start)) from None


def positions_map(positions: Optional[Mapping[str, int]], field: str = "positions") -> Dict[str, int]:
    """A copy of a shard -> cursor map, checked."""
    if positions is None:
        return {}
    if not isinstance(positions, Mapping):
        raise TypeError("%s: want a dict of shard -> cursor, got %s" % (field, type(positions).__name__))
    out = {}
    for shard, cursor in positions.items():
        if not isinstance(shard, str):
            raise TypeError("%s: shard %r is not a str" % (field, shard))
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise ValueError("%s[%r]: want a cursor (an int >= 0), got %r" % (field, shard, cursor))
        out[shard] = cursor
    return out


def subscribe_request(
    prefix: str,
    *,
    consumer: Optional[str],
    start: Optional[str],
    member: int,
    members: int,
    positions: Optional[Mapping[str, int]],
    rollout_id: Optional[str],
    role: Union[None, Role, int, str],
    include_in_training: Optional[bool],
    fields: Optional[Sequence[str]],
) -> rollout_pb2.SubscribeRequest:
    if isinstance(members, bool) or not isinstance(members, int) or members < 1:
        raise ValueError("members: want an int >= 1, got %r" % (members,))
    if isinstance(member, bool) or not isinstance(member, int) or not 0 <= member < members:
        raise ValueError("member: want 0 <= member < members (%d), got %r" % (members, member))
    if start == "consumer" and not consumer:
        raise ValueError("start='consumer' needs a consumer name")
    req = rollout_pb2.SubscribeRequest(prefix=prefix, start=subscribe_start(start), consumer=consumer or "", member=member, members=members)
    req.positions.update(positions_map(positions))
    _filters(req, rollout_id, role, include_in_training, fields)
    return req


def commit_consumer_request(prefix: str, consumer: str, positions: Mapping[str, int], generation: int) -> rollout_pb2.CommitConsumerRequest:
    if not consumer:
        raise ValueError("consumer: give the consumer's name")
    req = rollout_pb2.CommitConsumerRequest(prefix=prefix, consumer=consumer, generation=generation)
    req.positions.update(positions_map(positions))
    return req


def reset_consumer_request(prefix: str, consumer: str, to: Optional[str], positions: Optional[Mapping[str, int]]) -> rollout_pb2.ResetConsumerRequest:
    if not consumer:
        raise ValueError("consumer: give the consumer's name")
    if to not in (None, "earliest", "latest"):
        raise ValueError("to %r: want 'earliest', 'latest' or None (with positions)" % (to,))
    if (to is None) == (positions is None):
        raise ValueError("reset_consumer: give either to ('earliest' or 'latest') or positions")
    req = rollout_pb2.ResetConsumerRequest(prefix=prefix, consumer=consumer, to=subscribe_start(to, "to"))
    req.positions.update(positions_map(positions))
    return req


def list_consumers_request(prefix: str, page_size: int, page_token: str) -> rollout_pb2.ListConsumersRequest:
    if page_size < 0:
        raise ValueError("page_size: must be >= 0 (0 means the server's default)")
    return rollout_pb2.ListConsumersRequest(prefix=prefix, page_size=page_size, page_token=page_token)


def consumer_page(resp: rollout_pb2.ListConsumersResponse) -> ConsumerPage:
    return ConsumerPage([ConsumerInfo.from_message(c) for c in resp.consumers], resp.next_page_token)
