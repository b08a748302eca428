"""Shard affinity: route every call for a shard to the same rolloutd pod,
exactly as grpc's ring_hash load balancer does (gRFC A42, with the request
hash taken from the ``rolloutd-shard`` header as in gRFC A76).

grpcio has no header-keyed ring_hash, so the ring is built here and the
client keeps one channel per pod. A Python worker and a Go trainer that
share a shard must pick the same pod, or they fence each other on every
switch; tests/test_ring_crosslang.py checks that this ring and grpc-go's
route 1,000 shard names identically.

The ring (grpc-go balancer/ringhash/ring.go): every endpoint has weight 1,
so each has normalized weight w = 1/n, and

    scale = min(ceil(w * min_ring_size) / w, max_ring_size)

Endpoints sorted by their hash key (the address string, "10.0.0.7:50051",
or "[fd00::7]:50051" for IPv6) each add entries
``XXH64(f"{key}_{i}", seed=0)`` for i = 0, 1, ... while the running count is
below the running target (which grows by scale * w per endpoint). The
entries are sorted by hash. A shard's hash is ``XXH64(shard)``; it picks the
first entry whose hash is >= it, wrapping to the first. If that pod is down,
the walk continues clockwise to the next distinct pod, as ring_hash skips
endpoints in TRANSIENT_FAILURE: while a pod is down, only the shards on its
arcs move. When the resolver drops it, the ring is rebuilt for n-1 pods, and
since each pod's entry count is ceil(min_ring_size/n), the survivors' new
entries take a few other arcs too (about 1 shard in 8 for 5 -> 4 pods);
grpc-go does the same, and matching it is what matters. Affinity is an
optimization: correctness never depends on it (rolloutd fences writers).
"""

from __future__ import annotations

import bisect
import math
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generic, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

try:
    import xxhash
except ImportError:  # affinity is optional: pip install 'rolloutd-client[affinity]'
    xxhash = None  # type: ignore[assignment]

from ._channel import strip_scheme

__all__ = ["Affinity", "Ring", "resolve_addresses"]

#: rolloutd's ring size bounds (deploy/client/service-config.json).
MIN_RING_SIZE = 1024
MAX_RING_SIZE = 4096


@dataclass(frozen=True)
class Affinity:
    """Shard-affinity settings for ``Client(target, affinity=...)``.

    Args:
        addresses: a fixed list of "host:port" pod addresses. When None,
            the client's target (a headless Service, "host:port" or
            "dns:///host:port") is resolved to one address per pod, and
            re-resolved every ``refresh_interval`` seconds.
        refresh_interval: seconds between resolutions.
        eject_seconds: how long a pod whose connection failed is skipped
            (its shards go to the next pod on the ring) before it is tried
            again.
        min_ring_size, max_ring_size: ring_hash's bounds; they must equal
            the Go clients' (1024 and 4096 in rolloutd's service config).
    """

    addresses: Optional[Sequence[str]] = None
    refresh_interval: float = 30.0
    eject_seconds: float = 5.0
    min_ring_size: int = MIN_RING_SIZE
    max_ring_size: int = MAX_RING_SIZE


def _hash(s: str) -> int:
    return xxhash.xxh64_intdigest(s.encode("utf-8"))


def _need_xxhash() -> None:
    if xxhash is None:
        raise ImportError(
            "rolloutd shard affinity needs xxhash: pip install 'rolloutd-client[affinity]' (Debian: apt-get install python3-xxhash)"
        )


