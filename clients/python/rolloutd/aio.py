"""The asyncio client: ``rolloutd.aio.Client``, the surface of
``rolloutd.Client`` on ``grpc.aio``.

    async with rolloutd.aio.Client("localhost:50051") as client:
        await client.append("exp-1/actor-0", [{"role": "assistant", "content": "4"}])
        async for record in client.scan("exp-1/actor-0"):
            print(record.seq, record.content)
        async with client.subscribe("exp-1", consumer="trainer") as sub:
            async for batch in sub:
                train(batch.records)
                await batch.commit()

Create it inside the event loop that uses it (grpc.aio channels belong to
one loop). Retries, timeouts, errors, types and affinity are those of the
blocking client; see its documentation.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncIterator, Callable, Iterable, List, Mapping, Optional, Sequence, Set, Union

import grpc
import grpc.aio

from . import _calls, _core, _retry, _subscribe, errors
# The public names this module imported before its shared logic moved to
# _core (Client's __init__ among it) stay importable from here.
from ._channel import DEFAULT_MAX_MESSAGE_BYTES, SHARD_HEADER, TLS  # noqa: F401
from ._proto.rollout.v1 import rollout_pb2
from ._proto.rolloutd_vendor.grpc.health.v1 import health_pb2
from ._retry import DEFAULT_RETRY, RetryPolicy  # noqa: F401
from .affinity import Affinity, Endpoints  # noqa: F401
from .client import DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_TIMEOUT  # noqa: F401
from .types import AppendResult, Batch, ConsumerInfo, ConsumerPage, DeleteResult, HealthStatus, ListedShard, Record, RecordLike, Role, ShardInfo, ShardPage

__all__ = ["Client", "Scan", "Subscription"]


class _Stubs:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        # The loop the channel belongs to: its close() must run there.
        try:
            self.loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.calls = _calls.multi_callables(channel)


def _close_now(stubs: _Stubs) -> None:
    """Closes a channel whose loop is gone or stopped, so that no close()
    can be awaited: synchronously, as grpc.aio's own finalizer
    (Channel.__del__) does."""
    core = getattr(stubs.channel, "_channel", None)
    if core is not None and not core.closed():
        core.close()


class Client(_core.ClientCore):
    """An asyncio rolloutd client; use it with ``async with``. The
    arguments are those of :class:`rolloutd.Client`."""

    _grpc = grpc.aio
    _stubs = _Stubs
    _what = "rolloutd.aio.Client"

    def _prepare(self) -> None:
        # The tasks closing retired channels: the loop holds tasks only
        # weakly, so they are kept here until done, and close() awaits them.
        self._closing: Set["asyncio.Task[None]"] = set()

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
        call = self._attempts(method, shard, timeout, retry, request_id, mutates)
        while True:
            addr, stubs = self._pick(shard)
            try:
                try:
                    return call.answered(addr, await stubs.calls[method](req, timeout=call.start(), metadata=call.metadata))
                except grpc.RpcError as e:
                    err, transport, wait = call.failed(e, addr)
                    cause: Optional[BaseException] = e
                if wait is None:
                    raise call.budget.give_up(err, (await self._connected(stubs)) if transport else None, addr) from cause
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
        bg = _core.BatchGet(shard, ids, fields)
        while bg.todo:
            bg.answer(await self._unary(_calls.BATCH_GET, shard, bg.request(), timeout, _retry.read_retry))
        return bg.result()

    async def delete_shard(self, shard: str, *, expected_last_seq: Optional[int] = None, timeout: Optional[float] = None) -> DeleteResult:
        """See :meth:`rolloutd.Client.delete_shard`: the same resends."""
        req = _calls.delete_shard_request(shard, expected_last_seq)
        retry = _retry.delete_retry if expected_last_seq is None else _retry.conditional_delete_retry
        return _calls.delete_result(await self._unary(_calls.DELETE_SHARD, shard, req, timeout, retry, mutates=True))

    async def health(self, *, service: str = _calls.SERVICE_NAME, timeout: Optional[float] = None) -> HealthStatus:
        """See :meth:`rolloutd.Client.health`."""
        tally = self._health(timeout)
        with self._held_all() as held:
            for stubs in held:
                try:
                    resp = await stubs.calls[_calls.HEALTH_CHECK](health_pb2.HealthCheckRequest(service=service), timeout=tally.timeout)
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
        """See :meth:`rolloutd.Client.scan`; returns an async iterator with
        the same ``cursor``."""
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
        """See :meth:`rolloutd.Client.subscribe`; returns an async iterator
        of :class:`Batch` (``async for batch in client.subscribe(...)``),
        also an async context manager, whose commits are awaited."""
        return Subscription(self, *self._subscribe_args(
            prefix, timeout, reconnect_timeout, consumer=consumer, start=start, member=member, members=members,
            positions=positions, rollout_id=rollout_id, role=role, include_in_training=include_in_training, fields=fields,
        ))

    async def commit_consumer(self, prefix: str, consumer: str, positions: Mapping[str, int], *, generation: int = 0, timeout: Optional[float] = None) -> int:
        """See :meth:`rolloutd.Client.commit_consumer`."""
        req = _calls.commit_consumer_request(prefix, consumer, positions, generation)
        return int((await self._unary(_calls.COMMIT_CONSUMER, prefix, req, timeout, _retry.consumer_write_retry)).generation)

    async def describe_consumer(self, prefix: str, consumer: str, *, include_positions: bool = False, timeout: Optional[float] = None) -> ConsumerInfo:
        """See :meth:`rolloutd.Client.describe_consumer`."""
        req = rollout_pb2.DescribeConsumerRequest(prefix=prefix, consumer=consumer, include_positions=include_positions)
        return ConsumerInfo.from_message(await self._unary(_calls.DESCRIBE_CONSUMER, prefix, req, timeout, _retry.read_retry))

    async def list_consumers(self, prefix: str = "", *, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None) -> ConsumerPage:
        """See :meth:`rolloutd.Client.list_consumers`."""
        req = _calls.list_consumers_request(prefix, page_size, page_token)
        return _calls.consumer_page(await self._unary(_calls.LIST_CONSUMERS, prefix, req, timeout, _retry.read_retry))

    async def all_consumers(self, prefix: str = "", *, page_size: int = 0, timeout: Optional[float] = None) -> AsyncIterator[ConsumerInfo]:
        """See :meth:`rolloutd.Client.all_consumers`; an async iterator."""
        token = ""
        while True:
            page = await self.list_consumers(prefix, page_size=page_size, page_token=token, timeout=timeout)
            for c in page.consumers:
                yield c
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def reset_consumer(self, prefix: str, consumer: str, *, to: Optional[str] = None, positions: Optional[Mapping[str, int]] = None, timeout: Optional[float] = None) -> ConsumerInfo:
        """See :meth:`rolloutd.Client.reset_consumer`."""
        req = _calls.reset_consumer_request(prefix, consumer, to, positions)
        return ConsumerInfo.from_message((await self._unary(_calls.RESET_CONSUMER, prefix, req, timeout, _retry.consumer_write_retry)).consumer)

    async def delete_consumer(self, prefix: str, consumer: str, *, timeout: Optional[float] = None) -> None:
        """See :meth:`rolloutd.Client.delete_consumer`."""
        req = rollout_pb2.DeleteConsumerRequest(prefix=prefix, consumer=consumer)
        await self._unary(_calls.DELETE_CONSUMER, prefix, req, timeout, _retry.delete_retry, mutates=True)


class Scan(_core.ScanCore, AsyncIterator[Record]):
    """The async iterator ``Client.scan`` returns; ``cursor`` means what
    :class:`rolloutd.Scan`'s does. ``await scan.aclose()`` (or ``async with``)
    stops a follow."""

    def __init__(self, client: Client, req: rollout_pb2.ScanRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        super().__init__(client, req, timeout, reconnect_timeout)
        self._call: Any = None

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

    async def __anext__(self) -> Record:
        while True:
            rec = self._take()
            if rec is not None:
                return rec
            if self._done:
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
            self._arrived(resp)
            return

    async def _resume_or_raise(self, e: grpc.RpcError) -> None:
        """See rolloutd.Scan._resume_or_raise."""
        err, transport, wait = self._broke(e)
        if wait is None:
            raise self._give_up(err, (await self._client._connected(self._stubs)) if transport else None) from e
        await self._client._pause(self._stubs, wait, transport)


class Subscription(_subscribe.SubscriptionCore, AsyncIterator[Batch]):
    """The async iterator ``Client.subscribe`` returns; its attributes are
    :class:`rolloutd.Subscription`'s. ``async with`` opens the stream and
    waits until the server fixed its starting positions, and closes it on
    exit; ``await sub.commit()`` and ``await batch.commit()`` commit.
    ``await sub.aclose()`` (or ``sub.close()``) ends the iteration."""

    def __init__(self, client: Client, req: rollout_pb2.SubscribeRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        super().__init__(client, req, timeout, reconnect_timeout)
        self._call: Any = None

    def __aiter__(self) -> "Subscription":
        return self

    async def __aenter__(self) -> "Subscription":
        return await self.open()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def open(self) -> "Subscription":
        """See :meth:`rolloutd.Subscription.open`."""
        try:
            while not self._started:
                batch = self._arrived(await self._read())
                if batch is not None:
                    self._queued = batch
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Cancels the stream; the iteration then ends."""
        self._done = True
        if self._call is not None:
            self._call.cancel()
        self._let_go()

    async def aclose(self) -> None:
        self.close()

    def _let_go(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held()

    async def __anext__(self) -> Batch:
        if self._failed is not None:
            raise self._failed
        if self._queued is not None:
            batch, self._queued = self._queued, None
            return batch
        while True:
            resp = await self._read()
            try:
                batch = self._arrived(resp)
            except errors.RolloutdError as e:
                self._failed = e
                self.close()
                raise
            if batch is not None:
                return batch

    async def commit(self) -> None:
        """See :meth:`rolloutd.Subscription.commit`."""
        await self._commit_upto(self._cursors.index)

    async def _commit_upto(self, index: int) -> None:
        req = self._commit_request(index)
        if req is None:
            return
        try:
            resp = await self._client._unary(_calls.COMMIT_CONSUMER, self.prefix, req, None, _retry.consumer_write_retry)
        except errors.RolloutdError as e:
            self._commit_failed(e)
            raise
        self._committed(index, resp)

    async def _read(self) -> rollout_pb2.SubscribeResponse:
        """See rolloutd.Subscription._read."""
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
                    err, transport, wait = self._broke(e)
                    if wait is None:
                        raise self._give_up(err, (await self._client._connected(self._stubs)) if transport else None) from e
                    await self._client._pause(self._stubs, wait, transport)
                finally:
                    self._let_go()
                self.reconnects += 1
                continue
            if resp is grpc.aio.EOF:
                self._call = None
                self._done = True
                self._let_go()
                raise StopAsyncIteration
            return resp
