"""Python-facing types: Role, Record, Relationship, AppendResult.

Records are converted at the edge, but lazily: :class:`Record` is a thin,
read-only view over the ``rollout.v1.Record`` message the server sent. Each
attribute converts on access (``seq`` is an ``int``, ``created_at`` an aware
``datetime``, an unset optional float ``None``, ``role`` a :class:`Role`), so
a scan of large records costs one small object per record and nothing for the
fields a caller never reads, and the exact message stays reachable as
``Record.message`` (for ``created_at``'s nanoseconds, unknown fields added by
a newer server, or re-sending). We chose this over returning raw messages
because raw messages read unset optional floats as ``0.0``, roles as bare
ints and timestamps as ``Timestamp``; and over eager dataclasses because
copying every token and logprob list of a scan would be most of its cost.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

from google.protobuf import timestamp_pb2

from ._proto.rollout.v1 import rollout_pb2

__all__ = [
    "Role", "Relationship", "Record", "AppendResult", "HealthStatus", "RecordLike", "to_message",
    "ShardInfo", "ListedShard", "ShardPage", "DeleteResult", "Batch", "ConsumerInfo", "ConsumerPage",
]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class Role(enum.IntEnum):
    """rollout.v1.Role. Dicts may name a role as ``Role.ASSISTANT``, ``3``,
    ``"ROLE_ASSISTANT"`` or ``"assistant"``."""

    UNSPECIFIED = 0
    SYSTEM = 1
    USER = 2
    ASSISTANT = 3
    TOOL = 4
    GRADE = 5
    ARTIFACT = 6

    @classmethod
    def parse(cls, value: Union["Role", int, str], field: str = "role") -> "Role":
        """Returns the Role value names; ValueError names an unknown one."""
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            raise TypeError("%s: want a Role, an int or a name, got bool" % field)
        if isinstance(value, int):
            try:
                return cls(value)
            except ValueError:
                raise ValueError("%s: unknown role number %d" % (field, value)) from None
        if isinstance(value, str):
            name = value.upper()
            if name.startswith("ROLE_"):
                name = name[len("ROLE_"):]
            try:
                return cls[name]
            except KeyError:
                raise ValueError(
                    "%s: unknown role name %r (want one of %s)"
                    % (field, value, ", ".join("ROLE_" + r.name for r in cls))
                ) from None
        raise TypeError("%s: want a Role, an int or a name, got %s" % (field, type(value).__name__))


class HealthStatus(enum.IntEnum):
    """grpc.health.v1.HealthCheckResponse.ServingStatus. It prints its name
    (``print(client.health())`` shows ``SERVING``), and compares equal to
    the proto's number."""

    # IntEnum's str and format are int's since Python 3.11 ("1"); a status
    # is read by people far more often than it is formatted as a number.
    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    UNKNOWN = 0
    SERVING = 1
    NOT_SERVING = 2
    SERVICE_UNKNOWN = 3


@dataclass(frozen=True)
class Relationship:
    """A directed, weighted link to another record (``weight`` is a float32
    on the wire)."""

    target_id: str
    relation: str = ""
    weight: float = 0.0


@dataclass(frozen=True)
class AppendResult:
    """The outcome for one appended record, in request order.

    ``already_present`` is True when the shard already held the id (for
    example from an earlier attempt of the same call); ``seq``, ``epoch`` and
    ``generation`` then describe the stored record.
    """

    id: str
    seq: int
    already_present: bool
    epoch: int
    generation: int


def _time(msg: Any, name: str) -> Optional[_dt.datetime]:
    if not msg.HasField(name):
        return None
    ts = getattr(msg, name)
    return _EPOCH + _dt.timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


