"""The blocking client: ``rolloutd.Client``."""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from . import _calls, _retry, _tlsreload, errors
from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS, channel_options, resolve_tls, strip_scheme
from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from ._retry import DEFAULT_RETRY, RetryPolicy
from .affinity import Affinity, Endpoints
from .types import AppendResult, DeleteResult, HealthStatus, ListedShard, Record, RecordLike, Role, ShardInfo, ShardPage

__all__ = ["Client", "Scan"]

# The policy's defaults live in _retry (docs/clients.md); these names stay
# importable from here.
DEFAULT_TIMEOUT = _retry.DEFAULT_TIMEOUT
DEFAULT_ATTEMPT_TIMEOUT = _retry.DEFAULT_ATTEMPT_TIMEOUT


class _Stubs:
    """One channel and its multi-callables."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.calls = {
            m: (channel.unary_stream if m == _calls.SCAN else channel.unary_unary)(m, request_serializer=s, response_deserializer=d)
            for m, (s, d) in _calls.SERIALIZERS.items()
        }


class Client:
    """A blocking rolloutd client; use it as a context manager.

    Args:
        target: "host:port", or "dns:///host:port" (a headless Service with
            ``affinity``).
        tls: None for plaintext, True for TLS with the system's roots, or a
            :class:`rolloutd.TLS` with PEM paths (mTLS with cert and key).
        affinity: None, or a :class:`rolloutd.Affinity` to route each shard to
            one pod as grpc's ring_hash does (``Affinity()`` resolves target).
        timeout: the default deadline of a call, in seconds, retries
            included. A scan's is None (no deadline) unless given.
            docs/clients.md is the whole retry policy, the same as the Go
            client's.
        attempt_timeout: the most one attempt may take, so that one hung try
            cannot use up a call's deadline.
        max_message_bytes: the server's --max-message-bytes; sets the send
            limit, and the receive limit to it plus 1 KiB.
        options: extra grpc channel options.

    The client is safe to share between threads.
    """

    def __init__(
        self,
        target: str,
        *,
        tls: Union[None, bool, TLS] = None,
        affinity: Optional[Affinity] = None,
        timeout: float = DEFAULT_TIMEOUT,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
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

        def make(addr: str) -> _Stubs:
            opts = channel_options(max_message_bytes, self._tls, host, options)
            ch = grpc.secure_channel(addr, self._creds.current, opts) if self._creds is not None else grpc.insecure_channel(addr, opts)
            return _Stubs(ch)

        self._endpoints: Endpoints[_Stubs] = Endpoints(target, affinity, make, lambda s: s.channel.close())
        self._closed = False

    # Context manager and lifetime.
    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes every channel; calls in flight are cancelled. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for s in self._endpoints.close():
            s.channel.close()

    @property
    def endpoints(self) -> Endpoints[_Stubs]:
        """The channels (one per pod with affinity), for inspection."""
        return self._endpoints

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("rolloutd.Client is closed")

    def _unary(self, method: str, shard: str, req: Any, timeout: Optional[float], retry: Callable[[errors.RolloutdError], bool], request_id: Optional[str] = None, mutates: bool = False) -> Any:
        self._check_open()
        budget = _retry.Budget(self._retry, self._endpoints.target, method.rsplit("/", 1)[-1], self._timeout if timeout is None else timeout)
        md = ((SHARD_HEADER, shard),)
        # An earlier attempt of this append or delete may have taken effect.
        landed = False
        while True:
            addr, stubs = self._pick(shard)
            try:
                remaining = budget.remaining()
                assert remaining is not None
                budget.attempts += 1
                try:
                    if remaining <= 0:
                        raise errors.DeadlineExceeded("the call's deadline passed before an attempt could start", request_id=request_id)
                    resp = stubs.calls[method](req, timeout=min(self._attempt_timeout, remaining), metadata=md)
                    self._endpoints.healthy(addr)
                    return resp
                except grpc.RpcError as e:
                    err = errors.from_rpc_error(e, request_id)
                    cause: Optional[BaseException] = e
                if request_id is not None or mutates:
                    landed = landed or _retry.may_have_landed(err)
                    err.may_have_taken_effect = landed
                    if request_id is not None:  # an append
                        err.may_have_been_stored = landed
                transport = _retry.transport_failure(err)
                if transport:
                    self._endpoints.eject(addr)
                wait = budget.next_wait(err) if retry(err) else None
                if wait is None:
                    raise budget.give_up(err, (self._connected(stubs)) if transport else None, addr) from cause
                self._pause(stubs, wait, transport)
            finally:
                self._endpoints.release(stubs)

    def _renew_if_changed(self) -> None:
        """Replaces the channels when the TLS files changed (a renewed
        client certificate): new calls handshake with the new files."""
        if self._creds is not None and self._creds.check():
            self._endpoints.renew()

    def _pick(self, shard: str) -> Tuple[str, _Stubs]:
        """The channel for one call on shard, counted in flight until
        ``self._endpoints.release``."""
        self._renew_if_changed()
        return self._endpoints.acquire(shard)

    @staticmethod
    def _connected(stubs: _Stubs) -> bool:
        """Whether stubs' channel is READY now. grpc's blocking channel has
        no get_state: a subscription delivers the current state at once."""
        got: List[grpc.ChannelConnectivity] = []
        seen = threading.Event()

        def watch(state: grpc.ChannelConnectivity) -> None:
            got.append(state)
            seen.set()

        stubs.channel.subscribe(watch)
        try:
            seen.wait(0.5)
        finally:
            stubs.channel.unsubscribe(watch)
        return bool(got) and got[0] == grpc.ChannelConnectivity.READY

    def _pause(self, stubs: _Stubs, wait: float, transport: bool) -> None:
        """Waits before a retry. After a transport failure on the only
        channel, it returns as soon as the channel is ready again: a channel
        left in TRANSIENT_FAILURE reconnects on its own backoff, and an RPC
        sent before then fails at once with the old error."""
        if not transport or self._endpoints.ring is not None:
            time.sleep(wait)
            return
        time.sleep(wait / 10)
        ready = grpc.channel_ready_future(stubs.channel)
        try:
            ready.result(timeout=wait * 9 / 10)
        except grpc.FutureTimeoutError:
            ready.cancel()  # unsubscribes

    def append(self, shard: str, records: Iterable[RecordLike], *, request_id: Optional[str] = None, timeout: Optional[float] = None) -> List[AppendResult]:
        """Appends records to shard atomically and returns one result per
        record, in order.

        Records are dicts with the proto's snake_case keys, ``rolloutd.Record``
        or ``rollout_pb2.Record``. request_id (a fresh UUID4 when None) is
        sent on every attempt, so that a resend after OUTCOME_UNKNOWN, a broken
        connection or an attempt timeout stores nothing twice: records that
        landed come back with ``already_present`` set. Retries follow the
        ErrorInfo reason (OUTCOME_UNKNOWN, NOT_COMMITTED, BACKPRESSURE,
        RATE_LIMITED with a RetryInfo) with jittered backoff within timeout;
        anything else raises. A raised error carries ``request_id``.
        """
        rid = request_id or str(uuid.uuid4())
        req = _calls.append_request(shard, records, rid)
        resp = self._unary(_calls.APPEND, shard, req, timeout, _retry.append_retry, rid)
        return _calls.append_results(resp)

    def get(self, shard: str, id: str, *, timeout: Optional[float] = None) -> Record:
        """Returns the record with id; raises rolloutd.NotFound when the shard
        has none. UNAVAILABLE is retried within timeout."""
        resp = self._unary(_calls.GET, shard, rollout_pb2.GetRequest(shard=shard, id=id), timeout, _retry.append_retry)
        return Record(resp.record)

    def list_shards(self, prefix: str = "", *, page_size: int = 0, page_token: str = "", include_summary: bool = False, timeout: Optional[float] = None) -> ShardPage:
        """Returns one page of the shards under prefix that the caller may
        list (authorization verb "list").

        prefix covers whole '/'-separated segments: "exp-42" lists "exp-42"
        and "exp-42/actor-7", never "exp-420"; "" lists every shard. Shards
        come in the byte order of ``shard + "/_"`` ("a-x" before "a"),
        stable across pages. page_size 0 is the server's default (100; at
        most 1000). A page may hold fewer shards, even none, and still have
        a next one: pass its ``next_page_token`` as page_token, with the
        same prefix. include_summary adds each shard's :class:`ShardInfo`
        (a manifest read per shard); a deleted shard is listed until it is
        written again, with ``summary.deleted`` set. UNAVAILABLE is retried
        within timeout. :meth:`all_shards` iterates over every page.
        """
        req = _calls.list_shards_request(prefix, page_size, page_token, include_summary)
        return _calls.shard_page(self._unary(_calls.LIST_SHARDS, prefix, req, timeout, _retry.read_retry))

    def all_shards(self, prefix: str = "", *, page_size: int = 0, include_summary: bool = False, timeout: Optional[float] = None) -> Iterator[ListedShard]:
        """Iterates over every shard under prefix, page after page (see
        :meth:`list_shards`); timeout bounds each page. It raises the first
        error."""
        token = ""
        while True:
            page = self.list_shards(prefix, page_size=page_size, page_token=token, include_summary=include_summary, timeout=timeout)
            yield from page.shards
            if not page.next_page_token:
                return
            token = page.next_page_token

    def describe_shard(self, shard: str, *, timeout: Optional[float] = None) -> ShardInfo:
        """Returns the shard's :class:`ShardInfo`, read exactly from its
        current manifest. Raises rolloutd.NotFound for a shard never
        written, and its subclass rolloutd.ShardDeleted for a deleted one.
        UNAVAILABLE is retried within timeout."""
        resp = self._unary(_calls.DESCRIBE_SHARD, shard, rollout_pb2.DescribeShardRequest(shard=shard), timeout, _retry.read_retry)
        return ShardInfo.from_message(resp)

    def batch_get(self, shard: str, ids: Sequence[str], *, fields: Optional[Sequence[str]] = None, timeout: Optional[float] = None) -> List[Optional[Record]]:
        """Returns the records with ids, one entry per id in request order:
        the :class:`Record`, or None when the shard holds no record with
        that id (a missing id is not an error). An id may repeat; each
        occurrence gets its entry (it is asked for once).

        Up to 1000 ids (the server's limit: InvalidArgument past it). The
        server answers at most about 3 MiB of records per call and marks the
        rest "over the response limit"; this method asks again for those,
        in further calls, until every id is answered. fields names the
        top-level Record fields to return (id and seq always are), as in
        :meth:`scan`. Raises rolloutd.ShardDeleted when the shard was
        deleted, rolloutd.NotFound when it was never written. UNAVAILABLE
        is retried within timeout, which bounds each call.
        """
        ids = _calls.batch_get_ids(ids)
        out: List[Optional[Record]] = [None] * len(ids)
        todo = _calls.batch_get_firsts(ids)
        while todo:
            req = _calls.batch_get_request(shard, [ids[i] for i in todo], fields)
            resp = self._unary(_calls.BATCH_GET, shard, req, timeout, _retry.read_retry)
            todo = _calls.batch_get_fill(out, todo, resp)
        _calls.batch_get_repeats(out, ids)
        return out

    def delete_shard(self, shard: str, *, expected_last_seq: Optional[int] = None, timeout: Optional[float] = None) -> DeleteResult:
        """Deletes the shard's records (authorization verb "delete"); with
        expected_last_seq, only if the shard's last seq
        (:attr:`ShardInfo.last_seq`) is still that, i.e. nothing was
        appended since the caller looked: otherwise rolloutd.SeqMismatch,
        and nothing is deleted. The delete takes effect at once; storage is
        reclaimed in the background. Deleting a deleted shard succeeds with
        ``already_deleted`` set. An append afterwards starts the shard
        afresh, with seqs above the deleted ones.

        Resends: an attempt whose answer was lost (UNAVAILABLE or
        DEADLINE_EXCEEDED without an ErrorInfo) may have deleted the shard,
        and a resend would then delete whatever was appended in between.
        So without expected_last_seq only what certainly did not take
        effect is resent (NOT_COMMITTED); anything else raises, with
        ``may_have_taken_effect`` set when the delete may have landed
        (describe the shard and delete again with its last_seq). With
        expected_last_seq those failures are resent too, because a resend
        cannot delete newer records: it finds the first attempt's tombstone
        and returns ``already_deleted``, or finds records appended since and
        raises rolloutd.SeqMismatch, with ``may_have_taken_effect`` set when
        an earlier attempt may have deleted the records through
        expected_last_seq. The records appended since survive either way;
        ``already_deleted`` is never returned for a live shard.
        """
        req = _calls.delete_shard_request(shard, expected_last_seq)
        retry = _retry.delete_retry if expected_last_seq is None else _retry.conditional_delete_retry
        return _calls.delete_result(self._unary(_calls.DELETE_SHARD, shard, req, timeout, retry, mutates=True))

    def health(self, *, service: str = _calls.SERVICE_NAME, timeout: Optional[float] = None) -> HealthStatus:
        """grpc.health.v1 Check of service. With affinity, SERVING when any
        pod serves (the client can work), else the first pod's status."""
        self._check_open()
        t = self._timeout if timeout is None else timeout
        first: Optional[HealthStatus] = None
        last_err: Optional[errors.RolloutdError] = None
        self._renew_if_changed()
        held = self._endpoints.hold_all()
        try:
            for _, stubs in held:
                try:
                    resp = stubs.calls[_calls.HEALTH_CHECK](health_pb2.HealthCheckRequest(service=service), timeout=t)
                except grpc.RpcError as e:
                    last_err = errors.from_rpc_error(e)
                    continue
                st = HealthStatus(resp.status)
                if st == HealthStatus.SERVING:
                    return st
                first = first if first is not None else st
        finally:
            for _, stubs in held:
                self._endpoints.release(stubs)
        if first is not None:
            return first
        assert last_err is not None
        raise last_err

    def scan(
        self,
        shard: str,
        *,
        after_seq: int = 0,
        follow: bool = False,
        limit: int = 0,
        rollout_id: Optional[str] = None,
        role: Union[None, Role, int, str] = None,
        include_in_training: Optional[bool] = None,
        fields: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
        reconnect_timeout: Optional[float] = None,
    ) -> "Scan":
        """Iterates over shard's records in seq order, after after_seq.

        Returns a :class:`Scan`, an iterator of :class:`Record` whose
        ``cursor`` is the checkpoint to resume from. With follow, it waits for
        new records until closed. When the stream breaks (UNAVAILABLE, for
        example a server that shuts down and names its resume point), it
        reconnects and resumes from its cursor, so every record is yielded
        exactly once; it gives up after the retry policy's max_attempts failed
        attempts in a row, or reconnect_timeout seconds (default: the
        client's timeout) after the break (docs/clients.md). timeout bounds the
        whole scan (default: none).
        """
        self._check_open()
        req = _calls.scan_request(
            shard, after_seq=after_seq, follow=follow, limit=limit, rollout_id=rollout_id, role=role,
            include_in_training=include_in_training, fields=fields,
        )
        return Scan(self, req, timeout, self._timeout if reconnect_timeout is None else reconnect_timeout)


def _hold(scan: object, endpoints: Endpoints[Any], stubs: Any) -> weakref.finalize:
    """endpoints.release(stubs), once: when called, or when scan is
    collected. It holds no reference to scan."""
    f = weakref.finalize(scan, endpoints.release, stubs)
    f.atexit = False
    return f


class Scan(Iterator[Record]):
    """The iterator ``Client.scan`` returns.

    ``cursor`` is the after_seq to resume from (pass it to a later
    ``scan(after_seq=...)`` to continue after a checkpoint):

    * after a record is yielded, it is that record's seq;
    * at the end of each batch (when the next record is asked for), it is
      the batch's cursor, which can be higher when filters skipped records.

    Close it (or use it as a context manager) to cancel a follow.
    """

    def __init__(self, client: Client, req: rollout_pb2.ScanRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        self._client = client
        self._req = req
        self._shard = req.shard
        self._limit = req.limit
        self.cursor: int = req.after_seq
        self._yielded = 0
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._reconnect_timeout = reconnect_timeout
        self._stream: Any = None
        self._batch: Sequence[rollout_pb2.Record] = ()
        self._pos = 0
        self._batch_cursor: Optional[int] = None
        self._done = False
        self._lock = threading.Lock()
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

    def __iter__(self) -> "Scan":
        return self

    def __enter__(self) -> "Scan":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Cancels the stream; the iterator then ends. Safe from any thread."""
        with self._lock:
            self._done = True
            if self._stream is not None:
                self._stream.cancel()
        self._let_go()

    def _let_go(self) -> None:
        """Ends the count of the stream's channel in flight; idempotent."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held()

    def _open(self) -> Any:
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
        addr, stubs = self._client._pick(self._shard)
        self._addr, self._stubs, self._held = addr, stubs, _hold(self, self._client._endpoints, stubs)
        return stubs.calls[_calls.SCAN](req, timeout=timeout, metadata=((SHARD_HEADER, self._shard),))

    def __next__(self) -> Record:
        while True:
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
                raise StopIteration
            self._fill()

    def _fill(self) -> None:
        """Reads the next batch, reconnecting from the cursor when the stream
        breaks in a way a new Scan gets past."""
        while True:
            with self._lock:
                if self._done:
                    raise StopIteration
                if self._stream is None:
                    self._stream = self._open()
                stream = self._stream
            try:
                resp = next(stream)
            except StopIteration:
                self._done = True
                self._let_go()
                raise
            except grpc.RpcError as e:
                with self._lock:
                    self._stream = None
                    closed = self._done  # by close()
                try:
                    if closed:
                        raise StopIteration from None
                    self._resume_or_raise(e)
                finally:
                    self._let_go()
                self.reconnects += 1
                continue
            self._break = None
            self._batch = resp.records
            self._pos = 0
            self._batch_cursor = resp.cursor
            return

    def _resume_or_raise(self, e: grpc.RpcError) -> None:
        """Waits before reopening a stream that broke with e, or raises
        when it cannot be resumed or the budget of this break is spent."""
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
        budget = self._break
        budget.attempts += 1
        wait = budget.next_wait(err)
        if wait is None:
            self._done = True
            raise budget.give_up(err, (self._client._connected(self._stubs)) if transport else None, self._addr) from e
        self._client._pause(self._stubs, wait, transport)
