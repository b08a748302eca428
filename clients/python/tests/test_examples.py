"""The README's quick start runs as written (against a server at the
address it names, swapped for this test's), and the examples run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import CLIENT, REPO


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = str(CLIENT)
    return e


def test_quick_start_runs(server):
    text = (CLIENT / "README.md").read_text()
    code = re.search(r"## Quick start.*?```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    assert '"localhost:50051"' in code
    code = code.replace('"localhost:50051"', repr(server.addr))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "What is 2+2?" in r.stdout and "ASSISTANT 4 1.0" in r.stdout


def test_worker_and_trainer(server, shard):
    """The trainer consumes the worker's grades as a consumer, and a second
    run of it continues after what the first committed."""
    prefix = shard.split("/")[0] + "/" + shard.split("/")[1]
    actors = [prefix + "/actor-0", prefix + "/actor-1"]

    def work(rollouts):
        for a in actors:
            w = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "worker.py"), "--target", server.addr, "--shard", a, "--rollouts", str(rollouts)],
                               capture_output=True, text=True, env=env(), timeout=60)
            assert w.returncode == 0, w.stderr
            assert "appended %d rollouts" % rollouts in w.stdout

    def train(count):
        t = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "trainer.py"), "--target", server.addr, "--prefix", prefix,
                            "--consumer", "trainer", "--count", str(count)], capture_output=True, text=True, env=env(), timeout=60)
        assert t.returncode == 0, t.stderr
        rollouts = re.findall(r"rollout (\S+) problem \S+ reward", t.stdout)
        assert len(rollouts) == count, t.stdout
        assert "consumer trainer committed: {" in t.stdout, t.stdout
        return rollouts

    work(2)
    first = train(4)
    work(1)
    second = train(2)
    assert len(set(first + second)) == 6, "the second run repeated a grade the first committed"