@dataclass(frozen=True)
class ShardInfo:
    """A shard as its current manifest records it (``rollout.v1.ShardInfo``).

    ``last_seq`` is the highest seq assigned so far: pass it as
    ``delete_shard``'s expected_last_seq. Times are aware UTC datetimes, None
    when unset. In a listing's summary of a deleted shard only ``shard``,
    ``deleted``, ``incarnation``, ``last_seq`` and ``deleted_at`` are set.
    """

    shard: str
    records: int
    bytes: int
    generations: int
    first_seq: int
    last_seq: int
    epoch: int
    format_version: int
    writer_here: bool
    created_at: Optional[_dt.datetime]
    last_commit_at: Optional[_dt.datetime]
    incarnation: int
    deleted: bool
    deleted_at: Optional[_dt.datetime]

    @classmethod
    def from_message(cls, m: "rollout_pb2.ShardInfo") -> "ShardInfo":
        return cls(
            shard=m.shard, records=m.records, bytes=m.bytes, generations=m.generations,
            first_seq=m.first_seq, last_seq=m.last_seq, epoch=m.epoch, format_version=m.format_version,
            writer_here=m.writer_here, created_at=_time(m, "created_at"),
            last_commit_at=_time(m, "last_commit_at"), incarnation=m.incarnation, deleted=m.deleted,
            deleted_at=_time(m, "deleted_at"),
        )


@dataclass(frozen=True)
class ListedShard:
    """One shard of a listing; ``summary`` only with include_summary.
    ``summary_error``, with include_summary, says why this shard has no
    summary (its manifest could not be read); the other shards are
    summarised as usual."""

    shard: str
    summary: Optional[ShardInfo] = None
    summary_error: str = ""


@dataclass(frozen=True)
class ShardPage:
    """One page of ``list_shards``: pass ``next_page_token`` as page_token
    for the next; it is empty on the last page."""

    shards: List[ListedShard]
    next_page_token: str


@dataclass(frozen=True)
class DeleteResult:
    """What ``delete_shard`` did.

    ``already_deleted``: the shard was a tombstone already (deleted by
    another call, or by an earlier attempt of this one whose answer was
    lost), and this call only resumed reclaiming its storage; ``records`` is
    then 0. ``last_seq`` is the deleted records' last seq: an append after
    the delete gets seqs above it. ``incarnation`` is the incarnation the
    delete started.
    """

    last_seq: int
    records: int
    already_deleted: bool
    incarnation: int


@dataclass(frozen=True)
class ConsumerInfo:
    """A consumer (``rollout.v1.ConsumerInfo``): its stored positions
    (shard -> cursor; only from ``describe_consumer(include_positions=True)``
    and ``reset_consumer``), its generation (1, and one more per reset),
    and its lag: ``lag_records`` committed to the shards under its prefix
    and not yet past its positions, over ``lagging_shards`` shards, from
    the shards' last seqs as the answering instance knows them. A listing
    leaves out positions and lag."""

    prefix: str
    consumer: str
    generation: int
    positions: Dict[str, int]
    shards: int
    lag_records: int
    lagging_shards: int
    created_at: Optional[_dt.datetime]
    updated_at: Optional[_dt.datetime]

    @classmethod
    def from_message(cls, m: "rollout_pb2.ConsumerInfo") -> "ConsumerInfo":
        return cls(
            prefix=m.prefix, consumer=m.consumer, generation=m.generation, positions=dict(m.positions),
            shards=m.shards, lag_records=m.lag_records, lagging_shards=m.lagging_shards,
            created_at=_time(m, "created_at"), updated_at=_time(m, "updated_at"),
        )


@dataclass(frozen=True)
class ConsumerPage:
    """One page of ``list_consumers``: pass ``next_page_token`` as
    page_token for the next; it is empty on the last page."""

    consumers: List[ConsumerInfo]
    next_page_token: str


class Batch:
    """One shard's records from a subscription, in seq order.

    ``cursor`` is the shard's resume point: every record of it up to
    ``cursor`` was delivered (in this batch or an earlier one) or filtered
    out. ``records`` may be empty when the filters skipped every record.
    ``deleted`` says the shard was deleted: its records not delivered are
    gone, and records appended to it later come after ``cursor``.

    ``commit()`` stores, for the subscription's consumer, the positions of
    every batch the subscription yielded up to and including this one
    (``await batch.commit()`` in ``rolloutd.aio``). Commit after processing
    a batch: a restart then resumes after it, and at most the batches
    processed since the last commit are delivered again.
    """

    __slots__ = ("shard", "records", "cursor", "deleted", "_commit")

    def __init__(self, shard: str, records: List["Record"], cursor: int, deleted: bool, commit: Callable[[], Any]) -> None:
        self.shard = shard
        self.records = records
        self.cursor = cursor
        self.deleted = deleted
        self._commit = commit

    def commit(self) -> Any:
        """Commits the positions up to this batch; see the class."""
        return self._commit()

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Any:
        return iter(self.records)

    def __repr__(self) -> str:
        return "Batch(shard=%r, records=%d, cursor=%d%s)" % (self.shard, len(self.records), self.cursor, ", deleted" if self.deleted else "")


