"""A following scan survives a server restart: SIGTERM ends its stream with
UNAVAILABLE naming the resume point; the client reconnects to the restarted
server (same store, same port) and continues from its cursor, missing and
repeating nothing."""

from __future__ import annotations

import signal
import threading
import time

import rolloutd


def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_follow_resumes_across_a_restart(start_server, tmp_path, shard):
    store = str(tmp_path / "store")
    srv = start_server(store=store)
    addr = srv.addr
    seen = []
    with rolloutd.Client(addr, timeout=30) as c:
        for i in range(10):
            c.append(shard, [{"content": "before %d" % i, "rollout_id": "r"}, {"content": "skip", "rollout_id": "other"}])
        scan = c.scan(shard, follow=True, rollout_id="r", reconnect_timeout=30)

        def follow():
            for r in scan:
                seen.append((r.seq, r.content))

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        assert wait_for(lambda: len(seen) == 10), seen
        assert srv.stop(signal.SIGTERM) == 0, "".join(srv.log[-20:])
        # Appends while the server is down are retried until it is back.
        writer = threading.Thread(target=lambda: c.append(shard, [{"content": "during", "rollout_id": "r"}]))
        writer.start()
        time.sleep(0.5)
        start_server(store=store, addr=addr)
        writer.join(30)
        for i in range(10):
            c.append(shard, [{"content": "after %d" % i, "rollout_id": "r"}])
        assert wait_for(lambda: len(seen) == 21), seen
        time.sleep(0.3)  # nothing more may arrive
        scan.close()
        t.join(10)
    contents = [c for _, c in seen]
    assert contents == ["before %d" % i for i in range(10)] + ["during"] + ["after %d" % i for i in range(10)]
    seqs = [s for s, _ in seen]
    assert seqs == sorted(set(seqs)), "a record was repeated or reordered"
    assert scan.reconnects >= 1
    assert scan.cursor == seqs[-1]


def test_cursor_checkpoint_resumes_a_new_scan(server, shard):
    with rolloutd.Client(server.addr) as c:
        for i in range(5):
            c.append(shard, [{"content": str(i)}])
        s = c.scan(shard)
        first = [next(s), next(s)]
        checkpoint = s.cursor
        s.close()
        assert checkpoint == first[-1].seq == 2
        rest = [r.content for r in c.scan(shard, after_seq=checkpoint)]
        assert rest == ["2", "3", "4"]
