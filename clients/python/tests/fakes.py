"""A scripted fake rolloutd (a grpcio server) for the retry policy, and a TCP
proxy that cuts a connection after the server answered."""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent import futures
from typing import Callable, Iterator, List, Optional

import grpc
from google.protobuf import any_pb2, duration_pb2

from rolloutd._proto.rollout.v1 import rollout_pb2
from rolloutd._proto.rolloutd_vendor.google.rpc import error_details_pb2, status_pb2
from rolloutd._proto.rolloutd_vendor.grpc.health.v1 import health_pb2


def status_error(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, reason: Optional[str] = None, retry: Optional[float] = None, field: Optional[str] = None, metadata: Optional[dict] = None) -> None:
    """Aborts the call with a status that carries rolloutd's details."""
    details = []

    def pack(msg, name):
        a = any_pb2.Any(type_url="type.googleapis.com/google.rpc." + name, value=msg.SerializeToString())
        details.append(a)

    if reason:
        pack(error_details_pb2.ErrorInfo(reason=reason, domain="rolloutd.io", metadata=metadata or {}), "ErrorInfo")
    if retry is not None:
        d = duration_pb2.Duration()
        d.FromNanoseconds(int(retry * 1e9))
        pack(error_details_pb2.RetryInfo(retry_delay=d), "RetryInfo")
    if field:
        pack(error_details_pb2.BadRequest(field_violations=[error_details_pb2.BadRequest.FieldViolation(field=field, description="too big")]), "BadRequest")
    st = status_pb2.Status(code=code.value[0], message=message, details=details)
    context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
    context.abort(code, message)


Step = Callable[[rollout_pb2.AppendRequest, grpc.ServicerContext], rollout_pb2.AppendResponse]
ScanStep = Callable[[rollout_pb2.ScanRequest, grpc.ServicerContext], Iterator[rollout_pb2.ScanResponse]]
SubscribeStep = Callable[[rollout_pb2.SubscribeRequest, grpc.ServicerContext], Iterator[rollout_pb2.SubscribeResponse]]


def ok(req: rollout_pb2.AppendRequest, context: grpc.ServicerContext) -> rollout_pb2.AppendResponse:
    return rollout_pb2.AppendResponse(results=[rollout_pb2.AppendResult(id="id-%d" % i, seq=i + 1, epoch=1, generation=1) for i in range(len(req.records))])


