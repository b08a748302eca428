.PHONY: run test bench gen

# Runs rolloutd on the embedded local-disk store (./rolloutd-data).
run:
	go run ./cmd/rolloutd

# Runs the whole test suite, installing Azurite and the pinned tools first.
test:
	./scripts/test.sh

# Regenerates the Go code for the protos in proto/ (see proto/README.md).
gen:
	./scripts/gen.sh
