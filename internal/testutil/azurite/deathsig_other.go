//go:build !linux

package azurite

import "os/exec"

// setDeathSignal is a no-op where there is no parent-death signal: Stop (or
// the test's cleanup) is then the only thing that ends Azurite.
func setDeathSignal(*exec.Cmd) {}
