"""Exceptions raised by the rolloutd client, one class per gRPC status code.

Every error a call raises is a :class:`RolloutdError` carrying the server's
message and the details rolloutd attaches (see "Errors and retries" in the
repository README): the ``google.rpc.ErrorInfo`` reason and metadata, the
``google.rpc.RetryInfo`` delay and the ``google.rpc.BadRequest`` field
violations. Client-side mistakes (an unknown field in a record dict, an
unknown role name) are ``ValueError`` or ``TypeError`` and never reach the
server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple, Type

import grpc

from ._proto.rollout.v1 import error_reason_pb2
from ._proto.rolloutd_vendor.google.rpc import error_details_pb2, status_pb2

__all__ = [
    "ERROR_DOMAIN",
    "FieldViolation",
    "RolloutdError",
    "Cancelled",
    "UnknownError",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "ShardDeleted",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "SeqMismatch",
    "ConsumerReset",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
]

#: The domain of every ErrorInfo rolloutd sends.
ERROR_DOMAIN = "rolloutd.io"

# The ErrorInfo reasons, as the strings the server sends: the names of
# rollout.v1.ErrorReason's values. proto/rollout/v1/error_reason.proto defines
# them and says when each is sent and what a client does on it; the server and
# the Go client take their names from the same enum.
_REASONS = error_reason_pb2.ErrorReason
OUTCOME_UNKNOWN = _REASONS.Name(error_reason_pb2.OUTCOME_UNKNOWN)
NOT_COMMITTED = _REASONS.Name(error_reason_pb2.NOT_COMMITTED)
BACKPRESSURE = _REASONS.Name(error_reason_pb2.BACKPRESSURE)
RATE_LIMITED = _REASONS.Name(error_reason_pb2.RATE_LIMITED)
TOO_LARGE = _REASONS.Name(error_reason_pb2.TOO_LARGE)
SCAN_INTERRUPTED = _REASONS.Name(error_reason_pb2.SCAN_INTERRUPTED)
SHARD_DELETED = _REASONS.Name(error_reason_pb2.SHARD_DELETED)
SEQ_MISMATCH = _REASONS.Name(error_reason_pb2.SEQ_MISMATCH)
#: The server's storage is out of space; the append was not stored. Appends
#: succeed again once an operator frees space, so it is not resent.
STORE_FULL = _REASONS.Name(error_reason_pb2.STORE_FULL)
#: A consumer commit for a generation older than the consumer's: it was reset
#: since; nothing was stored. Start again from the consumer.
CONSUMER_RESET = _REASONS.Name(error_reason_pb2.CONSUMER_RESET)
#: The ErrorInfo metadata key of a Scan's resume cursor.
RESUME_AFTER_SEQ = "resume_after_seq"
#: The ErrorInfo metadata key of SEQ_MISMATCH's current last seq.
LAST_SEQ = "last_seq"
#: The ErrorInfo metadata key of CONSUMER_RESET's current consumer generation.
GENERATION = "generation"

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True)
class FieldViolation:
    """One ``google.rpc.BadRequest`` field violation: ``field`` is for example
    ``"records[3]"`` or ``"records"``."""

    field: str
    description: str


class RolloutdError(Exception):
    """An RPC failed. Subclasses name the gRPC status code.

    Attributes:
        code: the gRPC status code.
        message: the server's (or the gRPC library's) message.
        reason: the ErrorInfo reason in domain ``rolloutd.io``
            (``"OUTCOME_UNKNOWN"``, ``"NOT_COMMITTED"``, ``"BACKPRESSURE"``,
            ``"RATE_LIMITED"``, ``"TOO_LARGE"``, ``"SCAN_INTERRUPTED"``,
            ``"SHARD_DELETED"``, ``"SEQ_MISMATCH"``, ``"STORE_FULL"``,
            ``"CONSUMER_RESET"``), or None when the status
            carries no ErrorInfo.
        metadata: the ErrorInfo metadata, e.g. ``{"resume_after_seq": "42"}``.
        retry_delay: the RetryInfo delay in seconds, or None.
        field_violations: the BadRequest violations, possibly empty.
        request_id: for ``append``, the request_id every attempt carried;
            resend with it to learn the outcome of an OUTCOME_UNKNOWN.
        attempts, elapsed: how many attempts the call made, over how many
            seconds (docs/clients.md).
        unreachable: the target, when the call gave up with no answer from
            any attempt and no connection; None otherwise.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        reason: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        retry_delay: Optional[float] = None,
        field_violations: Sequence[FieldViolation] = (),
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.retry_delay = retry_delay
        self.field_violations: Tuple[FieldViolation, ...] = tuple(field_violations)
        self.request_id = request_id
        #: Whether the append's records may have been stored: this answer is
        #: OUTCOME_UNKNOWN, or an earlier attempt of the same append was. A
        #: later attempt's NOT_COMMITTED speaks only for that attempt, so
        #: resend with the same request_id (and ids) rather than new ones.
        self.may_have_been_stored: bool = reason == OUTCOME_UNKNOWN
        #: Whether the call may have taken effect, for the calls that change
        #: a shard: ``append`` (the same as may_have_been_stored) and
        #: ``delete_shard`` (an attempt whose answer was lost may have
        #: deleted the shard; see ``Client.delete_shard``).
        self.may_have_taken_effect: bool = reason == OUTCOME_UNKNOWN
        #: How many attempts the call made (for a scan, how many failed in a
        #: row without receiving anything), and over how many seconds.
        self.attempts: int = 1
        self.elapsed: float = 0.0
        #: The target, when no attempt got an answer and the connection was
        #: not READY when the call gave up; None otherwise.
        self.unreachable: Optional[str] = None

    def _tries(self) -> str:
        return "%d attempt%s over %.1fs" % (self.attempts, "" if self.attempts == 1 else "s", self.elapsed)

    def __str__(self) -> str:
        if self.unreachable:
            return "%s: server unreachable at %s: %s: %s" % (self.code.name, self.unreachable, self._tries(), self.message)
        s = "%s: %s" % (self.code.name, self.message)
        if self.reason:
            s += " [%s]" % self.reason
        if self.attempts > 1:
            s += " (%s)" % self._tries()
        return s

    def __repr__(self) -> str:
        return "%s(%r, reason=%r)" % (type(self).__name__, self.message, self.reason)


