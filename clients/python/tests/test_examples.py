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
    w = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "worker.py"), "--target", server.addr, "--shard", shard, "--rollouts", "3"],
                       capture_output=True, text=True, env=env(), timeout=60)
    assert w.returncode == 0, w.stderr
    assert "appended 3 rollouts" in w.stdout
    t = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "trainer.py"), "--target", server.addr, "--shard", shard, "--count", "3"],
                       capture_output=True, text=True, env=env(), timeout=60)
    assert t.returncode == 0, t.stderr
    assert t.stdout.count("reward") == 3 and "checkpoint: --after-seq" in t.stdout
