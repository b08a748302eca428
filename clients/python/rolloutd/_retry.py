"""The retry policy of every call and the reconnect policy of scan, shared by
the blocking and the asyncio client: which failures are resent, decided from
the status code and the ErrorInfo reason, never from the message text (the
Go client's client/retry.go is the reference), and how often and how long
(docs/clients.md, with the same defaults as the Go client)."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Optional

import grpc

from . import errors

_log = logging.getLogger("rolloutd")

# The policy's defaults: docs/clients.md, the same as the Go client's
# (tests/test_policy.py checks both against that table).

#: The time budget of a call given no timeout, retries included (seconds).
DEFAULT_TIMEOUT = 30.0
#: The most one attempt may take (seconds).
DEFAULT_ATTEMPT_TIMEOUT = 10.0
#: The first backoff; it doubles per attempt up to MAX_BACKOFF, and each wait
#: is drawn from [backoff/2, backoff].
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 2.0
MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class RetryPolicy:
    """How often a call is attempted and how long it waits in between
    (docs/clients.md; the Go client's ``client.RetryPolicy``).

    Args:
        max_attempts: attempts of one call, the first included; 1 turns
            retries off. For a scan, the failed attempts in a row to resume
            it with nothing received.
        first_backoff: the wait before the second attempt, in seconds; it
            doubles per attempt up to max_backoff. Each wait is drawn from
            [backoff/2, backoff] and is never shorter than the server's
            RetryInfo delay.
        max_backoff: the longest backoff, in seconds.

    The call's ``timeout`` bounds all of it.
    """

    max_attempts: int = MAX_ATTEMPTS
    first_backoff: float = FIRST_BACKOFF
    max_backoff: float = MAX_BACKOFF

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts %r: want an int of at least 1" % (self.max_attempts,))
        if not 0 <= self.first_backoff <= self.max_backoff:
            raise ValueError("RetryPolicy: want 0 <= first_backoff <= max_backoff")


DEFAULT_RETRY = RetryPolicy()


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


def consumer_write_retry(err: errors.RolloutdError) -> bool:
    """Whether a commit_consumer or reset_consumer that failed with err is
    worth resending: what append_retry resends. A commit is idempotent (a
    stored position never moves backwards), and a reset to given positions
    sets the same ones again (its generation grows once more). A commit
    refused with CONSUMER_RESET is never resent."""
    return append_retry(err)


def scan_resumable(err: errors.RolloutdError) -> bool:
    """Whether a Scan stream that ended with err can be resumed from its
    cursor: SCAN_INTERRUPTED whatever its code (the server names its
    resume point), or what a read resends (read_retry: UNAVAILABLE or
    DEADLINE_EXCEEDED without a reason, the client's cursor being exact;
    RATE_LIMITED with a RetryInfo). Any other reason, one this client does
    not know included, ends the scan. These are the Go client's rules
    (retryable(readCall, e)); clients/scan_resume.json lists them for
    both."""
    return err.reason == errors.SCAN_INTERRUPTED or read_retry(err)


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
            w = retry_delay + self._rng.uniform(0, retry_delay / 5)
        return w


def transport_failure(err: errors.RolloutdError) -> bool:
    """Whether an attempt got no answer from rolloutd: UNAVAILABLE without a
    reason (a connection refused, broken or not yet made). A read's storage
    UNAVAILABLE looks the same; the connection's state tells them apart when
    the call gives up."""
    return err.code == grpc.StatusCode.UNAVAILABLE and err.reason is None


class Budget:
    """The retry budget of one call (or of one break of a scan): attempts
    counted against the policy, waits within the deadline, the log lines
    while it retries, and the numbers on the error it gives up with."""

    def __init__(self, policy: RetryPolicy, target: str, what: str, timeout: Optional[float]) -> None:
        self.policy = policy
        self.target = target
        self.what = what
        self.start = time.monotonic()
        self.deadline = None if timeout is None else self.start + timeout
        self.attempts = 0
        self._backoff = Backoff(policy.first_backoff, policy.max_backoff)
        self._warned = False

    def remaining(self) -> Optional[float]:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def next_wait(self, err: errors.RolloutdError) -> Optional[float]:
        """The wait before another attempt after attempt number
        ``self.attempts`` failed with err (which the call's rules resend),
        or None when the budget is spent."""
        if self.attempts >= self.policy.max_attempts:
            return None
        wait = self._backoff.wait(err.retry_delay)
        if self.deadline is not None and time.monotonic() + wait >= self.deadline:
            return None
        if transport_failure(err) and not self._warned:
            self._warned = True
            _log.warning(
                "rolloutd at %s: %s got no answer (%s); retrying, up to %d attempts%s",
                self.target, self.what, err.message, self.policy.max_attempts,
                "" if self.deadline is None else " within %.1fs" % (self.deadline - self.start),
            )
        _log.debug("rolloutd at %s: %s attempt %d failed: %s; next in %.2fs", self.target, self.what, self.attempts, err, wait)
        return wait

    def give_up(self, err: errors.RolloutdError, connected: Optional[bool], addr: Optional[str] = None) -> errors.RolloutdError:
        """err, the call's last failure, with the attempts and the time
        spent; a transport failure while the connection is not READY
        (connected False) names the server as unreachable."""
        err.attempts = self.attempts
        err.elapsed = time.monotonic() - self.start
        if transport_failure(err) and connected is False:
            err.unreachable = addr or self.target
        return err