class Cancelled(RolloutdError):
    """CANCELLED: the call was cancelled before it ended. For an append,
    ``may_have_been_stored`` says whether its records may have landed."""

    code = grpc.StatusCode.CANCELLED


class UnknownError(RolloutdError):
    """UNKNOWN: a failure without a proper status, from the gRPC library or
    something between the client and the server; rolloutd does not choose it."""

    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(RolloutdError, ValueError):
    """INVALID_ARGUMENT: the request is malformed; the message names the field
    (``shard``, ``records[3].reward``). Fix the request; never resend it as is."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(RolloutdError, TimeoutError):
    """DEADLINE_EXCEEDED: the call's own deadline passed (a timeout inside the
    server is UNAVAILABLE). For an append, ``may_have_been_stored`` says
    whether its records may have landed."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(RolloutdError, LookupError):
    """NOT_FOUND: the shard was never written, or has no such id."""

    code = grpc.StatusCode.NOT_FOUND


class ShardDeleted(NotFound):
    """NOT_FOUND with reason SHARD_DELETED: the shard was deleted
    (``delete_shard``); a following scan of the deleted records ends with
    it. An append starts the shard afresh, with seqs above the deleted
    ones."""


class AlreadyExists(RolloutdError):
    """The same id is stored with different content, or a request_id was
    reused with different content."""

    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RolloutdError):
    """PERMISSION_DENIED: the server's policy does not allow this identity
    this verb on the shard; do not retry."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(RolloutdError):
    """BACKPRESSURE and RATE_LIMITED (retried by ``append`` until its
    deadline), or TOO_LARGE: never resend as is. ``field_violations`` names
    ``records`` (split the batch) or one record, ``records[3]`` (shrink it, or
    raise the server's ``--max-record-bytes``)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(RolloutdError):
    """FAILED_PRECONDITION: the shard is not in the state the call requires
    (see ``SeqMismatch``)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class SeqMismatch(FailedPrecondition):
    """FAILED_PRECONDITION with reason SEQ_MISMATCH: ``delete_shard``'s
    expected_last_seq is not the shard's last seq, because records were
    appended since the caller looked; this attempt deleted nothing.
    ``last_seq`` is the shard's. When ``may_have_taken_effect`` is set, the
    answer came to a resend, and an earlier attempt may have deleted the
    records through expected_last_seq before the shard was written again;
    the records appended since survive either way."""

    @property
    def last_seq(self) -> Optional[int]:
        """The shard's last seq, from the ErrorInfo metadata ``last_seq``."""
        raw = self.metadata.get(LAST_SEQ)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None


class ConsumerReset(FailedPrecondition):
    """FAILED_PRECONDITION with reason CONSUMER_RESET: a consumer commit named
    a generation older than the consumer's, which was reset since the
    subscription whose positions these are started; nothing was stored.
    Start a new subscription from the consumer and commit its positions.
    ``generation`` is the consumer's (0: it was deleted)."""

    @property
    def generation(self) -> Optional[int]:
        """The consumer's generation, from the ErrorInfo metadata
        ``generation``."""
        raw = self.metadata.get(GENERATION)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None


class Aborted(RolloutdError):
    """ABORTED: rolloutd does not send it; it comes from something between the
    client and the server."""

    code = grpc.StatusCode.ABORTED


class OutOfRange(RolloutdError):
    """OUT_OF_RANGE: rolloutd does not send it; it comes from something between
    the client and the server."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RolloutdError):
    """UNIMPLEMENTED: the server has no such method: an older rolloutd, or not
    rolloutd at all."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RolloutdError):
    """INTERNAL: a bug in rolloutd. The message carries the request id under
    which the server logged the details: report it."""

    code = grpc.StatusCode.INTERNAL


class Unavailable(RolloutdError):
    """UNAVAILABLE: the server or its storage cannot serve the call now. The
    reason says more: OUTCOME_UNKNOWN (an append that may have been stored),
    NOT_COMMITTED (not stored), SCAN_INTERRUPTED (resume the scan)."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(RolloutdError):
    """DATA_LOSS: stored bytes failed their checksum; the server logged which
    blob under the message's request id."""

    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(RolloutdError):
    """UNAUTHENTICATED: the call carried no identity the server accepts."""

    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[RolloutdError]] = {
    cls.code: cls
    for cls in (
        Cancelled, UnknownError, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated,
    )
}