class FakeServer:
    """Answers Append attempt i with steps[i] (the last step repeats), Scan
    attempt i with scans[i] (likewise), Subscribe attempt i with
    subscribes[i] (likewise), CommitConsumer with the generation
    commit_generation, refusing an older one as CONSUMER_RESET (recording
    the requests), and health Checks with
    check (SERVING)."""

    def __init__(self, steps: List[Step], scans: Optional[List[ScanStep]] = None, subscribes: Optional[List[SubscribeStep]] = None) -> None:
        self.steps = steps
        self.scans = scans or []
        self.subscribes = subscribes or []
        self.subscribe_requests: List[rollout_pb2.SubscribeRequest] = []
        self.commits: List[rollout_pb2.CommitConsumerRequest] = []
        self.commit_generation = 1
        self.scan_requests: List[rollout_pb2.ScanRequest] = []
        self.scan_times: List[float] = []
        #: Answers health Checks: a HealthCheckResponse status.
        self.check: Callable[[health_pb2.HealthCheckRequest, grpc.ServicerContext], int] = lambda req, ctx: health_pb2.HealthCheckResponse.SERVING
        self.requests: List[rollout_pb2.AppendRequest] = []
        self.times: List[float] = []
        self.deadlines: List[Optional[float]] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "rollout.v1.RolloutService",
            {
                "Append": grpc.unary_unary_rpc_method_handler(self._append, rollout_pb2.AppendRequest.FromString, rollout_pb2.AppendResponse.SerializeToString),
                "Scan": grpc.unary_stream_rpc_method_handler(self._scan, rollout_pb2.ScanRequest.FromString, rollout_pb2.ScanResponse.SerializeToString),
                "Subscribe": grpc.unary_stream_rpc_method_handler(self._subscribe, rollout_pb2.SubscribeRequest.FromString, rollout_pb2.SubscribeResponse.SerializeToString),
                "CommitConsumer": grpc.unary_unary_rpc_method_handler(self._commit, rollout_pb2.CommitConsumerRequest.FromString, rollout_pb2.CommitConsumerResponse.SerializeToString),
            },
        )
        health = grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health",
            {"Check": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: health_pb2.HealthCheckResponse(status=self.check(req, ctx)),
                health_pb2.HealthCheckRequest.FromString, health_pb2.HealthCheckResponse.SerializeToString)},
        )
        self._server.add_generic_rpc_handlers((handler, health))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.addr = "127.0.0.1:%d" % port
        self._server.start()

    def _append(self, req: rollout_pb2.AppendRequest, context: grpc.ServicerContext) -> rollout_pb2.AppendResponse:
        i = len(self.requests)
        self.requests.append(req)
        self.times.append(time.monotonic())
        self.deadlines.append(context.time_remaining())
        return self.steps[min(i, len(self.steps) - 1)](req, context)

    def _scan(self, req: rollout_pb2.ScanRequest, context: grpc.ServicerContext) -> Iterator[rollout_pb2.ScanResponse]:
        i = len(self.scan_requests)
        self.scan_requests.append(req)
        self.scan_times.append(time.monotonic())
        return self.scans[min(i, len(self.scans) - 1)](req, context)

    def _subscribe(self, req: rollout_pb2.SubscribeRequest, context: grpc.ServicerContext) -> Iterator[rollout_pb2.SubscribeResponse]:
        i = len(self.subscribe_requests)
        self.subscribe_requests.append(req)
        return self.subscribes[min(i, len(self.subscribes) - 1)](req, context)

    def _commit(self, req: rollout_pb2.CommitConsumerRequest, context: grpc.ServicerContext) -> rollout_pb2.CommitConsumerResponse:
        self.commits.append(req)
        if req.generation and req.generation < self.commit_generation:
            status_error(context, grpc.StatusCode.FAILED_PRECONDITION, "consumer reset", reason="CONSUMER_RESET", metadata={"generation": str(self.commit_generation)})
        return rollout_pb2.CommitConsumerResponse(generation=self.commit_generation)

    def stop(self) -> None:
        self._server.stop(0)


class CuttingProxy:
    """A TCP proxy for one h2c backend. Once armed, it forwards the client's
    next request, and when the server's answer to it starts (a HEADERS frame
    on a stream, which rolloutd sends only after the handler returned, so
    after the Append committed), it drops that answer and closes both
    connections: the client sees UNAVAILABLE with no ErrorInfo."""

    def __init__(self, backend: str) -> None:
        host, port = backend.rsplit(":", 1)
        self.backend = (host, int(port))
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.addr = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.armed = threading.Event()
        #: When set to an Event, connections accepted after a cut wait for it
        #: before reaching the backend: a test acts between an attempt and
        #: its resend (which reconnects).
        self.gate: Optional[threading.Event] = None
        self.cuts = 0
        self.connections = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.connections += 1
            gate = self.gate
            if gate is not None and self.cuts:
                gate.wait(60)
            s = socket.create_connection(self.backend)
            for x in (c, s):
                x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pipe, args=(c, s), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(s, c), daemon=True).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        self._close(src, dst)

    def _server_to_client(self, s: socket.socket, c: socket.socket) -> None:
        """Forwards frame by frame, to cut before a response's HEADERS."""
        buf = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                buf += b
                while len(buf) >= 9:
                    length = struct.unpack(">I", b"\0" + buf[:3])[0]
                    if len(buf) < 9 + length:
                        break
                    ftype = buf[3]
                    stream = struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
                    frame, buf = buf[: 9 + length], buf[9 + length :]
                    if self.armed.is_set() and ftype == 0x1 and stream != 0:
                        self.armed.clear()
                        self.cuts += 1
                        self._close(s, c)
                        return
                    c.sendall(frame)
        except OSError:
            pass
        self._close(s, c)

    def close(self) -> None:
        self._stop = True
        self.lsock.close()
