"""What the blocking and the asyncio subscription share apart from their
I/O: the cursors received per shard (the positions a broken stream resumes
from, with repeats dropped), the log of yielded batches a commit takes its
positions from, the consumer generation kept across resumes, and the
budget of each break. A subscription keeps only the reads and the waits."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Deque, Dict, Optional, Sequence, Tuple

import grpc

from . import _calls, _core, _retry, errors
from ._proto.rollout.v1 import rollout_pb2
from .types import Batch, Record


class Cursors:
    """A subscription's positions: for each shard, the cursor of the last
    batch received (or the one it was given to start from).

    A resumed stream starts each shard after these, so the server repeats
    nothing; records at or below a shard's cursor are dropped all the same
    (a batch that brings nothing new is no batch), so that a repeat can
    never reach the caller. With ``log`` (a subscription with a consumer)
    it also keeps each yielded batch's (index, shard, cursor) until a
    commit covering it succeeds: commit(k) stores the positions of the
    batches up to k, never those of later ones. Safe between threads.
    """

    def __init__(self, positions: Dict[str, int], log: bool) -> None:
        self._lock = threading.Lock()
        self._positions = dict(positions)
        # shard -> the cursor of the last deletion yielded, so that a
        # resumed stream reporting it again is not a second deletion.
        self._deleted: Dict[str, int] = {}
        self._log: Optional[Deque[Tuple[int, str, int]]] = collections.deque() if log else None
        #: The index of the last batch accepted (1 for the first).
        self.index = 0
        # The highest index a commit succeeded for.
        self._committed = 0
        #: The consumer generation the subscription started from (0
        #: without a consumer, or before it exists); None before the first
        #: stream started.
        self.generation: Optional[int] = None

    def positions(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._positions)

    def accept(self, shard: str, records: Sequence[rollout_pb2.Record], cursor: int, deleted: bool) -> Optional[Tuple[int, Sequence[rollout_pb2.Record], int]]:
        """Takes one batch as received: its index, the records not seen
        before and its cursor; None when it brings nothing new (a repeat)."""
        with self._lock:
            known = self._positions.get(shard)
            if known is not None:
                if records and records[0].seq <= known:
                    records = [r for r in records if r.seq > known]
                if not records and cursor <= known and (not deleted or self._deleted.get(shard) == cursor):
                    return None
                cursor = max(cursor, known)
            self._positions[shard] = cursor
            if deleted:
                self._deleted[shard] = cursor
            self.index += 1
            if self._log is not None:
                self._log.append((self.index, shard, cursor))
            return self.index, records, cursor

    def pending(self, upto: int) -> Dict[str, int]:
        """The positions of the batches up to index upto not yet covered
        by a commit that succeeded."""
        out: Dict[str, int] = {}
        with self._lock:
            for i, shard, cursor in self._log or ():
                if i > upto:
                    break
                if cursor > out.get(shard, -1):
                    out[shard] = cursor
        return out

    def committed(self, upto: int) -> None:
        """A commit of the batches up to index upto succeeded."""
        with self._lock:
            self._committed = max(self._committed, upto)
            while self._log and self._log[0][0] <= self._committed:
                self._log.popleft()

    def started(self, generation: int, consumer: str, prefix: str, from_consumer: bool) -> None:
        """A stream started, reading the consumer at generation. Only the
        first fixes the generation: a resumed stream at another one means
        the consumer was reset meanwhile, or deleted (0) when the stream
        starts from the consumer's positions, and the cursors held here
        would undo that, so the subscription ends with ConsumerReset (the
        Go client's rule)."""
        with self._lock:
            if self.generation is None:
                self.generation = generation
                return
            mine = self.generation
            if mine == 0:
                # Started before the consumer existed: it may have been
                # created since (generation 1, by a commit), but not reset
                # since, which these cursors would undo.
                if generation <= 1:
                    self.generation = generation
                    return
            elif generation == mine or (generation == 0 and not from_consumer):
                return
        raise errors.ConsumerReset(
            "consumer %r under prefix %r is at generation %d, but the subscription started from generation %d: "
            "it was reset or deleted meanwhile; subscribe again" % (consumer, prefix, generation, mine),
            metadata={errors.GENERATION: str(generation)},
        )

    def fixed(self, positions: Dict[str, int]) -> None:
        """The starts a LATEST stream fixed (its started message's
        positions) count as received: a resume sends them back. With a
        consumer they are logged as yielded before any batch, so that a
        commit stores them and the consumer does not read a shard that
        sent nothing yet from its first record."""
        with self._lock:
            for shard, cursor in positions.items():
                if cursor > self._positions.get(shard, -1):
                    self._positions[shard] = cursor
                    if self._log is not None:
                        self._log.append((self.index, shard, cursor))

    def adopt(self, generation: int) -> None:
        """A commit answered the consumer's generation: a subscription that
        started before its consumer existed (generation 0) takes it."""
        with self._lock:
            if not self.generation:
                self.generation = generation


class SubscriptionCore:
    """A subscription's state: its request, its cursors, the stream's
    started message and the resumes after a break. A subclass reads the
    stream, waits and commits."""

    def __init__(self, client: Any, req: rollout_pb2.SubscribeRequest, timeout: Optional[float], reconnect_timeout: float) -> None:
        self._client = client
        self._req = req
        #: The subscription's prefix and consumer (None without one).
        self.prefix = req.prefix
        self.consumer: Optional[str] = req.consumer or None
        self._cursors = Cursors(dict(req.positions), log=bool(req.consumer))
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._reconnect_timeout = reconnect_timeout
        self._done = False
        # Why the subscription ended, raised again by further reads: a
        # commit refused as CONSUMER_RESET ends it, as in the Go client.
        self._failed: Optional[errors.RolloutdError] = None
        # Whether the current stream sent its started message.
        self._started = False
        # A batch that came with the started message, read by open().
        self._queued: Optional[Batch] = None
        # As ScanCore's: ends the count in flight of the stream's channel.
        self._held: Any = None
        self._break: Optional[_retry.Budget] = None
        #: How many times the stream was reopened after a break.
        self.reconnects = 0

    @property
    def positions(self) -> Dict[str, int]:
        """The cursor of each shard received so far (shard -> cursor), with
        the positions the subscription was given: pass it as a new
        subscription's ``positions`` to continue after what was received."""
        return self._cursors.positions()

    @property
    def consumer_generation(self) -> Optional[int]:
        """The consumer's generation the subscription started from (0
        without a consumer, or when the consumer did not exist yet: then
        the first commit's); None until the stream started."""
        return self._cursors.generation

    def _open(self) -> Any:
        """Starts a stream from the positions received so far."""
        req = rollout_pb2.SubscribeRequest()
        req.CopyFrom(self._req)
        req.positions.clear()
        req.positions.update(self._cursors.positions())
        if req.start == rollout_pb2.SUBSCRIBE_START_LATEST and self._cursors.generation is not None:
            # A stream started (the generation is known then): the shards
            # it started are among the cursors, and any other shard was
            # created since, which LATEST reads from its first record too.
            # Resuming from LATEST would start a shard that sent nothing
            # before the break at its last seq at the resume.
            req.start = rollout_pb2.SUBSCRIBE_START_EARLIEST
        timeout = None
        if self._deadline is not None:
            timeout = self._deadline - time.monotonic()
            if timeout <= 0:
                raise errors.DeadlineExceeded("the subscription's deadline passed")
        # Any instance serves any prefix, so the call names no shard (no
        # shard header, as the Go client); with affinity the prefix picks
        # the pod.
        self._addr, self._stubs = self._client._pick(self.prefix)
        self._held = _core.hold(self, self._client._endpoints, self._stubs)
        self._started = False
        return self._stubs.calls[_calls.SUBSCRIBE](req, timeout=timeout)

    def _arrived(self, resp: rollout_pb2.SubscribeResponse) -> Optional[Batch]:
        """The batch resp carries, if it brings anything new. Raises
        ConsumerReset when a resumed stream started from another
        generation of the consumer."""
        self._break = None
        if resp.HasField("started"):
            self._started = True
            from_consumer = self._req.start in (rollout_pb2.SUBSCRIBE_START_UNSPECIFIED, rollout_pb2.SUBSCRIBE_START_CONSUMER)
            self._cursors.started(resp.started.consumer_generation, self._req.consumer, self.prefix, from_consumer)
            self._cursors.fixed(dict(resp.started.positions))
        if not resp.shard:
            return None
        got = self._cursors.accept(resp.shard, resp.records, resp.cursor, resp.shard_deleted)
        if got is None:
            return None
        index, records, cursor = got
        return Batch(resp.shard, [Record(r) for r in records], cursor, resp.shard_deleted, lambda: self._commit_upto(index))

    def _commit_upto(self, index: int) -> Any:
        raise NotImplementedError

    def _commit_request(self, upto: int) -> Optional[rollout_pb2.CommitConsumerRequest]:
        """The commit of the batches up to index upto; None when there is
        nothing new to store."""
        if self.consumer is None:
            raise ValueError("commit: the subscription has no consumer (subscribe with consumer=...)")
        positions = self._cursors.pending(upto)
        if not positions:
            return None
        # A consumer that did not exist when the subscription started is
        # created at generation 1 by the first commit: sending 1, not 0
        # (which the server does not check), makes a commit after a reset
        # of it refused instead of undoing the reset.
        return _calls.commit_consumer_request(self.prefix, self.consumer, positions, max(self._cursors.generation or 0, 1))

    def _commit_failed(self, err: BaseException) -> None:
        """A commit raised err: a reset consumer ends the subscription,
        whose cursors would otherwise undo the reset."""
        if isinstance(err, errors.ConsumerReset):
            self._failed = err
            self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _committed(self, upto: int, resp: rollout_pb2.CommitConsumerResponse) -> None:
        self._cursors.committed(upto)
        self._cursors.adopt(resp.generation)

    def _broke(self, e: grpc.RpcError) -> Tuple[errors.RolloutdError, bool, Optional[float]]:
        """As ScanCore._broke: the error, whether it was a transport
        failure, and the wait before reopening (None: give up). Raises
        when the subscription cannot be resumed."""
        err = errors.from_rpc_error(e)
        if not _retry.scan_resumable(err) or (self._deadline is not None and time.monotonic() >= self._deadline):
            self._done = True
            raise err from e
        transport = _retry.transport_failure(err)
        if transport:
            self._client._endpoints.eject(self._addr)
        if self._break is None:
            self._break = _retry.Budget(self._client._retry, self._addr, "Subscribe", self._reconnect_timeout)
        self._break.attempts += 1
        wait = self._break.next_wait(err)
        if wait is None:
            self._done = True
        return err, transport, wait

    def _give_up(self, err: errors.RolloutdError, connected: Optional[bool]) -> errors.RolloutdError:
        assert self._break is not None
        return self._break.give_up(err, connected, self._addr)
