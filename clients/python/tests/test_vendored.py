"""The vendored google.rpc and health messages live under private proto
packages, so a user's own googleapis-common-protos (or grpcio-health-checking)
loads beside them in one process, in either import order, and the client
still decodes the details a server sends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import CLIENT

# The upstream files, reduced to what the test needs but with their real
# file names and packages, as googleapis-common-protos registers them.
STATUS = """
syntax = "proto3";
package google.rpc;
import "google/protobuf/any.proto";
message Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
"""
DETAILS = """
syntax = "proto3";
package google.rpc;
import "google/protobuf/duration.proto";
message ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }
message RetryInfo { google.protobuf.Duration retry_delay = 1; }
"""
HEALTH = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse { enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; } ServingStatus status = 1; }
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""


@pytest.fixture(scope="module")
def user_protos(tmp_path_factory):
    """Generates "the user's own" google.rpc and grpc_health modules."""
    root = tmp_path_factory.mktemp("user")
    src, out = root / "src", root / "out"
    for rel, text in [("google/rpc/status.proto", STATUS), ("google/rpc/error_details.proto", DETAILS), ("grpc/health/v1/health.proto", HEALTH)]:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    out.mkdir()
    subprocess.run(["protoc", "-I", str(src), "-I", "/usr/include", "--python_out", str(out),
                    "google/rpc/status.proto", "google/rpc/error_details.proto", "grpc/health/v1/health.proto"], check=True)
    # grpcio-health-checking ships grpc/health/v1/health.proto as grpc_health.v1.health_pb2.
    (out / "grpc_health" / "v1").mkdir(parents=True)
    (out / "grpc" / "health" / "v1" / "health_pb2.py").rename(out / "grpc_health" / "v1" / "health_pb2.py")
    return out


PROGRAM = """
import sys
sys.path[:0] = [{client!r}, {user!r}]
def user():
    from google.rpc import status_pb2, error_details_pb2
    from grpc_health.v1 import health_pb2
    return status_pb2, error_details_pb2, health_pb2
def ours():
    import rolloutd
    from rolloutd import errors
    return errors
first, second = ({order})
a, b = first(), second()
status_pb2, error_details_pb2, health_pb2 = a if first is user else b
errors = b if first is user else a
import grpc
from google.protobuf import any_pb2, descriptor_pool
pool = descriptor_pool.Default()
assert pool.FindMessageTypeByName("google.rpc.Status").file.name == "google/rpc/status.proto"
assert pool.FindMessageTypeByName("rolloutd_vendor.google.rpc.Status").file.name == "rolloutd_vendor/google/rpc/status.proto"
assert pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
# A status built with the user's classes, decoded by the client.
info = any_pb2.Any(); info.Pack(error_details_pb2.ErrorInfo(reason="NOT_COMMITTED", domain="rolloutd.io", metadata={{"k": "v"}}))
retry = any_pb2.Any(); retry.Pack(error_details_pb2.RetryInfo(retry_delay={{"nanos": 250000000}}))
st = status_pb2.Status(code=14, message="m", details=[info, retry])
err = errors.from_status(grpc.StatusCode.UNAVAILABLE, "m", [("grpc-status-details-bin", st.SerializeToString())])
assert err.reason == "NOT_COMMITTED" and err.metadata == {{"k": "v"}} and err.retry_delay == 0.25, err
assert type(err).__name__ == "Unavailable"
print("ok")
"""


@pytest.mark.parametrize("order", ["user, ours", "ours, user"])
def test_users_own_google_rpc_loads_beside_ours(user_protos, order):
    code = PROGRAM.format(client=str(CLIENT), user=str(user_protos), order=order)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
