"""TLS and mTLS from PEM paths, with certificates made by openssl as the
repository README's "Security" section makes them."""

from __future__ import annotations

import subprocess

import pytest

import rolloutd


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=rolloutd-test-ca")
    run("req", "-x509", *ec, "-keyout", "server.key", "-out", "server.crt", "-subj", "/CN=localhost",
        "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-addext", "extendedKeyUsage=serverAuth", "-CA", "ca.crt", "-CAkey", "ca.key")
    run("req", "-x509", *ec, "-keyout", "client.key", "-out", "client.crt", "-subj", "/CN=trainer",
        "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "subjectAltName=URI:spiffe://example.org/ns/team-a/sa/trainer",
        "-addext", "extendedKeyUsage=clientAuth", "-CA", "ca.crt", "-CAkey", "ca.key")
    (d / "policy.yaml").write_text(
        "grants:\n  - identities: [\"spiffe://example.org/ns/team-a/sa/trainer\"]\n    shardPrefixes: [team-a]\n    verbs: [append, get, scan]\n"
    )
    return d


def test_tls(start_server, pki):
    srv = start_server(args=["--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key")])
    with rolloutd.Client(srv.addr, tls=rolloutd.TLS(ca=str(pki / "ca.crt"))) as c:
        c.append("tls/one", [{"id": "a", "content": "secret"}])
        assert c.get("tls/one", "a").content == "secret"
    with rolloutd.Client("localhost:" + srv.addr.rsplit(":", 1)[1], tls=rolloutd.TLS(ca=str(pki / "ca.crt"))) as c:
        assert c.health() == rolloutd.HealthStatus.SERVING
    with rolloutd.Client(srv.addr, timeout=1) as plain:
        with pytest.raises(rolloutd.Unavailable):
            plain.get("tls/one", "a")
    # The system's roots do not trust the test CA.
    with rolloutd.Client(srv.addr, tls=True, timeout=1) as untrusted:
        with pytest.raises(rolloutd.Unavailable):
            untrusted.get("tls/one", "a")


def test_mtls_and_authorization(start_server, pki):
    srv = start_server(args=[
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.crt"), "--authz-file", str(pki / "policy.yaml"),
    ])
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(pki / "client.crt"), key=str(pki / "client.key"))
    with rolloutd.Client(srv.addr, tls=tls) as c:
        c.append("team-a/run1", [{"id": "r-1", "content": "The answer is 4."}])
        assert [r.id for r in c.scan("team-a/run1")] == ["r-1"]
        with pytest.raises(rolloutd.PermissionDenied) as e:
            c.append("team-ab/run1", [{"id": "r-1", "content": "not mine"}])
        assert "team-ab/run1" in e.value.message
    with rolloutd.Client(srv.addr, tls=rolloutd.TLS(ca=str(pki / "ca.crt")), timeout=1) as no_cert:
        with pytest.raises(rolloutd.Unavailable):
            no_cert.get("team-a/run1", "r-1")


def test_tls_needs_cert_and_key_together(pki):
    with pytest.raises(ValueError, match="cert and key"):
        rolloutd.TLS(cert=str(pki / "client.crt"))
