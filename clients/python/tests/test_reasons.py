"""The ErrorInfo reasons, byte for byte as the server sends them today.

The client takes its reason constants from the generated
rollout.v1.ErrorReason (proto/rollout/v1/error_reason.proto), whose value
names are the wire strings, as the server and the Go client do. The literals
here pin them: a renamed value, or regenerated code with a changed byte, fails
this test (internal/server and client have the same list)."""

from __future__ import annotations

import grpc
import pytest

from rolloutd import errors
from rolloutd._proto.rollout.v1 import error_reason_pb2
from rolloutd._proto.rolloutd_vendor.google.rpc import error_details_pb2, status_pb2

# (the reason as sent, its number in the enum)
WIRE = [
    ("OUTCOME_UNKNOWN", 1),
    ("NOT_COMMITTED", 2),
    ("BACKPRESSURE", 3),
    ("RATE_LIMITED", 4),
    ("TOO_LARGE", 5),
    ("SCAN_INTERRUPTED", 6),
    ("SHARD_DELETED", 7),
    ("SEQ_MISMATCH", 8),
    ("STORE_FULL", 9),
    ("CONSUMER_RESET", 10),
]


@pytest.mark.parametrize("wire,number", WIRE)
def test_reason_wire_string(wire, number):
    assert error_reason_pb2.ErrorReason.Name(number) == wire
    assert getattr(errors, wire) == wire


def test_every_reason_is_pinned_and_named_by_the_client():
    """A reason the enum gains gets its wire string pinned here, and a
    constant in rolloutd.errors, before it can pass."""
    names = {n: v for n, v in error_reason_pb2.ErrorReason.items() if v != 0}
    assert names == dict(WIRE)
    for name in names:
        assert getattr(errors, name, None) == name, name
    assert error_reason_pb2.ErrorReason.Name(0) == "ERROR_REASON_UNSPECIFIED"


def test_reason_classes_match_the_wire_strings():
    """A status carrying the literal reason decodes into its class."""

    def decode(code, wire):
        info = error_details_pb2.ErrorInfo(reason=wire, domain="rolloutd.io")
        st = status_pb2.Status(code=code.value[0], message="m")
        # The server's type URL: the vendored copy's package differs.
        st.details.add(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=info.SerializeToString())
        return errors.from_status(code, "m", [("grpc-status-details-bin", st.SerializeToString())])

    assert type(decode(grpc.StatusCode.NOT_FOUND, "SHARD_DELETED")) is errors.ShardDeleted
    assert type(decode(grpc.StatusCode.FAILED_PRECONDITION, "SEQ_MISMATCH")) is errors.SeqMismatch
    assert type(decode(grpc.StatusCode.FAILED_PRECONDITION, "CONSUMER_RESET")) is errors.ConsumerReset
    e = decode(grpc.StatusCode.UNAVAILABLE, "OUTCOME_UNKNOWN")
    assert e.reason == "OUTCOME_UNKNOWN" and e.may_have_been_stored and e.may_have_taken_effect
