#!/usr/bin/env bash
# Runs rolloutd's whole test suite on a fresh machine: installs Azurite from
# npm (pinned by test/azurite/package-lock.json) and DuckDB's Node.js API
# (test/duckdb, which the export tests read Parquet with), checks gofmt, then vets and
# runs every test under the race detector, and the same for the deploy/check
# module; then the Python client's pytest suite (clients/python), with
# Debian's Python packages, installed here when they are missing. Tests that
# need more build it themselves: internal/apicheck builds buf from the Go
# module proxy (pinned by tools/buf/go.mod).
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
	command -v "$1" >/dev/null 2>&1 || {
		echo "test.sh: '$1' is required but not installed. $2" >&2
		exit 1
	}
}
need go "Install Go 1.26 from https://go.dev/dl/."
need node "Install Node.js 20 (Debian: apt-get install nodejs npm) - the tests run Azurite, the Azure Storage emulator."
need npm "Install npm (Debian: apt-get install npm)."

# The Python client's tests run on Debian's packages (no Python registry is
# assumed): they serve Debian's interpreter, /usr/bin/python3, and not a
# python3 built elsewhere that may come first on PATH. Install them when
# missing (CI runs as root), and fail, never skip, when that is impossible.
python_debs="python3-grpcio python3-protobuf python3-pytest python3-pytest-asyncio python3-xxhash python3-venv python3-setuptools protobuf-compiler protobuf-compiler-grpc"
python_imports="import grpc, grpc.aio, google.protobuf, pytest, pytest_asyncio, xxhash, setuptools, ensurepip"
pick_python() {
	local c
	for c in /usr/bin/python3 "$(command -v python3 || true)"; do
		if [ -n "$c" ] && [ -x "$c" ] && "$c" -c "$python_imports" >/dev/null 2>&1; then
			echo "$c"
			return 0
		fi
	done
	return 1
}
python_ready() {
	pick_python >/dev/null && command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null
}
if ! python_ready; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "== installing the Python client's test dependencies (apt-get): $python_debs"
		if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $python_debs; }; then
			echo "test.sh: could not install $python_debs with apt-get; the Python client's tests need them." >&2
			exit 1
		fi
	else
		echo "test.sh: the Python client's tests need Debian's $python_debs (an interpreter that imports: $python_imports). Install them as root: apt-get install $python_debs" >&2
		exit 1
	fi
	if ! python_ready; then
		echo "test.sh: installed $python_debs, but no python3 imports: $python_imports (tried /usr/bin/python3 and $(command -v python3 || echo 'no python3 on PATH'))" >&2
		exit 1
	fi
fi
python=$(pick_python)

echo "== installing Azurite (npm ci, pinned by test/azurite/package-lock.json)"
(cd test/azurite && npm ci --no-audit --no-fund --loglevel=error)
echo "== installing DuckDB's Node.js API (npm ci, pinned by test/duckdb/package-lock.json)"
(cd test/duckdb && npm ci --no-audit --no-fund --loglevel=error)

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 15m ./... "$@"

# deploy/check is its own Go module, so that its heavy tool dependencies
# (k8s.io/api, kustomize, buildkit) stay out of the root go.mod; `./...` above
# does not enter it. It checks the deployment artifacts offline with their
# real parsers (see deploy/check/doc.go).
echo "== deploy/check: go vet and go test -race"
(cd deploy/check && go vet ./... && go test -race -count=1 -timeout 10m ./...)

# pytest exits 5 when it collected no tests: that is a failure here, never
# a silent skip.
echo "== Python client: pytest clients/python/tests with $python ($("$python" --version 2>&1))"
rc=0
(cd clients/python && "$python" -m pytest -q -p no:cacheprovider tests) || rc=$?
if [ "$rc" = 5 ]; then
	echo "test.sh: pytest collected no tests in clients/python/tests" >&2
	exit 1
elif [ "$rc" != 0 ]; then
	exit "$rc"
fi
