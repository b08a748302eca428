"""append's retry policy against a scripted fake server: which ErrorInfo
reasons are resent, with the same request_id, after the RetryInfo delay,
within the deadline, with a timeout per attempt."""

from __future__ import annotations

import json
import time
import uuid

import grpc
import pytest

import rolloutd
from rolloutd import _channel
from fakes import FakeServer, ok, status_error

U = grpc.StatusCode.UNAVAILABLE
RE = grpc.StatusCode.RESOURCE_EXHAUSTED


def fail(code, reason=None, retry=None, field=None):
    def step(req, ctx):
        status_error(ctx, code, "scripted %s" % (reason or code.name), reason=reason, retry=retry, field=field)

    return step


def run(steps, **client_kw):
    srv = FakeServer(steps)
    try:
        with rolloutd.Client(srv.addr, **client_kw) as c:
            try:
                return srv, c.append("s/1", [{"content": "a"}, {"content": "b"}]), None
            except rolloutd.RolloutdError as e:
                return srv, None, e
    finally:
        srv.stop()


@pytest.mark.parametrize("reason,code", [
    ("OUTCOME_UNKNOWN", U),
    ("NOT_COMMITTED", U),
    ("BACKPRESSURE", RE),
    ("OUTCOME_UNKNOWN", grpc.StatusCode.DEADLINE_EXCEEDED),
])
def test_retried_reasons_keep_the_request_id(reason, code):
    srv, res, err = run([fail(code, reason), fail(code, reason), ok])
    assert err is None and len(res) == 2
    assert len(srv.requests) == 3
    rids = {r.request_id for r in srv.requests}
    assert len(rids) == 1
    uuid.UUID(rids.pop(), version=4)
    assert srv.requests[0] == srv.requests[2], "every attempt sends the same request"


def test_outcome_unknown_after_the_server_commit_timeout_is_resent():
    # The server gave up on a commit after its commit timeout, far inside
    # the call's deadline: OUTCOME_UNKNOWN on UNAVAILABLE with a RetryInfo,
    # never DEADLINE_EXCEEDED. The resend keeps the request_id.
    srv, res, err = run([fail(U, "OUTCOME_UNKNOWN", retry=0.05), ok])
    assert err is None and len(res) == 2
    assert len(srv.requests) == 2
    assert srv.requests[0] == srv.requests[1]


def test_no_error_info_unavailable_counts_as_outcome_unknown():
    srv, res, err = run([fail(U), ok])
    assert err is None and len(srv.requests) == 2
    assert srv.requests[0].request_id == srv.requests[1].request_id


@pytest.mark.parametrize("step,exc,reason", [
    (fail(RE, "TOO_LARGE", field="records[1]"), rolloutd.ResourceExhausted, "TOO_LARGE"),
    (fail(RE, "RATE_LIMITED", field="records"), rolloutd.ResourceExhausted, "RATE_LIMITED"),
    (fail(RE, "STORE_FULL"), rolloutd.ResourceExhausted, "STORE_FULL"),
    (fail(grpc.StatusCode.INVALID_ARGUMENT), rolloutd.InvalidArgument, None),
    (fail(grpc.StatusCode.PERMISSION_DENIED), rolloutd.PermissionDenied, None),
    (fail(U, "SOME_NEWER_REASON"), rolloutd.Unavailable, "SOME_NEWER_REASON"),
])
def test_not_retried(step, exc, reason):
    srv, res, err = run([step, ok])
    assert isinstance(err, exc) and err.reason == reason
    assert len(srv.requests) == 1
    assert err.request_id == srv.requests[0].request_id


def test_details_reach_the_exception():
    srv, _, err = run([fail(RE, "TOO_LARGE", field="records[1]")])
    assert err.field_violations == (rolloutd.FieldViolation("records[1]", "too big"),)
    assert "scripted TOO_LARGE" in str(err)


def test_retry_info_sets_the_delay():
    srv, res, err = run([fail(RE, "RATE_LIMITED", retry=0.4), ok])
    assert err is None and len(srv.requests) == 2
    assert srv.times[1] - srv.times[0] >= 0.4


def test_gives_up_at_the_deadline():
    t0 = time.monotonic()
    srv, res, err = run([fail(U, "NOT_COMMITTED", retry=0.1)], timeout=1.0)
    took = time.monotonic() - t0
    assert isinstance(err, rolloutd.Unavailable) and err.reason == "NOT_COMMITTED"
    assert 2 <= len(srv.requests) <= 8
    assert took < 1.5


def test_each_attempt_has_its_own_timeout():
    def hang(req, ctx):
        time.sleep(1.5)
        return ok(req, ctx)

    t0 = time.monotonic()
    srv, res, err = run([hang, ok], timeout=5.0, attempt_timeout=0.3)
    assert err is None, err
    assert len(srv.requests) == 2
    assert srv.requests[0].request_id == srv.requests[1].request_id
    assert srv.deadlines[0] is not None and srv.deadlines[0] <= 0.31
    assert time.monotonic() - t0 < 1.5


def test_caller_request_id_is_used():
    srv = FakeServer([fail(U, "OUTCOME_UNKNOWN"), ok])
    try:
        with rolloutd.Client(srv.addr) as c:
            c.append("s/1", [{"content": "a"}], request_id="my-id-1")
        assert [r.request_id for r in srv.requests] == ["my-id-1", "my-id-1"]
    finally:
        srv.stop()


def test_service_config_has_no_retry_policy():
    opts = dict(_channel.channel_options(_channel.DEFAULT_MAX_MESSAGE_BYTES, None))
    cfg = json.loads(opts["grpc.service_config"])
    assert "retryPolicy" not in json.dumps(cfg) and "methodConfig" not in cfg
    assert opts["grpc.max_send_message_length"] == 16 << 20
    assert opts["grpc.max_receive_message_length"] == (16 << 20) + 1024


def test_an_earlier_unknown_outlives_later_refusals():
    """The first attempt may have landed; later ones are refused until the
    deadline. The error raised says the records may have been stored."""
    steps = [fail(U, "OUTCOME_UNKNOWN")] + [fail(U, "NOT_COMMITTED")] * 40
    srv, res, err = run(steps, timeout=1.0)
    assert res is None and err.reason == "NOT_COMMITTED" and len(srv.requests) > 1
    assert err.may_have_been_stored

    srv, res, err = run([fail(U, "NOT_COMMITTED")] * 40, timeout=1.0)
    assert err.reason == "NOT_COMMITTED" and not err.may_have_been_stored
