#!/usr/bin/env bash
# Regenerates the Go code for the protos in proto/ (rollout.v1 goes to gen/),
# with the buf and plugin versions pinned in tools/buf/go.mod and
# tools/protoc/go.mod. See proto/README.md.
#
#   scripts/gen.sh             regenerate the code
#   scripts/gen.sh baseline    regenerate, and rewrite the breaking-change
#                              baseline proto/baseline/rollout.v1.binpb; only
#                              for a deliberate breaking change
#
# The checks (buf lint, no diff after regenerating, buf breaking against the
# baseline) run as Go tests in internal/apicheck.
set -euo pipefail
cd "$(dirname "$0")/.."

buf() { go tool -modfile=tools/buf/go.mod buf "$@"; }

# gen/ holds only generated code: start it afresh so that code for a deleted
# proto does not linger.
rm -rf gen
buf generate
if [ "${1:-}" = baseline ]; then
	buf build --exclude-source-info -o proto/baseline/rollout.v1.binpb
	echo "gen.sh: rewrote proto/baseline/rollout.v1.binpb; commit it with the change that needs it" >&2
fi