def _optional_float(msg: Any, name: str) -> Optional[float]:
    return getattr(msg, name) if msg.HasField(name) else None


class Record:
    """A stored record: a read-only view over a ``rollout.v1.Record``.

    Float fields are float32 on the wire, so ``reward`` set to ``0.1`` reads
    back as ``0.10000000149011612``. ``created_at`` has microsecond
    precision (``datetime`` has no nanoseconds); ``created_at_ns`` and
    ``message.created_at`` keep the exact value.
    """

    __slots__ = ("message",)

    def __init__(self, message: Optional["rollout_pb2.Record"] = None, **fields: Any) -> None:
        """``Record(msg)`` wraps a message; ``Record(rollout_id=..., ...)``
        builds one from keyword fields, validated as a dict is."""
        if message is not None and fields:
            raise TypeError("Record: give a message or fields, not both")
        if message is None:
            message = to_message(fields)
        self.message: rollout_pb2.Record = message

    # Identity and order.
    @property
    def id(self) -> str:
        return self.message.id

    @property
    def seq(self) -> int:
        return self.message.seq

    @property
    def rollout_id(self) -> str:
        return self.message.rollout_id

    @property
    def problem_id(self) -> str:
        return self.message.problem_id

    @property
    def dataset(self) -> str:
        return self.message.dataset

    @property
    def sequence_order(self) -> int:
        return self.message.sequence_order

    @property
    def role(self) -> Role:
        try:
            return Role(self.message.role)
        except ValueError:  # a role added by a newer server
            return self.message.role  # type: ignore[return-value]

    @property
    def created_at(self) -> Optional[_dt.datetime]:
        """When the record was created, in UTC, truncated to microseconds;
        None when unset."""
        if not self.message.HasField("created_at"):
            return None
        ts = self.message.created_at
        return _EPOCH + _dt.timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)

    @property
    def created_at_ns(self) -> Optional[int]:
        """``created_at`` as exact nanoseconds since the Unix epoch."""
        if not self.message.HasField("created_at"):
            return None
        return self.message.created_at.seconds * 1_000_000_000 + self.message.created_at.nanos

    # Content.
    @property
    def content(self) -> str:
        return self.message.content

    @property
    def content_type(self) -> str:
        return self.message.content_type

    @property
    def input_tokens(self) -> List[int]:
        return list(self.message.input_tokens)

    @property
    def output_tokens(self) -> List[int]:
        return list(self.message.output_tokens)

    @property
    def output_logprobs(self) -> List[float]:
        return list(self.message.output_logprobs)

    @property
    def ref_logprobs(self) -> List[float]:
        return list(self.message.ref_logprobs)

    @property
    def loss_mask(self) -> bytes:
        return self.message.loss_mask

    @property
    def reward(self) -> Optional[float]:
        return _optional_float(self.message, "reward")

    @property
    def advantage(self) -> Optional[float]:
        return _optional_float(self.message, "advantage")

    @property
    def score(self) -> Optional[float]:
        return _optional_float(self.message, "score")

    @property
    def policy_version(self) -> str:
        return self.message.policy_version

    @property
    def include_in_training(self) -> bool:
        return self.message.include_in_training

    @property
    def grader_id(self) -> str:
        return self.message.grader_id

    @property
    def relationships(self) -> List[Relationship]:
        return [Relationship(r.target_id, r.relation, r.weight) for r in self.message.relationships]

    @property
    def metadata(self) -> Dict[str, str]:
        return dict(self.message.metadata)

    @property
    def binary_payload(self) -> bytes:
        return self.message.binary_payload

    def to_dict(self) -> Dict[str, Any]:
        """The fields that are set, as a dict that ``append`` accepts
        (``created_at`` as a datetime: without its nanoseconds)."""
        out: Dict[str, Any] = {}
        for fd, _ in self.message.ListFields():
            out[fd.name] = getattr(self, fd.name)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return self.message == other.message
        return NotImplemented

    def __hash__(self) -> int:  # records are values, but messages are mutable
        raise TypeError("unhashable type: 'Record'")

    def __repr__(self) -> str:
        parts = ["id=%r" % self.id, "seq=%d" % self.seq]
        if self.rollout_id:
            parts.append("rollout_id=%r" % self.rollout_id)
        if self.message.role:
            parts.append("role=%s" % getattr(self.role, "name", self.role))
        if self.reward is not None:
            parts.append("reward=%r" % self.reward)
        if self.content:
            c = self.content
            parts.append("content=%r" % (c if len(c) <= 40 else c[:37] + "..."))
        return "Record(%s)" % ", ".join(parts)


