"""The blocking client: ``rolloutd.Client``."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from . import _calls, _core, _retry, _subscribe, errors
# The public names this module imported before its shared logic moved to
# _core (Client's __init__ among it) stay importable from here.
from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS  # noqa: F401
from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from ._retry import DEFAULT_RETRY, RetryPolicy  # noqa: F401
from .affinity import Affinity, Endpoints  # noqa: F401
from .types import AppendResult, Batch, ConsumerInfo, ConsumerPage, DeleteResult, HealthStatus, ListedShard, Record, RecordLike, Role, ShardInfo, ShardPage

__all__ = ["Client", "Scan", "Subscription"]

# The policy's defaults live in _retry (docs/clients.md); these names stay
# importable from here.
DEFAULT_TIMEOUT = _retry.DEFAULT_TIMEOUT
DEFAULT_ATTEMPT_TIMEOUT = _retry.DEFAULT_ATTEMPT_TIMEOUT


class _Stubs:
    """One channel and its multi-callables."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.calls = _calls.multi_callables(channel)


class Client(_core.ClientCore):
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

    _grpc = grpc
    _stubs = _Stubs
    _what = "rolloutd.Client"

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

    @staticmethod
    def _close_later(stubs: _Stubs) -> None:
        """Closes a retired channel (now: grpc's blocking close does not wait)."""
        stubs.channel.close()

    @property
    def endpoints(self) -> Endpoints[_Stubs]:
        """The channels (one per pod with affinity), for inspection."""
        return self._endpoints

    def _unary(self, method: str, shard: str, req: Any, timeout: Optional[float], retry: Callable[[errors.RolloutdError], bool], request_id: Optional[str] = None, mutates: bool = False) -> Any:
        call = self._attempts(method, shard, timeout, retry, request_id, mutates)
        while True:
            addr, stubs = self._pick(shard)
            try:
                try:
                    return call.answered(addr, stubs.calls[method](req, timeout=call.start(), metadata=call.metadata))
                except grpc.RpcError as e:
                    err, transport, wait = call.failed(e, addr)
                    cause: Optional[BaseException] = e
                if wait is None:
                    raise call.budget.give_up(err, (self._connected(stubs)) if transport else None, addr) from cause
                self._pause(stubs, wait, transport)
            finally:
                self._endpoints.release(stubs)

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
        bg = _core.BatchGet(shard, ids, fields)
        while bg.todo:
            bg.answer(self._unary(_calls.BATCH_GET, shard, bg.request(), timeout, _retry.read_retry))
        return bg.result()

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
        tally = self._health(timeout)
        with self._held_all() as held:
            for stubs in held:
                try:
                    resp = stubs.calls[_calls.HEALTH_CHECK](health_pb2.HealthCheckRequest(service=service), timeout=tally.timeout)
                except grpc.RpcError as e:
                    tally.failed(e)
                    continue
                if tally.serving(resp.status):
                    return HealthStatus.SERVING
        return tally.result()

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
        return Scan(self, *self._scan_args(
            shard, timeout, reconnect_timeout, after_seq=after_seq, follow=follow, limit=limit, rollout_id=rollout_id,
            role=role, include_in_training=include_in_training, fields=fields,
        ))

    def subscribe(
        self,
        prefix: str,
        *,
        consumer: Optional[str] = None,
        start: Optional[str] = None,
        member: int = 0,
        members: int = 1,
        positions: Optional[Mapping[str, int]] = None,
        rollout_id: Optional[str] = None,
        role: Union[None, Role, int, str] = None,
        include_in_training: Optional[bool] = None,
        fields: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
        reconnect_timeout: Optional[float] = None,
    ) -> "Subscription":
        """Subscribes to every shard under prefix: those that exist and
        those created while it runs, each shard's records in seq order.

        Returns a :class:`Subscription`, an iterator of :class:`Batch`
        (one shard's records, its ``cursor`` and ``deleted``); shards
        interleave. It runs until closed.

        Args:
            prefix: the shards to read, on whole '/'-separated segments
                ("exp-42" covers "exp-42/actor-7", never "exp-420"); ""
                covers every shard. Authorization verb "scan".
            consumer: a consumer name under prefix whose stored positions
                to start from, and to commit to (``batch.commit()``).
            start: where each shard starts: "earliest" (its first record),
                "latest" (only what is committed after the subscription
                started), "consumer" (the consumer's stored positions;
                NotFound when it has none), or None: the consumer's
                positions when it exists, else earliest.
            member, members: this is member ``member`` of ``members``
                sharing the prefix's shards: each reads a stable share
                (rendezvous hashing of the shard name), so ranks of a
                trainer read disjoint shards with no coordinator. While
                members disagree about ``members``, a shard may be read by
                two or by none for a while, never skipped: positions are
                per shard.
            positions: shard -> cursor to start after, overriding start
                for those shards (a :attr:`Subscription.positions` saved
                earlier).
            rollout_id, role, include_in_training, fields: scan's filters
                and field mask.
            timeout: bounds the whole subscription (default: none).
            reconnect_timeout: how long to keep resuming after a break
                (default: the client's timeout).

        When the stream breaks (a server restart, a lost connection) the
        subscription resubscribes with the same options and the cursors
        received so far, so it repeats and misses nothing, within the retry
        policy (docs/clients.md), as :meth:`scan` does. If the consumer
        turns out reset or deleted meanwhile, it raises
        :class:`rolloutd.ConsumerReset` instead. With a consumer, commit
        after processing (``batch.commit()`` or ``sub.commit()``): a new
        subscription then starts after the committed positions, and
        delivers again at most what was not committed (at-least-once).
        """
        return Subscription(self, *self._subscribe_args(
            prefix, timeout, reconnect_timeout, consumer=consumer, start=start, member=member, members=members,
            positions=positions, rollout_id=rollout_id, role=role, include_in_training=include_in_training, fields=fields,
        ))

    def commit_consumer(self, prefix: str, consumer: str, positions: Mapping[str, int], *, generation: int = 0, timeout: Optional[float] = None) -> int:
        """Stores a consumer's positions (shard -> cursor processed up to;
        each shard under prefix) and returns the consumer's generation. A
        position never moves backwards: a lower cursor than the stored one
        keeps the stored one, so members committing concurrently never lose
        each other's progress. The first commit creates the consumer. With
        generation (:attr:`Subscription.consumer_generation`) the commit is
        refused with :class:`rolloutd.ConsumerReset` once the consumer was
        reset since. Idempotent, so resent like an append; authorization
        verb "consume". A subscription's ``commit()`` calls this."""
        req = _calls.commit_consumer_request(prefix, consumer, positions, generation)
        return int(self._unary(_calls.COMMIT_CONSUMER, prefix, req, timeout, _retry.consumer_write_retry).generation)

    def describe_consumer(self, prefix: str, consumer: str, *, include_positions: bool = False, timeout: Optional[float] = None) -> ConsumerInfo:
        """Returns the consumer's :class:`ConsumerInfo`: generation, lag,
        and with include_positions its positions. NotFound when it was never
        committed, or was deleted."""
        req = rollout_pb2.DescribeConsumerRequest(prefix=prefix, consumer=consumer, include_positions=include_positions)
        return ConsumerInfo.from_message(self._unary(_calls.DESCRIBE_CONSUMER, prefix, req, timeout, _retry.read_retry))

    def list_consumers(self, prefix: str = "", *, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None) -> ConsumerPage:
        """Returns one page of the consumers whose prefix lies under prefix
        (whole segments; "" lists all) that the caller may scan, without
        positions and lag. :meth:`all_consumers` iterates over every page."""
        req = _calls.list_consumers_request(prefix, page_size, page_token)
        return _calls.consumer_page(self._unary(_calls.LIST_CONSUMERS, prefix, req, timeout, _retry.read_retry))

    def all_consumers(self, prefix: str = "", *, page_size: int = 0, timeout: Optional[float] = None) -> Iterator[ConsumerInfo]:
        """Iterates over every consumer under prefix (see list_consumers)."""
        token = ""
        while True:
            page = self.list_consumers(prefix, page_size=page_size, page_token=token, timeout=timeout)
            yield from page.consumers
            if not page.next_page_token:
                return
            token = page.next_page_token

    def reset_consumer(self, prefix: str, consumer: str, *, to: Optional[str] = None, positions: Optional[Mapping[str, int]] = None, timeout: Optional[float] = None) -> ConsumerInfo:
        """Moves a consumer's positions, backwards included, and starts a
        new generation of it (creating it if need be): to="earliest" drops
        every position, to="latest" sets each shard's to its last seq now,
        or positions sets exactly those. Subscriptions and commits of the
        older generation then fail with :class:`rolloutd.ConsumerReset`, so
        a member still running cannot undo the reset. Returns the consumer
        with its new generation and positions. Authorization verb
        "consume"."""
        req = _calls.reset_consumer_request(prefix, consumer, to, positions)
        return ConsumerInfo.from_message(self._unary(_calls.RESET_CONSUMER, prefix, req, timeout, _retry.consumer_write_retry).consumer)

    def delete_consumer(self, prefix: str, consumer: str, *, timeout: Optional[float] = None) -> None:
        """Deletes a consumer and its positions; NotFound when it does not
        exist. Resent only when it certainly did not take effect (as
        delete_shard without expected_last_seq): after a lost answer it
        raises with ``may_have_taken_effect`` set."""
        req = rollout_pb2.DeleteConsumerRequest(prefix=prefix, consumer=consumer)
        self._unary(_calls.DELETE_CONSUMER, prefix, req, timeout, _retry.delete_retry, mutates=True)


