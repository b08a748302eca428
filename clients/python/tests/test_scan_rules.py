"""A scan resumes after the same failures as the Go client's, listed once in
clients/scan_resume.json (client.TestScanResumeTable checks Go against it),
and waits out the whole backoff when the server answered."""

from __future__ import annotations

import json

import grpc
import pytest

import rolloutd
import rolloutd.aio
from rolloutd import _retry, errors
from rolloutd._proto.rollout.v1 import rollout_pb2
from conftest import REPO
from fakes import FakeServer, ok, status_error

CASES = json.loads((REPO / "clients" / "scan_resume.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "%s-%s-%s" % (c["code"], c["reason"] or "none", c["retry_delay"]))
def test_scan_resumes_as_the_table_says(case):
    err = errors.RolloutdError(
        "broken", code=grpc.StatusCode[case["code"]], reason=case["reason"] or None, retry_delay=case["retry_delay"] or None,
    )
    assert _retry.scan_resumable(err) == case["resume"]


def _interrupted_then_one_record():
    """The first Scan ends as a server shutting down ends it; the next one
    sends a record."""

    def interrupted(req, ctx):
        status_error(ctx, grpc.StatusCode.UNAVAILABLE, "the server is shutting down", reason=errors.SCAN_INTERRUPTED, metadata={"resume_after_seq": "0"})
        yield  # a generator, so that grpc treats it as a stream

    def one(req, ctx):
        yield rollout_pb2.ScanResponse(records=[rollout_pb2.Record(id="r-1", seq=1)], cursor=1)

    return [interrupted, one]


# Waits drawn from [0.5 s, 1 s].
SLOW = rolloutd.RetryPolicy(first_backoff=1.0, max_backoff=1.0)


def test_a_scan_interrupted_by_the_server_waits_its_backoff():
    srv = FakeServer([ok], scans=_interrupted_then_one_record())
    try:
        with rolloutd.Client(srv.addr, retry=SLOW) as c:
            assert [r.id for r in c.scan("s/1")] == ["r-1"]
        assert len(srv.scan_times) == 2
        assert srv.scan_times[1] - srv.scan_times[0] >= 0.5
    finally:
        srv.stop()


@pytest.mark.asyncio
async def test_an_asyncio_scan_interrupted_by_the_server_waits_its_backoff():
    srv = FakeServer([ok], scans=_interrupted_then_one_record())
    try:
        async with rolloutd.aio.Client(srv.addr, retry=SLOW) as c:
            assert [r.id async for r in c.scan("s/1")] == ["r-1"]
        assert len(srv.scan_times) == 2
        assert srv.scan_times[1] - srv.scan_times[0] >= 0.5
    finally:
        srv.stop()
