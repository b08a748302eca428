"""Fixtures: the real rolloutd binary, built once per run, on the embedded
store in a temporary directory, listening on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
REPO = CLIENT.parent.parent

sys.path.insert(0, str(CLIENT))  # test the source tree, not an installed copy


@pytest.fixture(scope="session")
def rolloutd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bin") / "rolloutd"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/rolloutd"], cwd=REPO, check=True)
    return out


class Server:
    """One rolloutd process. start() waits for its "serving gRPC" log line."""

    def __init__(self, binary: Path, store: str, args: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None, name: str = "rolloutd") -> None:
        self.binary = binary
        self.store = store
        self.args = list(args or [])
        self.env = env
        self.name = name
        self.addr = ""
        self.metrics_addr = ""
        self.proc: Optional[subprocess.Popen] = None
        self.log: List[str] = []

    def start(self, addr: str = "127.0.0.1:0", timeout: float = 30.0) -> "Server":
        args = [str(self.binary), "--listen", addr, "--metrics-listen", "127.0.0.1:0", "--store", self.store, "--drain-delay", "100ms"] + self.args
        env = dict(os.environ)
        env.update(self.env or {})
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        ready = threading.Event()
        found: Dict[str, str] = {}

        def read(proc: subprocess.Popen) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.log.append(line)
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("msg") == "serving gRPC":
                    found["grpc"] = e.get("addr", "")
                elif e.get("msg") == "serving metrics":
                    found["metrics"] = e.get("addr", "")
                if "grpc" in found and "metrics" in found:
                    ready.set()
            ready.set()

        threading.Thread(target=read, args=(self.proc,), daemon=True).start()
        if not ready.wait(timeout) or "grpc" not in found:
            self.kill()
            raise RuntimeError("%s did not start:\n%s" % (self.name, "".join(self.log)))
        self.addr = found["grpc"]
        self.metrics_addr = found["metrics"]
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Sends sig and waits for the exit; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def metrics(self) -> Dict[str, float]:
        """The /metrics samples without labels, and labelled ones by their full name."""
        import urllib.request

        out: Dict[str, float] = {}
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_addr, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out


@pytest.fixture
def start_server(rolloutd_bin: Path, tmp_path: Path):
    """Starts rolloutd processes for one test; all are killed at its end."""
    started: List[Server] = []

    def start(store: Optional[str] = None, args: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None, addr: str = "127.0.0.1:0") -> Server:
        s = Server(rolloutd_bin, store or str(tmp_path / ("store-%d" % len(started))), args, env, name="rolloutd-%d" % len(started))
        started.append(s)
        return s.start(addr)

    yield start
    for s in started:
        s.kill()


@pytest.fixture(scope="module")
def server(rolloutd_bin: Path, tmp_path_factory: pytest.TempPathFactory):
    """A rolloutd shared by a module's tests; give each test its own shard."""
    s = Server(rolloutd_bin, str(tmp_path_factory.mktemp("store"))).start()
    yield s
    s.kill()


@pytest.fixture
def shard() -> str:
    return "test/" + uuid.uuid4().hex[:12]
