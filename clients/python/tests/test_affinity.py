"""Shard affinity with two rolloutd instances over one Azurite container:
every shard's appends go to one instance (each instance opens a writer only
for its own shards, and nothing is fenced), and when one instance dies the
client keeps working on the other."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import uuid

import pytest

import rolloutd
from conftest import REPO

AZURITE = REPO / "test" / "azurite"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite():
    binary = AZURITE / "node_modules" / ".bin" / "azurite-blob"
    if not binary.exists():  # as internal/testutil/azurite does; make test runs npm ci first
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=AZURITE, check=True)
    proc = subprocess.Popen(
        [str(binary), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
         "--skipApiVersionCheck", "--disableTelemetry", "--silent"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = None
    got = threading.Event()
    out = []

    def read():
        nonlocal url
        for line in proc.stdout:
            out.append(line)
            m = re.search(r"successfully listens on (https?://\S+)", line)
            if m and url is None:
                url = m.group(1)
                got.set()
        got.set()

    threading.Thread(target=read, daemon=True).start()
    if not got.wait(60) or url is None:
        proc.kill()
        raise RuntimeError("azurite did not start:\n" + "".join(out))
    yield "DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s/%s;" % (ACCOUNT, KEY, url, ACCOUNT)
    proc.terminate()
    proc.wait(10)


def opens(srv):
    return srv.metrics().get("rolloutd_writer_opens_total", 0.0)


def fences(srv):
    return srv.metrics().get("rolloutd_writer_fences_total", 0.0)


def test_each_shard_goes_to_one_instance(start_server, azurite):
    store = "azblob://pytest-affinity-" + uuid.uuid4().hex[:8]
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite}
    a = start_server(store=store, env=env)
    b = start_server(store=store, env=env)
    shards = ["exp-%d/actor-%d" % (i // 4, i % 4) for i in range(16)]
    aff = rolloutd.Affinity(addresses=[a.addr, b.addr])
    with rolloutd.Client("rolloutd", affinity=aff, timeout=30) as c:
        ring = c.endpoints.ring
        owner = {s: ring.pick(s) for s in shards}
        assert set(owner.values()) == {a.addr, b.addr}, "both instances own shards"
        for rnd in range(3):
            for s in shards:
                c.append(s, [{"rollout_id": "r%d" % rnd, "content": "turn"}])
        # Each instance opened one writer per shard it owns, and none was fenced.
        assert opens(a) == sum(o == a.addr for o in owner.values())
        assert opens(b) == sum(o == b.addr for o in owner.values())
        assert fences(a) == 0 and fences(b) == 0
        for s in shards:
            assert len(list(c.scan(s))) == 3

        # One instance dies: its shards move to the other, and nothing fails.
        a.stop(signal.SIGKILL)
        for s in shards:
            c.append(s, [{"rollout_id": "after", "content": "turn"}])
        assert opens(b) == len(shards)
        for s in shards:
            assert [r.rollout_id for r in c.scan(s)] == ["r0", "r1", "r2", "after"]
