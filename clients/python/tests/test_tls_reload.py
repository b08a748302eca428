"""A renewed client certificate is used without a restart: the client
notices that its files changed and replaces its channels, so new handshakes
present the new certificate, while a call in flight (a following scan)
keeps its connection. The rotation is real: the certificates carry
different SPIFFE ids, and the server's policy grants each its own prefix,
so what the server lets through shows which certificate it saw."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

import pytest

import rolloutd
from rolloutd import _tlsreload

SPIFFE = "spiffe://example.org/ns/%s/sa/%s"


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
    for name, ns, sa in (("a", "team-a", "trainer-a"), ("b", "team-b", "trainer-b"), ("writer", "team-a", "writer")):
        # A new key for each: a renewal rotates the key too.
        run("req", "-x509", *ec, "-keyout", name + ".key", "-out", name + ".crt", "-subj", "/CN=" + sa,
            "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "subjectAltName=URI:" + SPIFFE % (ns, sa),
            "-addext", "extendedKeyUsage=clientAuth", "-CA", "ca.crt", "-CAkey", "ca.key")
    (d / "policy.yaml").write_text(
        "grants:\n"
        "  - identities: [\"%s\"]\n    shardPrefixes: [team-a]\n    verbs: [append, get, scan]\n"
        "  - identities: [\"%s\"]\n    shardPrefixes: [team-b]\n    verbs: [append, get, scan]\n"
        "  - identities: [\"%s\"]\n    shardPrefixes: [team-a]\n    verbs: [append]\n"
        % (SPIFFE % ("team-a", "trainer-a"), SPIFFE % ("team-b", "trainer-b"), SPIFFE % ("team-a", "writer"))
    )
    return d


def install(pki, name, dest, *, cert=True, key=True):
    """Puts name's certificate and key at dest/tls.crt and dest/tls.key,
    each replaced in one rename, as cert-manager and kubelet do."""
    for part, on in (("crt", cert), ("key", key)):
        if on:
            tmp = dest / (".tls.%s.tmp" % part)
            shutil.copyfile(pki / ("%s.%s" % (name, part)), tmp)
            os.replace(tmp, dest / ("tls." + part))


def test_a_renewed_certificate_is_used_and_calls_in_flight_finish(start_server, pki, tmp_path):
    srv = start_server(args=[
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.crt"), "--authz-file", str(pki / "policy.yaml"),
    ])
    install(pki, "a", tmp_path)
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key"), reload_interval=0)
    writer = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(pki / "writer.crt"), key=str(pki / "writer.key"))
    with rolloutd.Client(srv.addr, tls=tls) as c, rolloutd.Client(srv.addr, tls=writer) as w:
        c.append("team-a/run", [{"id": "r-1"}])
        with pytest.raises(rolloutd.PermissionDenied):
            c.append("team-b/run", [{"id": "b-1"}])
        with c.scan("team-a/run", follow=True, timeout=30) as follow:
            assert next(follow).id == "r-1"

            install(pki, "b", tmp_path)
            # New calls handshake with trainer-b's certificate...
            c.append("team-b/run", [{"id": "b-1"}])
            with pytest.raises(rolloutd.PermissionDenied):
                c.append("team-a/run", [{"id": "r-x"}])
            assert c.get("team-b/run", "b-1").id == "b-1"
            # ...while the follow, authorized as trainer-a, keeps its
            # connection, on the old channel.
            assert c.endpoints.draining == 1
            w.append("team-a/run", [{"id": "r-2"}])
            assert next(follow).id == "r-2"
            assert follow.reconnects == 0
        # The old channel is closed once its last call ended.
        assert c.endpoints.draining == 0


def test_a_half_written_renewal_keeps_the_old_certificate(pki, tmp_path, caplog):
    install(pki, "a", tmp_path)
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key"), reload_interval=0)
    creds = _tlsreload.Credentials(tls)
    first = creds.current
    assert not creds.check()
    install(pki, "b", tmp_path, key=False)  # b's certificate, a's key
    with caplog.at_level(logging.WARNING, logger="rolloutd"):
        assert not creds.check()
    assert creds.current is first and creds.reloads == 0
    assert "cannot be used yet" in caplog.text
    install(pki, "b", tmp_path, cert=False)
    assert creds.check() and creds.current is not first and creds.reloads == 1
    assert not creds.check()


def test_files_are_checked_at_most_once_per_interval(pki, tmp_path):
    install(pki, "a", tmp_path)
    now = [100.0]
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key"), reload_interval=5)
    creds = _tlsreload.Credentials(tls, clock=lambda: now[0])
    install(pki, "b", tmp_path)
    now[0] += 4.9
    assert not creds.check()
    now[0] += 0.2
    assert creds.check()


def test_a_mismatched_key_fails_at_construction(pki, tmp_path):
    install(pki, "a", tmp_path)
    install(pki, "b", tmp_path, cert=False)
    with pytest.raises(OSError):
        rolloutd.Client("127.0.0.1:1", tls=rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key")))


def test_unusable_files_are_warned_about_once(pki, tmp_path, caplog):
    install(pki, "a", tmp_path)
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key"), reload_interval=0)
    creds = _tlsreload.Credentials(tls)
    install(pki, "b", tmp_path, key=False)
    with caplog.at_level(logging.WARNING, logger="rolloutd"):
        for _ in range(3):
            assert not creds.check()
    assert caplog.text.count("cannot be used yet") == 1


@pytest.mark.asyncio
async def test_the_asyncio_client_uses_a_renewed_certificate(start_server, pki, tmp_path):
    import rolloutd.aio

    srv = start_server(args=[
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.crt"), "--authz-file", str(pki / "policy.yaml"),
    ])
    install(pki, "a", tmp_path)
    tls = rolloutd.TLS(ca=str(pki / "ca.crt"), cert=str(tmp_path / "tls.crt"), key=str(tmp_path / "tls.key"), reload_interval=0)
    async with rolloutd.aio.Client(srv.addr, tls=tls) as c:
        await c.append("team-a/aio", [{"id": "r-1"}])
        follow = c.scan("team-a/aio", follow=True, timeout=30)
        assert (await follow.__anext__()).id == "r-1"
        install(pki, "b", tmp_path)
        await c.append("team-b/aio", [{"id": "b-1"}])
        with pytest.raises(rolloutd.PermissionDenied):
            await c.append("team-a/aio", [{"id": "r-x"}])
        assert c.endpoints.draining == 1
        await follow.aclose()
        assert c.endpoints.draining == 0