class Ring:
    """grpc ring_hash's ring over a set of endpoint addresses (all weight 1)."""

    def __init__(self, addresses: Iterable[str], min_ring_size: int = MIN_RING_SIZE, max_ring_size: int = MAX_RING_SIZE) -> None:
        _need_xxhash()
        keys = sorted(set(addresses))
        if not keys:
            raise ValueError("Ring: no addresses")
        self.addresses: Tuple[str, ...] = tuple(keys)
        # The same float arithmetic as ring.go, in the same order.
        weight_sum = len(keys)
        w = 1.0 / float(weight_sum)
        min_w = min(1.0, w)
        scale = min(math.ceil(min_w * float(min_ring_size)) / min_w, float(max_ring_size))
        items: List[Tuple[int, str]] = []
        current = target = 0.0
        for key in keys:
            target += scale * w
            i = 0
            while current < target:
                items.append((_hash("%s_%d" % (key, i)), key))
                i += 1
                current += 1
        items.sort(key=lambda e: e[0])
        self._hashes = [h for h, _ in items]
        self._keys = [k for _, k in items]

    def __len__(self) -> int:
        return len(self._hashes)

    def pick(self, shard: str) -> str:
        """The address ring_hash picks for shard when every pod is up."""
        return self._keys[self._index(shard)]

    def walk(self, shard: str) -> Iterator[str]:
        """Distinct addresses in ring order, starting with pick(shard)."""
        start = self._index(shard)
        seen = set()
        n = len(self._keys)
        for j in range(n):
            k = self._keys[(start + j) % n]
            if k not in seen:
                seen.add(k)
                yield k
                if len(seen) == len(self.addresses):
                    return

    def _index(self, shard: str) -> int:
        i = bisect.bisect_left(self._hashes, _hash(shard))
        return 0 if i == len(self._hashes) else i


def _join(host: str, port: int) -> str:
    # Go's net.JoinHostPort, which grpc-go's DNS resolver uses.
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def resolve_addresses(target: str) -> List[str]:
    """One "ip:port" per address the target's host resolves to."""
    hostport = strip_scheme(target)
    host, sep, port = hostport.rpartition(":")
    if not sep:
        raise ValueError("affinity: target %r has no port" % target)
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    return sorted({_join(str(ai[4][0]).split("%")[0], int(port)) for ai in infos})


C = TypeVar("C")


