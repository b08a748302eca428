#!/usr/bin/env bash
# Runs rolloutd's whole test suite on a fresh machine: installs Azurite from
# npm (pinned by test/azurite/package-lock.json), checks gofmt, then vets and
# runs every test under the race detector, and the same for the deploy/check
# module. Tests that need more build it themselves: internal/apicheck builds
# buf from the Go module proxy (pinned by tools/buf/go.mod).
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

echo "== installing Azurite (npm ci, pinned by test/azurite/package-lock.json)"
(cd test/azurite && npm ci --no-audit --no-fund --loglevel=error)

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