# Reasons with their own class, a subclass of their code's.
_BY_REASON: Dict[Tuple[grpc.StatusCode, Optional[str]], Type[RolloutdError]] = {
    (grpc.StatusCode.NOT_FOUND, SHARD_DELETED): ShardDeleted,
    (grpc.StatusCode.FAILED_PRECONDITION, SEQ_MISMATCH): SeqMismatch,
    (grpc.StatusCode.FAILED_PRECONDITION, CONSUMER_RESET): ConsumerReset,
}


def _type_name(type_url: str) -> str:
    return type_url.rsplit("/", 1)[-1]


def from_status(
    code: grpc.StatusCode,
    message: str,
    trailing_metadata: Optional[Sequence[Tuple[str, object]]],
    request_id: Optional[str] = None,
) -> RolloutdError:
    """Builds the exception for a failed call from its code, message and
    trailers. The details are decoded by type URL with the vendored
    messages, so the user's own google.rpc modules are never touched."""
    reason = None
    metadata: Dict[str, str] = {}
    retry_delay = None
    violations = []
    for key, value in trailing_metadata or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            st = status_pb2.Status.FromString(value)
        except Exception:  # a malformed trailer: keep the code and message
            break
        if st.message:
            message = st.message
        for any_ in st.details:
            name = _type_name(any_.type_url)
            try:
                if name == "google.rpc.ErrorInfo":
                    info = error_details_pb2.ErrorInfo.FromString(any_.value)
                    if info.domain == ERROR_DOMAIN:
                        reason = info.reason
                        metadata = dict(info.metadata)
                elif name == "google.rpc.RetryInfo":
                    ri = error_details_pb2.RetryInfo.FromString(any_.value)
                    retry_delay = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
                elif name == "google.rpc.BadRequest":
                    br = error_details_pb2.BadRequest.FromString(any_.value)
                    violations.extend(FieldViolation(v.field, v.description) for v in br.field_violations)
            except Exception:
                continue
        break
    cls = _BY_REASON.get((code, reason)) or _BY_CODE.get(code, UnknownError)
    return cls(
        message or "",
        code=code,
        reason=reason,
        metadata=metadata,
        retry_delay=retry_delay,
        field_violations=violations,
        request_id=request_id,
    )


def from_rpc_error(err: grpc.RpcError, request_id: Optional[str] = None) -> RolloutdError:
    """Converts a grpc (or grpc.aio) RpcError to a RolloutdError."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    details = err.details() if hasattr(err, "details") else str(err)  # type: ignore[attr-defined]
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None  # type: ignore[attr-defined]
    return from_status(code or grpc.StatusCode.UNKNOWN, details or "", trailers, request_id)
