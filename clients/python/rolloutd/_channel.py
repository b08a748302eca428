"""Channel settings shared by the blocking and the asyncio client: TLS,
message limits and the service config (load balancing only: the client owns
retries, so the config has no retryPolicy and two retry layers never
stack)."""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import grpc

#: The server's default --max-message-bytes (16 MiB). The send limit is this,
#: and the receive limit this plus 1 KiB, so that every record a server with
#: the defaults accepts (at most 4 MiB - 177 bytes by default, and never more
#: than --max-message-bytes) can be read back with Get and Scan. Raise
#: ``max_message_bytes`` together with the server's flag.
DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
RECEIVE_MARGIN = 1 << 10

#: The request header that carries the shard (the Go client's ring_hash
#: hashes it; the Python client sends it too, for any L7 proxy that does).
SHARD_HEADER = "rolloutd-shard"

#: The connection's reconnect backoff, in ms (docs/clients.md): from 100 ms,
#: growing 1.6x (grpc's C core, with 20 % jitter), to at most 1 s; a
#: connection attempt may take 20 s. The Go client sets the same.
RECONNECT_FIRST_MS = 100
RECONNECT_MAX_MS = 1_000
CONNECT_TIMEOUT_MS = 20_000

SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"pick_first": {}}]})

Options = List[Tuple[str, Union[str, int]]]


#: A TLS config's files as they are on disk: (path, device, inode, size,
#: mtime in ns) for each.
Stamp = Tuple[Tuple[str, int, int, int, int], ...]


@dataclass(frozen=True)
class TLS:
    """TLS settings from PEM files (see docs/security.md).

    Args:
        ca: CA certificates to trust; None trusts the system's roots.
        cert, key: the client certificate and its key, for mTLS (both or
            neither).
        server_name: the name to check the server's certificate against,
            when it differs from the target's host (for example when
            dialing a pod's IP).
        reload_interval: how often, at most, a call checks whether the
            files changed (seconds; 0 checks on every call). When they
            did (a certificate renewed by cert-manager or
            csi-driver-spiffe), the client reads them again and opens new
            connections with them; calls in flight finish on the old ones.

    grpcio cannot reload a channel's credentials, so the client replaces
    its channels instead (see ``rolloutd.Client``).
    """

    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None
    reload_interval: float = 1.0

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TLS: give both cert and key for mTLS, or neither")
        if self.reload_interval < 0:
            raise ValueError("TLS: reload_interval must be >= 0")

    def stamp(self) -> Stamp:
        """The files' identity and change time; raises OSError when one is
        missing."""
        out = []
        for path in (self.ca, self.cert, self.key):
            if path is not None:
                st = os.stat(os.fspath(path))
                out.append((os.fspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def load(self) -> Tuple[Stamp, grpc.ChannelCredentials]:
        """Reads the files into credentials, with their stamp. Raises
        OSError (ssl.SSLError included) when a file is missing, the key does
        not match the certificate, or a file changed while being read: a
        renewal caught half-written."""
        before = self.stamp()

        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(os.fspath(path), "rb") as f:
                return f.read()

        ca, cert, key = read(self.ca), read(self.cert), read(self.key)
        if self.cert is not None and self.key is not None:
            # grpc would take a mismatched pair and fail every handshake.
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(self.cert, self.key, password=b"")
        if self.stamp() != before:
            raise OSError("TLS files changed while being read")
        return before, grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def credentials(self) -> grpc.ChannelCredentials:
        return self.load()[1]


def resolve_tls(tls: Union[None, bool, TLS]) -> Optional[TLS]:
    if tls is None or tls is False:
        return None
    if tls is True:
        return TLS()
    if isinstance(tls, TLS):
        return tls
    raise TypeError("tls: want None, True or rolloutd.TLS, got %s" % type(tls).__name__)


def channel_options(max_message_bytes: int, tls: Optional[TLS], server_name: Optional[str] = None, extra: Sequence[Tuple[str, Union[str, int]]] = ()) -> Options:
    opts: Options = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes + RECEIVE_MARGIN),
        ("grpc.service_config", SERVICE_CONFIG),
        # The connection's own reconnect backoff (docs/clients.md): grpc's
        # default (1 s growing 1.6x to 120 s) fails every attempt at once
        # while it runs, so a server back after a restart would not be
        # tried again within a call's budget. min_reconnect_backoff_ms is
        # C core's minimum connect timeout, set to its default.
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_FIRST_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
        # rolloutd disconnects clients that ping more often than every 10 s.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
    ]
    name = (tls.server_name if tls else None) or server_name
    if tls is not None and name:
        opts.append(("grpc.ssl_target_name_override", name))
    opts.extend(extra)
    return opts


def strip_scheme(target: str) -> str:
    """host:port of a target written as host:port or dns:///host:port."""
    for prefix in ("dns:///", "dns:"):
        if target.startswith(prefix):
            return target[len(prefix):]
    return target