class Scan(_core.ScanCore, Iterator[Record]):
    """The iterator ``Client.scan`` returns.

    ``cursor`` is the after_seq to resume from (pass it to a later
    ``scan(after_seq=...)`` to continue after a checkpoint):

    * after a record is yielded, it is that record's seq;
    * at the end of each batch (when the next record is asked for), it is
      the batch's cursor, which can be higher when filters skipped records.

    Close it (or use it as a context manager) to cancel a follow.
    """

    def __init__(self, client: Client, req: rollout_pb2.ScanRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        super().__init__(client, req, timeout, reconnect_timeout)
        self._stream: Any = None
        self._lock = threading.Lock()

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

    def __next__(self) -> Record:
        while True:
            rec = self._take()
            if rec is not None:
                return rec
            if self._done:
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
            self._arrived(resp)
            return

    def _resume_or_raise(self, e: grpc.RpcError) -> None:
        """Waits before reopening a stream that broke with e, or raises
        when it cannot be resumed or the budget of this break is spent."""
        err, transport, wait = self._broke(e)
        if wait is None:
            raise self._give_up(err, (self._client._connected(self._stubs)) if transport else None) from e
        self._client._pause(self._stubs, wait, transport)


class Subscription(_subscribe.SubscriptionCore, Iterator[Batch]):
    """The iterator ``Client.subscribe`` returns: ``for batch in sub``.

    ``positions`` holds each shard's cursor received so far, and
    ``consumer_generation`` the consumer generation it started from.
    ``commit()`` (or a batch's ``commit()``) stores the positions for the
    consumer. Used as a context manager, it opens the stream on entry and
    waits until the server fixed its starting positions (with
    start="latest", what is committed from then on is delivered), and
    closes it on exit. ``close()`` ends the iteration, from any thread.
    """

    def __init__(self, client: Client, req: rollout_pb2.SubscribeRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        super().__init__(client, req, timeout, reconnect_timeout)
        self._stream: Any = None
        self._lock = threading.Lock()

    def __iter__(self) -> "Subscription":
        return self

    def __enter__(self) -> "Subscription":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> "Subscription":
        """Starts the stream, if it has not started, and waits for the
        server to fix its starting positions. Returns self."""
        try:
            while not self._started:
                batch = self._arrived(self._read())
                if batch is not None:
                    self._queued = batch
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Cancels the stream; the iteration then ends. Safe from any thread."""
        with self._lock:
            self._done = True
            if self._stream is not None:
                self._stream.cancel()
        self._let_go()

    def _let_go(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held()

    def __next__(self) -> Batch:
        if self._failed is not None:
            raise self._failed
        if self._queued is not None:
            batch, self._queued = self._queued, None
            return batch
        while True:
            resp = self._read()
            try:
                batch = self._arrived(resp)
            except errors.RolloutdError as e:
                self._failed = e
                self.close()
                raise
            if batch is not None:
                return batch

    def commit(self) -> None:
        """Commits the positions of every batch yielded so far for the
        consumer (see :meth:`Client.commit_consumer`). Raises
        :class:`rolloutd.ConsumerReset` when the consumer was reset since
        the subscription started (which also ends the subscription: its
        iteration raises it too), ValueError without a consumer. Safe from
        any thread."""
        self._commit_upto(self._cursors.index)

    def _commit_upto(self, index: int) -> None:
        req = self._commit_request(index)
        if req is None:
            return
        try:
            resp = self._client._unary(_calls.COMMIT_CONSUMER, self.prefix, req, None, _retry.consumer_write_retry)
        except errors.RolloutdError as e:
            self._commit_failed(e)
            raise
        self._committed(index, resp)

    def _read(self) -> rollout_pb2.SubscribeResponse:
        """The stream's next message, reopening it from the positions
        received when it breaks in a way a new Subscribe gets past."""
        while True:
            with self._lock:
                if self._done:
                    raise StopIteration
                if self._stream is None:
                    self._stream = self._open()
                stream = self._stream
            try:
                return next(stream)
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
                    err, transport, wait = self._broke(e)
                    if wait is None:
                        raise self._give_up(err, (self._client._connected(self._stubs)) if transport else None) from e
                    self._client._pause(self._stubs, wait, transport)
                finally:
                    self._let_go()
                self.reconnects += 1
