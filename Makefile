.PHONY: run test bench gen gen-python

# Builds rolloutd into bin/ and runs it on the embedded local-disk store
# (./rolloutd-data); pass flags with ARGS='--log-format console'. The
# recipe execs the binary, so rolloutd is make's own child and gets the
# SIGTERM that make passes on to it (and the terminal's Ctrl-C): it shuts
# down gracefully. `go run` would not: it does not pass SIGTERM to the
# program it built.
run:
	go build -o bin/rolloutd ./cmd/rolloutd
	exec ./bin/rolloutd $(ARGS)

# Runs the whole test suite, installing Azurite and the pinned tools first.
test:
	./scripts/test.sh

# Runs the benchmark of docs/performance.md: rolloutd in process against a
# local Azurite over HTTPS, beside the blob-operation floor and the
# writer-per-append design (about 3 minutes); the figures go to
# rolloutbench.json.
bench:
	go run ./cmd/rolloutbench --inprocess --azurite https --compare --json rolloutbench.json

# Regenerates the Go code for the protos in proto/ (see proto/README.md).
gen:
	./scripts/gen.sh

# Regenerates the Python client's committed protobuf and gRPC code
# (clients/python/rolloutd/_proto) with Debian's protoc and
# grpc_python_plugin; clients/python/tests/test_generated.py fails when it is
# stale.
gen-python:
	/usr/bin/python3 clients/python/scripts/regen.py
