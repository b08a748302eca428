"""Request building and response conversion shared by both clients."""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Union

from google.protobuf import field_mask_pb2

from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from .types import AppendResult, RecordLike, Role, records_to_messages

APPEND = "/rollout.v1.RolloutService/Append"
GET = "/rollout.v1.RolloutService/Get"
SCAN = "/rollout.v1.RolloutService/Scan"
# Called by its real name; the vendored messages live in a private package.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVICE_NAME = "rollout.v1.RolloutService"

SERIALIZERS = {
    APPEND: (rollout_pb2.AppendRequest.SerializeToString, rollout_pb2.AppendResponse.FromString),
    GET: (rollout_pb2.GetRequest.SerializeToString, rollout_pb2.GetResponse.FromString),
    SCAN: (rollout_pb2.ScanRequest.SerializeToString, rollout_pb2.ScanResponse.FromString),
    HEALTH_CHECK: (health_pb2.HealthCheckRequest.SerializeToString, health_pb2.HealthCheckResponse.FromString),
}


def append_request(shard: str, records: Iterable[RecordLike], request_id: str) -> rollout_pb2.AppendRequest:
    msgs = records_to_messages(records)
    if not msgs:
        raise ValueError("records: give at least one record")
    return rollout_pb2.AppendRequest(shard=shard, records=msgs, request_id=request_id)


def append_results(resp: rollout_pb2.AppendResponse) -> List[AppendResult]:
    return [AppendResult(r.id, r.seq, r.already_present, r.epoch, r.generation) for r in resp.results]


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
    return req