class Endpoints(Generic[C]):
    """The channels of a client: one, or one per pod with affinity.

    ``pick`` is called from the calling thread (or the event loop for the
    asyncio client), which also creates and retires channels; a resolver
    thread only swaps the ring.
    """

    def __init__(
        self,
        target: str,
        affinity: Optional[Affinity],
        make_channel: Callable[[str], C],
        close_channel: Callable[[C], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = target
        self._aff = affinity
        self._make = make_channel
        self._close = close_channel
        self._clock = clock
        # Reentrant: acquire holds it around pick, which creates channels
        # under it.
        self._lock = threading.RLock()
        self._channels: Dict[str, C] = {}
        # Calls in flight per channel, and the channels retired (by renew,
        # or a pod leaving the ring) that still have some: each is closed
        # when its last call ends.
        self._inflight: Dict[C, int] = {}
        self._draining: Dict[C, None] = {}
        self._ejected: Dict[str, float] = {}
        self._ring: Optional[Ring] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if affinity is None:
            return
        if affinity.addresses is not None:
            self._ring = Ring(affinity.addresses, affinity.min_ring_size, affinity.max_ring_size)
            return
        self._ring = Ring(resolve_addresses(target), affinity.min_ring_size, affinity.max_ring_size)
        self._thread = threading.Thread(target=self._refresh_loop, name="rolloutd-resolver", daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return self._target

    @property
    def ring(self) -> Optional[Ring]:
        return self._ring

    def _refresh_loop(self) -> None:
        assert self._aff is not None
        while not self._stop.wait(self._aff.refresh_interval):
            try:
                addrs = resolve_addresses(self._target)
            except OSError:
                continue  # keep the last good set
            if addrs and self._ring is not None and tuple(addrs) != self._ring.addresses:
                self._ring = Ring(addrs, self._aff.min_ring_size, self._aff.max_ring_size)

    def set_addresses(self, addresses: Sequence[str]) -> None:
        """Replaces the pod set (as a resolution would); for tests and for
        callers with their own discovery."""
        if self._aff is None:
            raise ValueError("set_addresses needs affinity")
        self._ring = Ring(addresses, self._aff.min_ring_size, self._aff.max_ring_size)

    def _channel(self, addr: str) -> C:
        ch = self._channels.get(addr)
        if ch is None:
            with self._lock:
                ch = self._channels.get(addr)
                if ch is None:
                    ch = self._make(addr)
                    self._channels[addr] = ch
        return ch

    def _retire(self, ring: Ring) -> None:
        """Drops the channels of pods no longer resolved. One with calls in
        flight drains as renew's do: closing it would cancel them, and a
        cancelled call is never resent (an append would not even know
        whether it landed)."""
        with self._lock:
            idle = self._drop([a for a in self._channels if a not in ring.addresses])
        for ch in idle:
            self._close(ch)

    def _drop(self, addrs: List[str]) -> List[C]:
        """Forgets the channels of addrs (under self._lock): those with
        calls in flight drain, and the idle ones are returned, to be closed
        outside the lock."""
        idle = []
        for a in addrs:
            ch = self._channels.pop(a)
            self._ejected.pop(a, None)
            if self._inflight.get(ch):
                self._draining[ch] = None
            else:
                idle.append(ch)
        return idle

    def pick(self, shard: str) -> Tuple[str, C]:
        ring = self._ring
        if ring is None:
            return self._target, self._channel(self._target)
        if len(self._channels) > len(ring.addresses):
            self._retire(ring)
        now = self._clock()
        first = None
        for addr in ring.walk(shard):
            if first is None:
                first = addr
            until = self._ejected.get(addr)
            if until is None or until <= now:
                return addr, self._channel(addr)
        assert first is not None
        return first, self._channel(first)

    def acquire(self, shard: str) -> Tuple[str, C]:
        """pick, counting a call in flight on the channel until release."""
        with self._lock:
            addr, ch = self.pick(shard)
            self._inflight[ch] = self._inflight.get(ch, 0) + 1
            return addr, ch

    def hold_all(self) -> List[Tuple[str, C]]:
        """``channels()``, each counted in flight until ``release``. They
        are counted under the lock that renew takes: a channel looked up
        first and counted later could be closed in between by a renewal in
        another thread (or another task, across an await)."""
        with self._lock:
            chans = self._all()
            for _, ch in chans:
                self._inflight[ch] = self._inflight.get(ch, 0) + 1
            return chans

    def release(self, ch: C) -> None:
        """Ends a call counted by acquire or hold_all; the last call on a
        retired channel closes it."""
        with self._lock:
            n = self._inflight.get(ch, 0) - 1
            if n > 0:
                self._inflight[ch] = n
                return
            self._inflight.pop(ch, None)
            if ch not in self._draining:
                return
            del self._draining[ch]
        self._close(ch)

    def renew(self) -> None:
        """Retires every channel: later calls get new ones from
        make_channel (new TLS credentials, after a certificate renewal). A
        retired channel without calls in flight is closed now; the others
        when their last call ends, so that no call in flight fails (a
        following scan keeps its stream until it ends or breaks, and then
        resumes on a new channel)."""
        with self._lock:
            idle = self._drop(list(self._channels))
            self._ejected.clear()
        for ch in idle:
            self._close(ch)

    @property
    def draining(self) -> int:
        """How many retired channels still carry calls in flight."""
        return len(self._draining)

    def eject(self, addr: str) -> None:
        """Skips addr for eject_seconds: its connection failed."""
        if self._aff is not None and self._ring is not None:
            self._ejected[addr] = self._clock() + self._aff.eject_seconds

    def healthy(self, addr: str) -> None:
        self._ejected.pop(addr, None)

    def channels(self) -> List[Tuple[str, C]]:
        """Every address with a channel; with affinity, one per pod. For
        inspection: a call on one needs ``hold_all``."""
        return self._all()

    def _all(self) -> List[Tuple[str, C]]:
        if self._ring is None:
            return [(self._target, self._channel(self._target))]
        return [(a, self._channel(a)) for a in self._ring.addresses]

    def close(self) -> List[C]:
        """Stops the resolver and returns the channels for the caller to close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            chans = list(self._channels.values()) + list(self._draining)
            self._channels.clear()
            self._draining.clear()
            self._inflight.clear()
        return chans
