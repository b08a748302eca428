#!/usr/bin/python3
"""Append p50 through the Python client against the Go client, same server.

    /usr/bin/python3 clients/python/bench.py [--dir /work/tmp-pybench] [--count 1000] [--rounds 3]

It builds rolloutd and cmd/rolloutbench, starts one rolloutd on the
on-disk embedded store under --dir (a directory on a real disk, not tmpfs:
each append is fsynced, as in production, so that the client overhead is
measured against a realistic commit rather than dominating an in-memory
one), and then, per round, times --count single-record 1 KiB appends from
one client through rolloutd.Client and through `rolloutbench --mode
resident` (grpc-go), in alternating order. It prints each round and the
medians of the rounds' p50s, and their ratio (the target is Python / Go <=
1.3). --dir is deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import rolloutd  # noqa: E402


def start_rolloutd(binary: Path, store: Path):
    proc = subprocess.Popen([str(binary), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addrs = {}
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("msg") == "serving gRPC":
                addrs["grpc"] = e["addr"]
            elif e.get("msg") == "serving metrics":
                addrs["metrics"] = e["addr"]
            if len(addrs) == 2:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or len(addrs) != 2:
        proc.kill()
        raise SystemExit("bench: rolloutd did not start")
    return proc, addrs["grpc"], addrs["metrics"]


def python_p50(addr: str, count: int, warmup: int = 50) -> float:
    content = "x" * 1024
    run = uuid.uuid4().hex[:8]
    shard = "bench/py-" + run
    lat = []
    with rolloutd.Client(addr) as c:
        for i in range(warmup + count):
            # The record rolloutbench sends: its own id, a rollout, a role, 1 KiB.
            rec = {"id": "%s-0-%d" % (run, i), "rollout_id": "rollout-0", "role": "assistant", "content": content}
            t0 = time.perf_counter()
            c.append(shard, [rec])
            if i >= warmup:
                lat.append(time.perf_counter() - t0)
    return statistics.median(lat) * 1000


def go_p50(rolloutbench: Path, addr: str, metrics: str, count: int, workdir: Path) -> float:
    out = workdir / ("go-%s.json" % uuid.uuid4().hex[:8])
    subprocess.run([str(rolloutbench), "--target", addr, "--metrics-url", "http://%s/metrics" % metrics, "--mode", "resident",
                    "--concurrency", "1", "--shards", "1", "--records", "1", "--record-bytes", "1024", "--count", str(count),
                    "--progress", "off", "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
    rep = json.loads(out.read_text())

    def find(o):
        if isinstance(o, dict):
            if o.get("mode") == "resident" and "append_latency" in o:
                return o["append_latency"]["p50_ms"]
            for v in o.values():
                r = find(v)
                if r is not None:
                    return r
        elif isinstance(o, list):
            for v in o:
                r = find(v)
                if r is not None:
                    return r
        return None

    p50 = find(rep)
    if p50 is None:
        raise SystemExit("bench: no resident append p50 in %s" % out)
    return float(p50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/work/tmp-pybench"), help="work directory on a real disk (deleted after)")
    ap.add_argument("--count", type=int, default=1000, help="timed appends per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep --dir")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    fs = subprocess.run(["df", "--output=fstype", str(args.dir)], capture_output=True, text=True).stdout.split()[-1:]
    if fs == ["tmpfs"]:
        raise SystemExit("bench: %s is on tmpfs; give --dir on a real disk" % args.dir)
    proc = None
    try:
        bin_dir = args.dir / "bin"
        for name in ("rolloutd", "rolloutbench"):
            subprocess.run(["go", "build", "-o", str(bin_dir / name), "./cmd/" + name], cwd=REPO, check=True)
        proc, addr, metrics = start_rolloutd(bin_dir / "rolloutd", args.dir / "store")
        print("rolloutd %s on the embedded store in %s (filesystem %s); %d appends of 1 record x 1 KiB per client per round"
              % (addr, args.dir / "store", fs[0] if fs else "?", args.count))
        py, go = [], []
        for r in range(args.rounds):
            order = ["python", "go"] if r % 2 == 0 else ["go", "python"]
            for who in order:
                if who == "python":
                    py.append(python_p50(addr, args.count))
                else:
                    go.append(go_p50(bin_dir / "rolloutbench", addr, metrics, args.count, args.dir))
            print("round %d: Python p50 %.3f ms, Go p50 %.3f ms, ratio %.2f" % (r + 1, py[-1], go[-1], py[-1] / go[-1]))
        mp, mg = statistics.median(py), statistics.median(go)
        print("median of %d rounds: Python p50 %.3f ms, Go p50 %.3f ms, Python/Go %.2f (target <= 1.3)" % (args.rounds, mp, mg, mp / mg))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