#: What ``append`` takes as a record.
RecordLike = Union[Record, "rollout_pb2.Record", Mapping[str, Any]]

_FIELDS = {f.name: f for f in rollout_pb2.Record.DESCRIPTOR.fields}
_OPTIONAL_FLOATS = frozenset(("reward", "advantage", "score"))
_REL_FIELDS = frozenset(("target_id", "relation", "weight"))


def _timestamp(value: Any, field: str) -> timestamp_pb2.Timestamp:
    if isinstance(value, timestamp_pb2.Timestamp):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("%s: a naive datetime is ambiguous; give a timezone-aware one" % field)
        delta = value - _EPOCH
        ts = timestamp_pb2.Timestamp()
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        ts.seconds, rem = divmod(micros, 1_000_000)
        ts.nanos = rem * 1000
        return ts
    raise TypeError("%s: want a timezone-aware datetime or a Timestamp, got %s" % (field, type(value).__name__))


def _relationship(value: Any, field: str) -> rollout_pb2.Relationship:
    if isinstance(value, rollout_pb2.Relationship):
        return value
    if isinstance(value, Relationship):
        return rollout_pb2.Relationship(target_id=value.target_id, relation=value.relation, weight=value.weight)
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - _REL_FIELDS)
        if unknown:
            raise ValueError("%s: unknown field %r (Relationship has %s)" % (field, unknown[0], ", ".join(sorted(_REL_FIELDS))))
        try:
            return rollout_pb2.Relationship(**value)
        except (TypeError, ValueError) as e:
            raise TypeError("%s: %s" % (field, e)) from None
    raise TypeError("%s: want a dict or a Relationship, got %s" % (field, type(value).__name__))


def to_message(value: RecordLike, where: str = "record") -> rollout_pb2.Record:
    """Returns the ``rollout.v1.Record`` for a Record, a message or a dict.

    Dict keys are the proto's snake_case field names. An unknown key or
    role name is a ValueError naming it; a value of the wrong type is a
    TypeError naming the field. None means "unset" for every field.
    """
    if isinstance(value, rollout_pb2.Record):
        return value
    if isinstance(value, Record):
        return value.message
    if not isinstance(value, Mapping):
        raise TypeError("%s: want a dict, a rolloutd.Record or a rollout_pb2.Record, got %s" % (where, type(value).__name__))
    msg = rollout_pb2.Record()
    for key, v in value.items():
        field = "%s.%s" % (where, key)
        if key not in _FIELDS:
            raise ValueError("%s: unknown field %r (see rollout.v1.Record for the field names)" % (where, key))
        if v is None:
            continue
        try:
            if key == "role":
                msg.role = Role.parse(v, field)
            elif key == "created_at":
                msg.created_at.CopyFrom(_timestamp(v, field))
            elif key == "relationships":
                msg.relationships.extend(_relationship(r, "%s[%d]" % (field, i)) for i, r in enumerate(v))
            elif key == "metadata":
                if not isinstance(v, Mapping):
                    raise TypeError("want a dict of str to str, got %s" % type(v).__name__)
                msg.metadata.update(v)
            elif _FIELDS[key].label == _FIELDS[key].LABEL_REPEATED:
                if isinstance(v, (str, bytes)):
                    raise TypeError("want a list, got %s" % type(v).__name__)
                getattr(msg, key).extend(v)
            else:
                setattr(msg, key, v)
        except (ValueError, TypeError) as e:
            text = str(e)
            if text.startswith(field):
                raise
            raise type(e)("%s: %s" % (field, text)) from None
    return msg


def records_to_messages(records: Iterable[RecordLike]) -> List[rollout_pb2.Record]:
    if isinstance(records, (Mapping, Record, rollout_pb2.Record, str, bytes)):
        raise TypeError("records: want a list of records, got one %s" % type(records).__name__)
    return [to_message(r, "records[%d]" % i) for i, r in enumerate(records)]
