"""The Python ring routes exactly as the Go client's: on the same address
set, 1,000 shard names go to the same pod. The Go side is the Go client
package with affinity on (client/internal/cmd/ringpicks), which routes real
calls through grpc-go's ring_hash to fake servers. And when a pod goes away,
only its shards move."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from conftest import REPO
from rolloutd.affinity import Ring

SERVICE_CONFIG = REPO / "deploy" / "client" / "service-config.json"


def ring_bounds():
    cfg = json.loads(SERVICE_CONFIG.read_text())
    rh = cfg["loadBalancingConfig"][0]["ring_hash_experimental"]
    assert rh["requestHashHeader"] == "rolloutd-shard"
    return rh["minRingSize"], rh["maxRingSize"]


def shard_names(n=1000, seed=7):
    rng = random.Random(seed)
    names = ["exp-%d/actor-%d" % (i // 10, i % 10) for i in range(n // 2)]
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789._-"
    while len(names) < n:
        segs = ["".join(rng.choice(alphabet[:36]) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))) for _ in range(rng.randint(1, 4))]
        names.append("/".join(segs))
    return names


@pytest.fixture(scope="module")
def ringpicks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ringpicks") / "ringpicks"
    subprocess.run(["go", "build", "-o", str(out), "./client/internal/cmd/ringpicks"], cwd=REPO, check=True)
    return out


def go_picks(binary, servers, shards):
    addrs = ["10.0.%d.%d:50051" % (i // 200, 7 + i) for i in range(servers)]
    r = subprocess.run([str(binary), "-addrs", ",".join(addrs)],
                       input="\n".join(shards) + "\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    picks = dict(line.split("\t") for line in r.stdout.splitlines())
    return addrs, picks


@pytest.mark.parametrize("servers", [3, 5])
def test_python_ring_matches_grpc_go_ring_hash(ringpicks, servers):
    shards = shard_names()
    addrs, picks = go_picks(ringpicks, servers, shards)
    assert len(picks) == len(shards) == 1000
    ring = Ring(addrs, *ring_bounds())
    mismatches = [(s, picks[s], ring.pick(s)) for s in shards if ring.pick(s) != picks[s]]
    assert not mismatches, "%d of 1000 shards routed differently, e.g. %s" % (len(mismatches), mismatches[:5])
    assert len(set(picks.values())) == servers, "every pod owns some shards"


def test_ring_sizes_follow_min_and_max():
    lo, hi = ring_bounds()
    assert len(Ring(["10.0.0.1:50051"], lo, hi)) == 1024
    assert len(Ring(["10.0.0.%d:50051" % i for i in range(3)], lo, hi)) == 1026  # ceil(1024/3) per pod
    assert len(Ring(["10.0.0.%d:50051" % i for i in range(10)], 1024, 4096)) == 1030
    assert len(Ring(["10.0.%d.%d:50051" % (i // 250, i % 250) for i in range(5000)], 1024, 4096)) == 4096


def test_only_the_lost_pods_shards_move():
    """While a pod is down but still resolved, the walk skips it (ring_hash
    skips an endpoint in TRANSIENT_FAILURE): exactly its shards move, each to
    the next pod on the ring, and every other shard stays."""
    pods = ["10.0.0.%d:50051" % i for i in range(1, 6)]
    ring = Ring(pods)
    down = pods[2]
    shards = shard_names()
    for s in shards:
        up = next(a for a in ring.walk(s) if a != down)
        if ring.pick(s) != down:
            assert up == ring.pick(s)
    assert sum(ring.pick(s) == down for s in shards) > 100


def test_removing_a_pod_rebuilds_the_ring_as_grpc_does():
    """When the resolver drops the pod, the ring is rebuilt for 4 pods: its
    shards move, and, because ring_hash gives each pod ceil(min_ring_size/n)
    entries, the survivors' extra entries take a few other arcs too. grpc-go
    does the same (test_python_ring_matches_grpc_go_ring_hash checks every
    address set it runs); this pins the size of that effect."""
    pods = ["10.0.0.%d:50051" % i for i in range(1, 6)]
    before, after = Ring(pods), Ring(pods[:2] + pods[3:])
    shards = shard_names()
    lost = [s for s in shards if before.pick(s) == pods[2]]
    others_moved = [s for s in shards if before.pick(s) != pods[2] and before.pick(s) != after.pick(s)]
    assert all(after.pick(s) != pods[2] for s in shards)
    assert len(lost) > 100
    assert len(others_moved) < 0.2 * (len(shards) - len(lost))
