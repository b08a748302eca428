#!/usr/bin/python3
"""Regenerates the committed protobuf and gRPC code under rolloutd/_proto/.

Run it from anywhere (`make gen-python` does) after a proto under proto/rollout/v1/
or a vendored proto under clients/python/proto/ changes. It needs Debian's
protobuf-compiler (protoc 3.21.12) and protobuf-compiler-grpc
(grpc_python_plugin 1.51.1); tests/test_generated.py runs it into a temporary
directory and fails when the committed files differ.

protoc writes absolute imports that name the proto package as a top-level
Python package, e.g. `from rollout.v1 import rollout_pb2 as ...` in
rollout_pb2_grpc.py. Under rolloutd/_proto/ there is no top-level `rollout`
package, so every such import of a module generated here is rewritten to live
under `rolloutd._proto`:

    from rollout.v1 import rollout_pb2 as x      ->  from rolloutd._proto.rollout.v1 import rollout_pb2 as x
    from rolloutd_vendor.google.rpc import y     ->  from rolloutd._proto.rolloutd_vendor.google.rpc import y

and the module name protoc hands the descriptor builder (which becomes each
generated class's __module__, used by pickle) gets the same prefix:
'rollout.v1.rollout_pb2' -> 'rolloutd._proto.rollout.v1.rollout_pb2'.

Imports of google.protobuf (the well-known types, shipped by the protobuf
runtime) are left alone. The rewrite is line-based and anchored at the start
of a line; any other import of a generated root that survives it (a bare
`import rollout...`) fails the run instead of producing broken code. The
descriptors embedded in the modules keep their proto file names and packages,
so the wire format and type URLs are untouched.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
REPO = CLIENT.parent.parent
DEFAULT_OUT = CLIENT / "rolloutd" / "_proto"

# (include root, proto files relative to it, generate gRPC stubs)
SOURCES = [
    (REPO / "proto", ["rollout/v1/rollout.proto"], True),
    # The ErrorInfo reasons (errors.py names its constants after them); no
    # service, so no gRPC stubs.
    (REPO / "proto", ["rollout/v1/error_reason.proto"], False),
    (
        CLIENT / "proto",
        [
            "rolloutd_vendor/google/rpc/status.proto",
            "rolloutd_vendor/google/rpc/error_details.proto",
            "rolloutd_vendor/grpc/health/v1/health.proto",
        ],
        False,
    ),
]
# Top-level Python packages protoc creates for the files above.
ROOTS = ("rollout", "rolloutd_vendor")
PACKAGE = "rolloutd._proto"
WKT_INCLUDE = Path("/usr/include")  # google/protobuf/*.proto from libprotobuf-dev/protobuf-compiler

_FROM = re.compile(r"^from (%s)((?:\.\w+)*) import " % "|".join(ROOTS), re.M)
# The module name protoc passes to the descriptor builder, which becomes the
# generated classes' __module__ (pickle imports it).
_BUILDER = re.compile(r"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, ')((?:%s)\.[\w.]+')" % "|".join(ROOTS))
_BARE = re.compile(r"^\s*(?:import|from) (%s)\b" % "|".join(ROOTS), re.M)


def rewrite(source: str) -> str:
    """Returns source with its imports of generated modules moved under PACKAGE."""
    out = _FROM.sub(lambda m: "from %s.%s%s import " % (PACKAGE, m.group(1), m.group(2)), source)
    out = _BUILDER.sub(lambda m: m.group(1) + PACKAGE + "." + m.group(2), out)
    left = _BARE.findall(out)
    if left:
        raise SystemExit("regen: an import of a generated module was not rewritten: %s" % left)
    return out


def generate(out: Path) -> None:
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise SystemExit("regen: needs protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        for include, files, grpc in SOURCES:
            cmd = [protoc, "-I", str(include), "-I", str(WKT_INCLUDE), "--python_out", tmp, "--pyi_out", tmp]
            if grpc:
                cmd += ["--plugin=protoc-gen-grpc_python=" + plugin, "--grpc_python_out", tmp]
            subprocess.run(cmd + files, check=True)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        (out / "__init__.py").write_text('"""Generated protobuf and gRPC code; see scripts/regen.py."""\n')
        for path in sorted(raw.rglob("*")):
            if path.is_dir():
                continue
            rel = path.relative_to(raw)
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            if path.suffix in (".py", ".pyi"):
                text = rewrite(text)
            dest.write_text(text)
        for d in sorted(p for p in out.rglob("*") if p.is_dir()):
            init = d / "__init__.py"
            if not init.exists():
                init.write_text("")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    args = ap.parse_args()
    generate(args.out)


if __name__ == "__main__":
    main()
