"""The asyncio client: ``rolloutd.aio.Client``, the surface of
``rolloutd.Client`` on ``grpc.aio``.

    async with rolloutd.aio.Client("localhost:50051") as client:
        await client.append("exp-1/actor-0", [{"role": "assistant", "content": "4"}])
        async for record in client.scan("exp-1/actor-0"):
            print(record.seq, record.content)

Create it inside the event loop that uses it (grpc.aio channels belong to
one loop). Retries, timeouts, errors, types and affinity are those of the
blocking client; see its documentation.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from typing import Any, AsyncIterator, Callable, Iterable, List, Optional, Sequence, Set, Tuple, Union

import grpc
import grpc.aio

from . import _calls, _retry, _tlsreload, errors
from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS, channel_options, resolve_tls, strip_scheme
from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from ._retry import DEFAULT_RETRY, RetryPolicy
from .affinity import Affinity, Endpoints
from .client import DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_TIMEOUT, _hold
from .types import AppendResult, DeleteResult, HealthStatus, ListedShard, Record, RecordLike, Role, ShardInfo, ShardPage

__all__ = ["Client", "Scan"]


class _Stubs:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        # The loop the channel belongs to: its close() must run there.
        try:
            self.loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.calls = {
            m: (channel.unary_stream if m == _calls.SCAN else channel.unary_unary)(m, request_serializer=s, response_deserializer=d)
            for m, (s, d) in _calls.SERIALIZERS.items()
        }


def _close_now(stubs: _Stubs) -> None:
    """Closes a channel whose loop is gone or stopped, so that no close()
    can be awaited: synchronously, as grpc.aio's own finalizer
    (Channel.__del__) does."""
    core = getattr(stubs.channel, "_channel", None)
    if core is not None and not core.closed():
        core.close()


class Client:
    """An asyncio rolloutd client; use it with ``async with``. The
    arguments are those of :class:`rolloutd.Client`."""

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
            if self._creds is not None:
                return _Stubs(grpc.aio.secure_channel(addr, self._creds.current, opts))
            return _Stubs(grpc.aio.insecure_channel(addr, opts))

        # The tasks closing retired channels: the loop holds tasks only
        # weakly, so they are kept here until done, and close() awaits them.
        self._closing: Set["asyncio.Task[None]"] = set()
        self._endpoints: Endpoints[_Stubs] = Endpoints(target, affinity, make, self._close_later)
        self._closed = False

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every channel; calls in flight are cancelled. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for s in self._endpoints.close():
            await s.channel.close()
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _close_later(self, stubs: _Stubs) -> None:
        """Closes a retired channel: in a task on its loop, or at once when
        that loop no longer runs. Endpoints calls it from the loop, or from
        another thread (a scan dropped there, a renewal noticed there)."""
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = stubs.loop or running
        if loop is not None and loop is running:
            self._spawn_close(stubs)
        elif loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._spawn_close, stubs)
        else:
            _close_now(stubs)

    def _spawn_close(self, stubs: _Stubs) -> None:
        task = asyncio.get_running_loop().create_task(stubs.channel.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @property
    def endpoints(self) -> Endpoints[_Stubs]:
        return self._endpoints

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("rolloutd.aio.Client is closed")

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
    async def _connected(stubs: _Stubs) -> bool:
        return stubs.channel.get_state(try_to_connect=False) == grpc.ChannelConnectivity.READY

    async def _pause(self, stubs: _Stubs, wait: float, transport: bool) -> None:
        if not transport or self._endpoints.ring is not None:
            await asyncio.sleep(wait)
            return
        await asyncio.sleep(wait / 10)
        try:
            await asyncio.wait_for(stubs.channel.channel_ready(), wait * 9 / 10)
        except asyncio.TimeoutError:
            pass

    async def _unary(self, method: str, shard: str, req: Any, timeout: Optional[float], retry: Callable[[errors.RolloutdError], bool], request_id: Optional[str] = None, mutates: bool = False) -> Any:
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
                    resp = await stubs.calls[method](req, timeout=min(self._attempt_timeout, remaining), metadata=md)
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
                    raise budget.give_up(err, (await self._connected(stubs)) if transport else None, addr) from cause
                await self._pause(stubs, wait, transport)
            finally:
                self._endpoints.release(stubs)

    async def append(self, shard: str, records: Iterable[RecordLike], *, request_id: Optional[str] = None, timeout: Optional[float] = None) -> List[AppendResult]:
        """See :meth:`rolloutd.Client.append`."""
        rid = request_id or str(uuid.uuid4())
        req = _calls.append_request(shard, records, rid)
        resp = await self._unary(_calls.APPEND, shard, req, timeout, _retry.append_retry, rid)
        return _calls.append_results(resp)

    async def get(self, shard: str, id: str, *, timeout: Optional[float] = None) -> Record:
        """See :meth:`rolloutd.Client.get`; raises rolloutd.NotFound."""
        resp = await self._unary(_calls.GET, shard, rollout_pb2.GetRequest(shard=shard, id=id), timeout, _retry.append_retry)
        return Record(resp.record)

    async def list_shards(self, prefix: str = "", *, page_size: int = 0, page_token: str = "", include_summary: bool = False, timeout: Optional[float] = None) -> ShardPage:
        """See :meth:`rolloutd.Client.list_shards`."""
        req = _calls.list_shards_request(prefix, page_size, page_token, include_summary)
        return _calls.shard_page(await self._unary(_calls.LIST_SHARDS, prefix, req, timeout, _retry.read_retry))

    async def all_shards(self, prefix: str = "", *, page_size: int = 0, include_summary: bool = False, timeout: Optional[float] = None) -> AsyncIterator[ListedShard]:
        """See :meth:`rolloutd.Client.all_shards`; an async iterator."""
        token = ""
        while True:
            page = await self.list_shards(prefix, page_size=page_size, page_token=token, include_summary=include_summary, timeout=timeout)
            for s in page.shards:
                yield s
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def describe_shard(self, shard: str, *, timeout: Optional[float] = None) -> ShardInfo:
        """See :meth:`rolloutd.Client.describe_shard`."""
        resp = await self._unary(_calls.DESCRIBE_SHARD, shard, rollout_pb2.DescribeShardRequest(shard=shard), timeout, _retry.read_retry)
        return ShardInfo.from_message(resp)

    async def batch_get(self, shard: str, ids: Sequence[str], *, fields: Optional[Sequence[str]] = None, timeout: Optional[float] = None) -> List[Optional[Record]]:
        """See :meth:`rolloutd.Client.batch_get`."""
        ids = _calls.batch_get_ids(ids)
        out: List[Optional[Record]] = [None] * len(ids)
        todo = _calls.batch_get_firsts(ids)
        while todo:
            req = _calls.batch_get_request(shard, [ids[i] for i in todo], fields)
            resp = await self._unary(_calls.BATCH_GET, shard, req, timeout, _retry.read_retry)
            todo = _calls.batch_get_fill(out, todo, resp)
        _calls.batch_get_repeats(out, ids)
        return out

    async def delete_shard(self, shard: str, *, expected_last_seq: Optional[int] = None, timeout: Optional[float] = None) -> DeleteResult:
        """See :meth:`rolloutd.Client.delete_shard`: the same resends."""
        req = _calls.delete_shard_request(shard, expected_last_seq)
        retry = _retry.delete_retry if expected_last_seq is None else _retry.conditional_delete_retry
        return _calls.delete_result(await self._unary(_calls.DELETE_SHARD, shard, req, timeout, retry, mutates=True))

    async def health(self, *, service: str = _calls.SERVICE_NAME, timeout: Optional[float] = None) -> HealthStatus:
        """See :meth:`rolloutd.Client.health`."""
        self._check_open()
        t = self._timeout if timeout is None else timeout
        first: Optional[HealthStatus] = None
        last_err: Optional[errors.RolloutdError] = None
        self._renew_if_changed()
        held = self._endpoints.hold_all()
        try:
            for _, stubs in held:
                try:
                    resp = await stubs.calls[_calls.HEALTH_CHECK](health_pb2.HealthCheckRequest(service=service), timeout=t)
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
        """See :meth:`rolloutd.Client.scan`; returns an async iterator with
        the same ``cursor``."""
        self._check_open()
        req = _calls.scan_request(
            shard, after_seq=after_seq, follow=follow, limit=limit, rollout_id=rollout_id, role=role,
            include_in_training=include_in_training, fields=fields,
        )
        return Scan(self, req, timeout, self._timeout if reconnect_timeout is None else reconnect_timeout)


class Scan(AsyncIterator[Record]):
    """The async iterator ``Client.scan`` returns; ``cursor`` means what
    :class:`rolloutd.Scan`'s does. ``await scan.aclose()`` (or ``async with``)
    stops a follow."""

    def __init__(self, client: Client, req: rollout_pb2.ScanRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        self._client = client
        self._req = req
        self._shard = req.shard
        self._limit = req.limit
        self.cursor: int = req.after_seq
        self._yielded = 0
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._reconnect_timeout = reconnect_timeout
        self._call: Any = None
        self._batch: Sequence[rollout_pb2.Record] = ()
        self._pos = 0
        self._batch_cursor: Optional[int] = None
        self._done = False
        # Ends the count in flight of the open stream's channel, once (see
        # rolloutd.Scan), and the budget of resuming after a break.
        self._held: Optional[weakref.finalize] = None
        self._break: Optional[_retry.Budget] = None
        self.reconnects = 0

    def __aiter__(self) -> "Scan":
        return self

    async def __aenter__(self) -> "Scan":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._done = True
        if self._call is not None:
            self._call.cancel()
        self._let_go()

    def _let_go(self) -> None:
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
        self._addr, self._stubs = self._client._pick(self._shard)
        self._held = _hold(self, self._client._endpoints, self._stubs)
        return self._stubs.calls[_calls.SCAN](req, timeout=timeout, metadata=((SHARD_HEADER, self._shard),))

    async def __anext__(self) -> Record:
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
                raise StopAsyncIteration
            await self._fill()

    async def _fill(self) -> None:
        while True:
            if self._done:
                raise StopAsyncIteration
            if self._call is None:
                self._call = self._open()
            try:
                resp = await self._call.read()
            except asyncio.CancelledError:
                if self._done:
                    self._let_go()
                    raise StopAsyncIteration from None
                raise
            except grpc.RpcError as e:
                self._call = None
                try:
                    if self._done:
                        raise StopAsyncIteration from None
                    await self._resume_or_raise(e)
                finally:
                    self._let_go()
                self.reconnects += 1
                continue
            if resp is grpc.aio.EOF:
                self._call = None
                self._done = True
                self._let_go()
                raise StopAsyncIteration
            self._break = None
            self._batch = resp.records
            self._pos = 0
            self._batch_cursor = resp.cursor
            return

    async def _resume_or_raise(self, e: grpc.RpcError) -> None:
        """See rolloutd.Scan._resume_or_raise."""
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
            raise budget.give_up(err, (await self._client._connected(self._stubs)) if transport else None, self._addr) from e
        await self._client._pause(self._stubs, wait, transport)
