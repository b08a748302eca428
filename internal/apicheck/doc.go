// Package apicheck holds the tests that guard the rollout.v1 API contract
// (proto/ and the generated code in gen/), so that `go test ./...` runs them:
//
//   - buf lint is clean;
//   - regenerating the code produces no diff against what is committed;
//   - buf breaking passes against the committed baseline image
//     proto/baseline/rollout.v1.binpb, and does catch a removed field and a
//     renamed error reason.
//
// The tests build buf v1.75.0 from tools/buf/go.mod once per run (about five
// minutes on a cold module and build cache) and run the protoc plugins
// pinned in tools/protoc/go.mod through buf.gen.yaml. They are skipped with
// -short. See proto/README.md for regenerating and for updating the baseline.
//
// The package has no other code.
package apicheck
