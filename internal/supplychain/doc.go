// Package supplychain holds checks on how rolloutd pins its dependencies.
// It has no code: its tests fail when a module's go.mod or go.sum is not
// what `go mod tidy` would write (a dependency added by hand, one no longer
// used, a missing checksum), and when a downloaded module no longer
// matches the checksum go.sum pinned for it.
//
// Fix a failure with `go mod tidy` in the module named by the test, and
// review the diff like code: it changes what the build trusts.
package supplychain
