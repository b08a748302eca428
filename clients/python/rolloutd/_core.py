"""What the blocking and the asyncio client share apart from their I/O:
configuration, each unary call's attempts, BatchGet's bookkeeping, Health's
tally and a Scan's state. A client keeps only the calls, the awaits and the
waits, so that the two cannot drift apart in what they decide."""

from __future__ import annotations

import contextlib
import time
import weakref
from types import ModuleType
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from . import _calls, _retry, _tlsreload, errors
from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS, channel_options, resolve_tls, strip_scheme
from ._proto.rollout.v1 import rollout_pb2
from ._retry import RetryPolicy
from .affinity import Affinity, Endpoints
from .types import HealthStatus, Record


class ClientCore:
    """The configuration and channel picking of both Clients. A subclass
    sets _grpc (grpc or grpc.aio, whose channel constructors are alike),
    _stubs (its class wrapping a channel) and _what (its name in errors)."""

    _grpc: ModuleType
    _stubs: Callable[[Any], Any]
    _what: str

    def __init__(
        self,
        target: str,
        *,
        tls: Union[None, bool, TLS] = None,
        affinity: Optional[Affinity] = None,
        timeout: float = _retry.DEFAULT_TIMEOUT,
        attempt_timeout: float = _retry.DEFAULT_ATTEMPT_TIMEOUT,
        retry: RetryPolicy = _retry.DEFAULT_RETRY,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        self._tls = resolve_tls(tls)
        self._timeout = timeout
        self._attempt_timeout = attempt_timeout
        if not isinstance(retry, RetryPolicy):
            raise TypeError("retry: want a rolloutd.RetryPolicy, got %s" % type(retry).__name__)
        self._retry = retry
        # Read again when the files change (a renewed certificate): grpcio
        # cannot reload a channel's credentials, so the channels are
        # replaced (see _pick).
        self._creds = _tlsreload.Credentials(self._tls) if self._tls else None
        host = strip_scheme(target).rpartition(":")[0].strip("[]") if affinity is not None else None
        self._channel_args = (max_message_bytes, host, options)
        self._prepare()
        self._endpoints: Endpoints[Any] = Endpoints(target, affinity, self._make, self._close_later)
        self._closed = False

    def _prepare(self) -> None:
        """Sets up what the subclass's _close_later needs, before any
        channel can retire."""

    def _close_later(self, stubs: Any) -> None:
        raise NotImplementedError

    def _make(self, addr: str) -> Any:
        """A new channel to addr, with the current TLS files."""
        max_message_bytes, host, options = self._channel_args
        opts = channel_options(max_message_bytes, self._tls, host, options)
        if self._creds is not None:
            return self._stubs(self._grpc.secure_channel(addr, self._creds.current, opts))
        return self._stubs(self._grpc.insecure_channel(addr, opts))

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("%s is closed" % self._what)

    def _renew_if_changed(self) -> None:
        """Replaces the channels when the TLS files changed (a renewed
        client certificate): new calls handshake with the new files."""
        if self._creds is not None and self._creds.check():
            self._endpoints.renew()

    def _pick(self, shard: str) -> Tuple[str, Any]:
        """The channel for one call on shard, counted in flight until
        ``self._endpoints.release``."""
        self._renew_if_changed()
        return self._endpoints.acquire(shard)

    @contextlib.contextmanager
    def _held_all(self) -> Iterator[List[Any]]:
        """Every channel (one per pod with affinity), counted in flight
        while the block runs, so that a renewal cannot close one under a
        call."""
        self._renew_if_changed()
        held = self._endpoints.hold_all()
        try:
            yield [stubs for _, stubs in held]
        finally:
            for _, stubs in held:
                self._endpoints.release(stubs)

    def _attempts(self, method: str, shard: str, timeout: Optional[float], retry: Callable[[errors.RolloutdError], bool], request_id: Optional[str], mutates: bool) -> "Attempts":
        self._check_open()
        return Attempts(self, method, shard, timeout, retry, request_id, mutates)

    def _health(self, timeout: Optional[float]) -> "HealthTally":
        self._check_open()
        return HealthTally(self._timeout if timeout is None else timeout)

    def _scan_args(self, shard: str, timeout: Optional[float], reconnect_timeout: Optional[float], **filters: Any) -> Tuple[rollout_pb2.ScanRequest, Optional[float], float]:
        """The arguments of a Scan: its request, its timeout and the budget
        of resuming after a break (default: the client's timeout)."""
        self._check_open()
        req = _calls.scan_request(shard, **filters)
        return req, timeout, self._timeout if reconnect_timeout is None else reconnect_timeout

    def _subscribe_args(self, prefix: str, timeout: Optional[float], reconnect_timeout: Optional[float], **options: Any) -> Tuple[rollout_pb2.SubscribeRequest, Optional[float], float]:
        """The arguments of a Subscription, as _scan_args's."""
        self._check_open()
        req = _calls.subscribe_request(prefix, **options)
        return req, timeout, self._timeout if reconnect_timeout is None else reconnect_timeout


class Attempts:
    """The attempts of one unary call: its budget, and what a failed
    attempt means for the call (resent or not, may have landed)."""

    def __init__(self, client: ClientCore, method: str, shard: str, timeout: Optional[float], retry: Callable[[errors.RolloutdError], bool], request_id: Optional[str], mutates: bool) -> None:
        self.budget = _retry.Budget(client._retry, client._endpoints.target, method.rsplit("/", 1)[-1], client._timeout if timeout is None else timeout)
        self.metadata = ((SHARD_HEADER, shard),)
        self._endpoints = client._endpoints
        self._attempt_timeout = client._attempt_timeout
        self._retry = retry
        self._request_id = request_id
        self._mutates = mutates
        # An earlier attempt of this append or delete may have taken effect.
        self._landed = False

    def start(self) -> float:
        """The timeout of the attempt about to start; raises
        DeadlineExceeded when the call's deadline has passed."""
        remaining = self.budget.remaining()
        assert remaining is not None
        self.budget.attempts += 1
        if remaining <= 0:
            raise errors.DeadlineExceeded("the call's deadline passed before an attempt could start", request_id=self._request_id)
        return min(self._attempt_timeout, remaining)

    def answered(self, addr: str, resp: Any) -> Any:
        """resp, the answer of an attempt on addr, which is healthy again."""
        self._endpoints.healthy(addr)
        return resp

    def failed(self, e: grpc.RpcError, addr: str) -> Tuple[errors.RolloutdError, bool, Optional[float]]:
        """The error of an attempt on addr that failed with e, whether it
        was a transport failure, and the wait before the next attempt
        (None: give up)."""
        err = errors.from_rpc_error(e, self._request_id)
        if self._request_id is not None or self._mutates:
            self._landed = self._landed or _retry.may_have_landed(err)
            err.may_have_taken_effect = self._landed
            if self._request_id is not None:  # an append
                err.may_have_been_stored = self._landed
        transport = _retry.transport_failure(err)
        if transport:
            self._endpoints.eject(addr)
        wait = self.budget.next_wait(err) if self._retry(err) else None
        return err, transport, wait


class BatchGet:
    """A BatchGet's bookkeeping across its calls: the server answers each
    id once and may leave some over its response limit for a later call."""

    def __init__(self, shard: str, ids: Sequence[str], fields: Optional[Sequence[str]]) -> None:
        self._shard = shard
        self._fields = fields
        self._ids = _calls.batch_get_ids(ids)
        self._out: List[Optional[Record]] = [None] * len(self._ids)
        self.todo = _calls.batch_get_firsts(self._ids)

    def request(self) -> rollout_pb2.BatchGetRequest:
        return _calls.batch_get_request(self._shard, [self._ids[i] for i in self.todo], self._fields)

    def answer(self, resp: rollout_pb2.BatchGetResponse) -> None:
        self.todo = _calls.batch_get_fill(self._out, self.todo, resp)

    def result(self) -> List[Optional[Record]]:
        _calls.batch_get_repeats(self._out, self._ids)
        return self._out


class HealthTally:
    """Health's answer over the pods: SERVING when any serves, else the
    first pod's status, else the last error."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._first: Optional[HealthStatus] = None
        self._last_err: Optional[errors.RolloutdError] = None

    def failed(self, e: grpc.RpcError) -> None:
        self._last_err = errors.from_rpc_error(e)

    def serving(self, status: int) -> bool:
        """Counts a pod's status; True when it serves (the answer)."""
        st = HealthStatus(status)
        if st == HealthStatus.SERVING:
            return True
        self._first = self._first if self._first is not None else st
        return False

    def result(self) -> HealthStatus:
        if self._first is not None:
            return self._first
        assert self._last_err is not None
        raise self._last_err


def hold(scan: object, endpoints: Endpoints[Any], stubs: Any) -> weakref.finalize:
    """endpoints.release(stubs), once: when called, or when scan is
    collected. It holds no reference to scan."""
    f = weakref.finalize(scan, endpoints.release, stubs)
    f.atexit = False
    return f


class ScanCore:
    """A Scan's state: its cursor, the current batch, and the resumes after
    a break. A subclass reads the stream and waits."""

    def __init__(self, client: Any, req: rollout_pb2.ScanRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        self._client = client
        self._req = req
        self._shard = req.shard
        self._limit = req.limit
        self.cursor: int = req.after_seq
        self._yielded = 0
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._reconnect_timeout = reconnect_timeout
        self._batch: Sequence[rollout_pb2.Record] = ()
        self._pos = 0
        self._batch_cursor: Optional[int] = None
        self._done = False
        # Ends the count in flight of the open stream's channel (so that a
        # certificate renewal does not close it under the stream): called
        # when the stream ends, and by the garbage collector when the
        # caller breaks off the iteration and drops the scan unclosed, or
        # the retired channel would never close.
        self._held: Optional[weakref.finalize] = None
        # The budget of resuming after the current break (docs/clients.md);
        # None while batches arrive.
        self._break: Optional[_retry.Budget] = None
        #: How many times the stream was reopened after a break.
        self.reconnects = 0

    def _open(self) -> Any:
        """Starts the stream from the cursor, with what is left of the
        limit and of the timeout."""
        req = rollout_pb2.ScanRequest()
        req.CopyFrom(self._req)
        req.after_seq = self.cursor
        if self._limit:
            req.limit = self._limit - self._yielded
        timeout = None
        if self._deadline is not None:
            timeout = self._deadline - time.monotonic()
            if timeout <= 0:
                raise errors.DeadlineExceeded("the scan's deadline passed")
        self._addr, self._stubs = self._client._pick(self._shard)
        self._held = hold(self, self._client._endpoints, self._stubs)
        return self._stubs.calls[_calls.SCAN](req, timeout=timeout, metadata=((SHARD_HEADER, self._shard),))

    def _take(self) -> Optional[Record]:
        """The batch's next record; None when it is used up, with _done set
        when the scan is over (else the next batch is to be read)."""
        if self._pos < len(self._batch):
            rec = self._batch[self._pos]
            self._pos += 1
            self.cursor = rec.seq
            self._yielded += 1
            return Record(rec)
        if self._batch_cursor is not None:
            self.cursor = max(self.cursor, self._batch_cursor)
            self._batch_cursor = None
        if self._done or (self._limit and self._yielded >= self._limit):
            self._done = True
        return None

    def _arrived(self, resp: rollout_pb2.ScanResponse) -> None:
        self._break = None
        self._batch = resp.records
        self._pos = 0
        self._batch_cursor = resp.cursor

    def _broke(self, e: grpc.RpcError) -> Tuple[errors.RolloutdError, bool, Optional[float]]:
        """After the stream broke with e: its error, whether it was a
        transport failure, and the wait before reopening (None: give up,
        with _give_up). Raises when the scan cannot be resumed."""
        err = errors.from_rpc_error(e)
        if not _retry.scan_resumable(err) or (self._deadline is not None and time.monotonic() >= self._deadline):
            self._done = True
            raise err from e
        resume = _retry.resume_after(err)
        if resume is not None:
            self.cursor = max(self.cursor, resume)
        # As for a unary call: only an attempt that got no answer says
        # anything about the pod; after SCAN_INTERRUPTED the server answered,
        # and the wait is the whole backoff.
        transport = _retry.transport_failure(err)
        if transport:
            self._client._endpoints.eject(self._addr)
        if self._break is None:
            self._break = _retry.Budget(self._client._retry, self._addr, "Scan", self._reconnect_timeout)
        self._break.attempts += 1
        wait = self._break.next_wait(err)
        if wait is None:
            self._done = True
        return err, transport, wait

    def _give_up(self, err: errors.RolloutdError, connected: Optional[bool]) -> errors.RolloutdError:
        assert self._break is not None
        return self._break.give_up(err, connected, self._addr)
