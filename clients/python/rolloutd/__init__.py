"""The official Python client of rolloutd, durable storage for RL rollout records.

    import rolloutd

    with rolloutd.Client("localhost:50051") as client:
        client.append("exp-1/actor-0", [{"rollout_id": "r1", "role": "assistant", "content": "4"}])
        for rec in client.scan("exp-1/actor-0"):
            print(rec.seq, rec.role.name, rec.content)
        for batch in client.subscribe("exp-1", consumer="trainer"):
            train(batch.records)
            batch.commit()

``rolloutd.aio.Client`` is the same surface on ``grpc.aio``.
"""

from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS
from ._retry import RetryPolicy
from .affinity import Affinity, Ring
from .client import Client, Scan, Subscription
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    ConsumerReset,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    RolloutdError,
    SeqMismatch,
    ShardDeleted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    UnknownError,
)
from .types import AppendResult, Batch, ConsumerInfo, ConsumerPage, DeleteResult, HealthStatus, ListedShard, Record, RecordLike, Relationship, Role, ShardInfo, ShardPage

__version__ = "0.1.0"

__all__ = [
    "Aborted", "Affinity", "AlreadyExists", "AppendResult", "Cancelled", "Client", "DataLoss",
    "DEFAULT_MAX_MESSAGE_BYTES", "DeadlineExceeded", "FailedPrecondition", "FieldViolation",
    "HealthStatus", "Internal", "InvalidArgument", "NotFound", "OutOfRange", "PermissionDenied",
    "Record", "RecordLike", "Relationship", "ResourceExhausted", "RetryPolicy", "Ring", "Role", "RolloutdError",
    "Scan", "SHARD_HEADER", "TLS", "Unauthenticated", "Unavailable", "Unimplemented", "UnknownError",
    "DeleteResult", "ListedShard", "SeqMismatch", "ShardDeleted", "ShardInfo", "ShardPage",
    "Batch", "ConsumerInfo", "ConsumerPage", "ConsumerReset", "Subscription",
]
