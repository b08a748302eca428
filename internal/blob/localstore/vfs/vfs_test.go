package vfs

import "testing"

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v1045": true, "5.8.0": true, "5.10.1-generic": true, "5.7.19": false,
		"4.19.0": false, "": false, "garbage": false, "10.0": true,
	} {
		if got := kernelAtLeast(rel, 5, 8); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", rel, got, want)
		}
	}
}
