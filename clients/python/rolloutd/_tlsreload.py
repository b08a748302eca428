"""Client certificate reload for grpcio, which has no client-side credential
reload: a channel keeps the credentials it was built with. The Go client
reads its certificate again for every handshake (client/tls.go); this client
notices on use that the files changed, and its channels are then replaced
(affinity.Endpoints.renew) so that new connections present the new
certificate, while calls in flight finish on the old channels."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

import grpc

from ._channel import TLS, Stamp

_log = logging.getLogger("rolloutd")


class Credentials:
    """The channel credentials of a TLS config, read again when its files
    change. ``check`` is called on use; it stats the files at most once per
    ``tls.reload_interval`` and starts no thread."""

    def __init__(self, tls: TLS, clock: Callable[[], float] = time.monotonic) -> None:
        self._tls = tls
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp, self._current = tls.load()
        self._next = clock() + tls.reload_interval
        # The stamp of files that could not be used, warned about once.
        self._bad: Optional[Stamp] = None
        #: How many times the files were read again after a change.
        self.reloads = 0

    @property
    def current(self) -> grpc.ChannelCredentials:
        return self._current

    def check(self) -> bool:
        """Reads the files again if they changed since they were last read,
        and reports whether it did: the caller then replaces its channels.
        Files that cannot be read, or a certificate and key that do not
        match (a renewal half-written), keep the old credentials, and are
        tried again when they change again."""
        if self._clock() < self._next or not self._lock.acquire(blocking=False):
            return False
        try:
            self._next = self._clock() + self._tls.reload_interval
            try:
                seen = self._tls.stamp()
            except OSError:
                return False  # a file missing mid-rotation: look again later
            if seen == self._stamp or seen == self._bad:
                return False
            try:
                stamp, creds = self._tls.load()
            except OSError as e:
                self._bad = seen  # warn once per state of the files
                _log.warning("rolloutd: the TLS files changed but cannot be used yet (%s); new connections keep the previous certificate", e)
                return False
            self._stamp, self._current, self._bad = stamp, creds, None
            self.reloads += 1
            _log.info("rolloutd: read the TLS files again (%s); new connections use them", ", ".join(p for p, *_ in stamp))
            return True
        finally:
            self._lock.release()
