"""The retry policy of append and the reconnect policy of scan, shared by the
blocking and the asyncio client. It decides from the status code and the
ErrorInfo reason, never from the message text (examples/client/retry.go is
the Go reference)."""

from __future__ import annotations

import random
from typing import Optional

import grpc

from . import errors

#: The first backoff; it doubles per attempt up to MAX_BACKOFF, and each wait
#: is drawn from [backoff/2, backoff].
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0


def append_retry(err: errors.RolloutdError) -> bool:
    """Whether an append that failed with err is worth resending unchanged
    (same records, same request_id).

    OUTCOME_UNKNOWN, NOT_COMMITTED and BACKPRESSURE always are, whatever
    the code: the server sends them on UNAVAILABLE with a RetryInfo (an
    OUTCOME_UNKNOWN after the server's own commit timeout included), and on
    DEADLINE_EXCEEDED only when the call's deadline passed. RATE_LIMITED
    only with a RetryInfo (without one the batch never fits). A status with
    no ErrorInfo counts as OUTCOME_UNKNOWN when it is UNAVAILABLE (the
    connection broke, or no server answered) or DEADLINE_EXCEEDED (this
    attempt's own timeout): the resend carries the same request_id, so the
    records that landed come back already_present. Any other reason
    (TOO_LARGE, STORE_FULL: only an operator freeing space helps, or one
    this client does not know) or code raises.
    """
    reason = err.reason
    if reason in (errors.OUTCOME_UNKNOWN, errors.NOT_COMMITTED, errors.BACKPRESSURE):
        return True
    if reason == errors.RATE_LIMITED:
        return err.retry_delay is not None and err.retry_delay > 0
    if reason is None:
        return err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    return False


def may_have_landed(err: errors.RolloutdError) -> bool:
    """Whether an append (or delete_shard) attempt that failed with err may
    have taken effect: OUTCOME_UNKNOWN, or a status with no ErrorInfo that
    append_retry counts as one."""
    if err.reason == errors.OUTCOME_UNKNOWN:
        return True
    return err.reason is None and err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def read_retry(err: errors.RolloutdError) -> bool:
    """Whether a read (list_shards, describe_shard, batch_get) that failed
    with err is worth another attempt: a status with no ErrorInfo that is
    UNAVAILABLE or DEADLINE_EXCEEDED (a read changes nothing), or
    RATE_LIMITED with a RetryInfo."""
    if err.reason == errors.RATE_LIMITED:
        return err.retry_delay is not None and err.retry_delay > 0
    return err.reason is None and err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def delete_retry(err: errors.RolloutdError) -> bool:
    """Whether a delete_shard without expected_last_seq that failed with
    err is worth another attempt: only when it certainly did not take
    effect (NOT_COMMITTED, or RATE_LIMITED with a RetryInfo). An attempt
    whose answer was lost may have written the tombstone, and a resend
    would then delete whatever was appended in between."""
    if err.reason == errors.NOT_COMMITTED:
        return True
    return err.reason == errors.RATE_LIMITED and err.retry_delay is not None and err.retry_delay > 0


def conditional_delete_retry(err: errors.RolloutdError) -> bool:
    """Whether a delete_shard with expected_last_seq that failed with err is
    worth another attempt: what delete_retry resends, and what a read
    resends, because a resend cannot delete newer records: it finds its
    first attempt's tombstone (already_deleted), or records appended since
    (SEQ_MISMATCH)."""
    return delete_retry(err) or read_retry(err)


def scan_resumable(err: errors.RolloutdError) -> bool:
    """Whether a Scan stream that ended with err can be resumed from its
    cursor: SCAN_INTERRUPTED (the server names its resume point), or any
    UNAVAILABLE (the connection broke; the client's cursor is exact)."""
    return err.reason == errors.SCAN_INTERRUPTED or err.code == grpc.StatusCode.UNAVAILABLE


def resume_after(err: errors.RolloutdError) -> Optional[int]:
    """The resume_after_seq a SCAN_INTERRUPTED names, if any."""
    raw = err.metadata.get(errors.RESUME_AFTER_SEQ)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class Backoff:
    """Jittered exponential backoff; the server's RetryInfo is a floor."""

    def __init__(self, first: float = FIRST_BACKOFF, maximum: float = MAX_BACKOFF, rng: Optional[random.Random] = None) -> None:
        self._next = first
        self._first = first
        self._max = maximum
        self._rng = rng or random.Random()

    def reset(self) -> None:
        self._next = self._first

    def wait(self, retry_delay: Optional[float] = None) -> float:
        b = self._next
        self._next = min(self._next * 2, self._max)
        w = b / 2 + self._rng.uniform(0, b / 2)
        if retry_delay is not None and retry_delay > w:
            w = retry_delay
        return w
