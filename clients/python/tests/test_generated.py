"""The committed generated code is what scripts/regen.py makes from the
protos, and the package installs and imports in a clean virtualenv."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

from conftest import CLIENT

GENERATED = CLIENT / "rolloutd" / "_proto"


def _files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_generated_code_is_fresh(tmp_path):
    out = tmp_path / "_proto"
    subprocess.run([sys.executable, str(CLIENT / "scripts" / "regen.py"), "--out", str(out)], check=True)
    assert _files(out) == _files(GENERATED), "files differ: run `make gen-python`"
    stale = [f for f in _files(out) if not filecmp.cmp(out / f, GENERATED / f, shallow=False)]
    assert not stale, "stale generated code %s: run `make gen-python` and commit the result" % stale


def test_no_absolute_imports_of_generated_modules():
    for f in GENERATED.rglob("*.py"):
        for line in f.read_text().splitlines():
            assert not line.startswith(("from rollout.", "import rollout", "from rolloutd_vendor", "import rolloutd_vendor")), (f, line)


def test_installs_and_imports_in_a_clean_virtualenv(tmp_path):
    venv = tmp_path / "venv"
    # --system-site-packages: grpcio and protobuf come from Debian here; the
    # package itself must come from the install, not the source tree.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", str(CLIENT)], check=True, env=env, cwd=tmp_path)
    code = (
        "import rolloutd, rolloutd.aio, pathlib, sys\n"
        "from rolloutd._proto.rollout.v1 import rollout_pb2, rollout_pb2_grpc\n"
        "from rolloutd._proto.rolloutd_vendor.google.rpc import status_pb2, error_details_pb2\n"
        "from rolloutd._proto.rolloutd_vendor.grpc.health.v1 import health_pb2\n"
        "assert 'site-packages' in rolloutd.__file__, rolloutd.__file__\n"
        "assert (pathlib.Path(rolloutd.__file__).parent / 'py.typed').exists()\n"
        "assert rollout_pb2_grpc.RolloutServiceStub\n"
        "assert 'rollout' not in sys.modules and 'rolloutd_vendor' not in sys.modules\n"
        "print('ok')\n"
    )
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
